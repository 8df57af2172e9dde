"""The C++/CUDA index of an SGLang tree: kernels, device functions, launchers, includes.

:func:`scan_tree` reads every C, C++ and CUDA file under the source's JIT and
AOT folders and returns a :class:`ScanResult`, the C++ half of
``records.Index``. Everything downstream (ops, tasks, the splice of candidate
code) trusts the byte spans recorded here, so:

What must stay true:
- **Completeness.** Every ``__global__`` definition in the text is a kernel in
  the index, including those spelled through an attribute macro
  (``#define C4_KERNEL __global__ __launch_bounds__(128, 4)``) and those the
  grammar garbles; ``tests/test_index.py`` checks this against an independent
  regex over the raw text.
- **Spans are exact bytes of the original file** (``data[start:end]``), cover the
  ``template<...>`` header and any leading attribute macro, and end at the
  closing brace. Splicing a span's own bytes back reproduces the file.
- **Nothing stops the scan.** An unreadable file, a file tree-sitter cannot fully
  parse, or a bug on one file becomes a :class:`~pipeline.records.ParseIssue`;
  the other files are still indexed.
- **Deterministic output**: files, kernels, device functions and launchers are
  sorted by (file, start byte); the same tree gives the same JSON.
- Paths are relative to the package root (``kernels/jit/csrc/...``).

How it works, per file (:func:`extract.file_scan.scan_file`; the launch sites and aliases
in :mod:`extract.launch_sites`, the macro table and masking in :mod:`extract.macros`, the
syntax-tree helpers in :mod:`extract.cxx_nodes`, the C++ text scans in :mod:`extract.cxx`):

1. *Masking.* Attribute macros that the grammar cannot know (SGLang's
   ``SGL_DEVICE`` = ``__forceinline__ __device__``, per-file kernel macros like
   ``C4_KERNEL``, CUTLASS/CuTe's ``CUTLASS_DEVICE``, ``CUTE_UNROLL``) and
   attribute calls (``__launch_bounds__(...)``, ``__cluster_dims__(...)``) are
   replaced by spaces of the same length before parsing. Offsets do not move, so
   every span still indexes the original bytes; the masked positions remember
   whether they meant "kernel" or "device". The macro table comes from a
   pre-pass over every ``#define`` in the tree (:func:`extract.macros.collect_macros`) plus a
   short list of well-known CUTLASS/CuTe macros.
2. *Definitions.* ``source/queries/definitions.scm`` finds function definitions; a
   definition is a kernel when its head holds ``__global__`` or a masked kernel
   macro, a device function when it holds ``__device__`` or a masked device
   macro (a ``__host__ __device__`` function counts as a device function).
3. *Recovery.* Every ``__global__``/``__device__`` token and kernel/device macro
   in code (comments, strings and preprocessor lines blanked) that no
   definition's head covers and that starts a definition (``{`` comes before
   ``;``) is recovered from the text: name before the parameter list, balanced
   parentheses and braces, a ``template<...>`` header just before it.
4. *Launch sites* (``source/queries/launches.scm``): ``k<<<...>>>(...)``,
   ``LaunchKernel(...)...(k, ...)``, ``LaunchKernel(...).launch(k, ...)``, a
   named helper (``auto launch = LaunchKernel(...); launch(k, ...)``), the
   ``cudaLaunchKernel*``/``cudaLaunchCooperativeKernel``/``hipLaunchKernelGGL``
   APIs, and launch syntax written inside a ``#define`` (the macro launches
   where it is defined, or where it is invoked when defined at namespace
   level). The launcher is the innermost struct that encloses the site (when
   that struct is not local to a function), else the outermost enclosing
   function; a struct or function that calls a launcher *function* of the
   same file is a launcher too (``launch_qknorm_rope<k1, k2>(...)``).
5. *Aliases.* From the kernel expression, names are followed through what
   binds them, innermost first: the enclosing function's locals
   (``const auto kernel = k<...>;``) and the arguments its lambdas are called
   with (``run(k<...>)`` for ``[&](auto kernel) {...}``); the launcher struct's
   members (``static constexpr kernel_fn_t f = k<...>;``) and its member
   functions' return values (``select_kernel``); namespace-level names and
   helper functions' returns; members of other structs of the file
   (``Table<...>::kFn``). A bound name shadows a kernel of the same name, as
   in C++; unbound names are the kernel candidates.

Across files (:func:`index_texts`): includes are resolved, and each launch
site's candidates are matched against the kernels defined in the launcher's
file and its include closure; a call to a same-file launcher function adds
what that function launches. When a site yields no kernel (the kernel comes
in as a template argument or parameter from elsewhere), every kernel of that
closure named anywhere in the launcher is recorded instead: ``launches``
over-approximates rather than loses a kernel.

Known limits (measured on sglang 0.5.23: 4 of 341 kernels are in no
``launches``): a kernel chosen inside a macro body that does not itself
launch (Marlin's ``kernel = Marlin<...>`` dispatch macros), and launches
through a helper function defined in another file (``ku::launch_kernel``).
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import multiprocessing
import os
import pathlib
import posixpath
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import Field

from extract.file_scan import FileScan, scan_job
from extract.launch_sites import RawLauncher
from extract.macros import collect_macros
from pipeline.record_io import Record
from pipeline.records import FileDigest, KernelDef, LauncherDef, ParseIssue, SourceInfo
from source import treesitter as ts

SUFFIXES: tuple[str, ...] = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")

# Below this many bytes a process pool costs more than it saves.
_POOL_MIN_BYTES = 512 * 1024


class ScanResult(Record):
    """The C++/CUDA half of ``records.Index``; see the module docstring for its guarantees."""

    files: list[FileDigest]
    grammar: dict[str, str]  # file suffix -> grammar used ("cuda" | "cpp")
    kernels: list[KernelDef]
    device_functions: list[KernelDef]
    launchers: list[LauncherDef]
    includes: dict[str, list[str]]  # file -> resolved relative paths, or "<name>" when unresolved
    parse_issues: list[ParseIssue] = Field(default_factory=list)
    elapsed_s: float = 0.0


def source_files(source: SourceInfo) -> list[str]:
    """Package-relative paths of every C/C++/CUDA file under the JIT and AOT folders, sorted."""
    root = pathlib.Path(source.root)
    found: set[str] = set()
    for folder in [*source.jit_dirs, *source.aot_dirs]:
        base = root / folder
        if not base.is_dir():
            continue
        for dirpath, _dirs, names in os.walk(base):
            for name in names:
                if os.path.splitext(name)[1].lower() in SUFFIXES:
                    found.add((pathlib.Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(found)


def include_dirs(source: SourceInfo) -> list[str]:
    """Package-relative folders searched for ``#include`` (SGLang's ``-I`` for JIT kernels)."""
    root = pathlib.Path(source.root)
    dirs = []
    for folder in source.jit_dirs:
        dirs.append(posixpath.join(folder, "include"))
    for folder in source.aot_dirs:
        dirs.append(posixpath.normpath(posixpath.join(folder, "..", "include")))
    return [d for d in dirs if (root / d).is_dir()]


