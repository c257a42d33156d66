/* The tape autograd and the diffusion UNet against PyTorch (issue 7): reference dumps written by
 * tools/torch_ref/dump_tape_ref.py (CPU torch, float64 rounded to float32) under
 * tests/data/tape_ref/ are replayed on a nabla tape, on the CPU and (with a GPU) on CUDA:
 *   - every tape op: forward output and the gradient of every input / parameter for a random
 *     upstream gradient dy (seeded through linear(reshape(y, [1,M]), dy) = sum(y * dy), whose
 *     backward hands y exactly dy); group_norm_silu twice: GN then SiLU, and the fused
 *     nb_tape_group_norm_silu;
 *   - two tiny UNets: output, MSE loss and the gradient of every parameter (nabla's names); on
 *     CUDA also CUDA against nabla's CPU run, and TF32 / BF16 within loose sanity bounds;
 *   - ten AdamW steps (nb_unet + nb_tape + nb_adam, no clipping, no EMA) from the same weights on
 *     the same batches: the ten losses and the final weights (but the attention key biases,
 *     whose exact gradient is 0); the CPU run also checks nabla's DDPM schedule (x_t).
 * The data directory is NB_TAPE_REF_DIR when set, else tests/data/tape_ref beside this file.
 * NB_TAPE_REF_VERBOSE=1 prints every comparison (else one line per case and every mismatch). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nb_test.h"

#define SCRIPT "tools/torch_ref/dump_tape_ref.py"
/* Observed on an H100 (CPU and CUDA FP32): ops <= 4.1e-6, UNet gradients <= 4.7e-6, AdamW
 * losses <= 1.8e-7, final weights <= 0.01 lr. */
#define TOL_OP 5e-5   /* max |nabla - torch| / max |torch| per tensor, single ops */
#define TOL_UNET 1e-4 /* same, the UNet's output and parameter gradients */
#define TOL_UNET_TF32 2e-2 /* CUDA TF32 / BF16: sanity bounds */
#define TOL_UNET_BF16 1e-1
#define TOL_LOSS 1e-5 /* relative, each of the ten AdamW losses */
#define TOL_FINAL 0.05 /* max |nabla - torch| of the weights after the AdamW steps, in units of lr */

static const char *const OP_CASES[] = {
    "linear", "linear_nobias",
    "conv2d_k3_s1_p1", "conv2d_k3_s1_p1_nobias", "conv2d_k3_s1_p0", "conv2d_k3_s2_p1",
    "conv2d_k3_s2_p1_odd", "conv2d_k3_s2_p0", "conv2d_k3_s1_p2", "conv2d_k1_s1_p0",
    "conv2d_k1_s1_p0_nobias", "conv2d_k1_s2_p0", "conv2d_k1_s1_p1", "conv2d_k3_s1_p1_nogradx",
    "group_norm_g4", "group_norm_g1", "group_norm_g_eq_c", "group_norm_offset",
    "group_norm_noaffine", "group_norm_2d", "group_norm_silu",
    "group_norm_silu@fused", /* the same reference through nb_tape_group_norm_silu (one op) */
    "silu", "silu_2d", "add", "add_same", "add_channel", "concat", "upsample2x", "avgpool2x", "mse",
    "attention_small", "attention_square", "attention_peaked",
    "reshape", "transpose", "transpose_2d", "slice_channels", "slice_channels_3d",
    "timestep_embedding_d16", "timestep_embedding_d8_p100",
};
#define N_OP_CASES ((int)(sizeof OP_CASES / sizeof OP_CASES[0]))

static int file_exists(const char *dir, const char *file) {
    char path[1280];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *fp = fopen(path, "rb");
    if (fp) fclose(fp);
    return fp != NULL;
}

/* NB_TAPE_REF_DIR, else tests/data/tape_ref beside this source file (CMake compiles it by its
 * absolute path), else relative to the working directory (a build tree one or two levels down). */
static const char *data_dir(void) {
    static char buf[1024];
    const char *e = getenv("NB_TAPE_REF_DIR");
    if (e && e[0]) return e;
    const char *f = __FILE__, *slash = strrchr(f, '/');
    snprintf(buf, sizeof buf, "%.*s%sdata/tape_ref", slash ? (int)(slash - f) : 0, f, slash ? "/" : "");
    if (file_exists(buf, "op_linear.safetensors")) return buf;
    static const char *const rel[] = {"tests/data/tape_ref", "../tests/data/tape_ref",
                                      "../../tests/data/tape_ref"};
    for (int i = 0; i < 3; i++)
        if (file_exists(rel[i], "op_linear.safetensors")) return rel[i];
    return buf;
}

static int verbose(void) {
    const char *v = getenv("NB_TAPE_REF_VERBOSE");
    return v && v[0] && strcmp(v, "0") != 0;
}

