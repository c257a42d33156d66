/* safetensors reader (F32, F16, BF16, F64 -> f32) / writer (F32) with a small JSON parser for its
 * header.
 *
 * Reading is strict and linear in the size of the header: tensor names and metadata keys are
 * looked up in hash tables (duplicates are errors), the data_offsets of all tensors are checked
 * against each other after one sort (overlapping tensors are errors naming both), and every key
 * of a tensor entry may appear once. Values are not checked here: a safetensors file may hold
 * NaN or Inf on purpose; loaders of model parameters (unet_io.c) reject non-finite weights.
 * Writing goes through nb_file_atomic_* (temporary file, fsync, rename), so a process killed while
 * saving a checkpoint leaves the previous checkpoint intact. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/file.h"
#include "core/strmap.h"
#include "nabla/alloc.h"
#include "nabla/safetensors.h"

#define MAX_HEADER (100 << 20)
/* A checkpoint is read whole into memory; refuse files beyond any plausible size. */
#define MAX_FILE ((size_t)1 << 40)

/* Name -> index tables (core/strmap.h; keys are the tensors' own names). -1: absent. */
static int ntab_find(const nb_strmap *t, const char *k) {
    const nb_strmap_slot *sl = nb_strmap_find(t, k);
    return sl ? (int)(intptr_t)sl->val : -1;
}
/* k must not be in the table yet. Returns 0 when out of memory. */
static int ntab_add(nb_strmap *t, const char *k, int idx) {
    nb_strmap_slot *sl = nb_strmap_get(t, k, NULL);
    if (!sl) return 0;
    sl->val = (void *)(intptr_t)idx;
    return 1;
}

/* Where tensor i's bytes are in the data section, and their element type. */
typedef struct st_src {
    uint64_t begin, end;
    int esz, kind; /* kind: 0 F32 / F64, 1 BF16, 2 F16 */
} st_src;

struct nb_safetensors {
    int n, cap;
    nb_st_tensor *t;
    float **bufs;
    st_src *src;
    int n_meta, meta_cap;
    char **keys, **vals;
    nb_strmap names, meta_names; /* name -> index into t / keys */
};

/* ---- writing ------------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_json_str(sbuf *b, const char *s) {
    sb_str(b, "\"");
    for (; *s; s++) {
        char e[8];
        if (*s == '"' || *s == '\\') e[0] = '\\', e[1] = *s, e[2] = 0;
        else if ((unsigned char)*s < 0x20) snprintf(e, sizeof e, "\\u%04x", (unsigned char)*s);
        else e[0] = *s, e[1] = 0;
        sb_str(b, e);
    }
    sb_str(b, "\"");
}

nb_status nb_safetensors_write(const char *path, int n, const nb_st_tensor *t, int n_meta,
                               const char *const *keys, const char *const *vals) {
    if (!path || n < 0 || (n && !t) || n_meta < 0 || (n_meta && (!keys || !vals)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_write: NULL or negative argument");
    for (int i = 0; i < n_meta; i++)
        if (!keys[i] || !vals[i])
            return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_write: metadata entry %d is NULL", i);
    sbuf h = {0};
    char num[64];
    uint64_t off = 0;
    sb_str(&h, "{");
    if (n_meta) {
        sb_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(&h, ",");
            sb_json_str(&h, keys[i]);
            sb_str(&h, ":");
            sb_json_str(&h, vals[i]);
        }
        sb_str(&h, "}");
    }
    for (int i = 0; i < n; i++) {
        int bad = !t[i].name || t[i].ndim < 0 || t[i].ndim > NB_ST_MAX_DIMS || !t[i].data;
        uint64_t cnt = 1;
        for (int d = 0; !bad && d < t[i].ndim; d++) {
            bad = t[i].shape[d] < 0 || t[i].shape[d] > (1ll << 40);
            cnt *= bad ? 1 : (uint64_t)t[i].shape[d];
            bad = bad || cnt > (1ull << 40);
        }
        if (bad) {
            free(h.p);
            return nb_error(NB_ERR_INVALID_ARG,
                            "nb_safetensors_write: '%s': tensor %d has no name, no data, a bad ndim "
                            "or a negative or absurd shape", path, i);
        }
        if (n_meta || i) sb_str(&h, ",");
        sb_json_str(&h, t[i].name);
        sb_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
            sb_str(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + cnt * 4));
        sb_str(&h, num);
        off += cnt * 4;
    }
    sb_str(&h, "}");
    while (!h.oom && h.n % 8) sb_str(&h, " ");
    if (h.oom) {
        free(h.p);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_safetensors_write: '%s': out of memory", path);
    }
    nb_file_atomic af;
    nb_status s = nb_file_atomic_open(&af, path, "safetensors file");
    if (s) {
        free(h.p);
        return s;
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    int ok = fwrite(len, 1, 8, af.f) == 8 && fwrite(h.p, 1, h.n, af.f) == h.n;
    free(h.p);
    for (int i = 0; ok && i < n; i++) {
        size_t cnt = 1;
        for (int d = 0; d < t[i].ndim; d++) cnt *= (size_t)t[i].shape[d];
        ok = fwrite(t[i].data, sizeof(float), cnt, af.f) == cnt; /* little-endian hosts only */
    }
    if (!ok) {
        s = nb_error(NB_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        nb_file_atomic_abort(&af);
        return s;
    }
    return nb_file_atomic_commit(&af);
}

