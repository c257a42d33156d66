/* Encodings: configuration, level layout, argument checks, and the CPU reference implementation
 * (plain C on the thread pool). The CUDA kernels are in encoding_cuda.c. Conventions (vertex
 * placement, hashing, storage order, accumulate vs overwrite) are documented in nn_encoding.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_optim.h"
#include "nn/encoding/encoding_internal.h"
#include "nn/mlp/mlp_internal.h"

/* ---- configuration ----------------------------------------------------------------------- */

nb_encoding_config nb_dense_grid_config(int n_dims, int n_features, int res_x, int res_y, int res_z) {
    nb_encoding_config c;
    memset(&c, 0, sizeof c);
    c.kind = NB_ENCODING_DENSE_GRID;
    c.n_dims = n_dims;
    c.n_features = n_features;
    c.resolution[0] = res_x;
    c.resolution[1] = res_y;
    c.resolution[2] = res_z;
    return c;
}

nb_encoding_config nb_hash_grid_config(int n_dims, int n_levels, int n_features, int log2_table_size,
                                       int base_resolution, float per_level_scale) {
    nb_encoding_config c;
    memset(&c, 0, sizeof c);
    c.kind = NB_ENCODING_HASH_GRID;
    c.n_dims = n_dims;
    c.n_levels = n_levels;
    c.n_features = n_features;
    c.log2_table_size = log2_table_size;
    c.base_resolution = base_resolution;
    c.per_level_scale = per_level_scale;
    return c;
}

nb_encoding_config nb_frequency_config(int n_dims, int n_frequencies) {
    nb_encoding_config c;
    memset(&c, 0, sizeof c);
    c.kind = NB_ENCODING_FREQUENCY;
    c.n_dims = n_dims;
    c.n_frequencies = n_frequencies;
    return c;
}

#define NB_GRID_MAX_PARAMS ((int64_t)1 << 31) /* floats; keeps 32-bit indices in the kernels */

