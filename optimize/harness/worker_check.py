"""The worker's correctness runs (:class:`Checker`): each case run eagerly, then captured in a CUDA
graph and replayed on new inputs over garbage, then replayed on the first inputs again, and judged
against the baseline and the reference. :mod:`optimize.harness.worker` says what must stay true."""

from __future__ import annotations

import random
import time
from typing import Any

from contract.plan import plan_call
from optimize.harness import compare, inputs, references, timing
from optimize.harness.protocol import (
    CheckCase,
    CheckResult,
    WorkerRequest,
)
from optimize.harness.worker_base import (
    CaseFailure,
    Impl,
    RunOutput,
    case_name,
    free_memory,
    is_cuda_error,
    log,
    pause,
    ref_call,
)
from pipeline.records import Contract


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
        pause()
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
            kind = "crashed" if is_cuda_error(err) else "incorrect"
            self._fail(
                impl, kind, f"cannot be captured in a CUDA graph (SGLang replays kernels in graphs): {err}", case
            )
        bufs.load(decoy)
        bufs.load(outputs_y)
        torch.cuda.synchronize()
        pause()
        bufs.load(inputs_y)
        self._replay(impl, graph, case, "run 2")
        self._check_untouched(impl, plan, images_y, bufs.storages, inside, "run 2", case)
        run2 = RunOutput({n: s.clone() for n, s in bufs.storages.items() if n not in unjudged})
        # run 3: run 1's inputs and poison again, through the graph: a race or an unsynchronised
        # reduction shows as outputs that move between runs of the same inputs
        bufs.load(decoy)
        bufs.load(outputs_x)
        bufs.load(inputs_x)
        self._replay(impl, graph, case, "run 3")
        run1.repeatable = all(
            compare.same_bits(bufs.storages[t.name], run1.storages[t.name], t.dtype)
            for t in plan.tensors
            if t.name in run1.storages
        )
        del graph, bufs
        return run1, run2

    def _call(self, impl: Impl, fn, args, case, run: str) -> None:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - classified below
            if is_cuda_error(err):
                self._fail(impl, "crashed", f"{run}: the call failed with a CUDA error: {err}", case)
            if impl.name == "baseline":
                if case.held_out:
                    raise CaseFailure("skipped", f"the baseline rejects this held-out shape: {err}") from None
                raise CaseFailure(
                    "baseline_failed", f"the baseline rejects catalog shape {case.label}: {err}"
                ) from None
            self._fail(impl, "incorrect", f"{run}: the candidate refused inputs the baseline accepts: {err}", case)

    def _replay(self, impl: Impl, graph: Any, case, run: str) -> None:
        """One replay of the captured call, then the sync that surfaces its CUDA errors; either fails the case."""
        try:
            graph.replay()
        except Exception as err:  # noqa: BLE001
            self._fail(impl, "crashed", f"graph replay failed: {err}", case)
        self._sync(impl, case, run)

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
        expected = reference.expected(ref_call(self.contract, plan, views))
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
            free_memory()
        failed = [r for r in results if r.status == "fail"]
        if failed:
            return results, failed[0].failure or "incorrect", failed[0].reason
        return results, "ok", ""