/* Opens dir/file; a missing file names itself and the script that writes it. */
static nb_status open_ref(const char *dir, const char *file, nb_safetensors **out) {
    char path[1280];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return nb_error(NB_ERR_IO,
                        "PyTorch reference data '%s' is missing (%s): write it with `python3 " SCRIPT
                        " --out %s` on a machine with torch (see tools/torch_ref/README.md)",
                        path, strerror(errno), dir);
    fclose(fp);
    return nb_safetensors_read(path, out);
}

static int64_t numel(const nb_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static const char *meta_or(const nb_safetensors *f, const char *key, const char *dflt) {
    const char *v = NULL;
    nb_safetensors_meta(f, key, &v);
    return v ? v : dflt;
}

/* Per-run bookkeeping: the worst relative error of a case, for its one-line summary. */
typedef struct {
    const char *where; /* "cpu" / "cuda" */
    const char *name;  /* case */
    double worst;
    char worst_what[96];
    int failed;
} cmp_ctx;

/* max |got - ref| <= tol * max |ref| (and everything finite); prints mismatches. */
static int compare(cmp_ctx *c, const char *what, const float *got, const float *ref, int64_t n,
                   double tol) {
    double md = 0, scale = 0;
    int64_t at = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            if (!bad++) at = i;
            continue;
        }
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > md && !bad) md = d, at = i;
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    double rel = md / fmax(scale, 1e-8);
    int ok = !bad && rel <= tol;
    if (!ok || verbose())
        printf("    [%s] %s %s: max|nabla-torch| %.3g at %lld (nabla %.9g, torch %.9g), max|torch| %.3g, "
               "rel %.3g%s%s\n",
               c->where, c->name, what, md, (long long)at, n ? got[at] : 0.0, n ? ref[at] : 0.0, scale, rel,
               bad ? " NON-FINITE" : "", ok ? "" : "  MISMATCH");
    if (rel > c->worst || bad) {
        c->worst = bad ? INFINITY : rel;
        snprintf(c->worst_what, sizeof c->worst_what, "%s", what);
    }
    if (!ok) c->failed++, nb_test_failures_++;
    return ok;
}

/* CUDA tapes get this precision (FP32 but in test_unet_grads_cuda_lowp). */
static nb_tape_precision g_precision = NB_TAPE_FP32;

static nb_status make_tape(nb_device *dev, nb_tape **t) {
    nb_status s = nb_tape_create_on(dev, t);
    if (!s && dev) s = nb_tape_set_precision(*t, g_precision);
    return s;
}

/* ---- single ops ------------------------------------------------------------------------------- */

#define MAXIN 4

static int in_list(const char *list, const char *name) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (!strcmp(tok, name)) return 1;
    return 0;
}

static int parse_ints(const char *s, int64_t *v, int max) {
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s) break;
        v[n++] = x;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Runs the op named in f's metadata on handles in[] (NB_TVAR_NONE = absent) -> *y. */
static nb_status run_op(nb_tape *t, const nb_safetensors *f, const char *op, const nb_tvar *in,
                        nb_tvar *y) {
    if (!strcmp(op, "linear")) return nb_tape_linear(t, in[0], in[1], in[2], y);
    if (!strcmp(op, "conv2d"))
        return nb_tape_conv2d(t, in[0], in[1], in[2], atoi(meta_or(f, "stride", "1")),
                              atoi(meta_or(f, "pad", "0")), y);
    if (!strcmp(op, "group_norm") || !strcmp(op, "group_norm_silu")) {
        nb_status s = nb_tape_group_norm(t, in[0], atoi(meta_or(f, "groups", "1")), in[1], in[2],
                                         strtof(meta_or(f, "eps", "1e-5"), NULL), y);
        if (!s && !strcmp(op, "group_norm_silu")) s = nb_tape_silu(t, *y, y);
        return s;
    }
    if (!strcmp(op, "group_norm_silu_fused"))
        return nb_tape_group_norm_silu(t, in[0], atoi(meta_or(f, "groups", "1")), in[1], in[2],
                                       strtof(meta_or(f, "eps", "1e-5"), NULL), y);
    if (!strcmp(op, "silu")) return nb_tape_silu(t, in[0], y);
    if (!strcmp(op, "add")) return nb_tape_add(t, in[0], in[1], y);
    if (!strcmp(op, "add_channel")) return nb_tape_add_channel(t, in[0], in[1], y);
    if (!strcmp(op, "concat")) return nb_tape_concat(t, in[0], in[1], y);
    if (!strcmp(op, "upsample2x")) return nb_tape_upsample2x(t, in[0], y);
    if (!strcmp(op, "avgpool2x")) return nb_tape_avgpool2x(t, in[0], y);
    if (!strcmp(op, "mse")) return nb_tape_mse(t, in[0], in[1], y);
    if (!strcmp(op, "attention")) return nb_tape_attention(t, in[0], in[1], in[2], y);
    if (!strcmp(op, "transpose")) return nb_tape_transpose(t, in[0], y);
    if (!strcmp(op, "reshape")) {
        int64_t shape[NB_TAPE_MAX_DIMS];
        int nd = parse_ints(meta_or(f, "shape", ""), shape, NB_TAPE_MAX_DIMS);
        return nb_tape_reshape(t, in[0], nd, shape, y);
    }
    if (!strcmp(op, "slice_channels"))
        return nb_tape_slice_channels(t, in[0], atoll(meta_or(f, "c0", "0")),
                                      atoll(meta_or(f, "count", "1")), y);
    return nb_error(NB_ERR_INVALID_ARG, "reference op '%s' is unknown to this test", op);
}

