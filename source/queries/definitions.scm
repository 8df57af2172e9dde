; Every function definition. extract/file_scan.py decides from the head (the text
; before the body, plus any masked attribute macro just before it) whether it
; is a `__global__` kernel, a `__device__` function or plain host code.
; extract/cxx_nodes.py (find_definition) reads a launcher's member and helper
; definitions by name from the same captures; optimize/cuda_regions.py keeps those
; with a compound body as the region's functions (kernels, device functions, host
; launchers, methods).
(function_definition) @function