static nb_status nb_enc_layout(nb_encoding *e) {
    const nb_encoding_config *c = &e->cfg;
    const char *fn = "nb_encoding_create";
    if (c->kind == NB_ENCODING_FREQUENCY) {
        if (c->n_dims < 1 || c->n_dims > 8)
            return nb_error(NB_ERR_INVALID_ARG, "%s: frequency encoding n_dims = %d (want 1..8)", fn, c->n_dims);
        if (c->n_frequencies < 1 || c->n_frequencies > 24)
            return nb_error(NB_ERR_INVALID_ARG, "%s: n_frequencies = %d (want 1..24)", fn, c->n_frequencies);
        e->n_levels = 0;
        e->n_out = c->n_dims * c->n_frequencies * 2;
        e->n_params = 0;
        return NB_OK;
    }
    if (c->kind != NB_ENCODING_DENSE_GRID && c->kind != NB_ENCODING_HASH_GRID)
        return nb_error(NB_ERR_INVALID_ARG, "%s: unknown encoding kind %d", fn, (int)c->kind);
    if (c->n_dims != 2 && c->n_dims != 3)
        return nb_error(NB_ERR_INVALID_ARG, "%s: grid n_dims = %d (want 2 or 3)", fn, c->n_dims);
    if (c->n_features < 1 || c->n_features > 64)
        return nb_error(NB_ERR_INVALID_ARG, "%s: n_features = %d (want 1..64)", fn, c->n_features);
    int64_t total = 0;
    if (c->kind == NB_ENCODING_DENSE_GRID) {
        nb_enc_level *lv = &e->level[0];
        int64_t n = 1;
        for (int d = 0; d < 3; d++) {
            int r = d < c->n_dims ? c->resolution[d] : 1;
            if (d < c->n_dims && (r < 2 || r > (1 << 20)))
                return nb_error(NB_ERR_INVALID_ARG, "%s: dense grid resolution[%d] = %d (want 2..%d)",
                                fn, d, r, 1 << 20);
            lv->side[d] = r;
            n *= r;
            if (n * c->n_features > NB_GRID_MAX_PARAMS)
                return nb_error(NB_ERR_INVALID_ARG, "%s: dense grid of more than 2^31 parameters", fn);
        }
        lv->hashed = 0;
        lv->offset = 0;
        lv->entries = n;
        e->n_levels = 1;
        total = n * c->n_features;
    } else {
        if (c->n_levels < 1 || c->n_levels > NB_ENCODING_MAX_LEVELS)
            return nb_error(NB_ERR_INVALID_ARG, "%s: n_levels = %d (want 1..%d)", fn, c->n_levels,
                            NB_ENCODING_MAX_LEVELS);
        if (c->log2_table_size < 4 || c->log2_table_size > 26)
            return nb_error(NB_ERR_INVALID_ARG, "%s: log2_table_size = %d (want 4..26)", fn,
                            c->log2_table_size);
        if (c->base_resolution < 1 || c->base_resolution > (1 << 20))
            return nb_error(NB_ERR_INVALID_ARG, "%s: base_resolution = %d (want 1..2^20)", fn,
                            c->base_resolution);
        if (!(c->per_level_scale >= 1.0f && c->per_level_scale <= 16.0f))
            return nb_error(NB_ERR_INVALID_ARG, "%s: per_level_scale = %g (want 1..16)", fn,
                            (double)c->per_level_scale);
        int64_t T = (int64_t)1 << c->log2_table_size;
        for (int l = 0; l < c->n_levels; l++) {
            nb_enc_level *lv = &e->level[l];
            double res = floor((double)c->base_resolution * pow((double)c->per_level_scale, l));
            if (res > (double)(1 << 24))
                return nb_error(NB_ERR_INVALID_ARG, "%s: level %d resolution %.0f is above 2^24", fn, l, res);
            int side = (int)res + 1;
            int64_t dense = 1;
            for (int d = 0; d < 3; d++) {
                lv->side[d] = d < c->n_dims ? side : 1;
                if (d < c->n_dims && dense <= T) dense *= side;
            }
            lv->hashed = dense > T;
            lv->entries = lv->hashed ? T : dense;
            lv->offset = total;
            total += lv->entries * c->n_features;
            if (total > NB_GRID_MAX_PARAMS)
                return nb_error(NB_ERR_INVALID_ARG, "%s: hash grid of more than 2^31 parameters", fn);
        }
        e->n_levels = c->n_levels;
    }
    e->n_out = e->n_levels * c->n_features;
    e->n_params = total;
    return NB_OK;
}

nb_status nb_encoding_create(nb_device *dev, const nb_encoding_config *cfg, nb_encoding **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_encoding_create: out is NULL");
    *out = NULL;
    if (!dev || !cfg) return nb_error(NB_ERR_INVALID_ARG, "nb_encoding_create: dev or cfg is NULL");
    nb_encoding *e = nb_calloc(sizeof *e, 16);
    if (!e) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_encoding_create: out of host memory");
    e->dev = dev;
    e->cfg = *cfg;
    nb_status s = nb_enc_layout(e);
    if (s != NB_OK) {
        nb_free(e, sizeof *e);
        return s;
    }
    *out = e;
    return NB_OK;
}

void nb_encoding_destroy(nb_encoding *enc) {
    if (!enc) return;
    nb_enc_cuda_release(enc);
    nb_free(enc, sizeof *enc);
}

int64_t nb_encoding_n_params(const nb_encoding *enc) { return enc ? enc->n_params : 0; }
nb_device *nb_encoding_device(const nb_encoding *enc) { return enc ? enc->dev : NULL; }
int nb_encoding_n_input_dims(const nb_encoding *enc) { return enc ? enc->cfg.n_dims : 0; }
int nb_encoding_n_output_dims(const nb_encoding *enc) { return enc ? enc->n_out : 0; }
const nb_encoding_config *nb_encoding_get_config(const nb_encoding *enc) { return enc ? &enc->cfg : NULL; }

