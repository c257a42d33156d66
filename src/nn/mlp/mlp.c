/* Fused MLP: configuration, the flat parameter buffer, argument checks, dispatch, and the CPU
 * reference implementation (the oracle the CUDA kernels are tested against).
 *
 * The reference mirrors the GPU's rounding: weights, layer inputs and back-propagated gradients
 * are rounded to the compute dtype, products are summed in f32 (in a different order than the
 * tensor cores, hence tolerances in the tests), activations are applied in f32 to the rounded
 * pre-activation, and the hidden input of the next layer is the rounded activation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "core/util.h"
#include "nabla/alloc.h"
#include "nn/mlp/mlp_internal.h"

static const char *const act_names[NB_ACT_COUNT] = {"none", "relu", "leaky_relu",
                                                     "silu", "sigmoid", "tanh"};

const char *nb_activation_name(nb_activation a) {
    return ((int)a >= 0 && a < NB_ACT_COUNT) ? act_names[a] : "invalid";
}

int nb_activation_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < NB_ACT_COUNT; i++)
        if (!strcmp(name, act_names[i])) return i;
    return -1;
}

float nb_mlp_act(nb_activation a, float x) {
    switch (a) {
    case NB_ACT_RELU: return x > 0.f ? x : 0.f;
    case NB_ACT_LEAKY_RELU: return x > 0.f ? x : 0.01f * x;
    case NB_ACT_SILU: return x / (1.f + expf(-x));
    case NB_ACT_SIGMOID: return 1.f / (1.f + expf(-x));
    case NB_ACT_TANH: return tanhf(x);
    default: return x;
    }
}

float nb_mlp_dact(nb_activation a, float z) {
    switch (a) {
    case NB_ACT_RELU: return z > 0.f ? 1.f : 0.f;
    case NB_ACT_LEAKY_RELU: return z > 0.f ? 1.f : 0.01f;
    case NB_ACT_SILU: {
        float s = 1.f / (1.f + expf(-z));
        return s * (1.f + z * (1.f - s));
    }
    case NB_ACT_SIGMOID: {
        float s = 1.f / (1.f + expf(-z));
        return s * (1.f - s);
    }
    case NB_ACT_TANH: {
        float t = tanhf(z);
        return 1.f - t * t;
    }
    default: return 1.f;
    }
}

nb_mlp_config nb_mlp_config_default(int n_in, int n_out, int width, int n_hidden_layers) {
    nb_mlp_config c;
    memset(&c, 0, sizeof c);
    c.n_in = n_in;
    c.n_out = n_out;
    c.width = width;
    c.n_hidden_layers = n_hidden_layers;
    c.act = NB_ACT_RELU;
    c.out_act = NB_ACT_NONE;
    c.bias = 0;
    c.compute = NB_F16;
    c.loss_scale = 0.f;
    return c;
}

static nb_status check_config(const nb_mlp_config *c) {
    if (c->width != 16 && c->width != 32 && c->width != 64 && c->width != 128)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "nb_mlp_create: width = %d is not supported (16, 32, 64 or 128)", c->width);
    if (c->n_in < 1 || c->n_in > (1 << 16))
        return nb_error(NB_ERR_INVALID_ARG, "nb_mlp_create: n_in = %d must be in [1, 65536]",
                        c->n_in);
    if (c->n_out < 1 || c->n_out > (1 << 16))
        return nb_error(NB_ERR_INVALID_ARG, "nb_mlp_create: n_out = %d must be in [1, 65536]",
                        c->n_out);
    if (c->n_hidden_layers < 1 || c->n_hidden_layers > 1024)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_mlp_create: n_hidden_layers = %d must be in [1, 1024]",
                        c->n_hidden_layers);
    if ((int)c->act < 0 || c->act >= NB_ACT_COUNT)
        return nb_error(NB_ERR_INVALID_ARG, "nb_mlp_create: act = %d is not an nb_activation",
                        (int)c->act);
    if ((int)c->out_act < 0 || c->out_act >= NB_ACT_COUNT)
        return nb_error(NB_ERR_INVALID_ARG, "nb_mlp_create: out_act = %d is not an nb_activation",
                        (int)c->out_act);
    if (c->compute != NB_F16 && c->compute != NB_BF16)
        return nb_error(NB_ERR_DTYPE, "nb_mlp_create: compute dtype %s is not supported (f16 or bf16)",
                        nb_dtype_name(c->compute));
    if (!(c->loss_scale >= 0.f) || isinf(c->loss_scale))
        return nb_error(NB_ERR_INVALID_ARG, "nb_mlp_create: loss_scale = %g must be finite and >= 0",
                        (double)c->loss_scale);
    return NB_OK;
}

nb_status nb_mlp_create(nb_device *dev, const nb_mlp_config *cfg, nb_mlp **out) {
    NB_CHECK_ARG(dev);
    NB_CHECK_ARG(cfg);
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_TRY(check_config(cfg));
    nb_mlp *m = nb_calloc(sizeof *m, 16);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_mlp_create: out of host memory");
    m->cfg = *cfg;
    if (m->cfg.loss_scale == 0.f) m->cfg.loss_scale = cfg->compute == NB_F16 ? 128.f : 1.f;
    m->n_layers = cfg->n_hidden_layers + 1;
    int L = m->n_layers;
    m->rows = nb_alloc(sizeof(int) * (size_t)L, 16);
    m->cols = nb_alloc(sizeof(int) * (size_t)L, 16);
    m->w_off = nb_alloc(sizeof(int64_t) * (size_t)L, 16);
    m->b_off = nb_alloc(sizeof(int64_t) * (size_t)L, 16);
    m->saved_batch = -1;
    if (!m->rows || !m->cols || !m->w_off || !m->b_off) {
        nb_mlp_free(m);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_mlp_create: out of host memory");
    }
    int64_t off = 0;
    for (int l = 0; l < L; l++) {
        m->rows[l] = l == L - 1 ? cfg->n_out : cfg->width;
        m->cols[l] = l == 0 ? cfg->n_in : cfg->width;
        m->w_off[l] = off;
        off += (int64_t)m->rows[l] * m->cols[l];
        m->b_off[l] = cfg->bias ? off : -1;
        if (cfg->bias) off += m->rows[l];
    }
    m->n_params = off;
    nb_device_open(nb_device_name(dev), &m->dev); /* our own reference */
    if (!m->dev) {
        nb_mlp_free(m);
        return nb_error(NB_ERR_NO_DEVICE, "nb_mlp_create: cannot reopen device %s",
                        nb_device_name(dev));
    }
    int64_t shape[1] = {off};
    nb_status s = nb_tensor_zeros(dev, NB_F32, 1, shape, &m->params);
    if (s == NB_OK) s = nb_tensor_zeros(dev, NB_F32, 1, shape, &m->grads);
    if (s != NB_OK) {
        nb_mlp_free(m);
        return s;
    }
    *out = m;
    return NB_OK;
}

