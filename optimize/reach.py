"""Which editable code an op never runs, so that no candidate edits it unmeasured.

Why: extraction hands an op every function of its kernel file, and a file often holds
several ops' launchers and kernels (``deepseek_v4/hash_topk.cuh``: ``HashTopKKernel`` for
moe.hash_topk, ``MaskKernel`` for moe.mask_topk_ids), sometimes in one struct
(``speculative/ngram_embedding.cuh``: ``NgramEmbeddingKernel`` has one static method per op,
four ops in all). A transform applied to "every kernel" or "every launch" then edits another
op's code too. The harness validates and times only what this op's entry runs, so such an
edit would reach the patch unmeasured (found in the PR of mask_topk_ids's early-trigger
candidate, H200 sweep of 2026-12-02; and in compute_n_gram_ids's PDL candidate of session 11,
which also changed the two update_token_table launches).

The model: the op's *reachable* host functions are the launchers its entry points export
(``Instantiation.wrappers`` whose exported name is one of ``Task.entry_points``, template
arguments dropped), every host function the task's files name outside the editable regions
(a ``#define LAUNCH(...) helper<...>(...)`` that a launcher calls: moe_topk_softmax.cuh's
``topkGatingSoftmaxLauncherHelper``; who uses that text is not known, so it counts as ours) and,
transitively, every host function their bodies mention (:func:`_mentions`). A launch is ours
when the function holding it is reachable. Then:

- a launcher region is *foreign* when none of its launches is ours, and a kernel region when
  only foreign launches start it;
- inside a launcher region that is ours, a host function that is not reachable is a *foreign
  function* (``NgramEmbeddingKernel::update_token_table`` for compute_n_gram_ids):
  :func:`confine` gives it back its baseline text while the op's own methods keep their edits.

What must stay true: when no launch can be matched to an export (function-pointer launches,
helpers the region model does not follow), nothing is foreign, so code the model cannot place
stays editable. Mentions are read generously (any text that may call a function counts), so a
mistake makes code *ours*, never foreign. Not covered: struct-level constants shared by
several ops' methods (``kBlockSize``) stay editable, their effect on the other ops unmeasured.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from optimize.cuda_functions import RegionFunction
from optimize.cuda_regions import Region


def bare_name(wrapper: str) -> str:
    """``&Kernel<4, true>::run`` -> ``Kernel::run``: the name a launcher is defined under."""
    name = wrapper.strip().lstrip("&").strip()
    while True:
        shorter = re.sub(r"<[^<>]*>", "", name)
        if shorter == name:
            return name.replace(" ", "")
        name = shorter


@dataclass(frozen=True)
class Foreign:
    """The code of a task only other ops run: whole regions, and host functions inside the op's own launcher regions."""

    regions: frozenset[str] = frozenset()
    functions: Mapping[str, frozenset[str]] = field(default_factory=dict)  # region -> qualified names

    def __bool__(self) -> bool:
        return bool(self.regions or self.functions)

    def names(self) -> list[str]:
        """Every foreign region, then every foreign function as ``region: Struct::method``, sorted."""
        return sorted(self.regions) + sorted(f"{r}: {q}" for r, names in self.functions.items() for q in names)

    def touched(
        self, base: Mapping[str, str], edited: Mapping[str, str], same: Callable[[str, str], bool] = str.__eq__
    ) -> list[str]:
        """The foreign regions and functions (as in :meth:`names`) whose text ``edited`` changes."""
        out = [r for r in sorted(self.regions) if r in edited and r in base and not same(base[r], edited[r])]
        for name, qualnames in sorted(self.functions.items()):
            if name not in edited or name not in base or same(base[name], edited[name]):
                continue
            old, new = _functions_in(name, base[name]), _functions_in(name, edited[name])
            for q in sorted(qualnames):
                if [t for k, t in old if k == q] != [t for k, t in new if k == q]:
                    out.append(f"{name}: {q}")
        return out


def _mentions(text: str, f: RegionFunction, within: str | None) -> bool:
    """Whether ``text`` (a body of a method of ``within``, or free text) may call ``f``.

    A free function by its name; a method by ``Struct::name`` (template arguments allowed), through
    an object (``.name`` / ``->name``), or by its bare name from a method of its own struct: so
    ``run`` in one struct's method does not make every struct's ``run`` reachable.
    """
    name = re.escape(f.name)
    if f.owner_name is None or f.owner_name == within:
        return re.search(rf"\b{name}\b", text) is not None
    owner = re.escape(f.owner_name)
    return re.search(rf"\b{owner}\s*(<[^;{{}}]*?>)?\s*::\s*(template\s+)?{name}\b|(\.|->)\s*{name}\b", text) is not None


