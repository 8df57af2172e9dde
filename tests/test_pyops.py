"""extract.pyops on the real sglang 0.5.23 op modules, plus the evaluator on small synthetic modules.

Golden files: tests/golden/ops/<op_id>.json hold the OpEntry of the three default
ops. Regenerate after a deliberate change with
``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_pyops.py -k golden`` and
review the diff.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib

import libcst as cst
import pytest

from extract import pyops
from extract.command import build_index
from pipeline.records import OpEntry, SourceInfo

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "ops"
DEFAULT_OPS = ("activation.silu_and_mul", "layernorm.fused_add_rmsnorm", "layernorm.rmsnorm")

pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def index(sglang_source):
    index, _cached = build_index(sglang_source, ROOT / "work" / "cache")
    return index


@pytest.fixture(scope="module")
def ops(index):
    return {op.id: op for op in index.ops}


# --------------------------------------------------------------------------- the real tree


def test_silu_and_mul(ops):
    op = ops["activation.silu_and_mul"]
    assert op.module == "kernels/ops/activation/activation.py"
    assert op.public_functions == ["silu_and_mul"]
    assert "run_activation" in op.entry_points
    # run_unary_activation is exported by the same module but silu_and_mul never calls it
    assert "run_unary_activation" not in op.entry_points
    assert op.files == ["kernels/jit/csrc/elementwise/activation.cuh"]
    (call,) = op.load_jit
    assert call.function == "activation_module"
    assert call.cuda_files == ["elementwise/activation.cuh"]
    assert ("run_activation", "ActivationKernel<{args}>::run_activation") in call.cuda_wrappers
    assert call.template_args == ["dtype", "is_arch_support_pdl()"]
    # get_activation_cuda_cflags() read from kernels/jit/utils/arch.py, fast_math at its default
    assert call.extra_cuda_cflags == ["--use_fast_math"]
    assert call.marker_args[-1] == "*args"
    assert "act_and_mul_kernel" in op.kernels


def test_fused_add_rmsnorm(ops):
    op = ops["layernorm.fused_add_rmsnorm"]
    assert op.entry_points == ["fused_add_rmsnorm"]
    (call,) = op.load_jit
    assert call.cuda_wrappers == [("fused_add_rmsnorm", "FusedAddRMSNormKernel<{args}>::run")]
    assert call.template_args == ["cast_x_before_out_mul", "dtype"]
    assert call.extra_cuda_cflags == []
    assert op.kernels == ["fused_add_rmsnorm_reg_kernel"]


def test_rmsnorm_kernel_class_wrappers(ops):
    op = ops["layernorm.rmsnorm"]
    (call,) = op.load_jit
    entries = [entry for export, entry in call.cuda_wrappers if export == "rmsnorm"]
    # _rmsnorm_kernel_class(hidden_size) picks one of three classes at run time
    assert sorted(entries) == sorted(
        ["RMSNormWarpKernel<{args}>::run", "RMSNormHalfKernel<{args}>::run", "RMSNormKernel<{args}>::run"]
    )
    assert any("_rmsnorm_kernel_class" in note for note in call.unresolved)
    assert {"rmsnorm_warp", "rmsnorm_cta", "rmsnorm_cta_double"} <= set(op.kernels)


def test_qknorm_is_a_separate_op_of_the_same_module(ops):
    op = ops["layernorm.fused_inplace_qknorm"]
    assert op.module == "kernels/ops/layernorm/norm.py"
    assert op.entry_points == ["qknorm"]
    assert op.files == ["kernels/jit/csrc/elementwise/qknorm.cuh"]
    # probes that only build the module are not ops when a sibling calls the kernel
    assert "layernorm.can_use_fused_inplace_qknorm" not in ops


def _calls_load_jit(path: pathlib.Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "load_jit":
                return True
    return False


def test_op_modules_are_exactly_the_modules_calling_load_jit(index, sglang_source):
    root = pathlib.Path(sglang_source.root)
    expected = sorted(
        p.relative_to(root).as_posix() for p in (root / "kernels" / "ops").rglob("*.py") if _calls_load_jit(p)
    )
    assert index.op_modules == expected
    assert len(expected) >= 150
    # every such module yields at least one op
    assert {op.module for op in index.ops} == set(expected)


def test_op_ids_unique_grouped_and_files_exist(index, sglang_source):
    root = pathlib.Path(sglang_source.root)
    ids = [op.id for op in index.ops]
    assert len(ids) == len(set(ids))
    for op in index.ops:
        group = op.module.split("/")[2]
        assert op.id.startswith(group + ".")
        assert op.id.split(".")[-1] == op.public_functions[0]
        assert op.load_jit, op.id
        for f in op.files:
            assert (root / f).is_file(), (op.id, f)


@pytest.mark.parametrize("op_id", DEFAULT_OPS)
def test_golden(ops, op_id):
    path = GOLDEN / f"{op_id}.json"
    actual = ops[op_id]
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(actual.model_dump_json(indent=2) + "\n", encoding="utf-8")
    expected = OpEntry.model_validate(json.loads(path.read_text(encoding="utf-8")))
    assert actual == expected


def test_instantiate_follows_kernel_class_by_width(ops, sglang_source):
    program = pyops.Program(pathlib.Path(sglang_source.root))
    op = ops["layernorm.rmsnorm"]
    expect = {
        64: "RMSNormWarpKernel",
        256: "RMSNormWarpKernel",
        512: "RMSNormHalfKernel",
        768: "RMSNormKernel",
        1536: "RMSNormKernel",
        2048: "RMSNormHalfKernel",
        2304: "RMSNormKernel",  # 2304 % 512 != 0
        16384: "RMSNormHalfKernel",
    }
    for width, cls in expect.items():
        inst = pyops.instantiate(
            program, op, op.load_jit[0], dtype="bf16", sizes={"hidden_size": width}, entry="rmsnorm"
        )
        assert inst.template_args == [str(width), "true", "bf16_t"]
        assert inst.module_args == ["rmsnorm", str(width), "true", "bf16_t"]
        assert inst.wrappers == [("rmsnorm", f"{cls}<{width}, true, bf16_t>::run")]


def test_instantiate_uses_public_defaults_and_platform(ops, sglang_source):
    program = pyops.Program(pathlib.Path(sglang_source.root))
    op = ops["activation.silu_and_mul"]
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="fp16", sizes={}, entry="run_activation")
    # fast_math defaults to True -> marker "activation" and the CUDA fast-math flags
    assert inst.module_args == ["activation", "fp16_t", "true"]
    assert inst.strings("extra_cuda_cflags") == ["--use_fast_math"]
    op = ops["layernorm.fused_add_rmsnorm"]
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="fused_add_rmsnorm")
    assert inst.template_args == ["false", "bf16_t"]  # cast_x_before_out_mul=False from the public signature
    op = ops["layernorm.fused_inplace_qknorm"]
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={"head_dim": 128}, entry="qknorm")
    # head_dim = head_dim or q.size(-1): the call-site value is unknown, the size of that name is used
    assert inst.template_args == ["128", "true", "bf16_t", "true"]


# --------------------------------------------------------------------------- synthetic modules


def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> SourceInfo:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "kernels/jit/csrc").mkdir(parents=True, exist_ok=True)
    return SourceInfo(kind="package", root=str(tmp_path), jit_dirs=["kernels/jit"])


LOADER = """
from sglang.kernels.jit.utils import cache_once, load_jit, make_cpp_args, is_arch_support_pdl

