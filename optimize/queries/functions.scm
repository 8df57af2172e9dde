; Every function definition with a body: kernels, device functions, host launchers, methods.
; Used by optimize.features to split a region into functions (kind decided from the text
; before the body: __global__ / __device__ / SGL_DEVICE).
(function_definition
  declarator: (_) @declarator
  body: (compound_statement) @body) @function
