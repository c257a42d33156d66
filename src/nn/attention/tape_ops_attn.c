/* Tape ops, CPU reference: scaled-dot-product attention (naive; saves the probabilities).
 *   nb_tape_attention:      q [N,Hd,Tq,d], k, v [N,Hd,Tk,d]:  P = softmax(q k^T / sqrt(d))
 *                           [Tq,Tk],  o = P v [Tq,d].
 *   nb_tape_qkv_attention:  the same on the legacy qkv layout [N, heads*3d, L] -> [N, heads*d, L]
 *                           (no layout copies; CUDA rows in tape_cuda_attn.c). */
#include <math.h>
#include <string.h>

#include "core/util.h"
#include "graph/op_rows.h"

#define VAL(t, v) (&(t)->vals[(v)])

typedef struct {
    const float *q, *k, *v, *dout;
    float *out, *P, *dq, *dk, *dv, *scratch;
    int64_t BH, Tq, Tk, D;
    float scale;
} attn_ctx;

static void attn_fwd_range(void *c_, int64_t b0, int64_t b1) {
    const attn_ctx *c = c_;
    for (int64_t b = b0; b < b1; b++) {
        const float *q = c->q + b * c->Tq * c->D, *k = c->k + b * c->Tk * c->D,
                    *v = c->v + b * c->Tk * c->D;
        float *P = c->P + b * c->Tq * c->Tk, *o = c->out + b * c->Tq * c->D;
        for (int64_t i = 0; i < c->Tq; i++) {
            float *p = P + i * c->Tk, mx = -INFINITY;
            for (int64_t j = 0; j < c->Tk; j++) {
                float s = 0.0f;
                for (int64_t e = 0; e < c->D; e++) s += q[i * c->D + e] * k[j * c->D + e];
                p[j] = s * c->scale;
                if (p[j] > mx) mx = p[j];
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < c->Tk; j++) sum += (p[j] = expf(p[j] - mx));
            for (int64_t j = 0; j < c->Tk; j++) p[j] /= sum;
            for (int64_t e = 0; e < c->D; e++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < c->Tk; j++) acc += p[j] * v[j * c->D + e];
                o[i * c->D + e] = acc;
            }
        }
    }
}

static void attn_bwd_range(void *c_, int64_t b0, int64_t b1) {
    const attn_ctx *c = c_;
    for (int64_t b = b0; b < b1; b++) {
        const float *q = c->q + b * c->Tq * c->D, *k = c->k + b * c->Tk * c->D,
                    *v = c->v + b * c->Tk * c->D, *dO = c->dout + b * c->Tq * c->D;
        const float *P = c->P + b * c->Tq * c->Tk;
        float *dS = c->scratch + b * c->Tk;
        float *dq = c->dq ? c->dq + b * c->Tq * c->D : NULL;
        float *dk = c->dk ? c->dk + b * c->Tk * c->D : NULL;
        float *dv = c->dv ? c->dv + b * c->Tk * c->D : NULL;
        for (int64_t i = 0; i < c->Tq; i++) {
            const float *p = P + i * c->Tk, *go = dO + i * c->D;
            float rowdot = 0.0f;
            for (int64_t j = 0; j < c->Tk; j++) {
                float dp = 0.0f;
                for (int64_t e = 0; e < c->D; e++) dp += go[e] * v[j * c->D + e];
                dS[j] = dp;
                rowdot += p[j] * dp;
                if (dv)
                    for (int64_t e = 0; e < c->D; e++) dv[j * c->D + e] += p[j] * go[e];
            }
            for (int64_t j = 0; j < c->Tk; j++) {
                float ds = p[j] * (dS[j] - rowdot) * c->scale;
                if (dq)
                    for (int64_t e = 0; e < c->D; e++) dq[i * c->D + e] += ds * k[j * c->D + e];
                if (dk)
                    for (int64_t e = 0; e < c->D; e++) dk[j * c->D + e] += ds * q[i * c->D + e];
            }
        }
    }
}

static void attn_fill(nb_tape *t, const nb_top *op, attn_ctx *c) {
    const nb_tval *q = VAL(t, op->in[0]), *k = VAL(t, op->in[1]), *o = VAL(t, op->out);
    memset(c, 0, sizeof *c);
    c->q = q->data;
    c->k = k->data;
    c->v = VAL(t, op->in[2])->data;
    c->out = o->data;
    c->dout = o->grad;
    c->P = op->saved[0];
    c->BH = q->shape[0] * q->shape[1], c->Tq = q->shape[2], c->Tk = k->shape[2], c->D = q->shape[3];
    c->scale = 1.0f / sqrtf((float)c->D);
}

nb_status nb_op_attention_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *q = VAL(t, op->in[0]), *k = VAL(t, op->in[1]);
    op->saved[0] = nb_tape_alloc_f32(t, q->shape[0] * q->shape[1] * q->shape[2] * k->shape[2], 0);
    if (!op->saved[0]) return NB_ERR_OUT_OF_MEMORY;
    attn_ctx c;
    attn_fill(t, op, &c);
    nb_tape_parallel(c.BH, 1, attn_fwd_range, &c);
    return NB_OK;
}

