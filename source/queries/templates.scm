; Template uses: kernel instantiations (name<args>) and templated types
; (AlignedVector<T, N>, VecTypeTrait<T, 16>), for template-argument binding
; and vector-width reading.
(template_function
  name: (_) @name
  arguments: (template_argument_list) @args) @use
(template_type
  name: (_) @name
  arguments: (template_argument_list) @args) @type
