"""Search: a round of the offline coder as a search over composed mechanical transforms.

Why: one transform a round found one win in three ops on the H200 (PDL on
fused_add_rmsnorm, 1.07x); gains come from combinations (PDL and an early trigger,
a block size with the matching launch bounds) and from values no single step
tries. A round here is a search over the space the policy's mechanical proposals
span, a population of candidates at a time: built together on every core, checked
and timed in one worker process (:mod:`optimize.harness.population`).

Modules, in dependency order:

- :mod:`optimize.search.space`: dimensions from the policy's proposals (one per
  transform and target: a constant, a kernel), a point's candidate regions;
- :mod:`optimize.search.triton_space`: a Triton task's tunables (launch options, block
  sizes, constexpr defaults, autotune pins; per token bucket) as the same decisions, so
  ``build_space`` makes its space;
- :mod:`optimize.harness.triton_check`: a Triton point compiled for sm_90 on the CPU, a typed
  ``PointCheck``;
- :mod:`optimize.search.tuner`: Kernel Tuner's strategies driven over a space, with a
  runner that measures each batch (a population) through a callback;
- :mod:`optimize.search.rounds`: one search round of the loop: space -> strategy ->
  evaluated members, the best one that may be accepted.

What must stay true: every point evaluated is a candidate stored under its content
hash with its evaluation, so a point met again (in this round, a later one, a
rerun) is read back, never measured twice; the search is reproducible from its
seed; a point whose transforms do not compose is invalid, never an error.
"""