nb_status nb_encoding_level_info(const nb_encoding *enc, int level, int side[3], int64_t *offset,
                                 int64_t *entries, int *hashed) {
    if (!enc) return nb_error(NB_ERR_INVALID_ARG, "nb_encoding_level_info: enc is NULL");
    if (level < 0 || level >= enc->n_levels)
        return nb_error(NB_ERR_INVALID_ARG, "nb_encoding_level_info: level %d of %d", level, enc->n_levels);
    const nb_enc_level *lv = &enc->level[level];
    if (side) memcpy(side, lv->side, sizeof lv->side);
    if (offset) *offset = lv->offset;
    if (entries) *entries = lv->entries;
    if (hashed) *hashed = lv->hashed;
    return NB_OK;
}

nb_status nb_encoding_set_spatially_ordered(nb_encoding *enc, int ordered) {
    if (!enc) return nb_error(NB_ERR_INVALID_ARG, "nb_encoding_set_spatially_ordered: enc is NULL");
    if (enc->spatially_ordered != (ordered != 0)) {
        enc->spatially_ordered = ordered != 0;
        nb_enc_cuda_release(enc); /* reselects the backward kernel on the next call */
    }
    return NB_OK;
}

nb_status nb_encoding_init_params(nb_encoding *enc, nb_tensor *params, uint64_t seed) {
    if (!enc) return nb_error(NB_ERR_INVALID_ARG, "nb_encoding_init_params: enc is NULL");
    if (enc->n_params == 0) return NB_OK;
    NB_TRY(nb_nn_check_f32("nb_encoding_init_params", "params", params, enc->dev, 1, enc->n_params, -1));
    size_t bytes = (size_t)enc->n_params * sizeof(float);
    float *h = nb_alloc(bytes, 64);
    if (!h) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_encoding_init_params: out of host memory");
    uint32_t key = nb_nn_rng_key(seed, 0x656e63u);
    for (int64_t i = 0; i < enc->n_params; i++)
        h[i] = (nb_nn_uniform(key, (uint32_t)i) * 2.0f - 1.0f) * 1e-4f;
    nb_status s = nb_tensor_from_host_into(params, h, bytes);
    nb_free(h, bytes);
    return s;
}

/* ---- CPU reference ------------------------------------------------------------------------ */

/* Index of vertex g (integer coordinates) in level lv: dense or hashed. */
static inline uint32_t nb_grid_index(const nb_enc_level *lv, int D, const uint32_t g[3]) {
    if (!lv->hashed) {
        uint32_t i = g[0] + (uint32_t)lv->side[0] * g[1];
        if (D == 3) i += (uint32_t)lv->side[0] * (uint32_t)lv->side[1] * g[2];
        return i;
    }
    uint32_t h = g[0] ^ (g[1] * 2654435761u);
    if (D == 3) h ^= g[2] * 805459861u;
    return h & (uint32_t)(lv->entries - 1);
}

/* Cell and fraction of x along one dimension of a level with `side` vertices. */
static inline void nb_grid_cell(float x, int side, uint32_t *cell, float *frac) {
    float xc = x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
    float pos = xc * (float)(side - 1);
    float fl = floorf(pos);
    if (fl > (float)(side - 2)) fl = (float)(side - 2);
    *cell = (uint32_t)fl;
    *frac = pos - fl;
}

typedef struct nb_enc_cpu_ctx {
    const nb_encoding *e;
    const float *params, *x, *dfeat;
    void *feat;       /* f32 or (feat_f16) f16 [B, n_out] */
    float *grads, *dx;
    int64_t B;
    int feat_f16;
} nb_enc_cpu_ctx;

