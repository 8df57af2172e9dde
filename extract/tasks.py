"""Standalone tasks: one folder per op that everything downstream works from.

``work/tasks/<op_id>/`` holds ``task.json`` (:class:`pipeline.records.Task`) and
``src/<package-relative path>``: the op's CUDA/C++ files and their whole include
closure inside the package (``kernels/jit/include/**`` as needed), byte for byte.
A build (``pipeline.build``) compiles from ``src/`` alone, so a task keeps
working when the SGLang tree is gone or is on another machine.

What a task pins down:

- **Instantiations**: the loader is *run* (``extract.pyops.instantiate``) for every
  dtype the contract allows and every catalog shape, exactly as SGLang's Python
  would on sm_90a (``is_arch_support_pdl()`` is true), and deduplicated. Template
  arguments that follow a shape (rmsnorm's ``make_cpp_args(hidden_size, pdl,
  dtype)`` and its kernel class chosen from the width) give one instantiation
  per catalog width; a shape no dtype can instantiate is dropped with a note.
- **Build recipe**: what ``load_jit`` would compile for the loader that provides
  the contract's entry: SGLang's default flags for the arch
  (``-DSGL_CUDA_ARCH=900 -std=c++20 -O3 --expt-relaxed-constexpr``) plus the op's
  own ``extra_cuda_cflags`` as the loader computed them; include dirs relative to
  ``src/`` plus the ``@tvm_ffi`` / ``@dlpack`` tokens the builder resolves.
- **Editable region**: byte spans of the kernels, device functions and launcher
  structs defined in the op's *own* CUDA/C++ files (never shared headers);
  spans nested in another span are dropped (the outer one carries them), and
  names are unique (``name#2`` for a repeated name) because candidates address
  regions by name.
- **Contract and shapes** (:mod:`extract.contract`, :mod:`extract.shapes`).

What must stay true: ``task.json`` is written last and atomically
(``write_record``) after ``src/`` is complete, and the folder is published by a
rename, so a task folder is either the previous complete task or the new one.
``.extract-key`` beside ``task.json`` is the content key of every input (op
record, source digests, curated contract, catalog, extract's own code); a task
whose key matches is current and a rerun skips it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import re
import shutil
import tomllib
import uuid
from collections.abc import Iterable
from typing import Any

from contract import layout
from contract.layout import KEY_FILE, SRC_DIR, task_dir
from contract.shapes import synthetic_shape
from extract import contract as contract_mod
from extract import entry as entry_signature
from extract import model_ops, pyops, shapes
from extract.jit_layout import layout_of
from pipeline import deps as build_deps
from pipeline.digest import source_digest
from pipeline.errors import ConfigError
from pipeline.record_io import content_hash, replace_dir, write_record
from pipeline.records import (
    DTYPES,
    BuildRecipe,
    Contract,
    FileDigest,
    Index,
    Instantiation,
    LoadJitCall,
    OpEntry,
    ShapeCase,
    Span,
    Task,
)
from pipeline.target import TARGET, capability_of

DEFAULT_TOKEN_COUNTS = (1, 8, 64, 512, 4096, 16384)
# Extract's own code (every module, query and curated value: a task is what they compute)
# and the contract package whose shape invention planned_sizes runs: inputs of every task
# (globs over the repository root; pipeline.digest).
_OWN_CODE = (
    "extract/**/*.py",
    "extract/jit_layout_ids.json",
    "source/*.py",
    "source/queries/*.scm",
    "extract/curated/*.toml",
    "contract/*.py",
)


def arch_number(arch: str) -> int:
    """``sm_90a`` -> 900 (SGLang's ``-DSGL_CUDA_ARCH``)."""
    try:
        major, minor = capability_of(arch)
    except ValueError as err:
        raise ConfigError(str(err), fix=f'use e.g. extract.arch = "{TARGET.arch}"') from err
    return major * 100 + minor * 10


def default_cuda_cflags(arch: str) -> list[str]:
    """SGLang's ``get_default_target_flags`` for a CUDA arch."""
    return [f"-DSGL_CUDA_ARCH={arch_number(arch)}", "-std=c++20", "-O3", "--expt-relaxed-constexpr"]


# --------------------------------------------------------------------------- includes


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)


