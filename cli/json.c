/* JSON reader and printer for the CLI (cli/json.h). Recursive descent; nesting depth is capped so
 * hostile input cannot overflow the stack. */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct reader {
    const char *text, *p;
    char *err;
    size_t cap;
    int failed;
} reader;

static int col_of(const reader *r, const char *at) { return (int)(at - r->text) + 1; }

static void fail(reader *r, const char *at, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = 1;
    int n = snprintf(r->err, r->cap, "column %d: ", col_of(r, at));
    if (n < 0 || (size_t)n >= r->cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->cap - (size_t)n, fmt, ap);
    va_end(ap);
}

static void skip_ws(reader *r) {
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++;
}

/* What is at p, for messages: "'x'", "end of input". */
static const char *describe(const char *p, char *buf, size_t cap) {
    if (!*p) return "end of input";
    if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) {
        snprintf(buf, cap, "byte 0x%02x", (unsigned char)*p);
        return buf;
    }
    snprintf(buf, cap, "'%c'", *p);
    return buf;
}

static int parse_value(reader *r, nb_json *v, int depth);

static void append_utf8(char *out, size_t *n, unsigned cp) {
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xc0 | cp >> 6);
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xe0 | cp >> 12);
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xf0 | cp >> 18);
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* r->p at the opening quote. The decoded string is never longer than the source text. */
static char *parse_string(reader *r) {
    const char *start = r->p++;
    const char *q = r->p;
    while (*q && *q != '"') q += (*q == '\\' && q[1]) ? 2 : 1;
    if (!*q) {
        fail(r, start, "unterminated string");
        return NULL;
    }
    char *out = malloc((size_t)(q - r->p) + 1);
    if (!out) {
        fail(r, start, "out of memory");
        return NULL;
    }
    size_t n = 0;
    while (*r->p != '"') {
        unsigned char c = (unsigned char)*r->p;
        if (c < 0x20) {
            fail(r, r->p, "control character in string");
            free(out);
            return NULL;
        }
        if (c != '\\') {
            out[n++] = (char)c;
            r->p++;
            continue;
        }
        const char *esc = r->p++;
        char e = *r->p++;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!hex4(r->p, &cp)) {
                fail(r, esc, "bad \\u escape");
                free(out);
                return NULL;
            }
            r->p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && r->p[0] == '\\' && r->p[1] == 'u') {
                unsigned lo;
                if (hex4(r->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    r->p += 6;
                }
            }
            append_utf8(out, &n, cp); /* \uXXXX is 6 source bytes, at most 4 decoded */
            break;
        }
        default:
            fail(r, esc, "bad escape '\\%c'", e ? e : '0');
            free(out);
            return NULL;
        }
    }
    r->p++;
    out[n] = '\0';
    return out;
}

static int match_word(reader *r, const char *w) {
    size_t n = strlen(w);
    if (strncmp(r->p, w, n) != 0) return 0;
    char c = r->p[n];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
        return 0;
    r->p += n;
    return 1;
}

static int parse_number(reader *r, nb_json *v) {
    const char *s = r->p;
    v->kind = NB_JSON_NUMBER;
    if (*r->p == '-') r->p++;
    if (match_word(r, "Infinity")) {
        v->number = *s == '-' ? -INFINITY : INFINITY;
        return 1;
    }
    if (*r->p == '0') {
        r->p++;
        if (*r->p >= '0' && *r->p <= '9') {
            fail(r, s, "numbers cannot have leading zeros");
            return 0;
        }
    } else if (*r->p >= '1' && *r->p <= '9') {
        while (*r->p >= '0' && *r->p <= '9') r->p++;
    } else {
        fail(r, s, "bad number");
        return 0;
    }
    int integer = 1;
    if (*r->p == '.') {
        integer = 0;
        r->p++;
        if (!(*r->p >= '0' && *r->p <= '9')) {
            fail(r, r->p, "expected a digit after '.'");
            return 0;
        }
        while (*r->p >= '0' && *r->p <= '9') r->p++;
    }
    if (*r->p == 'e' || *r->p == 'E') {
        integer = 0;
        r->p++;
        if (*r->p == '+' || *r->p == '-') r->p++;
        if (!(*r->p >= '0' && *r->p <= '9')) {
            fail(r, r->p, "expected a digit in the exponent");
            return 0;
        }
        while (*r->p >= '0' && *r->p <= '9') r->p++;
    }
    v->number = strtod(s, NULL);
    if (integer) {
        errno = 0;
        long long ll = strtoll(s, NULL, 10);
        if (errno == 0) {
            v->is_integer = 1;
            v->integer = ll;
        } else {
            v->integer_overflow = 1;
        }
    }
    return 1;
}

