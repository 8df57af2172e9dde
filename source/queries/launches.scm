; Kernel launch sites, every form extract and optimize know. Each pattern is told
; apart by the capture that names the whole match (source/launches.py lists them):
; extract/launch_sites.py reads @chevron, @helper_call and @runtime; optimize's
; region model (optimize/cuda_regions.py) reads @launch, @chevron and @runtime.

; kernel<<<grid, block, smem, stream>>>(args...)
(call_expression
  function: (_) @kernel
  (kernel_call_syntax) @config
  arguments: (argument_list) @args) @chevron

; LaunchKernel(grid, block, device[, smem]): the constructor of SGLang's builder.
(call_expression
  function: [(identifier) (qualified_identifier)] @ctor
  arguments: (argument_list) @args
  (#match? @ctor "(^|::)LaunchKernel$")) @launch

; LaunchKernel(grid, block, device)[.enable_pdl(...)...](kernel, args...)
; The reader checks that the chain of calls starts at LaunchKernel(...).
(call_expression
  function: (call_expression) @helper
  arguments: (argument_list . (_) @kernel)) @helper_call

; LaunchKernel(grid, block, device).launch(kernel, args...)
(call_expression
  function: (field_expression
    argument: (call_expression) @helper
    field: (field_identifier) @method)
  arguments: (argument_list . (_) @kernel)
  (#eq? @method "launch")) @helper_call

; cudaLaunchKernel(kernel, ...), cudaLaunchKernelEx(&config, kernel, ...), ...
; The regex is source.launches.runtime_api_regex() of RUNTIME_KERNEL_ARGUMENT, the
; table that also says which argument holds the kernel (tests/test_source.py checks it).
(call_expression
  function: [(identifier) (qualified_identifier)] @api
  arguments: (argument_list) @args
  (#match? @api "(^|::)(cuLaunchKernel|cuLaunchKernelEx|cudaLaunchCooperativeKernel|cudaLaunchKernel|cudaLaunchKernelEx|cudaLaunchKernelExC|hipLaunchKernelEx|hipLaunchKernelGGL)$")) @runtime
