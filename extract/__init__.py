"""Kernelsmith extract stage.

It reads C++/CUDA through the floor below, :mod:`source` (the tree-sitter binding and the
one query set). Modules in dependency order (each imports only modules above it):

- ``errors``, ``jit_layout`` (where a release keeps its JIT kernels: ``kernels/jit`` or the older
  ``jit_kernel/``, and the older layout's op ids), ``sources`` (the SGLang tree), ``splice`` (byte-span edits)
- ``cxx`` (the one C++ text toolkit: lexemes, brackets, top-level lists, definitions read
  from text), ``cexpr`` (C++ integer expressions, the sm_90a constants)
- ``cxx_nodes`` (syntax-tree helpers; definitions by name through tree-sitter)
- ``macros`` (specifier macros, masking), ``launch_sites`` (one file's launchers: launch
  sites, aliases followed to kernel names) -> ``file_scan`` (one file) -> ``index``
  (the tree: workers, includes, launchers)
- ``pyops`` (libcst: ``load_jit`` calls -> ops) -> ``wrapper_facts`` (what the
  Python wrappers say about an export)
- ``launcher_checks`` (what the launcher's checks say: divisibilities, relations, limits,
  constraints as Python) -> ``launcher_facts`` (what the launcher's C++ says) -> ``contract``
  (the ``records.Contract``, curated contracts)
- ``shapes`` (model catalog) -> ``tasks`` -> ``compile_check`` (the baseline built, refused
  instantiations dropped with the reason) -> ``command``

The Triton half (issue 19; ``language = "triton"`` tasks, the same records):

- ``triton_scan`` (libcst: one file's ``@triton.jit`` kernels, their constexprs, autotune
  configs and the pointers they store and load; launch sites ``kernel[grid](...)``)
  -> ``triton_ops`` (``KernelSpec`` registrations with the TRITON backend and public
  wrappers -> ops; the cached Triton index)
- ``triton_contract`` (the wrapper's shapes, dtypes and roles) -> ``triton_tasks`` (task
  folders, coverage reasons) -> ``triton_launch_values`` (a launch's signature, constexprs and
  options, its arguments evaluated over the contract at one shape case) -> ``triton_compile``
  (``triton.compile`` for sm_90 on the CPU, in a worker process) -> ``triton_command`` (``extract --language``, imported by
  ``command`` only when Triton ops are asked for)
"""