NAMES = ("a", "b")

def _cls(width):
    if width <= 128:
        return "Small"
    return "Big"

@cache_once
def _module(width, dtype, fast=True):
    args = make_cpp_args(width, is_arch_support_pdl(), dtype)
    flags = ["--use_fast_math"] if fast else []
    return load_jit(
        "thing" if fast else "slow_thing",
        *args,
        cuda_files=["x/thing.cuh"],
        cuda_wrappers=[(n, f"{_cls(width)}<{args}>::run_{n}") for n in NAMES],
        extra_cuda_cflags=flags,
    )

def thing(x, out, fast: bool = True):
    width = x.size(-1)
    module = _module(width, x.dtype, fast)
    module.a(x, out)

def probe(width):
    return _module(width, None) is not None
"""


def test_static_and_strict_evaluation_on_a_synthetic_module(tmp_path):
    source = _tree(tmp_path, {"kernels/ops/grp/mod.py": LOADER})
    ops, modules = pyops.scan_ops(source, None)
    assert modules == ["kernels/ops/grp/mod.py"]
    assert [op.id for op in ops] == ["grp.thing"]  # probe names no export: not an op
    (call,) = ops[0].load_jit
    assert call.marker_args == ['"thing" if fast else "slow_thing"', "*args"]
    assert call.template_args == ["width", "is_arch_support_pdl()", "dtype"]
    assert call.extra_cuda_cflags == ["--use_fast_math"]  # `fast` judged at its default
    assert set(call.cuda_wrappers) == {
        ("a", "Small<{args}>::run_a"),
        ("a", "Big<{args}>::run_a"),
        ("b", "Small<{args}>::run_b"),
        ("b", "Big<{args}>::run_b"),
    }
    assert ops[0].entry_points == ["a"]
    program = pyops.Program(tmp_path)
    inst = pyops.instantiate(program, ops[0], call, dtype="bf16", sizes={"width": 256}, entry="a")
    assert inst.module_args == ["thing", "256", "true", "bf16_t"]
    assert inst.wrappers == [("a", "Big<256, true, bf16_t>::run_a"), ("b", "Big<256, true, bf16_t>::run_b")]
    inst = pyops.instantiate(program, ops[0], call, dtype="fp32", sizes={"width": 64}, entry="a")
    assert inst.wrappers[0] == ("a", "Small<64, true, fp32_t>::run_a")
    with pytest.raises(pyops.Unresolvable, match="width"):
        pyops.instantiate(program, ops[0], call, dtype="fp32", sizes={}, entry="a")


def test_the_older_jit_kernel_layout_is_read_with_the_newer_ids(tmp_path):
    """Up to 0.5.16 op modules sit flat in ``jit_kernel/`` beside ``csrc/`` and ``utils/``: the op
    module is scanned (``utils/`` is not an op module though it names load_jit), its files are under
    ``jit_kernel/csrc``, ``KERNEL_PATH`` is ``jit_kernel``, and the op takes the id the newer layout
    gives the same function (``norm.rmsnorm`` -> ``layernorm.rmsnorm``)."""
    loader = LOADER.replace("sglang.kernels.jit.utils", "sglang.jit_kernel.utils").replace("def thing(", "def rmsnorm(")
    for rel, text in {
        "jit_kernel/norm.py": loader,
        "jit_kernel/utils/compile.py": "def load_jit(*args, **kwargs):\n    pass\n",
        "jit_kernel/csrc/x/thing.cuh": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    source = SourceInfo(kind="package", root=str(tmp_path), jit_dirs=["jit_kernel"])
    ops, modules = pyops.scan_ops(source, None)
    assert modules == ["jit_kernel/norm.py"]
    assert [(op.id, op.module, op.files) for op in ops] == [
        ("layernorm.rmsnorm", "jit_kernel/norm.py", ["jit_kernel/csrc/x/thing.cuh"])
    ]
    assert pyops.package_paths("jit_kernel/norm.py")["KERNEL_PATH"].as_posix() == "jit_kernel"
    assert pyops.package_paths("kernels/ops/grp/mod.py")["KERNEL_PATH"].as_posix() == "kernels/jit"


def test_duplicate_public_names_in_one_group(tmp_path):
    body = LOADER.replace("def thing(", "def dup(")
    source = _tree(
        tmp_path,
        {"kernels/ops/grp/alpha.py": body, "kernels/ops/grp/sub/beta.py": body, "kernels/ops/grp/__init__.py": ""},
    )
    ids = sorted(op.id for op in pyops.scan_ops(source, None)[0])
    # the path that sorts first keeps the plain id
    assert ids == ["grp.dup", "grp.sub.beta.dup"]
    (tmp_path / "kernels/ops/grp/__init__.py").write_text("from .sub.beta import dup\n")
    ops = {op.id: op for op in pyops.scan_ops(source, None)[0]}
    # the group's __init__ re-export wins
    assert ops["grp.dup"].module == "kernels/ops/grp/sub/beta.py"
    assert ops["grp.alpha.dup"].module == "kernels/ops/grp/alpha.py"


def test_entry_parts():
    assert pyops.entry_parts("&HiCacheKernel<{args}>::run_one_page_unified<false>") == (
        "HiCacheKernel",
        "run_one_page_unified",
    )
    assert pyops.entry_parts("plan_compress_prefill") == (None, "plan_compress_prefill")
    assert pyops.entry_parts("ns::Foo<a, B<c>>::run") == ("Foo", "run")


def test_kernels_through_a_using_alias(ops):
    # QKNormKernel is `using QKNormKernel = std::conditional_t<..., QKNormKernelWarp<...>, ...>`
    assert {"fused_qknorm_warp", "fused_qknorm_cta"} <= set(ops["layernorm.fused_inplace_qknorm"].kernels)


LAYOUT_LOADER = """
from typing import Optional

