"""The evaluation harness: the measurement core under the testing and profiling agents and the
``bench`` / ``track`` commands (:mod:`bench`, above the optimizer). It imports nothing of
``optimize/`` above it: the language seam's coder half is :mod:`optimize.languages`.

Public entry points (imported lazily, so importing the package needs no torch):

- ``from optimize.harness.evaluate import evaluate``: build a candidate and the
  baseline, check it against the baseline on catalog and fresh held-out shapes
  in a separate worker process, time both interleaved -> ``Evaluation``.
- :func:`profile` (``optimize.harness.tools.profile_ncu``) and :func:`sanitize`
  (``optimize.harness.tools.sanitize``): Nsight Compute figures and
  compute-sanitizer verdicts for final candidates ("unavailable" without the tools).
- ``python -m optimize.harness.gpu_check --out DIR``: the harness's own GPU check.

Modules, one per concern: inputs (filling argument buffers on the GPU; the planning
half is the :mod:`contract` package), compare
(verdicts), references (float64 and eager PyTorch), languages (the build half of the seam on
``Task.language``: build, sglang package, pre-check), triton_check (a Triton point compiled
for sm_90 on this machine), triton_library (a Triton task's spliced
file, built content-addressed and loaded as one module per owner), loader (tvm-ffi modules and
Triton libraries), isolate + worker (process isolation; worker_base, worker_check, worker_timing: its parts), verdict (a worker result read as an
Evaluation: outcome, per-shape speedups, the floor's plausibility), timing (graphs, interleaving,
spread, the one stream per process), floor_kernels (the hand-written PTX kernels the floors
are timed with), roofline (bytes, device ceilings), adversarial (the cheat suite),
baseline_repair (the one
"baseline contradicts its contract -> fix -> run again" loop of the sweep and the
optimize loop), population (a search population built at once and evaluated in one worker).
"""

from __future__ import annotations

from typing import Any

# No package-level ``evaluate`` function: it would be shadowed by the submodule of
# the same name as soon as that is imported. Import it from the module.
__all__ = ["profile", "sanitize"]


def profile(*args: Any, **kwargs: Any):
    from optimize.harness.tools import profile_ncu

    return profile_ncu(*args, **kwargs)


def sanitize(*args: Any, **kwargs: Any):
    from optimize.harness.tools import sanitize as _sanitize

    return _sanitize(*args, **kwargs)
