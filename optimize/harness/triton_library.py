"""A Triton task's "library": its Python file with a candidate's regions spliced in, loaded as a module of its own.

Why: a CUDA candidate becomes a tvm-ffi module (:mod:`pipeline.build`); a Triton candidate
is Python, compiled by Triton's JIT on its first launch. What the harness needs from it is
the same: a folder per distinct code, content-addressed, and a callable per export. So a
Triton baseline or candidate is built here (the parent process, no torch, no Triton) and
loaded in the worker (:mod:`optimize.harness.loader`, which hands the worker the same kind of
callable a tvm-ffi export is). Everything after loading (the contract-planned inputs,
poison, held-out shapes, graph replay, timed-output validation, timing) is the worker's, the
same for both languages.

Build (:func:`build`): the task's copy of the wrapper's file (``src/<task.module>``) with the
candidate's regions spliced in (:func:`extract.splice.candidate_overrides` over ``task.editable``, the
text half :func:`integrate.patch.compose` uses too), parsed by libcst, written with a
:class:`TritonLibrary` manifest into ``cache_root/<key>/``: built in a staging folder, published
by one rename, never edited after. The key covers the spliced text, the wrapper's module and
function, the exports and this module's own code (:func:`pipeline.digest.source_digest`); no
install path. A region that does not splice, a file that does not parse, or an edit outside the
wrapper's own file is ``BuildReport(ok=False)`` with the reason and the fix, never an exception.

Load (:func:`function`, in the worker): the spliced file is executed as the module
``<wrapper's dotted module>__ks_<key>_<owner>`` (``importlib`` from the file path, registered in
``sys.modules``), one module object per (library, owner): the baseline and the candidate never
share a module, so Triton's JIT functions, their in-memory caches and the module's globals are
each one implementation's alone, even where the texts are equal. The name keeps the original
package, so a relative import resolves in it; an absolute ``import sglang.<...>`` resolves in the
carried sglang package, which the worker installs first (:func:`use_package`: the package folder
is put on ``sys.path`` as the bare ``sglang`` of :mod:`pipeline.sglang_package`, without running
``sglang/__init__.py``). On ``sys.path`` the worker therefore needs: the project (for the worker
itself), the GPU machine's packages (torch, triton), and, only for a file that imports ``sglang``,
the folder holding the package (added by :func:`use_package`). Triton compiles into
``$TRITON_CACHE_DIR`` (default ``$HOME/.triton``: the worker's own home, writable in the sandbox).

Outputs: the contract's outputs are arguments (:mod:`extract.triton_contract`: a wrapper's
``out=None`` that it allocates when not given, and the kernel stores to, is an ``output``
argument), and the harness always passes them, so the wrapper writes into the harness's poisoned
buffers. An output the wrapper allocates and returns, with no parameter for it, is marked
``returned`` in the contract (its index among the result's leaves) and comes after the wrapper's
own arguments: the callable passes the wrapper only those, and the returned ones' buffers are
handed to the wrapper's own allocations while it runs (:mod:`optimize.harness.returned_outputs`),
then checked to be what it returned. What must stay true: every tensor the wrapper returns is
(a view of) one of its arguments or of those buffers. The callable checks it on every call
(:func:`returning_arguments`); a wrapper that returns a tensor of its own raises
:class:`StrayOutput` (the baseline: its contract misses an output, the fix is a curated contract
naming the optional output parameter or the returned output; a candidate: it computes into memory
no check reads).

What must stay true: importing this module needs neither torch nor triton (both are the worker's);
a module is executed once per (library, owner) per process and stays loaded for its life, and each
export's wrapper is taken from it once. Not defended: a candidate's file runs in the worker's
interpreter beside the baseline's module and could reach it through ``sys.modules`` (as a CUDA
candidate's module could write the process's memory); the search's candidates only change numbers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import re
import shutil
import sys
import time
import types
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeGuard

import libcst as cst

from contract.layout import SRC_DIR
from contract.sizes import instantiations_for
from extract.splice import SpliceError, candidate_overrides
from optimize.harness import returned_outputs
from optimize.harness.errors import HarnessError
from pipeline.digest import source_digest
from pipeline.record_io import Record, content_hash
from pipeline.records import BuildReport, Instantiation, Task

if TYPE_CHECKING:
    import torch

MANIFEST = "triton-library.json"
KEY_SCHEMA = "kernelsmith.triton-library/2"  # bump when the library changes in a way the key does not see
OWN_CODE = ("optimize/harness/triton_library.py",)
STAGING_PREFIX = ".staging-"


class TritonLibrary(Record):
    """The manifest of one built library: what the worker loads and calls."""

    module: str  # the wrapper's module as SGLang imports it: sglang.kernels.ops.attention.merge_state
    function: str  # the wrapper the exports call
    path: str  # the file's package-relative path (kernels/ops/attention/merge_state.py)
    file: str  # the spliced file's name inside the entry
    exports: list[str]  # export names this library answers (one per dtype: <entry>__<dtype>)
    key: str
    # per contract argument, in order: the wrapper's parameter it is passed as (by keyword, so an
    # optional or keyword-only output parameter is reached), "" for an output the wrapper returns
    params: list[str] = []
    # the outputs the wrapper allocates and returns (contract name -> index among the result's leaves),
    # in contract order: their buffers are the call's last arguments and never reach the wrapper
    returned: dict[str, int] = {}


class LibraryLoadFailed(HarnessError):
    """A Triton library's file does not import in the worker, or lacks its wrapper (whose fault: the caller says)."""


