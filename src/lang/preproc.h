/* The C-style preprocessor of the kernel language (Slang's): runs over the lexer's tokens of one
 * module file and gives the tokens the parser reads.
 *
 *   #define NAME body            #define NAME(a, b, ...) body with #a, a ## b, __VA_ARGS__
 *   #undef NAME                  #if / #ifdef / #ifndef / #elif / #else / #endif, defined(NAME)
 *   #include "file" / <file>     relative to the including file, then the search paths (-I)
 *   #pragma once                 other pragmas: a warning, ignored (as Slang)
 *   #error text / #warning text  __LINE__, __FILE__; #line / #version / #extension are ignored
 *
 * Predefined (as Slang): __SLANG__ 1, __SLANG_COMPILER__ 1, __HLSL_VERSION 2018, __HLSL__ 0, and
 * __NABLA__ 1. Host defines (src->defines, "NAME" = empty as Slang's -DNAME, or "NAME=VALUE")
 * come first; they live in a "<command-line>" file of the source set so their diagnostics have a
 * place too. Each module starts with only these: macros never cross `import` (as Slang).
 *
 * Locations: tokens of an included file keep that file's locations; tokens of a macro body take
 * the invocation's location (the caret stays on the user's line) and the expansion is recorded
 * (nb_source_add_macro_site) so that a diagnostic there gets "note: in expansion of macro 'X'".
 *
 * Expansion follows C: arguments are fully expanded before substitution (not next to # or ##),
 * the result is rescanned with the macro disabled, and a name of a disabled macro is marked
 * NB_TOKF_NOEXPAND for good ("painted blue"), so recursive macros stop. Bad input is always a
 * diagnostic: unterminated #if, #else without #if, a bad #if expression, wrong argument counts,
 * a missing include file (listing where it looked), include cycles (nesting deeper than 64).
 */
#ifndef NB_LANG_PREPROC_H
#define NB_LANG_PREPROC_H

#include "core/arena.h"
#include "lang/lexer.h"
#include "lang/source.h"

/* The preprocessed tokens of `file` (arena array ending with NB_TOK_EOF); NULL on out of memory
 * (diagnosed). Errors are diagnostics in src; the tokens are still usable for parsing. */
nb_token *nb_preprocess(nb_source_set *src, int file, nb_arena *arena, int *count);

#endif
