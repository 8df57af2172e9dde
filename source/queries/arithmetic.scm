; Divisions and remainders (float division -> fast-math candidates; integer
; division by a run-time value -> index-math cost).
(binary_expression
  left: (_) @left
  operator: ["/" "%"] @op
  right: (_) @right) @expr