class StrayOutput(HarnessError):
    """A Triton wrapper returned a tensor that is none of its arguments (see the module docstring)."""


# ---------------------------------------------------------------------------- build (parent, no torch)


def exports_of(task: Task) -> list[str]:
    """The export names a Triton task's cases call: the entry per dtype (:func:`pipeline.build_plan.export_name`)."""
    from pipeline.build_plan import export_name

    return sorted(
        {export_name(task.contract.entry, inst) for inst in instantiations_for(task.contract, task.instantiations)}
    )


def wrapper_of(task: Task) -> tuple[str, str]:
    """(the wrapper's dotted module, its function) from ``task.triton.wrapper`` (``module:function``)."""
    if task.triton is None or ":" not in task.triton.wrapper:
        raise HarnessError(
            f"{task.op_id} is a {task.language} task without Triton facts (task.triton.wrapper)",
            fix=f"re-run `kernelsmith extract --ops {task.op_id}`",
        )
    module, _, function = task.triton.wrapper.partition(":")
    return module, function


def spliced_text(task_dir: str | os.PathLike[str], task: Task, regions: Mapping[str, str] | None) -> bytes:
    """The wrapper's file with ``regions`` spliced in (the task's own copy when None).

    Raises :class:`extract.splice.SpliceError` for regions that do not splice and :class:`HarnessError`
    for an edit to another file of the task (the worker loads the wrapper's file alone: an edited
    kernel file elsewhere would still be imported pristine from the package, unmeasured).
    """
    src = pathlib.Path(task_dir) / SRC_DIR
    original = (src / task.module).read_bytes()
    if regions is None:
        return original
    edited = candidate_overrides(task_dir, task, regions)
    elsewhere = sorted(rel for rel, data in edited.items() if rel != task.module and data != (src / rel).read_bytes())
    if elsewhere:
        raise HarnessError(
            f"the candidate edits {', '.join(elsewhere)}; the Triton harness loads edits to the wrapper's own file "
            f"({task.module}) only",
            fix="edit only the regions of the wrapper's file (its kernels and launch sites); kernels imported from "
            "other files are not loadable edited yet",
        )
    return edited.get(task.module, original)


