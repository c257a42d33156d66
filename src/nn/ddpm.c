/* DDPM on the tape's UNet: linear beta schedule, epsilon-prediction MSE training with AdamW,
 * gradient-norm clipping and a parameter EMA; DDPM (ancestral) and DDIM (eta = 0) samplers over
 * evenly spaced timesteps. CPU (host buffers), see include/nabla/nn_unet.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/nn_optim.h"
#include "nabla/nn_unet.h"
#include "nabla/tensor.h"

#define TRY(expr)                                                                              \
    do {                                                                                       \
        nb_status try_s_ = (expr);                                                             \
        if (try_s_ != NB_OK) return try_s_;                                                    \
    } while (0)

struct nb_ddpm {
    nb_ddpm_config cfg;
    nb_unet *u;
    nb_unet_config ucfg;
    nb_tape *t;
    double *betas, *acp;
    float *params, *grads, *ema;
    int64_t np;
    nb_tensor *tp, *tg;
    nb_adam *opt;
    uint64_t rng;
    float *xt, *eps, *tsteps; /* host scratch, for cap images */
    int cap;
};

nb_ddpm_config nb_ddpm_config_default(void) {
    nb_ddpm_config c;
    memset(&c, 0, sizeof c);
    c.timesteps = 1000;
    c.beta_start = 1e-4f;
    c.beta_end = 0.02f;
    c.lr = 1e-4f;
    c.weight_decay = 0.0f;
    c.grad_clip = 1.0f;
    c.ema_decay = 0.9999f;
    c.seed = 0;
    return c;
}

static uint64_t next_u64(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((next_u64(s) >> 11) + 0.5) / 9007199254740992.0; }
static void gaussian(uint64_t *s, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(uniform01(s))), a = 6.283185307179586 * uniform01(s);
        out[i] = (float)(r * cos(a));
        if (i + 1 < n) out[i + 1] = (float)(r * sin(a));
    }
}

void nb_ddpm_free(nb_ddpm *d) {
    if (!d) return;
    nb_adam_destroy(d->opt);
    nb_tensor_free(d->tp);
    nb_tensor_free(d->tg);
    free(d->betas), free(d->acp), free(d->ema), free(d->xt), free(d->eps), free(d->tsteps);
    free(d);
}

