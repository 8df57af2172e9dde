"""Kernelsmith's commands that measure SGLang as it is, above the optimizer: ``kernelsmith bench``
(one op's baseline, or ``--all``: does every baseline build, run and pass), ``kernelsmith track run``
(a release's census, one batch) and ``kernelsmith track ab`` (two releases' kernels in one worker).

They time through the measurement core, :mod:`optimize.harness` (build, worker, timing, compare), and
spread over GPUs with :mod:`optimize.scale`; nothing in ``optimize/`` imports them.

Modules, in dependency order: ``sections`` (BENCHMARKS.md's generated sections: tables, method line),
``health`` (``bench --all``: one task's baseline planned, built and checked; the rows' section),
``health_sweep`` (``bench --all`` over every task: builds and checks overlapped, budgeted, resumable),
``one_op`` (one op's baseline: its request, its row, its contract repaired), ``bench`` (many ops'
rows, in batches of one worker; the store's batches), ``census`` (``track run``), ``release_ab``
(``track ab``).
"""