#define NB_ENC_MAX_OUT (NB_ENCODING_MAX_LEVELS * 64 > 24 * 8 * 2 ? NB_ENCODING_MAX_LEVELS * 64 : 24 * 8 * 2)

/* Stores one point's features (computed in f32) as f32 or f16. */
static void nb_enc_store(const nb_enc_cpu_ctx *c, int64_t b, const float *v) {
    int n = c->e->n_out;
    if (c->feat_f16) {
        uint16_t *o = (uint16_t *)c->feat + b * n;
        for (int j = 0; j < n; j++) o[j] = nb_f32_to_f16(v[j]);
    } else {
        memcpy((float *)c->feat + b * n, v, (size_t)n * sizeof(float));
    }
}

static void nb_grid_fwd_range(void *vctx, int64_t b0, int64_t b1) {
    const nb_enc_cpu_ctx *c = vctx;
    const nb_encoding *e = c->e;
    int D = e->cfg.n_dims, F = e->cfg.n_features;
    float out[NB_ENC_MAX_OUT];
    for (int64_t b = b0; b < b1; b++) {
        const float *xb = c->x + b * D;
        for (int l = 0; l < e->n_levels; l++) {
            const nb_enc_level *lv = &e->level[l];
            uint32_t cell[3] = {0, 0, 0};
            float fr[3] = {0, 0, 0};
            for (int d = 0; d < D; d++) nb_grid_cell(xb[d], lv->side[d], &cell[d], &fr[d]);
            float *o = out + l * F;
            for (int f = 0; f < F; f++) o[f] = 0.0f;
            for (int corner = 0; corner < (1 << D); corner++) {
                uint32_t g[3] = {0, 0, 0};
                float w = 1.0f;
                for (int d = 0; d < D; d++) {
                    int up = (corner >> d) & 1;
                    g[d] = cell[d] + (uint32_t)up;
                    w *= up ? fr[d] : 1.0f - fr[d];
                }
                const float *p = c->params + lv->offset + (int64_t)nb_grid_index(lv, D, g) * F;
                for (int f = 0; f < F; f++) o[f] += w * p[f];
            }
        }
        nb_enc_store(c, b, out);
    }
}

/* Parameter gradient: one task per (level, feature) pair, each walking the whole batch, so no two
 * tasks write the same float (deterministic, no atomics). */
static void nb_grid_bwd_params_range(void *vctx, int64_t t0, int64_t t1) {
    const nb_enc_cpu_ctx *c = vctx;
    const nb_encoding *e = c->e;
    int D = e->cfg.n_dims, F = e->cfg.n_features;
    int64_t B = c->B;
    for (int64_t t = t0; t < t1; t++) {
        int l = (int)(t / F), f = (int)(t % F);
        const nb_enc_level *lv = &e->level[l];
        float *gp = c->grads + lv->offset + f;
        for (int64_t b = 0; b < B; b++) {
            float dy = c->dfeat[b * e->n_out + l * F + f];
            if (dy == 0.0f) continue;
            const float *xb = c->x + b * D;
            uint32_t cell[3] = {0, 0, 0};
            float fr[3] = {0, 0, 0};
            for (int d = 0; d < D; d++) nb_grid_cell(xb[d], lv->side[d], &cell[d], &fr[d]);
            for (int corner = 0; corner < (1 << D); corner++) {
                uint32_t g[3] = {0, 0, 0};
                float w = 1.0f;
                for (int d = 0; d < D; d++) {
                    int up = (corner >> d) & 1;
                    g[d] = cell[d] + (uint32_t)up;
                    w *= up ? fr[d] : 1.0f - fr[d];
                }
                gp[(int64_t)nb_grid_index(lv, D, g) * F] += w * dy;
            }
        }
    }
}

