"""The Python half of extract: SGLang's op modules, read with libcst.

``scan_ops(source, scan)`` reads every module under ``kernels/ops/**`` that calls
``load_jit`` and returns one :class:`~pipeline.records.OpEntry` per public op
function (what it compiles, which exports it calls, which kernels those launch)
plus the list of those modules.

How: a ``load_jit(...)`` call is only meaningful once its arguments are known
(which files, which flags, which template arguments, which C++ entry each export
wraps), and those arguments are built by a few lines of ordinary Python:
``args = make_cpp_args(dtype, is_arch_support_pdl())``,
``f"{_rmsnorm_kernel_class(hidden_size)}<{args}>"``,
``fast_math_flags if fast_math else []``. We never import or execute SGLang's
modules (they import torch and CUDA); a small restricted evaluator interprets that
subset, in one of two modes:

- ``static`` (the index): runtime values stay symbolic. Parameters render as
  ``{name}`` in f-strings, a ``make_cpp_args`` result as ``{args}``; a condition
  on a parameter is judged at its default (``fast_math=True`` -> the fast-math
  flags); a helper that returns one of several constants yields every one of them
  (``_rmsnorm_kernel_class`` -> three wrapper alternatives). Each assumption is
  written into the call's ``unresolved`` so the record says what was guessed.
- ``strict`` (task instantiation, :func:`instantiate`): every parameter has
  a concrete binding (a dtype, a width from the shape catalog, a default); the
  loader function is *run* (if/else taken, helpers called) until it reaches
  ``load_jit``, whose evaluated arguments are captured. Anything unknown raises
  :class:`Unresolvable` with the reason.

Modules, in dependency order (each imports only those above it):

- ``target``: what the target machine (CUDA, sm_90a, an H200) answers to platform
  probes and GPU queries; torch dtype names and their C++ spellings.
- ``modules``: the program model: a parsed module (:class:`PyModule`, its
  :class:`PyFunction` s, constants, imports), :class:`ModuleSet`, name frames
  (:class:`Env`); the op modules of the package's layout (:mod:`extract.jit_layout`).
- ``values``: the values the interpreter computes with, frozen dataclasses
  (:class:`Unknown`, :class:`TensorValue`, :class:`ModuleRef`, ...), and
  :class:`Unresolvable`.
- ``operators``: Python's operators and comparisons (:class:`~.operators.Operators`, a base
  of :class:`Expressions`).
- ``expressions``: the expression half of the interpreter (:class:`Expressions`).
- ``interpreter``: calls, binding and statements (:class:`Evaluator`).
- ``frames``: a caller's frame at a call site (:class:`LazyEnv`,
  :func:`assignments_before`).
- ``calls``: one module's ``load_jit`` calls read statically (:func:`read_load_jit`,
  :func:`scan_module`).
- ``program``: the op tree parsed on demand and its reference graph (:class:`Program`).
- ``ops``: the op scan (:func:`scan_ops`) and a built module's exports
  (:func:`call_exports`, :func:`entry_parts`, :func:`resolve_kernels`).
- ``instantiate``: running a loader for one dtype and sizes (:func:`instantiate`,
  :func:`tensor_value`, :func:`parameter_defaults`).

What must stay true: nothing here imports torch or SGLang; evaluation is bounded
(call depth, loop length), so a strange module makes a value unknown but never
hangs or crashes the scan; platform probes are answered for CUDA on Hopper
(:data:`PLATFORM`), the target tasks are built for (sm_90a); op ids are unique
and deterministic for a given tree (see :func:`scan_ops`). Every name other
modules use is re-exported here, so ``from extract import pyops`` and ``pyops.X``
are the way in.
"""

from __future__ import annotations

from extract.pyops.calls import FunctionFacts, ModuleScan, read_load_jit, scan_module
from extract.pyops.expressions import MAX_DEPTH, MAX_LOOP, Expressions
from extract.pyops.frames import (
    Assignments,
    Guard,
    GuardedAssignment,
    LazyEnv,
    assignments_before,
)
from extract.pyops.instantiate import (
    PLANNED_SIZE,
    Instance,
    find_call_sites,
    instantiate,
    parameter_defaults,
    tensor_value,
)
from extract.pyops.interpreter import Evaluator
from extract.pyops.modules import (
    Env,
    ModuleSet,
    PyFunction,
    PyModule,
    attr_text,
    dotted_name,
    find_op_modules,
    parse_module,
)
from extract.pyops.ops import (
    call_exports,
    entry_parts,
    entry_struct,
    resolve_kernels,
    scan_ops,
    source_exports,
)
from extract.pyops.program import Program
from extract.pyops.target import (
    CPP_SPELLING,
    ITEMSIZE,
    PLATFORM,
    PLATFORM_CALLS,
    STDLIB_CALLS,
    TORCH_DTYPES,
    Facts,
    package_paths,
)
from extract.pyops.values import (
    Alts,
    Bound,
    Builtin,
    ClassRef,
    Constant,
    CppArgs,
    DtypeValue,
    ImportRef,
    JitCapture,
    ModuleHandle,
    ModuleRef,
    Mutator,
    ParamRef,
    Probe,
    TensorValue,
    Unknown,
    Unresolvable,
    concrete,
    cpp_literal,
    identical,
)

__all__ = [
    "CPP_SPELLING",
    "ITEMSIZE",
    "MAX_DEPTH",
    "MAX_LOOP",
    "package_paths",
    "PLANNED_SIZE",
    "PLATFORM",
    "PLATFORM_CALLS",
    "STDLIB_CALLS",
    "TORCH_DTYPES",
    "Alts",
    "Assignments",
    "Bound",
    "Builtin",
    "ClassRef",
    "Constant",
    "CppArgs",
    "DtypeValue",
    "Env",
    "Evaluator",
    "Expressions",
    "Facts",
    "FunctionFacts",
    "Guard",
    "GuardedAssignment",
    "ImportRef",
    "Instance",
    "JitCapture",
    "LazyEnv",
    "ModuleHandle",
    "ModuleRef",
    "ModuleScan",
    "ModuleSet",
    "Mutator",
    "ParamRef",
    "Probe",
    "Program",
    "PyFunction",
    "PyModule",
    "TensorValue",
    "Unknown",
    "Unresolvable",
    "assignments_before",
    "attr_text",
    "call_exports",
    "concrete",
    "cpp_literal",
    "dotted_name",
    "entry_parts",
    "entry_struct",
    "find_call_sites",
    "find_op_modules",
    "identical",
    "instantiate",
    "parameter_defaults",
    "parse_module",
    "read_load_jit",
    "resolve_kernels",
    "scan_module",
    "scan_ops",
    "source_exports",
    "tensor_value",
]
