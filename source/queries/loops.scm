; Loops in device code. for-loops expose their parts so the bound and the
; update (grid-stride or not) can be read; while/do loops always count as
; run-time bounded.
(for_statement
  initializer: (_)? @init
  condition: (_)? @cond
  update: (_)? @update
  body: (_) @body) @for
(while_statement) @while
(do_statement) @do
