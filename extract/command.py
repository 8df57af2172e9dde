"""``kernelsmith extract``: index SGLang's kernels, write tasks, check they compile.

Steps, each resumable:

1. **Sources**: ``extract.sources.acquire`` (the pinned wheel, or ``--sglang``).
2. **Index**: the C++ scan (``extract.index.scan_tree``) and the Python scan
   (``extract.pyops.scan_ops``), cached under ``<cache>/index/<key>.json`` where
   the key covers every source byte both scans read and the scanners' code, so a
   rerun on the same tree loads it in well under a second. Written to
   ``work/index.json`` (paths relative to the package root).
3. ``--list``: a table of ops (id, entry points, kernels, files) and totals; stops there.
4. **Tasks** for ``--ops A B`` / ``--all`` / the default ops
   (``pipeline.config.DEFAULT_OPS``), via ``extract.tasks.write_task``. A task
   whose ``.extract-key`` matches its inputs is current and skipped.
5. **Compile check** (unless ``--no-compile`` / ``extract.compile_check = false``):
   every new task's baseline is built with ``pipeline.build`` (nvcc, tvm-ffi
   wrapper, ``-Xptxas=-v``), in parallel (``extract.jobs``). ``pipeline.build``
   exports each wrapper as ``<export>__<dtype>``, so one build holds at most one
   instantiation per dtype: a task with several per dtype (rmsnorm: one per
   width) is built as several units, and ``task.json``'s ``baseline_build`` is
   their merge (ok only when all are; ptxas resources of all; ``key`` the hash of
   the unit keys; ``library`` set only for a single unit). When a unit fails and
   holds several instantiations, each is retried alone; those that do not
   compile (an unsupported dtype or width) are dropped from the task with a note,
   with the catalog shapes only they served, when at least one compiles.
6. ``--all`` ends with a coverage line (op modules that call ``load_jit`` -> how
   many yielded a task -> how many of those compiled) and writes the full
   report, every failure with its reason, to ``work/coverage.json``.

Failure handling: every failure is per op (recorded, reported, the run goes
on); results written so far are kept; a missing nvcc raises ToolchainError
(one-line cause and fix) after the tasks are written. Exit status: 0 when every
requested op has a task (and, with the check, a compiling baseline); 1
otherwise; with ``--all`` the coverage report is the product and the exit status
is 0 once it is written.
"""

from __future__ import annotations

import difflib
import json
import pathlib
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field

from contract import layout
from contract.sizes import SYNTHETIC_MODEL
from extract import pyops, sources, tasks
from extract.compile_check import compile_tasks
from extract.errors import ToolchainError, UnknownOpError
from extract.jit_layout import layout_of
from pipeline.build import first_error
from pipeline.config import DEFAULT_OPS, Config
from pipeline.console import progress, working
from pipeline.digest import source_digest
from pipeline.errors import ConfigError, KernelsmithError, NotWritable, StaleRecordError
from pipeline.record_io import Record, VersionedRecord, content_hash, read_record, write_record
from pipeline.records import Index, OpEntry, SourceInfo, Task

INDEX_VERSION = "kernelsmith.index/1"


# =========================================================================== index