def include_closure(root: pathlib.Path, start: Iterable[str], includes: dict[str, list[str]]) -> list[str]:
    """Every package file ``start`` reaches through ``#include`` (``start`` included), sorted.

    Uses the index's resolved includes; a file the index did not see is read
    here and resolved like the index does (its own folder for quoted names, then
    ``kernels/jit/include`` and ``kernels/jit/csrc``).
    """
    jit = layout_of(root)
    seen: set[str] = set()
    stack = list(start)
    while stack:
        rel = stack.pop()
        if rel in seen:
            continue
        path = root / rel
        if not path.is_file():
            continue
        seen.add(rel)
        children = includes.get(rel)
        if children is None:
            children = []
            data = path.read_bytes()
            for quote, name in _INCLUDE.findall(data):
                name_s = name.decode("utf-8", errors="replace")
                here = os.path.dirname(rel)
                candidates = [os.path.normpath(os.path.join(here, name_s))] if quote == b'"' else []
                candidates += [os.path.normpath(os.path.join(d, name_s)) for d in (jit.include_dir, jit.csrc_dir)]
                found = next((c for c in candidates if not c.startswith("..") and (root / c).is_file()), None)
                if found:
                    children.append(found)
        for child in children:
            if not child.startswith("<") and child not in seen:
                stack.append(child)
    return sorted(seen)


# --------------------------------------------------------------------------- editable spans


def editable_spans(index: Any, own_files: Iterable[str]) -> list[Span]:
    """Kernels, device functions and launchers defined in ``own_files``, outermost only, unique names."""
    own = set(own_files)
    raw: list[Span] = []
    for kind, items in (
        ("kernel", getattr(index, "kernels", [])),
        ("device_function", getattr(index, "device_functions", [])),
        ("launcher", getattr(index, "launchers", [])),
    ):
        for item in items:
            if item.file in own and item.end_byte > item.start_byte:
                raw.append(
                    Span(file=item.file, start_byte=item.start_byte, end_byte=item.end_byte, name=item.name, kind=kind)
                )
    raw.sort(key=lambda s: (s.file, s.start_byte, -s.end_byte))
    kept: list[Span] = []
    for span in raw:
        if (
            kept
            and kept[-1].file == span.file
            and span.start_byte >= kept[-1].start_byte
            and span.end_byte <= kept[-1].end_byte
        ):
            continue  # nested in (or equal to) the previous outer span
        if kept and kept[-1].file == span.file and span.start_byte < kept[-1].end_byte:
            continue  # partial overlap: keep the earlier span, splice refuses overlaps
        kept.append(span)
    counts: dict[str, int] = {}
    out = []
    for span in kept:
        counts[span.name] = counts.get(span.name, 0) + 1
        name = span.name if counts[span.name] == 1 else f"{span.name}#{counts[span.name]}"
        out.append(span.model_copy(update={"name": name}))
    return out


# --------------------------------------------------------------------------- instantiation


def _entry_call(op: OpEntry, entry: str, root: pathlib.Path) -> LoadJitCall:
    for call in op.load_jit:
        if any(e == entry for e, _ in pyops.call_exports(call, root)):
            return call
    if not op.load_jit:
        raise ConfigError(f"{op.id} has no load_jit call", fix="re-run `kernelsmith extract`")
    return op.load_jit[0]


