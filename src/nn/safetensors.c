/* safetensors reader (F32, F16, BF16, F64 -> f32) / writer (F32) with a small JSON parser for its header. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/safetensors.h"

#define MAX_HEADER (100 << 20)

struct nb_safetensors {
    int n, cap;
    nb_st_tensor *t;
    float **bufs;
    int n_meta, meta_cap;
    char **keys, **vals;
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
        if (!t[i].name || t[i].ndim < 0 || t[i].ndim > NB_ST_MAX_DIMS || !t[i].data) {
            free(h.p);
            return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_write: tensor %d has no name, data or a bad ndim", i);
        }
        uint64_t cnt = 1;
        if (n_meta || i) sb_str(&h, ",");
        sb_json_str(&h, t[i].name);
        sb_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
            sb_str(&h, num);
            cnt *= (uint64_t)t[i].shape[d];
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
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_safetensors_write: out of memory");
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h.p);
        return nb_error(NB_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(h.p, 1, h.n, f) == h.n;
    free(h.p);
    for (int i = 0; ok && i < n; i++) {
        size_t cnt = 1;
        for (int d = 0; d < t[i].ndim; d++) cnt *= (size_t)t[i].shape[d];
        ok = fwrite(t[i].data, sizeof(float), cnt, f) == cnt; /* little-endian hosts only */
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) return nb_error(NB_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return NB_OK;
}

/* ---- JSON header parsing ------------------------------------------------------------------- */

typedef struct jp {
    const char *s, *end, *start;
    char err[200];
} jp;

static int jfail(jp *p, const char *what) {
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "%s at header byte %ld", what, (long)(p->s - p->start));
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
/* Parses a JSON string into a new malloc'd buffer. */
static int jstring(jp *p, char **out) {
    if (!expect(p, '"')) return 0;
    size_t cap = 32, n = 0;
    char *b = malloc(cap);
    if (!b) return jfail(p, "out of memory");
    while (p->s < p->end && *p->s != '"') {
        char c = *p->s++;
        if ((unsigned char)c < 0x20) {
            free(b);
            return jfail(p, "control character in a string");
        }
        if (c == '\\') {
            if (p->s >= p->end) break;
            c = *p->s++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    if (p->s >= p->end) break;
                    char h = *p->s++;
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            default: break; /* \" \\ \/ */
            }
        }
        if (n + 2 > cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return jfail(p, "out of memory");
            }
            b = nb;
        }
        b[n++] = c;
    }
    b[n] = 0;
    if (p->s >= p->end) {
        free(b);
        return jfail(p, "unterminated string");
    }
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
    f->keys[f->n_meta] = k, f->vals[f->n_meta++] = v;
    return 1;
}

static int parse_meta(jp *p, nb_safetensors *f) {
    if (!expect(p, '{')) return 0;
    if (peek(p, '}')) return p->s++, 1;
    for (;;) {
        char *k = NULL, *v = NULL;
        if (!jstring(p, &k)) return 0;
        if (!expect(p, ':')) return free(k), 0;
        if (!peek(p, '"')) {
            free(k);
            return jfail(p, "__metadata__ values must be strings");
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

/* One tensor entry; offsets checked against the data size. */
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

static int parse_tensor(jp *p, nb_safetensors *f, char *name, const unsigned char *data, uint64_t dlen) {
    char *dtype = NULL;
    int64_t shape[NB_ST_MAX_DIMS], offs[2];
    int nd = -1, no = -1;
    if (!expect(p, '{')) return 0;
    for (int first = 1;; first = 0) {
        if (peek(p, '}') && first) break;
        char *k;
        if (!jstring(p, &k)) return free(dtype), 0;
        int ok = expect(p, ':');
        if (ok && !strcmp(k, "dtype")) free(dtype), ok = jstring(p, &dtype);
        else if (ok && !strcmp(k, "shape")) ok = jint_array(p, shape, NB_ST_MAX_DIMS, &nd);
        else if (ok && !strcmp(k, "data_offsets")) ok = jint_array(p, offs, 2, &no);
        else if (ok) ok = jfail(p, "unknown key in a tensor entry");
        free(k);
        if (!ok) return free(dtype), 0;
        if (peek(p, '}')) break;
        if (!expect(p, ',')) return free(dtype), 0;
    }
    p->s++;
    if (!dtype || nd < 0 || no != 2) {
        free(dtype);
        snprintf(p->err, sizeof p->err, "tensor '%s' lacks dtype, shape or data_offsets", name);
        return 0;
    }
    int esz = !strcmp(dtype, "F32") ? 4 : !strcmp(dtype, "F16") || !strcmp(dtype, "BF16") ? 2 : !strcmp(dtype, "F64") ? 8 : 0;
    int kind = dtype[0] == 'B' ? 1 : dtype[1] == '1' ? 2 : 0; /* 1 BF16, 2 F16 */
    if (!esz) {
        snprintf(p->err, sizeof p->err, "tensor '%s' has dtype %s; only F32, F16, BF16 and F64 are read", name, dtype);
        free(dtype);
        return 0;
    }
    free(dtype);
    uint64_t cnt = 1;
    for (int d = 0; d < nd; d++) {
        if (shape[d] > (1ll << 40)) return jfail(p, "absurd shape");
        cnt *= (uint64_t)shape[d];
        if (cnt > (1ull << 40)) return jfail(p, "absurd shape");
    }
    if (offs[1] < offs[0] || (uint64_t)(offs[1] - offs[0]) != cnt * (uint64_t)esz || (uint64_t)offs[1] > dlen) {
        snprintf(p->err, sizeof p->err,
                 "tensor '%s': data_offsets [%lld, %lld] do not match its shape (%llu bytes) or "
                 "run past the end of the data (%llu bytes; truncated file?)",
                 name, (long long)offs[0], (long long)offs[1], (unsigned long long)(cnt * (uint64_t)esz),
                 (unsigned long long)dlen);
        return 0;
    }
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        nb_st_tensor *nt = realloc(f->t, cap * sizeof *nt);
        if (nt) f->t = nt;
        float **nbf = realloc(f->bufs, cap * sizeof *nbf);
        if (nbf) f->bufs = nbf;
        if (!nt || !nbf) return jfail(p, "out of memory");
        f->cap = cap;
    }
    float *buf = malloc(cnt ? cnt * 4 : 4);
    if (!buf) return jfail(p, "out of memory");
    const unsigned char *src = data + offs[0];
    if (esz == 4) memcpy(buf, src, cnt * 4);
    else
        for (uint64_t i = 0; i < cnt; i++) buf[i] = to_f32(src + i * (uint64_t)esz, esz, kind);
    nb_st_tensor *t = &f->t[f->n];
    t->name = name;
    t->ndim = nd;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)nd);
    t->data = buf;
    f->bufs[f->n++] = buf;
    return 1;
}

