/* `nabla call` generator arguments (include/nabla/module.h nb_generator): SlangPy's generators
 * written as calls, e.g.
 *   call_id()  call_id(2)  thread_id()  grid(4,4)  grid([4,4], stride=[2,2], offset=[1,1])
 *   wang_hash()  wang_hash(seed=7, warmup=1, hash_seed=0)  rand_float(0, 10)  rand_float(min=1, max=3, dim=3)
 * (no JSON value or @file looks like NAME(…), so the spelling is unambiguous). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "nabla/module.h"

typedef struct gen_val {
    int n;          /* numbers (a list or one) */
    double v[8];
    int list;
} gen_val;

static const char *skip_ws(const char *s) {
    while (*s == ' ') s++;
    return s;
}

static const char *parse_num(const char *s, double *out) {
    char *end = NULL;
    *out = strtod(s, &end);
    return end == s ? NULL : end;
}

/* value := number | '[' number (',' number)* ']' */
static const char *parse_val(const char *s, gen_val *v) {
    s = skip_ws(s);
    memset(v, 0, sizeof *v);
    if (*s != '[') {
        v->n = 1;
        return parse_num(s, &v->v[0]);
    }
    v->list = 1;
    s = skip_ws(s + 1);
    while (*s && *s != ']') {
        if (v->n == 8) return NULL;
        s = parse_num(s, &v->v[v->n++]);
        if (!s) return NULL;
        s = skip_ws(s);
        if (*s == ',') s = skip_ws(s + 1);
        else if (*s != ']') return NULL;
    }
    return *s == ']' ? s + 1 : NULL;
}

static int set_ints(int64_t *dst, const gen_val *v) {
    for (int i = 0; i < v->n; i++) dst[i] = (int64_t)v->v[i];
    return v->n;
}

int cli_is_generator(const char *text) {
    static const char *names[] = {"call_id(", "thread_id(", "grid(", "wang_hash(", "rand_float("};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strncmp(text, names[i], strlen(names[i]))) return 1;
    return 0;
}

int cli_parse_generator(const char *text, nb_generator *g, char *err, size_t cap) {
    const char *open = strchr(text, '(');
    size_t nl = (size_t)(open - text);
    nb_generator_kind kind = !strncmp(text, "call_id", nl) && nl == 7       ? NB_GEN_CALL_ID
                             : !strncmp(text, "thread_id", nl) && nl == 9   ? NB_GEN_THREAD_ID
                             : !strncmp(text, "grid", nl) && nl == 4        ? NB_GEN_GRID
                             : !strncmp(text, "wang_hash", nl) && nl == 9   ? NB_GEN_WANG_HASH
                                                                            : NB_GEN_RAND_FLOAT;
    nb_generator_init(g, kind);
    const char *s = skip_ws(open + 1);
    int pos = 0;
    while (*s && *s != ')') {
        char key[32] = "";
        const char *k = s;
        while (isalnum((unsigned char)*k) || *k == '_') k++;
        if (k > s && *skip_ws(k) == '=') {
            size_t kl = (size_t)(k - s) < sizeof key - 1 ? (size_t)(k - s) : sizeof key - 1;
            memcpy(key, s, kl);
            key[kl] = '\0';
            s = skip_ws(k) + 1;
        }
        gen_val v;
        const char *e = parse_val(s, &v);
        if (!e) {
            snprintf(err, cap, "generator '%s': expected a number or [n, …] at '%s'", text, s);
            return 0;
        }
        s = skip_ws(e);
        if (!key[0]) { /* positional: grid's shape; rand_float's min, max; the others' dims */
            const char *order[2] = {kind == NB_GEN_GRID ? "shape" : kind == NB_GEN_RAND_FLOAT ? "min" : "dims",
                                    kind == NB_GEN_RAND_FLOAT ? "max" : NULL};
            if (kind == NB_GEN_GRID && !v.list && pos == 0) { /* grid(4, 4): the shape's extents */
                g->dims = 0;
                gen_val all = v;
                while (*s == ',') {
                    gen_val w;
                    const char *e2 = parse_val(s + 1, &w);
                    if (!e2 || w.list || all.n == 8) break;
                    all.v[all.n++] = w.v[0];
                    s = skip_ws(e2);
                }
                v = all;
            }
            if (pos >= 2 || !order[pos]) {
                snprintf(err, cap, "generator '%s': too many positional values", text);
                return 0;
            }
            snprintf(key, sizeof key, "%s", order[pos++]);
        }
        if (!strcmp(key, "shape") && kind == NB_GEN_GRID) g->dims = set_ints(g->shape, &v);
        else if (!strcmp(key, "stride") && kind == NB_GEN_GRID) set_ints(g->stride, &v);
        else if (!strcmp(key, "offset") && kind == NB_GEN_GRID) set_ints(g->offset, &v);
        else if ((!strcmp(key, "dims") || !strcmp(key, "dim")) && kind != NB_GEN_GRID && !v.list) g->dims = (int)v.v[0];
        else if (!strcmp(key, "seed") && !v.list && kind >= NB_GEN_WANG_HASH) g->seed = (uint32_t)(int64_t)v.v[0];
        else if (!strcmp(key, "warmup") && !v.list && kind >= NB_GEN_WANG_HASH) g->warmup = (int)v.v[0];
        else if (!strcmp(key, "hash_seed") && !v.list && kind >= NB_GEN_WANG_HASH) g->hash_seed = v.v[0] != 0;
        else if (!strcmp(key, "min") && !v.list && kind == NB_GEN_RAND_FLOAT) g->min = (float)v.v[0];
        else if (!strcmp(key, "max") && !v.list && kind == NB_GEN_RAND_FLOAT) g->max = (float)v.v[0];
        else {
            snprintf(err, cap, "generator '%s': unknown or misplaced '%s'", text, key);
            return 0;
        }
        if (*s == ',') s = skip_ws(s + 1);
        else if (*s != ')') {
            snprintf(err, cap, "generator '%s': expected ',' or ')' at '%s'", text, s);
            return 0;
        }
    }
    if (*s != ')' || *skip_ws(s + 1)) {
        snprintf(err, cap, "generator '%s': expected ')' at the end", text);
        return 0;
    }
    if (kind == NB_GEN_GRID && g->dims <= 0) {
        snprintf(err, cap, "generator '%s': a grid needs a shape, e.g. grid(4,4) or grid([-1,-1], stride=[2,2])", text);
        return 0;
    }
    return 1;
}