import torch
from sglang.kernels.jit.utils import cache_once, load_jit, make_cpp_args

@cache_once
def _module(channels_last, on_gpu, dtype):
    args = make_cpp_args(channels_last, on_gpu, dtype)
    return load_jit("norm", *args, cuda_files=["x/norm.cuh"], cuda_wrappers=[("run", f"Norm<{args}>::run")])

def norm(x: torch.Tensor, out: torch.Tensor) -> None:
    _module(not x.is_contiguous(), x.is_cuda, x.dtype).run(x, out)

def norm_cl(x: torch.Tensor, out: torch.Tensor) -> None:
    _module(x.is_contiguous(memory_format=torch.channels_last), x.is_cuda, x.dtype).run(x, out)

def norm_opt(x: torch.Tensor, out: torch.Tensor, scale: Optional[torch.Tensor]) -> None:
    _module(scale is None, scale is not None, x.dtype).run(x, out)
"""


def _synthetic_ops(tmp_path, files):
    """Ops of a synthetic package (``files``: path -> text), by id, and its program."""
    ops, _ = pyops.scan_ops(_tree(tmp_path, files), None)
    return {op.id: op for op in ops}, pyops.Program(tmp_path)


def test_tensor_layout_attributes_are_those_of_the_harness_tensors(tmp_path):
    """Found in the coverage sweep (2026-11-29): wan_norm_silu_post picks a template
    argument with `not x.is_contiguous()`, fused_metadata_copy_multi with `src is not
    None`; the harness calls with dense CUDA tensors and passes every tensor."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/norm.py": LAYOUT_LOADER})
    op = by_id["grp.norm"]
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="run")
    assert inst.wrappers == [("run", "Norm<false, true, bf16_t>::run")]
    optional = by_id["grp.norm_opt"]  # an optional tensor is passed: `is None` is False
    inst = pyops.instantiate(program, optional, optional.load_jit[0], dtype="bf16", sizes={}, entry="run")
    assert inst.wrappers == [("run", "Norm<false, true, bf16_t>::run")]
    other = by_id["grp.norm_cl"]
    with pytest.raises(pyops.Unresolvable, match="channels_last"):  # another memory format: not known
        pyops.instantiate(program, other, other.load_jit[0], dtype="bf16", sizes={}, entry="run")


