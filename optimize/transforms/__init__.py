"""Mechanical source transforms: small, exact edits a skill can make without an LLM.

Why: many optimizations are a one-token change once you know where the token is
(a block-size constant, a ``__launch_bounds__``, ``expf`` -> ``__expf``, PDL on).
Doing those mechanically makes the loop useful offline, makes its candidates
reproducible, and keeps LLM budget for the rewrites that need judgement.

Contract of every transform function ``fn(regions, **params) -> dict[str, str]``:
- ``regions`` maps span name -> region text (the baseline's or a candidate's).
  The result has the same keys; spans the transform does not touch are returned
  unchanged (the very same strings).
- Edits are byte-exact: only the intended bytes change (a literal's digits, an
  inserted attribute, a callee name). Everything else, whitespace and comments
  included, is kept. Each edited region must parse with no more tree-sitter
  problem nodes than before, else :class:`TransformError` (a bug here, not in the
  candidate).
- Nothing to do is :class:`NotApplicable` with the reason (the loop records the
  round as ``not_applicable``); bad parameters are :class:`TransformError`.
- CUDA transforms locate code with tree-sitter through :class:`optimize.cuda_regions.Region`,
  so they agree with the features the policy planned from.

One module per transform family, each ending with its ``SPECS`` (the edit, where it applies, how a
search varies it). Adding a transform means adding its module (or a spec to a family's), its
place in :data:`registry.MEMBERS`, and its test. This package's ``__init__`` imports nothing:
:mod:`optimize.features` sits below the members (they read it to find their targets), and the
sites the planner counts for them are read by :mod:`optimize.cuda_sites`, below both.

Modules in dependency order:

- edits (byte edits checked to parse; NotApplicable, TransformError) -> spec (TransformSpec);
- the CUDA members, over :mod:`optimize.cuda_regions` and :mod:`optimize.cuda_facts`: pdl (PDL
  on, late wait, early trigger), knobs (a constant's value, ``__launch_bounds__``), grid (a
  grid-stride kernel's grid capped at whole waves of the device), carried_divmod (a strided loop's
  quotient and remainder carried), unroll (``#pragma unroll``), size_dispatch (a launcher's size
  switch given larger power-of-two cases), streaming (evict-first typed accesses), fast_math (fast
  intrinsics);
- triton_edits (the libcst machinery of a Triton task's regions) -> the Triton members:
  triton_kernel (an autotune list pinned, a constexpr default), triton_block_size,
  triton_coarsen (program coarsening), triton_launch_option (``num_warps`` / ``num_stages``);
- registry (the members in the order they apply; ``apply``, ``expand_targets``).
"""
