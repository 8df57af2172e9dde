; Every #include, wherever it sits (inside #if branches too).
(preproc_include path: (_) @path) @include