void nb_mlp_free(nb_mlp *m) {
    if (!m) return;
    nb_mlp_cuda_free(m);
    nb_tensor_free(m->params);
    nb_tensor_free(m->grads);
    int L = m->n_layers;
    nb_free(m->rows, sizeof(int) * (size_t)L);
    nb_free(m->cols, sizeof(int) * (size_t)L);
    nb_free(m->w_off, sizeof(int64_t) * (size_t)L);
    nb_free(m->b_off, sizeof(int64_t) * (size_t)L);
    nb_free(m->cpu_h, m->cpu_cap * sizeof(float));
    nb_free(m->cpu_z, m->cpu_cap * sizeof(float));
    if (m->dev) nb_device_close(m->dev);
    nb_free(m, sizeof *m);
}

const nb_mlp_config *nb_mlp_get_config(const nb_mlp *m) { return m ? &m->cfg : NULL; }
nb_device *nb_mlp_device(const nb_mlp *m) { return m ? m->dev : NULL; }
int64_t nb_mlp_n_params(const nb_mlp *m) { return m ? m->n_params : 0; }
int nb_mlp_n_layers(const nb_mlp *m) { return m ? m->n_layers : 0; }
nb_tensor *nb_mlp_params(nb_mlp *m) { return m ? m->params : NULL; }
nb_tensor *nb_mlp_grads(nb_mlp *m) { return m ? m->grads : NULL; }

size_t nb_mlp_workspace_bytes(const nb_mlp *m) {
    if (!m) return 0;
    return 2 * m->cpu_cap * sizeof(float) + nb_mlp_cuda_workspace_bytes(m);
}

