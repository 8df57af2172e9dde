"""Triton tasks: one folder per Triton op, the same :class:`pipeline.records.Task` a CUDA op gets.

``work/tasks/<op_id>/`` holds ``task.json`` with ``language = "triton"`` and
``src/<package-relative path>``: the wrapper's module and every file whose kernels it
launches, byte for byte. What differs from a CUDA task, and where it lives:

- ``entry_points``: the kernels the wrapper launches; ``contract.entry``: the wrapper;
- ``editable``: each launched kernel and the same-file jit helpers it calls (decorators
  included, so autotune configs are editable) as ``kind="kernel"`` spans, and each launch
  site in the wrapper (the grid and ``num_warps``/``num_stages``/``BLOCK_*``) as
  ``kind="launcher"``;
- ``triton`` (:class:`pipeline.records.TritonFacts`): kernels with their parameters,
  constexprs, autotune configs and heuristics; launch sites; the wrapper and its
  ``KernelSpec`` registration;
- ``instantiations``: one per dtype the contract allows, no template arguments
  (``size_free``: Triton specialises at launch, not at build), each exporting the wrapper
  under its own name (``wrappers = [(function, function)]``, so the harness's cases name it
  as a CUDA entry's); ``build``: no CUDA files, only the arch the compile check targets.

:func:`coverage` groups every op and every file with ``@triton.jit`` kernels by what they
became (a task, or the reason not), for ``extract --language triton --all``.

What must stay true: the folder is published like a CUDA task (``extract.tasks.publish``:
staging, ``task.json`` last, rename); its key covers the op record, every copied file, the
curated contract, the catalog and extract's code, so a rerun skips a current task.
"""

from __future__ import annotations

import collections
import hashlib
import os
import pathlib
from collections.abc import Iterable

from extract import contract as contract_mod
from extract import entry as entry_signature
from extract import model_ops, shapes, tasks, triton_contract
from extract.triton_ops import Tree
from extract.triton_scan import dotted_of
from pipeline.digest import source_digest
from pipeline.errors import ConfigError
from pipeline.record_io import content_hash
from pipeline.records import (
    DTYPES,
    BuildRecipe,
    FileDigest,
    Instantiation,
    OpEntry,
    Span,
    Task,
    TritonFacts,
    TritonIndex,
    TritonKernel,
    TritonLaunch,
    TritonOp,
)
from pipeline.target import TARGET

_OWN_CODE = ("extract/**/*.py", "extract/curated/*.toml", "contract/*.py")


def _launches(tindex: TritonIndex, op: TritonOp) -> list[tuple[TritonLaunch, TritonKernel]]:
    tree = Tree(tindex.files)
    kernels = {(f.module, k.name): k for f in tindex.files for k in f.kernels}
    return [(launch, kernels[where]) for launch, where in tree.launches(op.module, op.function)]


def _helpers(tindex: TritonIndex, kernels: list[TritonKernel]) -> list[TritonKernel]:
    """The launched kernels, then the same-file jit functions they call (transitively), in file order."""
    by_file = {f.module: {k.name: k for k in f.kernels} for f in tindex.files}
    out: dict[tuple[str, str], TritonKernel] = {}
    stack = list(kernels)
    while stack:
        k = stack.pop()
        if (k.file, k.name) in out:
            continue
        out[(k.file, k.name)] = k
        stack += [by_file[k.file][c] for c in k.calls if c in by_file[k.file]]
    return sorted(out.values(), key=lambda k: (k.file, k.start_byte))


def task_files(tindex: TritonIndex, op: TritonOp) -> list[str]:
    return sorted({op.module, *(k.partition(":")[0] for k in op.kernels)})