/* ---- JSON header parsing ------------------------------------------------------------------- */

typedef struct jp {
    const char *s, *end, *start;
    char err[512];
} jp;

static int jfail(jp *p, const char *what) {
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "%s at header byte %ld", what, (long)(p->s - p->start));
    return 0;
}
/* An error about one tensor (or metadata key): "tensor 'name': ... at header byte N". */
static int tfail(jp *p, const char *kind, const char *name, const char *fmt, ...) {
    if (p->err[0]) return 0;
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(p->err, sizeof p->err, "%s '%.160s': %s at header byte %ld", kind, name, m,
             (long)(p->s - p->start));
    return 0;
}
static void ws(jp *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t')) p->s++;
}
static int expect(jp *p, char c) {
    ws(p);
    if (p->s >= p->end || *p->s != c) {
        char m[40];
        snprintf(m, sizeof m, "expected '%c'", c);
        return jfail(p, m);
    }
    p->s++;
    return 1;
}
static int peek(jp *p, char c) {
    ws(p);
    return p->s < p->end && *p->s == c;
}
static int hex4(jp *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        if (p->s >= p->end) return jfail(p, "unterminated \\u escape");
        char h = *p->s++;
        unsigned d = h >= '0' && h <= '9' ? (unsigned)(h - '0')
                     : (h | 32) >= 'a' && (h | 32) <= 'f' ? (unsigned)((h | 32) - 'a' + 10)
                                                          : 16u;
        if (d > 15) return jfail(p, "bad hex digit in a \\u escape");
        *v = *v * 16 + d;
    }
    return 1;
}
/* Parses a JSON string into a new malloc'd, NUL-terminated UTF-8 buffer (\u0000 is refused:
 * names are C strings). */