/* One op case on a tape on dev (NULL = CPU). name "case@variant": case's file through the op
 * "<op>_<variant>" (e.g. group_norm_silu@fused -> nb_tape_group_norm_silu). */
static void run_op_case(nb_device *dev, const char *where, const char *dir, const char *name) {
    char file[256], opbuf[96];
    const char *at = strchr(name, '@');
    snprintf(file, sizeof file, "op_%.*s.safetensors", at ? (int)(at - name) : (int)strlen(name), name);
    nb_safetensors *f = NULL;
    nb_tape *t = NULL;
    float *host = NULL, *pbuf = NULL;
    cmp_ctx c = {where, name, 0, "-", 0};
    nb_status s = open_ref(dir, file, &f);
    if (s) {
        printf("  [%s] %s: FAILED: %s\n", where, name, nb_last_error());
        nb_test_failures_++;
        return;
    }
    const char *op = meta_or(f, "op", ""), *inputs = meta_or(f, "inputs", ""),
               *params = meta_or(f, "params", ""), *grads = meta_or(f, "grads", "");
    if (at) {
        snprintf(opbuf, sizeof opbuf, "%s_%s", op, at + 1);
        op = opbuf;
    }
    int backward = atoi(meta_or(f, "backward", "1"));
    char names[MAXIN][64];
    nb_tvar h[MAXIN];
    const nb_st_tensor *ts[MAXIN];
    int nin = 0;
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", inputs);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok && nin < MAXIN; tok = strtok_r(NULL, ",", &save))
            snprintf(names[nin++], sizeof names[0], "%s", tok);
    }
    s = make_tape(dev, &t);
    int first[MAXIN]; /* index of the first input of the same name (a repeated name: one value) */
    for (int i = 0; i < nin; i++) {
        h[i] = NB_TVAR_NONE;
        ts[i] = NULL;
        first[i] = i;
        for (int j = i - 1; j >= 0; j--)
            if (!strcmp(names[j], names[i])) first[i] = j;
        if (!s && strcmp(names[i], "-")) s = nb_safetensors_find(f, names[i], &ts[i]);
    }
    /* parameters first (nb_tape_param only before any input), then the inputs */
    for (int pass = 0; pass < 2 && !s; pass++)
        for (int i = 0; i < nin && !s; i++) {
            if (!ts[i] || first[i] != i || in_list(params, names[i]) != (pass == 0)) continue;
            if (pass == 0)
                s = nb_tape_param(t, names[i], ts[i]->ndim, ts[i]->shape, &h[i]);
            else if (strcmp(op, "timestep_embedding")) /* its timesteps are a host array */
                s = nb_tape_input(t, ts[i]->ndim, ts[i]->shape, ts[i]->data, in_list(grads, names[i]),
                                  &h[i]);
        }
    for (int i = 0; i < nin; i++) h[i] = h[first[i]];
    int64_t np = 0;
    if (!s) s = nb_tape_params(t, &pbuf, &np); /* (device address on CUDA: only the count is used) */
    if (!s && np > 0) {
        float *hp = calloc((size_t)np, sizeof(float));
        for (int i = 0; i < nin && !s && hp; i++)
            if (strcmp(names[i], "-") && in_list(params, names[i])) {
                int64_t off, cnt;
                if (!(s = nb_tape_param_info(t, h[i], &off, &cnt)))
                    memcpy(hp + off, ts[i]->data, sizeof(float) * (size_t)cnt);
            }
        if (!hp) s = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        if (!s) s = nb_tape_write_params(t, hp, np);
        if (!s) s = nb_tape_zero_grad(t);
        free(hp);
    }
    nb_tvar y = NB_TVAR_NONE;
    if (!s) {
        if (!strcmp(op, "timestep_embedding"))
            s = ts[0] ? nb_tape_timestep_embedding(t, numel(ts[0]), ts[0]->data, atoi(meta_or(f, "dim", "0")),
                                                   strtof(meta_or(f, "max_period", "10000"), NULL), &y)
                      : nb_error(NB_ERR_NOT_FOUND, "timestep_embedding: no timesteps");
        else
            s = run_op(t, f, op, h, &y);
    }
    const nb_st_tensor *yr = NULL, *dyr = NULL;
    if (!s) s = nb_safetensors_find(f, "y", &yr);
    if (!s) {
        int nd;
        int64_t shape[NB_TAPE_MAX_DIMS];
        s = nb_tape_shape(t, y, &nd, shape);
        int same = !s && nd == yr->ndim;
        for (int i = 0; same && i < nd; i++) same = shape[i] == yr->shape[i];
        if (!s && !same) s = nb_error(NB_ERR_SHAPE, "output shape differs from torch's");
    }
    int64_t ny = yr ? numel(yr) : 0;
    if (!s && !(host = malloc(sizeof(float) * (size_t)(ny > 4096 ? ny : 4096))))
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    if (!s) s = nb_tape_read(t, y, host, ny);
    if (!s) compare(&c, "y", host, yr->data, ny, TOL_OP);
    if (!s && backward) {
        nb_tvar dyv, yf, l;
        if (!(s = nb_safetensors_find(f, "dy", &dyr))) {
            int64_t flat[2] = {1, ny};
            s = nb_tape_input(t, 2, flat, dyr->data, 0, &dyv);
            if (!s) s = nb_tape_reshape(t, y, 2, flat, &yf);
            if (!s) s = nb_tape_linear(t, yf, dyv, NB_TVAR_NONE, &l); /* sum(y * dy) */
            if (!s) s = nb_tape_backward(t, l);
        }
        for (int i = 0; i < nin && !s; i++) {
            if (!strcmp(names[i], "-") || !in_list(grads, names[i])) continue;
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= !strcmp(names[j], names[i]);
            if (dup) continue;
            char key[320];
            const nb_st_tensor *gr;
            snprintf(key, sizeof key, "grad.%s", names[i]);
            if ((s = nb_safetensors_find(f, key, &gr))) break;
            float *gh = malloc(sizeof(float) * (size_t)numel(gr));
            s = gh ? nb_tape_read_grad(t, h[i], gh, numel(gr)) : nb_error(NB_ERR_OUT_OF_MEMORY, "oom");
            if (!s) compare(&c, key, gh, gr->data, numel(gr), TOL_OP);
            free(gh);
        }
    }
    if (s) {
        printf("  [%s] %s (%s): FAILED: %s: %s\n", where, name, op, nb_status_name(s), nb_last_error());
        nb_test_failures_++;
    } else {
        printf("  [%s] %-28s %-18s worst rel %.2g (%s)%s\n", where, name, op, c.worst, c.worst_what,
               c.failed ? "  MISMATCH" : "");
    }
    free(host);
    nb_tape_free(t);
    nb_safetensors_free(f);
}

