"""The ``layer`` command of the SGLang worker: time one decoder layer from its plan.

Runs inside :mod:`integrate.sglang_worker` (one process per SGLang tree; that
module dispatches ``{"cmd": "layer"}`` here). The request carries a plan made by
:func:`integrate.recipe.plan`: tensors (concrete shapes, an init, a dtype) and the
layer's steps in order. A step is either an SGLang op, called through the tree's
public function (imported from the tree the worker loaded, so each tree runs its
own kernels), or a torch reference part (:data:`integrate.recipe.TORCH_PARTS`:
``linear`` = ``torch.mm`` on the weights (cuBLAS); ``attention_decode`` /
``attention_causal`` = ``scaled_dot_product_attention``). This module knows
inits and torch parts, never an op name.

Method (:mod:`optimize.harness.timing`): every step runs once eagerly first (JIT
builds and loads happen there, never inside a capture); buffer sets are rotated
so the footprint is at least ``l2_multiple`` x L2 (a layer's weights alone
usually are, so one set is common); then CUDA graphs of ``graph_calls`` layers
back to back are captured for the whole layer (``layer``), for the SGLang steps
alone (``non_gemm``: everything but the torch parts), for every step alone, and
for every SGLang step in its neighbourhood (``context:<step>``: the step between
the layer's steps before and after it, :func:`neighbourhoods`), and their replays
are timed with CUDA events, interleaved. One sample = replay
time / calls.

What must stay true: an optional step this tree cannot run (no such function, or
it fails at these shapes) is dropped from every graph and reported in
``skipped``; any other failure is an error, never a silent gap in the layer.
Imports: stdlib, torch, ``optimize.harness.timing`` (pure Python); no pydantic.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

JsonDict = dict[str, Any]  # one JSON request or answer of the worker protocol
Call = Callable[[], object]


def _torch_dtype(name: str, model: str) -> torch.dtype:
    import torch

    table = {
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp32": torch.float32,
        "int64": torch.int64,
        "int32": torch.int32,
    }
    return table[model if name == "model" else name]


def _public(path: str) -> Callable[..., object]:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


RMS_EPS = 1e-6  # the torch RMSNorm stand-ins' epsilon (their time does not depend on it)
ROUTING_SEED = 20261207  # one fixed draw: every routing tensor of a point agrees, in every buffer set


def _routing(tokens: int, experts: int, topk: int) -> dict[str, torch.Tensor]:
    """A top-``topk`` routing of ``tokens`` tokens over ``experts`` experts, uniform and distinct per
    token, in the forms the recipe's routing inits name: the ids [T, k], the rows in expert order
    (each row's token), each expert's end offset (cumulative rows, int32: torch._grouped_mm's
    ``offs``), each (token, slot)'s row, and the renormalised weights [T, k]."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(ROUTING_SEED)
    ids = torch.rand(tokens, experts, generator=gen, device="cuda").argsort(dim=1)[:, :topk]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # slot indices (token * k + j) in expert order
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device="cuda")
    counts = torch.bincount(flat, minlength=experts)
    weights = torch.rand(tokens, topk, generator=gen, device="cuda") + 0.1
    return {
        "topk_ids": ids.to(torch.int32),
        "moe_rows": order // topk,
        "moe_offsets": counts.cumsum(0).to(torch.int32),
        "moe_inverse": inverse.view(tokens, topk),
        "moe_weights": weights / weights.sum(dim=1, keepdim=True),
    }


ROUTING_INITS = frozenset({"topk_ids", "moe_rows", "moe_offsets", "moe_inverse", "moe_weights"})


def _shift_placement(mib: int) -> torch.Tensor | None:
    """With ``mib`` > 0: the cached blocks of earlier requests given back, then ``mib`` MiB held, so
    this request's weights and buffers are allocated past it, somewhere else than last round
    (:func:`integrate.e2e.placement_shift_mib`). The caller keeps the tensor until it is done."""
    import torch

    if mib <= 0:
        return None
    torch.cuda.empty_cache()
    return torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")