static int jstring(jp *p, char **out) {
    *out = NULL;
    if (!expect(p, '"')) return 0;
    size_t cap = 32, n = 0;
    char *b = malloc(cap);
    if (!b) return jfail(p, "out of memory");
    while (p->s < p->end && *p->s != '"') {
        char u[4];
        size_t un = 1;
        u[0] = *p->s++;
        if ((unsigned char)u[0] < 0x20) return free(b), jfail(p, "control character in a string");
        if (u[0] == '\\') {
            if (p->s >= p->end) break;
            char c = *p->s++;
            unsigned v;
            switch (c) {
            case 'n': u[0] = '\n'; break;
            case 't': u[0] = '\t'; break;
            case 'r': u[0] = '\r'; break;
            case 'b': u[0] = '\b'; break;
            case 'f': u[0] = '\f'; break;
            case '"': case '\\': case '/': u[0] = c; break;
            case 'u':
                if (!hex4(p, &v)) return free(b), 0;
                if (v >= 0xd800 && v < 0xdc00) { /* a surrogate pair */
                    unsigned lo;
                    if (p->end - p->s < 2 || p->s[0] != '\\' || p->s[1] != 'u')
                        return free(b), jfail(p, "unpaired surrogate in a \\u escape");
                    p->s += 2;
                    if (!hex4(p, &lo)) return free(b), 0;
                    if (lo < 0xdc00 || lo >= 0xe000) return free(b), jfail(p, "unpaired surrogate in a \\u escape");
                    v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
                } else if (v >= 0xdc00 && v < 0xe000) {
                    return free(b), jfail(p, "unpaired surrogate in a \\u escape");
                }
                if (!v) return free(b), jfail(p, "\\u0000 in a string");
                if (v < 0x80) u[0] = (char)v;
                else if (v < 0x800) u[0] = (char)(0xc0 | v >> 6), u[1] = (char)(0x80 | (v & 63)), un = 2;
                else if (v < 0x10000)
                    u[0] = (char)(0xe0 | v >> 12), u[1] = (char)(0x80 | ((v >> 6) & 63)),
                    u[2] = (char)(0x80 | (v & 63)), un = 3;
                else
                    u[0] = (char)(0xf0 | v >> 18), u[1] = (char)(0x80 | ((v >> 12) & 63)),
                    u[2] = (char)(0x80 | ((v >> 6) & 63)), u[3] = (char)(0x80 | (v & 63)), un = 4;
                break;
            default: return free(b), jfail(p, "unknown escape in a string");
            }
        }
        if (n + un + 1 > cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) return free(b), jfail(p, "out of memory");
            b = nb;
        }
        memcpy(b + n, u, un);
        n += un;
    }
    b[n] = 0;
    if (p->s >= p->end) return free(b), jfail(p, "unterminated string");
    p->s++;
    *out = b;
    return 1;
}
static int jint(jp *p, int64_t *out) {
    ws(p);
    const char *s = p->s;
    int64_t v = 0;
    if (s >= p->end || *s < '0' || *s > '9') return jfail(p, "expected a non-negative integer");
    while (s < p->end && *s >= '0' && *s <= '9') {
        if (v > (INT64_MAX - 9) / 10) return jfail(p, "integer too large");
        v = v * 10 + (*s++ - '0');
    }
    p->s = s;
    *out = v;
    return 1;
}
static int jint_array(jp *p, int64_t *v, int max, int *n) {
    *n = 0;
    if (!expect(p, '[')) return 0;
    if (peek(p, ']')) return p->s++, 1;
    for (;;) {
        if (*n == max) return jfail(p, "array too long");
        if (!jint(p, &v[(*n)++])) return 0;
        if (peek(p, ']')) return p->s++, 1;
        if (!expect(p, ',')) return 0;
    }
}

/* Takes ownership of k and v on success. */
static int add_meta(nb_safetensors *f, char *k, char *v) {
    if (f->n_meta == f->meta_cap) {
        int cap = f->meta_cap ? 2 * f->meta_cap : 16;
        char **nk = realloc(f->keys, cap * sizeof *nk);
        if (nk) f->keys = nk;
        char **nv = realloc(f->vals, cap * sizeof *nv);
        if (nv) f->vals = nv;
        if (!nk || !nv) return 0;
        f->meta_cap = cap;
    }
    if (!ntab_add(&f->meta_names, k, f->n_meta)) return 0;
    f->keys[f->n_meta] = k, f->vals[f->n_meta++] = v;
    return 1;
}

/* Duplicate metadata keys are errors (JSON leaves them undefined; a checkpoint's config must
 * not depend on which one a reader keeps). */
static int parse_meta(jp *p, nb_safetensors *f) {
    if (!expect(p, '{')) return 0;
    if (peek(p, '}')) return p->s++, 1;
    for (;;) {
        char *k = NULL, *v = NULL;
        if (!jstring(p, &k)) return 0;
        if (ntab_find(&f->meta_names, k) >= 0) {
            tfail(p, "__metadata__ key", k, "appears twice");
            return free(k), 0;
        }
        if (!expect(p, ':')) return free(k), 0;
        if (!peek(p, '"')) {
            tfail(p, "__metadata__ key", k, "__metadata__ values must be strings");
            return free(k), 0;
        }
        if (!jstring(p, &v)) return free(k), 0;
        if (!add_meta(f, k, v)) {
            free(k), free(v);
            return jfail(p, "out of memory");
        }
        if (peek(p, '}')) return p->s++, 1;
        if (!expect(p, ',')) return 0;
    }
}