def task_key(
    tindex: TritonIndex, op: TritonOp, arch: str, token_counts: Iterable[int], *, cache_dir: pathlib.Path | None = None
) -> str:
    root = pathlib.Path(tindex.source.root)
    parts: list[str | bytes] = ["triton", op.model_dump_json(), arch, ",".join(map(str, token_counts))]
    for rel in task_files(tindex, op):
        parts += [rel, (root / rel).read_bytes()]
    curated = contract_mod.curated_path(op.id)
    parts.append(curated.read_bytes() if curated.is_file() else b"")
    for path in sorted(shapes.CATALOG_DIR.glob("*.toml")):
        parts += [path.name, path.read_bytes()]
    # which models, decided by the model code
    parts.append(catalog_models(tindex, op, shapes.load_catalog(), cache_dir=cache_dir)[1])
    parts.append(source_digest(_OWN_CODE))
    return content_hash(*parts)


def _as_entry(op: TritonOp) -> OpEntry:
    """The op as the model-to-op map reads one: its module and the wrapper SGLang's code calls."""
    return OpEntry(id=op.id, module=op.module, public_functions=[op.function], entry_points=[], files=[])


def catalog_models(
    tindex: TritonIndex, op: TritonOp, catalog: list[shapes.Model], *, cache_dir: pathlib.Path | None = None
) -> tuple[list[shapes.Model], str]:
    """The catalog models whose shapes ``op`` gets and why: the rule a CUDA op follows
    (:func:`extract.model_ops.select_models`), over a map of the Triton ops alone. A map of both
    languages would differ: the map stops at an op's public function, so a Triton wrapper that
    calls a CUDA op would hide the CUDA op from the models that reach it through the wrapper."""
    root = pathlib.Path(tindex.source.root)
    entries = [_as_entry(o) for o in tindex.ops]
    return model_ops.select_models(model_ops.load_map(root, entries, cache_dir), _as_entry(op), catalog)


def write_task(
    tindex: TritonIndex,
    op: TritonOp,
    work_dir: str | os.PathLike[str],
    *,
    arch: str = TARGET.arch,
    token_counts: Iterable[int] = tasks.DEFAULT_TOKEN_COUNTS,
    key: str | None = None,
    cache_dir: pathlib.Path | None = None,
) -> Task:
    """Write ``work_dir/tasks/<op.id>/`` for a Triton op and return the task; ConfigError when it cannot be one."""
    token_counts = tuple(token_counts)
    if op.reason:
        raise ConfigError(f"{op.id}: {op.reason}", fix="see extract/triton_ops.py for what makes a Triton op")
    root = pathlib.Path(tindex.source.root)
    file = next((f for f in tindex.files if f.module == op.module), None)
    if file is None or file.parse_error:
        raise ConfigError(
            f"{op.id}: {op.module} " + (f"does not parse: {file.parse_error}" if file else "was not scanned"),
            fix="fix the file, or point SGLANG_SRC at an sglang tree whose sources parse",
        )
    launched = _launches(tindex, op)
    if not launched:
        raise ConfigError(
            f"{op.id}: {op.module}::{op.function} launches no @triton.jit kernel",
            fix="name the Python function that launches the kernel (kernel[grid](...)) in a curated contract",
        )
    notes: list[str] = []
    curated = contract_mod.load_curated(op.id)
    try:
        contract = triton_contract.infer_contract(root, file, op.function, launched)
    except ConfigError:
        if curated is None or "args" not in curated:
            raise
        contract = triton_contract.Contract(entry=op.function, args=[], symbols=[])
    if curated is not None:
        contract = contract_mod.apply_curated(contract, curated)
    curated = curated or {}
    dtypes = [d for d in curated.get("dtypes", list(DTYPES)) if d in DTYPES]
    chosen, why = catalog_models(tindex, op, shapes.load_catalog(), cache_dir=cache_dir)
    notes.append(why)
    cases, shape_notes = shapes.shape_cases(contract, curated.get("shapes"), token_counts, chosen)
    notes += shape_notes
    kernels = _helpers(tindex, list({(k.file, k.name): k for _, k in launched}.values()))
    launches = list({(launch.file, launch.start_byte): launch for launch, _ in launched}.values())
    editable = [
        Span(file=k.file, start_byte=k.start_byte, end_byte=k.end_byte, name=k.name, kind="kernel") for k in kernels
    ]
    names = collections.Counter[str]()
    for launch in launches:
        names[launch.kernel] += 1
        suffix = f"#{names[launch.kernel]}" if names[launch.kernel] > 1 else ""
        editable.append(
            Span(
                file=launch.file,
                start_byte=launch.start_byte,
                end_byte=launch.end_byte,
                name=f"launch:{launch.kernel}{suffix}",
                kind="launcher",
            )
        )
    closure = sorted({op.module, *(k.file for k in kernels)})
    files = [_digest(root, rel) for rel in closure]
    task = Task(
        op_id=op.id,
        module=op.module,
        public_functions=[op.function],
        entry_points=sorted({k.name for _, k in launched}),
        source=tindex.source,
        files=files,
        instantiations=[
            Instantiation(
                dtype=d, module_args=[], template_args=[], wrappers=[(op.function, op.function)], size_free=True
            )
            for d in dtypes
        ],
        build=BuildRecipe(cuda_files=[], include_dirs=[], cuda_cflags=[], cflags=[], arch=arch),
        editable=editable,
        contract=contract,
        shapes=cases,
        notes=list(dict.fromkeys(notes)),
        entry_signature=entry_signature.read_signature(root, op.module, op.function, contract, []),
        language="triton",
        triton=TritonFacts(
            wrapper=f"{dotted_of(op.module)}:{op.function}",
            kernels=kernels,
            launches=launches,
            registered_as=op.registered_as,
        ),
    )
    tasks.publish(
        task,
        root,
        closure,
        pathlib.Path(work_dir),
        key or task_key(tindex, op, arch, token_counts, cache_dir=cache_dir),
    )
    return task