def _tensor(spec: JsonDict, model_dtype: str, gen: torch.Generator) -> torch.Tensor:
    """One tensor of the plan, filled as its init says (values only keep magnitudes sane)."""
    import torch

    shape = [int(d) for d in spec["shape"]]
    dtype = _torch_dtype(str(spec["dtype"]), model_dtype)
    init = spec["init"]
    params = spec.get("params") or {}
    if init == "empty":
        return torch.empty(shape, dtype=dtype, device="cuda")
    if init in ROUTING_INITS:
        value = _routing(int(params["tokens"]), int(params["experts"]), int(params["topk"]))[init]
        if list(value.shape) != shape:
            raise ValueError(f"routing init {init}: shape {list(value.shape)}, the plan says {shape}")
        return value.to(dtype).contiguous()
    if init == "positions":
        return torch.randint(0, int(params["high"]), shape, generator=gen, device="cuda", dtype=dtype)
    if init == "rope_cos_sin":
        rows, dim = shape
        inv_freq = 1.0 / (float(params["theta"]) ** (torch.arange(0, dim, 2, device="cuda", dtype=torch.float32) / dim))
        freqs = torch.outer(torch.arange(rows, device="cuda", dtype=torch.float32), inv_freq)
        return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype).contiguous()
    # drawn in the tensor's own float type: an fp32 draw of a MoE layer's expert weights first would
    # need twice their bytes again, in each of the three workers at once
    draw = dtype if dtype.is_floating_point else torch.float32
    values = torch.randn(shape, generator=gen, device="cuda", dtype=draw)
    if init == "norm_weight":
        values.mul_(0.1).add_(1.0)
    elif init == "weight":
        values.div_(math.sqrt(shape[-1]))  # keeps a projection's output near unit scale
    return values.to(dtype)


def _torch_part(part: str, args: Sequence[torch.Tensor]) -> Call:
    import torch
    import torch.nn.functional as F

    if part == "linear":
        inp, weight, out = args
        return lambda: torch.mm(inp, weight.t(), out=out)
    if part == "attention_decode":
        q, k_cache, v_cache, out = args
        b, h, d = q.shape
        q4, out4 = q.view(b, h, 1, d), out.view(b, h, 1, d)
        return lambda: out4.copy_(F.scaled_dot_product_attention(q4, k_cache, v_cache, enable_gqa=True))
    if part == "attention_causal":
        q, k, v, out = args
        t, h, d = q.shape
        q4, k4, v4 = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
        out3 = out.view(t, h, d)
        return lambda: out3.copy_(
            F.scaled_dot_product_attention(q4, k4, v4, is_causal=True, enable_gqa=True)[0].transpose(0, 1)
        )
    if part == "linear_fp8":  # weight [N, K/2] bf16: the bytes and tensor-core time of an fp8 [N, K] GEMM
        inp, weight, out = args
        half = inp[:, : weight.shape[1]]
        return lambda: torch.mm(half, weight.t(), out=out)
    if part == "add_rmsnorm":  # residual += x; x = rmsnorm(residual) * weight
        inp, residual, weight = args
        shape = (inp.shape[-1],)

        def add_norm() -> None:
            residual.add_(inp)
            inp.copy_(F.rms_norm(residual, shape, weight, RMS_EPS))

        return add_norm
    if part == "sigmoid_mul":  # input *= sigmoid(gate), in torch's two kernels
        inp, gate = args
        return lambda: inp.mul_(torch.sigmoid(gate))
    if part == "rmsnorm":
        inp, weight = args
        shape = (inp.shape[-1],)
        return lambda: inp.copy_(F.rms_norm(inp, shape, weight, RMS_EPS))
    if part == "bmm":
        a, b, out = args
        return lambda: torch.bmm(a, b, out=out)
    if part == "router_topk":  # sigmoid scores, top-k experts, renormalised weights
        logits, weights, ids = args
        k = ids.shape[1]

        def route() -> None:
            top = torch.topk(logits.float().sigmoid(), k, dim=-1)
            ids.copy_(top.indices)
            weights.copy_(top.values / top.values.sum(dim=-1, keepdim=True))

        return route
    if part == "attention_mla_decode":  # absorbed MLA: B heads of [latent | rope] queries over one latent cache
        # q_nope [H, B, Dl] (heads first, as the absorb bmm leaves it), q_pe [B, H, Dr],
        # latent [B, L, Dl + Dr], out [H, B, Dl]
        # The H heads share one latent cache, so they are the query positions of one head: the same
        # scores as multi-query attention without expanding the cache H times (SDPA's GQA path
        # materialised it: 9 GiB at T=16, an OOM beside two other trees on an 80 GB H100, 2026-12-07).
        q_nope, q_pe, latent, out = args
        d_latent = q_nope.shape[-1]
        keys = latent.unsqueeze(1)  # [B, 1, L, Dl + Dr]
        values = latent[..., :d_latent].unsqueeze(1)
        out4 = out.permute(1, 0, 2).unsqueeze(1)  # [B, 1, H, Dl], a view of out
        scale = 1.0 / math.sqrt(d_latent + q_pe.shape[-1])

        def attend() -> None:
            q = torch.cat([q_nope.transpose(0, 1), q_pe], dim=-1).unsqueeze(1)  # [B, 1, H, Dl + Dr]
            out4.copy_(F.scaled_dot_product_attention(q, keys, values, scale=scale))

        return attend
    if part == "grouped_linear_fp8":  # weight [E, N, K/2] bf16: the bytes and time of fp8 [E, N, K] experts
        inp, weight, offsets, out = args
        half = inp[:, : weight.shape[2]]
        weight_t = weight.transpose(1, 2)
        return lambda: out.copy_(torch._grouped_mm(half, weight_t, offs=offsets))
    if part == "moe_gather":  # the rows' first out-width columns (all of them, but for an fp8 stand-in)
        inp, rows, out = args
        src = inp[:, : out.shape[1]]
        return lambda: torch.index_select(src, 0, rows, out=out)
    if part == "grouped_linear":
        inp, weight, offsets, out = args
        weight_t = weight.transpose(1, 2)  # [E, in, out], column-major: what _grouped_mm takes
        return lambda: out.copy_(torch._grouped_mm(inp, weight_t, offs=offsets))
    if part == "moe_combine":
        inp, inverse, weights, out = args
        tokens, topk = inverse.shape
        slots = inverse.reshape(-1)
        gathered = torch.empty((tokens * topk, inp.shape[1]), dtype=inp.dtype, device=inp.device)
        w3, g3, o3 = weights.view(tokens, 1, topk), gathered.view(tokens, topk, -1), out.view(tokens, 1, -1)

        def combine() -> None:
            torch.index_select(inp, 0, slots, out=gathered)
            torch.bmm(w3, g3, out=o3)

        return combine
    raise KeyError(f"unknown torch part {part!r}")


