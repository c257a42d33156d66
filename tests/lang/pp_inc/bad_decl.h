// A header with a syntax error (diag_pp_include.nb): the note names the #include.
float bad_decl(float x) { return x +; }
