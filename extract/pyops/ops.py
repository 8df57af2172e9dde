"""The op scan: which public functions of SGLang's op modules are ops, and what each compiles and calls.

:func:`scan_ops` reads every module under ``kernels/ops`` that calls ``load_jit`` and
returns one :class:`~pipeline.records.OpEntry` per public op function (its module,
public names, the exports it calls, the files they compile, the kernels those
launch) plus the list of those modules. The helpers name a wrapper's C++ entry
(:func:`entry_parts`), list a built module's exports (:func:`call_exports`) and map
entries to kernels through the C++ index's launchers (:func:`resolve_kernels`).

What must stay true: op ids are unique and deterministic for a given tree (see
:func:`scan_ops`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Any

import libcst as cst

from extract.jit_layout import layout_of
from extract.pyops.modules import find_op_modules, parse_module
from extract.pyops.program import Program
from pipeline.records import LoadJitCall, OpEntry, SourceInfo


@dataclasses.dataclass(frozen=True)
class _Candidate:
    """A public function of an op module that reaches ``load_jit``: an op before ids are settled.

    ``names``: the public names it goes by (itself first, then module aliases);
    ``calls``: the ``load_jit`` calls it reaches; ``used``: the exports it calls.
    """

    rel: str
    public: str
    names: list[str]
    calls: list[LoadJitCall]
    used: list[str]


def entry_parts(entry: str) -> tuple[str | None, str]:
    """``&Foo<{args}>::run<false>`` -> ("Foo", "run"); a free function -> (None, name)."""
    text = entry.strip().lstrip("&").strip()
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    parts = [p.strip() for p in "".join(out).replace("template ", "").split("::") if p.strip()]
    if not parts:
        return None, text
    if len(parts) == 1:
        return None, parts[0]
    return parts[-2], parts[-1]


def entry_struct(entry: str) -> str | None:
    """The launcher struct named by a wrapper's C++ entry text, if any."""
    return entry_parts(entry)[0]


def _aliases(root: pathlib.Path | None, files: list[str], name: str) -> list[str]:
    """Structs a ``using <name> = std::conditional_t<c, A<...>, B<...>>`` alias in ``files`` can stand for."""
    if root is None:
        return []
    out: list[str] = []
    for file in files:
        path = root / file
        if not path.is_file():
            continue
        match = re.search(
            rf"using\s+{re.escape(name)}\s*=\s*([^;]+);", path.read_text(encoding="utf-8", errors="replace")
        )
        if match:
            out += [
                n
                for n in re.findall(r"\b([A-Za-z_]\w*)\s*<", match.group(1))
                if n not in ("conditional_t", "std") and n != name
            ]
    return out


def resolve_kernels(entries: list[str], files: list[str], scan: Any, root: pathlib.Path | None = None) -> list[str]:
    """Kernels launched through the given C++ entries, via the index's launchers.

    A struct entry (``Foo<...>::run``) matches launcher structs named ``Foo`` (or,
    when ``Foo`` is a ``using`` alias in the op's files, the structs it names); a
    free function matches launcher functions of that name. Launchers defined in
    the op's own files win over same-named ones elsewhere in the tree.
    """
    if scan is None:
        return []
    launchers = list(getattr(scan, "launchers", []) or [])
    known = {k.name for k in getattr(scan, "kernels", []) or []}
    kernels: list[str] = []
    for entry in entries:
        struct, method = entry_parts(entry)
        name = struct or method
        matches = [ln for ln in launchers if ln.name == name]
        if not matches and struct:
            targets = set(_aliases(root, files, struct))
            matches = [ln for ln in launchers if ln.name in targets]
        own = [ln for ln in matches if ln.file in files]
        for launcher in own or matches:
            for kernel in launcher.launches:
                if (not known or kernel in known) and kernel not in kernels:
                    kernels.append(kernel)
    return kernels


_SOURCE_EXPORT = re.compile(r"TVM_FFI_DLL_EXPORT_TYPED_FUNC\(\s*(\w+)\s*,\s*(.+?)\)\s*;")


def source_exports(call: LoadJitCall, root: pathlib.Path) -> list[tuple[str, str]]:
    """Exports a non-header-only module defines itself (``TVM_FFI_DLL_EXPORT_TYPED_FUNC``
    in its sources): the Python side names no wrappers for those."""
    if call.header_only:
        return []
    out: list[tuple[str, str]] = []
    for name in [*call.cuda_files, *call.cpp_files]:
        path = root / layout_of(root).csrc_dir / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            out += [(m.group(1), " ".join(m.group(2).split()).strip("()")) for m in _SOURCE_EXPORT.finditer(text)]
    return list(dict.fromkeys(out))


def call_exports(call: LoadJitCall, root: pathlib.Path) -> list[tuple[str, str]]:
    """(export, C++ entry) pairs a built module has: generated wrappers or source-side exports."""
    return [*call.cuda_wrappers, *call.cpp_wrappers, *source_exports(call, root)]