static int parse_header(jp *p, nb_safetensors *f, const unsigned char *data, uint64_t dlen) {
    if (!expect(p, '{')) return 0;
    if (!peek(p, '}'))
        for (;;) {
            char *k;
            if (!jstring(p, &k)) return 0;
            if (!expect(p, ':')) return free(k), 0;
            if (!strcmp(k, "__metadata__")) {
                free(k);
                if (!parse_meta(p, f)) return 0;
            } else {
                for (int i = 0; i < f->n; i++)
                    if (!strcmp(f->t[i].name, k)) {
                        snprintf(p->err, sizeof p->err, "duplicate tensor '%s'", k);
                        return free(k), 0;
                    }
                if (!parse_tensor(p, f, k, data, dlen)) return free(k), 0;
            }
            if (peek(p, '}')) break;
            if (!expect(p, ',')) return 0;
        }
    p->s++;
    ws(p);
    if (p->s != p->end) return jfail(p, "trailing characters after the JSON object");
    return 1;
}

nb_status nb_safetensors_read(const char *path, nb_safetensors **out) {
    if (!path || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_read: NULL argument");
    FILE *fp = fopen(path, "rb");
    if (!fp) return nb_error(NB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    unsigned char len[8];
    if (fread(len, 1, 8, fp) != 8) {
        fclose(fp);
        return nb_error(NB_ERR_IO, "'%s' is not a safetensors file: shorter than its 8-byte header length", path);
    }
    uint64_t hn = 0;
    for (int i = 0; i < 8; i++) hn |= (uint64_t)len[i] << (8 * i);
    fseek(fp, 0, SEEK_END);
    long total = ftell(fp);
    if (hn > MAX_HEADER || hn < 2 || (uint64_t)total < 8 + hn) {
        fclose(fp);
        return nb_error(NB_ERR_IO, "'%s' is not a valid safetensors file: header length %llu vs file size %ld (truncated or not safetensors)",
                        path, (unsigned long long)hn, total);
    }
    unsigned char *buf = malloc((size_t)total - 8 + 1);
    if (!buf) {
        fclose(fp);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "'%s': out of memory", path);
    }
    fseek(fp, 8, SEEK_SET);
    size_t got = fread(buf, 1, (size_t)total - 8, fp);
    fclose(fp);
    if (got != (size_t)total - 8) {
        free(buf);
        return nb_error(NB_ERR_IO, "cannot read '%s'", path);
    }
    nb_safetensors *f = calloc(1, sizeof *f);
    if (!f) {
        free(buf);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "'%s': out of memory", path);
    }
    jp p = {(const char *)buf, (const char *)buf + hn, (const char *)buf, ""};
    int ok = parse_header(&p, f, buf + hn, (uint64_t)total - 8 - hn);
    free(buf);
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
    free(f->t), free(f->bufs), free(f->keys), free(f->vals), free(f);
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
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) {
            *out = &f->t[i];
            return NB_OK;
        }
    return nb_error(NB_ERR_NOT_FOUND, "tensor '%s' is not in the file", name);
}

nb_status nb_safetensors_meta(const nb_safetensors *f, const char *key, const char **value) {
    if (!f || !key || !value) return nb_error(NB_ERR_INVALID_ARG, "nb_safetensors_meta: NULL argument");
    *value = NULL;
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->keys[i], key)) *value = f->vals[i];
    return NB_OK;
}
