; Every function definition. extract/index.py decides from the head (the text
; before the body, plus any masked attribute macro just before it) whether it
; is a `__global__` kernel, a `__device__` function or plain host code.
(function_definition) @function
