"""The worker process: correctness checks, then interleaved timing, on one GPU.

Run as ``python -m optimize.harness.worker request.json result.json`` by
:mod:`optimize.harness.isolate`; never imported by the parent for its work.
It reads a :class:`~optimize.harness.protocol.WorkerRequest`, writes a
:class:`~optimize.harness.protocol.WorkerResult`, and exits 0. Anything worse
(a fault, an abort, a hang) is the parent's to report.

One correctness case, for each implementation (baseline first, then candidate),
on that implementation's own buffers:

Run 1 (eager, stream-ordered). Inputs are filled with *decoy* values and the
outputs with the NaN poison; the device is synchronised; then, on the
harness's own (non-default) stream, a ~0.5 ms sleep kernel, the copy of the
real inputs X, and the call. A kernel that runs on any other stream (a created
stream, the legacy default stream) is not ordered after that copy: it computes
from the decoys and fails the comparison.

Run 2 (CUDA graph, same buffers). The call is captured into a CUDA graph (as
SGLang serves it); then inputs get decoys again, outputs get *finite garbage*,
and after a sleep the fresh inputs Y are copied in and the graph is replayed.
This catches: work launched outside the capture stream (absent from the
graph: the garbage stays); a result cached from an earlier call keyed by
pointer or shape (same pointers, new values); a kernel that reads its output
before writing it (garbage in, garbage out); a kernel that cannot be captured.

After each run: every input storage is bit-identical to what was loaded (guard
bands and stride gaps included), every output's guard bands and gaps still hold
what was there (no write outside the tensor), and, for the candidate, every
output and inout element matches the baseline's (:mod:`optimize.harness.compare`),
plus the float64 reference where the contract names one.

Then timing (:mod:`optimize.harness.timing`): graphs of back-to-back calls over
rotating buffer sets, baseline and candidate interleaved. What is timed is
validated too: after the timed replays, every buffer set is reloaded with the
timing inputs (outputs poisoned), each implementation's *timed graph* is replayed
once more, and the sampled buffer sets (:func:`timing.sets_to_validate`) of the
candidate are compared with the baseline's. A launcher that behaves differently
inside a many-call capture than in an eager call or a one-call graph (skips the
2nd call on, writes only the first set) is ``incorrect`` there.

What must stay true: every kernel call is followed by a synchronisation before
its results are used, so a fault is attributed to the call that caused it;
the first failure ends the checks (the CUDA context may be gone); no input
ever repeats between runs or cases.
"""

from __future__ import annotations

import os
import pathlib
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contract.plan import plan_call
from optimize.harness import compare, inputs, loader, references, roofline, timing
from optimize.harness.protocol import (
    CheckCase,
    CheckResult,
    TimingCase,
    TimingResult,
    WorkerRequest,
    WorkerResult,
)
from optimize.harness.triton_library import LibraryLoadFailed
from pipeline.record_io import write_record
from pipeline.records import Contract

SLEEP_CYCLES = 1_000_000  # ~0.5 ms at H200 clocks: far longer than any launch latency
EXIT_NO_GPU = 3
EXIT_HARNESS = 4  # the harness itself raised: the parent reports a HarnessError, not a crashed candidate
TIMING_MEMORY_FRACTION = 0.5  # memory the timing buffers may take, as a fraction of what is free


