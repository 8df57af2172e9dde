"""The worker's timing (:class:`Timer`): baseline and candidate captured in CUDA graphs over buffer
sets past the L2, interleaved, with the inputs rotated against the outputs and sampled sets of each
timed graph checked against the baseline's. :mod:`optimize.harness.worker` says what must stay true."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from contract.plan import plan_call
from optimize.harness import compare, inputs, loader, references, roofline, timing
from optimize.harness.protocol import (
    TimingCase,
    TimingResult,
    WorkerRequest,
)
from optimize.harness.worker_base import (
    TIMING_MEMORY_FRACTION,
    free_memory,
    is_cuda_error,
    ref_call,
)


class Timer:
    def __init__(self, request: WorkerRequest, device: Any, stream: Any, info) -> None:
        self.request = request
        self.device = device
        self.stream = stream
        self.info = info
        self.reference = references.get(request.contract.reference)
        self._compiled_fns: dict[Any, Callable[..., Any]] = {}  # reference function -> torch.compile of it

    def time_case(self, case: TimingCase) -> TimingResult:
        import torch

        req = self.request
        contract = req.contract
        plan = plan_call(contract, case.sizes, case.dtype, "contiguous")
        gen = torch.Generator(device=self.device)
        gen.manual_seed(random.SystemRandom().randrange(1 << 62))
        per_set = sum(t.storage_numel * t.itemsize for t in plan.tensors)
        sets = max(2, timing.buffer_sets(per_set, self.info.l2_bytes, req.harness.l2_multiple))  # 2: the rotation
        free, _ = torch.cuda.mem_get_info()
        notes = []
        budget = int(free * TIMING_MEMORY_FRACTION)
        if sets * per_set > budget and sets > 1:
            sets = max(1, budget // per_set)
            notes.append(f"buffer sets limited to {sets} by free memory" + (": inputs not rotated" if sets < 2 else ""))
        images = inputs.make_images(plan, "normal", gen, self.device, outputs="poison")
        second = inputs.second_inputs(plan, "normal", gen, self.device)
        bufsets = [inputs.Buffers(plan, self.device) for _ in range(sets)]
        inputs.load_sets(bufsets, images, second)
        calls = timing.rotated_calls(req.harness.graph_calls, sets)
        impls = {"baseline": loader.function(req.baseline_libraries[case.unit], case.export, owner="baseline")}
        if req.candidate_libraries:
            impls["candidate"] = loader.function(req.candidate_libraries[case.unit], case.export, owner="candidate")
        graphs, counts = {}, {}
        arg_lists = [bufsets[s].args(inputs_from=bufsets[q]) for s, q in timing.rotation(calls, sets)]
        for name, fn in impls.items():
            with torch.cuda.stream(self.stream):
                fn(*arg_lists[0])
            self.stream.synchronize()
            passes = req.planted_passes if name == "baseline" else 1  # track ab --plant: an extra pass, known size
            graphs[name] = timing.capture([bind(fn, args) for args in arg_lists for _ in range(passes)], self.stream)
            counts[name] = calls
        if self.reference is not None and (req.torch_eager or req.torch_compile):
            self._add_torch(self.reference, plan, bufsets, sets, calls, graphs, counts, notes)
        samples = timing.time_graphs(graphs, counts, req.harness.repeats, self.stream)
        validated = 0
        if "candidate" in graphs:
            validated = self._validate(case, plan, (images, second), bufsets, graphs, calls)
        del images, second
        stats = {name: timing.summarize(values) for name, values in samples.items()}
        base = stats["baseline"]
        cand = stats.get("candidate")
        result = TimingResult(
            label=case.label,
            sizes=case.sizes,
            dtype=case.dtype,
            bytes=roofline.contract_bytes(plan, contract),
            byte_bound=contract.byte_bound,
            calls_per_graph=calls,
            buffer_sets=sets,
            repeats=req.harness.repeats,
            baseline_us=base.median,
            baseline_spread_pct=base.spread_pct,
            candidate_us=cand.median if cand else None,
            candidate_spread_pct=cand.spread_pct if cand else None,
            eager_us=stats["eager"].median if "eager" in stats else None,
            compile_us=stats["compile"].median if "compile" in stats else None,
            notes=notes,
            must_move_bytes=roofline.must_move_bytes(plan, contract),
            validated_sets=validated,
            tokens=case.tokens,
            traffic=roofline.contract_traffic(plan),
        )
        del graphs, bufsets, arg_lists
        free_memory()
        return result

    def _validate(self, case: TimingCase, plan, images, bufsets, graphs, calls: int) -> int:
        """Compare the candidate's timed graph with the baseline's on the same inputs; returns the sets compared.

        Each graph is replayed once after every set is reloaded from ``images`` (the image and the
        rotation's second inputs: inputs and inouts restored, outputs NaN-poisoned), so both start from the same
        state and an output element a call skipped still holds the poison. Outputs and
        inouts used once per replay are judged element by element
        (:func:`compare.compare_tensor`, the task's tolerance); an inout updated
        several times in one replay (fewer sets than calls) is judged normwise,
        because rounding differences an honest rewrite may have compound over the
        updates. Raises :class:`TimedMismatch` with the failure report.
        """
        import torch

        sets = len(bufsets)
        chosen = timing.sets_to_validate(sets, random.Random(random.SystemRandom().randrange(1 << 62)))
        kept = [t for t in plan.tensors if t.judged]
        snapshots: dict[str, dict[int, dict[str, Any]]] = {}
        for name in ("baseline", "candidate"):
            inputs.load_sets(bufsets, *images)
            try:
                graphs[name].replay()
                torch.cuda.synchronize()
            except Exception as err:  # noqa: BLE001
                if name == "baseline" or not is_cuda_error(err):
                    raise
                raise TimedMismatch(
                    timing.timed_failure(case.label, case.dtype, 0, sets, calls, name, f"replay failed: {err}")
                ) from None
            snapshots[name] = {i: {t.name: bufsets[i].storages[t.name].clone() for t in kept} for i in chosen}
        for i in chosen:
            uses = timing.set_uses(i, sets, calls)
            for t in kept:
                reason = compare.timed_reason(
                    t, snapshots["baseline"][i][t.name], snapshots["candidate"][i][t.name], normwise=uses > 1
                )
                if reason:
                    if t.role == "inout" and uses > 1:
                        reason += f" (normwise: this inout tensor is updated {uses} times per replay)"
                    raise TimedMismatch(
                        timing.timed_failure(case.label, case.dtype, i, sets, calls, "candidate", reason)
                    )
        del snapshots
        return len(chosen)

    def _compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.compile(fn)`` with default settings, made once per worker.

        Default settings are what a PyTorch user gets: the first shape compiles
        static, the next change of shape recompiles with dynamic sizes, and that
        kernel then serves every later shape (a bench over a whole catalog pays
        two or three compiles, not one per shape).
        """
        import torch

        if fn not in self._compiled_fns:
            self._compiled_fns[fn] = torch.compile(fn)
        return self._compiled_fns[fn]

    def _add_torch(self, reference: references.Reference, plan, bufsets, sets, calls, graphs, counts, notes) -> None:
        import torch

        per_set = [reference.eager(ref_call(self.request.contract, plan, bufs.views)) for bufs in bufsets]
        variants = []
        if self.request.torch_eager:
            variants.append(("eager", per_set[0][0]))
        if self.request.torch_compile:
            try:
                variants.append(("compile", self._compiled(per_set[0][0])))
            except Exception as err:  # noqa: BLE001 - a missing compiler is a note, not a failure
                notes.append(f"torch.compile unavailable: {err}")
        for name, fn in variants:
            try:
                with torch.cuda.stream(self.stream):
                    for _ in range(2):
                        fn(*per_set[0][1])
                self.stream.synchronize()
                graphs[name] = timing.capture([bind(fn, per_set[i % sets][1]) for i in range(calls)], self.stream)
                counts[name] = calls
            except Exception as err:  # noqa: BLE001
                notes.append(f"torch {name} not timed: {type(err).__name__}: {str(err)[:300]}")


class TimedMismatch(Exception):
    """The candidate's timed graph produced outputs the baseline's did not (the message is the report)."""


def bind(fn: Callable[..., Any], args: list[Any] | tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: fn(*args)
