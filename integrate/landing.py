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
- ``kernels/kda_kernels/<stem>_jit.py``: the public function and every helper it reaches in its
  module (read with libcst), its ``load_jit`` calls building the new source under a distinct JIT
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

import ast
import functools
import pathlib
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from contract.dtypes import TABLE, torch_name
from contract.errors import ContractError
from contract.plan import canonical_dtype
from integrate.records import OpCheck, Patch
from optimize.skills import load_skills
from pipeline.records import EntryParam, Evaluation, Span, Task, TensorSpec

KDA_DIR = "kernels/kda_kernels"
KDA_PREFIX = "kda_"  # JIT module and custom-op names of the KDA copy: never the pristine kernel's cache entries


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
    except _Refused as why:
        return NotLanded(task.op_id, str(why))


class _Refused(Exception):
    pass


def _land(task: Task, evaluation: Evaluation | None, changed: dict[str, bytes], root: pathlib.Path) -> KdaLanding:
    signature = task.entry_signature
    if task.language != "cuda":
        raise _Refused("a Triton rewrite's KDA landing is not written yet (only CUDA JIT kernels are)")
    if signature is None or signature.reason:
        raise _Refused(
            f"its public function cannot be called from the contract: {signature.reason if signature else 'none recorded'}"
        )
    if len(changed) != 1:
        raise _Refused(
            f"it changes {len(changed)} files ({', '.join(sorted(changed))}); a KDA module carries one kernel source"
        )
    ((source_path, new_source),) = changed.items()
    csrc = next((f"{d}/csrc/" for d in task.source.jit_dirs if source_path.startswith(f"{d}/csrc/")), None)
    if csrc is None:
        raise _Refused(f"it changes {source_path}, which is not a kernel source under jit/csrc/ (a shared header?)")
    relative = source_path[len(csrc) :]
    stem = pathlib.PurePosixPath(relative).stem
    module_rel = f"{KDA_DIR}/{stem}_jit.py"
    source_rel = f"{KDA_DIR}/csrc/{relative}"
    for path in (module_rel, source_rel):
        if (root / path).exists():
            raise _Refused(f"{path} already exists in the SGLang tree")
    if re.search(rb'#include\s+"', new_source):
        raise _Refused(
            f"{source_path} includes a file by a relative path, which would not resolve from kda_kernels/csrc/"
        )
    facade_rel = task.module
    facade = (root / facade_rel).read_bytes()
    fn = signature.function
    body, guard_name = _kda_module(facade.decode(), fn, relative, task, evaluation)
    group = facade_rel.split("/")[2] if facade_rel.startswith("kernels/ops/") else ""
    init_rel = f"kernels/ops/{group}/__init__.py"
    if not group or not (root / init_rel).is_file():
        raise _Refused(f"{facade_rel} is not in an op group of sglang.kernels.ops (no {init_rel})")
    dotted = f"sglang.{KDA_DIR.replace('/', '.')}.{stem}_jit"
    target, guard = f"{dotted}:{fn}", f"{dotted}:{guard_name}"
    arch = _arch(task)
    init = (root / init_rel).read_bytes()
    if re.search(
        rf'get_kernel\(\s*"{re.escape(task.op_id)}"\s*\)'.encode(),
        b"".join(p.read_bytes() for p in (root / "kernels/ops").rglob("*.py")),
    ):
        raise _Refused(
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


# --------------------------------------------------------------------------- the module


class _Names(cst.CSTVisitor):
    """Every name a node reads (attribute names and keyword names are not names it reads)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def _reads(node: cst.CSTNode) -> set[str]:
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


def _binds(stmt: cst.CSTNode) -> set[str]:
    """The top-level names a module statement binds."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    out: set[str] = set()
    for node in _walk(stmt):
        if isinstance(node, cst.ImportAlias):
            out.add(_alias_name(node))
        elif isinstance(node, (cst.AssignTarget, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            out.add(node.target.value)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            out.add(node.name.value)
    return out


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    for child in node.children:
        out += _walk(child)
    return out


def _alias_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    name: cst.BaseExpression = alias.name
    while isinstance(name, cst.Attribute):
        name = name.value
    return name.value if isinstance(name, cst.Name) else ""


def _is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _kept(module: cst.Module, fn: str) -> tuple[list[cst.CSTNode], set[str]]:
    """The statements the public function reaches (itself, helpers, constants), in file order, and every name they read."""
    defs = [s for s in module.body if not _is_import(s) and not _type_checking(s)]
    if not any(isinstance(s, cst.FunctionDef) and s.name.value == fn for s in defs):
        raise _Refused(f"{fn} is not a top-level function of its module")
    wanted, reads, todo = set(), set(), [fn]
    while todo:
        name = todo.pop()
        for index, stmt in enumerate(defs):
            if index not in wanted and name in _binds(stmt):
                wanted.add(index)
                found = _reads(stmt)
                reads |= found
                todo += sorted(found)
    return [s for i, s in enumerate(defs) if i in wanted], reads


def _type_checking(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.If) and isinstance(stmt.test, cst.Name) and stmt.test.value == "TYPE_CHECKING"


def _imports(module: cst.Module, reads: set[str]) -> tuple[list[str], list[cst.CSTNode]]:
    """The module's imports cut down to the names the kept code reads: the plain import lines, and
    the ``if TYPE_CHECKING:`` block (``__future__`` kept whole)."""
    lines: list[str] = []
    blocks: list[cst.CSTNode] = []
    for stmt in module.body:
        if _is_import(stmt):
            line = _filtered(stmt, reads)
            if line is not None:
                lines.append(module.code_for_node(line).strip())
        elif isinstance(stmt, cst.If) and _type_checking(stmt) and isinstance(stmt.body, cst.IndentedBlock):
            inner = [x for x in (_filtered(s, reads) for s in stmt.body.body) if x is not None]
            if inner:
                blocks.append(stmt.with_changes(body=stmt.body.with_changes(body=inner)))
    return lines, blocks


def _filtered(stmt: cst.CSTNode, reads: set[str]) -> cst.SimpleStatementLine | None:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    kept: list[cst.BaseSmallStatement] = []
    for small in stmt.body:
        if (
            isinstance(small, cst.ImportFrom)
            and isinstance(small.module, cst.Name)
            and small.module.value == "__future__"
        ):
            kept.append(small)
        elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
            names = [a for a in small.names if _alias_name(a) in reads]
            if names:
                names[-1] = names[-1].with_changes(comma=small.names[-1].comma)
                kept.append(small.with_changes(names=names))
    return stmt.with_changes(body=kept) if kept else None


def _import_key(line: str) -> tuple[int, int, str]:
    """isort's order (profile black): future, stdlib, third party, sglang; plain imports before from-imports."""
    module = line.split()[1]
    top = module.split(".")[0]
    section = 0 if top == "__future__" else 1 if top in sys.stdlib_module_names else 3 if top == "sglang" else 2
    return section, line.startswith("from "), module


def _import_block(lines: Sequence[str]) -> str:
    """The lines sorted and grouped by section, a blank line between sections."""
    out, last = [], None
    for line in sorted(dict.fromkeys(lines), key=_import_key):
        section = _import_key(line)[0]
        if last is not None and section != last:
            out.append("")
        out.append(line)
        last = section
    return "\n".join(out) + "\n"


class _Retarget(cst.CSTTransformer):
    """``load_jit`` builds the new source under a ``kda_`` module name; custom ops get ``kda_`` names."""

    def __init__(self, relative: str) -> None:
        self.relative = relative
        self.retargeted = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if _callee(updated.func) == "load_jit":
            return self._load_jit(updated)
        if _callee(updated.func) == "register_custom_op":
            return updated.with_changes(
                args=[
                    a.with_changes(value=_prefixed(a.value))
                    if a.keyword is not None and a.keyword.value == "op_name"
                    else a
                    for a in updated.args
                ]
            )
        return updated

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        """A custom op named after its function (no ``op_name``) gets the ``kda_`` name too: SGLang skips
        registering a name twice, so the copy would otherwise run the original."""
        decorators = []
        for d in updated.decorators:
            call = d.decorator if isinstance(d.decorator, cst.Call) else cst.Call(func=d.decorator, args=[])
            if _callee(call.func) == "register_custom_op" and not any(
                a.keyword is not None and a.keyword.value == "op_name" for a in call.args
            ):
                named = cst.Arg(
                    keyword=cst.Name("op_name"), value=_prefixed(cst.SimpleString(f'"{updated.name.value}"'))
                )
                d = d.with_changes(decorator=call.with_changes(args=[named, *call.args]))
            decorators.append(d)
        return updated.with_changes(decorators=decorators)

    def _load_jit(self, call: cst.Call) -> cst.Call:
        args = list(call.args)
        if args and args[0].keyword is None and args[0].star == "":
            args[0] = args[0].with_changes(value=_prefixed(args[0].value))
        for i, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == "cuda_files" and isinstance(arg.value, cst.List):
                elements = []
                for el in arg.value.elements:
                    if isinstance(el.value, cst.SimpleString) and el.value.evaluated_value == self.relative:
                        self.retargeted += 1
                        el = el.with_changes(value=cst.parse_expression(f'_cuda_source("{self.relative}")'))
                    elements.append(el)
                args[i] = arg.with_changes(value=arg.value.with_changes(elements=elements))
        return call.with_changes(args=args)


def _callee(func: cst.BaseExpression) -> str:
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def _prefixed(value: cst.BaseExpression) -> cst.BaseExpression:
    """The name expression with ``kda_`` in front of every name it can take."""
    if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
        return cst.SimpleString(f'"{KDA_PREFIX}{value.evaluated_value}"')
    if isinstance(value, cst.IfExp):
        return value.with_changes(body=_prefixed(value.body), orelse=_prefixed(value.orelse))
    if isinstance(value, cst.FormattedString):
        return value.with_changes(parts=[cst.FormattedStringText(KDA_PREFIX), *value.parts])
    raise _Refused(
        f"a JIT module or custom op named by an expression ({cst.Module([]).code_for_node(value)}), not a literal"
    )


def _kda_module(facade: str, fn: str, relative: str, task: Task, evaluation: Evaluation | None) -> tuple[str, str]:
    """The KDA module's text and its guard's name."""
    module = cst.parse_module(facade)
    kept, reads = _kept(module, fn)
    retarget = _Retarget(relative)
    kept = [stmt.visit(retarget) for stmt in kept]  # type: ignore[misc]  # a transformer returns statements here
    if not retarget.retargeted:
        raise _Refused(f"no load_jit call {fn} reaches names `{relative}` in cuda_files by a literal")
    taken = set().union(*(_binds(s) for s in kept))
    guard = f"can_use_{fn}" if f"can_use_{fn}" not in taken else f"can_use_{KDA_PREFIX}{fn}"
    lines, blocks = _imports(module, reads | {"TYPE_CHECKING"})
    lines += ["import functools", "import torch", "from sglang.kernels.kda_kernels import _cuda_source"]
    entry = next(s for s in kept if isinstance(s, cst.FunctionDef) and s.name.value == fn)
    conditions = "\n        and ".join(guard_conditions(task, evaluation))
    checker = cst.parse_module(
        f"@functools.lru_cache(maxsize=None)\ndef _on_validated_arch(device: torch.device) -> bool:\n"
        f"    return torch.cuda.get_device_capability(device) == {_arch(task)}\n"
    ).body[0]
    body = cst.parse_module(
        "def f():\n"
        '    """Whether this call lies where the kernel was validated against the JIT kernel."""\n'
        f"    return (\n        {conditions}\n    )\n"
    ).body[0]
    guard_def = entry.with_changes(
        name=cst.Name(guard), decorators=[], returns=cst.Annotation(cst.Name("bool")), body=body.body
    )
    code = "\n\n\n".join(_code(node) for node in [*kept, checker, guard_def])
    head = "".join(f"\n{_code(b)}\n" for b in blocks)
    return f"{_docstring(task, relative, guard)}\n\n{_import_block(lines)}{head}\n\n{code}\n", guard


def _code(node: cst.CSTNode) -> str:
    """One top-level statement's source, without the blank lines around it."""
    return cst.Module(body=[]).code_for_node(node).strip()


def _docstring(task: Task, relative: str, guard: str) -> str:
    sig = task.entry_signature
    assert sig is not None
    major, minor = _arch(task)
    text = (
        f"The source is ``csrc/{relative}``. ``{sig.module}.{sig.function}`` calls this implementation "
        f"through its KDA KernelSpec where ``{guard}`` holds (the dtypes, shapes and modes it was "
        "checked on against the JIT kernel it replaces) and keeps the JIT kernel everywhere else."
    )
    return f'"""{sig.function}: a rewritten kernel, validated on SM{major}{minor}.\n\n{textwrap.fill(text, 88)}\n"""'


def _arch(task: Task) -> tuple[int, int]:
    for flag in task.build.cuda_cflags:
        if flag.startswith("-DSGL_CUDA_ARCH="):
            value = int(flag.split("=", 1)[1])
            return value // 100, (value // 10) % 10
    raise _Refused("the task does not record the SM arch it was built for (-DSGL_CUDA_ARCH)")


# --------------------------------------------------------------------------- the guard


def guard_conditions(task: Task, evaluation: Evaluation | None) -> list[str]:
    """The Python conditions of ``can_use_<function>``: every one must hold for the KDA kernel to run.

    Tensors: their dtype (the first tensor of a dtype parameter takes one of the judged dtypes, the
    others the same), rank, contiguity (where the contract gives no strides), and each dimension
    that is a size (within the smallest and largest value judged) or an expression of bound sizes.
    Integer scalars with a fixed contract value, parameters no contract argument feeds (their
    default, the only value judged) and loader switches (the values built) select code paths and
    are pinned; float scalars are data and are not.
    """
    sig, contract = task.entry_signature, task.contract
    assert sig is not None
    judged = sorted(
        {t.dtype for t in (evaluation.timings if evaluation else [])} | {i.dtype for i in task.instantiations}
    )
    cases = [s.sizes for s in task.shapes] + [t.sizes for t in (evaluation.timings if evaluation else [])]
    ranges = {
        k: (min(c[k] for c in cases if k in c), max(c[k] for c in cases if k in c))
        for k in {k for c in cases for k in c}
    }
    args = {spec.name: a for a in contract.args if (spec := a.tensor or a.scalar) is not None}
    bound: dict[str, str] = {}
    conds: list[str] = []
    tensor = next((p.name for p in sig.params if _feeds_tensor(p, args)), None)
    if tensor is None:
        raise _Refused(f"{sig.function} takes no tensor the contract describes: the guard has no device to check")
    conds.append(f"{tensor}.is_cuda and _on_validated_arch({tensor}.device)")
    for p in sig.params:  # sizes given as integers first: the simplest expression of each
        if p.feeds in ranges and p.via in ("size", "call", "name") and not _feeds_tensor(p, args):
            bound[p.feeds] = p.name
            conds.append(_within(p.name, ranges[p.feeds]))
    dtype_of: dict[str, str] = {}
    for p in sig.params:
        if p.kind in ("var_positional", "var_keyword"):
            raise _Refused(f"{sig.function} takes *{p.name}; what its calls carry is not in the contract")
        if _feeds_tensor(p, args) and p.feeds is not None and (spec := args[p.feeds].tensor) is not None:
            conds += _tensor_conditions(p, spec, judged, dtype_of, bound, ranges)
        elif p.feeds in args and (scalar := args[p.feeds].scalar) is not None:
            if scalar.type == "int" and scalar.value is not None and p.feeds not in bound:
                conds.append(f"{p.name} == {int(scalar.value)}")
        elif p.via == "build" and p.loader_param:
            values = sorted(
                {repr(i.run_time[p.loader_param]) for i in task.instantiations if p.loader_param in i.run_time}
            )
            if not values:
                raise _Refused(f"parameter {p.name}: the values its loader switch was built for are not recorded")
            conds.append(f"{p.name} in ({', '.join(values)},)")
        elif p.feeds is None and p.has_default and p.default is not None:
            conds.append(_pinned(p.name, p.default))
        elif p.feeds is None:
            raise _Refused(
                f"parameter {p.name} feeds no contract argument and has no default: what it was judged at is unknown"
            )
    return conds


def _within(expr: str, bounds: tuple[int, int]) -> str:
    lo, hi = bounds
    return f"{expr} == {lo}" if lo == hi else f"{lo} <= {expr} <= {hi}"


def _feeds_tensor(p: EntryParam, args: dict) -> bool:
    return p.feeds in args and args[p.feeds].tensor is not None


def _pinned(name: str, default: str) -> str:
    if default in ("None", "True", "False"):
        return f"{name} is {default}"
    return f"{name} == {default}"


_ARITH = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Name,
    ast.Constant,
    ast.Load,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.FloorDiv,
    ast.USub,
)


def _tensor_conditions(
    p: EntryParam,
    spec: TensorSpec,
    judged: Sequence[str],
    dtype_of: dict[str, str],
    bound: dict[str, str],
    ranges: dict[str, tuple[int, int]],
) -> list[str]:
    name = p.name
    out: list[str] = []
    try:
        shorts = sorted({canonical_dtype(spec.dtype, d) for d in judged}, key=list(TABLE).index)
    except ContractError as err:
        raise _Refused(f"tensor {name}: which dtypes it was judged in is not known ({err})") from err
    if spec.dtype == "T" and "T" in dtype_of:
        out.append(f"{name}.dtype == {dtype_of['T']}.dtype")
    else:
        dtype_of.setdefault(spec.dtype, name)
        names = [f"torch.{torch_name(d)}" for d in shorts]
        out.append(f"{name}.dtype == {names[0]}" if len(names) == 1 else f"{name}.dtype in ({', '.join(names)})")
    out.append(f"{name}.dim() == {len(spec.shape)}")
    if spec.strides is None:
        out.append(f"{name}.is_contiguous()")
    for i, dim in enumerate(spec.shape):
        here = f"{name}.shape[{i}]"
        if dim in ranges and dim not in bound:
            bound[dim] = here
            out.append(_within(here, ranges[dim]))
            continue
        tree = ast.parse(str(dim), mode="eval")
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        wildcard = not used and isinstance(tree.body, ast.UnaryOp)  # "-1": any size
        if all(isinstance(n, _ARITH) for n in ast.walk(tree)) and used <= bound.keys() and not wildcard:
            expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: bound.get(m.group(0), m.group(0)), str(dim))
            out.append(f"{here} == {expr}")
    if p.has_default and p.default == "None":
        out = [f"{name} is not None", *out]
    return out


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
        if _is_import(stmt):
            code = wrapper.module.code_for_node(stmt).strip()
            span = positions[stmt]
            out.append((code.split()[1], _binds(stmt), lines[span.start.line - 1], lines[span.end.line]))
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
        raise _Refused(f"{fn} has no indented body to put the dispatch in")
    first = body[1] if len(body) > 1 and _is_docstring(body[0]) else body[0]
    if _is_docstring(first):
        raise _Refused(f"{fn} is only a docstring")
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


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _register(path: str, old: bytes, op_id: str, target: str, arch: tuple[int, int]) -> FileEdit:
    """The KDA KernelSpec, after the group's other registrations (with the imports it needs)."""
    if re.search(rf'op="{re.escape(op_id)}",\s*backend=KernelBackend\.KDA'.encode(), old):
        raise _Refused(f"{path} already registers a KDA kernel for {op_id}")
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
        raise _Refused(f"{path} has no provenance table")
    family = task.op_id.split(".", 1)[1].replace("_", " ")
    row = f"| {task.op_id.split('.', 1)[0]}: {family} on SM{arch[0]}{arch[1]} | `{stem}_jit.py`, `csrc/{relative}` | this pull request |\n"
    return _edit(path, old, [(rows[-1].end(), row.encode())])
