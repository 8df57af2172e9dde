"""Kernelsmith optimize stage: rounds of plan -> code -> evaluate -> accept per op.

Sub-packages: ``harness`` (testing + profiling core), ``llm`` (clients, cache,
fakes), ``agents`` (testing, profiling, planning, coding, repair, single),
``backends`` (gpu, replay), ``transforms`` (the mechanical edits and their registry), ``search`` (space -> tuner -> rounds: the offline
coder's search over composed transforms), ``scale`` (units of work spread over GPUs: a
lane per local GPU, or Ray tasks across hosts; used by the commands and by :mod:`bench` above).
Top-level modules in dependency order:

- errors: the stage's error types;
- cuda_functions -> cuda_regions -> cuda_spans, cuda_facts, cuda_sites, reach: the
  CUDA-region toolkit, reading C++/CUDA through the floor below, :mod:`source` (the parse
  entry, the queries, node text, the Hopper preprocessor): each function definition read once as
  a kernel, device or host function; the Region model of the editable spans;
  span texts and definition spans; what their code does; the sites three transforms edit,
  counted for the planner too; which code only other ops run, so that no candidate edits it
  unmeasured);
- kernel_facts (each launch site and kernel read from the code) -> features (static features +
  profile facts) -> ``transforms`` (the package of mechanical edits, one module per family, each
  with its spec; ``transforms.registry`` orders them),
  skills (library + rule language), trajectory (round records), policy (the
  deterministic planner); languages (the coder's half of the seam on ``Task.language``: dialect,
  options, facts, foreign code, over ``harness.languages``' build half);
- budget, hooks (the loop's typed integration points), run_folder (one op's folder,
  best/, run.json, summary lines), acceptance (regressions, minimum gain, round
  verdicts), measure (evaluations and profiles once each, GPU time charged; a search population
  pre-checked by the task's language, ``harness.languages``), baseline (an op's oracle, once per
  run: its contract completed, its test plan, its own evaluation passed), report;
- session (an op opened, rounds recorded, the best validated: shared by every coder,
  the outside agent's included), loop (the coders' rounds), command
  (``kernelsmith optimize``).
"""
