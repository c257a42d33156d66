/* Tape ops, CPU reference: group norm and group norm + SiLU (affine optional), threaded over
 * (sample, group) slices. The CUDA rows are in tape_cuda_norm.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/op_rows.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* ---- group norm (and group norm + SiLU) ------------------------------------------------------ */
/* x [N,C,S...]: per (n, group) of C/G channels × S positions: mean, biased variance; saved[0] =
 * mean [N*G], saved[1] = rstd [N*G]. z = (x - mean) * rstd * gamma + beta; y = z, or silu(z) for
 * the fused op (whose backward recomputes z from x and the saved statistics). */

typedef struct {
    const float *x, *gamma, *beta, *dy, *mean, *rstd;
    float *y, *dx, *smean, *srstd;
    int64_t N, C, G, S;
    float eps;
    int silu;
} gn_ctx;

/* dL/dz at one element: dy, times silu'(z) for the fused op. */
static inline float gn_dz(const gn_ctx *c, float dy, float xh, float ga, float be) {
    if (!c->silu) return dy;
    float z = xh * ga + be, sg = 1.0f / (1.0f + expf(-z));
    return dy * sg * (1.0f + z * (1.0f - sg));
}

static void gn_fwd_range(void *c_, int64_t i0, int64_t i1) {
    const gn_ctx *c = c_;
    int64_t Cg = c->C / c->G, M = Cg * c->S;
    for (int64_t ng = i0; ng < i1; ng++) {
        int64_t n = ng / c->G, g = ng % c->G;
        const float *x = c->x + (n * c->C + g * Cg) * c->S;
        float *y = c->y + (n * c->C + g * Cg) * c->S;
        double s = 0.0, ss = 0.0;
        for (int64_t i = 0; i < M; i++) s += x[i];
        double mean = s / (double)M;
        for (int64_t i = 0; i < M; i++) ss += ((double)x[i] - mean) * ((double)x[i] - mean);
        float rstd = (float)(1.0 / sqrt(ss / (double)M + (double)c->eps));
        c->smean[ng] = (float)mean;
        c->srstd[ng] = rstd;
        for (int64_t cc = 0; cc < Cg; cc++) {
            int64_t ch = g * Cg + cc;
            float ga = c->gamma ? c->gamma[ch] : 1.0f, be = c->beta ? c->beta[ch] : 0.0f;
            for (int64_t p = 0; p < c->S; p++) {
                int64_t i = cc * c->S + p;
                float z = (x[i] - (float)mean) * rstd * ga + be;
                y[i] = c->silu ? z / (1.0f + expf(-z)) : z;
            }
        }
    }
}

/* dx for (n, group) in [i0, i1) */
static void gn_bwd_dx(void *c_, int64_t i0, int64_t i1) {
    const gn_ctx *c = c_;
    int64_t Cg = c->C / c->G, M = Cg * c->S;
    for (int64_t ng = i0; ng < i1; ng++) {
        int64_t n = ng / c->G, g = ng % c->G;
        int64_t base = (n * c->C + g * Cg) * c->S;
        const float *x = c->x + base, *dy = c->dy + base;
        float *dx = c->dx + base;
        float mean = c->mean[ng], rstd = c->rstd[ng];
        double sd = 0.0, sdx = 0.0; /* sum dxhat, sum dxhat * xhat */
        for (int64_t cc = 0; cc < Cg; cc++) {
            float ga = c->gamma ? c->gamma[g * Cg + cc] : 1.0f;
            float be = c->beta ? c->beta[g * Cg + cc] : 0.0f;
            for (int64_t p = 0; p < c->S; p++) {
                int64_t i = cc * c->S + p;
                float xhf = (x[i] - mean) * rstd;
                double dxh = (double)gn_dz(c, dy[i], xhf, ga, be) * ga, xh = ((double)x[i] - mean) * rstd;
                sd += dxh;
                sdx += dxh * xh;
            }
        }
        double md = sd / (double)M, mdx = sdx / (double)M;
        for (int64_t cc = 0; cc < Cg; cc++) {
            float ga = c->gamma ? c->gamma[g * Cg + cc] : 1.0f;
            float be = c->beta ? c->beta[g * Cg + cc] : 0.0f;
            for (int64_t p = 0; p < c->S; p++) {
                int64_t i = cc * c->S + p;
                float xhf = (x[i] - mean) * rstd;
                double dxh = (double)gn_dz(c, dy[i], xhf, ga, be) * ga, xh = ((double)x[i] - mean) * rstd;
                dx[i] += (float)(rstd * (dxh - md - xh * mdx));
            }
        }
    }
}

static void gn_fill(nb_tape *t, const nb_top *op, gn_ctx *c) {
    const nb_tval *x = VAL(t, op->in[0]), *y = VAL(t, op->out);
    memset(c, 0, sizeof *c);
    c->x = x->data;
    c->gamma = op->in[1] >= 0 ? VAL(t, op->in[1])->data : NULL;
    c->beta = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    c->y = y->data;
    c->dy = y->grad;
    c->N = x->shape[0], c->C = x->shape[1], c->G = op->ip[0];
    c->S = x->count / (c->N * c->C);
    c->eps = op->fp[0];
    c->mean = c->smean = op->saved[0];
    c->rstd = c->srstd = op->saved[1];
    c->silu = op->kind == NB_TOP_GROUP_NORM_SILU;
}