def _reachable(region: Region, exported: set[str], outside: str) -> list[RegionFunction]:
    """The host functions the exported launchers (or the text outside the regions) run, by name, transitively."""
    todo = [f for f in region.hosts if f.qualname in exported or f.name in exported or _mentions(outside, f, None)]
    seen = {id(f): f for f in todo}
    while todo:
        body = todo.pop()
        text = body.doc.src[body.body.start_byte : body.body.end_byte].decode("utf-8", "replace")
        for f in region.hosts:
            if id(f) not in seen and _mentions(text, f, body.owner_name):
                seen[id(f)] = f
                todo.append(f)
    return list(seen.values())


def foreign_code(regions: Mapping[str, str], wrappers: Iterable[str], outside: str = "") -> Foreign:
    """What of ``regions`` only other ops run (see the module doc); empty when unsure.

    ``outside``: the task files' text outside the regions (:func:`outside_text`).
    """
    exported = {bare_name(w) for w in wrappers}
    try:
        region = Region(regions)
    except Exception:  # noqa: BLE001 - a region the parser cannot read is left alone
        return Foreign()
    reachable = {id(f) for f in _reachable(region, exported, outside)}
    mine: set[str] = set()  # our launcher regions and the kernels they start
    theirs: dict[str, set[str]] = {}  # launcher region -> kernels its other launches start
    for launch in region.launches:
        kernels = set(region.launched_kernels(launch))
        if launch.func is not None and id(launch.func) in reachable:
            mine.update(kernels)
            mine.add(launch.doc.span)
        else:
            theirs.setdefault(launch.doc.span, set()).update(kernels)
    if not mine:
        return Foreign()
    kernel_span = {k.name: k.doc.span for k in region.kernels}
    whole = {span for span in theirs if span not in mine}
    for kernels in theirs.values():
        whole.update(kernel_span[k] for k in kernels - mine if k in kernel_span and kernel_span[k] not in mine)
    functions: dict[str, set[str]] = {}
    for f in region.hosts:
        if f.doc.span in mine and f.doc.span in theirs and id(f) not in reachable:
            functions.setdefault(f.doc.span, set()).add(f.qualname)
    return Foreign(
        regions=frozenset(name for name in whole if name in regions),
        functions={name: frozenset(qs) for name, qs in functions.items() if name in regions},
    )


def outside_text(files: Mapping[str, bytes], spans: Iterable) -> str:
    """The text of the files holding a span (``Span``: file, start_byte, end_byte) outside every span, comments dropped.

    Only those files: the headers they include define helpers of their own (``LaunchKernel::launch``)
    whose names would make every namesake in the regions look called.
    """
    by_file: dict[str, list[tuple[int, int]]] = {}
    for span in spans:
        by_file.setdefault(span.file, []).append((span.start_byte, span.end_byte))
    parts: list[str] = []
    for path, cuts in sorted(by_file.items()):
        data, at = files.get(path, b""), 0
        for start, end in sorted(cuts):
            parts.append(data[at:start].decode("utf-8", "replace"))
            at = max(at, end)
        parts.append(data[at:].decode("utf-8", "replace"))
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", "\n".join(parts), flags=re.S)


def _functions_in(name: str, text: str) -> list[tuple[str, str]]:
    """(qualified name, definition text) of every function defined in one region text, in order."""
    region = Region({name: text})
    return [
        (f.qualname, f.doc.src[f.node.start_byte : f.node.end_byte].decode("utf-8", "replace")) for f in region.funcs
    ]


def _split(name: str, text: str) -> tuple[list[str], list[bytes], list[bytes]] | None:
    """Region text ``name`` cut at its function definitions: (qualified names, the n + 1 texts between
    and around them, the n definitions), so that joining gaps and definitions alternately gives it back.
    None when it does not parse or a definition holds another (a local struct's method)."""
    try:
        region = Region({name: text})
    except Exception:  # noqa: BLE001 - unreadable: not split
        return None
    src = region.docs[0].src
    funcs = sorted(region.funcs, key=lambda f: f.node.start_byte)
    if any(a.node.end_byte > b.node.start_byte for a, b in zip(funcs, funcs[1:])):
        return None
    cuts = [0, *(b for f in funcs for b in (f.node.start_byte, f.node.end_byte)), len(src)]
    pieces = [src[cuts[i] : cuts[i + 1]] for i in range(len(cuts) - 1)]
    return [f.qualname for f in funcs], pieces[0::2], pieces[1::2]


