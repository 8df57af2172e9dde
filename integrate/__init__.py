"""Kernelsmith integrate stage: from an optimize run's accepted candidates to a patch SGLang can take.

Modules, in dependency order (each imports only those before it, and the floors below):
``errors``, ``records``, ``diffs``, ``triton_splice`` (a spliced Triton file still parses), ``kda_module`` (a rewrite's KDA module and
its guard), ``landing`` (which landing a candidate takes; a rewrite's KDA files), ``accepted`` (a run's accepted candidates
read, overlaps resolved), ``patch`` (makes and verifies ``sglang.patch`` and the patched copy), ``in_place`` (``--in-place``), ``series`` (the patch as one part per op family), ``sglang_bare``, ``calls`` (each op's calls planned from its contract; a Triton op's
through its KernelSpec), ``triton_probe`` (in the worker: a Triton op's callable and its kernels' launches
counted), ``worker_protocol`` (the JSON the worker reads and answers, as types), ``sglang_worker`` (run in a subprocess per tree), ``tree_worker`` (that subprocess started and
spoken to: its scrubbed environment, its JSON lines), ``sglang_runner`` (proves it through SGLang's
own ops on the GPU), ``sglang_tests`` (SGLang's tests), ``upstream_tests`` (the SGLang-form test and
``marker`` benchmark written for each op of the PR, and run), ``recipe`` and ``layer_worker`` (a model
layer as data, and its timing in the worker), ``layer_verdicts`` (a layer point's change, band, A/A and verdict),
``e2e`` (measures every model layer that runs the change),
``evidence`` (run facts for the PR), ``merge`` (several runs' accepted candidates as one run),
``reached`` (which other ops a patch changes), ``headroom`` (the census weighed by the recipes), ``pr_triton`` (the PR's Triton sentences), ``pr_upstream``
(its sentences on the generated tests), ``pr_model`` (its model-step section), ``pr_sections`` (the reviewer's sections:
why, buckets, reproduce, checklist), ``pr`` (writes PR.md), ``branch`` (``--git-branch``),
``steps`` (the GPU steps the entry points share), ``selfcheck`` (``--self-check``), ``command`` (the top:
nothing imports it). See integrate/README.md.
"""
