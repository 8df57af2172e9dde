"""Kernelsmith optimize stage: rounds of plan -> code -> evaluate -> accept per op.

Sub-packages: ``harness`` (testing + profiling core), ``llm`` (clients, cache,
fakes), ``agents`` (testing, profiling, planning, coding, repair, single),
``backends`` (gpu, replay), ``search`` (space -> tuner -> rounds: the offline
coder's search over composed transforms), ``scale`` (units of work spread over GPUs: a
lane per local GPU, or Ray tasks across hosts; used by the commands and by :mod:`bench` above).
Top-level modules in dependency order:

- errors: the stage's error types;
- cuda_text -> cuda_regions -> cuda_spans, cuda_facts, reach: the CUDA-region toolkit
  (tree-sitter text and preprocessor; the Region model of the editable spans;
  span texts and definition spans; what their code does; which code only other ops
  run, so that no candidate edits it unmeasured);
- transform_edits (byte edits checked to parse) -> knob_transforms (a constant's value,
  ``__launch_bounds__``, ``#pragma unroll``), math_transforms (fast intrinsics), hint_transforms
  (evict-first typed accesses), divmod_transforms (a strided loop's quotient and remainder carried),
  dispatch_transforms (a launcher's size switch given larger power-of-two cases): their
  site counts feed features; kernel_facts (each launch site and kernel read from the code) ->
  features (static features + profile facts) -> pdl_transforms (PDL on,
  late wait, early trigger), grid_transforms (a grid-stride kernel's grid capped at whole
  waves of the device) -> transforms (the
  mechanical edits' registry and the others; triton_transforms, the libcst edits of a
  Triton task's regions, and triton_coarsen (program coarsening, over triton_transforms)
  come before it and are registered there),
  skills (library + rule language), trajectory (round records), policy (the
  deterministic planner); languages (the coder's half of the seam on ``Task.language``: dialect,
  options, facts, foreign code, over ``harness.languages``' build half);
- budget, hooks (the loop's typed integration points), run_folder (one op's folder,
  best/, run.json, summary lines), acceptance (regressions, minimum gain, round
  verdicts), measure (evaluations and profiles once each, GPU time charged; a search population
  pre-checked by the task's language, ``harness.languages``), report;
- session (an op opened, rounds recorded, the best validated: shared by every coder,
  the outside agent's included), loop (the coders' rounds), command
  (``kernelsmith optimize``).
"""
