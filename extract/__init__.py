"""Kernelsmith extract stage.

Modules in dependency order (each imports only modules above it):

- ``errors``, ``sources`` (the SGLang tree), ``splice`` (byte-span edits)
- ``treesitter`` (the only py-tree-sitter API user), ``cxx`` (the one C++ text
  toolkit: lexemes, brackets, top-level lists, definitions read from text),
  ``cexpr`` (C++ integer expressions, the sm_90a constants)
- ``cxx_nodes`` (syntax-tree helpers; definitions by name through tree-sitter)
- ``macros`` (specifier macros, masking) -> ``file_scan`` (one file) -> ``index``
  (the tree: workers, includes, launchers)
- ``pyops`` (libcst: ``load_jit`` calls -> ops) -> ``wrapper_facts`` (what the
  Python wrappers say about an export)
- ``launcher_facts`` (what the launcher's C++ says) -> ``contract`` (the
  ``records.Contract``, curated contracts)
- ``shapes`` (model catalog) -> ``tasks`` -> ``command``
"""
