"""Kernel launches as ``source/queries/launches.scm`` finds them: which forms, and where the kernel is.

Why this module exists: extract (which launcher reaches which kernel) and optimize (a launch
site's grid, block and kernel in the editable region) read the same launch sites. They used to
know different launch APIs and to pick a runtime call's kernel argument each its own way (one by
a list of names, the other by a name ending in ``Ex``). The launch APIs and the argument that
holds each one's kernel are one fact, :data:`RUNTIME_KERNEL_ARGUMENT`, which the query's
``#match?`` regex and both stages read.

The forms the query finds, one pattern each, told apart by the capture that names the match:

- ``@chevron``: ``kernel<<<grid, block, smem, stream>>>(args...)``; ``@kernel`` the kernel
  expression, ``@config`` the ``<<<...>>>`` part, ``@args`` the argument list.
- ``@launch``: the constructor of SGLang's builder, ``LaunchKernel(grid, block, device[, smem])``;
  ``@ctor`` its name, ``@args`` its arguments (the chain it starts is read from its parents).
- ``@helper_call``: a call made on a chain of calls, ``LaunchKernel(...)[.enable_pdl(...)](kernel,
  args...)``, or ``LaunchKernel(...).launch(kernel, args...)``; ``@helper`` the chain, ``@kernel``
  the first argument. The query does not check that the chain starts at ``LaunchKernel``: its
  reader does.
- ``@runtime``: a runtime launch API, ``cudaLaunchKernelEx(&config, kernel, args...)``; ``@api``
  its (possibly qualified) name, ``@args`` its arguments; :func:`runtime_kernel` picks the kernel.

What must stay true: the regex in ``launches.scm`` is :func:`runtime_api_regex` of the table
(``tests/test_source.py`` fails when they disagree); a runtime API the table does not know is no
launch, never a guess at its kernel argument.
"""

from __future__ import annotations

from source.cuda_text import last_name, named_children, text_of
from source.treesitter import Node

#: Runtime launch API -> the index of the argument that holds the kernel. The ``Ex`` forms take
#: their launch configuration first (``cudaLaunchKernelEx(&config, kernel, args...)``).
RUNTIME_KERNEL_ARGUMENT: dict[str, int] = {
    "cudaLaunchKernel": 0,
    "cudaLaunchKernelEx": 1,
    "cudaLaunchKernelExC": 1,
    "cudaLaunchCooperativeKernel": 0,
    "cuLaunchKernel": 0,
    "cuLaunchKernelEx": 1,
    "hipLaunchKernelGGL": 0,
    "hipLaunchKernelEx": 1,
}


def runtime_api_regex() -> str:
    """The ``#match?`` regex of ``launches.scm``'s runtime pattern: a name of the table, bare or
    qualified (``ns::cudaLaunchKernel``)."""
    return "(^|::)(" + "|".join(sorted(RUNTIME_KERNEL_ARGUMENT)) + ")$"


def runtime_kernel(src: bytes, match: dict[str, list[Node]]) -> Node | None:
    """The kernel argument of a ``@runtime`` match of ``launches.scm`` (None when the call has
    too few arguments, or names an API the table does not know)."""
    index = RUNTIME_KERNEL_ARGUMENT.get(last_name(text_of(src, match["api"][0])))
    args = named_children(match["args"][0])
    return args[index] if index is not None and len(args) > index else None
