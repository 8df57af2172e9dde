; Calls by name: `helper(args)`, `helper<Args>(args)`, `ns::helper(args)`.
; extract/file_scan.py keeps those whose callee is a launcher function of the same
; file, so a struct that launches through a shared helper is a launcher too.
(call_expression
  function: [(identifier) (template_function) (qualified_identifier)] @callee) @call
