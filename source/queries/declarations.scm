; Named values: local and namespace-level variables, struct fields with a
; default, type aliases. The evaluator resolves identifiers through these.
(declaration
  declarator: (init_declarator
    declarator: (_) @name
    value: (_) @value)) @decl
(field_declaration
  declarator: (field_identifier) @name
  default_value: (_) @value) @decl
(alias_declaration
  name: (type_identifier) @name
  type: (type_descriptor) @value) @decl
