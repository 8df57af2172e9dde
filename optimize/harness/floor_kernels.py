"""The hand-written kernels the device's floors are timed with, loaded from PTX through the driver API.

Why hand-written: a floor must be a lower bound, so it is timed on the best plain way to do
the work, not on whatever torch launches. On the H200 (2026-12-05) torch's ``copy_`` of a
small uint8 tensor took 0.87 µs per call back to back in a graph, above what
``moe.mask_topk_ids``'s baseline takes for more bytes (0.75 µs at 64 tokens): its time ÷ floor
read 0.64-0.86, which is no floor. SGLang's kernels launch with programmatic dependent launch
(PDL), which lets one launch's start overlap the previous kernel's tail; torch's copy does not.
On the H200 (2026-12-05, one stream; BENCHMARKS.md section 7, "Floors") at 4 KiB moved: torch's
copy 0.873 µs, ``ks_copy16`` 1.105 µs plain and 0.616 µs with PDL; ``ks_empty`` 0.504 µs plain
and 0.402 µs with PDL. The launch, not the access width, is what the floor was missing.

So each floor kernel comes in two launches, plain and with PDL (the
``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`` attribute; the kernel triggers its
dependents first and waits for its predecessor before touching memory, the earliest trigger
and latest wait the data allows), and :mod:`optimize.harness.roofline` keeps the fastest:

- ``ks_empty``: does nothing (the smallest-kernel floor);
- ``ks_copy16``: one 16-byte vector load and store per thread, the widest access a thread
  has, no loop: at the sizes where latency, not bandwidth, sets the time, this is what a
  well-written streaming kernel does;
- ``ks_read16`` and ``ks_fill16``: the same stream that only reads (each thread folds its
  vector into a word it stores only if it equals :data:`SINK_MAGIC`, which a zero-filled
  source never does) and one that only writes: the floors of a call that reads far more
  than it writes, or the reverse (issue 14 item 6, "per access pattern").

No nvcc at run time: the PTX is assembled by the driver (``cuModuleLoadData``), and the
CPU tests assemble the same text with ``ptxas`` so a typo fails in CI, not on the GPU.
What must stay true: the copy and the fill write exactly ``n16`` vectors, the read stream
reads exactly ``n16`` and writes nothing, and none reads outside its source, so a floor
never times less work than the bytes it is charged with.
"""

from __future__ import annotations

import ctypes
from typing import Any

HEADER = """.version {version}
.target sm_{arch}
.address_size 64
"""

# thread i (of the whole grid) handles the 16 bytes at offset 16 * i, if i < n16; %rd5 = 16 * i
INDEX = """  .reg .pred %p;
  .reg .b32 %r<9>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd3, [n16];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  cvt.u64.u32 %rd5, %r3;
  add.u64 %rd4, %rd4, %rd5;
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE;
  shl.b64 %rd5, %rd4, 4;
"""

# the copy: load the source's vector, store it at the same offset of the destination
COPY_BODY = """  ld.param.u64 %rd1, [dst];
  ld.param.u64 %rd2, [src];
  cvta.to.global.u64 %rd6, %rd2;
  add.u64 %rd6, %rd6, %rd5;
  ld.global.v4.u32 {%r4, %r5, %r6, %r7}, [%rd6];
  cvta.to.global.u64 %rd7, %rd1;
  add.u64 %rd7, %rd7, %rd5;
  st.global.v4.u32 [%rd7], {%r4, %r5, %r6, %r7};"""

# the read stream: load the source's vector and fold it into one word, stored (to the 4-byte sink)
# only if it equals SINK_MAGIC, which a zero-filled source never does: the loads cannot be dropped
SINK_MAGIC = 0x5EED5EED
READ_BODY = f"""  ld.param.u64 %rd2, [src];
  cvta.to.global.u64 %rd6, %rd2;
  add.u64 %rd6, %rd6, %rd5;
  ld.global.v4.u32 {{%r4, %r5, %r6, %r7}}, [%rd6];
  xor.b32 %r8, %r4, %r5;
  xor.b32 %r8, %r8, %r6;
  xor.b32 %r8, %r8, %r7;
  setp.ne.u32 %p, %r8, {SINK_MAGIC};
  @%p bra DONE;
  ld.param.u64 %rd1, [sink];
  cvta.to.global.u64 %rd7, %rd1;
  st.global.u32 [%rd7], %r8;"""

# the write stream: store a zero vector at the destination's offset
FILL_BODY = """  ld.param.u64 %rd1, [dst];
  cvta.to.global.u64 %rd7, %rd1;
  add.u64 %rd7, %rd7, %rd5;
  mov.b32 %r4, 0;
  st.global.v4.u32 [%rd7], {%r4, %r4, %r4, %r4};"""

# (kernel, its .u64 parameters in launch order, body): each is emitted plain and as <kernel>_pdl
KERNELS = (
    ("ks_empty", (), ""),
    ("ks_copy16", ("dst", "src", "n16"), INDEX + COPY_BODY + "\nDONE:"),
    ("ks_read16", ("src", "n16", "sink"), INDEX + READ_BODY + "\nDONE:"),
    ("ks_fill16", ("dst", "n16"), INDEX + FILL_BODY + "\nDONE:"),
)
PDL_PROLOGUE = "  griddepcontrol.launch_dependents;\n  griddepcontrol.wait;\n"