def plan_instantiations(
    program: pyops.Program,
    op: OpEntry,
    call: LoadJitCall,
    entry: str,
    dtypes: Iterable[str],
    cases: list[ShapeCase],
    models: dict[str, shapes.Model],
    tensors: dict[str, Any] | None = None,
    planned: dict[str, int] | None = None,
) -> tuple[list[Instantiation], list[ShapeCase], pyops.Instance | None, list[str]]:
    """Run the loader per (dtype, shape); returns (instantiations, shapes kept, one instance, notes).

    ``tensors`` (name -> the contract's TensorSpec) sizes the wrapper's tensors, so a
    loader parameter read from one (``w.shape[0]``) has a value (see pyops.tensor_value):
    a shape case's size, else the ``planned`` one.
    """
    notes: list[str] = []
    out: list[Instantiation] = []
    seen: set[tuple[Any, ...]] = set()
    first: pyops.Instance | None = None
    kept_cases: list[ShapeCase] = []
    failures: dict[str, str] = {}
    # Without catalog shapes, loader parameters named after a model dimension
    # (hidden_size, head_dim) still get the catalog's values: one pass per model.
    passes: list[tuple[ShapeCase | None, dict[str, int]]] = []
    if cases:
        for case in cases:
            model = models.get(case.model)
            passes.append((case, {**(model.dims if model else {}), **case.sizes}))
    else:
        passes = [(None, dict(m.dims)) for m in models.values()] or [(None, {})]
    dtypes = list(dtypes)

    def run_passes(planned: dict[str, int] | None) -> None:
        nonlocal first
        for case, sizes in passes:
            served = False
            fallbacks = loader_fallbacks(sizes, op.module)
            for dtype in dtypes:
                try:
                    inst = pyops.instantiate(
                        program,
                        op,
                        call,
                        dtype=dtype,
                        sizes=sizes,
                        entry=entry,
                        fallbacks=fallbacks,
                        tensors=tensors,
                        planned=planned,
                    )
                except pyops.Unresolvable as err:
                    failures.setdefault(f"{dtype}: {err}", case.label if case else "no shape")
                    continue
                served = True
                first = first or inst
                notes.extend(n for n in inst.notes if n not in notes)
                key = (
                    dtype,
                    tuple(inst.template_args),
                    tuple(inst.module_args),
                    tuple(inst.wrappers),
                    tuple(inst.pins.items()),
                )
                if key in seen:
                    continue
                seen.add(key)
                out.append(
                    Instantiation(
                        dtype=dtype,
                        module_args=inst.module_args,
                        template_args=inst.template_args,
                        wrappers=inst.wrappers,
                        sizes=inst.pins,
                        size_free=inst.size_free,
                        run_time=inst.run_time,
                    )
                )
            if case is not None:
                if served:
                    kept_cases.append(case)
                else:
                    notes.append(f"shape {case.label} dropped: no dtype instantiates")

    run_passes(planned)
    refused = any(any(why in reason for why in _REFUSALS) for reason in failures)
    if not out and not cases and planned and refused:
        # The loader refused the planned sizes (`topk not in (1, 2, 4, 8)`): try others,
        # every symbol at one value, until one instantiates.
        for value in PLANNED_RETRIES:
            run_passes({name: value for name in planned})
            if out:
                notes.append(f"the loader refused the sizes planned first; planned at {value} instead")
                break
    for reason, where in failures.items():
        notes.append(f"instantiation failed ({where}): {reason}")
    out.sort(key=lambda i: (DTYPES.index(i.dtype) if i.dtype in DTYPES else 9, _numeric_key(i.template_args)))
    return out, kept_cases, first, notes


# Sizes tried, in order, when a loader refuses the first planned ones (powers of two
# from SGLang's usual widths and counts, the small ones last).
PLANNED_RETRIES = (8, 64, 256, 512, 1024, 2048, 4096, 16, 32, 4, 2, 1)
# How a loader refuses values (pyops' messages), as opposed to not knowing one: only a
# refusal can be answered by planning other sizes.
_REFUSALS = ("the function raises here", "assertion fails", "returned without calling load_jit", "failed:")


def planned_sizes(contract: Contract) -> dict[str, int]:
    """The sizes a loader reading a tensor's shape is planned at, where no shape case
    gives one: the small shape the harness invents for the contract
    (``contract.shapes.synthetic_shape``: the kernel's own checks hold there,
    ``2 <= W <= 4``). What must stay true: it is the very shape the harness then tests,
    so an instantiation specialised on these sizes is the one it selects. Pure Python
    (no torch); {} when the contract has no shape to invent."""
    try:
        case = synthetic_shape(contract)
    except Exception:  # noqa: BLE001 - a contract the harness cannot size: planned at PLANNED_SIZE
        return {}
    return dict(case.sizes) if case is not None else {}