def log(message: str) -> None:
    print(f"[worker {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class CaseFailure(Exception):
    """Ends a case: ``kind`` says whose fault and how (incorrect/crashed: the candidate's;
    baseline_failed: the baseline's, raised out of the checks; skipped: a held-out shape
    the baseline itself rejects)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind  # incorrect | crashed | baseline_failed | skipped
        self.reason = reason


def _is_cuda_error(err: BaseException) -> bool:
    text = f"{type(err).__name__}: {err}".lower()
    return any(
        s in text for s in ("cuda error", "cudaerror", "illegal", "misaligned", "launch failure", "acceleratorerror")
    )


@dataclass
class Impl:
    name: str  # "baseline" | "candidate"
    libraries: list[str]

    def fn(self, unit: int, export: str) -> Callable[..., Any]:
        try:
            return loader.function(self.libraries[unit], export, owner=self.name)
        except LibraryLoadFailed as err:  # a Triton file that does not import: its author's fault
            raise CaseFailure("baseline_failed" if self.name == "baseline" else "incorrect", str(err)) from None


@dataclass
class RunOutput:
    storages: dict[str, Any]  # output/inout name -> flat storage snapshot after the run
    repeatable: bool | None = None  # run 1 only: its inputs replayed once more gave its outputs bit for bit


class Checker:
    """Runs correctness cases for one request."""

    def __init__(self, request: WorkerRequest, device: Any, stream: Any) -> None:
        self.request = request
        self.contract: Contract = request.contract
        self.device = device
        self.stream = stream
        self.reference = references.get(self.contract.reference)
        self.baseline = Impl("baseline", request.baseline_libraries)
        self.candidate = Impl("candidate", request.candidate_libraries) if request.candidate_libraries else None
        self.role_evidence: dict[str, str] = {}  # see WorkerResult.role_evidence
        self.written: set[str] = set()  # outputs the baseline wrote in some case: never "never written"

    # ------------------------------------------------------------------ one case

    def run_case(self, case: CheckCase) -> CheckResult:
        import torch

        start = time.monotonic()
        rng = random.Random(case.seed)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(case.seed)
        plan = plan_call(self.contract, case.sizes, case.dtype, case.layout, rng)
        images_x = inputs.make_images(plan, case.distribution, gen, self.device, outputs="poison")
        images_y = inputs.make_images(plan, case.distribution, gen, self.device, outputs="garbage")
        decoy = {t.name: inputs.decoy_image(images_x[t.name], t) for t in plan.tensors if t.filled}
        inside = {}
        for t in plan.tensors:
            mask = torch.zeros(t.storage_numel, dtype=torch.bool, device=self.device)
            inputs.view_of(mask, t).fill_(True)
            inside[t.name] = mask
        result = dict(
            label=case.label,
            sizes=case.sizes,
            dtype=case.dtype,
            distribution=case.distribution,
            layout=case.layout,
            held_out=case.held_out,
        )
        try:
            base_runs = self._run_impl(self.baseline, case, plan, images_x, images_y, decoy, inside)
            if self.candidate is None:
                verdict = self._judge(case, plan, images_x, base_runs)
            else:
                cand_runs = self._run_impl(self.candidate, case, plan, images_x, images_y, decoy, inside)
                verdict = self._judge(case, plan, images_x, base_runs, cand_runs)
                if base_runs[0].repeatable and not cand_runs[0].repeatable:
                    raise CaseFailure(
                        "incorrect",
                        f"{case_name(case)}, run 3 (run 1's inputs replayed through the graph): the outputs differ "
                        "bit for bit from run 1's, where the baseline's repeat exactly (a race?)",
                    )
            verdict["baseline_repeatable"] = base_runs[0].repeatable
        except CaseFailure as failure:
            if failure.kind == "baseline_failed":
                raise
            status = "skipped" if failure.kind == "skipped" else "fail"
            kind = failure.kind if failure.kind in ("incorrect", "crashed") else None
            return CheckResult(
                **result, status=status, failure=kind, reason=failure.reason, seconds=time.monotonic() - start
            )
        return CheckResult(**result, **verdict, seconds=time.monotonic() - start)

    def _run_impl(self, impl: Impl, case, plan, images_x, images_y, decoy, inside) -> tuple[RunOutput, RunOutput]:
        import torch

        who = impl.name
        fn = impl.fn(case.unit, case.export)
        bufs = inputs.Buffers(plan, self.device)
        args = bufs.args()
        inputs_x = {n: img for n, img in images_x.items() if n in decoy}
        outputs_x = {n: img for n, img in images_x.items() if n not in decoy}
        inputs_y = {n: img for n, img in images_y.items() if n in decoy}
        outputs_y = {n: img for n, img in images_y.items() if n not in decoy}
        unjudged = {t.name for t in plan.tensors if not t.judged}  # inputs and scratch: checked in place, never kept

        # run 1: eager, stream-ordered against decoys
        log(f"{who}: {case.label} {case.dtype} {case.distribution} {case.layout}: run 1 (eager)")
        bufs.load(decoy)
        bufs.load(outputs_x)
        torch.cuda.synchronize()
        _sleep()
        bufs.load(inputs_x)
        self._call(impl, fn, args, case, "run 1")
        self._sync(impl, case, "run 1")
        self._check_untouched(impl, plan, images_x, bufs.storages, inside, "run 1", case)
        run1 = RunOutput({n: s.clone() for n, s in bufs.storages.items() if n not in unjudged})

        # run 2: captured in a CUDA graph, replayed on new inputs over finite garbage
        log(f"{who}: {case.label} {case.dtype}: run 2 (CUDA graph replay)")
        try:
            graph = timing.capture([lambda: fn(*args)], self.stream)
        except Exception as err:  # noqa: BLE001 - any capture failure is the kernel's
            kind = "crashed" if _is_cuda_error(err) else "incorrect"
            self._fail(
                impl, kind, f"cannot be captured in a CUDA graph (SGLang replays kernels in graphs): {err}", case
            )
        bufs.load(decoy)
        bufs.load(outputs_y)
        torch.cuda.synchronize()
        _sleep()
        bufs.load(inputs_y)
        try:
            graph.replay()
        except Exception as err:  # noqa: BLE001
            self._fail(impl, "crashed", f"graph replay failed: {err}", case)
        self._sync(impl, case, "run 2")
        self._check_untouched(impl, plan, images_y, bufs.storages, inside, "run 2", case)
        run2 = RunOutput({n: s.clone() for n, s in bufs.storages.items() if n not in unjudged})
        # run 3: run 1's inputs and poison again, through the graph: a race or an unsynchronised
        # reduction shows as outputs that move between runs of the same inputs
        bufs.load(decoy)
        bufs.load(outputs_x)
        bufs.load(inputs_x)
        try:
            graph.replay()
        except Exception as err:  # noqa: BLE001
            self._fail(impl, "crashed", f"graph replay failed: {err}", case)
        self._sync(impl, case, "run 3")
        run1.repeatable = all(compare.same_bits(bufs.storages[n], run1.storages[n]) for n in run1.storages)
        del graph, bufs
        return run1, run2

    def _call(self, impl: Impl, fn, args, case, run: str) -> None:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - classified below
            if _is_cuda_error(err):
                self._fail(impl, "crashed", f"{run}: the call failed with a CUDA error: {err}", case)
            if impl.name == "baseline":
                if case.held_out:
                    raise CaseFailure("skipped", f"the baseline rejects this held-out shape: {err}") from None
                raise CaseFailure(
                    "baseline_failed", f"the baseline rejects catalog shape {case.label}: {err}"
                ) from None
            self._fail(impl, "incorrect", f"{run}: the candidate refused inputs the baseline accepts: {err}", case)

    def _sync(self, impl: Impl, case, run: str) -> None:
        import torch

        try:
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001
            self._fail(impl, "crashed", f"{run}: CUDA error after the call: {err}", case)

    def _fail(self, impl: Impl, kind: str, reason: str, case) -> None:
        if impl.name == "baseline":
            raise CaseFailure("baseline_failed", f"baseline at {case.label} {case.dtype}: {reason}")
        raise CaseFailure(kind, f"{case_name(case)}: {reason}")

    def _check_untouched(self, impl: Impl, plan, images, storages, inside, label: str, case) -> None:
        """Inputs bit-identical; guard bands and stride gaps of every tensor unchanged.

        The baseline's written "inputs" are all noted as role evidence before the first
        one fails the case, so the sweep can fix every one of them in one re-check."""
        first_written: str | None = None
        for t in plan.tensors:
            bits_t = inputs.bits_dtype(t.dtype)
            before = images[t.name].view(bits_t)
            after = storages[t.name].view(bits_t)
            changed = before != after
            if t.role == "input":
                if bool(changed.any().item()):
                    if impl.name != "baseline":
                        reason = compare.changed_reason(
                            t, changed, before, after, what=f"{label}: input {t.name} was modified"
                        )
                        self._fail(impl, "incorrect", reason, case)
                    self.role_evidence[t.name] = "written"
                    if first_written is None:
                        first_written = compare.changed_reason(
                            t, changed, before, after, what=f"{label}: input {t.name} was modified"
                        )
            else:
                outside = changed & ~inside[t.name]
                if bool(outside.any().item()):
                    reason = compare.changed_reason(
                        t, outside, before, after, what=f"{label}: wrote outside tensor {t.name}"
                    )
                    self._fail(impl, "incorrect", reason, case)
        if first_written is not None:
            self._fail(impl, "incorrect", first_written, case)

    # ------------------------------------------------------------------ judging

    def _judge(self, case, plan, images_x, base_runs, cand_runs=None) -> dict[str, Any]:
        """Compare outputs: candidate vs baseline (runs 1 and 2), and vs the float64 reference.

        Without a candidate the baseline is judged on its own: it must write every
        output element, and match the reference where there is one.
        """
        checked = cand_runs if cand_runs is not None else base_runs
        out: dict[str, Any] = {"status": "pass"}
        bitwise = True
        max_abs = 0.0
        for t in plan.tensors:
            if not t.judged:
                continue
            for run_index, (base, cand) in enumerate(zip(base_runs, checked)):
                exp_view = compare.in_order(inputs.view_of(base.storages[t.name], t), t.order)
                got_view = compare.in_order(inputs.view_of(cand.storages[t.name], t), t.order)
                bits_t = inputs.bits_dtype(t.dtype)
                poison = inputs.poison_value(t.dtype)
                first_run = run_index == 0 and t.role == "output"
                exp_unwritten = (exp_view.view(bits_t) == poison) if first_run else None
                got_unwritten = (got_view.view(bits_t) == poison) if first_run else None
                if cand_runs is None:
                    # baseline on its own: it must write every output element in run 1
                    # (exp_unwritten is set exactly on the first run of an output)
                    if exp_unwritten is not None and not bool(exp_unwritten.all().item()):
                        self.written.add(t.name)
                    if exp_unwritten is not None and bool(exp_unwritten.any().item()):
                        if t.name not in self.written:  # untouched here and in every case before
                            self.role_evidence[t.name] = "never_written"
                        index = compare.first_index(exp_unwritten)
                        raise CaseFailure(
                            "incorrect",
                            f"{case_name(case)}: the baseline leaves {compare.fmt_index(t.name, index, t.shape)} "
                            f"unwritten ({compare.count_true(exp_unwritten)} elements)",
                        )
                    continue
                verdict = compare.compare_tensor(
                    t.name,
                    exp_view,
                    got_view,
                    t.dtype,
                    shape=t.shape,
                    not_written=got_unwritten,
                    expected_not_written=exp_unwritten,
                    expected_bits=exp_view.view(bits_t),
                    got_bits=got_view.view(bits_t),
                )
                if not verdict.ok:
                    how = (
                        "run 1 (eager call after decoy inputs, outputs poisoned with NaN)"
                        if run_index == 0
                        else "run 2 (CUDA-graph replay on new inputs, outputs pre-filled with finite garbage)"
                    )
                    raise CaseFailure("incorrect", f"{case_name(case)}, {how}: {verdict.reason}")
                bitwise = bitwise and bool(verdict.bitwise_equal)
                if verdict.max_abs_err is not None:
                    max_abs = max(max_abs, verdict.max_abs_err)
        if cand_runs is not None:
            out["bitwise_equal"] = bitwise
            out["max_abs_err"] = max_abs
        if self.reference is not None:
            errs = self._reference_errors(self.reference, case, plan, images_x, base_runs[0], checked[0])
            out.update(errs)
        return out

    def _reference_errors(
        self, reference: references.Reference, case, plan, images_x, base_run, checked_run
    ) -> dict[str, Any]:
        views = {t.name: inputs.view_of(images_x[t.name], t) for t in plan.tensors}
        expected = reference.expected(_ref_call(self.contract, plan, views))
        worst, worst_base = 0.0, 0.0
        for t in plan.tensors:
            if t.name not in expected:
                continue
            ref = expected[t.name]
            base_err, _ = compare.relative_error(inputs.view_of(base_run.storages[t.name], t), ref)
            err, problem = compare.relative_error(inputs.view_of(checked_run.storages[t.name], t), ref)
            who = "candidate" if self.candidate is not None else "baseline"
            reason = compare.judge_reference(
                f"{who} {t.name}", t.dtype, err, base_err if self.candidate is not None else None, problem
            )
            if reason:
                raise CaseFailure("incorrect", f"{case_name(case)}: {reason}")
            worst, worst_base = max(worst, err), max(worst_base, base_err)
        return {"ref_rel_err": worst, "baseline_ref_rel_err": worst_base}

    def check_all(self, cases: list[CheckCase]) -> tuple[list[CheckResult], str, str]:
        """Run every case; returns (results, status, detail)."""
        results: list[CheckResult] = []
        for case in cases:
            try:
                res = self.run_case(case)
            except CaseFailure as failure:  # baseline_failed
                return results, "baseline_failed", failure.reason
            results.append(res)
            if res.status == "fail":
                log(f"FAIL {res.reason}")
                if self.request.stop_at_first_failure:
                    return results, res.failure or "incorrect", res.reason
            _free()
        failed = [r for r in results if r.status == "fail"]
        if failed:
            return results, failed[0].failure or "incorrect", failed[0].reason
        return results, "ok", ""


def _ref_call(contract: Contract, plan: Any, views: dict[str, Any]) -> references.RefCall:
    """The reference's view of one call: tensor names and roles in order, ``views``, and the scalar arguments."""
    scalars = {
        arg.scalar.name: value
        for arg, value in zip(contract.args, plan.args)
        if arg.kind == "scalar" and arg.scalar is not None
    }
    return references.RefCall([t.name for t in plan.tensors], [t.role for t in plan.tensors], views, scalars)


def case_name(case: CheckCase) -> str:
    kind = "held-out" if case.held_out else "catalog"
    return (
        f"{kind} shape {case.label} {case.dtype} ({case.distribution} inputs, {case.layout} layout, seed {case.seed})"
    )


def _sleep() -> None:
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(SLEEP_CYCLES)


def _free(fraction: float = 0.4) -> None:
    """Return cached blocks to the driver only when the cache holds a large share of the card.

    Emptying after every case would make the next case pay cudaMalloc for every
    buffer; never emptying lets a run of large shapes fragment the cache.
    """
    import torch

    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if torch.cuda.memory_reserved() > fraction * total:
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------- timing


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
            graphs[name] = timing.capture([_bind(fn, args) for args in arg_lists for _ in range(passes)], self.stream)
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
        _free()
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
                if name == "baseline" or not _is_cuda_error(err):
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

        per_set = [reference.eager(_ref_call(self.request.contract, plan, bufs.views)) for bufs in bufsets]
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
                graphs[name] = timing.capture([_bind(fn, per_set[i % sets][1]) for i in range(calls)], self.stream)
                counts[name] = calls
            except Exception as err:  # noqa: BLE001
                notes.append(f"torch {name} not timed: {type(err).__name__}: {str(err)[:300]}")


class TimedMismatch(Exception):
    """The candidate's timed graph produced outputs the baseline's did not (the message is the report)."""


def _bind(fn: Callable[..., Any], args: list[Any] | tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: fn(*args)


# ---------------------------------------------------------------------------- modes


def run(request: WorkerRequest) -> WorkerResult:
    import torch

    device, stream = torch.device("cuda", torch.cuda.current_device()), timing.process_stream()
    seconds: dict[str, float] = {}
    loader.use_package(request.sglang_package)  # a Triton file's `import sglang...` (no-op for CUDA)
    if request.mode == "single":
        # never measure the device here: under a profiler or sanitizer that would be slow and pointless
        return _single(
            request, device, stream, roofline.load_cached(request.device_cache_dir, torch.cuda.get_device_name())
        )
    info = roofline.device_info(request.device_cache_dir)
    start = time.monotonic()
    with torch.cuda.stream(stream):
        checker = Checker(request, device, stream)
        checks, status, detail = checker.check_all(request.checks)
    seconds["test"] = time.monotonic() - start
    timings: list[TimingResult] = []
    start = time.monotonic()
    if status == "ok" and request.timings:
        timer = Timer(request, device, stream, info)
        for case in request.timings:
            log(f"timing {case.label} {case.dtype}")
            try:
                with torch.cuda.stream(stream):
                    timings.append(timer.time_case(case))
            except TimedMismatch as mismatch:
                status, detail = "incorrect", str(mismatch)
                break
            except Exception as err:  # noqa: BLE001 - CUDA faults are the kernels'; anything else is ours
                if not _is_cuda_error(err):
                    raise
                status, detail = "crashed", f"CUDA error while timing {case.label} {case.dtype}: {err}"
                break
    seconds["profile"] = time.monotonic() - start
    return WorkerResult(
        status=status,
        detail=detail,
        checks=checks,
        timings=timings,
        device=info,
        seconds=seconds,
        role_evidence=checker.role_evidence if checker.candidate is None else {},
    )


def member_path(result_path: str | os.PathLike[str], index: int) -> pathlib.Path:
    """Where member ``index`` of a population request has its result (beside the request's result file)."""
    return pathlib.Path(result_path).with_name(f"member-{index}.json")


def run_population(request: WorkerRequest, result_path: str) -> WorkerResult:
    """Each member checked and timed in turn, in this one process (torch, the device and the baseline load once).

    A member's result is written as soon as it is known, so a member that kills the
    process loses nothing of the ones before it. After a member that crashed (a CUDA
    fault: this process's context is gone) no other member runs; the parent runs the
    rest in a fresh worker.
    """
    done, crashed = 0, False
    for index, libraries in enumerate(request.population):
        log(f"population member {index}{timing.clock_note()}")
        member = request.model_copy(update={"mode": "evaluate", "candidate_libraries": libraries, "population": []})
        result = run(member)
        write_record(result, member_path(result_path, index))
        done += 1
        if result.status == "crashed":
            crashed = True
            break
    # "crashed" also tells main() to skip the interpreter's teardown, which would touch the lost context
    return WorkerResult(
        status="crashed" if crashed else "ok", detail=f"{done} of {len(request.population)} members evaluated"
    )


def run_batch(request: WorkerRequest, result_path: str) -> WorkerResult:
    """Each request of ``request.batch`` (other ops' bench requests) run in turn in this one process.

    Why: starting a worker (torch, CUDA, the sandbox) cost about 8 s an op in the census on the
    H200 (2026-12-02), more than the op's timing. Each member's result is written as soon as it
    is known. A member that raises outside a kernel gets a ``baseline_failed`` result naming the
    error, and the batch goes on (the parent runs that op again on its own, where the error gets
    its full report and the contract repair). After a CUDA fault (this process's context is gone)
    no other member runs; the parent runs the rest in a fresh worker.
    """
    import torch

    done, crashed = 0, False
    for index, member in enumerate(request.batch):
        log(f"batch member {index}: {member.op_id}")
        started = time.monotonic()
        try:
            result = run(member)
        except Exception as err:  # noqa: BLE001 - recorded as the member's own failure
            if _is_cuda_error(err):
                result = WorkerResult(status="crashed", detail=f"CUDA error in {member.op_id}: {err}")
            else:
                result = WorkerResult(status="baseline_failed", detail=f"{type(err).__name__}: {err}"[:2000])
        # the member's own time, so the census can say which op is slow
        result = result.model_copy(update={"seconds": {**result.seconds, "op": time.monotonic() - started}})
        write_record(result, member_path(result_path, index))
        done += 1
        if result.status == "crashed":
            crashed = True
            break
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the next op's buffer sets start from a clean pool
    return WorkerResult(status="crashed" if crashed else "ok", detail=f"{done} of {len(request.batch)} ops run")


def _single(request: WorkerRequest, device, stream, info) -> WorkerResult:
    """Call one implementation a few times per case, nothing else: what a profiler should see."""
    import torch

    libraries = request.candidate_libraries or request.baseline_libraries
    cases = request.checks or [
        CheckCase(label=t.label, sizes=t.sizes, dtype=t.dtype, export=t.export, unit=t.unit, seed=1)
        for t in request.timings
    ]
    with torch.cuda.stream(stream):
        for case in cases:
            gen = torch.Generator(device=device)
            gen.manual_seed(case.seed)
            plan = plan_call(request.contract, case.sizes, case.dtype, case.layout)
            bufs = inputs.Buffers(plan, device)
            bufs.load(inputs.make_images(plan, case.distribution, gen, device))
            fn = loader.function(libraries[case.unit], case.export, owner="single")
            for _ in range(request.single_calls):
                fn(*bufs.args())
            torch.cuda.synchronize()
    return WorkerResult(status="ok", device=info)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m optimize.harness.worker REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = WorkerRequest.model_validate_json(open(argv[0], encoding="utf-8").read())
    try:
        import torch
    except ImportError:
        print("kernelsmith worker: torch is not installed here", file=sys.stderr)
        return EXIT_NO_GPU
    if not torch.cuda.is_available():
        print("kernelsmith worker: no CUDA device is visible to torch", file=sys.stderr)
        return EXIT_NO_GPU
    try:
        if request.mode == "population":
            result = run_population(request, argv[1])
        elif request.mode == "batch":
            result = run_batch(request, argv[1])
        else:
            result = run(request)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc()
        # a CUDA fault surfacing outside a guarded call is still a kernel's doing
        return 1 if _is_cuda_error(err) else EXIT_HARNESS
    write_record(result, argv[1])
    if result.status == "crashed":
        # the CUDA context is gone: skip interpreter teardown, which would touch it again
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