static void nb_grid_bwd_dx_range(void *vctx, int64_t b0, int64_t b1) {
    const nb_enc_cpu_ctx *c = vctx;
    const nb_encoding *e = c->e;
    int D = e->cfg.n_dims, F = e->cfg.n_features;
    for (int64_t b = b0; b < b1; b++) {
        const float *xb = c->x + b * D;
        const float *dy = c->dfeat + b * e->n_out;
        float acc[3] = {0, 0, 0};
        for (int l = 0; l < e->n_levels; l++) {
            const nb_enc_level *lv = &e->level[l];
            uint32_t cell[3] = {0, 0, 0};
            float fr[3] = {0, 0, 0};
            for (int d = 0; d < D; d++) nb_grid_cell(xb[d], lv->side[d], &cell[d], &fr[d]);
            for (int corner = 0; corner < (1 << D); corner++) {
                uint32_t g[3] = {0, 0, 0};
                for (int d = 0; d < D; d++) g[d] = cell[d] + (uint32_t)((corner >> d) & 1);
                const float *p = c->params + lv->offset + (int64_t)nb_grid_index(lv, D, g) * F;
                float dot = 0.0f; /* dL/d(corner weight) */
                for (int f = 0; f < F; f++) dot += dy[l * F + f] * p[f];
                for (int d = 0; d < D; d++) {
                    /* d weight / d frac_d = (+1 | -1) * product of the other dimensions' weights */
                    float w = ((corner >> d) & 1) ? 1.0f : -1.0f;
                    for (int k = 0; k < D; k++)
                        if (k != d) w *= ((corner >> k) & 1) ? fr[k] : 1.0f - fr[k];
                    acc[d] += dot * w * (float)(lv->side[d] - 1);
                }
            }
        }
        for (int d = 0; d < D; d++) c->dx[b * D + d] = acc[d];
    }
}

#define NB_PI_F 3.14159265358979323846f

static void nb_freq_fwd_range(void *vctx, int64_t b0, int64_t b1) {
    const nb_enc_cpu_ctx *c = vctx;
    int D = c->e->cfg.n_dims, N = c->e->cfg.n_frequencies;
    float out[NB_ENC_MAX_OUT];
    for (int64_t b = b0; b < b1; b++) {
        for (int d = 0; d < D; d++)
            for (int k = 0; k < N; k++) {
                float a = ldexpf(NB_PI_F, k) * c->x[b * D + d];
                out[(d * N + k) * 2] = sinf(a);
                out[(d * N + k) * 2 + 1] = cosf(a);
            }
        nb_enc_store(c, b, out);
    }
}

static void nb_freq_bwd_range(void *vctx, int64_t b0, int64_t b1) {
    const nb_enc_cpu_ctx *c = vctx;
    int D = c->e->cfg.n_dims, N = c->e->cfg.n_frequencies;
    for (int64_t b = b0; b < b1; b++)
        for (int d = 0; d < D; d++) {
            float acc = 0.0f;
            for (int k = 0; k < N; k++) {
                float s = ldexpf(NB_PI_F, k), a = s * c->x[b * D + d];
                const float *dy = c->dfeat + b * c->e->n_out + (d * N + k) * 2;
                acc += s * (dy[0] * cosf(a) - dy[1] * sinf(a));
            }
            c->dx[b * D + d] = acc;
        }
}

/* ---- public entry points -------------------------------------------------------------------- */

static nb_status nb_enc_check_common(const char *fn, nb_encoding *enc, const nb_tensor *params,
                                     const nb_tensor *x, int64_t *B) {
    if (!enc) return nb_error(NB_ERR_INVALID_ARG, "%s: enc is NULL", fn);
    NB_TRY(nb_nn_check_f32(fn, "x", x, enc->dev, 2, -1, enc->cfg.n_dims));
    *B = nb_tensor_shape(x)[0];
    if (*B > ((int64_t)1 << 31) / (enc->n_out > 0 ? enc->n_out : 1))
        return nb_error(NB_ERR_INVALID_ARG, "%s: batch of %lld points is too large (B * F must be < 2^31)",
                        fn, (long long)*B);
    if (enc->n_params > 0) NB_TRY(nb_nn_check_f32(fn, "params", params, enc->dev, 1, enc->n_params, -1));
    return NB_OK;
}

