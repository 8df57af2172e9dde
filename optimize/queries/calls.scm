; Every call: the callee expression and its argument list.
(call_expression
  function: (_) @callee
  arguments: (argument_list) @args) @call
