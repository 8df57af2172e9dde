"""Kernelsmith's spine: CLI, configuration, records, results store. Imports no torch.

Modules, in dependency order (each imports only modules listed before it):

- ``target`` (the GPU target, written once), ``errors`` (the error families: ConfigError, ModelError,
  BudgetExhausted), ``stats`` (the one
  geometric mean), ``gpu`` (``gpu_available``), ``console`` (the rich console), ``digest``
  (``source_digest``: our code in cache keys), ``sglang_package`` (installing a tree's ``sglang``
  for a worker), ``sandbox`` (generated code's environment and bubblewrap);
- ``record_io`` (the records' base classes, schema versions, atomic writes and versioned reads),
  ``records`` (extract's: the index and the tasks), ``run_records`` (optimize's: candidates,
  evaluations, summaries), ``config`` (typed, layered
  configuration), ``toolchain`` (nvcc and tvm-ffi found), ``deps`` (header-only dependencies);
- ``store_records``, ``compiler_output`` (nvcc/ptxas output read), ``buckets`` (token buckets and
  the floor's no-go rule), ``cli`` (the argparse shell), ``store_json`` (the first JSON store,
  imported);
- ``build_plan`` (what one build is: its translation unit, flags, export names and key), ``build``
  (the content-addressed nvcc builder that runs it), ``run`` (``kernelsmith run``), ``store`` (the
  SQLite results store), ``history`` (its batches as JSON lines kept with the project, and the
  store rebuilt from them), ``ab_verdicts`` (what the release A/B says of a step: confirmed,
  retracted or a trend), ``dashboard`` (``track --html``), ``track`` (history and regressions).
"""