def _index_inputs(source: SourceInfo) -> list[pathlib.Path]:
    root = pathlib.Path(source.root)
    out: list[pathlib.Path] = []
    for folder in [*source.jit_dirs, *source.aot_dirs, layout_of(root).ops_dir]:
        base = root / folder
        if base.is_dir():
            out += [
                p
                for p in base.rglob("*")
                if p.is_file() and p.suffix in (".py", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")
            ]
    return sorted(set(out))


#: The scanners' code and queries, as globs over the repository root (pipeline.digest).
_INDEX_CODE = (
    "extract/index.py",
    "extract/file_scan.py",
    "extract/launch_sites.py",
    "extract/cxx_nodes.py",
    "extract/macros.py",
    "extract/cxx.py",
    "extract/jit_layout.py",
    "extract/jit_layout_ids.json",
    "extract/pyops/*.py",
    "source/*.py",
    "source/queries/*.scm",
)


def index_key(source: SourceInfo) -> str:
    """Content key of the index: every source file both scans read, the scanners' code and queries
    (``INDEX_VERSION`` covers how this module assembles the record)."""
    root = pathlib.Path(source.root)
    parts: list[str | bytes] = [INDEX_VERSION, source.model_dump_json(exclude={"root"})]
    for path in _index_inputs(source):
        parts += [path.relative_to(root).as_posix(), path.read_bytes()]
    # the code the two scans run (not contract/tasks/shapes: they do not shape the index)
    parts.append(source_digest(_INDEX_CODE))
    return content_hash(*parts)


def build_index(source: SourceInfo, cache_dir: pathlib.Path | None = None) -> tuple[Index, bool]:
    """The index of ``source`` and whether it came from the cache."""
    key = index_key(source)
    cached = cache_dir / "index" / f"{key}.json" if cache_dir is not None else None
    if cached is not None and cached.is_file():
        try:
            index = read_record(Index, cached)
            if index.source.root == source.root:
                return index, True
            return index.model_copy(update={"source": source}), True
        except (KernelsmithError, ValueError):
            pass  # stale or damaged: rebuild below
    from extract.index import scan_tree  # imported here: --help and --list from cache stay light

    started = time.perf_counter()
    with working("indexing SGLang's CUDA kernels and the Python that loads them (once per source)"):
        scan = scan_tree(source)
        ops, op_modules = pyops.scan_ops(source, scan)
    index = Index(
        source=source,
        files=scan.files,
        grammar=scan.grammar,
        kernels=scan.kernels,
        device_functions=scan.device_functions,
        launchers=scan.launchers,
        includes=scan.includes,
        ops=ops,
        op_modules=op_modules,
        parse_issues=scan.parse_issues,
        elapsed_s=time.perf_counter() - started,
    )
    if cached is not None:
        try:
            write_record(index, cached)
        except NotWritable as err:  # a cache we cannot fill costs time, not correctness
            print(f"index cache not written: {err.message}", file=sys.stderr)
    return index, False


# =========================================================================== op selection


def closest(name: str, ids: Iterable[str], n: int = 5) -> list[str]:
    """The known op ids nearest ``name`` (difflib's ratio, an edit-distance measure), over every id given:
    both languages' where the caller knows both, so a CUDA op's typo is not answered with Triton ops alone.
    A bare function name or a group matches on the part after the dot."""
    known = list(dict.fromkeys(ids))
    close = difflib.get_close_matches(name, known, n=n, cutoff=0.4)
    if not close:
        tail = name.split(".")[-1]
        close = [i for i in known if i.split(".")[-1] == tail or i.startswith(name + ".")][:n]
    return close


def select_ops(index: Index, requested: Iterable[str] | None, all_ops: bool) -> list[OpEntry]:
    """The ops to write tasks for; unknown ids raise UnknownOpError naming the closest ids."""
    by_id = {op.id: op for op in index.ops}
    if all_ops:
        return list(index.ops)
    wanted = list(requested or DEFAULT_OPS)
    unknown = [op for op in wanted if op not in by_id]
    if unknown:
        lines = [f"{name!r} (closest: {', '.join(closest(name, by_id)) or 'none'})" for name in unknown]
        raise UnknownOpError(
            f"unknown op {'; '.join(lines)}",
            fix="use an id from `kernelsmith extract --list` (<ops group>.<public function>)",
        )
    return [by_id[op] for op in dict.fromkeys(wanted)]


# =========================================================================== --list


def print_table(index: Index, out: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    stream = out or sys.stdout
    tty = getattr(stream, "isatty", lambda: False)()
    console = Console(file=stream, width=None if tty else 200)  # a pipe or a log gets wide rows, not 80 columns
    csrc = layout_of(pathlib.Path(index.source.root)).csrc_dir
    table = Table(title=f"SGLang {index.source.version or ''} JIT ops ({index.source.root})", show_lines=False)
    table.add_column("op", style="bold cyan", no_wrap=True)
    table.add_column("entry points")
    table.add_column("kernels")
    table.add_column("files")
    for op in index.ops:
        table.add_row(
            op.id,
            ", ".join(op.entry_points) or "-",
            ", ".join(op.kernels) or "-",
            ", ".join(f.removeprefix(f"{csrc}/") for f in op.files) or "-",
        )
    console.print(table)
    modules_with_ops = len({op.module for op in index.ops})
    console.print(
        f"{len(index.ops)} ops from {modules_with_ops} of {len(index.op_modules)} modules calling load_jit; "
        f"{len(index.kernels)} kernels, {len(index.device_functions)} device functions, "
        f"{len(index.launchers)} launchers in {len(index.files)} C++/CUDA files; "
        f"{len(index.parse_issues)} parse issues"
    )


# =========================================================================== compile check


class OpResult(Record):
    """One op's outcome in this run (coverage.json)."""

    op_id: str
    module: str
    task: str  # "written" | "current" | "failed"
    compile: str  # "ok" | "failed" | "skipped" | "not_run"
    reason: str = ""
    seconds: float = 0.0
    catalog_shapes: int = 0  # the task's shapes from a model of the catalog (0: only a synthetic one)


class Coverage(VersionedRecord):
    """``work/coverage.json``: what ``--all`` achieved, every failure with its reason."""

    source: SourceInfo
    op_modules: int
    modules_with_task: int
    modules_compiled: int
    ops: int
    ops_with_task: int
    ops_compiled: int
    ops_with_catalog_shapes: int = 0  # tasks with at least one catalog model's shape (the others: synthetic only)
    results: list[OpResult]
    module_failures: dict[str, str] = Field(default_factory=dict)  # module -> reason (no compiling task)


# =========================================================================== main


def task_for(index: Index, op: OpEntry, config: Config, program: pyops.Program) -> tuple[Task, str]:
    """``op``'s task in the work folder: the one there when it is current, else written anew;
    with "current" or "written". Raises what :func:`extract.tasks.write_task` raises."""
    work = config.work
    token_counts = tuple(config.extract.token_counts)
    key = tasks.task_key(index, op, config.extract.arch, token_counts, cache_dir=config.cache)
    if tasks.is_current(work, op.id, key):
        try:
            return layout.load_task(layout.task_dir(work, op.id)), "current"
        except StaleRecordError as err:  # damaged or another version: write it again
            print(f"  {op.id}: rewriting the task: {err.message}")
    refused = config.cache / "extract-refused" / f"{key}.json"  # the key covers every input of the task
    known = _refusal(refused)
    if known is not None:
        raise known
    try:
        task = tasks.write_task(
            index,
            op,
            work,
            arch=config.extract.arch,
            token_counts=token_counts,
            program=program,
            key=key,
            cache_dir=config.cache,
        )
    except KernelsmithError as err:
        _remember_refusal(refused, op.id, err)
        raise
    return task, "written"


def _refusal(path: pathlib.Path) -> ConfigError | None:
    """The refusal kept at ``path`` (:func:`_remember_refusal`); None where there is none or it cannot be read
    (a damaged entry: the op is tried again)."""
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
        return ConfigError(str(known["message"]), fix=str(known.get("fix") or ""))
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _remember_refusal(path: pathlib.Path, op_id: str, err: KernelsmithError) -> None:
    """Why ``op_id`` cannot be a task, kept under its task key: a no-op ``extract --all`` does not
    instantiate the same refused ops again (80 of 294 in 0.5.23, a minute and a half on 2 cores)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".tmp")
        staging.write_text(json.dumps({"op": op_id, "message": err.message, "fix": err.fix}), encoding="utf-8")
        staging.replace(path)
    except OSError:
        pass  # a cache we cannot fill costs time, not correctness


def ensure_tasks(config: Config, op_ids: Iterable[str]) -> dict[str, Task | str]:
    """A task for each of ``op_ids`` (CUDA ops of the index), written without the compile check where missing;
    an op that cannot be a task maps to the reason. For final validation's companions (:mod:`optimize.reach_ops`)."""
    source = sources.acquire(config.sglang.version, config.cache, config.sglang.src)
    index, _ = build_index(source, config.cache)
    by_id = {op.id: op for op in index.ops}
    program = pyops.Program(pathlib.Path(source.root))
    out: dict[str, Task | str] = {}
    for op_id in op_ids:
        op = by_id.get(op_id)
        if op is None:
            out[op_id] = f"{op_id} is not a CUDA op of the index of {source.root}"
            continue
        try:
            out[op_id] = task_for(index, op, config, program)[0]
        except KernelsmithError as err:
            out[op_id] = err.message
    return out


@dataclass(frozen=True)
class ExtractOptions:
    """What one ``kernelsmith extract`` is asked: the command line's flags, or ``kernelsmith run``'s choice.

    ``ops`` empty with ``all_ops`` False means the default ops (:data:`pipeline.config.DEFAULT_OPS`);
    ``language`` None means both languages for ``ops`` and ``listing``, CUDA for ``all_ops``."""

    ops: tuple[str, ...] = ()
    all_ops: bool = False
    listing: bool = False
    no_compile: bool = False
    language: str | None = None


def run(options: ExtractOptions, config: Config) -> int:
    """``kernelsmith extract`` (see the module docstring): the exit status.

    The steps: the index (:func:`_index_step`), the table of ``--list`` (:func:`_list_step`) or the
    Triton ops (:func:`_languages_step`), the tasks (:func:`_tasks_step`), the compile check
    (:func:`_compile_step`), the coverage of ``--all`` (:func:`_coverage_step`).
    """
    work = config.work
    work.mkdir(parents=True, exist_ok=True)
    source = sources.acquire(config.sglang.version, config.cache, config.sglang.src)
    index = _index_step(source, config, options.listing)
    language = options.language
    all_ops = options.all_ops
    if options.listing:
        return _list_step(index, source, config, language)
    requested = list(options.ops) or None
    if (
        language == "triton"
        or (language == "all")
        or (
            language is None
            and not all_ops
            and requested
            and any(op not in {o.id for o in index.ops} for op in requested)
        )
    ):
        return _languages_step(options, config, index, requested)
    selected = select_ops(index, requested, all_ops)
    compile_check = config.extract.compile_check and not options.no_compile
    program = pyops.Program(pathlib.Path(source.root))
    results, to_compile, folders = _tasks_step(index, selected, config, program, compile_check, all_ops)
    toolchain_error: ToolchainError | None = None
    if to_compile:
        toolchain_error = _compile_step(config, folders, to_compile, results, all_ops)
    if all_ops:
        _coverage_step(index, selected, results, compile_check and toolchain_error is None, work)
    if toolchain_error is not None:
        raise toolchain_error
    if all_ops:
        return 0
    failed = [r for r in results.values() if r.task == "failed" or r.compile == "failed"]
    return 1 if failed else 0


def _index_step(source: SourceInfo, config: Config, listing: bool) -> Index:
    """Build (or load) the index, write ``work/index.json`` (not needed by ``--list``) and print its summary and notes."""
    started = time.perf_counter()
    index, cached = build_index(source, config.cache)
    try:
        write_record(index, config.work / "index.json")
    except NotWritable:
        if not listing:
            raise
        # --list only reads: a read-only work dir still gets its table (index.json stays as it was)
    print(
        f"index: {len(index.ops)} ops, {len(index.op_modules)} modules calling load_jit, "
        f"{len(index.kernels)} kernels ({'cached' if cached else 'scanned'}, {time.perf_counter() - started:.1f} s)"
    )
    for note in (sources.unread_layout(source), sources.layout_note(source)):
        if note:
            print(f"note: {note}")
    return index


def _list_step(index: Index, source: SourceInfo, config: Config, language: str | None) -> int:
    """``--list``: the CUDA table, then the Triton one, as ``language`` asks; nothing else runs."""
    if language != "triton":
        print_table(index)
    if language in (None, "all", "triton"):
        from extract import triton_command

        triton_command.print_table(triton_command.load_index(source, config, listing=True, cuda=index))
    return 0


def _languages_step(options: ExtractOptions, config: Config, index: Index, requested: list[str] | None) -> int:
    """A run that takes Triton ops: its CUDA ops first (a run of their own), then the Triton ones; the worse status."""
    cuda_status = 0
    known = {o.id for o in index.ops}
    cuda_requested = [op for op in requested or [] if op in known]
    if options.language != "triton" and (options.all_ops or cuda_requested):
        cuda_status = run(replace(options, ops=tuple(cuda_requested), language="cuda"), config)
    return max(cuda_status, _triton(options, config, index, [op for op in requested or [] if op not in known]))


def _tasks_step(
    index: Index, selected: list[OpEntry], config: Config, program: pyops.Program, compile_check: bool, all_ops: bool
) -> tuple[dict[str, OpResult], dict[str, Task], dict[str, pathlib.Path]]:
    """Each selected op's task, one op's failure never stopping the others: (results, tasks to compile, folders)."""
    work = config.work
    results: dict[str, OpResult] = {}
    to_compile: dict[str, Task] = {}
    folders: dict[str, pathlib.Path] = {}
    for op in progress(selected, "tasks", len(selected)) if all_ops else selected:
        t0 = time.perf_counter()
        folder = layout.task_dir(work, op.id)
        folders[op.id] = folder
        try:
            task, state = task_for(index, op, config, program)
        except KernelsmithError as err:
            results[op.id] = OpResult(
                op_id=op.id,
                module=op.module,
                task="failed",
                compile="not_run",
                reason=err.message,
                seconds=time.perf_counter() - t0,
            )
            print(f"  {op.id}: no task: {err.message}")
            continue
        except Exception as err:  # noqa: BLE001 - one op's surprise must not stop the others
            results[op.id] = OpResult(
                op_id=op.id,
                module=op.module,
                task="failed",
                compile="not_run",
                reason=f"{type(err).__name__}: {err}",
                seconds=time.perf_counter() - t0,
            )
            print(f"  {op.id}: no task: {type(err).__name__}: {err}")
            continue
        if task.baseline_build is not None:
            status = "ok" if task.baseline_build.ok else "failed"
            reason = "" if task.baseline_build.ok else first_error(task.baseline_build.stderr)
        else:
            status, reason = ("not_run", "") if compile_check else ("skipped", "")
        results[op.id] = OpResult(
            op_id=op.id,
            module=op.module,
            task=state,
            compile=status,
            reason=reason,
            seconds=time.perf_counter() - t0,
            catalog_shapes=sum(1 for s in task.shapes if s.model != SYNTHETIC_MODEL),
        )
        if compile_check and task.baseline_build is None:
            to_compile[op.id] = task
        if not all_ops:
            print(
                f"  {op.id}: task {state} ({len(task.instantiations)} instantiations, {len(task.shapes)} shapes) -> {folder}"
            )
    return results, to_compile, folders


def _compile_step(
    config: Config,
    folders: dict[str, pathlib.Path],
    to_compile: dict[str, Task],
    results: dict[str, OpResult],
    all_ops: bool,
) -> ToolchainError | None:
    """Build the new tasks' baselines, save each task and update its result; a missing toolchain is returned, not raised."""
    work = config.work
    toolchain_error: ToolchainError | None = None
    print(f"compile check: {len(to_compile)} task(s), {config.extract.jobs} parallel job(s)")
    try:
        with working(f"nvcc: building every instantiation of {len(to_compile)} task(s) for {config.extract.arch}"):
            built = compile_tasks(folders, to_compile, config.cache / "builds", config.extract.jobs)
    except ToolchainError as err:
        toolchain_error = err
        built = {}
    for op_id, (task, reason) in built.items():
        layout.save_task(task, work)
        report = task.baseline_build
        result = results[op_id]
        results[op_id] = result.model_copy(
            update={"compile": "ok" if report and report.ok else "failed", "reason": reason}
        )
        if not all_ops:
            line = (
                # compiler seconds summed over the task's units, which build in parallel: not wall time
                f"{report.seconds:.1f} s of compiler time, {len(report.resources)} kernels in ptxas report"
                if report and report.ok
                else reason
            )
            print(f"  {op_id}: baseline {'compiles' if report and report.ok else 'FAILED'}: {line}")
    return toolchain_error


def _coverage_step(
    index: Index, selected: list[OpEntry], results: dict[str, OpResult], checked: bool, work: pathlib.Path
) -> None:
    """``--all``'s end: write ``work/coverage.json`` and print its line and each module's failure (``checked``: compiles counted)."""
    coverage = _coverage(index, selected, results, checked)
    write_record(coverage, work / "coverage.json")
    print(
        f"coverage: {coverage.op_modules} op modules call load_jit -> {coverage.modules_with_task} yielded a task"
        + (f" -> {coverage.modules_compiled} of those compiled" if checked else " (compile check not run)")
        + f"; {coverage.ops_with_task}/{coverage.ops} ops have tasks, {coverage.ops_compiled} compiled, "
        f"{coverage.ops_with_catalog_shapes} with catalog (real-model) shapes"
    )
    for module, reason in sorted(coverage.module_failures.items()):
        print(f"  {module}: {reason}")
    print(f"full report: {work / 'coverage.json'}")


def _triton(options: ExtractOptions, config: Config, index: Index, requested: list[str]) -> int:
    """The Triton ops of this run (``extract.triton_command``); unknown ids name the closest of both languages."""
    from extract import triton_command

    source = index.source
    tindex = triton_command.load_index(source, config, cuda=index)
    by_id = {op.id: op for op in tindex.ops}
    if options.all_ops:
        return triton_command.run(config, source, tindex, list(tindex.ops), all_ops=True, no_compile=options.no_compile)
    unknown = [op for op in requested if op not in by_id]
    if unknown:
        both = [*by_id, *(op.id for op in index.ops)]
        lines = [f"{name!r} (closest: {', '.join(closest(name, both)) or 'none'})" for name in unknown]
        raise UnknownOpError(
            f"unknown op {'; '.join(lines)}",
            fix="use an id from `kernelsmith extract --list` (CUDA and Triton ops)",
        )
    chosen = [by_id[op] for op in dict.fromkeys(requested)]
    return triton_command.run(config, source, tindex, chosen, all_ops=options.all_ops, no_compile=options.no_compile)


def _coverage(
    index: Index, selected: list[OpEntry], results: dict[str, OpResult], compiled_checked: bool = True
) -> Coverage:
    per_module: dict[str, list[OpResult]] = {m: [] for m in index.op_modules}
    for op in selected:
        if op.id in results:
            per_module.setdefault(op.module, []).append(results[op.id])
    with_task = {m for m, rs in per_module.items() if any(r.task != "failed" for r in rs)}
    compiled = {m for m, rs in per_module.items() if any(r.task != "failed" and r.compile == "ok" for r in rs)}
    failures: dict[str, str] = {}
    for module in index.op_modules:
        if module in compiled or (not compiled_checked and module in with_task):
            continue
        rs = per_module.get(module, [])
        if not rs:
            failures[module] = "no public op function reaches its load_jit calls"
            continue
        first = next((r for r in rs if r.task == "failed"), None) if module not in with_task else None
        first = first or next((r for r in rs if r.compile == "failed"), None) or rs[0]
        stage = "task" if module not in with_task else f"compile ({first.compile})"
        failures[module] = f"{stage}: {first.op_id}: {first.reason or first.compile}"
    return Coverage(
        source=index.source,
        op_modules=len(index.op_modules),
        modules_with_task=len(with_task),
        modules_compiled=len(compiled),
        ops=len(selected),
        ops_with_task=sum(1 for r in results.values() if r.task != "failed"),
        ops_compiled=sum(1 for r in results.values() if r.compile == "ok"),
        ops_with_catalog_shapes=sum(1 for r in results.values() if r.task != "failed" and r.catalog_shapes),
        results=sorted(results.values(), key=lambda r: r.op_id),
        module_failures=failures,
    )