PATH_LOADER = """
import math

import torch
from sglang.kernels.jit.utils import KERNEL_PATH, cache_once, load_jit, make_cpp_args

@cache_once
def _module(width, dtype):
    args = make_cpp_args(math.gcd(width, 16), dtype)
    include = (KERNEL_PATH / "csrc" / "extra").resolve()
    return load_jit("fht", *args, cuda_files=["x/fht.cuh"], cuda_wrappers=[("run", f"Fht<{args}>::run")],
                    extra_include_paths=[str(include)])

def fht(x: torch.Tensor, width: int = 24) -> None:
    _module(width, x.dtype).run(x)
"""


def test_kernel_path_and_math_are_followed_statically(tmp_path):
    """Found in the coverage sweep (2026-11-29): hadamard's loader adds an include directory
    under KERNEL_PATH (which SGLang finds with importlib), the sampling loader picks a vector
    width with math.gcd; both were 'not known statically'."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/fht.py": PATH_LOADER})
    (op,) = by_id.values()
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="run")
    assert inst.wrappers == [("run", "Fht<8, bf16_t>::run")]
    assert inst.strings("extra_include_paths") == ["kernels/jit/csrc/extra"]


FLAG_LOADER = """
import torch
from sglang.kernels.jit.utils import cache_once, load_jit, make_cpp_args

@cache_once
def _module(is_ep: bool, dtype):
    args = make_cpp_args(is_ep, dtype)
    return load_jit("flag", *args, cuda_files=["x/flag.cuh"], cuda_wrappers=[("run", f"Flag<{args}>::run")])

@cache_once
def _sized(width: int, dtype):
    args = make_cpp_args(width, dtype)
    return load_jit("sized", *args, cuda_files=["x/sized.cuh"], cuda_wrappers=[("go", f"Sized<{args}>::go")])

def flag(x: torch.Tensor, is_ep: bool) -> None:
    _module(is_ep, x.dtype).run(x)

def sized(x: torch.Tensor, width: int) -> None:
    _sized(width, x.dtype).go(x)
"""


def test_an_open_bool_loader_parameter_takes_the_plain_path(tmp_path):
    """Found in extract --all (2026-11-29): seven modules' loaders take a bool the caller
    decides at run time (moe_wna16_marlin's is_ep, deep_select's sorted_value); an int
    with no known value still stops the instantiation."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/flag.py": FLAG_LOADER})
    op = by_id["grp.flag"]
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="run")
    assert inst.wrappers == [("run", "Flag<false, bf16_t>::run")]
    assert any("`is_ep` (bool) = False, the plain path" in n for n in inst.notes)
    sized = by_id["grp.sized"]
    with pytest.raises(pyops.Unresolvable, match="width"):
        pyops.instantiate(program, sized, sized.load_jit[0], dtype="bf16", sizes={}, entry="go")


ONLY_BF16_LOADER = """
import torch
from sglang.kernels.jit.utils import cache_once, load_jit, make_cpp_args

@cache_once
def _module(dtype: torch.dtype):
    if dtype is not torch.bfloat16:
        raise RuntimeError(f"Unsupported dtype: {dtype}")
    args = make_cpp_args(dtype)
    return load_jit("rope64", *args, cuda_files=["x/rope64.cuh"], cuda_wrappers=[("run", f"Rope<{args}>::run")])

def rope64(q: torch.Tensor) -> None:
    _module(q.dtype).run(q)
"""