def returned_of(task: Task) -> dict[str, int]:
    """The contract's returned outputs (name -> result leaf index); HarnessError unless they are outputs
    and the contract's last arguments (the wrapper's own parameters come first, in its order)."""
    args = task.contract.args
    marked = [(i, a.tensor) for i, a in enumerate(args) if a.tensor is not None and a.tensor.returned is not None]
    out = {t.name: t.returned for _, t in marked if t.returned is not None}
    wrong = [t.name for _, t in marked if t.role != "output"]
    if wrong or [i for i, _ in marked] != list(range(len(args) - len(marked), len(args))):
        raise HarnessError(
            f"{task.op_id}: the returned output(s) {', '.join(out)} must be outputs and the contract's last "
            "arguments" + (f" ({', '.join(wrong)} is not role output)" if wrong else ""),
            fix=f"reorder extract/curated/{task.op_id}.toml: the wrapper's parameters first, then each output it "
            'returns (role = "output", returned = its index in the result)',
        )
    if len(set(out.values())) != len(out):
        raise HarnessError(
            f"{task.op_id}: two returned outputs name the same result item ({out})",
            fix=f"give each output in extract/curated/{task.op_id}.toml its own `returned` index",
        )
    return out


def params_of(task: Task) -> list[str]:
    """Per contract argument, the wrapper's parameter that takes it (the task's ``entry_signature``:
    the parameter that feeds it), "" for a returned output; HarnessError when one has none."""
    signature = task.entry_signature
    if signature is None:
        raise HarnessError(
            f"{task.op_id}: the task has no entry signature, so the wrapper's parameters are unknown",
            fix=f"re-run `kernelsmith extract --ops {task.op_id}`",
        )
    takes = {p.feeds: p.name for p in signature.params if p.feeds and p.via != "size"}
    out: list[str] = []
    for arg in task.contract.args:
        name = arg.tensor.name if arg.tensor is not None else arg.scalar.name if arg.scalar is not None else ""
        if arg.tensor is not None and arg.tensor.returned is not None:
            out.append("")
        elif name in takes:
            out.append(takes[name])
        else:
            raise HarnessError(
                f"{task.op_id}: contract argument {name} is no parameter of {signature.module}.{signature.function}",
                fix=f"name the argument as the wrapper's parameter in extract/curated/{task.op_id}.toml, or mark an "
                "output it allocates and returns with `returned`",
            )
    return out


def library_key(task: Task, text: bytes, params: Sequence[str], returned: Mapping[str, int]) -> str:
    """The content key: the spliced text, the wrapper, the exports and how the call is made
    (:func:`params_of`, :func:`returned_of`, which the caller has already computed), and this code."""
    module, function = wrapper_of(task)
    exports = "\n".join(exports_of(task))
    how = ",".join(params) + "|" + ",".join(f"{name}={index}" for name, index in returned.items())
    return content_hash(KEY_SCHEMA, module, function, task.module, text, exports, how, source_digest(OWN_CODE))


def build(
    task_dir: str | os.PathLike[str],
    task: Task,
    *,
    cache_root: str | os.PathLike[str],
    regions: Mapping[str, str] | None = None,
) -> BuildReport:
    """The library of ``regions`` (the baseline when None) in ``cache_root/<key>/``; see the module docstring."""
    start = time.monotonic()

    def failed(text: str) -> BuildReport:
        return BuildReport(ok=False, key="", seconds=time.monotonic() - start, stderr=text)

    module, function = wrapper_of(task)
    try:
        returned, params = returned_of(task), params_of(task)
        text = spliced_text(task_dir, task, regions)
    except SpliceError as err:
        return failed(f"the regions cannot be spliced into {task.module}: {err}")
    except HarnessError as err:
        return failed(str(err))
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as err:
        return failed(
            f"{task.module} does not parse after the edit: line {err.raw_line}: {err.message}\n"
            "fix: the region is not valid Python; write it again"
        )
    key = library_key(task, text, params, returned)
    cache_root = pathlib.Path(cache_root)
    entry = cache_root / key
    name = pathlib.PurePosixPath(task.module).name
    manifest = entry / MANIFEST
    if manifest.is_file() and (entry / name).is_file():
        return BuildReport(ok=True, key=key, seconds=time.monotonic() - start, library=str(manifest), cached=True)
    staging = cache_root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    try:
        (staging / name).write_bytes(text)
        record = TritonLibrary(
            module=module,
            function=function,
            path=task.module,
            file=name,
            exports=exports_of(task),
            key=key,
            params=params,
            returned=returned,
        )
        (staging / MANIFEST).write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
        try:
            os.replace(staging, entry)
        except OSError:  # another builder published the same key first: its entry is identical
            if not manifest.is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return BuildReport(ok=True, key=key, seconds=time.monotonic() - start, library=str(manifest))