nb_status nb_op_attention_cpu_bwd(nb_tape *t, const nb_top *op) {
    attn_ctx c;
    attn_fill(t, op, &c);
    nb_status s;
    if ((s = nb_tape_grad_buf(t, op->in[0], &c.dq)) || (s = nb_tape_grad_buf(t, op->in[1], &c.dk)) ||
        (s = nb_tape_grad_buf(t, op->in[2], &c.dv)))
        return s;
    c.scratch = nb_tape_alloc_f32(t, c.BH * c.Tk, 0);
    if (!c.scratch) return NB_ERR_OUT_OF_MEMORY;
    nb_tape_parallel(c.BH, 1, attn_bwd_range, &c);
    return NB_OK;
}

nb_status nb_tape_attention(nb_tape *t, nb_tvar q, nb_tvar k, nb_tvar v, nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_attention: tape or out is NULL");
    nb_tval *qv = nb_tape_val(t, q, "nb_tape_attention: q");
    if (!qv) return NB_ERR_INVALID_ARG;
    nb_tval *kv = nb_tape_val(t, k, "nb_tape_attention: k");
    if (!kv) return NB_ERR_INVALID_ARG;
    nb_tval *vv = nb_tape_val(t, v, "nb_tape_attention: v");
    if (!vv) return NB_ERR_INVALID_ARG;
    char b1[96], b2[96], b3[96];
    nb_tape_shape_str(qv, b1, sizeof b1);
    nb_tape_shape_str(kv, b2, sizeof b2);
    nb_tape_shape_str(vv, b3, sizeof b3);
    int ok = qv->ndim == 4 && kv->ndim == 4 && vv->ndim == 4;
    for (int i = 0; ok && i < 4; i++) ok = kv->shape[i] == vv->shape[i];
    ok = ok && qv->shape[0] == kv->shape[0] && qv->shape[1] == kv->shape[1] &&
         qv->shape[3] == kv->shape[3];
    if (!ok)
        return nb_error(NB_ERR_SHAPE,
                        "nb_tape_attention: q %s, k %s, v %s must be [N,H,Tq,d], [N,H,Tk,d], [N,H,Tk,d]",
                        b1, b2, b3);
    nb_top op = {.kind = NB_TOP_ATTENTION, .nin = 3, .in = {q, k, v}};
    int64_t shape[4];
    memcpy(shape, qv->shape, sizeof shape);
    nb_status s;
    if ((s = nb_tape_op_out(t, &op, 4, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- fused legacy-layout QKV attention (guided-diffusion's QKVAttentionLegacy) ------------
 * qkv [N, heads*3d, L]: per (n, head) = bh, q_i(l) = qkv[n, head*3d + i, l], k at + d, v at + 2d
 * (each a [d, L] block: feature-major, positions contiguous); out [N, heads*d, L] with
 * out[n, head*d + i, l] = sum_s P[l][s] v_i(s), P = softmax_s(q(l).k(s) / sqrt(d)).
 * The CPU reference keeps P ([BH, L, L] in saved[0]) for the backward; the loops run along
 * positions (contiguous) with f32 accumulation, like the [BH,T,d] attention above. */

typedef struct {
    const float *qkv, *dout;
    float *out, *P, *dqkv, *scratch;
    int64_t heads, L, D;
    float scale;
} qkv_ctx;

static void qkv_fwd_range(void *c_, int64_t b0, int64_t b1) {
    const qkv_ctx *c = c_;
    const int64_t L = c->L, D = c->D;
    for (int64_t b = b0; b < b1; b++) {
        const float *q = c->qkv + b * 3 * D * L, *k = q + D * L, *v = k + D * L;
        float *o = c->out + b * D * L;
        for (int64_t l = 0; l < L; l++) {
            float *p = c->P + (b * L + l) * L, mx = -INFINITY;
            for (int64_t s = 0; s < L; s++) p[s] = 0.0f;
            for (int64_t i = 0; i < D; i++) {
                const float qi = q[i * L + l] * c->scale, *ki = k + i * L;
                for (int64_t s = 0; s < L; s++) p[s] += qi * ki[s];
            }
            for (int64_t s = 0; s < L; s++)
                if (p[s] > mx) mx = p[s];
            float sum = 0.0f;
            for (int64_t s = 0; s < L; s++) sum += (p[s] = expf(p[s] - mx));
            const float inv = 1.0f / sum;
            for (int64_t s = 0; s < L; s++) p[s] *= inv;
            for (int64_t i = 0; i < D; i++) {
                const float *vi = v + i * L;
                float acc = 0.0f;
                for (int64_t s = 0; s < L; s++) acc += p[s] * vi[s];
                o[i * L + l] = acc;
            }
        }
    }
}

static void qkv_bwd_range(void *c_, int64_t b0, int64_t b1) {
    const qkv_ctx *c = c_;
    const int64_t L = c->L, D = c->D;
    for (int64_t b = b0; b < b1; b++) {
        const float *q = c->qkv + b * 3 * D * L, *k = q + D * L, *v = k + D * L;
        const float *dO = c->dout + b * D * L;
        float *dq = c->dqkv + b * 3 * D * L, *dk = dq + D * L, *dv = dk + D * L;
        float *dp = c->scratch + b * L;
        for (int64_t l = 0; l < L; l++) {
            const float *p = c->P + (b * L + l) * L;
            for (int64_t s = 0; s < L; s++) dp[s] = 0.0f;
            for (int64_t i = 0; i < D; i++) {
                const float g = dO[i * L + l], *vi = v + i * L;
                float *dvi = dv + i * L;
                for (int64_t s = 0; s < L; s++) {
                    dp[s] += g * vi[s];
                    dvi[s] += p[s] * g;
                }
            }
            float rowdot = 0.0f;
            for (int64_t s = 0; s < L; s++) rowdot += p[s] * dp[s];
            for (int64_t s = 0; s < L; s++) dp[s] = p[s] * (dp[s] - rowdot) * c->scale; /* dS */
            for (int64_t i = 0; i < D; i++) {
                const float *ki = k + i * L, qi = q[i * L + l];
                float *dki = dk + i * L, acc = 0.0f;
                for (int64_t s = 0; s < L; s++) {
                    acc += dp[s] * ki[s];
                    dki[s] += dp[s] * qi;
                }
                dq[i * L + l] += acc;
            }
        }
    }
}

static void qkv_fill(nb_tape *t, const nb_top *op, qkv_ctx *c) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    memset(c, 0, sizeof *c);
    c->qkv = x->data;
    c->out = o->data;
    c->dout = o->grad;
    c->P = op->saved[0];
    c->heads = op->ip[0];
    c->L = x->count / (x->shape[0] * x->shape[1]);
    c->D = x->shape[1] / (3 * c->heads);
    c->scale = 1.0f / sqrtf((float)c->D);
}

nb_status nb_op_qkv_attention_cpu_fwd(nb_tape *t, nb_top *op) {
    qkv_ctx c;
    const nb_tval *x = VAL(t, op->in[0]);
    int64_t BH = x->shape[0] * op->ip[0], L = x->count / (x->shape[0] * x->shape[1]);
    op->saved[0] = nb_tape_alloc_f32(t, BH * L * L, 0);
    if (!op->saved[0]) return NB_ERR_OUT_OF_MEMORY;
    qkv_fill(t, op, &c);
    nb_tape_parallel(BH, 1, qkv_fwd_range, &c);
    return NB_OK;
}

nb_status nb_op_qkv_attention_cpu_bwd(nb_tape *t, const nb_top *op) {
    qkv_ctx c;
    qkv_fill(t, op, &c);
    NB_TRY(nb_tape_grad_buf(t, op->in[0], &c.dqkv));
    if (!c.dqkv) return NB_OK;
    int64_t BH = VAL(t, op->in[0])->shape[0] * c.heads;
    c.scratch = nb_tape_alloc_f32(t, BH * c.L, 0);
    if (!c.scratch) return NB_ERR_OUT_OF_MEMORY;
    nb_tape_parallel(BH, 1, qkv_bwd_range, &c);
    return NB_OK;
}

nb_status nb_tape_qkv_attention(nb_tape *t, nb_tvar qkv, int heads, nb_tvar *out) {
    if (!t || !out)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_qkv_attention: tape or out is NULL");
    nb_tval *x = nb_tape_val(t, qkv, "nb_tape_qkv_attention: qkv");
    if (!x) return NB_ERR_INVALID_ARG;
    if (heads < 1)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_qkv_attention: heads = %d must be >= 1",
                        heads);
    char b[96];
    nb_tape_shape_str(x, b, sizeof b);
    if (x->ndim != 3 && x->ndim != 4)
        return nb_error(NB_ERR_SHAPE,
                        "nb_tape_qkv_attention: qkv %s must be [N, 3*heads*d, H, W] or "
                        "[N, 3*heads*d, L]", b);
    int64_t C = x->shape[1];
    if (C < 3 * (int64_t)heads || C % (3 * (int64_t)heads))
        return nb_error(NB_ERR_SHAPE,
                        "nb_tape_qkv_attention: qkv %s: its %lld channels are not a positive "
                        "multiple of 3*heads = %lld (channel = head*3d + {q,k,v}*d + i)",
                        b, (long long)C, 3 * (long long)heads);
    if (x->count == 0)
        return nb_error(NB_ERR_SHAPE, "nb_tape_qkv_attention: qkv %s is empty", b);
    nb_top op = {.kind = NB_TOP_QKV_ATTENTION, .nin = 1, .in = {qkv, NB_TVAR_NONE, NB_TVAR_NONE}};
    op.ip[0] = heads;
    int64_t shape[NB_TAPE_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[1] = C / 3;
    nb_status s;
    if ((s = nb_tape_op_out(t, &op, x->ndim, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}