def test_a_dtype_is_the_same_dtype_under_is(tmp_path):
    """Found in extract --all (2026-11-29): interleaved_rope_fp64's loader refuses `dtype is
    not torch.bfloat16`; two readings of one torch dtype were different objects to `is`,
    so even bf16 was refused and the module yielded no task."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/rope64.py": ONLY_BF16_LOADER})
    op = by_id["grp.rope64"]
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="run")
    assert inst.wrappers == [("run", "Rope<bf16_t>::run")]
    with pytest.raises(pyops.Unresolvable, match="raises"):
        pyops.instantiate(program, op, op.load_jit[0], dtype="fp16", sizes={}, entry="run")


SHAPED_LOADER = """
import logging

import torch
from sglang.kernels.jit.utils import cache_once, load_jit, make_cpp_args

@cache_once
def _gemv(n: int, k: int):
    args = make_cpp_args(n, k)
    return load_jit("gemv", *args, cuda_files=["x/gemv.cuh"], cuda_wrappers=[("gemv", f"Gemv<{args}>::run")])

@cache_once
def _rows(row_bytes: int, dtype):
    args = make_cpp_args(row_bytes, dtype)
    return load_jit("rows", *args, cuda_files=["x/rows.cuh"], cuda_wrappers=[("rows", f"Rows<{args}>::run")])

@cache_once
def _rope(pos_dtype, dim: int):
    args = make_cpp_args(pos_dtype, dim)
    return load_jit("rope", *args, cuda_files=["x/rope.cuh"], cuda_wrappers=[("rope", f"Rope<{args}>::run")])

def gemv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _gemv(w.shape[0], w.shape[1]).gemv(x, w)

def rows(k: torch.Tensor, cache: torch.Tensor) -> None:
    tokens, width = k.shape
    _rows(width * k.element_size(), k.dtype).rows(k, cache)

def rope(q: torch.Tensor, positions: torch.Tensor, loc: torch.Tensor) -> None:
    assert loc.dtype == torch.int32
    _rope(positions.dtype, q.size(-1)).rope(q, positions)
    _rope(loc.dtype, q.size(-1)).rope(q, loc)

def bf16_only(x: torch.Tensor) -> None:
    assert x.dtype == torch.bfloat16, f"{x.dtype=}"
    _rope(x.dtype, 64).rope(x, x)

logger = logging.getLogger(__name__)

def _split(row_bytes):
    threads = 32
    per = row_bytes // threads
    while per % 8 == 0 and per >= 64:
        threads *= 2
        per //= 2
    logger.debug(f"{threads = } for {row_bytes = }")
    return threads

@cache_once
def _threads(dtype, threads: int):
    args = make_cpp_args(dtype, threads)
    return load_jit("split", *args, cuda_files=["x/split.cuh"], cuda_wrappers=[("split", f"Split<{args}>::run")])

def split(k: torch.Tensor) -> None:
    _threads(k.dtype, _split(k.contiguous().shape[-1] * k.element_size())).split(k)

@cache_once
def _topk(topk: int):
    if topk not in (2, 8):
        raise RuntimeError(f"unsupported topk {topk}")
    return load_jit("topk", str(topk), cuda_files=["x/topk.cuh"], cuda_wrappers=[("weighted", f"Weighted<{topk}>::run")])

def weighted(x: torch.Tensor, weights: torch.Tensor) -> None:
    _topk(weights.shape[1]).weighted(x, weights)

def conv(x: torch.Tensor, weight: torch.Tensor) -> None:
    _rope(x.dtype, weight.shape[-1]).rope(x, weight)

def guarded(x: torch.Tensor, activation=None) -> None:
    width = 64
    if activation == "swish":
        activation = "silu"
    if activation == "silu":
        width = 128
    elif activation == "gelu":
        width = 256
    else:
        width = width * 2 if activation == "relu" else width
    _rope(x.dtype, width).rope(x, x)

def normalised(key: torch.Tensor) -> None:
    if key.dim() != 2:
        key = key.view(-1, key.shape[-1])
    assert key.dtype == torch.bfloat16
    if not key.is_contiguous():
        key = key.contiguous()
    _rope(key.dtype, 64).rope(key, key)

_THREADS = 256

@cache_once
def _fixed():
    args = make_cpp_args(_THREADS, True)
    return load_jit("fixed", *args, cuda_files=["x/fixed.cuh"], cuda_wrappers=[("fixed", f"Fixed<{args}>::run")])

def fixed(x: torch.Tensor) -> None:
    _fixed().fixed(x.view(-1))