LOADER_VALUES = pathlib.Path(__file__).with_name("curated") / "loader_values.toml"


def loader_fallbacks(dims: dict[str, int], module: str | None = None) -> dict[str, tuple[Any, str]]:
    """Last-resort loader values (see :func:`extract.pyops.instantiate`): the curated
    ``curated/loader_values.toml`` (an entry with ``modules`` only for the op modules it
    names: `topk` is 2048 for fast_topk, not for a MoE router), plus each alias of a
    model dimension in :data:`extract.shapes.DEFAULT_FAMILIES` (``rope_dim`` ->
    ``qk_rope_head_dim``) that ``dims`` (one model's, for one pass) can evaluate."""
    out: dict[str, tuple[Any, str]] = {}
    for family in shapes.DEFAULT_FAMILIES:
        for alias, expr in family.items():
            value = shapes.evaluate_dim(expr, dims)
            if value is not None and "tokens" not in str(expr):
                out.setdefault(alias, (value, f"the model's {expr} (extract/shapes catalog)"))
    for name, entry in _curated_loader_values().items():
        if "modules" in entry and module not in entry["modules"]:
            continue
        value = entry["value"]
        if entry.get("constant") and isinstance(value, int) and not isinstance(value, bool):
            value = pyops.Constant(value)  # a mode number, never a width the harness must match
        out[entry.get("name", name)] = (value, entry["why"])
    return out


@functools.lru_cache(maxsize=1)
def _curated_loader_values() -> dict[str, dict[str, Any]]:
    """``curated/loader_values.toml``, read once (plan_instantiations asks per dtype pass)."""
    with LOADER_VALUES.open("rb") as handle:
        return tomllib.load(handle)


def _numeric_key(args: list[str]) -> list[Any]:
    return [(0, int(a), "") if a.isdigit() else (1, 0, a) for a in args]


# --------------------------------------------------------------------------- keys


def task_key(
    index: Index,
    op: OpEntry,
    arch: str,
    token_counts: Iterable[int],
    files: list[str] | None = None,
    *,
    cache_dir: pathlib.Path | None = None,
) -> str:
    """Content key of every input of a task (see the module docstring).

    ``files`` defaults to the include closure of ``op.files``; the key stored by
    :func:`write_task` and the one ``extract`` checks with :func:`is_current` must
    be taken over the same files, or a rerun never finds the task current.
    """
    digests = {d.path: d.sha256 for d in index.files}
    root = pathlib.Path(index.source.root)
    closure = files or include_closure(root, op.files, index.includes)
    parts: list[str | bytes] = [op.model_dump_json(), arch, ",".join(map(str, token_counts))]
    for rel in closure:
        parts += [rel, digests.get(rel) or _digest(root, rel).sha256]
    parts.append(op.module)
    module_path = root / op.module
    parts.append(module_path.read_bytes() if module_path.is_file() else b"")
    curated = contract_mod.curated_path(op.id)
    parts.append(curated.read_bytes() if curated.is_file() else b"")
    for path in sorted(shapes.CATALOG_DIR.glob("*.toml")):
        parts += [path.name, path.read_bytes()]
    # which models, decided by the model code
    parts.append(catalog_models(index, op, shapes.load_catalog(), cache_dir=cache_dir)[1])
    parts.append(source_digest(_OWN_CODE))
    return content_hash(*parts)


def catalog_models(
    index: Index, op: OpEntry, catalog: list[shapes.Model], *, cache_dir: pathlib.Path | None = None
) -> tuple[list[shapes.Model], str]:
    """The catalog models whose shapes ``op`` gets and why (:func:`extract.model_ops.select_models`
    over the model-to-op map of the index's SGLang tree, kept under ``cache_dir`` when given)."""
    root = pathlib.Path(index.source.root)
    return model_ops.select_models(model_ops.load_map(root, index.ops, cache_dir), op, catalog)


def is_current(work_dir: str | os.PathLike[str], op_id: str, key: str) -> bool:
    folder = task_dir(work_dir, op_id)
    key_file = folder / KEY_FILE
    if not layout.has_task(folder) or not key_file.is_file():
        return False
    return key_file.read_text(encoding="utf-8").strip() == key


