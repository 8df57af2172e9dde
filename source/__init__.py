"""C++/CUDA source: the tree-sitter binding, the one query set, node text and literals, the Hopper preprocessor.

Why this floor exists: extract (SGLang's sources -> tasks) and optimize (a task's editable
region -> facts and edits) both read C++/CUDA with tree-sitter. Each used to keep its own
reader and its own queries, and the two sets drifted (each stage knew different launch APIs
and picked a runtime launch's kernel argument its own way). Reading C++/CUDA now happens here
once, below both: one parse entry, one query folder, one vocabulary for what a node says.

Modules, in dependency order (each imports only those before it):

- :mod:`source.treesitter`: the only module that talks to py-tree-sitter (grammars, the parse
  entry, queries by name, captures and matches in document order, walking, ERROR nodes) and
  the measurement behind the grammar choice.
- :mod:`source.cuda_text`: what a node says (its text, names, operands, number literals) and
  whether the Hopper build compiles it (the preprocessor branches under ``SGL_CUDA_ARCH=900``).
- :mod:`source.launches`: the launch forms ``launches.scm`` finds, and the one table of runtime
  launch APIs and the argument that holds each one's kernel.

``source/queries/*.scm``: the query set, one flat folder (every query is written for the CUDA
grammar, which reads every file).

What must stay true: this floor imports only :mod:`pipeline`, tree-sitter and the standard
library (no torch, no CUDA: it runs on the CPU machine), and nothing below it reads C++/CUDA.
The floors are pipeline -> contract -> source -> extract -> optimize -> bench -> integrate ->
agent -> cli.
"""