def _resolve_includes(
    path: str, specs: list[tuple[bool, str]], search: list[str], exists: Callable[[str], bool]
) -> list[str]:
    """Package-relative paths of what ``path`` includes, in order; ``<name>`` when unresolved.

    Quoted includes are looked up beside the including file first, then in the
    include folders; angle-bracket includes only in the include folders.
    """
    out: list[str] = []
    here = posixpath.dirname(path)
    for angle, name in specs:
        candidates = [] if angle else [posixpath.normpath(posixpath.join(here, name))]
        candidates += [posixpath.normpath(posixpath.join(d, name)) for d in search]
        resolved = next((c for c in candidates if not c.startswith("../") and exists(c)), None)
        entry = resolved if resolved is not None else f"<{name}>"
        if entry not in out:
            out.append(entry)
    return out


def _closure(start: str, includes: dict[str, list[str]]) -> set[str]:
    seen, stack = {start}, [start]
    while stack:
        for child in includes.get(stack.pop(), []):
            if not child.startswith("<") and child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _resolve_launchers(raws: list[RawLauncher], path: str, visible: set[str]) -> list[LauncherDef]:
    """Match one file's launch sites against the kernels visible from it.

    A site launches the visible kernels its expression ends at, plus whatever
    the same-file helper launchers it calls launch (to a fixed point). A site
    that yields nothing either way falls back to every visible kernel named in
    the launcher: the kernel came in through something we cannot follow (a
    parameter, a lambda argument), and losing it would be worse than listing a
    sibling.
    """
    own: dict[int, set[str]] = {raw.start_byte: set() for raw in raws}
    for raw in raws:
        for site in raw.sites:
            own[raw.start_byte] |= site.reached & visible
    total = {key: set(names) for key, names in own.items()}
    changed = True
    while changed:
        changed = False
        for raw in raws:
            for site in raw.sites:
                for helper in site.via:
                    extra = total.get(helper, set()) - total[raw.start_byte]
                    if extra:
                        total[raw.start_byte] |= extra
                        changed = True
    out = []
    for raw in raws:
        launches = set(total[raw.start_byte])
        for site in raw.sites:
            from_helpers = set().union(*(total.get(h, set()) for h in site.via)) if site.via else set()
            if not (site.reached & visible) and not from_helpers:
                launches |= raw.mentioned & visible
        out.append(
            LauncherDef(
                name=raw.name,
                qualified_name=raw.qualified_name,
                kind=raw.kind,
                file=path,
                start_byte=raw.start_byte,
                end_byte=raw.end_byte,
                line=raw.line,
                launches=sorted(launches),
                methods=raw.methods,
            )
        )
    return out


