/* NumPy .npy files (include/nabla/npy.h).
 *
 * Format (numpy.lib.format): the magic "\x93NUMPY", one byte major and one byte minor version,
 * the header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0), then the header: a Python dict
 * literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces
 * and ended by '\n' so that the data starts at a multiple of 64 bytes. The data follows: the
 * elements in C (or Fortran) order, nothing else.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nabla/file.h"
#include "core/layout.h"
#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/npy.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6

/* descr strings for each supported dtype; -1 = none. Order matches nb_dtype. */
static const char *descr_of(nb_dtype t) {
    switch (t) {
    case NB_F32: return "<f4";
    case NB_F64: return "<f8";
    case NB_F16: return "<f2";
    case NB_I32: return "<i4";
    case NB_I64: return "<i8";
    case NB_U32: return "<u4";
    case NB_U8: return "|u1";
    case NB_BOOL: return "|b1";
    default: return NULL;
    }
}

/* Parses a descr string. Byte order '<', '|' or '=' (this library only runs little-endian). */
static nb_status dtype_of_descr(const char *name, const char *d, nb_dtype *out) {
    char order = d[0];
    if (order == '>')
        return nb_error(NB_ERR_UNSUPPORTED,
                        "%s: big-endian data ('%s') is not supported; save it little-endian "
                        "(arr.astype(arr.dtype.newbyteorder('<')))",
                        name, d);
    if (order != '<' && order != '|' && order != '=')
        return nb_error(NB_ERR_UNSUPPORTED, "%s: unsupported dtype '%s'", name, d);
    const char *k = d + 1;
    static const struct { const char *code; nb_dtype t; } table[] = {
        {"f4", NB_F32}, {"f8", NB_F64}, {"f2", NB_F16}, {"i4", NB_I32}, {"i8", NB_I64},
        {"u4", NB_U32}, {"u1", NB_U8},  {"b1", NB_BOOL},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(k, table[i].code)) {
            *out = table[i].t;
            return NB_OK;
        }
    return nb_error(NB_ERR_UNSUPPORTED,
                    "%s: unsupported dtype '%s' (supported: f4 f8 f2 i4 i8 u4 u1 b1)", name, d);
}

/* ---- header parsing: a tiny reader for the dict literal ---------------------------------- */

typedef struct hdr_reader {
    const char *s, *end;
    const char *name;  /* file, for messages */
    const char *start; /* the header's first byte, for offsets in messages */
} hdr_reader;

static void skip_ws(hdr_reader *r) {
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r'))
        r->s++;
}

static nb_status bad_header(hdr_reader *r, const char *what) {
    return nb_error(NB_ERR_INVALID_ARG, "%s: malformed .npy header: %s", r->name, what);
}

static int accept(hdr_reader *r, char c) {
    skip_ws(r);
    if (r->s < r->end && *r->s == c) {
        r->s++;
        return 1;
    }
    return 0;
}

/* A quoted string into buf (cap bytes). */
static nb_status read_str(hdr_reader *r, char *buf, size_t cap) {
    skip_ws(r);
    if (r->s >= r->end || (*r->s != '\'' && *r->s != '"')) return bad_header(r, "expected a string");
    char q = *r->s++;
    size_t n = 0;
    while (r->s < r->end && *r->s != q) {
        if (n + 1 >= cap) return bad_header(r, "string too long");
        buf[n++] = *r->s++;
    }
    if (r->s >= r->end) return bad_header(r, "unterminated string");
    r->s++;
    buf[n] = '\0';
    return NB_OK;
}

static nb_status read_bool(hdr_reader *r, int *out) {
    skip_ws(r);
    size_t left = (size_t)(r->end - r->s);
    if (left >= 4 && !memcmp(r->s, "True", 4)) {
        r->s += 4;
        *out = 1;
        return NB_OK;
    }
    if (left >= 5 && !memcmp(r->s, "False", 5)) {
        r->s += 5;
        *out = 0;
        return NB_OK;
    }
    return bad_header(r, "fortran_order must be True or False");
}

/* (d0, d1, …) with an optional trailing comma; () is a scalar. */
static nb_status read_shape(hdr_reader *r, int *ndim, int64_t *shape) {
    if (!accept(r, '(')) return bad_header(r, "shape must be a tuple");
    int n = 0;
    for (;;) {
        if (accept(r, ')')) break;
        skip_ws(r);
        if (r->s >= r->end || *r->s < '0' || *r->s > '9')
            return bad_header(r, "shape entries must be non-negative integers");
        int64_t v = 0;
        while (r->s < r->end && *r->s >= '0' && *r->s <= '9') {
            if (v > (INT64_MAX - 9) / 10) return bad_header(r, "shape entry too large");
            v = v * 10 + (*r->s++ - '0');
        }
        if (r->s < r->end && *r->s == 'L') r->s++; /* Python 2 longs */
        if (n >= NB_MAX_DIMS)
            return nb_error(NB_ERR_SHAPE, "%s: the array has more than %d dims", r->name,
                            NB_MAX_DIMS);
        shape[n++] = v;
        if (accept(r, ')')) break;
        if (!accept(r, ',')) return bad_header(r, "expected ',' or ')' in shape");
    }
    *ndim = n;
    return NB_OK;
}

