/* The CLI's JSON reader (cli/json.c, `nabla call` arguments and the tests/lang runner), and for a
 * document that parses: every finite number's shortest spelling must read back exactly, and, when
 * all its numbers are finite, printing it and reading the print back must give an equal value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cli/json.h"
#include "fuzz_common.h"

/* Checks that every finite number's shortest spelling reads back exactly; returns 0 when v holds a
 * NaN or an infinity (their printed spelling is the CLI's choice, not a round trip of the value). */
static int check_numbers(const nb_json *v) {
    int finite = 1;
    if (v->kind == NB_JSON_NUMBER) {
        if (!isfinite(v->number)) return 0;
        char buf[64];
        nb_json_format_double(v->number, 0, buf, sizeof buf);
        char *end = NULL;
        double back = strtod(buf, &end);
        if (*end || back != v->number || signbit(back) != signbit(v->number))
            nb_fuzz_fail("nb_json_format_double does not round-trip", buf);
    }
    if (v->kind == NB_JSON_ARRAY || v->kind == NB_JSON_OBJECT)
        for (int i = 0; i < v->count; i++) finite &= check_numbers(&v->items[i]);
    return finite;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 256 * 1024) return 0;
    char *text = nb_fuzz_cstr(data, size);
    char err[256];
    err[0] = '\0';
    nb_json *v = nb_json_parse(text, err, sizeof err);
    free(text);
    if (!v) {
        if (!err[0]) nb_fuzz_fail("nb_json_parse failed without a message", NULL);
        return 0;
    }
    if (!check_numbers(v)) {
        nb_json_free(v);
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) abort();
    nb_json_print(f, v);
    if (fclose(f) != 0) abort();
    nb_json *back = nb_json_parse(out, err, sizeof err);
    if (!back) nb_fuzz_fail("nb_json_print wrote what nb_json_parse refuses", err);
    if (!nb_json_equal(back, v, 0.0, 0.0)) nb_fuzz_fail("print + parse changed the value", out);
    nb_json_free(back);
    nb_json_free(v);
    free(out);
    return 0;
}