nb_status nb_mlp_set_profile(nb_mlp *m, int on) {
    NB_CHECK_ARG(m);
    m->profile = on != 0;
    nb_mlp_cuda_set_profile(m);
    return NB_OK;
}

nb_status nb_mlp_layer_info(const nb_mlp *m, int layer, int64_t *w_off, int64_t *b_off, int *rows,
                            int *cols) {
    NB_CHECK_ARG(m);
    if (layer < 0 || layer >= m->n_layers)
        return nb_error(NB_ERR_INVALID_ARG, "nb_mlp_layer_info: layer %d out of range [0, %d)",
                        layer, m->n_layers);
    if (w_off) *w_off = m->w_off[layer];
    if (b_off) *b_off = m->b_off[layer];
    if (rows) *rows = m->rows[layer];
    if (cols) *cols = m->cols[layer];
    return NB_OK;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

nb_status nb_mlp_init_params(nb_mlp *m, uint64_t seed) {
    NB_CHECK_ARG(m);
    size_t bytes = (size_t)m->n_params * sizeof(float);
    float *h = nb_alloc(bytes, 64);
    if (!h) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_mlp_init_params: out of host memory");
    uint64_t st = seed;
    for (int l = 0; l < m->n_layers; l++) {
        double s = sqrt(6.0 / (double)(m->rows[l] + m->cols[l]));
        int64_t n = (int64_t)m->rows[l] * m->cols[l];
        for (int64_t i = 0; i < n; i++) {
            double u = (double)(splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
            h[m->w_off[l] + i] = (float)((2.0 * u - 1.0) * s);
        }
        if (m->b_off[l] >= 0) memset(h + m->b_off[l], 0, sizeof(float) * (size_t)m->rows[l]);
    }
    nb_status st2 = nb_tensor_from_host_into(m->params, h, bytes);
    nb_free(h, bytes);
    return st2;
}

/* ---- argument checks ------------------------------------------------------------------ */

static nb_status check_tensor(const nb_mlp *m, const char *fn, const char *name,
                              const nb_tensor *t, int64_t batch, int feat, int allow_f16) {
    char buf[128];
    if (nb_tensor_device(t) != m->dev)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s is on %s but the mlp is on %s", fn, name,
                        nb_device_name(nb_tensor_device(t)), nb_device_name(m->dev));
    nb_dtype d = nb_tensor_dtype(t);
    if (d != NB_F32 && !(allow_f16 && d == NB_F16))
        return nb_error(NB_ERR_DTYPE, "%s: %s has dtype %s, expected f32%s", fn, name,
                        nb_dtype_name(d), allow_f16 ? " or f16" : "");
    const int64_t *sh = nb_tensor_shape(t);
    if (nb_tensor_ndim(t) != 2 || sh[1] != feat || (batch >= 0 && sh[0] != batch))
        return nb_error(NB_ERR_SHAPE, "%s: %s has shape %s, expected [%s, %d]", fn, name,
                        nb_shape_str(nb_tensor_ndim(t), sh, buf, sizeof buf),
                        batch >= 0 ? "B" : "B", feat);
    if (!nb_tensor_is_contiguous(t))
        return nb_error(NB_ERR_LAYOUT, "%s: %s must be contiguous", fn, name);
    return NB_OK;
}

nb_status nb_mlp_forward(nb_mlp *m, const nb_tensor *x, nb_tensor *y, int training) {
    NB_CHECK_ARG(m);
    NB_CHECK_ARG(x);
    NB_CHECK_ARG(y);
    const char *fn = training ? "nb_mlp_forward" : "nb_mlp_inference";
    NB_TRY(check_tensor(m, fn, "x", x, -1, m->cfg.n_in, 1));
    int64_t B = nb_tensor_shape(x)[0];
    if (B < 1) return nb_error(NB_ERR_SHAPE, "%s: batch size is 0", fn);
    NB_TRY(check_tensor(m, fn, "y", y, B, m->cfg.n_out, 0));
    if (nb_tensor_shape(y)[0] != B)
        return nb_error(NB_ERR_SHAPE, "%s: y has %lld rows but x has %lld", fn,
                        (long long)nb_tensor_shape(y)[0], (long long)B);
    if (training) m->saved_batch = -1;
    nb_status s = nb_device_get_kind(m->dev) == NB_DEVICE_CUDA
                      ? nb_mlp_cuda_forward(m, x, y, training)
                      : nb_mlp_cpu_forward(m, x, y, training);
    if (s == NB_OK && training) m->saved_batch = B;
    return s;
}

nb_status nb_mlp_inference(nb_mlp *m, const nb_tensor *x, nb_tensor *y) {
    return nb_mlp_forward(m, x, y, 0);
}

nb_status nb_mlp_backward(nb_mlp *m, const nb_tensor *dy, nb_tensor *dx) {
    NB_CHECK_ARG(m);
    NB_CHECK_ARG(dy);
    const char *fn = "nb_mlp_backward";
    if (m->saved_batch < 0)
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: no saved activations: call nb_mlp_forward(..., training = 1) first", fn);
    int64_t B = m->saved_batch;
    if (nb_tensor_ndim(dy) == 2 && nb_tensor_shape(dy)[0] != B)
        return nb_error(NB_ERR_SHAPE,
                        "%s: dy has %lld rows but the last training forward had batch %lld", fn,
                        (long long)nb_tensor_shape(dy)[0], (long long)B);
    NB_TRY(check_tensor(m, fn, "dy", dy, B, m->cfg.n_out, 0));
    if (dx) NB_TRY(check_tensor(m, fn, "dx", dx, B, m->cfg.n_in, 0));
    return nb_device_get_kind(m->dev) == NB_DEVICE_CUDA ? nb_mlp_cuda_backward(m, dy, dx)
                                                        : nb_mlp_cpu_backward(m, dy, dx);
}

/* ---- CPU reference ------------------------------------------------------------------------ */

int64_t nb_mlp_cpu_h_off(const nb_mlp *m, int l, int64_t B) {
    int64_t o = 0;
    for (int i = 0; i < l; i++) o += B * m->cols[i];
    return o;
}

int64_t nb_mlp_cpu_z_off(const nb_mlp *m, int l, int64_t B) {
    int64_t o = 0;
    for (int i = 0; i < l; i++) o += B * m->rows[i];
    return o;
}

static float round_c(nb_dtype c, float v) {
    return c == NB_BF16 ? nb_bf16_to_f32(nb_f32_to_bf16(v)) : nb_f16_to_f32(nb_f32_to_f16(v));
}

typedef struct cpu_ctx {
    const nb_mlp *m;
    int64_t B;
    const float *wr;     /* [n_params] weights rounded to the compute dtype (biases exact) */
    const void *x;       /* forward input */
    nb_dtype x_dtype;
    float *y;            /* forward output */
    float *h, *z;        /* saved state (or per-row scratch in inference) */
    const float *dy;     /* backward */
    float *dx;
    float *delta;        /* [n_layers][B][rows_l] rounded, scaled dL/dz */
    float *grads;
    int layer;           /* dW pass: layer being reduced */
} cpu_ctx;

static void cpu_fwd_rows(void *vctx, int64_t begin, int64_t end) {
    cpu_ctx *c = vctx;
    const nb_mlp *m = c->m;
    nb_dtype cd = m->cfg.compute;
    int L = m->n_layers;
    for (int64_t b = begin; b < end; b++) {
        for (int l = 0; l < L; l++) {
            float *h = c->h + nb_mlp_cpu_h_off(m, l, c->B) + b * m->cols[l];
            float *z = c->z + nb_mlp_cpu_z_off(m, l, c->B) + b * m->rows[l];
            if (l == 0) {
                for (int i = 0; i < m->cols[0]; i++) {
                    int64_t k = b * m->cols[0] + i;
                    float v = c->x_dtype == NB_F16 ? nb_f16_to_f32(((const uint16_t *)c->x)[k])
                                                   : ((const float *)c->x)[k];
                    h[i] = round_c(cd, v);
                }
            } else {
                const float *zp = c->z + nb_mlp_cpu_z_off(m, l - 1, c->B) + b * m->rows[l - 1];
                for (int i = 0; i < m->cols[l]; i++) h[i] = round_c(cd, nb_mlp_act(m->cfg.act, zp[i]));
            }
            const float *w = c->wr + m->w_off[l];
            for (int o = 0; o < m->rows[l]; o++) {
                float s = m->b_off[l] >= 0 ? c->wr[m->b_off[l] + o] : 0.f;
                for (int i = 0; i < m->cols[l]; i++) s += w[(int64_t)o * m->cols[l] + i] * h[i];
                if (l == L - 1) {
                    c->y[b * m->rows[l] + o] = nb_mlp_act(m->cfg.out_act, s);
                    z[o] = round_c(cd, s);
                } else {
                    z[o] = round_c(cd, s);
                }
            }
        }
    }
}

static nb_status ensure_cpu_state(nb_mlp *m, int64_t B) {
    int64_t nh = nb_mlp_cpu_h_off(m, m->n_layers, B), nz = nb_mlp_cpu_z_off(m, m->n_layers, B);
    size_t need = (size_t)NB_MAX(nh, nz);
    if (need <= m->cpu_cap) return NB_OK;
    nb_free(m->cpu_h, m->cpu_cap * sizeof(float));
    nb_free(m->cpu_z, m->cpu_cap * sizeof(float));
    m->cpu_h = nb_alloc(need * sizeof(float), 64);
    m->cpu_z = nb_alloc(need * sizeof(float), 64);
    m->cpu_cap = need;
    if (!m->cpu_h || !m->cpu_z) {
        nb_free(m->cpu_h, need * sizeof(float));
        nb_free(m->cpu_z, need * sizeof(float));
        m->cpu_h = m->cpu_z = NULL;
        m->cpu_cap = 0;
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_mlp: out of host memory for %lld saved rows",
                        (long long)B);
    }
    return NB_OK;
}