nb_status nb_encoding_forward(nb_encoding *enc, const nb_tensor *params, const nb_tensor *x,
                              nb_tensor *feat) {
    const char *fn = "nb_encoding_forward";
    int64_t B = 0;
    NB_TRY(nb_enc_check_common(fn, enc, params, x, &B));
    int f16 = feat && nb_tensor_dtype(feat) == NB_F16;
    if (f16) { /* the check below wants f32: check an f32 view of the same shape instead */
        char buf[128];
        if (nb_tensor_ndim(feat) != 2 || nb_tensor_shape(feat)[0] != B || nb_tensor_shape(feat)[1] != enc->n_out)
            return nb_error(NB_ERR_SHAPE, "%s: feat is %s, expected [%lld,%d]", fn,
                            nb_tensor_describe(feat, buf, sizeof buf), (long long)B, enc->n_out);
        if (nb_tensor_device(feat) != enc->dev || !nb_tensor_is_contiguous(feat))
            return nb_error(NB_ERR_INVALID_ARG, "%s: feat must be contiguous and on %s, got %s", fn,
                            nb_device_name(enc->dev), nb_tensor_describe(feat, buf, sizeof buf));
    } else {
        NB_TRY(nb_nn_check_f32(fn, "feat", feat, enc->dev, 2, B, enc->n_out));
    }
    if (B == 0) return NB_OK;
    const float *pp = enc->n_params > 0 ? nb_tensor_data(params) : NULL;
    if (nb_device_get_kind(enc->dev) == NB_DEVICE_CUDA)
        return nb_enc_cuda_forward(enc, pp, nb_tensor_data(x), nb_tensor_data(feat), f16, B);
    nb_enc_cpu_ctx c = {enc, pp, nb_tensor_data(x), NULL, nb_tensor_data(feat), NULL, NULL, B, f16};
    nb_nn_parallel(B, 256, enc->cfg.kind == NB_ENCODING_FREQUENCY ? nb_freq_fwd_range : nb_grid_fwd_range, &c);
    return NB_OK;
}

nb_status nb_encoding_backward(nb_encoding *enc, const nb_tensor *params, const nb_tensor *x,
                               const nb_tensor *dfeat, nb_tensor *grads, nb_tensor *dx) {
    const char *fn = "nb_encoding_backward";
    int64_t B = 0;
    NB_TRY(nb_enc_check_common(fn, enc, params, x, &B));
    NB_TRY(nb_nn_check_f32(fn, "dfeat", dfeat, enc->dev, 2, B, enc->n_out));
    if (enc->n_params == 0 && grads && nb_tensor_numel(grads) > 0)
        return nb_error(NB_ERR_INVALID_ARG, "%s: the frequency encoding has no parameters; pass grads = NULL", fn);
    if (enc->n_params == 0) grads = NULL;
    if (!grads && !dx) return nb_error(NB_ERR_INVALID_ARG, "%s: grads and dx are both NULL: nothing to compute", fn);
    if (grads) NB_TRY(nb_nn_check_f32(fn, "grads", grads, enc->dev, 1, enc->n_params, -1));
    if (dx) NB_TRY(nb_nn_check_f32(fn, "dx", dx, enc->dev, 2, B, enc->cfg.n_dims));
    if (B == 0) return NB_OK;
    const float *pp = enc->n_params > 0 ? nb_tensor_data(params) : NULL;
    float *gp = grads ? nb_tensor_data(grads) : NULL, *dxp = dx ? nb_tensor_data(dx) : NULL;
    if (nb_device_get_kind(enc->dev) == NB_DEVICE_CUDA)
        return nb_enc_cuda_backward(enc, pp, nb_tensor_data(x), nb_tensor_data(dfeat), gp, dxp, B);
    nb_enc_cpu_ctx c = {enc, pp, nb_tensor_data(x), nb_tensor_data(dfeat), NULL, gp, dxp, B, 0};
    if (enc->cfg.kind == NB_ENCODING_FREQUENCY) {
        nb_nn_parallel(B, 256, nb_freq_bwd_range, &c);
        return NB_OK;
    }
    if (gp) nb_nn_parallel((int64_t)enc->n_levels * enc->cfg.n_features, 1, nb_grid_bwd_params_range, &c);
    if (dxp) nb_nn_parallel(B, 256, nb_grid_bwd_dx_range, &c);
    return NB_OK;
}

