/* A small JSON reader and number printer for the CLI (`nabla call`) and the tests/lang runner.
 *
 * Reading: standard JSON (RFC 8259: null, true, false, numbers, strings with escapes, arrays,
 * objects) plus the non-standard number spellings NaN, Infinity and -Infinity, which the printer
 * also writes (as Python's json module does), so every float round-trips. Errors name the
 * 1-based column: "column 7: expected ',' or ']'".
 *
 * Printing numbers: nb_json_format_double writes the shortest decimal that reads back as the
 * same double (or, with single != 0, the same float), in %g style: 4, 0.1, 1e+20, -0. Integral
 * values print without a decimal point. NaN and infinities, which JSON numbers cannot spell,
 * print as the JSON strings "NaN", "Infinity" and "-Infinity" (so the output stays valid JSON
 * and lossless: Python's float() reads those strings too).
 */
#ifndef NB_CLI_JSON_H
#define NB_CLI_JSON_H

#include <stddef.h>
#include <stdio.h>

typedef enum nb_json_kind {
    NB_JSON_NULL,
    NB_JSON_BOOL,
    NB_JSON_NUMBER,
    NB_JSON_STRING,
    NB_JSON_ARRAY,
    NB_JSON_OBJECT,
} nb_json_kind;

typedef struct nb_json {
    nb_json_kind kind;
    int col;              /* 1-based column where the value starts */
    int boolean;          /* BOOL */
    double number;        /* NUMBER */
    int is_integer;       /* NUMBER written as an integer (no '.', exponent, NaN or Infinity) */
    long long integer;    /* NUMBER with is_integer and within long long's range */
    int integer_overflow; /* NUMBER written as an integer beyond long long's range */
    char *string;         /* STRING (NUL-terminated, escapes decoded) */
    struct nb_json *items;/* ARRAY elements / OBJECT values */
    char **keys;          /* OBJECT keys, parallel to items */
    int count;            /* ARRAY / OBJECT length */
} nb_json;

/* Parses the whole of `text` (surrounding whitespace allowed). Returns NULL and writes a message
 * to err (cap bytes) on a syntax error or out of memory. Free with nb_json_free. */
nb_json *nb_json_parse(const char *text, char *err, size_t cap);
void nb_json_free(nb_json *v);

/* Writes the shortest round-tripping spelling of v into buf (>= 32 bytes; a quoted string for a
 * non-finite v); returns buf. */
const char *nb_json_format_double(double v, int single, char *buf, size_t cap);

/* Prints v as compact JSON with ", " and ": " separators (the CLI's output style). */
void nb_json_print(FILE *f, const nb_json *v);
/* Prints a JSON string literal with escapes. */
void nb_json_print_string(FILE *f, const char *s);

/* Structural comparison with a tolerance for numbers: |a-b| <= atol + rtol*|b|; NaN equals NaN;
 * object keys must match in order. Returns 1 if equal. */
int nb_json_equal(const nb_json *a, const nb_json *b, double rtol, double atol);

#endif