def _digest(root: pathlib.Path, rel: str) -> FileDigest:
    data = (root / rel).read_bytes()
    return FileDigest(path=rel, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


# =========================================================================== coverage


def reason_group(reason: str) -> str:
    """A failure reason without its op-specific names: what coverage groups by."""
    text = reason.split(": ", 1)[1] if ": " in reason and "." in reason.split(": ", 1)[0] else reason
    for marker, group in (
        ("is the @triton.jit kernel itself", "registered target is the kernel itself (no wrapper)"),
        ("is a method of a class", "registered target is a class method"),
        ("launches no @triton.jit kernel", "wrapper launches no kernel of the package"),
        ("no .shape read", "a tensor's shape is not named in the wrapper"),
        ("type unknown", "a parameter's type is not in the wrapper (no annotation, no use)"),
        ("is not defined in", "registered target not defined in its module"),
        ("does not parse", "file does not parse"),
        ("not in the package", "registered target outside the package"),
    ):
        if marker in text:
            return group
    return text[:100]


def file_reasons(tindex: TritonIndex, op_results: dict[str, str]) -> dict[str, str]:
    """Per file with kernels that yields no task: why (``op_results``: op id -> "" for a task, else its reason)."""
    launched_by: dict[str, list[str]] = collections.defaultdict(list)
    for op in tindex.ops:
        for kernel in op.kernels:
            launched_by[kernel.partition(":")[0]].append(op.id)
    ops_in: dict[str, list[TritonOp]] = collections.defaultdict(list)
    for op in tindex.ops:
        ops_in[op.module].append(op)
    out: dict[str, str] = {}
    for file in tindex.files:
        if not file.kernels and not file.parse_error:
            continue  # a registration's wrapper module without kernels of its own
        own = ops_in.get(file.module, [])
        users = launched_by.get(file.module, [])
        if any(op_results.get(o.id) == "" for o in own) or any(op_results.get(o) == "" for o in users):
            continue
        if file.parse_error:
            out[file.module] = "file does not parse"
        elif own or users:
            first = next((op_results.get(o.id) or o.reason for o in own if op_results.get(o.id, o.reason)), "")
            first = first or next((op_results.get(o, "") for o in users if op_results.get(o)), "")
            out[file.module] = "its ops yield no task: " + reason_group(first)
        elif any(launch.function and "." in launch.function for launch in file.launches):
            out[file.module] = "kernels launched only from class methods"
        elif file.launches:
            out[file.module] = "kernels launched only from private functions no public one reaches"
        else:
            out[file.module] = "kernels launched only from other files' private code, or not at all"
    return out