def _join(gaps: list[bytes], bodies: list[bytes]) -> str:
    return (gaps[0] + b"".join(body + gap for body, gap in zip(bodies, gaps[1:]))).decode("utf-8")


def _restore_functions(name: str, base: str, edited: str, qualnames: frozenset[str]) -> str:
    """``edited`` with the functions named ``qualnames`` given back their ``base`` text.

    Functions are matched by qualified name and order among namesakes (overloads). When the
    two texts do not define the same such functions, or either cannot be cut at its functions
    (:func:`_split`), the whole region goes back to ``base``: the op's own edits there are lost,
    but nothing unmeasured is kept.
    """
    old, new = _split(name, base), _split(name, edited)
    if old is None or new is None:
        return base
    theirs_old = [i for i, q in enumerate(old[0]) if q in qualnames]
    theirs_new = [j for j, q in enumerate(new[0]) if q in qualnames]
    if [old[0][i] for i in theirs_old] != [new[0][j] for j in theirs_new]:
        return base
    bodies = list(new[2])
    for i, j in zip(theirs_old, theirs_new):
        bodies[j] = old[2][i]
    return _join(new[1], bodies)


def confine(base: Mapping[str, str], edited: Mapping[str, str], foreign: Foreign) -> dict[str, str]:
    """``edited`` with every foreign region, and every foreign function of a shared region, given back its ``base`` text."""
    out: dict[str, str] = {}
    for name, text in edited.items():
        if name in foreign.regions:
            out[name] = base.get(name, text)
        elif name in foreign.functions and name in base and text != base[name]:
            out[name] = _restore_functions(name, base[name], text, foreign.functions[name])
        else:
            out[name] = text
    return out


def merge_functions(name: str, base: str, edits: Sequence[str]) -> str | None:
    """One text of region ``name`` holding every edit, or None when two of them change the same code.

    Twin ops (compute_n_gram_ids and its _decode twin) share a launcher region and, confined,
    each edits only its own methods there: the edits combine function by function. They
    combine only when every text defines the same functions in the same order, the text
    between functions is the base's in all of them, and no function is changed two different
    ways. Each op was measured with the other's functions as the base has them, and never
    runs those (:func:`foreign_code`), so the merged text is what each op measured.
    """
    split = [_split(name, text) for text in [base, *edits]]
    layouts = [layout for layout in split if layout is not None]
    if len(layouts) < len(split):
        return None
    names, between, bodies = layouts[0]
    if any(other[0] != names or other[1] != between for other in layouts[1:]):
        return None
    merged: list[bytes] = []
    for i, original in enumerate(bodies):
        changed = {layout[2][i] for layout in layouts[1:]} - {original}
        if len(changed) > 1:
            return None
        merged.append(changed.pop() if changed else original)
    return _join(between, merged)


def task_wrappers(task) -> list[str]:
    """The launchers ``task``'s entry points run: the targets of the wrappers it exports under those names.

    A module often exports several ops' wrappers (all four ngram_embedding ones); the harness
    calls only ``task.entry_points``. With no wrapper named so, every wrapper counts (unsure).
    """
    return entry_wrappers([(e, t) for inst in task.instantiations for e, t in inst.wrappers], task.entry_points)


def entry_wrappers(pairs: Iterable[tuple[str, str]], entry_points: Iterable[str]) -> list[str]:
    """The targets of the (export, target) ``pairs`` exported under one of ``entry_points``; every target when
    none is (unsure). For a task's instantiations, or an index entry's ``load_jit`` calls."""
    pairs = list(pairs)
    entries = set(entry_points)
    chosen = [target for export, target in pairs if export in entries]
    return chosen or [target for _, target in pairs]


__all__ = [
    "Foreign",
    "bare_name",
    "confine",
    "entry_wrappers",
    "foreign_code",
    "merge_functions",
    "outside_text",
    "task_wrappers",
]