typedef struct npy_header {
    nb_dtype dtype;
    int fortran;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
} npy_header;

/* The dict, each key once; after its '}' only the spaces numpy pads with and the final '\n'. */
static nb_status parse_dict(hdr_reader *r, npy_header *h) {
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (!accept(r, '{')) return bad_header(r, "expected '{'");
    for (;;) {
        if (accept(r, '}')) break;
        char key[64];
        nb_status s = read_str(r, key, sizeof key);
        if (s) return s;
        if (!accept(r, ':')) return bad_header(r, "expected ':' after a key");
        if ((!strcmp(key, "descr") && have_descr) || (!strcmp(key, "fortran_order") && have_order) ||
            (!strcmp(key, "shape") && have_shape)) {
            char msg[120];
            snprintf(msg, sizeof msg, "key '%s' appears twice", key);
            return bad_header(r, msg);
        }
        if (!strcmp(key, "descr")) {
            char d[64];
            if ((s = read_str(r, d, sizeof d))) return s;
            if ((s = dtype_of_descr(r->name, d, &h->dtype))) return s;
            have_descr = 1;
        } else if (!strcmp(key, "fortran_order")) {
            if ((s = read_bool(r, &h->fortran))) return s;
            have_order = 1;
        } else if (!strcmp(key, "shape")) {
            if ((s = read_shape(r, &h->ndim, h->shape))) return s;
            have_shape = 1;
        } else {
            char msg[120];
            snprintf(msg, sizeof msg, "unexpected key '%s'", key);
            return bad_header(r, msg);
        }
        if (accept(r, '}')) break;
        if (!accept(r, ',')) return bad_header(r, "expected ',' or '}'");
    }
    if (!have_descr || !have_order || !have_shape)
        return bad_header(r, !have_descr ? "missing 'descr'"
                             : !have_order ? "missing 'fortran_order'"
                                           : "missing 'shape'");
    const char *pad = r->s;
    while (pad < r->end && *pad == ' ') pad++;
    if (pad < r->end && *pad == '\n' && pad + 1 == r->end) pad++;
    if (pad != r->end) {
        unsigned char c = (unsigned char)*pad;
        char msg[160];
        snprintf(msg, sizeof msg,
                 "unexpected %s%c%s (byte 0x%02x) at offset %ld after the dict; only space padding "
                 "and a final newline may follow it",
                 c >= 0x20 && c < 0x7f ? "'" : "", c >= 0x20 && c < 0x7f ? (char)c : '?',
                 c >= 0x20 && c < 0x7f ? "'" : "", c, (long)(pad - r->start));
        return bad_header(r, msg);
    }
    return NB_OK;
}

/* ---- load ---------------------------------------------------------------------------------- */

nb_status nb_tensor_load_npy_mem(nb_device *dev, const void *data, size_t size, const char *name,
                                 nb_tensor **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_tensor_load_npy: argument 'out' is NULL");
    *out = NULL;
    if (!data && size) return nb_error(NB_ERR_INVALID_ARG, "nb_tensor_load_npy: data is NULL");
    if (!name) name = "<memory>";
    const unsigned char *b = data;
    if (size < NPY_MAGIC_LEN + 2 || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        if (size < NPY_MAGIC_LEN + 2 && size > 0 && !memcmp(b, NPY_MAGIC, size < 6 ? size : 6))
            return nb_error(NB_ERR_IO, "%s: truncated .npy file (%zu bytes)", name, size);
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: not a .npy file (bad magic: expected \\x93NUMPY)", name);
    }
    int major = b[6], minor = b[7];
    size_t pre, hlen;
    if (major == 1) {
        pre = 10;
        if (size < pre) return nb_error(NB_ERR_IO, "%s: truncated .npy file (%zu bytes)", name, size);
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if (major == 2 || major == 3) {
        pre = 12;
        if (size < pre) return nb_error(NB_ERR_IO, "%s: truncated .npy file (%zu bytes)", name, size);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    } else {
        return nb_error(NB_ERR_UNSUPPORTED, "%s: unsupported .npy format version %d.%d", name,
                        major, minor);
    }
    if (hlen > size - pre)
        return nb_error(NB_ERR_IO, "%s: truncated .npy file: header of %zu bytes, file has %zu",
                        name, hlen, size - pre);
    hdr_reader r = {(const char *)b + pre, (const char *)b + pre + hlen, name, (const char *)b + pre};
    npy_header h;
    memset(&h, 0, sizeof h);
    nb_status s = parse_dict(&r, &h);
    if (s) return s;
    if (h.fortran)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "%s: Fortran-ordered arrays are not supported; save a C-ordered copy "
                        "(np.ascontiguousarray)",
                        name);
    size_t esz = nb_dtype_size(h.dtype);
    int64_t numel = 0;
    if ((s = nb_layout_check_shape("nb_tensor_load_npy", h.ndim, h.shape, (int64_t)esz, &numel)))
        return s;
    size_t need = (size_t)numel * esz, have = size - pre - hlen;
    if (have != need) {
        char sh[160];
        nb_shape_str(h.ndim, h.shape, sh, sizeof sh);
        return nb_error(NB_ERR_IO, "%s: %s: data is %zu bytes but %s%s needs %zu", name,
                        have < need ? "truncated .npy file" : "size mismatch", have,
                        nb_dtype_name(h.dtype), sh, need);
    }
    nb_device *cpu = NULL;
    if (!dev) {
        if ((s = nb_device_open("cpu", &cpu))) return s;
        dev = cpu;
    }
    s = nb_tensor_from_host(dev, h.dtype, h.ndim, h.shape, b + pre + hlen, out);
    if (cpu) nb_device_close(cpu);
    return s;
}