static float *rounded_weights(const nb_mlp *m) {
    const float *p = nb_tensor_data(m->params);
    float *wr = nb_alloc((size_t)m->n_params * sizeof(float), 64);
    if (!wr) return NULL;
    for (int l = 0; l < m->n_layers; l++) {
        int64_t n = (int64_t)m->rows[l] * m->cols[l];
        for (int64_t i = 0; i < n; i++) wr[m->w_off[l] + i] = round_c(m->cfg.compute, p[m->w_off[l] + i]);
        if (m->b_off[l] >= 0)
            memcpy(wr + m->b_off[l], p + m->b_off[l], sizeof(float) * (size_t)m->rows[l]);
    }
    return wr;
}

static void run_rows(int64_t n, nb_range_fn fn, void *ctx) {
    nb_threadpool *pool = nb_threadpool_global();
    if (pool) nb_threadpool_run(pool, n, 16, fn, ctx);
    else fn(ctx, 0, n);
}

nb_status nb_mlp_cpu_forward(nb_mlp *m, const nb_tensor *x, nb_tensor *y, int training) {
    int64_t B = nb_tensor_shape(x)[0];
    /* Training saves into the mlp's workspace; inference uses private scratch so that it does
     * not clobber what a pending backward needs. */
    float *h = NULL, *z = NULL;
    size_t scratch = 0;
    if (training) {
        NB_TRY(ensure_cpu_state(m, B));
        h = m->cpu_h;
        z = m->cpu_z;
    } else {
        scratch = (size_t)NB_MAX(nb_mlp_cpu_h_off(m, m->n_layers, B),
                                 nb_mlp_cpu_z_off(m, m->n_layers, B)) * sizeof(float);
        h = nb_alloc(scratch, 64);
        z = nb_alloc(scratch, 64);
    }
    float *wr = rounded_weights(m);
    nb_status s = NB_OK;
    if (!wr || !h || !z) {
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_mlp_forward: out of host memory");
    } else {
        cpu_ctx c = {.m = m, .B = B, .wr = wr, .x = nb_tensor_data(x),
                     .x_dtype = nb_tensor_dtype(x), .y = nb_tensor_data(y), .h = h, .z = z};
        run_rows(B, cpu_fwd_rows, &c);
    }
    if (!training) {
        nb_free(h, scratch);
        nb_free(z, scratch);
    }
    nb_free(wr, (size_t)m->n_params * sizeof(float));
    return s;
}