nb_status nb_encoding_backward_mlp(nb_encoding *enc, nb_mlp *mlp, const nb_tensor *params,
                                   const nb_tensor *x, const nb_tensor *dy, nb_tensor *grads) {
    const char *fn = "nb_encoding_backward_mlp";
    int64_t B = 0;
    NB_TRY(nb_enc_check_common(fn, enc, params, x, &B));
    if (!mlp) return nb_error(NB_ERR_INVALID_ARG, "%s: mlp is NULL", fn);
    if (mlp->dev != enc->dev)
        return nb_error(NB_ERR_INVALID_ARG, "%s: the mlp is on %s but the encoding on %s", fn,
                        nb_device_name(mlp->dev), nb_device_name(enc->dev));
    if (mlp->cfg.n_in != enc->n_out)
        return nb_error(NB_ERR_SHAPE, "%s: the mlp takes %d inputs but the encoding gives %d", fn,
                        mlp->cfg.n_in, enc->n_out);
    if (mlp->saved_batch < 0)
        return nb_error(NB_ERR_INVALID_ARG, "%s: no saved activations: call nb_mlp_forward(..., training = 1) first", fn);
    if (mlp->saved_batch != B)
        return nb_error(NB_ERR_SHAPE, "%s: x has %lld rows but the mlp's last training forward had batch %lld", fn,
                        (long long)B, (long long)mlp->saved_batch);
    NB_TRY(nb_nn_check_f32(fn, "dy", dy, enc->dev, 2, B, mlp->cfg.n_out));
    if (enc->n_params == 0 || !grads)
        return nb_error(NB_ERR_INVALID_ARG, "%s: needs an encoding with parameters and their grads", fn);
    NB_TRY(nb_nn_check_f32(fn, "grads", grads, enc->dev, 1, enc->n_params, -1));
    if (B == 0) return nb_mlp_backward(mlp, dy, NULL);
    if (nb_device_get_kind(enc->dev) == NB_DEVICE_CUDA) { /* the fused kernel where it applies */
        const char *const *defs = NULL;
        int smem = 0;
        nb_status s = nb_enc_cuda_mlp_defines(enc, &defs, &smem);
        if (s == NB_OK)
            s = nb_mlp_cuda_backward_enc(mlp, dy, defs, smem, nb_tensor_data(x), nb_tensor_data(grads));
        if (s != NB_ERR_UNSUPPORTED) return s;
    }
    nb_tensor *dfeat = NULL;
    int64_t shape[2] = {B, enc->n_out};
    NB_TRY(nb_tensor_empty(enc->dev, NB_F32, 2, shape, &dfeat));
    nb_status s = nb_mlp_backward(mlp, dy, dfeat);
    if (s == NB_OK) s = nb_encoding_backward(enc, params, x, dfeat, grads, NULL);
    nb_tensor_free(dfeat);
    return s;
}