nb_status nb_tensor_load_npy(nb_device *dev, const char *path, nb_tensor **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_tensor_load_npy: argument 'out' is NULL");
    *out = NULL;
    if (!path) return nb_error(NB_ERR_INVALID_ARG, "nb_tensor_load_npy: argument 'path' is NULL");
    /* regular files only: a FIFO or a directory is refused without blocking */
    char *buf;
    size_t n;
    nb_status s = nb_file_read_all(path, ".npy file", (size_t)1 << 40, &buf, &n);
    if (s == NB_ERR_NOT_FOUND) return nb_error(NB_ERR_IO, "%s: cannot open: %s", path, strerror(ENOENT));
    if (s) return s; /* a FIFO, a directory, no permission: the message names the cause */
    s = nb_tensor_load_npy_mem(dev, buf, n, path, out);
    nb_free(buf, n + 1);
    return s;
}

/* ---- save ---------------------------------------------------------------------------------- */

nb_status nb_tensor_save_npy(const nb_tensor *t, const char *path) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tensor_save_npy: argument 't' is NULL");
    if (!path) return nb_error(NB_ERR_INVALID_ARG, "nb_tensor_save_npy: argument 'path' is NULL");
    nb_dtype dt = nb_tensor_dtype(t);
    const char *descr = descr_of(dt);
    if (!descr)
        return nb_error(NB_ERR_UNSUPPORTED, "nb_tensor_save_npy: %s: dtype %s has no NumPy equivalent",
                        path, nb_dtype_name(dt));
    int ndim = nb_tensor_ndim(t);
    const int64_t *shape = nb_tensor_shape(t);
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    /* numpy's spelling: "()", "(4,)", "(2, 3)". */
    for (int i = 0; i < ndim; i++)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%lld%s", i ? ", " : "",
                      (long long)shape[i], ndim == 1 ? "," : "");
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
    /* Pad with spaces so that magic + version + length + header + '\n' is a multiple of 64. */
    size_t total = nb_align_up((size_t)NPY_MAGIC_LEN + 2 + 2 + (size_t)n + 1, 64);
    size_t hlen = total - (NPY_MAGIC_LEN + 2 + 2);
    unsigned char pre[10];
    memcpy(pre, NPY_MAGIC, NPY_MAGIC_LEN);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    memset(hdr + n, ' ', hlen - 1 - (size_t)n);
    hdr[hlen - 1] = '\n';

    size_t bytes = nb_tensor_nbytes(t);
    void *host = nb_alloc(bytes ? bytes : 1, 64);
    if (!host) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_tensor_save_npy: out of host memory");
    nb_status s = nb_tensor_to_host(t, host, bytes);
    if (s) {
        nb_free(host, bytes ? bytes : 1);
        return s;
    }
    /* Atomically: a temporary file beside path, fsync, rename (a killed process leaves the
     * previous file or the new one, never half of either). */
    nb_file_atomic af;
    s = nb_file_atomic_open(&af, path, ".npy file");
    if (!s) {
        int ok = fwrite(pre, 1, sizeof pre, af.f) == sizeof pre && fwrite(hdr, 1, hlen, af.f) == hlen &&
                 (bytes == 0 || fwrite(host, 1, bytes, af.f) == bytes);
        if (!ok) {
            s = nb_error(NB_ERR_IO, "%s: write failed: %s", path, strerror(errno));
            nb_file_atomic_abort(&af);
        } else {
            s = nb_file_atomic_commit(&af);
        }
    }
    nb_free(host, bytes ? bytes : 1);
    return s;
}