static void cpu_bwd_rows(void *vctx, int64_t begin, int64_t end) {
    cpu_ctx *c = vctx;
    const nb_mlp *m = c->m;
    nb_dtype cd = m->cfg.compute;
    int L = m->n_layers;
    float S = m->cfg.loss_scale;
    for (int64_t b = begin; b < end; b++) {
        int lo = L - 1;
        float *d = c->delta + nb_mlp_cpu_z_off(m, lo, c->B) + b * m->rows[lo];
        const float *z = c->z + nb_mlp_cpu_z_off(m, lo, c->B) + b * m->rows[lo];
        for (int o = 0; o < m->rows[lo]; o++)
            d[o] = round_c(cd, c->dy[b * m->rows[lo] + o] * S * nb_mlp_dact(m->cfg.out_act, z[o]));
        for (int l = L - 1; l >= 0; l--) {
            const float *dl = c->delta + nb_mlp_cpu_z_off(m, l, c->B) + b * m->rows[l];
            const float *w = c->wr + m->w_off[l];
            if (l == 0 && !c->dx) break;
            float *dn = l > 0 ? c->delta + nb_mlp_cpu_z_off(m, l - 1, c->B) + b * m->rows[l - 1] : NULL;
            const float *zp = l > 0 ? c->z + nb_mlp_cpu_z_off(m, l - 1, c->B) + b * m->rows[l - 1] : NULL;
            for (int i = 0; i < m->cols[l]; i++) {
                float s = 0.f;
                for (int o = 0; o < m->rows[l]; o++) s += dl[o] * w[(int64_t)o * m->cols[l] + i];
                if (l > 0) dn[i] = round_c(cd, s * nb_mlp_dact(m->cfg.act, zp[i]));
                else c->dx[b * m->cols[0] + i] = s / S;
            }
        }
    }
}

