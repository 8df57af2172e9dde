"""Which editable regions an op never runs, so that no candidate edits them.

Why: extraction hands an op every function of its kernel file, and a file often holds
several ops' launchers and kernels (``deepseek_v4/hash_topk.cuh``: ``HashTopKKernel`` for
moe.hash_topk, ``MaskKernel`` for moe.mask_topk_ids). A transform applied to "every kernel"
then edits another op's kernel too. The harness validates and times only what this op's
exports run, so such an edit would reach the patch unmeasured (found in the PR of
mask_topk_ids's early-trigger candidate, H200 sweep of 2026-12-02).

A region is *foreign* when it is positively another op's: a launcher region none of whose
launches belongs to an exported wrapper (``Instantiation.wrappers``, template arguments
dropped), or a kernel only such launches start. What must stay true: when no launch can
be matched to an export (function-pointer launches, helpers the region model does not
follow) nothing is foreign, so a region the reach model cannot place stays editable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from optimize.cuda_regions import Region


def bare_name(wrapper: str) -> str:
    """``&Kernel<4, true>::run`` -> ``Kernel::run``: the name a launcher is defined under."""
    name = wrapper.strip().lstrip("&").strip()
    while True:
        shorter = re.sub(r"<[^<>]*>", "", name)
        if shorter == name:
            return name.replace(" ", "")
        name = shorter


def foreign_regions(regions: Mapping[str, str], wrappers: Iterable[str]) -> frozenset[str]:
    """Names of the regions that belong to other ops (see the module doc); empty when unsure."""
    exported = {bare_name(w) for w in wrappers}
    owners = {name.split("::")[0] for name in exported if "::" in name}
    try:
        region = Region(regions)
    except Exception:  # noqa: BLE001 - a region the parser cannot read is left alone
        return frozenset()

    def ours(launch) -> bool:
        func = launch.func
        if func is None:
            return False
        return func.qualname in exported or func.name in exported or (func.owner_name or "") in owners

    mine: set[str] = set()  # our launcher regions and the kernels they start
    callers: set[str] = set()  # our launcher regions
    theirs: dict[str, set[str]] = {}  # launcher region -> kernels its launches start
    names: dict[str, set[str]] = {}  # launcher region -> the functions launching there
    matched = False
    for launch in region.launches:
        kernels = set(region.launched_kernels(launch))
        if ours(launch):
            matched = True
            mine.update(kernels)
            mine.add(launch.doc.span)
            callers.add(launch.doc.span)
        else:
            theirs.setdefault(launch.doc.span, set()).update(kernels)
            if launch.func is not None:  # how a caller names it: the struct of a method, else the function
                names.setdefault(launch.doc.span, set()).add(launch.func.owner_name or launch.func.name)
    if not matched:
        return frozenset()
    # a launcher our launchers call (a helper such as ``launch_kernel<T>(...)``) is ours too
    grew = True
    while grew:
        grew = False
        for span in [s for s in theirs if s not in mine]:
            called = any(
                re.search(rf"\b{re.escape(name)}\b", regions.get(own, ""))
                for name in names.get(span, ())
                for own in callers
            )
            if called:
                mine.add(span)
                callers.add(span)
                mine.update(theirs[span])
                grew = True
    kernel_span = {k.name: k.doc.span for k in region.kernels}
    foreign = {span for span in theirs if span not in mine}
    for kernels in theirs.values():
        foreign.update(kernel_span[k] for k in kernels - mine if k in kernel_span and kernel_span[k] not in mine)
    return frozenset(name for name in foreign if name in regions)


def confine(base: Mapping[str, str], edited: Mapping[str, str], foreign: frozenset[str]) -> dict[str, str]:
    """``edited`` with every foreign region given back its ``base`` text."""
    return {name: (base.get(name, text) if name in foreign else text) for name, text in edited.items()}


def task_wrappers(task) -> list[str]:
    """The launcher names every instantiation of ``task`` exports (``Instantiation.wrappers``)."""
    return [target for inst in task.instantiations for _, target in inst.wrappers]


__all__ = ["bare_name", "confine", "foreign_regions", "task_wrappers"]
