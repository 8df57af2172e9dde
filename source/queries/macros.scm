; Macro definitions with a body. The grammar keeps the body as raw text;
; extract/file_scan.py looks in it for launch syntax (`SGL_FRONT_LAUNCH(...)`
; style helpers that expand to `LaunchKernel(...)(kernel, ...)`).
(preproc_function_def name: (identifier) @name value: (preproc_arg) @body) @macro
(preproc_def name: (identifier) @name value: (preproc_arg) @body) @macro