/* dW_l[o][i] = sum_b delta_l[b][o] h_l[b][i] / S; one task per output row o of every layer. */
static void cpu_dw_rows(void *vctx, int64_t begin, int64_t end) {
    cpu_ctx *c = vctx;
    const nb_mlp *m = c->m;
    float inv = 1.f / m->cfg.loss_scale;
    int l = c->layer;
    const float *dl = c->delta + nb_mlp_cpu_z_off(m, l, c->B);
    const float *h = c->h + nb_mlp_cpu_h_off(m, l, c->B);
    int R = m->rows[l], C = m->cols[l];
    for (int64_t o = begin; o < end; o++) {
        float *g = c->grads + m->w_off[l] + o * C;
        for (int i = 0; i < C; i++) g[i] = 0.f;
        float bs = 0.f;
        for (int64_t b = 0; b < c->B; b++) {
            float d = dl[b * R + o];
            bs += d;
            if (d == 0.f) continue;
            const float *hb = h + b * C;
            for (int i = 0; i < C; i++) g[i] += d * hb[i];
        }
        for (int i = 0; i < C; i++) g[i] *= inv;
        if (m->b_off[l] >= 0) c->grads[m->b_off[l] + o] = bs * inv;
    }
}

nb_status nb_mlp_cpu_backward(nb_mlp *m, const nb_tensor *dy, nb_tensor *dx) {
    int64_t B = m->saved_batch;
    size_t nd = (size_t)nb_mlp_cpu_z_off(m, m->n_layers, B);
    float *delta = nb_alloc(nd * sizeof(float), 64);
    float *wr = rounded_weights(m);
    if (!delta || !wr) {
        nb_free(delta, nd * sizeof(float));
        nb_free(wr, (size_t)m->n_params * sizeof(float));
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_mlp_backward: out of host memory");
    }
    cpu_ctx c = {.m = m, .B = B, .wr = wr, .h = m->cpu_h, .z = m->cpu_z,
                 .dy = nb_tensor_data(dy), .dx = dx ? nb_tensor_data(dx) : NULL,
                 .delta = delta, .grads = nb_tensor_data(m->grads)};
    run_rows(B, cpu_bwd_rows, &c);
    for (int l = 0; l < m->n_layers; l++) {
        c.layer = l;
        nb_threadpool *pool = nb_threadpool_global();
        if (pool) nb_threadpool_run(pool, m->rows[l], 1, cpu_dw_rows, &c);
        else cpu_dw_rows(&c, 0, m->rows[l]);
    }
    nb_free(delta, nd * sizeof(float));
    nb_free(wr, (size_t)m->n_params * sizeof(float));
    return NB_OK;
}