def _build_concurrently(per_buf: Mapping[str, Call], names: Sequence[str]) -> None:
    """First calls of the SGLang steps ``names`` at once, so their JIT modules build in parallel.

    SGLang's own ``parallel_compile`` runs them in threads; the launches all go to the one
    current stream, so the GPU still runs them one after another (no race on the shared
    buffers, only another order, which a warm-up does not care about). A failure is left to
    the eager warm-up that follows, which says which step failed or skips an optional one.
    """
    try:
        from sglang.kernels.jit.utils import parallel_compile
    except ImportError:  # a tree without it: the eager warm-up builds one module at a time
        return

    def first_call(call: Call) -> Call:
        def build() -> None:
            try:
                call()
            except Exception:  # noqa: BLE001 - reported by the eager warm-up after this
                pass

        return build

    parallel_compile([first_call(per_buf[name]) for name in names if name in per_buf])


CONTEXT = "context:"  # the sample label of a step timed in its neighbourhood: "context:<step>"


def neighbourhoods(names: Sequence[str], sglang: Sequence[str]) -> dict[str, list[str]]:
    """Each SGLang step with the steps just before and after it in the layer, in order.

    Layers repeat, so the first step's predecessor is the last step (the previous layer's) and
    the last step's successor is the first. A layer of fewer than three steps has no
    neighbourhood smaller than itself: none is timed."""
    if len(names) < 3:
        return {}
    out = {}
    for i, name in enumerate(names):
        if name in sglang:
            out[name] = [names[i - 1], name, names[(i + 1) % len(names)]]
    return out