nb_status nb_op_group_norm_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    int64_t NG = x->shape[0] * op->ip[0];
    op->saved[0] = nb_tape_alloc_f32(t, NG, 0);
    op->saved[1] = nb_tape_alloc_f32(t, NG, 0);
    if (!op->saved[0] || !op->saved[1]) return NB_ERR_OUT_OF_MEMORY;
    gn_ctx c;
    gn_fill(t, op, &c);
    nb_tape_parallel(NG, 1, gn_fwd_range, &c);
    return NB_OK;
}

nb_status nb_op_group_norm_cpu_bwd(nb_tape *t, const nb_top *op) {
    gn_ctx c;
    gn_fill(t, op, &c);
    float *dgamma, *dbeta;
    nb_status s;
    if ((s = nb_tape_grad_buf(t, op->in[0], &c.dx)) || (s = nb_tape_grad_buf(t, op->in[1], &dgamma)) ||
        (s = nb_tape_grad_buf(t, op->in[2], &dbeta)))
        return s;
    if (c.dx) nb_tape_parallel(c.N * c.G, 1, gn_bwd_dx, &c);
    if (dgamma || dbeta) {
        int64_t Cg = c.C / c.G;
        for (int64_t n = 0; n < c.N; n++)
            for (int64_t ch = 0; ch < c.C; ch++) {
                int64_t ng = n * c.G + ch / Cg;
                float ga = c.gamma ? c.gamma[ch] : 1.0f, be = c.beta ? c.beta[ch] : 0.0f;
                const float *x = c.x + (n * c.C + ch) * c.S, *dy = c.dy + (n * c.C + ch) * c.S;
                float sg = 0.0f, sb = 0.0f;
                for (int64_t p = 0; p < c.S; p++) {
                    float xh = (x[p] - c.mean[ng]) * c.rstd[ng], dz = gn_dz(&c, dy[p], xh, ga, be);
                    sg += dz * xh;
                    sb += dz;
                }
                if (dgamma) dgamma[ch] += sg;
                if (dbeta) dbeta[ch] += sb;
            }
    }
    return NB_OK;
}

static nb_status gn_op(nb_tape *t, int kind, const char *fn, nb_tvar x, int groups, nb_tvar gamma,
                       nb_tvar beta, float eps, nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "%s: tape or out is NULL", fn);
    char b1[96];
    snprintf(b1, sizeof b1, "%s: x", fn);
    nb_tval *xv = nb_tape_val(t, x, b1);
    if (!xv) return NB_ERR_INVALID_ARG;
    if (xv->ndim < 2)
        return nb_error(NB_ERR_SHAPE, "%s: x %s must be [N,C,...]", fn,
                        nb_tape_shape_str(xv, b1, sizeof b1));
    if (groups < 1 || xv->shape[1] % groups)
        return nb_error(NB_ERR_SHAPE, "%s: %lld channels are not divisible by %d groups", fn,
                        (long long)xv->shape[1], groups);
    if (!(eps > 0.0f)) return nb_error(NB_ERR_INVALID_ARG, "%s: eps must be > 0", fn);
    nb_tvar aff[2] = {gamma, beta};
    for (int k = 0; k < 2; k++) {
        if (aff[k] < 0) continue;
        nb_tval *av = nb_tape_val(t, aff[k], k ? "group norm: beta" : "group norm: gamma");
        if (!av) return NB_ERR_INVALID_ARG;
        if (av->ndim != 1 || av->shape[0] != xv->shape[1])
            return nb_error(NB_ERR_SHAPE, "%s: %s %s must be [C] = [%lld]", fn, k ? "beta" : "gamma",
                            nb_tape_shape_str(av, b1, sizeof b1), (long long)xv->shape[1]);
    }
    nb_top op = {.kind = kind, .nin = 3, .in = {x, gamma, beta}, .ip = {groups}, .fp = {eps}};
    int64_t shape[NB_TAPE_MAX_DIMS];
    memcpy(shape, xv->shape, sizeof shape);
    nb_status s;
    if ((s = nb_tape_op_out(t, &op, xv->ndim, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

nb_status nb_tape_group_norm(nb_tape *t, nb_tvar x, int groups, nb_tvar gamma, nb_tvar beta,
                             float eps, nb_tvar *out) {
    return gn_op(t, NB_TOP_GROUP_NORM, "nb_tape_group_norm", x, groups, gamma, beta, eps, out);
}

nb_status nb_tape_group_norm_silu(nb_tape *t, nb_tvar x, int groups, nb_tvar gamma, nb_tvar beta,
                                  float eps, nb_tvar *out) {
    return gn_op(t, NB_TOP_GROUP_NORM_SILU, "nb_tape_group_norm_silu", x, groups, gamma, beta, eps,
                 out);
}