def _group_reexports(root: pathlib.Path, group: str) -> dict[str, str]:
    """Names a group's ``__init__.py`` imports from its modules: name -> dotted module."""
    ops_dir = layout_of(root).ops_dir
    path = root / ops_dir / group / "__init__.py"
    if not path.is_file():
        return {}
    try:
        module = parse_module(f"{ops_dir}/{group}/__init__.py", path.read_text(encoding="utf-8", errors="replace"))
    except cst.ParserSyntaxError:
        return {}
    return {local: source for local, (source, _) in module.imports.items()}


def scan_ops(source: SourceInfo, scan: Any = None) -> tuple[list[OpEntry], list[str]]:
    """Every public op function that reaches a ``load_jit`` call, and every module that calls one.

    Op id: ``<group>.<function>`` with group = the first folder under
    ``kernels/ops``. When several modules of one group define a public function of
    the same name, the module the group's ``__init__.py`` re-exports it from keeps
    the plain id, else the module whose path sorts first; every other one becomes
    ``<group>.<module path under the group, dotted>.<function>`` (e.g.
    ``layernorm.rmsnorm_hf.rmsnorm``). Ids are therefore unique and stable for a
    given tree.

    Which exports an op uses: the export names of the reached calls that the
    reached functions name as an attribute (``module.rmsnorm(...)``) or through
    ``getattr``; when none is named (the module object escapes), every export of
    the reached calls, with a note in the call's ``unresolved``.
    """
    root = pathlib.Path(source.root)
    layout = layout_of(root)
    texts = find_op_modules(root)
    program = Program(root, texts)
    scans = {rel: sc for rel in texts if (sc := program.scan(rel)) is not None}
    op_modules = sorted(rel for rel, sc in scans.items() if any(sc.calls.values()))
    reach = program.reach

    candidates: list[_Candidate] = []
    for rel in sorted(scans):
        if rel not in op_modules:
            continue
        module = scans[rel].module
        aliases: dict[str, list[str]] = {}
        for name, expr in module.constants.items():
            if isinstance(expr, cst.Name) and expr.value in module.functions and not name.startswith("_"):
                aliases.setdefault(expr.value, []).append(name)
        publics = sorted(n for n in module.functions if not n.startswith("_"))
        for private, names in aliases.items():
            if private.startswith("_"):
                publics.extend(n for n in names if n not in publics)
        naming: list[_Candidate] = []  # ops that call an export
        silent: list[_Candidate] = []  # reach load_jit, call none
        for public in publics:
            target = public if public in module.functions else next(p for p, ns in aliases.items() if public in ns)
            nodes = reach((rel, target))
            calls = [c for node in sorted(nodes) for c in program.scans[node[0]].calls.get(node[1], [])]
            if not calls:
                continue
            attrs: set[str] = set()
            for node in nodes:
                facts = program.scans[node[0]].facts.get(node[1])
                if facts is not None:
                    attrs |= facts.attrs
            exports = {id(c): [e for e, _ in call_exports(c, root)] for c in calls}
            all_exports = list(dict.fromkeys(e for c in calls for e in exports[id(c)]))
            used = [e for e in all_exports if e in attrs]
            names = [public] + [a for a in aliases.get(public, []) if a != public]
            if used:
                calls = [c for c in calls if any(e in used for e in exports[id(c)])]
                naming.append(_Candidate(rel, public, names, calls, used))
            else:
                note = "no public function of the module names an export; all are listed as entry points"
                calls = [c.model_copy(update={"unresolved": [*c.unresolved, note]}) for c in calls]
                silent.append(_Candidate(rel, public, names, calls, all_exports))
        # Public helpers that only build or probe the module (can_use_*, *_module,
        # prewarm_*) are not ops when another public function of the module calls
        # the kernels; they are kept only when none does (the module object is
        # handed to code outside kernels/ops).
        candidates += naming or silent

    by_id: dict[str, list[_Candidate]] = {}
    for cand in candidates:
        group, _ = layout.group_and_sub(cand.rel)
        by_id.setdefault(f"{group}.{cand.public}", []).append(cand)

    reexports: dict[str, dict[str, str]] = {}
    ops: list[OpEntry] = []
    for op_id, cands in sorted(by_id.items()):
        group = op_id.split(".")[0]
        if len(cands) > 1:
            if group not in reexports:
                reexports[group] = _group_reexports(root, group)
            reexported = reexports[group].get(op_id.split(".", 1)[1])
            cands = sorted(cands, key=lambda c: (scans[c.rel].module.dotted != reexported, c.rel))
        for i, cand in enumerate(cands):
            rel, public, names, calls, used = cand.rel, cand.public, cand.names, cand.calls, cand.used
            _, sub = layout.group_and_sub(rel)
            oid = layout.op_id(op_id if i == 0 else f"{group}.{sub}.{public}")
            files = []
            for call in calls:
                files += [f"{layout.csrc_dir}/{f}" for f in [*call.cuda_files, *call.cpp_files]]
            files = list(dict.fromkeys(files))
            entries = [t for c in calls for e, t in call_exports(c, root) if e in used]
            ops.append(
                OpEntry(
                    id=oid,
                    module=rel,
                    public_functions=names,
                    entry_points=used,
                    files=files,
                    kernels=resolve_kernels(entries, files, scan, root),
                    load_jit=calls,
                )
            )
    ops.sort(key=lambda o: o.id)
    return ops, op_modules


# =========================================================================== instantiation