def _entry(name: str, params: tuple[str, ...], body: str, pdl: bool) -> str:
    signature = ", ".join(f".param .u64 {p}" for p in params)
    lines = (PDL_PROLOGUE if pdl else "") + (body + "\n" if body else "") + "  ret;"
    return f".visible .entry {name}{'_pdl' if pdl else ''}({signature})\n{{\n{lines}\n}}\n"


COPY_THREADS = 256  # per block
VECTOR_BYTES = 16
PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID, cuda.h


def ptx(major: int, minor: int) -> str:
    """The floor kernels' PTX for compute capability ``major.minor`` (PDL needs 9.0 or newer)."""
    version = "8.0" if major < 10 else "8.7"
    entries = [_entry(name, params, body, pdl) for name, params, body in KERNELS for pdl in (False, True)]
    return "\n".join([HEADER.format(version=version, arch=f"{major}{minor}"), *entries])


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: a 4-byte id, padding to 8, a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h), for ``cuLaunchKernelEx``."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("numAttrs", ctypes.c_uint),
    ]


def pdl_attribute() -> LaunchAttribute:
    attr = LaunchAttribute()
    attr.id = PROGRAMMATIC_STREAM_SERIALIZATION
    ctypes.memmove(ctypes.addressof(attr) + LaunchAttribute.value.offset, ctypes.byref(ctypes.c_int(1)), 4)
    return attr


class FloorKernels:
    """The floor kernels of this process's current CUDA context (torch's primary context)."""

    NAMES = tuple(name + suffix for name, _, _ in KERNELS for suffix in ("", "_pdl"))

    def __init__(self) -> None:
        import torch

        major, minor = torch.cuda.get_device_capability()
        if major < 9:
            raise RuntimeError(
                f"the floor kernels use PDL (griddepcontrol), which needs compute capability 9.0 or newer, not {major}.{minor}"
            )
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.cuda.cuLaunchKernelEx.argtypes = [
            ctypes.POINTER(LaunchConfig),
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
        ]
        torch.cuda.synchronize()  # makes torch's primary context current on this thread
        self.module = ctypes.c_void_p()
        text = ptx(major, minor).encode() + b"\0"
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), ctypes.c_char_p(text)), "cuModuleLoadData")
        self.functions: dict[str, ctypes.c_void_p] = {}
        for name in self.NAMES:
            fn = ctypes.c_void_p()
            self._check(self.cuda.cuModuleGetFunction(ctypes.byref(fn), self.module, name.encode()), name)
            self.functions[name] = fn
        self._pdl = (LaunchAttribute * 1)(pdl_attribute())

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with CUresult {code}")

    def launch(self, name: str, grid: int, stream: Any, args: tuple[int, ...] = (), *, block: int = 32) -> None:
        """Launch ``name`` on ``stream`` (a torch stream); ``*_pdl`` kernels get the PDL attribute."""
        config = LaunchConfig(grid, 1, 1, block, 1, 1, 0, ctypes.c_void_p(stream.cuda_stream))
        if name.endswith("_pdl"):
            config.attrs = self._pdl
            config.numAttrs = 1
        values = [ctypes.c_uint64(a) for a in args]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        self._check(
            self.cuda.cuLaunchKernelEx(ctypes.byref(config), self.functions[name], params if values else None, None),
            f"cuLaunchKernelEx({name})",
        )

    def copy(self, dst: Any, src: Any, stream: Any, *, pdl: bool) -> None:
        """Copy ``src`` into ``dst`` (same size, a multiple of 16 bytes, 16-byte aligned)."""
        n16 = _vectors(src, dst)
        self._stream("ks_copy16", n16, stream, (dst.data_ptr(), src.data_ptr(), n16), pdl)

    def read(self, src: Any, sink: Any, stream: Any, *, pdl: bool) -> None:
        """Read every 16-byte vector of ``src`` (zero-filled: nothing is stored to the 4-byte ``sink``)."""
        if sink.numel() * sink.element_size() < 4:
            raise ValueError("the read stream's sink holds one 4-byte word")
        n16 = _vectors(src)
        self._stream("ks_read16", n16, stream, (src.data_ptr(), n16, sink.data_ptr()), pdl)

    def fill(self, dst: Any, stream: Any, *, pdl: bool) -> None:
        """Write zeros over every 16-byte vector of ``dst``."""
        n16 = _vectors(dst)
        self._stream("ks_fill16", n16, stream, (dst.data_ptr(), n16), pdl)

    def _stream(self, kernel: str, n16: int, stream: Any, args: tuple[int, ...], pdl: bool) -> None:
        grid = max(1, -(-n16 // COPY_THREADS))
        self.launch(kernel + ("_pdl" if pdl else ""), grid, stream, args, block=COPY_THREADS)


def _vectors(*tensors: Any) -> int:
    """The 16-byte vectors of the first tensor; ValueError unless every one is whole, aligned and as large."""
    nbytes = tensors[0].numel() * tensors[0].element_size()
    for t in tensors:
        if t.numel() * t.element_size() != nbytes or nbytes % VECTOR_BYTES or t.data_ptr() % VECTOR_BYTES:
            raise ValueError(f"the floor kernels move whole aligned 16-byte vectors, not {nbytes} bytes")
    return nbytes // VECTOR_BYTES