# --------------------------------------------------------------------------- write / load


def write_task(
    index: Index,
    op: OpEntry,
    work_dir: str | os.PathLike[str],
    *,
    arch: str = TARGET.arch,
    token_counts: Iterable[int] = DEFAULT_TOKEN_COUNTS,
    program: pyops.Program | None = None,
    key: str | None = None,
    cache_dir: pathlib.Path | None = None,
) -> Task:
    """Write ``work_dir/tasks/<op.id>/`` (``src/`` + ``task.json``) and return the task.

    Raises :class:`pipeline.errors.ConfigError` when the op cannot become a
    task (no instantiation at all): the caller records that as the op's failure. The steps: the
    contract and its instantiations (:func:`_plan_task`), the build recipe (:func:`_build_recipe`).
    """
    token_counts = tuple(token_counts)
    root = pathlib.Path(index.source.root)
    program = program or pyops.Program(root)
    notes: list[str] = []
    contract, call, instantiations, cases, instance = _plan_task(
        index, op, root, program, token_counts, cache_dir, notes
    )
    recipe, own = _build_recipe(op, instance, root, arch, notes)
    closure = include_closure(root, own, index.includes)
    digests = {d.path: d for d in index.files}
    files = [digests.get(rel) or _digest(root, rel) for rel in closure]
    editable = editable_spans(index, own)
    if not editable:
        notes.append("no kernel, device function or launcher is defined in the op's own files: nothing is editable")
    task = Task(
        op_id=op.id,
        module=op.module,
        public_functions=op.public_functions,
        entry_points=op.entry_points,
        source=index.source,
        files=files,
        instantiations=instantiations,
        build=recipe,
        editable=editable,
        contract=contract,
        shapes=cases,
        notes=list(dict.fromkeys(notes)),
        entry_signature=entry_signature.read_signature(
            root,
            op.module,
            entry_signature.public_function(op.id, op.public_functions),
            contract,
            op.entry_points,
            loader=call.function if call.module == op.module else None,
            built=set.intersection(*(set(i.run_time) for i in instantiations)),
        ),
    )
    publish(
        task, root, closure, pathlib.Path(work_dir), key or task_key(index, op, arch, token_counts, cache_dir=cache_dir)
    )
    return task


def _plan_task(
    index: Index,
    op: OpEntry,
    root: pathlib.Path,
    program: pyops.Program,
    token_counts: tuple[int, ...],
    cache_dir: pathlib.Path | None,
    notes: list[str],
) -> tuple[Contract, LoadJitCall, list[Instantiation], list[ShapeCase], pyops.Instance]:
    """Step 1 of write_task: the contract, its shapes and the loader run on them; raises ConfigError when nothing instantiates."""
    contract, curated = contract_mod.contract_for(op, index, root, program=program)
    returned = [a.tensor.name for a in contract.args if a.tensor is not None and a.tensor.returned is not None]
    if returned:
        raise ConfigError(
            f"{op.id}: the curated contract marks {', '.join(returned)} `returned`, which only a Triton wrapper's "
            "result can be: a CUDA export writes every output into an argument",
            fix=f"drop `returned` from extract/curated/{op.id}.toml",
        )
    curated = curated or {}
    dtypes = [d for d in curated.get("dtypes", list(DTYPES)) if d in DTYPES]
    if curated.get("dtypes") and len(dtypes) < len(DTYPES):
        notes.append(
            f"dtypes {', '.join(d for d in DTYPES if d not in dtypes)} excluded by the curated contract (see its comments)"
        )
    catalog = shapes.load_catalog()
    chosen, why = catalog_models(index, op, catalog, cache_dir=cache_dir)
    notes.append(why)
    cases, shape_notes = shapes.shape_cases(contract, curated.get("shapes"), token_counts, chosen)
    notes += shape_notes
    models = {m.name: m for m in chosen}  # also the passes of a loader without shape cases
    call = _entry_call(op, contract.entry, root)
    tensors = {a.tensor.name: a.tensor for a in contract.args if a.tensor is not None}
    instantiations, cases, instance, inst_notes = plan_instantiations(
        program, op, call, contract.entry, dtypes, cases, models, tensors, planned_sizes(contract)
    )
    notes += inst_notes
    contract = contract_mod.settle_type_params(contract, instantiations)
    if not instantiations or instance is None:
        first = next((n.split(": ", 2)[-1] for n in notes if n.startswith("instantiation failed")), "")
        raise ConfigError(
            f"{op.id}: no instantiation of {call.function} could be evaluated" + (f": {first}" if first else ""),
            fix="add a curated contract (extract/curated/<op>.toml) or a shape mapping for its template arguments",
            detail="\n".join(notes),
        )
    return contract, call, instantiations, cases, instance