/* One little-endian F16 / BF16 / F64 element as f32. */
static float to_f32(const unsigned char *b, int esz, int kind) {
    if (esz == 8) {
        double d;
        memcpy(&d, b, 8);
        return (float)d;
    }
    uint32_t h = (uint32_t)b[0] | (uint32_t)b[1] << 8, bits;
    if (kind == 1) bits = h << 16; /* bf16: the high half of an f32 */
    else {                         /* f16 */
        uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0x1f) bits = sign | 0x7f800000u | (m << 13);      /* inf / nan */
        else if (e) bits = sign | ((e + 112) << 23) | (m << 13);  /* normal */
        else if (!m) bits = sign;                                 /* zero */
        else {                                                    /* subnormal: m * 2^-24 */
            float f = (float)m * 5.9604644775390625e-8f;
            memcpy(&bits, &f, 4);
            bits |= sign;
        }
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* One tensor entry {"dtype": .., "shape": [..], "data_offsets": [b, e]}, each key exactly once;
 * offsets checked against the shape and the data size (overlaps are checked once all entries are
 * in). On success the tensor is registered under `name`, which it then owns. */
static int parse_tensor(jp *p, nb_safetensors *f, char *name, uint64_t dlen) {
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    char *dtype = NULL;
    int64_t shape[NB_ST_MAX_DIMS], offs[2];
    int nd = -1, no = -1, seen[3] = {0, 0, 0}, ok = 1;
    ws(p);
    if (p->s >= p->end || *p->s != '{') return tfail(p, "tensor", name, "expected an object '{'");
    p->s++;
    if (peek(p, '}')) p->s++;
    else
        for (;;) {
            char *k;
            if (!jstring(p, &k)) {
                ok = 0;
                break;
            }
            int w = -1;
            for (int i = 0; i < 3; i++)
                if (!strcmp(k, keys[i])) w = i;
            if (w < 0) ok = tfail(p, "tensor", name, "unknown key '%.60s' in a tensor entry", k);
            else if (seen[w]) ok = tfail(p, "tensor", name, "key '%s' appears twice", keys[w]);
            free(k);
            if (!ok || !expect(p, ':')) {
                ok = 0;
                break;
            }
            seen[w] = 1;
            if (w == 0) {
                if (!peek(p, '"')) ok = tfail(p, "tensor", name, "'dtype' is not a string");
                else ok = jstring(p, &dtype);
            } else if (w == 1) ok = jint_array(p, shape, NB_ST_MAX_DIMS, &nd);
            else ok = jint_array(p, offs, 2, &no);
            if (!ok) break;
            if (peek(p, '}')) {
                p->s++;
                break;
            }
            if (!expect(p, ',')) {
                ok = 0;
                break;
            }
        }
    if (!ok) return free(dtype), 0;
    if (!dtype || nd < 0 || no != 2) {
        free(dtype);
        snprintf(p->err, sizeof p->err, "tensor '%.160s' lacks dtype, shape or data_offsets", name);
        return 0;
    }
    int esz = !strcmp(dtype, "F32") ? 4 : !strcmp(dtype, "F16") || !strcmp(dtype, "BF16") ? 2 : !strcmp(dtype, "F64") ? 8 : 0;
    int kind = dtype[0] == 'B' ? 1 : esz == 2 ? 2 : 0;
    if (!esz) {
        snprintf(p->err, sizeof p->err, "tensor '%.160s' has dtype %.40s; only F32, F16, BF16 and F64 are read", name, dtype);
        free(dtype);
        return 0;
    }
    free(dtype);
    uint64_t cnt = 1;
    for (int d = 0; d < nd; d++) {
        if (shape[d] > (1ll << 40)) return tfail(p, "tensor", name, "absurd shape");
        cnt *= (uint64_t)shape[d];
        if (cnt > (1ull << 40)) return tfail(p, "tensor", name, "absurd shape");
    }
    if (offs[1] < offs[0] || (uint64_t)(offs[1] - offs[0]) != cnt * (uint64_t)esz) {
        snprintf(p->err, sizeof p->err,
                 "tensor '%.160s': data_offsets [%lld, %lld] do not match its shape (%llu bytes)",
                 name, (long long)offs[0], (long long)offs[1], (unsigned long long)(cnt * (uint64_t)esz));
        return 0;
    }
    if ((uint64_t)offs[1] > dlen) {
        snprintf(p->err, sizeof p->err,
                 "tensor '%.160s': data_offsets [%lld, %lld] run past the end of the data section "
                 "(%llu bytes; truncated file?)",
                 name, (long long)offs[0], (long long)offs[1], (unsigned long long)dlen);
        return 0;
    }
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        nb_st_tensor *nt = realloc(f->t, cap * sizeof *nt);
        if (nt) f->t = nt;
        float **nbf = realloc(f->bufs, cap * sizeof *nbf);
        if (nbf) f->bufs = nbf;
        st_src *ns = realloc(f->src, cap * sizeof *ns);
        if (ns) f->src = ns;
        if (!nt || !nbf || !ns) return jfail(p, "out of memory");
        f->cap = cap;
    }
    if (!ntab_add(&f->names, name, f->n)) return jfail(p, "out of memory");
    nb_st_tensor *t = &f->t[f->n];
    t->name = name;
    t->ndim = nd;
    memset(t->shape, 0, sizeof t->shape);
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)nd);
    t->data = NULL;
    f->bufs[f->n] = NULL;
    f->src[f->n] = (st_src){(uint64_t)offs[0], (uint64_t)offs[1], esz, kind};
    f->n++;
    return 1;
}

