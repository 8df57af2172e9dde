"""The contract: how a kernel is really called, on the ground floor of every stage.

A task's contract (``task.json``) plus its run's completion
(``runs/<run>/<op>/contract_completion.json``) say how a kernel is called: its
arguments, their dtypes, their sizes as expressions of symbols, the kernel's own
checks, the shapes it is tested at. Extract writes it, optimize tests candidates
with it, integrate calls SGLang's op with it; all three read this package, which
reads only :mod:`pipeline` (records, errors) and the standard library. The floors
are pipeline -> contract -> source -> extract -> optimize -> ...: nothing here imports
a higher floor, and there is no torch anywhere in it (the filling half is
:mod:`optimize.harness.inputs`).

Modules, in dependency order (each imports only those before it):

- :mod:`contract.errors`: ContractError, TaskMissing, ExprError.
- :mod:`contract.dtypes`: the one dtype table (short spelling, C++ spelling, bytes,
  kind, torch attribute name, poison pattern).
- :mod:`contract.expr`: the one restricted-expression language (validated ``ast``),
  with a grammar per use (shape entries and value ranges; constraints).
- :mod:`contract.constraints`: the kernel's own checks; solving sizes and scalars.
- :mod:`contract.sizes`: symbols, their values at a shape case, instantiation choice.
- :mod:`contract.shapes`: the synthetic shape and held-out draws.
- :mod:`contract.plan`: call plans (tensor layouts, scalar values) and pure value
  generators.
- :mod:`contract.completion` (+ ``completion.toml``): filling what a contract leaves
  open, and what a failed baseline shows about it.
- :mod:`contract.layout`: the task and run folders (load/save a task, its files, its
  baseline regions, a run's completed contract).
"""
