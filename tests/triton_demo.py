"""A small SGLang-shaped tree with Triton kernels, written for these tests (no SGLang code).

``demo_tree(tmp_path)`` lays out ``sglang/kernels/ops/demo/`` with a scaled-add op (an
autotuned kernel, a jit helper that stores, a wrapper reading shapes), a registration
module, a module whose registered target is the kernel itself, and a file that does not
parse; it returns the :class:`pipeline.records.SourceInfo` of that tree.
"""

from __future__ import annotations

import pathlib

from pipeline.records import SourceInfo, Task

SCALE = """\
import torch
import triton
import triton.language as tl

_ALPHA = 2


@triton.jit
def _store_row(out_ptr, offs, vals, mask):
    tl.store(out_ptr + offs, vals, mask=mask)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 64}, num_warps=2, num_stages=1),
        triton.Config({"BLOCK": 128}, num_warps=4, num_stages=2),
    ],
    key=["n_cols"],
)
@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, out_ptr, acc_ptr, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = row * n_cols + tl.arange(0, BLOCK)
    mask = tl.arange(0, BLOCK) < n_cols
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    acc = tl.load(acc_ptr + offs, mask=mask)
    _store_row(out_ptr, offs, x * scale + y, mask)
    tl.store(acc_ptr + offs, acc + x, mask=mask)


def scaled_add(
    x: torch.Tensor, y: torch.Tensor, acc: torch.Tensor, scale: float = 1.0, out: torch.Tensor | None = None
) -> torch.Tensor:
    assert x.shape == y.shape
    assert x.dim() == 2
    assert acc.shape == x.shape
    num_tokens, hidden_size = x.shape
    if out is None:
        out = torch.empty_like(x)
    scaled_add_kernel[(num_tokens,)](x, y, out, acc, hidden_size, scale * _ALPHA)
    return out


def offsets(lens: torch.Tensor, starts: torch.Tensor, out: torch.Tensor) -> None:
    rows, width = out.shape
    assert lens.ndim == starts.ndim == 1
    assert starts.numel() == rows + 1
    scaled_add_kernel[(rows,)](lens, starts, out, out, width, 1.0)


def untyped(x: torch.Tensor, eps) -> None:
    n, d = x.shape
    scaled_add_kernel[(n,)](x, x, x, x, d, eps)


def no_shape(x, y: torch.Tensor) -> None:
    scaled_add_kernel[(1,)](x, y, y, y, 1, 1.0)


def gated(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    rows, width = x.shape
    out = x if inplace else torch.empty_like(x)
    scaled_add_kernel[(rows,)](x, x, out, out, width, 1.0)
    return out


def pairs(x: torch.Tensor, k: int):
    rows, width = x.shape
    out = x.new_empty(rows, width)
    idx = torch.empty((rows, k + 1), dtype=torch.int32, device=x.device)
    spare = torch.zeros(rows, device=x.device)
    scaled_add_kernel[(rows,)](x, x, out, idx, width, 1.0)
    if rows == 0:
        return x, x, x
    return out, idx, spare
"""

REGISTRY = """\
from sglang.kernels.spec import KernelBackend, KernelSpec
from sglang.kernels.registry import register_kernel

for _mod, _fn in [("scale", "scaled_add"), ("bare", "bare_kernel")]:
    register_kernel(
        KernelSpec(op=f"demo.{_fn}", backend=KernelBackend.TRITON, target=f"sglang.kernels.ops.demo.{_mod}:{_fn}")
    )
register_kernel(KernelSpec(op="demo.other", backend=KernelBackend.JIT, target="sglang.kernels.ops.demo.scale:x"))
"""

BARE = """\
import triton
import triton.language as tl


@triton.jit
def bare_kernel(ptr, BLOCK: tl.constexpr):
    tl.store(ptr + tl.arange(0, BLOCK), 1.0)
"""

BROKEN = """\
import triton


@triton.jit
def broken_kernel(ptr:
    pass
"""


def demo_tree(tmp_path: pathlib.Path) -> SourceInfo:
    root = tmp_path / "sglang"
    ops = root / "kernels" / "ops" / "demo"
    ops.mkdir(parents=True)
    (ops / "__init__.py").write_text(REGISTRY, encoding="utf-8")
    (ops / "scale.py").write_text(SCALE, encoding="utf-8")
    (ops / "bare.py").write_text(BARE, encoding="utf-8")
    (ops / "broken.py").write_text(BROKEN, encoding="utf-8")
    return SourceInfo(kind="package", root=str(root), version="demo")


def scaled_add_task(tmp_path: pathlib.Path) -> tuple[pathlib.Path, Task]:
    """The demo tree's ``demo.scaled_add`` written as a task under ``tmp_path/work``: (work dir, task)."""
    from extract import triton_ops, triton_tasks

    index, _ = triton_ops.scan_tree(demo_tree(tmp_path), None)
    op = next(o for o in index.ops if o.id == "demo.scaled_add")
    work = tmp_path / "work"
    return work, triton_tasks.write_task(index, op, work)