static void run_all_ops(nb_device *dev, const char *where) {
    const char *dir = data_dir();
    printf("  reference data: %s\n", dir);
    if (!file_exists(dir, "op_linear.safetensors")) { /* no data at all: one message, not one per case */
        nb_safetensors *f = NULL;
        NB_EXPECT_OK(open_ref(dir, "op_linear.safetensors", &f));
        return;
    }
    for (int i = 0; i < N_OP_CASES; i++) run_op_case(dev, where, dir, OP_CASES[i]);
}

/* ---- the tiny UNets -------------------------------------------------------------------------- */

typedef struct {
    nb_safetensors *f;
    nb_tape *t;
    nb_unet *u;
    const nb_unet_param_name *pn;
    int npn;
    int64_t np;
    float *host; /* [np] */
} unet_run;

static void unet_run_free(unet_run *r) {
    nb_unet_free(r->u);
    nb_tape_free(r->t);
    nb_safetensors_free(r->f);
    free(r->host);
    memset(r, 0, sizeof *r);
}

/* Gathers tensors "<prefix><name>" of every parameter into r->host (the tape's layout); checks
 * that the file has no other tensor with that prefix. */
static nb_status gather(unet_run *r, const char *prefix) {
    for (int i = 0; i < r->npn; i++) {
        char key[96];
        const nb_st_tensor *st;
        int64_t off, cnt;
        snprintf(key, sizeof key, "%s%s", prefix, r->pn[i].name);
        nb_status s = nb_safetensors_find(r->f, key, &st);
        if (s) return s;
        if ((s = nb_tape_param_info(r->t, r->pn[i].id, &off, &cnt))) return s;
        int same = st->ndim == r->pn[i].ndim;
        for (int d = 0; same && d < st->ndim; d++) same = st->shape[d] == r->pn[i].shape[d];
        if (!same || numel(st) != cnt)
            return nb_error(NB_ERR_SHAPE, "%s: torch's shape differs from nabla's parameter", key);
        memcpy(r->host + off, st->data, sizeof(float) * (size_t)cnt);
    }
    int n, extra = 0;
    nb_safetensors_count(r->f, &n);
    for (int i = 0; i < n; i++) {
        const nb_st_tensor *st;
        nb_safetensors_get(r->f, i, &st);
        if (!strncmp(st->name, prefix, strlen(prefix))) extra++;
    }
    if (extra != r->npn)
        return nb_error(NB_ERR_SHAPE, "torch has %d '%s*' tensors, nabla's UNet %d parameters", extra,
                        prefix, r->npn);
    return NB_OK;
}

