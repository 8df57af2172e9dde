"""Triton ops: SGLang's ``KernelSpec`` registrations and public wrappers -> :class:`pipeline.records.TritonOp`.

An op is a Python function SGLang calls that launches ``@triton.jit`` kernels:

- every ``KernelSpec(op=..., backend=KernelBackend.TRITON, target="module:function")``
  (:func:`read_specs`; the op id is the spec's ``op``, e.g. ``attention.merge_state_triton``);
- every public module-level function of a file with kernels that launches one (directly,
  or through functions of its module or of another scanned module) that no public function
  it calls launches already (so ``decode_attention_fwd`` and its public
  ``decode_attention_fwd_normal`` are not both counted for one launch). Its id follows the
  CUDA rule, ``<ops group>.<function>`` under ``kernels/ops/<group>/``, else the dotted
  module without ``sglang.`` (``srt.layers.moe.fused_moe_triton.fused_moe.fn``); a repeated
  id takes the module's stem (``<group>.<stem>.<function>``), then ``#2``.

:func:`scan_tree` reads every file :func:`extract.triton_scan.triton_files` finds plus the
registrations' target modules into a :class:`pipeline.records.TritonIndex`, cached under
``<cache>/index/triton-<key>.json`` (the key covers the bytes read and this code), so only the
first run pays the libcst parse (about 15 s for the 408 files of sglang 0.5.23 on one core).

What must stay true: an op that cannot become a task still appears, with ``reason`` set (a
method target, a wrapper that launches nothing), so coverage counts every op; nothing here
imports SGLang or triton.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

import libcst as cst

from extract.triton_scan import dotted, dotted_of, literal, module_rel, scan_file, triton_files
from pipeline.console import progress, working
from pipeline.digest import source_digest
from pipeline.errors import KernelsmithError, NotWritable
from pipeline.record_io import content_hash, read_record, write_record
from pipeline.records import SourceInfo, TritonFile, TritonIndex, TritonOp, TritonSpec

TRITON_INDEX_VERSION = "kernelsmith.triton-index/1"
_CODE = ("extract/triton_scan.py", "extract/triton_ops.py")
_MAX_CALL_DEPTH = 6
# SGLang's tests ship Triton reference kernels (``test/kernels/...``) that check a production
# kernel; no model or KernelSpec serves with them, so they are counted but never made tasks.
_TEST_DIR = "test/"
_TEST_REASON = "a reference kernel of SGLang's tests (test/): no model or KernelSpec serves with it"
_STRING_METHODS = {"lstrip", "rstrip", "strip", "replace", "removeprefix", "removesuffix", "lower", "upper"}


# =========================================================================== registrations


def _value(node: cst.BaseExpression, env: Mapping[str, Any]) -> Any:
    """The value of a registration argument: literals, loop names, f-strings, string methods, enum members."""
    if isinstance(node, cst.Name) and node.value in env:
        return env[node.value]
    if isinstance(node, cst.FormattedString):
        out = []
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                out.append(part.value)
            elif isinstance(part, cst.FormattedStringExpression):
                out.append(str(_value(part.expression, env)))
        return "".join(out)
    if isinstance(node, cst.ConcatenatedString):
        return str(_value(node.left, env)) + str(_value(node.right, env))
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _value(node.left, env) + _value(node.right, env)
    if isinstance(node, cst.Tuple | cst.List):
        return tuple(_value(el.value, env) for el in node.elements)
    if isinstance(node, cst.Attribute):
        name = dotted(node)
        if name.startswith("KernelBackend."):
            return name
    if isinstance(node, cst.Call):
        func = dotted(node.func)
        args = [_value(a.value, env) for a in node.args]
        if func == "KernelBackend" and len(args) == 1:
            return f"KernelBackend.{str(args[0]).upper()}"
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in _STRING_METHODS:
            return getattr(str(_value(node.func.value, env)), node.func.attr.value)(*args)
        raise ValueError(f"call {func or '?'}")
    return literal(node)


class _Specs(cst.CSTVisitor):
    def __init__(self, env: Mapping[str, Any], out: list[dict[str, Any]]) -> None:
        self.env, self.out = env, out

    def visit_Call(self, node: cst.Call) -> None:
        if dotted(node.func).split(".")[-1] != "KernelSpec":
            return
        fields: dict[str, Any] = {}
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in ("op", "backend", "target"):
                try:
                    fields[arg.keyword.value] = _value(arg.value, self.env)
                except (ValueError, TypeError, KeyError):
                    fields[arg.keyword.value] = None
        self.out.append(fields)


def _walk(body: Iterable[cst.CSTNode], env: dict[str, Any], consts: dict[str, cst.BaseExpression], out: list) -> None:
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = small.targets[0].target
                    if isinstance(target, cst.Name):
                        consts[target.value] = small.value
            stmt.visit(_Specs(env, out))
        elif isinstance(stmt, cst.For):
            items = stmt.iter
            if isinstance(items, cst.Name) and items.value in consts:
                items = consts[items.value]
            if not isinstance(items, cst.List | cst.Tuple):
                continue
            for el in items.elements:
                try:
                    value = _value(el.value, env)
                except (ValueError, TypeError, KeyError):
                    continue
                bound = dict(env)
                if isinstance(stmt.target, cst.Tuple) and isinstance(value, tuple):
                    names = [t.value for t in stmt.target.elements]
                    bound.update({dotted(n): v for n, v in zip(names, value)})
                elif isinstance(stmt.target, cst.Name):
                    bound[stmt.target.value] = value
                _walk(stmt.body.body, bound, consts, out)
        elif isinstance(stmt, cst.If):
            _walk(stmt.body.body, env, consts, out)
            if stmt.orelse is not None:
                _walk(
                    stmt.orelse.body.body if isinstance(stmt.orelse, cst.If) else stmt.orelse.body.body,
                    env,
                    consts,
                    out,
                )
        elif isinstance(stmt, cst.BaseCompoundStatement):
            stmt.visit(_Specs(env, out))


def read_specs(rel: str, data: bytes) -> list[TritonSpec]:
    """The TRITON-backend ``KernelSpec`` registrations of one file (loops over literal lists unrolled)."""
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError:
        return []
    found: list[dict[str, Any]] = []
    _walk(module.body, {}, {}, found)
    out = []
    for fields in found:
        target = fields.get("target")
        if fields.get("backend") != "KernelBackend.TRITON" or not isinstance(target, str) or ":" not in target:
            continue
        mod, _, function = target.partition(":")
        out.append(TritonSpec(op=str(fields.get("op") or function), module=mod, function=function, registered_in=rel))
    return out


# =========================================================================== ops


class Tree:
    """The scanned files, with kernel and function lookups across modules."""

    def __init__(self, files: Iterable[TritonFile]) -> None:
        self.files = {f.module: f for f in files}
        self.kernels = {(f.module, k.name) for f in self.files.values() for k in f.kernels}

    def file_of(self, dotted_module: str) -> TritonFile | None:
        return next((self.files[r] for r in module_rel(dotted_module) if r in self.files), None)

    def resolve(self, file: TritonFile, name: str) -> tuple[str, str] | None:
        """(module, name) of the definition ``name`` refers to in ``file``: its own, or imported."""
        head, _, rest = name.partition(".")
        if not rest and (file.module, name) in self.kernels or (not rest and name in file.functions):
            return file.module, name
        target = file.imports.get(head)
        if target is None:
            return None
        mod, _, imported = target.partition(":")
        if rest:  # alias.kernel: the alias is a module
            mod, imported = (f"{mod}.{imported}" if imported else mod), rest
        other = self.file_of(mod)
        return (other.module, imported) if other is not None else None

    def launches(self, module: str, function: str, *, stop: set[tuple[str, str]] = frozenset()) -> list[tuple]:  # type: ignore[assignment]
        """Every (launch, (kernel module, kernel)) ``function`` reaches, not through the functions in ``stop``."""
        out: list[tuple] = []
        seen: set[tuple[str, str]] = set()
        stack = [(module, function, 0)]
        while stack:
            mod, fn, depth = stack.pop()
            if (mod, fn) in seen or depth > _MAX_CALL_DEPTH:
                continue
            seen.add((mod, fn))
            file = self.files[mod]
            for launch in file.launches:
                if launch.function == fn or launch.function.startswith(f"{fn}."):
                    kernel = self.resolve(file, launch.kernel)
                    if kernel is not None and kernel in self.kernels:
                        out.append((launch, kernel))
            for callee in file.calls.get(fn, []):
                where = self.resolve(file, callee)
                if where is not None and where not in self.kernels and where not in stop and where[0] in self.files:
                    if where[1] in self.files[where[0]].functions:
                        stack.append((where[0], where[1], depth + 1))
        return out


def _group_id(rel: str, function: str, *, stem: bool = False) -> str:
    parts = rel.removesuffix(".py").split("/")
    if rel.startswith("kernels/ops/") and len(parts) >= 3:
        group = parts[2]
        middle = [parts[-1]] if stem and len(parts) > 3 and parts[-1] != "__init__" else []
        return ".".join([group, *middle, function])
    return dotted_of(rel).removeprefix("sglang.") + f".{function}"


def find_ops(files: Iterable[TritonFile], specs: Iterable[TritonSpec]) -> list[TritonOp]:
    """Registered targets first (in registration order), then public launching functions (by file, name)."""
    tree = Tree(files)
    ops: list[TritonOp] = []
    taken: set[str] = set()
    claimed: set[tuple[str, str]] = set()

    def unique(first: str, second: str) -> str:
        for candidate in (first, second):
            if candidate not in taken:
                return candidate
        n = 2
        while f"{second}#{n}" in taken:
            n += 1
        return f"{second}#{n}"

    for spec in specs:
        file = tree.file_of(spec.module)
        rel = file.module if file is not None else (module_rel(spec.module) or [spec.module])[0]
        op_id = unique(spec.op, f"{spec.op}.{spec.function}")
        taken.add(op_id)
        reason = ""
        kernels: list[str] = []
        if file is None:
            reason = f"target module {spec.module} is not in the package"
        elif file.parse_error:
            reason = f"{rel} does not parse: {file.parse_error}"
        elif "." in spec.function:
            reason = f"target {spec.function} is a method of a class SGLang builds per layer: not an op yet"
        elif (file.module, spec.function) in tree.kernels:
            reason = (
                f"target {spec.function} is the @triton.jit kernel itself: its callers launch it with their own "
                "grid, so there is no wrapper to call (a curated wrapper would be needed)"
            )
        elif spec.function not in file.functions:
            reason = f"target function {spec.function} is not defined in {rel}"
        else:
            claimed.add((file.module, spec.function))
            kernels = sorted({f"{m}:{k}" for _, (m, k) in tree.launches(file.module, spec.function)})
            if not kernels:
                reason = "the target launches no @triton.jit kernel (it dispatches to another backend or module)"
        ops.append(
            TritonOp(
                id=op_id, module=rel, function=spec.function, kernels=kernels, registered_as=spec.op, reason=reason
            )
        )
    for rel in sorted(tree.files):
        file = tree.files[rel]
        if file.parse_error or not file.kernels:
            continue
        public = [f for f in file.functions if not f.startswith("_")]
        for fn in public:
            if (rel, fn) in claimed:
                continue
            others = {(rel, g) for g in public if g != fn}
            own = tree.launches(rel, fn, stop=others)
            if not own:
                continue
            op_id = unique(_group_id(rel, fn), _group_id(rel, fn, stem=True))
            taken.add(op_id)
            kernels = sorted({f"{m}:{k}" for _, (m, k) in tree.launches(rel, fn)})
            reason = _TEST_REASON if rel.startswith(_TEST_DIR) else ""
            ops.append(TritonOp(id=op_id, module=rel, function=fn, kernels=kernels, reason=reason))
    return ops


def avoid(index: TritonIndex, taken: Iterable[str]) -> TritonIndex:
    """``index`` with every op whose id a CUDA op already has renamed ``<group>.<module stem>.<function>``
    (then ``#2``...), so a task folder and a curated contract belong to one op only."""
    taken = set(taken)
    own = {op.id for op in index.ops}
    ops = []
    for op in index.ops:
        if op.id in taken:
            new = _group_id(op.module, op.function, stem=True)
            n = 2
            while new in taken or new in own:
                new = f"{_group_id(op.module, op.function, stem=True)}#{n}"
                n += 1
            own.add(new)
            op = op.model_copy(update={"id": new})
        ops.append(op)
    return index.model_copy(update={"ops": ops})


# =========================================================================== the tree


def _spec_files(root: pathlib.Path) -> list[str]:
    out = []
    for path in sorted((root / "kernels").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "KernelSpec(" in text and "TRITON" in text:
            out.append(path.relative_to(root).as_posix())
    return out


def scan_tree(source: SourceInfo, cache_dir: pathlib.Path | None = None) -> tuple[TritonIndex, bool]:
    """The Triton index of ``source`` and whether it came from the cache."""
    root = pathlib.Path(source.root)
    kernel_files = triton_files(root)
    spec_files = _spec_files(root)
    # the key covers every file a registration can name (kernels/**) and every file with kernels
    keyed = sorted({*kernel_files, *(p.relative_to(root).as_posix() for p in (root / "kernels").rglob("*.py"))})
    blobs = {rel: (root / rel).read_bytes() for rel in keyed}
    parts: list[str | bytes] = [TRITON_INDEX_VERSION, source.model_dump_json(exclude={"root"}), source_digest(_CODE)]
    for rel, data in blobs.items():
        parts += [rel, data]
    key = content_hash(*parts)
    cached = cache_dir / "index" / f"triton-{key}.json" if cache_dir is not None else None
    if cached is not None and cached.is_file():
        try:
            index = read_record(TritonIndex, cached)
            return index.model_copy(update={"source": source}), True
        except (KernelsmithError, ValueError):
            pass  # damaged: scan again
    started = time.perf_counter()
    specs = [s for rel in spec_files for s in read_specs(rel, blobs[rel])]
    with working(f"scanning {len(kernel_files)} files for Triton kernels (once per SGLang source)"):
        files = {rel: scan_file(rel, blobs[rel]) for rel in progress(kernel_files, "Triton files", len(kernel_files))}
    for spec in specs:  # a registered wrapper may live in a file without kernels
        wrapper = next((r for r in module_rel(spec.module) if r in blobs), None)
        if wrapper is not None and wrapper not in files:
            files[wrapper] = scan_file(wrapper, blobs[wrapper])
    ordered = [files[rel] for rel in sorted(files)]
    index = TritonIndex(
        source=source,
        files=ordered,
        specs=specs,
        ops=find_ops(ordered, specs),
        elapsed_s=time.perf_counter() - started,
    )
    if cached is not None:
        try:
            write_record(index, cached)
        except NotWritable as err:
            print(f"triton index cache not written: {err.message}", file=sys.stderr)
    return index, False