def branches(x: torch.Tensor, layout: str) -> None:
    if layout == "inner":
        width = 1
    else:
        width = x.numel() // 8
    _rope(x.dtype, width).rope(x, x)

@cache_once
def _mode(mode: int):
    args = make_cpp_args(mode)
    return load_jit("mode", *args, cuda_files=["x/mode.cuh"], cuda_wrappers=[("mode", f"Mode<{args}>::run")])

def moded(x: torch.Tensor, mode: int) -> None:
    _mode(mode).mode(x)

def flat(x: torch.Tensor, topk_ids: torch.Tensor) -> None:
    flat_ids = topk_ids.reshape(-1)
    _rope(flat_ids.dtype, x.view(torch.uint8).element_size()).rope(x, flat_ids)
"""


def _spec(name, shape, dtype="T"):
    from pipeline.records import TensorSpec

    return TensorSpec(name=name, shape=shape, dtype=dtype, role="input")


def test_a_loader_parameter_read_from_a_tensor_shape_pins_that_size(tmp_path):
    """Found in extract --all (2026-11-29): 15 modules had no task because their loader
    takes a tensor's size (hopper_bf16_gemv's `w.shape[0]`, store_cache's row bytes
    `k.shape[-1] * k.element_size()`). The contract sizes the tensor, so the value is
    the planned size, and the instantiation records the symbols it was made for."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    gemv = by_id["grp.gemv"]
    tensors = {"x": _spec("x", [1, "K"]), "w": _spec("w", ["N", "K"])}
    inst = pyops.instantiate(
        program, gemv, gemv.load_jit[0], dtype="bf16", sizes={"N": 4096}, entry="gemv", tensors=tensors
    )
    assert inst.wrappers == [("gemv", f"Gemv<4096, {pyops.PLANNED_SIZE}>::run")]
    assert inst.pins == {"N": 4096, "K": pyops.PLANNED_SIZE}
    with pytest.raises(pyops.Unresolvable, match="runtime data"):  # no contract shape: unknown, as before
        pyops.instantiate(program, gemv, gemv.load_jit[0], dtype="bf16", sizes={}, entry="gemv")
    rows = by_id["grp.rows"]  # tuple unpacking, element_size, and only the dimension read is pinned
    tensors = {"k": _spec("k", ["T", "D"]), "cache": _spec("cache", [-1, "D"])}
    inst = pyops.instantiate(
        program, rows, rows.load_jit[0], dtype="fp32", sizes={"D": 64}, entry="rows", tensors=tensors
    )
    assert inst.wrappers == [("rows", "Rows<256, fp32_t>::run")]
    assert inst.pins == {"D": 64}
    open_dim = {"k": _spec("k", ["T", -1])}
    with pytest.raises(pyops.Unresolvable, match="open in the contract"):
        pyops.instantiate(program, rows, rows.load_jit[0], dtype="fp32", sizes={}, entry="rows", tensors=open_dim)


def test_position_and_index_tensors_are_not_the_instantiation_dtype(tmp_path):
    """Found in extract --all (2026-11-29): minimax_qknorm_rope instantiated its position
    type as bf16_t (`_jit_module(positions.dtype, ...)`) and did not compile; a wrapper's
    own `assert loc.dtype == torch.int32` and the contract's dtype come first."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    rope = by_id["grp.rope"]
    tensors = {"q": _spec("q", ["T", 128])}
    inst = pyops.instantiate(program, rope, rope.load_jit[0], dtype="bf16", sizes={}, entry="rope", tensors=tensors)
    assert inst.template_args == ["int64_t", "128"]
    assert inst.pins == {}  # a literal dimension pins nothing
    caller = program.function(rope.module, "rope")
    code = caller.module.code(caller.node)
    value = pyops.tensor_value("loc", code, pyops.DtypeValue("bf16"), None, {})
    assert value.dtype == pyops.DtypeValue("int32")
    spec = _spec("positions", ["T"], dtype="int32")
    value = pyops.tensor_value("positions", code, pyops.DtypeValue("bf16"), spec, {})
    assert value.dtype == pyops.DtypeValue("int32")
    value = pyops.tensor_value("q", code, pyops.DtypeValue("bf16"), None, {})
    assert value.dtype == pyops.DtypeValue("bf16")
    assert pyops.tensor_value("permutation", code, pyops.DtypeValue("bf16"), None, {}).dtype == pyops.DtypeValue(
        "int64"
    )
    union = _spec("order", ["T"], dtype="int32|int64")  # the kernel takes either: the first
    assert pyops.tensor_value("order", code, pyops.DtypeValue("bf16"), union, {}).dtype == pyops.DtypeValue("int32")


def test_a_wrapper_dtype_assertion_refuses_other_float_dtypes(tmp_path):
    """fused_q_norm_rope's wrapper asserts bf16 input: an fp16 "instantiation" would be the
    bf16 module tested under another name."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    op = by_id["grp.bf16_only"]
    element = {"x": _spec("x", ["T", 64])}
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="rope", tensors=element)
    assert inst.template_args == ["bf16_t", "64"]
    with pytest.raises(pyops.Unresolvable, match="asserts `x.dtype`"):
        pyops.instantiate(program, op, op.load_jit[0], dtype="fp16", sizes={}, entry="rope", tensors=element)
    # a side tensor of its own dtype (fused_norm_fp4_quant's fp32 global_scale) refuses nothing
    side = {"x": _spec("x", ["T", 64], dtype="float32")}
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="fp16", sizes={}, entry="rope", tensors=side)
    assert inst.template_args == ["bf16_t", "64"]