nb_status nb_encoding_mlp_train(nb_encoding *enc, nb_mlp *mlp, const nb_tensor *params, const nb_tensor *x,
                                const nb_tensor *feat, const nb_tensor *target, int loss,
                                nb_tensor *loss_sum, nb_tensor *grads) {
    const char *fn = "nb_encoding_mlp_train";
    int64_t B = 0;
    NB_TRY(nb_enc_check_common(fn, enc, params, x, &B));
    if (!mlp) return nb_error(NB_ERR_INVALID_ARG, "%s: mlp is NULL", fn);
    if (mlp->dev != enc->dev)
        return nb_error(NB_ERR_INVALID_ARG, "%s: the mlp is on %s but the encoding on %s", fn,
                        nb_device_name(mlp->dev), nb_device_name(enc->dev));
    if (mlp->cfg.n_in != enc->n_out)
        return nb_error(NB_ERR_SHAPE, "%s: the mlp takes %d inputs but the encoding gives %d", fn,
                        mlp->cfg.n_in, enc->n_out);
    if (loss < 0 || loss > NB_LOSS_RELATIVE_L2) return nb_error(NB_ERR_INVALID_ARG, "%s: unknown loss kind %d", fn, loss);
    char buf[128];
    if (!feat || nb_tensor_ndim(feat) != 2 || nb_tensor_shape(feat)[0] != B || nb_tensor_shape(feat)[1] != enc->n_out ||
        (nb_tensor_dtype(feat) != NB_F16 && nb_tensor_dtype(feat) != NB_F32) || nb_tensor_device(feat) != enc->dev ||
        !nb_tensor_is_contiguous(feat))
        return nb_error(NB_ERR_SHAPE, "%s: feat must be a contiguous f16 or f32 [%lld,%d] on %s, got %s", fn,
                        (long long)B, enc->n_out, nb_device_name(enc->dev),
                        feat ? nb_tensor_describe(feat, buf, sizeof buf) : "NULL");
    NB_TRY(nb_nn_check_f32(fn, "target", target, enc->dev, 2, B, mlp->cfg.n_out));
    if (loss_sum && (nb_tensor_numel(loss_sum) != 1 || nb_tensor_dtype(loss_sum) != NB_F32 ||
                     nb_tensor_device(loss_sum) != enc->dev))
        return nb_error(NB_ERR_SHAPE, "%s: loss_sum must be one f32 on %s", fn, nb_device_name(enc->dev));
    if (enc->n_params == 0 || !grads)
        return nb_error(NB_ERR_INVALID_ARG, "%s: needs an encoding with parameters and their grads", fn);
    NB_TRY(nb_nn_check_f32(fn, "grads", grads, enc->dev, 1, enc->n_params, -1));
    if (B > 0 && nb_device_get_kind(enc->dev) == NB_DEVICE_CUDA) { /* the fused kernel where it applies */
        const char *const *defs = NULL;
        int smem = 0;
        nb_status s = nb_enc_cuda_mlp_defines(enc, &defs, &smem);
        if (s == NB_OK)
            s = nb_mlp_cuda_train_enc(mlp, feat, target, loss, loss_sum ? nb_tensor_data(loss_sum) : NULL, defs,
                                      smem, nb_tensor_data(x), nb_tensor_data(grads));
        if (s == NB_OK) mlp->saved_batch = -1; /* nothing saved for nb_mlp_backward */
        if (s != NB_ERR_UNSUPPORTED) return s;
    }
    nb_tensor *y = NULL, *dy = NULL;
    int64_t shape[2] = {B, mlp->cfg.n_out};
    nb_status s = nb_tensor_empty(enc->dev, NB_F32, 2, shape, &y);
    if (s == NB_OK) s = nb_tensor_empty(enc->dev, NB_F32, 2, shape, &dy);
    if (s == NB_OK) s = nb_mlp_forward(mlp, feat, y, 1);
    if (s == NB_OK) s = nb_loss((nb_loss_kind)loss, y, target, loss_sum, dy);
    if (s == NB_OK) s = nb_encoding_backward_mlp(enc, mlp, params, x, dy, grads);
    nb_tensor_free(y);
    nb_tensor_free(dy);
    return s;
}
