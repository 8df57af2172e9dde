; Every call with its argument list, whatever names the callee: `helper(args)`,
; `helper<Args>(args)`, `ns::helper<Args>(args)`, `obj.method(args)`.
; Readers narrow in Python: extract/launch_sites.py keeps calls by name (an
; identifier, template function or qualified identifier callee), to follow a
; struct that launches through a shared helper; extract/cxx_nodes.py (calls_in)
; reads the calls a launcher body forwards through; optimize reads a body's calls
; (math functions, PDL statements, typed accesses).
(call_expression
  function: (_) @callee
  arguments: (argument_list) @args) @call