def cmd_layer(req: JsonDict) -> JsonDict:
    """Time the planned layer, the SGLang steps alone, and each step alone, in CUDA graphs."""
    import torch

    from optimize.harness import timing

    plan: JsonDict = req["plan"]
    model_dtype = str(req["dtype"])
    steps: list[JsonDict] = list(plan["steps"])
    specs: dict[str, JsonDict] = {n: s for n, s in dict(plan["tensors"]).items() if "view" not in s}
    views: dict[str, JsonDict] = {n: s for n, s in dict(plan["tensors"]).items() if "view" in s}
    skipped: dict[str, str] = {}
    functions: dict[str, Callable[..., object]] = {}
    for step in steps:
        if step.get("op") is None:
            continue
        try:
            functions[str(step["name"])] = _public(str(step["function"]))
        except (ImportError, AttributeError) as err:
            if not step.get("optional"):
                raise
            skipped[str(step["name"])] = f"this tree has no {step['function']} ({type(err).__name__}: {err})"
    steps = [s for s in steps if str(s["name"]) not in skipped]

    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(req.get("seed", 0)))
    _held = _shift_placement(int(req.get("placement_shift_mib", 0)))  # kept until the request ends
    shared = {n: _tensor(s, model_dtype, gen) for n, s in specs.items() if s.get("shared")}
    per_set = sum(
        math.prod(int(d) for d in s["shape"])
        * torch.empty((), dtype=_torch_dtype(str(s["dtype"]), model_dtype)).element_size()
        for s in specs.values()
        if not s.get("shared")
    )
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    sets = timing.buffer_sets(per_set, l2, float(req.get("l2_multiple", 3.0)), max_sets=int(req.get("max_sets", 64)))
    bufs = [
        {**shared, **{n: _tensor(s, model_dtype, gen) for n, s in specs.items() if not s.get("shared")}}
        for _ in range(sets)
    ]
    for buf in bufs:  # a view shares its tensor's memory and strides (``q[..., :rotary_dim]``)
        buf.update({n: buf[str(v["view"])].narrow(-1, 0, int(v["narrow"])) for n, v in views.items()})

    def resolve(entry: JsonDict, buf: Mapping[str, torch.Tensor]) -> Any:
        if "tensor" in entry:
            return buf[entry["tensor"]]
        if "dtype" in entry:  # a literal torch dtype (``{ dtype = "fp32" }`` in the recipe)
            return _torch_dtype(str(entry["dtype"]), model_dtype)
        return entry["value"]

    def step_call(step: JsonDict, buf: Mapping[str, torch.Tensor]) -> Call:
        args = [resolve(a, buf) for a in step["args"]]
        if step.get("op") is None:
            return _torch_part(str(step["torch"]), args)
        fn = functions[str(step["name"])]
        kwargs = {k: resolve(v, buf) for k, v in dict(step.get("kwargs") or {}).items()}
        return lambda: fn(*args, **kwargs)

    calls = [{str(s["name"]): step_call(s, buf) for s in steps} for buf in bufs]
    if req.get("parallel_build"):
        _build_concurrently(calls[0], [str(s["name"]) for s in steps if s.get("op") is not None])
    for per_buf in calls:  # warm up eagerly: JIT builds and loads happen here, never inside a capture
        for step in steps:
            name = str(step["name"])
            if name not in per_buf:
                continue
            try:
                per_buf[name]()
            except Exception as err:
                if not step.get("optional"):
                    raise
                skipped[name] = f"{step['function']} failed at these shapes: {type(err).__name__}: {err}"
                for other in calls:
                    other.pop(name, None)
    torch.cuda.synchronize()
    names = [str(s["name"]) for s in steps if str(s["name"]) not in skipped]
    sglang = [str(s["name"]) for s in steps if s.get("op") is not None and str(s["name"]) not in skipped]
    n = timing.calls_per_graph(int(req.get("graph_calls", 20)), sets)
    stream = timing.process_stream()  # one stream per worker process: timing.process_stream says why

    def sequence(per_buf: Mapping[str, Call], which: Sequence[str]) -> Call:
        def run() -> None:
            for name in which:
                per_buf[name]()

        return run

    contexts = neighbourhoods(names, sglang)
    groups: dict[str, Sequence[str]] = {
        "layer": names,
        "non_gemm": sglang,
        **{name: [name] for name in names},
        **{f"{CONTEXT}{name}": around for name, around in contexts.items()},
    }
    graphs = {}
    with torch.cuda.stream(stream):
        for label, which in groups.items():
            if which:
                graphs[label] = timing.capture([sequence(calls[i % sets], which) for i in range(n)], stream)
    samples = timing.time_graphs(graphs, {label: n for label in graphs}, int(req.get("repeats", 15)), stream)
    return {
        "ok": True,
        "ops": names,
        "sglang_ops": sglang,
        "contexts": contexts,
        "samples_us": samples,
        "skipped": skipped,
        "sets": sets,
        "calls_per_graph": n,
        "attention": f"torch {torch.__version__} scaled_dot_product_attention",
    }
