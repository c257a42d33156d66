// A macro whose body does not parse where it is used (diag_pp_macro.nb).
#define HALF_OF(x) ((x) / , 2)