/* Opens file, builds the UNet of its config on a tape on dev and loads "param.*". */
static nb_status unet_open(nb_device *dev, const char *dir, const char *file, unet_run *r) {
    memset(r, 0, sizeof *r);
    nb_status s = open_ref(dir, file, &r->f);
    if (s) return s;
    nb_unet_config cfg = nb_unet_config_reference();
    const char *keys[NB_UNET_META_N];
    char vals[NB_UNET_META_N][64];
    nb_unet_config_to_meta(&cfg, keys, vals);
    for (int i = 0; i < NB_UNET_META_N && !s; i++) {
        const char *v = meta_or(r->f, keys[i], NULL);
        s = v ? nb_unet_config_set(&cfg, keys[i], v)
              : nb_error(NB_ERR_NOT_FOUND, "%s: no '%s' in the metadata", file, keys[i]);
    }
    if (!s) s = make_tape(dev, &r->t);
    if (!s) s = nb_unet_create(&cfg, r->t, &r->u);
    if (!s) s = nb_unet_params(r->u, &r->pn, &r->npn);
    float *dummy;
    if (!s) s = nb_tape_params(r->t, &dummy, &r->np);
    if (!s && !(r->host = calloc((size_t)r->np, sizeof(float))))
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    if (!s) s = gather(r, "param.");
    if (!s) s = nb_tape_write_params(r->t, r->host, r->np);
    return s;
}

/* x -> UNet(x, t) -> mse(., noise) on r's tape; *loss_v the loss value. */
static nb_status unet_loss(unet_run *r, const nb_st_tensor *x, const float *ts, const nb_st_tensor *noise,
                           nb_tvar *out, nb_tvar *loss_v) {
    nb_tvar xv, nv;
    nb_status s = nb_tape_reset(r->t);
    if (!s) s = nb_tape_zero_grad(r->t);
    if (!s) s = nb_tape_input(r->t, x->ndim, x->shape, x->data, 0, &xv);
    if (!s) s = nb_unet_forward(r->u, xv, ts, out);
    if (!s) s = nb_tape_input(r->t, noise->ndim, noise->shape, noise->data, 0, &nv);
    if (!s) s = nb_tape_mse(r->t, *out, nv, loss_v);
    if (!s) s = nb_tape_backward(r->t, *loss_v);
    return s;
}

/* UNet loss and gradients; *grads_out (may be NULL) <- a malloc'd copy of the gradients. */
static void run_unet_grads(nb_device *dev, const char *where, const char *file, double tol,
                           float **grads_out) {
    unet_run r;
    cmp_ctx c = {where, file, 0, "-", 0};
    const nb_st_tensor *x, *tt, *noise, *outr, *lossr;
    nb_tvar out, lv;
    float loss = 0, *oh = NULL;
    nb_status s = unet_open(dev, data_dir(), file, &r);
    if (!s) s = nb_safetensors_find(r.f, "x", &x);
    if (!s) s = nb_safetensors_find(r.f, "t", &tt);
    if (!s) s = nb_safetensors_find(r.f, "noise", &noise);
    if (!s) s = nb_safetensors_find(r.f, "out", &outr);
    if (!s) s = nb_safetensors_find(r.f, "loss", &lossr);
    if (!s) s = unet_loss(&r, x, tt->data, noise, &out, &lv);
    if (!s && !(oh = malloc(sizeof(float) * (size_t)numel(outr))))
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    if (!s) s = nb_tape_read(r.t, out, oh, numel(outr));
    if (!s) compare(&c, "out", oh, outr->data, numel(outr), tol);
    if (!s) s = nb_tape_read(r.t, lv, &loss, 1);
    if (!s) compare(&c, "loss", &loss, lossr->data, 1, tol);
    if (!s) s = nb_tape_read_grads(r.t, r.host, r.np);
    float *ref = NULL;
    if (!s && !(ref = malloc(sizeof(float) * (size_t)r.np))) s = nb_error(NB_ERR_OUT_OF_MEMORY, "oom");
    if (!s) {
        float *got = r.host;
        r.host = ref;
        s = gather(&r, "grad.");
        r.host = got;
        for (int i = 0; i < r.npn && !s; i++) {
            int64_t off, cnt;
            char what[96];
            s = nb_tape_param_info(r.t, r.pn[i].id, &off, &cnt);
            snprintf(what, sizeof what, "grad.%s", r.pn[i].name);
            if (!s) compare(&c, what, got + off, ref + off, cnt, tol);
        }
    }
    free(ref);
    free(oh);
    if (s) {
        printf("  [%s] %s: FAILED: %s: %s\n", where, file, nb_status_name(s), nb_last_error());
        nb_test_failures_++;
    } else {
        printf("  [%s] %s: %d parameters (%lld floats), loss %.7g (torch %.7g), worst rel %.2g (%s)%s\n",
               where, file, r.npn, (long long)r.np, loss, lossr->data[0], c.worst, c.worst_what,
               c.failed ? "  MISMATCH" : "");
        if (grads_out) {
            *grads_out = r.host;
            r.host = NULL;
        }
    }
    unet_run_free(&r);
}

