"""Which landing an accepted candidate takes in SGLang, and the files of the KDA landing.

SGLang takes two kinds of kernel change, and reviews them differently:

- a *tuned* kernel (launch configuration, PDL, cache hints, unrolling: the offline coder's
  mechanical transforms) is an edit of its JIT kernel, in place (:mod:`integrate.patch`);
- a *rewrite* (a new kernel: written by an LLM or an outside agent, or made by a skill no
  mechanical transform implements; :func:`is_rewrite`) lands beside the kernel it replaces, in
  SGLang's landing zone for agent-written kernels, ``sglang/kernels/kda_kernels/`` (its README in
  the pinned wheel): one implementation module per family with its CUDA source under ``csrc/``, a
  ``KernelSpec`` with ``KernelBackend.KDA`` in the op group's registry inventory, a provenance row,
  and the public function in ``sglang.kernels.ops`` dispatching to it only where it was validated,
  the existing JIT kernel everywhere else.

:func:`kda_landing` writes those files for one rewrite of a CUDA JIT op, from the task and the
in-place edit :func:`integrate.patch.compose` made:

- ``kernels/kda_kernels/csrc/<same path as under jit/csrc>``: the rewritten source, whole;
- ``kernels/kda_kernels/<stem>_jit.py`` (:mod:`integrate.kda_module`): the public function and
  every helper it reaches in its module (read with libcst), its ``load_jit`` calls building the new source under a distinct JIT
  module name (``kda_<name>``, so no cache entry of the old kernel is ever reused) and its custom
  ops renamed the same way, plus ``can_use_<function>``: the dtypes, ranks, contiguity, size ranges,
  code-path switches and SM arch the candidate was judged on (task catalog and evaluation);
- the public function's module: three imports and, as the function's first statement, the guarded
  call through ``get_kernel(<op>, KernelBackend.KDA)``;
- the group's ``__init__.py``: the KDA ``KernelSpec`` (capability: the judged SM arch only);
- ``kernels/kda_kernels/README.md``: the provenance row.

What must stay true: the pristine kernel source is left as it was (it is the fallback, and every
other op that shares it runs it unchanged); every edit of an existing file is an insertion
(:func:`integrate.diffs.verify_spans` over zero-width spans); nothing generated names the tool.
A rewrite that cannot land this way (a Triton op, a change outside one kernel file, a loader that
names its source by a computed path, a parameter whose validated values are unknown) is a
:class:`NotLanded` with the reason, and stays an in-place edit in a draft PR.
"""

from __future__ import annotations

import functools
import pathlib
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from integrate.kda_module import Refused, arch_of, binds, is_import, kda_module
from integrate.records import OpCheck, Patch
from optimize.skills import load_skills
from pipeline.records import Span, Task
from pipeline.run_records import Evaluation

KDA_DIR = "kernels/kda_kernels"


@functools.cache
def skill_transforms() -> dict[str, str]:
    """Skill id -> the mechanical transform that implements it, for the skills that have one (the
    others are text for an LLM or an outside agent)."""
    return {s.id: s.transform for s in load_skills() if s.transform}


def is_rewrite(coder: str, skills: Sequence[str]) -> bool:
    """A new kernel rather than a tuned one: written by an LLM or an outside agent, or made by a
    skill no mechanical transform implements. A record from before the coder was kept (coder "")
    with no skill is not judged."""
    return coder.partition(":")[0] in ("llm", "external") or bool(
        skills and not set(skills) <= skill_transforms().keys()
    )


@dataclass(frozen=True)
class FileEdit:
    """One file of a landing: ``old`` is None for a file it creates (``inserts`` then holds its whole
    text at 0); an edit of an existing file is insertions only, (byte offset of ``old``, text)."""

    path: str
    old: bytes | None
    inserts: tuple[tuple[int, bytes], ...]

    @property
    def new(self) -> bytes:
        out, last, old = [], 0, self.old or b""
        for at, text in self.inserts:
            out += [old[last:at], text]
            last = at
        return b"".join(out) + old[last:]

    def spans(self) -> list[Span]:
        """Zero-width spans at the insertion points: :func:`integrate.diffs.verify_spans` over them
        proves every other byte verbatim."""
        return [
            Span(file=self.path, start_byte=at, end_byte=at, name=f"insertion at byte {at}") for at, _ in self.inserts
        ]