static int push_item(reader *r, nb_json *v, int *cap, const char *at) {
    if (v->count < *cap) return 1;
    int nc = *cap ? *cap * 2 : 4;
    nb_json *items = realloc(v->items, sizeof *items * (size_t)nc);
    if (!items) {
        fail(r, at, "out of memory");
        return 0;
    }
    v->items = items;
    if (v->kind == NB_JSON_OBJECT) {
        char **keys = realloc(v->keys, sizeof *keys * (size_t)nc);
        if (!keys) {
            fail(r, at, "out of memory");
            return 0;
        }
        v->keys = keys;
    }
    *cap = nc;
    return 1;
}

static int parse_array(reader *r, nb_json *v, int depth) {
    v->kind = NB_JSON_ARRAY;
    r->p++;
    skip_ws(r);
    if (*r->p == ']') {
        r->p++;
        return 1;
    }
    int cap = 0;
    for (;;) {
        skip_ws(r);
        if (!push_item(r, v, &cap, r->p)) return 0;
        nb_json *it = &v->items[v->count];
        memset(it, 0, sizeof *it);
        v->count++;
        if (!parse_value(r, it, depth + 1)) return 0;
        skip_ws(r);
        if (*r->p == ',') {
            r->p++;
            continue;
        }
        if (*r->p == ']') {
            r->p++;
            return 1;
        }
        char b[16];
        fail(r, r->p, "expected ',' or ']' but found %s", describe(r->p, b, sizeof b));
        return 0;
    }
}

static int parse_object(reader *r, nb_json *v, int depth) {
    v->kind = NB_JSON_OBJECT;
    r->p++;
    skip_ws(r);
    if (*r->p == '}') {
        r->p++;
        return 1;
    }
    int cap = 0;
    for (;;) {
        skip_ws(r);
        if (*r->p != '"') {
            char b[16];
            fail(r, r->p, "expected a string key but found %s", describe(r->p, b, sizeof b));
            return 0;
        }
        if (!push_item(r, v, &cap, r->p)) return 0;
        nb_json *it = &v->items[v->count];
        memset(it, 0, sizeof *it);
        v->keys[v->count] = NULL;
        v->count++;
        const char *kat = r->p;
        char *key = parse_string(r);
        if (!key) return 0;
        v->keys[v->count - 1] = key;
        for (int i = 0; i + 1 < v->count; i++)
            if (!strcmp(v->keys[i], key)) {
                fail(r, kat, "duplicate key \"%s\"", key);
                return 0;
            }
        skip_ws(r);
        if (*r->p != ':') {
            char b[16];
            fail(r, r->p, "expected ':' but found %s", describe(r->p, b, sizeof b));
            return 0;
        }
        r->p++;
        skip_ws(r);
        if (!parse_value(r, it, depth + 1)) return 0;
        skip_ws(r);
        if (*r->p == ',') {
            r->p++;
            continue;
        }
        if (*r->p == '}') {
            r->p++;
            return 1;
        }
        char b[16];
        fail(r, r->p, "expected ',' or '}' but found %s", describe(r->p, b, sizeof b));
        return 0;
    }
}

