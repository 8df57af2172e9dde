; Names bound to a value, so a launch through `kernel` can be followed to the
; kernel template it was set from:
;   const auto kernel = act_and_mul_kernel<T, ...>;
;   static constexpr kernel_fn_t activation_kernel = act_and_mul_kernel<...>;
;   kernel = other_kernel<...>;
;   return activation_kernel<...>;   (bound to the enclosing function's name)
(init_declarator declarator: (_) @name value: (_) @value)
(field_declaration declarator: (_) @name default_value: (_) @value)
(assignment_expression left: (identifier) @name right: (_) @value)
(return_statement (_) @value) @return