def _edit(path: str, old: bytes | None, inserts: Sequence[tuple[int, bytes]]) -> FileEdit:
    """Inserts in file order, each text once (two landings may add the same import)."""
    unique = dict.fromkeys((at, text) for at, text in inserts if text)
    return FileEdit(path, old, tuple(sorted(unique, key=lambda x: x[0])))


@dataclass(frozen=True)
class KdaLanding:
    op_id: str
    files: tuple[FileEdit, ...]
    target: str  # the KernelSpec target: "sglang.kernels.kda_kernels.<module>:<function>"
    guard: str  # "sglang.kernels.kda_kernels.<module>:can_use_<function>"
    replaces: str  # the jit/csrc file left pristine


@dataclass(frozen=True)
class NotLanded:
    op_id: str
    reason: str


def kda_landing(
    task: Task, evaluation: Evaluation | None, changed: dict[str, bytes], package_root: pathlib.Path
) -> KdaLanding | NotLanded:
    """The KDA landing of one rewrite (see the module docstring); ``changed``: path -> new bytes of the
    files the in-place edit would change."""
    try:
        return _land(task, evaluation, changed, package_root)
    except Refused as why:
        return NotLanded(task.op_id, str(why))


def _land(task: Task, evaluation: Evaluation | None, changed: dict[str, bytes], root: pathlib.Path) -> KdaLanding:
    signature = task.entry_signature
    if task.language != "cuda":
        raise Refused("a Triton rewrite's KDA landing is not written yet (only CUDA JIT kernels are)")
    if signature is None or signature.reason:
        raise Refused(
            f"its public function cannot be called from the contract: {signature.reason if signature else 'none recorded'}"
        )
    if len(changed) != 1:
        raise Refused(
            f"it changes {len(changed)} files ({', '.join(sorted(changed))}); a KDA module carries one kernel source"
        )
    ((source_path, new_source),) = changed.items()
    csrc = next((f"{d}/csrc/" for d in task.source.jit_dirs if source_path.startswith(f"{d}/csrc/")), None)
    if csrc is None:
        raise Refused(f"it changes {source_path}, which is not a kernel source under jit/csrc/ (a shared header?)")
    relative = source_path[len(csrc) :]
    stem = pathlib.PurePosixPath(relative).stem
    module_rel = f"{KDA_DIR}/{stem}_jit.py"
    source_rel = f"{KDA_DIR}/csrc/{relative}"
    for path in (module_rel, source_rel):
        if (root / path).exists():
            raise Refused(f"{path} already exists in the SGLang tree")
    if re.search(rb'#include\s+"', new_source):
        raise Refused(
            f"{source_path} includes a file by a relative path, which would not resolve from kda_kernels/csrc/"
        )
    facade_rel = task.module
    facade = (root / facade_rel).read_bytes()
    fn = signature.function
    body, guard_name = kda_module(facade.decode(), fn, relative, task, evaluation)
    group = facade_rel.split("/")[2] if facade_rel.startswith("kernels/ops/") else ""
    init_rel = f"kernels/ops/{group}/__init__.py"
    if not group or not (root / init_rel).is_file():
        raise Refused(f"{facade_rel} is not in an op group of sglang.kernels.ops (no {init_rel})")
    dotted = f"sglang.{KDA_DIR.replace('/', '.')}.{stem}_jit"
    target, guard = f"{dotted}:{fn}", f"{dotted}:{guard_name}"
    arch = arch_of(task)
    init = (root / init_rel).read_bytes()
    if re.search(
        rf'get_kernel\(\s*"{re.escape(task.op_id)}"\s*\)'.encode(),
        b"".join(p.read_bytes() for p in (root / "kernels/ops").rglob("*.py")),
    ):
        raise Refused(
            f'some caller resolves get_kernel("{task.op_id}") without a backend; a second backend would make it ambiguous'
        )
    readme_rel = f"{KDA_DIR}/README.md"
    files = (
        _edit(source_rel, None, [(0, new_source)]),
        _edit(module_rel, None, [(0, body.encode())]),
        _facade_edit(facade_rel, facade, fn, task, dotted, guard_name),
        _register(init_rel, init, task.op_id, target, arch),
        _provenance(readme_rel, (root / readme_rel).read_bytes(), task, stem, relative, arch),
    )
    return KdaLanding(task.op_id, files, target, guard, source_path)


