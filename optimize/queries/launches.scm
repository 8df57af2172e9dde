; Host launch sites: SGLang's LaunchKernel(grid, block, device[, smem]) builder,
; triple-chevron launches, and the raw runtime calls.
(call_expression
  function: [(identifier) (qualified_identifier)] @ctor
  arguments: (argument_list) @args
  (#match? @ctor "(^|::)LaunchKernel$")) @launch
(call_expression
  function: (_) @kernel
  (kernel_call_syntax) @config
  arguments: (argument_list) @args) @chevron
(call_expression
  function: [(identifier) (qualified_identifier)] @raw
  arguments: (argument_list) @args
  (#match? @raw "(^|::)(cudaLaunchKernelEx|cudaLaunchKernel|cuLaunchKernelEx|cuLaunchKernel)$")) @runtime