def build_units(
    task_dir: str | os.PathLike[str],
    task: Task,
    units: Sequence[Sequence[Instantiation]],
    *,
    cache_root: str | os.PathLike[str],
    regions: Mapping[str, str] | None = None,
) -> tuple[BuildReport, list[str]]:
    """One library serves every unit (Triton specialises per dtype at launch): (its report, its path per unit)."""
    report = build(task_dir, task, cache_root=cache_root, regions=regions)
    return report, [report.library or ""] * len(units)


# ---------------------------------------------------------------------------- load (worker)

_MODULES: dict[tuple[str, str], tuple[TritonLibrary, types.ModuleType]] = {}
#: (library, owner, export) -> the checked wrapper, taken once: a later rebinding of the module's name does not move it
_CALLABLES: dict[tuple[str, str, str], Callable[..., object]] = {}


def is_library(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a Triton library (its manifest) rather than a tvm-ffi module."""
    return os.path.basename(os.fspath(path)) == MANIFEST


def use_package(package_dir: str | None) -> None:
    """Make ``import sglang.<...>`` resolve in ``package_dir`` (the carried package; None: nothing to do)."""
    if package_dir:
        from pipeline.sglang_package import install

        install(package_dir)


def module_name(library: TritonLibrary, owner: str) -> str:
    """The unique name ``library`` runs under for ``owner`` ("baseline", "candidate")."""
    return f"{library.module}__ks_{library.key[:16]}_{re.sub(r'[^A-Za-z0-9_]', '_', owner) or 'module'}"


def load(path: str | os.PathLike[str], owner: str) -> tuple[TritonLibrary, types.ModuleType]:
    """The library's manifest and its module for ``owner``, executed once per process."""
    cache_key = (os.path.abspath(os.fspath(path)), owner)
    if cache_key in _MODULES:
        return _MODULES[cache_key]
    manifest = pathlib.Path(cache_key[0])
    if not manifest.is_file():
        raise HarnessError(
            f"Triton library {manifest} does not exist", fix="rebuild it (the build cache may have moved)"
        )
    library = TritonLibrary.model_validate_json(manifest.read_text(encoding="utf-8"))
    name = module_name(library, owner)
    spec = importlib.util.spec_from_file_location(name, manifest.parent / library.file)
    if spec is None or spec.loader is None:
        raise HarnessError(f"cannot make an import spec for {manifest.parent / library.file}", fix="rebuild it")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # the entry is never written after publication
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - whatever the file raises at import is reported with its name
        del sys.modules[name]
        missing = getattr(err, "name", "") or ""
        fix = (
            "the worker needs the carried sglang package: WorkerRequest.sglang_package (the harness sets it "
            "from the task's source, else `extract.sources.acquire`)"
            if isinstance(err, ImportError) and missing.split(".")[0] == "sglang"
            else "the file must import as SGLang imports it; fix the edit (a module-level error) or the environment"
        )
        raise LibraryLoadFailed(
            f"{library.path} ({owner}) does not import: {type(err).__name__}: {err}", fix=fix
        ) from None
    finally:
        sys.dont_write_bytecode = writes
    _MODULES[cache_key] = (library, module)
    return library, module


def function(path: str | os.PathLike[str], export: str, *, owner: str) -> Callable[..., object]:
    """The wrapper behind ``export`` in ``owner``'s module of the library at ``path``, checked on every call."""
    cache_key = (os.path.abspath(os.fspath(path)), owner, export)
    if cache_key in _CALLABLES:
        return _CALLABLES[cache_key]
    library, module = load(path, owner)
    if export not in library.exports:
        raise HarnessError(
            f"Triton library {os.fspath(path)} has no export {export!r} (it has {', '.join(library.exports)})",
            fix="the build and the request disagree on export names; rebuild it",
        )
    wrapper = getattr(module, library.function, None)
    if not callable(wrapper):
        raise LibraryLoadFailed(
            f"{library.path} ({owner}) defines no function {library.function}",
            fix=f"keep the wrapper {library.function} in the file (the task's entry)",
        )
    where = f"{library.path}::{library.function}"
    _CALLABLES[cache_key] = returning_arguments(wrapper, where, library.params, library.returned)
    return _CALLABLES[cache_key]


def returning_arguments(
    wrapper: Callable[..., object], where: str, params: Sequence[str], returned: Mapping[str, int]
) -> Callable[..., object]:
    """``wrapper`` called with the contract's arguments in order, raising :class:`StrayOutput` when it
    returns a tensor none of them holds.

    ``params`` (per argument, the wrapper's parameter: :func:`params_of`) passes each by keyword. An
    argument whose parameter is "" is the buffer of a returned output (``returned``: name -> result
    leaf, in contract order): the wrapper never gets it, its allocations claim it
    (:func:`optimize.harness.returned_outputs.claimed`) and the named result leaf must be it.
    """
    names, leaves = list(returned.keys()), list(returned.values())

    def call(*args: object) -> object:
        kwargs = {param: value for param, value in zip(params, args, strict=True) if param}
        buffers = [value for param, value in zip(params, args, strict=True) if not param]
        with returned_outputs.claimed(buffers) if buffers else contextlib.nullcontext():
            result = wrapper(**kwargs)
        returned_outputs.check(result, buffers, leaves, names, where)
        stray = stray_tensors(result, args)
        if stray:
            raise StrayOutput(
                f"{where} returned {', '.join(stray)}, not in any argument: the harness checks only the buffers "
                "it passes, so that result would go unchecked",
                fix="where the wrapper takes that output as an optional argument, name it in a curated contract "
                "(extract/curated/<op>.toml) with role output, as merge_state_triton's `output`; where it has no "
                "such parameter, name the output after the wrapper's arguments with `returned` = its result index",
            )
        return result

    return call


def _is_tensor(value: object) -> TypeGuard[torch.Tensor]:
    return hasattr(value, "untyped_storage") and hasattr(value, "shape")


def stray_tensors(result: object, args: Sequence[object]) -> list[str]:
    """The returned tensors (described) whose storage is no argument's: a tensor's own or a view's is fine."""
    held = {a.untyped_storage().data_ptr() for a in args if _is_tensor(a)}
    out = []
    for index, leaf in enumerate(returned_outputs.leaves(result)):
        if _is_tensor(leaf) and leaf.untyped_storage().data_ptr() not in held:
            out.append(f"a tensor of shape {tuple(leaf.shape)} (result item {index})")
    return out


__all__ = [
    "MANIFEST",
    "LibraryLoadFailed",
    "StrayOutput",
    "TritonLibrary",
    "build",
    "build_units",
    "exports_of",
    "function",
    "is_library",
    "load",
    "module_name",
    "returning_arguments",
    "spliced_text",
    "stray_tensors",
    "use_package",
]