def merge(landings: Sequence[KdaLanding]) -> list[FileEdit]:
    """Every landing's files, one edit per path: two rewrites of one op group both register in its
    ``__init__.py`` and both add a README row."""
    by_path: dict[str, FileEdit] = {}
    for landing in landings:
        for f in landing.files:
            have = by_path.get(f.path)
            by_path[f.path] = f if have is None else _edit(f.path, f.old, [*have.inserts, *f.inserts])
    return [by_path[p] for p in sorted(by_path)]


def unreached(patch: Patch, checks: Sequence[OpCheck]) -> list[str]:
    """The KDA landings whose check through SGLang never reached the KDA implementation: the public
    function's dispatch fell back to the JIT kernel in every passing case, so nothing proved the new
    kernel. Each: "<op>: <why>"."""
    landed = {op.op_id: op for op in patch.ops if op.landing == "kda"}
    return [
        f"{c.op_id}: no case reached its KDA implementation ({landed[c.op_id].kda_target}) through "
        f"{c.function}; every call took the JIT kernel, so the check proved nothing of the new kernel"
        for c in checks
        if c.op_id in landed and c.ran and not c.kda_cases
    ]


# --------------------------------------------------------------------------- edits of existing files


def _positions(text: bytes) -> list[int]:
    """Byte offset of each line's start (index 0 = line 1)."""
    starts = [0]
    for m in re.finditer(rb"\n", text):
        starts.append(m.end())
    return starts


def _top_imports(text: bytes) -> list[tuple[str, set[str], int, int]]:
    """(module, names it binds, start offset, end offset) of each top-level import line."""
    wrapper = MetadataWrapper(cst.parse_module(text.decode()))
    positions = wrapper.resolve(PositionProvider)
    lines = _positions(text)
    out = []
    for stmt in wrapper.module.body:
        if is_import(stmt):
            code = wrapper.module.code_for_node(stmt).strip()
            span = positions[stmt]
            out.append((code.split()[1], binds(stmt), lines[span.start.line - 1], lines[span.end.line]))
    return out


def _missing_imports(old: bytes, lines: Sequence[str]) -> list[tuple[int, bytes]]:
    """An insert for each ``from M import N`` line whose name the module does not import yet, where
    isort puts it: before the first sglang import that sorts after it, else after the last import."""
    imports = _top_imports(old)
    bound = set().union(*(names for _, names, _, _ in imports))
    out = []
    for line in lines:
        module, name = line.split()[1], line.split()[-1]
        if name in bound:
            continue
        later = [start for m, _, start, _ in imports if m.startswith("sglang") and m > module]
        at = later[0] if later else max((end for _, _, _, end in imports), default=0)
        out.append((at, f"{line}\n".encode()))
    return out


def _call(indent: str, head: str, args: Sequence[str], tail: str = "") -> str:
    """``head(args)tail`` wrapped as black wraps a call at 88 columns."""
    one = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one) <= 88:
        return one + "\n"
    inner = f"{indent}    {', '.join(args)}"
    if len(inner) <= 88:
        return f"{indent}{head}(\n{inner}\n{indent}){tail}\n"
    return f"{indent}{head}(\n" + "".join(f"{indent}    {a},\n" for a in args) + f"{indent}){tail}\n"