static int parse_value(reader *r, nb_json *v, int depth) {
    skip_ws(r);
    v->col = col_of(r, r->p);
    if (depth > JSON_MAX_DEPTH) {
        fail(r, r->p, "nested too deeply (more than %d levels)", JSON_MAX_DEPTH);
        return 0;
    }
    char c = *r->p;
    if (c == '[') return parse_array(r, v, depth);
    if (c == '{') return parse_object(r, v, depth);
    if (c == '"') {
        v->kind = NB_JSON_STRING;
        v->string = parse_string(r);
        return v->string != NULL;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(r, v);
    if (match_word(r, "true") || match_word(r, "false")) {
        v->kind = NB_JSON_BOOL;
        v->boolean = r->p[-1] == 'e' && r->p[-2] == 'u';
        return 1;
    }
    if (match_word(r, "null")) {
        v->kind = NB_JSON_NULL;
        return 1;
    }
    if (match_word(r, "NaN")) {
        v->kind = NB_JSON_NUMBER;
        v->number = NAN;
        return 1;
    }
    if (match_word(r, "Infinity")) {
        v->kind = NB_JSON_NUMBER;
        v->number = INFINITY;
        return 1;
    }
    char b[16];
    if (!c) fail(r, r->p, "expected a value but found end of input");
    else fail(r, r->p, "expected a value but found %s", describe(r->p, b, sizeof b));
    return 0;
}

static void free_contents(nb_json *v) {
    if (v->kind == NB_JSON_STRING) free(v->string);
    if (v->kind == NB_JSON_ARRAY || v->kind == NB_JSON_OBJECT) {
        for (int i = 0; i < v->count; i++) {
            free_contents(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
}

void nb_json_free(nb_json *v) {
    if (!v) return;
    free_contents(v);
    free(v);
}

nb_json *nb_json_parse(const char *text, char *err, size_t cap) {
    static char dummy[8];
    if (!err || !cap) {
        err = dummy;
        cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!text) {
        snprintf(err, cap, "no text");
        return NULL;
    }
    nb_json *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    reader r = {text, text, err, cap, 0};
    if (parse_value(&r, v, 0)) {
        skip_ws(&r);
        if (*r.p) {
            char b[16];
            fail(&r, r.p, "unexpected %s after the value", describe(r.p, b, sizeof b));
        }
    }
    if (r.failed) {
        nb_json_free(v);
        return NULL;
    }
    return v;
}

/* ---- printing ------------------------------------------------------------------------------ */

const char *nb_json_format_double(double v, int single, char *buf, size_t cap) {
    /* Non-finite values have no JSON number spelling: they print as the strings "NaN",
     * "Infinity" and "-Infinity" (valid JSON, lossless; `nabla call` reads them back). */
    if (isnan(v)) {
        snprintf(buf, cap, "\"NaN\"");
        return buf;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v < 0 ? "\"-Infinity\"" : "\"Infinity\"");
        return buf;
    }
    /* Integral values below 2^53 print as integers ("10", not "1e+01"). */
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(buf, cap, "%.0f", v);
        return buf;
    }
    int maxp = single ? 9 : 17;
    for (int p = 1; p <= maxp; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        double back = strtod(buf, NULL);
        if (single ? (float)back == (float)v : back == v) break;
    }
    return buf;
}

void nb_json_print_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void nb_json_print(FILE *f, const nb_json *v) {
    char buf[40];
    switch (v->kind) {
    case NB_JSON_NULL: fputs("null", f); break;
    case NB_JSON_BOOL: fputs(v->boolean ? "true" : "false", f); break;
    case NB_JSON_NUMBER:
        if (v->is_integer) fprintf(f, "%lld", v->integer);
        else fputs(nb_json_format_double(v->number, 0, buf, sizeof buf), f);
        break;
    case NB_JSON_STRING: nb_json_print_string(f, v->string); break;
    case NB_JSON_ARRAY:
        fputc('[', f);
        for (int i = 0; i < v->count; i++) {
            if (i) fputs(", ", f);
            nb_json_print(f, &v->items[i]);
        }
        fputc(']', f);
        break;
    case NB_JSON_OBJECT:
        fputc('{', f);
        for (int i = 0; i < v->count; i++) {
            if (i) fputs(", ", f);
            nb_json_print_string(f, v->keys[i]);
            fputs(": ", f);
            nb_json_print(f, &v->items[i]);
        }
        fputc('}', f);
        break;
    }
}

int nb_json_equal(const nb_json *a, const nb_json *b, double rtol, double atol) {
    if (a->kind != b->kind) return 0;
    switch (a->kind) {
    case NB_JSON_NULL: return 1;
    case NB_JSON_BOOL: return a->boolean == b->boolean;
    case NB_JSON_NUMBER: {
        double x = a->number, y = b->number;
        if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
        if (isinf(x) || isinf(y)) return x == y;
        return fabs(x - y) <= atol + rtol * fabs(y);
    }
    case NB_JSON_STRING: return !strcmp(a->string, b->string);
    case NB_JSON_ARRAY:
    case NB_JSON_OBJECT:
        if (a->count != b->count) return 0;
        for (int i = 0; i < a->count; i++) {
            if (a->kind == NB_JSON_OBJECT && strcmp(a->keys[i], b->keys[i])) return 0;
            if (!nb_json_equal(&a->items[i], &b->items[i], rtol, atol)) return 0;
        }
        return 1;
    }
    return 0;
}
