; Kernel launch sites. Each pattern captures @kernel: the expression that names
; the launched kernel (extract/file_scan.py follows simple aliases from there).

; kernel<<<grid, block, smem, stream>>>(args...)
(call_expression
  function: (_) @kernel
  (kernel_call_syntax)) @chevron

; LaunchKernel(grid, block, device)[.enable_pdl(...)...](kernel, args...)
; index.py checks that the chain of calls starts at LaunchKernel(...).
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
; index.py knows which argument holds the kernel for each API.
(call_expression
  function: [(identifier) (qualified_identifier)] @api
  arguments: (argument_list) @args
  (#match? @api "(cudaLaunchKernel|cudaLaunchKernelExC?|cudaLaunchCooperativeKernel|hipLaunchKernelGGL|hipLaunchKernelEx)$")) @api_call