def _facade_edit(path: str, old: bytes, fn: str, task: Task, dotted: str, guard: str) -> FileEdit:
    """The public function tries the KDA kernel first, inside its guard (its first statement after the docstring)."""
    sig = task.entry_signature
    assert sig is not None
    wrapper = MetadataWrapper(cst.parse_module(old.decode()))
    positions = wrapper.resolve(PositionProvider)
    node = next(s for s in wrapper.module.body if isinstance(s, cst.FunctionDef) and s.name.value == fn)
    body = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
    if not body:
        raise Refused(f"{fn} has no indented body to put the dispatch in")
    first = body[1] if len(body) > 1 and is_docstring(body[0]) else body[0]
    if is_docstring(first):
        raise Refused(f"{fn} is only a docstring")
    line = positions[first].start.line
    indent = " " * positions[first].start.column
    forward = [
        p.name if p.kind in ("positional_only", "positional_or_keyword") else f"{p.name}={p.name}" for p in sig.params
    ]
    dispatch = _call(indent, f"if {guard}", forward, ":") + _call(
        indent + "    ", f'return get_kernel("{task.op_id}", KernelBackend.KDA)', forward
    )
    lines = [
        f"from sglang.kernels.kda_kernels.{dotted.rsplit('.', 1)[1]} import {guard}",
        "from sglang.kernels.selector import get_kernel",
        "from sglang.kernels.spec import KernelBackend",
    ]
    return _edit(path, old, [*_missing_imports(old, lines), (_positions(old)[line - 1], dispatch.encode())])


def is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _register(path: str, old: bytes, op_id: str, target: str, arch: tuple[int, int]) -> FileEdit:
    """The KDA KernelSpec, after the group's other registrations (with the imports it needs)."""
    if re.search(rf'op="{re.escape(op_id)}",\s*backend=KernelBackend\.KDA'.encode(), old):
        raise Refused(f"{path} already registers a KDA kernel for {op_id}")
    need = [
        f"from sglang.kernels.{'registry' if n == 'register_kernel' else 'spec'} import {n}"
        for n in ("register_kernel", "KernelSpec", "KernelBackend", "CapabilityRequirement")
    ]
    note = textwrap.wrap(
        f"Rewritten kernel for {op_id}, validated on SM{arch[0]}{arch[1]}: its public function calls it "
        "where the validated dtypes and shapes hold and keeps the JIT kernel elsewhere.",
        86,
    )
    block = (
        "\n"
        + "".join(f"# {line}\n" for line in note)
        + f'register_kernel(\n    KernelSpec(\n        op="{op_id}",\n        backend=KernelBackend.KDA,\n'
        f'        target="{target}",\n'
        f"        capabilities=frozenset(\n"
        f"            {{CapabilityRequirement.cuda(min_sm={arch}, max_sm={arch})}}\n        ),\n    )\n)\n"
    ).encode()
    tail = (len(old), block if old.endswith(b"\n") else b"\n" + block)
    return _edit(path, old, [*_missing_imports(old, need), tail])


def _provenance(path: str, old: bytes, task: Task, stem: str, relative: str, arch: tuple[int, int]) -> FileEdit:
    """A row at the end of the README's provenance table; its PR cell is this pull request's to fill."""
    rows = list(re.finditer(rb"^\|.*\|[ \t]*\n", old, re.M))
    if not rows:
        raise Refused(f"{path} has no provenance table")
    family = task.op_id.split(".", 1)[1].replace("_", " ")
    row = f"| {task.op_id.split('.', 1)[0]}: {family} on SM{arch[0]}{arch[1]} | `{stem}_jit.py`, `csrc/{relative}` | this pull request |\n"
    return _edit(path, old, [(rows[-1].end(), row.encode())])