def index_texts(
    texts: Mapping[str, bytes],
    *,
    search: Iterable[str] = (),
    root: pathlib.Path | None = None,
    workers: int | None = None,
    issues: Iterable[ParseIssue] = (),
) -> ScanResult:
    """Index files given as bytes (package-relative path -> contents).

    ``search``: package-relative include folders. ``root``: the package root, so
    an include of a file that was not scanned still resolves when it exists on
    disk. ``workers``: processes for parsing (default: the CPU count, and none
    for small inputs); 1 scans in this process. ``issues``: problems found
    before indexing (unreadable files), kept in the result.
    """
    started = time.perf_counter()
    paths = sorted(texts)
    macros = collect_macros(texts[p] for p in paths)
    jobs = [(path, texts[path], macros) for path in paths]
    total = sum(len(t) for t in texts.values())
    workers = workers if workers is not None else (os.cpu_count() or 1)
    scans: list[FileScan] | None = None
    if workers > 1 and total >= _POOL_MIN_BYTES and len(jobs) > 1:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        try:
            with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                scans = list(pool.map(scan_job, jobs, chunksize=max(1, len(jobs) // (workers * 8))))
        except (OSError, concurrent.futures.process.BrokenProcessPool):
            scans = None  # no processes here (sandbox, resource limits): scan in this process
    if scans is None:
        scans = [scan_job(job) for job in jobs]

    known = set(paths)

    def exists(candidate: str) -> bool:
        return candidate in known or (root is not None and (root / candidate).is_file())

    search = list(search)
    includes = {scan.path: _resolve_includes(scan.path, scan.includes, search, exists) for scan in scans}
    kernels_by_file = {scan.path: {k.name for k in scan.kernels} for scan in scans}
    launchers: list[LauncherDef] = []
    for scan in scans:
        if scan.launchers:
            visible = set().union(*(kernels_by_file.get(f, set()) for f in _closure(scan.path, includes)))
            launchers.extend(_resolve_launchers(scan.launchers, scan.path, visible))

    def ordered(items: list[Any]) -> list[Any]:
        return sorted(items, key=lambda d: (d.file, d.start_byte, d.end_byte))

    all_issues = [*issues, *(issue for scan in scans for issue in scan.issues)]
    return ScanResult(
        files=[scan.digest for scan in scans if scan.digest is not None],
        grammar={suffix: ts.grammar_for("x" + suffix) for suffix in SUFFIXES},
        kernels=ordered([k for scan in scans for k in scan.kernels]),
        device_functions=ordered([d for scan in scans for d in scan.device_functions]),
        launchers=ordered(launchers),
        includes=includes,
        parse_issues=sorted(all_issues, key=lambda i: (i.file, i.line or 0)),
        elapsed_s=round(time.perf_counter() - started, 3),
    )


def scan_tree(source: SourceInfo, *, workers: int | None = None) -> ScanResult:
    """Index every C/C++/CUDA file of ``source`` (its JIT and AOT folders).

    ``elapsed_s`` covers reading and indexing. See :func:`index_texts` for
    ``workers``.
    """
    started = time.perf_counter()
    root = pathlib.Path(source.root)
    texts: dict[str, bytes] = {}
    unreadable: list[ParseIssue] = []
    for path in source_files(source):
        try:
            texts[path] = (root / path).read_bytes()
        except OSError as err:
            unreadable.append(ParseIssue(file=path, message=f"could not read: {err}"))
    result = index_texts(texts, search=include_dirs(source), root=root, workers=workers, issues=unreadable)
    return result.model_copy(update={"elapsed_s": round(time.perf_counter() - started, 3)})
