"""Cache hints for streamed data: SGLang's typed accesses made evict-first (``ld/st.global.cs``).

SGLang's elementwise and norm kernels read and write global memory through
``device::load_as<T>(ptr, offset)`` and ``device::store_as<T>(ptr, value, offset)``
(``sgl_kernel/utils.cuh``): plain loads and stores. For data touched once per call
(activations in, activations out) an evict-first hint keeps it from pushing out of
L2 what is read again (a norm's weight, the next kernel's input).
:func:`streaming_hints` renames those calls in kernels and device functions to
``load_as_streaming`` / ``store_as_streaming`` and puts their definitions, once, before the first
edited function: for a 16-, 8- or 4-byte ``T`` aligned to its size they go through
``__ldcs`` / ``__stcs`` on ``int4`` / ``int2`` / ``int`` (the same bytes, the same
order), any other ``T`` falls back to the plain access.

What must stay true: only the callee's name changes at each site (its template
argument and arguments are the same bytes); ``.cs`` is a coherent access, so a load
after a store to the same address still sees it (no ``.nc``); functions inside a
struct or class are left alone (a helper defined before them would be a member).
"""

from __future__ import annotations

from collections.abc import Mapping

from optimize.cuda_regions import Region
from optimize.cuda_sites import typed_accesses
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, TransformError, apply_edits
from optimize.transforms.spec import Params, TransformSpec

#: SGLang's typed access -> the hinted one (``device::`` qualified or not)
RENAMES = {"load_as": "load_as_streaming", "store_as": "store_as_streaming"}
WHICH = {"loads": ("load_as",), "stores": ("store_as",), "both": ("load_as", "store_as")}

HELPERS = b"""#ifndef SGL_STREAMING_ACCESS_DEFINED
#define SGL_STREAMING_ACCESS_DEFINED
// device::load_as / store_as with an evict-first (streaming) cache hint: ld/st.global.cs
template <typename T>
__device__ __forceinline__ T load_as_streaming(const void* ptr, int64_t offset = 0) {
  const T* p = static_cast<const T*>(ptr) + offset;
  if constexpr (sizeof(T) == 16 && alignof(T) >= 16) {
    const int4 v = __ldcs(reinterpret_cast<const int4*>(p));
    return *reinterpret_cast<const T*>(&v);
  } else if constexpr (sizeof(T) == 8 && alignof(T) >= 8) {
    const int2 v = __ldcs(reinterpret_cast<const int2*>(p));
    return *reinterpret_cast<const T*>(&v);
  } else if constexpr (sizeof(T) == 4 && alignof(T) >= 4) {
    const int v = __ldcs(reinterpret_cast<const int*>(p));
    return *reinterpret_cast<const T*>(&v);
  } else {
    return *p;
  }
}
template <typename T>
__device__ __forceinline__ void store_as_streaming(void* ptr, std::type_identity_t<T> val, int64_t offset = 0) {
  T* p = static_cast<T*>(ptr) + offset;
  if constexpr (sizeof(T) == 16 && alignof(T) >= 16) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&val));
  } else if constexpr (sizeof(T) == 8 && alignof(T) >= 8) {
    __stcs(reinterpret_cast<int2*>(p), *reinterpret_cast<const int2*>(&val));
  } else if constexpr (sizeof(T) == 4 && alignof(T) >= 4) {
    __stcs(reinterpret_cast<int*>(p), *reinterpret_cast<const int*>(&val));
  } else {
    *p = val;
  }
}
#endif  // SGL_STREAMING_ACCESS_DEFINED

"""


def streaming_hints(regions: Mapping[str, str], *, what: str = "both") -> dict[str, str]:
    """Give SGLang's typed loads, stores or both in device code an evict-first hint (see the module doc)."""
    which = WHICH.get(what)
    if which is None:
        raise TransformError(f"streaming_hints: what={what!r}; known: {sorted(WHICH)}")
    region = Region(regions)
    edits: list[Edit] = []
    first: tuple[str, int] | None = None
    order = list(regions)
    for f in region.device_code:
        if f.owner is not None:
            continue
        sites = [(a, b, RENAMES[name]) for a, b, name in typed_accesses(f, which)]
        if not sites:
            continue
        span = f.doc.span
        start = f.node.start_byte if not f.templates else f.templates[-1].start_byte
        if first is None or order.index(span) < order.index(first[0]) or (span == first[0] and start < first[1]):
            first = (span, start)
        edits += [Edit(span, a, b, new.encode()) for a, b, new in sites]
    if first is None:
        raise NotApplicable("streaming_hints", f"no device::{'/'.join(which)} call in device code outside a struct")
    edits.append(Edit(first[0], first[1], first[1], HELPERS))
    return apply_edits("streaming_hints", regions, edits)


def _streaming_targets(features: Features, point: Params) -> list[Params]:
    what = str(point.get("what", "both"))
    return [{"what": what}] if features.static.typed_accesses and what in WHICH else []


#: before fast math: both rename callees, and fast math (anywhere) goes last
SPECS = (
    TransformSpec(
        "streaming_hints",
        streaming_hints,
        {"what": f"which typed accesses get an evict-first hint: {sorted(WHICH)}"},
        (),
        _streaming_targets,
        "device::load_as / store_as -> evict-first (ld/st.global.cs) accesses",
        choice=("what",),
    ),
)

__all__ = ["HELPERS", "RENAMES", "SPECS", "WHICH", "streaming_hints"]