static int parse_header(jp *p, nb_safetensors *f, uint64_t dlen) {
    int have_meta = 0;
    if (!expect(p, '{')) return 0;
    if (!peek(p, '}'))
        for (;;) {
            char *k;
            if (!jstring(p, &k)) return 0;
            if (!expect(p, ':')) return free(k), 0;
            if (!strcmp(k, "__metadata__")) {
                free(k);
                if (have_meta) return jfail(p, "'__metadata__' appears twice");
                have_meta = 1;
                if (!parse_meta(p, f)) return 0;
            } else {
                if (ntab_find(&f->names, k) >= 0) {
                    snprintf(p->err, sizeof p->err, "duplicate tensor '%.160s'", k);
                    return free(k), 0;
                }
                if (!parse_tensor(p, f, k, dlen)) return free(k), 0;
            }
            if (peek(p, '}')) break;
            if (!expect(p, ',')) return 0;
        }
    p->s++;
    ws(p);
    if (p->s != p->end) return jfail(p, "trailing characters after the JSON object");
    return 1;
}

typedef struct span {
    uint64_t begin, end;
    int i;
} span;
static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->i - y->i;
}

/* No two tensors may share bytes (empty tensors share none). Gaps between tensors are allowed. */
static int check_overlaps(jp *p, const nb_safetensors *f) {
    if (f->n < 2) return 1;
    span *v = malloc((size_t)f->n * sizeof *v);
    if (!v) return jfail(p, "out of memory");
    for (int i = 0; i < f->n; i++) v[i] = (span){f->src[i].begin, f->src[i].end, i};
    qsort(v, (size_t)f->n, sizeof *v, span_cmp);
    int ok = 1;
    const span *prev = NULL; /* the non-empty span reaching furthest so far */
    for (int j = 0; j < f->n && ok; j++) {
        if (v[j].begin == v[j].end) continue;
        if (prev && prev->end > v[j].begin) {
            const nb_st_tensor *a = &f->t[prev->i], *b = &f->t[v[j].i];
            snprintf(p->err, sizeof p->err,
                     "tensors '%.120s' (data_offsets [%llu, %llu]) and '%.120s' (data_offsets "
                     "[%llu, %llu]) overlap",
                     a->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
                     b->name, (unsigned long long)v[j].begin, (unsigned long long)v[j].end);
            ok = 0;
        }
        if (!prev || v[j].end > prev->end) prev = &v[j];
    }
    free(v);
    return ok;
}