def test_a_reshaped_tensor_keeps_its_dtype_and_a_dtype_view_takes_the_new_one(tmp_path):
    """Helper review of moe_lora_merged_align (2026-12-01): its loader reads
    `topk_ids.reshape(-1).dtype`; extract fell back to the instantiation dtype and built
    `<bf16_t, ...>` where SGLang builds `<int32_t, ...>`, which does not compile."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    op = by_id["grp.flat"]
    tensors = {"x": _spec("x", ["T", 64]), "topk_ids": _spec("topk_ids", ["T", 8], dtype="int32")}
    inst = pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="rope", tensors=tensors)
    assert inst.template_args == ["int32_t", "1"]


def test_an_assignment_under_an_if_applies_only_where_its_test_holds(tmp_path):
    """Helper review of the Inkling sconv ops (2026-12-01): `if activation == "swish":
    activation = "silu"` had been read as always run, so extract built the SiLU variant
    where SGLang (activation=None) builds the plain one."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    op = by_id["grp.guarded"]
    inst = pyops.instantiate(
        program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="rope", tensors={"x": _spec("x", ["T", 64])}
    )
    assert inst.template_args == ["bf16_t", "64"]
    # under a test it cannot evaluate (the contract does not size `key`), an assignment
    # whose value it cannot evaluate either counts as not run: `key` stays the parameter,
    # whose asserted dtype the loader gets (fused_store_index_k_cache, 2026-12-01)
    # ... but never the other branch of that if instead (bias_residual_add's `spatial`)
    op = by_id["grp.branches"]
    with pytest.raises(pyops.Unresolvable, match="width"):
        pyops.instantiate(program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="rope", tensors={})
    op = by_id["grp.normalised"]
    for dtype in ("bf16", "fp16"):
        inst = pyops.instantiate(program, op, op.load_jit[0], dtype=dtype, sizes={}, entry="rope", tensors={})
        assert inst.template_args == ["bf16_t", "64"]


def test_a_loader_no_size_reaches_is_size_free(tmp_path):
    """kimi_k3_mla_output_gate (2026-12-01): its loader takes no parameters and passes a
    module constant (256 threads); the harness had taken 256 for a width no shape has."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    op = by_id["grp.fixed"]
    inst = pyops.instantiate(
        program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="fixed", tensors={"x": _spec("x", ["N"])}
    )
    assert inst.template_args == ["256", "true"] and inst.size_free
    gemv = by_id["grp.gemv"]
    tensors = {"x": _spec("x", [1, "K"]), "w": _spec("w", ["N", "K"])}
    assert not pyops.instantiate(
        program, gemv, gemv.load_jit[0], dtype="bf16", sizes={"N": 64}, entry="gemv", tensors=tensors
    ).size_free
    # a run-time int from a curated loader value: size-free only where it is marked a constant
    moded = by_id["grp.moded"]
    for value, free in ((pyops.Constant(0), True), (0, False)):
        inst = pyops.instantiate(
            program,
            moded,
            moded.load_jit[0],
            dtype="bf16",
            sizes={},
            entry="mode",
            tensors={"x": _spec("x", ["N"])},
            fallbacks={"mode": (value, "decode")},
        )
        assert inst.template_args == ["0"] and inst.size_free is free
    from extract.tasks import loader_fallbacks  # fused_metadata_copy's forward_mode, add_constant's constant

    assert isinstance(loader_fallbacks({}, "kernels/ops/elementwise/add_constant.py")["constant"][0], pyops.Constant)
    assert not isinstance(
        loader_fallbacks({}, "kernels/ops/layernorm/grouped_gemma_rmsnorm.py")["group_size"][0], pyops.Constant
    )
    rope = by_id["grp.rope"]  # an int literal at the call site: not size-free (it may be a width)
    assert not pyops.instantiate(
        program, rope, rope.load_jit[0], dtype="bf16", sizes={}, entry="rope", tensors={"q": _spec("q", ["T", 128])}
    ).size_free


def test_a_curated_loader_value_beats_a_planned_size(tmp_path):
    """Found in extract --all (2026-11-29): causal_conv1d's loader takes `weight.shape[-1]`;
    no shape case sizes W, and the planned 128 is no conv width. The curated w = 4 is used
    and pinned instead; a size a shape case gives is still read as is."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    op = by_id["grp.conv"]
    tensors = {"x": _spec("x", ["T", "D"]), "weight": _spec("weight", ["D", "W"])}
    fallbacks = {"dim": (4, "the conv width")}
    inst = pyops.instantiate(
        program, op, op.load_jit[0], dtype="bf16", sizes={}, entry="rope", tensors=tensors, fallbacks=fallbacks
    )
    assert inst.template_args == ["bf16_t", "4"] and inst.pins == {"W": 4}
    inst = pyops.instantiate(
        program, op, op.load_jit[0], dtype="bf16", sizes={"W": 3}, entry="rope", tensors=tensors, fallbacks=fallbacks
    )
    assert inst.template_args == ["bf16_t", "3"] and inst.pins == {"W": 3}


