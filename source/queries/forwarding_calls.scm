; Every call with its argument list, whatever names the callee: `helper(args)`,
; `helper<Args>(args)`, `ns::helper<Args>(args)`, `obj.method(args)`.
; extract/cxx_nodes.py (calls_in) reads a launcher body's calls from these, so
; extract/launcher_facts.py can follow an entry that forwards to a helper.
(call_expression
  function: (_) @callee
  arguments: (argument_list) @arguments) @call