nb_status nb_ddpm_create(nb_unet *u, const nb_ddpm_config *cfg, nb_ddpm **out) {
    if (!u || !cfg || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_create: NULL argument");
    if (cfg->timesteps < 1 || cfg->timesteps > 100000)
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: timesteps %d not in 1..100000", cfg->timesteps);
    if (!(cfg->beta_start > 0) || !(cfg->beta_end >= cfg->beta_start) || !(cfg->beta_end * 1000.0 / cfg->timesteps < 1))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: need 0 < beta_start <= beta_end and scaled betas < 1");
    if (!(cfg->lr > 0) || !(cfg->weight_decay >= 0) || !(cfg->grad_clip >= 0) ||
        !(cfg->ema_decay >= 0 && cfg->ema_decay < 1))
        return nb_error(NB_ERR_INVALID_ARG,
                        "DDPM: need lr > 0, weight_decay >= 0, grad_clip >= 0, ema_decay in [0, 1)");
    nb_ddpm *d = calloc(1, sizeof *d);
    if (!d) return nb_error(NB_ERR_OUT_OF_MEMORY, "DDPM: out of memory");
    d->cfg = *cfg;
    d->u = u;
    d->t = nb_unet_tape(u);
    d->rng = cfg->seed * 0x2545F4914F6CDD1Dull + 7;
    nb_status s = nb_unet_get_config(u, &d->ucfg);
    int T = cfg->timesteps;
    d->betas = malloc(sizeof(double) * (size_t)T);
    d->acp = malloc(sizeof(double) * (size_t)T);
    if (!s && (!d->betas || !d->acp)) s = nb_error(NB_ERR_OUT_OF_MEMORY, "DDPM: out of memory");
    if (!s) { /* guided-diffusion: scale = 1000 / T, np.linspace(scale * b0, scale * b1, T) */
        double scale = 1000.0 / T, b0 = scale * cfg->beta_start, b1 = scale * cfg->beta_end, ab = 1;
        for (int i = 0; i < T; i++) {
            d->betas[i] = T == 1 ? b0 : b0 + (b1 - b0) * i / (T - 1);
            ab *= 1.0 - d->betas[i];
            d->acp[i] = ab;
        }
    }
    if (!s) s = nb_tape_params(d->t, &d->params, &d->np);
    if (!s) s = nb_tape_grads(d->t, &d->grads, &d->np);
    nb_device *cpu = NULL;
    if (!s) s = nb_device_open("cpu", &cpu);
    if (!s) s = nb_tensor_wrap(cpu, NB_F32, 1, &d->np, NULL, d->params, &d->tp);
    if (!s) s = nb_tensor_wrap(cpu, NB_F32, 1, &d->np, NULL, d->grads, &d->tg);
    if (!s) {
        nb_adam_config ac = nb_adam_config_default();
        ac.lr = cfg->lr;
        ac.weight_decay = cfg->weight_decay;
        ac.decoupled = 1;
        s = nb_adam_create(cpu, d->np, &ac, &d->opt);
    }
    if (!s && cfg->ema_decay > 0) {
        d->ema = malloc(sizeof(float) * (size_t)d->np);
        if (!d->ema) s = nb_error(NB_ERR_OUT_OF_MEMORY, "DDPM: out of memory for the EMA copy");
        else memcpy(d->ema, d->params, sizeof(float) * (size_t)d->np);
    }
    if (s) {
        nb_ddpm_free(d);
        return s;
    }
    *out = d;
    return NB_OK;
}

nb_status nb_ddpm_alphas_cumprod(const nb_ddpm *d, const double **out) {
    if (!d || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_alphas_cumprod: NULL argument");
    *out = d->acp;
    return NB_OK;
}

static nb_status reserve(nb_ddpm *d, int n) {
    if (n <= d->cap) return NB_OK;
    size_t img = (size_t)d->ucfg.in_channels * d->ucfg.image_size * d->ucfg.image_size;
    size_t oimg = (size_t)d->ucfg.out_channels * d->ucfg.image_size * d->ucfg.image_size;
    free(d->xt), free(d->eps), free(d->tsteps);
    d->xt = malloc(sizeof(float) * img * (size_t)n);
    d->eps = malloc(sizeof(float) * (img > oimg ? img : oimg) * (size_t)n);
    d->tsteps = malloc(sizeof(float) * (size_t)n);
    d->cap = n;
    if (!d->xt || !d->eps || !d->tsteps) {
        d->cap = 0;
        return nb_error(NB_ERR_OUT_OF_MEMORY, "DDPM: out of memory for a batch of %d", n);
    }
    return NB_OK;
}

nb_status nb_ddpm_train_step(nb_ddpm *d, const float *x0, int n, float *loss, float *grad_norm) {
    if (!d || !x0 || n < 1) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_train_step: NULL data or n < 1");
    if (d->ucfg.in_channels != d->ucfg.out_channels)
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: epsilon prediction needs out_channels == in_channels (%d vs %d)",
                        d->ucfg.out_channels, d->ucfg.in_channels);
    TRY(reserve(d, n));
    int S = d->ucfg.image_size, C = d->ucfg.in_channels;
    int64_t img = (int64_t)C * S * S;
    gaussian(&d->rng, d->eps, img * n);
    for (int i = 0; i < n; i++) {
        int t = (int)(next_u64(&d->rng) % (uint64_t)d->cfg.timesteps);
        d->tsteps[i] = (float)t;
        float a = (float)sqrt(d->acp[t]), b = (float)sqrt(1.0 - d->acp[t]);
        for (int64_t j = 0; j < img; j++) d->xt[i * img + j] = a * x0[i * img + j] + b * d->eps[i * img + j];
    }
    int64_t shape[4] = {n, C, S, S};
    nb_tvar x, target, pred, l;
    TRY(nb_tape_reset(d->t));
    TRY(nb_tape_zero_grad(d->t));
    TRY(nb_tape_input(d->t, 4, shape, d->xt, 0, &x));
    TRY(nb_tape_input(d->t, 4, shape, d->eps, 0, &target));
    TRY(nb_unet_forward(d->u, x, d->tsteps, &pred));
    TRY(nb_tape_mse(d->t, pred, target, &l));
    TRY(nb_tape_backward(d->t, l));
    double sq = 0;
    for (int64_t i = 0; i < d->np; i++) sq += (double)d->grads[i] * d->grads[i];
    double norm = sqrt(sq);
    if (grad_norm) *grad_norm = (float)norm;
    if (!isfinite(norm))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: gradient norm is not finite (diverged; lower --lr)");
    if (d->cfg.grad_clip > 0 && norm > d->cfg.grad_clip) {
        float k = (float)(d->cfg.grad_clip / (norm + 1e-6));
        for (int64_t i = 0; i < d->np; i++) d->grads[i] *= k;
    }
    TRY(nb_adam_step(d->opt, d->tp, d->tg, 1));
    if (d->ema) {
        /* warm-up (TF's ExponentialMovingAverage with num_updates): the EMA forgets the initial
         * weights quickly, so a short run's EMA is not shrunk towards the zero-initialised layers */
        double ns = (double)nb_adam_steps(d->opt), w = (1.0 + ns) / (10.0 + ns);
        float a = (float)(d->cfg.ema_decay < w ? d->cfg.ema_decay : w), b = 1.0f - a;
        for (int64_t i = 0; i < d->np; i++) d->ema[i] = a * d->ema[i] + b * d->params[i];
    }
    if (loss) {
        float *lv;
        TRY(nb_tape_data(d->t, l, &lv, NULL));
        *loss = lv[0];
    }
    return NB_OK;
}

nb_status nb_ddpm_ema_params(nb_ddpm *d, float **out) {
    if (!d || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_ema_params: NULL argument");
    *out = d->ema ? d->ema : d->params;
    return NB_OK;
}

nb_status nb_ddpm_use_ema(nb_ddpm *d) {
    if (!d) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_use_ema: NULL argument");
    if (d->ema) memcpy(d->params, d->ema, sizeof(float) * (size_t)d->np);
    return NB_OK;
}

#define SAMPLE_CHUNK 16

static nb_status sample_chunk(nb_ddpm *d, nb_sampler sampler, const int *ts, int steps, int n,
                              uint64_t *rng, float *x) {
    int S = d->ucfg.image_size, C = d->ucfg.in_channels;
    int64_t img = (int64_t)C * S * S, shape[4] = {n, C, S, S};
    gaussian(rng, x, img * n);
    for (int i = steps - 1; i >= 0; i--) {
        int t = ts[i];
        double ab = d->acp[t], abp = i > 0 ? d->acp[ts[i - 1]] : 1.0;
        for (int j = 0; j < n; j++) d->tsteps[j] = (float)t;
        nb_tvar xv, ev;
        float *e;
        TRY(nb_tape_reset(d->t));
        TRY(nb_tape_input(d->t, 4, shape, x, 0, &xv));
        TRY(nb_unet_forward(d->u, xv, d->tsteps, &ev));
        TRY(nb_tape_data(d->t, ev, &e, NULL));
        double sa = sqrt(ab), s1a = sqrt(1 - ab), sap = sqrt(abp), s1ap = sqrt(1 - abp);
        double beta = 1 - ab / abp, c0 = sap * beta / (1 - ab), c1 = sqrt(1 - beta) * (1 - abp) / (1 - ab);
        double sigma = sqrt(beta * (1 - abp) / (1 - ab));
        if (sampler == NB_SAMPLER_DDPM && i > 0) gaussian(rng, d->eps, img * n);
        for (int64_t k = 0; k < img * n; k++) {
            double x0 = (x[k] - s1a * e[k]) / sa;
            x0 = x0 < -1 ? -1 : x0 > 1 ? 1 : x0;
            if (sampler == NB_SAMPLER_DDIM) {
                double eps = (x[k] - sa * x0) / s1a;
                x[k] = (float)(sap * x0 + s1ap * eps);
            } else {
                double m = c0 * x0 + c1 * x[k];
                x[k] = (float)(i > 0 ? m + sigma * d->eps[k] : m);
            }
        }
    }
    return NB_OK;
}

nb_status nb_ddpm_sample(nb_ddpm *d, nb_sampler sampler, int steps, int n, uint64_t seed, float *out) {
    if (!d || !out || n < 1) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_sample: NULL out or n < 1");
    if (sampler != NB_SAMPLER_DDPM && sampler != NB_SAMPLER_DDIM)
        return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_sample: unknown sampler %d", (int)sampler);
    int T = d->cfg.timesteps;
    if (steps < 1 || steps > T)
        return nb_error(NB_ERR_INVALID_ARG, "sampling steps %d not in 1..%d", steps, T);
    if (d->ucfg.in_channels != d->ucfg.out_channels)
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: sampling needs out_channels == in_channels");
    TRY(reserve(d, n < SAMPLE_CHUNK ? n : SAMPLE_CHUNK));
    int *ts = malloc(sizeof(int) * (size_t)steps);
    if (!ts) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_ddpm_sample: out of memory");
    /* evenly spaced in [0, T-1], rounded (guided-diffusion's space_timesteps for one section) */
    for (int i = 0; i < steps; i++)
        ts[i] = steps == 1 ? T - 1 : (int)floor((double)i * (T - 1) / (steps - 1) + 0.5);
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 11;
    int64_t img = (int64_t)d->ucfg.in_channels * d->ucfg.image_size * d->ucfg.image_size;
    nb_status s = NB_OK;
    for (int i = 0; i < n && !s; i += SAMPLE_CHUNK) {
        int m = n - i < SAMPLE_CHUNK ? n - i : SAMPLE_CHUNK;
        s = sample_chunk(d, sampler, ts, steps, m, &rng, out + i * img);
    }
    free(ts);
    return s;
}