static int convert(jp *p, nb_safetensors *f, const unsigned char *data) {
    for (int i = 0; i < f->n; i++) {
        const st_src *sr = &f->src[i];
        uint64_t cnt = (sr->end - sr->begin) / (uint64_t)sr->esz;
        float *buf = malloc(cnt ? cnt * 4 : 4);
        if (!buf) return tfail(p, "tensor", f->t[i].name, "out of memory (%llu elements)", (unsigned long long)cnt);
        const unsigned char *src = data + sr->begin;
        if (sr->esz == 4) memcpy(buf, src, cnt * 4);
        else
            for (uint64_t e = 0; e < cnt; e++) buf[e] = to_f32(src + e * (uint64_t)sr->esz, sr->esz, sr->kind);
        f->bufs[i] = buf;
        f->t[i].data = buf;
    }
    return 1;
}

nb_status nb_safetensors_read(const char *path, nb_safetensors **out) {
    if (!path || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_read: NULL argument");
    *out = NULL;
    char *raw;
    size_t total;
    /* regular files only: a FIFO in place of the checkpoint is refused without blocking */
    nb_status s = nb_file_read_all(path, "safetensors file", MAX_FILE, &raw, &total);
    if (s) return s == NB_ERR_NOT_FOUND ? NB_ERR_IO : s; /* the message says what happened */
    const unsigned char *buf = (const unsigned char *)raw;
    if (total < 8) {
        nb_free(raw, total + 1);
        return nb_error(NB_ERR_IO, "'%s' is not a safetensors file: shorter than its 8-byte header length", path);
    }
    uint64_t hn = 0;
    for (int i = 0; i < 8; i++) hn |= (uint64_t)buf[i] << (8 * i);
    if (hn > MAX_HEADER || hn < 2 || (uint64_t)total < 8 + hn) {
        nb_free(raw, total + 1);
        return nb_error(NB_ERR_IO, "'%s' is not a valid safetensors file: header length %llu vs file size %zu (truncated or not safetensors)",
                        path, (unsigned long long)hn, total);
    }
    nb_safetensors *f = calloc(1, sizeof *f);
    if (!f) {
        nb_free(raw, total + 1);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "'%s': out of memory", path);
    }
    const char *h = (const char *)buf + 8;
    jp p = {h, h + hn, h, ""};
    const unsigned char *data = buf + 8 + hn;
    int ok = parse_header(&p, f, (uint64_t)total - 8 - hn) && check_overlaps(&p, f) && convert(&p, f, data);
    nb_free(raw, total + 1);
    if (!ok) {
        nb_safetensors_free(f);
        return nb_error(NB_ERR_IO, "'%s': bad safetensors header: %s", path, p.err);
    }
    *out = f;
    return NB_OK;
}

void nb_safetensors_free(nb_safetensors *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].name), free(f->bufs[i]);
    for (int i = 0; i < f->n_meta; i++) free(f->keys[i]), free(f->vals[i]);
    nb_strmap_free(&f->names), nb_strmap_free(&f->meta_names);
    free(f->t), free(f->bufs), free(f->src), free(f->keys), free(f->vals), free(f);
}

nb_status nb_safetensors_count(const nb_safetensors *f, int *n) {
    if (!f || !n) return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_count: NULL argument");
    *n = f->n;
    return NB_OK;
}

nb_status nb_safetensors_get(const nb_safetensors *f, int i, const nb_st_tensor **out) {
    if (!f || !out || i < 0 || i >= f->n)
        return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_get: bad file or index %d", i);
    *out = &f->t[i];
    return NB_OK;
}

nb_status nb_safetensors_find(const nb_safetensors *f, const char *name, const nb_st_tensor **out) {
    if (!f || !name || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_find: NULL argument");
    int i = ntab_find(&f->names, name);
    if (i < 0) return nb_error(NB_ERR_NOT_FOUND, "tensor '%s' is not in the file", name);
    *out = &f->t[i];
    return NB_OK;
}

nb_status nb_safetensors_meta(const nb_safetensors *f, const char *key, const char **value) {
    if (!f || !key || !value) return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_meta: NULL argument");
    int i = ntab_find(&f->meta_names, key);
    *value = i < 0 ? NULL : f->vals[i];
    return NB_OK;
}