def test_a_while_loop_heuristic_is_run(tmp_path):
    """Found in extract --all (2026-11-29): store_cache's loader doubles its thread count
    in a `while` loop, channel_rmsnorm_silu_nhwc its lanes; both stopped at the loop.
    store_cache then logs the count it chose (`logger.debug`): a statement that only
    logs is not run."""
    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    op = by_id["grp.split"]
    tensors = {"k": _spec("k", ["T", "D"])}
    inst = pyops.instantiate(
        program, op, op.load_jit[0], dtype="bf16", sizes={"D": 2048}, entry="split", tensors=tensors
    )
    assert inst.template_args == ["bf16_t", "128"]  # 4096 bytes: 128 a thread at 32, 64 at 64, 32 at 128
    assert inst.pins == {"D": 2048}


def test_sizes_the_loader_refuses_are_planned_again(tmp_path):
    """Found in extract --all (2026-11-29): shuffle_weighted_sum's loader takes
    `weights.shape[1]` (the top-k) and serves a few values only; the planned 128 was
    refused and the op had no task."""
    from extract import tasks

    by_id, program = _synthetic_ops(tmp_path, {"kernels/ops/grp/shaped.py": SHAPED_LOADER})
    op = by_id["grp.weighted"]
    tensors = {"x": _spec("x", ["T", "D"]), "weights": _spec("weights", ["T", "K"])}
    planned = {"T": 8, "D": 128, "K": 128}
    insts, _cases, _first, notes = tasks.plan_instantiations(
        program, op, op.load_jit[0], "weighted", ["bf16"], [], {}, tensors, planned
    )
    assert [(i.wrappers, i.sizes) for i in insts] == [([("weighted", "Weighted<8>::run")], {"K": 8})]
    assert any("planned at 8 instead" in n for n in notes)


_REFS_MODULE = """
import os.path as osp
import torch
from sglang.srt.utils import some_helper

class Config:
    WIDTH = 64

NAMES = ["a"]
"""


def test_names_resolve_to_typed_references():
    """What a name or attribute is before it is called or read: a frozen reference
    (ModuleRef, ImportRef, ClassRef, Builtin, Probe, Bound, Mutator), never a tuple."""
    module = pyops.parse_module("kernels/ops/refs/refs.py", _REFS_MODULE)
    ev = pyops.Evaluator(lambda dotted: None, strict=False)
    env = pyops.Env(module)

    def value(text: str, frame: pyops.Env = env) -> object:
        return ev.eval(cst.parse_expression(text), frame)

    assert value("osp") == pyops.ModuleRef("os.path")
    assert value("some_helper") == pyops.ImportRef("sglang.srt.utils", "some_helper")
    assert value("Config") == pyops.ClassRef(module, "Config")
    assert value("Config.WIDTH") == 64
    assert value("len") == pyops.Builtin("len")
    assert value("is_hip") == pyops.Probe("is_hip")
    assert value("osp.is_cuda") == pyops.Probe("is_cuda")  # a probe through an unfollowed module
    assert value("is_hip()") is False
    assert isinstance(value("','.join"), pyops.Bound) and value("','.join(['a', 'b'])") == "a,b"
    assert value("len(NAMES)") == 1
    names = value("NAMES")
    appender = value("names.append", pyops.Env(module, {"names": names}))
    assert appender == pyops.Mutator(names, "append") and pyops.concrete(appender)
    assert not pyops.concrete(pyops.Mutator([pyops.Unknown("x")], "append"))
    assert isinstance(value("torch.bfloat16"), pyops.DtypeValue) and value("torch.bfloat16.itemsize") == 2