def _build_recipe(
    op: OpEntry, instance: pyops.Instance, root: pathlib.Path, arch: str, notes: list[str]
) -> tuple[BuildRecipe, list[str]]:
    """Step 2 of write_task: the build recipe load_jit would compile and the op's own files; they must be in the package."""
    try:
        cuda_files = instance.strings("cuda_files")
        cpp_files = instance.strings("cpp_files")
        extra_cuda = instance.strings("extra_cuda_cflags")
        extra_c = instance.strings("extra_cflags")
        extra_inc = instance.strings("extra_include_paths")
        deps = instance.strings("extra_dependencies")
    except pyops.Unresolvable as err:
        raise ConfigError(
            f"{op.id}: {err}", fix="the loader builds its arguments in a way extract cannot follow"
        ) from err
    header_only = instance.kwargs.get("header_only", True)
    jit = layout_of(root)
    own = [f"{jit.csrc_dir}/{f}" for f in [*cuda_files, *cpp_files] if not f.startswith("/")]
    missing = [f for f in own if not (root / f).is_file()]
    if missing or not own:
        raise ConfigError(
            f"{op.id}: source files {missing or '(none)'} are not in the package",
            fix="this op compiles files outside the SGLang tree; it cannot be a standalone task",
        )
    include_dirs = [jit.include_dir, "@tvm_ffi", "@dlpack"]
    for path in extra_inc:
        rel = _package_relative(root, path)
        if rel is None:
            notes.append(f"extra include path {path} is outside the package; not carried into the task")
        else:
            include_dirs.append(rel)
    for dep in deps:  # resolved by the builder (pipeline.deps), as SGLang's load_jit does
        include_dirs.append(build_deps.token(dep))
        notes.append(f"needs header dependency `{dep}` (outside the package: `make deps`, see pipeline/deps.py)")
    recipe = BuildRecipe(
        cuda_files=[f"{jit.csrc_dir}/{f}" for f in cuda_files],
        cpp_files=[f"{jit.csrc_dir}/{f}" for f in cpp_files],
        include_dirs=include_dirs,
        cuda_cflags=[*default_cuda_cflags(arch), *extra_cuda],
        cflags=["-std=c++20", "-O3", *extra_c],
        arch=arch,
        header_only=bool(header_only),
    )
    return recipe, own


def _package_relative(root: pathlib.Path, path: str) -> str | None:
    """``path`` relative to the package root, or None outside it; a relative path is
    already package-relative (pyops.package_paths)."""
    full = pathlib.Path(path) if pathlib.Path(path).is_absolute() else root / path
    try:
        rel = full.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    return rel.as_posix()


def _digest(root: pathlib.Path, rel: str) -> FileDigest:
    data = (root / rel).read_bytes()
    return FileDigest(path=rel, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def publish(task: Task, root: pathlib.Path, closure: list[str], work_dir: pathlib.Path, key: str) -> None:
    """Build the folder in staging, write task.json last, then swap it in by rename."""
    final = task_dir(work_dir, task.op_id)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".staging-{task.op_id}-{uuid.uuid4().hex[:8]}"
    try:
        for rel in closure:
            target = staging / SRC_DIR / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, target)  # copyfile: no read-only mode bits from the wheel tree
        write_record(task, staging / layout.TASK_FILE)
        (staging / KEY_FILE).write_text(key + "\n", encoding="utf-8")
        replace_dir(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