/* Ten AdamW steps. */
static void run_unet_adamw(nb_device *dev, const char *where) {
    const char *file = "unet_adamw10.safetensors";
    unet_run r;
    cmp_ctx c = {where, file, 0, "-", 0};
    nb_adam *opt = NULL;
    nb_tensor *tp = NULL, *tg = NULL;
    nb_ddpm *ddpm = NULL;
    float *pp, *gg, *xt = NULL;
    int64_t np;
    nb_status s = unet_open(dev, data_dir(), file, &r);
    int steps = 0;
    const nb_st_tensor *lossr = NULL;
    if (!s) {
        steps = atoi(meta_or(r.f, "steps", "0"));
        s = nb_safetensors_find(r.f, "losses", &lossr);
        if (!s && (steps < 1 || numel(lossr) != steps)) s = nb_error(NB_ERR_SHAPE, "bad 'steps' / 'losses'");
    }
    if (!s) {
        nb_adam_config ac = nb_adam_config_default();
        ac.lr = strtof(meta_or(r.f, "lr", "1e-4"), NULL);
        ac.beta1 = strtof(meta_or(r.f, "beta1", "0.9"), NULL);
        ac.beta2 = strtof(meta_or(r.f, "beta2", "0.999"), NULL);
        ac.eps = strtof(meta_or(r.f, "eps", "1e-8"), NULL);
        ac.weight_decay = strtof(meta_or(r.f, "weight_decay", "0"), NULL);
        ac.decoupled = 1;
        nb_device *td = nb_tape_device(r.t);
        s = nb_adam_create(td, r.np, &ac, &opt);
        if (!s) s = nb_tape_params(r.t, &pp, &np);
        if (!s) s = nb_tape_grads(r.t, &gg, &np);
        if (!s) s = nb_tensor_wrap(td, NB_F32, 1, &np, NULL, pp, &tp);
        if (!s) s = nb_tensor_wrap(td, NB_F32, 1, &np, NULL, gg, &tg);
    }
    /* the CPU run also checks nabla's DDPM schedule: x_t from x0, t, noise as nb_ddpm_train_step
     * computes it == torch's x_t (the model input both sides use) */
    if (!s && !dev) {
        nb_ddpm_config dc = nb_ddpm_config_default();
        dc.timesteps = atoi(meta_or(r.f, "timesteps", "1000"));
        dc.beta_start = strtof(meta_or(r.f, "beta_start", "1e-4"), NULL);
        dc.beta_end = strtof(meta_or(r.f, "beta_end", "0.02"), NULL);
        dc.ema_decay = 0;
        dc.grad_clip = 0;
        s = nb_ddpm_create(r.u, &dc, &ddpm);
    }
    float losses[64];
    for (int k = 0; k < steps && k < 64 && !s; k++) {
        char key[4][32];
        const nb_st_tensor *x0, *tt, *noise, *xtr;
        snprintf(key[0], 32, "step%d.x0", k);
        snprintf(key[1], 32, "step%d.t", k);
        snprintf(key[2], 32, "step%d.noise", k);
        snprintf(key[3], 32, "step%d.xt", k);
        if ((s = nb_safetensors_find(r.f, key[0], &x0)) || (s = nb_safetensors_find(r.f, key[1], &tt)) ||
            (s = nb_safetensors_find(r.f, key[2], &noise)) || (s = nb_safetensors_find(r.f, key[3], &xtr)))
            break;
        if (ddpm) {
            const double *acp;
            int64_t n = tt->shape[0], img = numel(x0) / n;
            free(xt);
            if (!(xt = malloc(sizeof(float) * (size_t)numel(x0)))) {
                s = nb_error(NB_ERR_OUT_OF_MEMORY, "oom");
                break;
            }
            nb_ddpm_alphas_cumprod(ddpm, &acp);
            for (int64_t i = 0; i < n; i++) {
                int ti = (int)tt->data[i];
                float a = (float)sqrt(acp[ti]), b = (float)sqrt(1.0 - acp[ti]);
                for (int64_t j = 0; j < img; j++)
                    xt[i * img + j] = a * x0->data[i * img + j] + b * noise->data[i * img + j];
            }
            double md = 0;
            for (int64_t j = 0; j < numel(x0); j++) md = fmax(md, fabs((double)xt[j] - xtr->data[j]));
            if (md > 1e-5) {
                printf("    [%s] step %d: x_t from nabla's DDPM schedule differs from torch's by %.3g"
                       "  MISMATCH\n",
                       where, k, md);
                c.failed++, nb_test_failures_++;
            }
        }
        nb_tvar out, lv;
        s = unet_loss(&r, xtr, tt->data, noise, &out, &lv);
        if (!s) s = nb_tape_read(r.t, lv, &losses[k], 1);
        if (!s) s = nb_adam_step(opt, tp, tg, 1);
        if (s) break;
        double rel = fabs((double)losses[k] - lossr->data[k]) / fabs(lossr->data[k]);
        int ok = rel <= TOL_LOSS;
        if (!ok || verbose())
            printf("    [%s] AdamW step %d: loss %.9g, torch %.9g, rel %.3g%s\n", where, k, losses[k],
                   lossr->data[k], rel, ok ? "" : "  MISMATCH");
        if (rel > c.worst) c.worst = rel, snprintf(c.worst_what, sizeof c.worst_what, "loss");
        if (!ok) c.failed++, nb_test_failures_++;
    }
    /* final weights, elementwise (but the attention key biases, see below) */
    double maxd = 0, maxd_kb = 0;
    int64_t far = 0, n_kb = 0;
    float lr = r.f ? strtof(meta_or(r.f, "lr", "1e-4"), NULL) : 1e-4f;
    if (!s) s = nb_tape_read_params(r.t, r.host, r.np);
    float *ref = NULL;
    if (!s && !(ref = malloc(sizeof(float) * (size_t)r.np))) s = nb_error(NB_ERR_OUT_OF_MEMORY, "oom");
    if (!s) {
        float *got = r.host;
        r.host = ref;
        s = gather(&r, "final.");
        r.host = got;
        nb_unet_config uc;
        if (!s) s = nb_unet_get_config(r.u, &uc);
        int hc = uc.num_head_channels;
        for (int k = 0; k < r.npn && !s; k++) {
            int64_t off, cnt;
            s = nb_tape_param_info(r.t, r.pn[k].id, &off, &cnt);
            size_t nl = strlen(r.pn[k].name);
            int qkv_bias = nl > 9 && !strcmp(r.pn[k].name + nl - 9, ".qkv.bias");
            for (int64_t j = 0; j < cnt && !s; j++) {
                double d = fabs((double)got[off + j] - ref[off + j]);
                /* the key bias of an attention block ([head][q,k,v][d] order) adds the same value
                 * to every logit of a row: softmax ignores it, its exact gradient is 0, and Adam's
                 * m / sqrt(v) turns either side's rounding noise into steps of about lr */
                if (qkv_bias && j % (3 * hc) >= hc && j % (3 * hc) < 2 * hc) {
                    maxd_kb = fmax(maxd_kb, d);
                    n_kb++;
                    continue;
                }
                maxd = fmax(maxd, d);
                if (d > 0.01 * lr && far++ < 8 && verbose())
                    printf("    [%s] final %s[%lld]: nabla %.9g, torch %.9g\n", where, r.pn[k].name,
                           (long long)j, got[off + j], ref[off + j]);
            }
        }
        if (!s && !(maxd <= TOL_FINAL * lr)) {
            printf("    [%s] final weights: max |nabla - torch| %.3g > %g lr (%lld differ by > 0.01 lr)"
                   "  MISMATCH\n",
                   where, maxd, TOL_FINAL, (long long)far);
            c.failed++, nb_test_failures_++;
        }
    }
    free(ref);
    if (s) {
        printf("  [%s] %s: FAILED: %s: %s\n", where, file, nb_status_name(s), nb_last_error());
        nb_test_failures_++;
    } else {
        printf("  [%s] %s: %d AdamW steps, losses", where, file, steps);
        for (int k = 0; k < steps; k++) printf(" %.6f", losses[k]);
        printf("\n  [%s]     worst loss rel %.2g; final weights: max |nabla - torch| %.3g (lr %g), "
               "%lld of %lld > 0.01 lr; attention key biases (zero gradient, not compared): %lld, "
               "max diff %.3g%s\n",
               where, c.worst, maxd, lr, (long long)far, (long long)(r.np - n_kb), (long long)n_kb,
               maxd_kb, c.failed ? "  MISMATCH" : "");
    }
    free(xt);
    nb_ddpm_free(ddpm);
    nb_tensor_free(tp);
    nb_tensor_free(tg);
    nb_adam_destroy(opt);
    unet_run_free(&r);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static nb_device *open_cuda(void) {
    nb_device *dev = NULL;
    if (nb_cuda_device_count() == 0 || nb_device_open("cuda", &dev) != NB_OK) return NULL;
    return dev;
}

static void test_ops_cpu(void) { run_all_ops(NULL, "cpu"); }

static void test_unet_grads_cpu(void) {
    run_unet_grads(NULL, "cpu", "unet_grads_a.safetensors", TOL_UNET, NULL);
    run_unet_grads(NULL, "cpu", "unet_grads_b.safetensors", TOL_UNET, NULL);
}

static void test_unet_adamw_cpu(void) { run_unet_adamw(NULL, "cpu"); }

static void test_ops_cuda(void) {
    nb_device *dev = open_cuda();
    if (!dev) NB_SKIP("no CUDA device");
    run_all_ops(dev, "cuda");
    nb_device_close(dev);
}

/* Against torch, and CUDA against nabla's CPU run (the two must agree). */
static void test_unet_grads_cuda(void) {
    nb_device *dev = open_cuda();
    if (!dev) NB_SKIP("no CUDA device");
    const char *files[2] = {"unet_grads_a.safetensors", "unet_grads_b.safetensors"};
    for (int i = 0; i < 2; i++) {
        float *gc = NULL, *gg = NULL;
        run_unet_grads(NULL, "cpu", files[i], TOL_UNET, &gc);
        run_unet_grads(dev, "cuda", files[i], TOL_UNET, &gg);
        if (gc && gg) {
            unet_run r;
            if (unet_open(NULL, data_dir(), files[i], &r) == NB_OK) {
                cmp_ctx c = {"cuda-vs-cpu", files[i], 0, "-", 0};
                for (int k = 0; k < r.npn; k++) {
                    int64_t off, cnt;
                    char what[96];
                    nb_tape_param_info(r.t, r.pn[k].id, &off, &cnt);
                    snprintf(what, sizeof what, "grad.%s", r.pn[k].name);
                    compare(&c, what, gg + off, gc + off, cnt, TOL_UNET);
                }
                printf("  [cuda-vs-cpu] %s: worst rel %.2g (%s)%s\n", files[i], c.worst, c.worst_what,
                       c.failed ? "  MISMATCH" : "");
            }
            unet_run_free(&r);
        }
        free(gc);
        free(gg);
    }
    nb_device_close(dev);
}

/* TF32 and BF16 on CUDA: the same gradients within loose bounds (sanity, and the numbers). */
static void test_unet_grads_cuda_lowp(void) {
    nb_device *dev = open_cuda();
    if (!dev) NB_SKIP("no CUDA device");
    const char *files[2] = {"unet_grads_a.safetensors", "unet_grads_b.safetensors"};
    for (int i = 0; i < 2; i++) {
        g_precision = NB_TAPE_TF32;
        run_unet_grads(dev, "cuda-tf32", files[i], TOL_UNET_TF32, NULL);
        g_precision = NB_TAPE_BF16;
        run_unet_grads(dev, "cuda-bf16", files[i], TOL_UNET_BF16, NULL);
    }
    g_precision = NB_TAPE_FP32;
    nb_device_close(dev);
}

static void test_unet_adamw_cuda(void) {
    nb_device *dev = open_cuda();
    if (!dev) NB_SKIP("no CUDA device");
    run_unet_adamw(dev, "cuda");
    nb_device_close(dev);
}

/* A missing data file names itself and the script that writes it. */
static void test_missing_data(void) {
    nb_safetensors *f = NULL;
    NB_EXPECT_ERR(open_ref("/nonexistent/tape_ref", "op_linear.safetensors", &f), NB_ERR_IO,
                  "/nonexistent/tape_ref/op_linear.safetensors");
    NB_EXPECT(strstr(nb_last_error(), SCRIPT) != NULL);
    NB_EXPECT(f == NULL);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_missing_data, test_ops_cpu, test_unet_grads_cpu, test_unet_adamw_cpu,
                 test_ops_cuda, test_unet_grads_cuda, test_unet_grads_cuda_lowp, test_unet_adamw_cuda);
}
