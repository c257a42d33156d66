/* DDPM on the tape's UNet: linear beta schedule, epsilon-prediction MSE training with AdamW,
 * gradient-norm clipping and a parameter EMA; DDPM (ancestral) and DDIM (eta = 0) samplers over
 * evenly spaced timesteps. Runs on the tape's device: the small elementwise steps (noise, x_t,
 * grad norm, clip, EMA, sampler updates) are kernels in ddpm_kernels.c with a CPU reference each
 * (see include/nabla/nn_unet.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nabla/env.h"
#include "nabla/log.h"
#include "nabla/nn_optim.h"
#include "nabla/nn_unet.h"
#include "nabla/tensor.h"
#include "models/ddpm_internal.h"
#include "nn/common/nn_common.h"
#include "graph/op_rows.h"

#define TRY(expr)                                                                              \
    do {                                                                                       \
        nb_status try_s_ = (expr);                                                             \
        if (try_s_ != NB_OK) return try_s_;                                                    \
    } while (0)

enum { PH_START, PH_INPUT, PH_FORWARD, PH_BACKWARD, PH_OPT, PH_COUNT };

struct nb_ddpm {
    nb_ddpm_config cfg;
    nb_unet *u;
    nb_unet_config ucfg;
    nb_tape *t;
    nb_ddpm_dev k;          /* device + kernels */
    double *betas, *acp;
    float *params, *grads;  /* the tape's buffers (device addresses on CUDA) */
    int64_t np;
    nb_buffer *ema_buf, *stats_buf, *x_buf;
    float *ema, *stats, *x; /* on the device; stats: NB_DDPM_STATS floats */
    int64_t x_cap;          /* floats of x_buf */
    int slot;               /* stats slot the next grad norm accumulates into */
    int grads_dirty;        /* a step failed between backward and AdamW: zero them first */
    uint64_t step;          /* train steps made (the noise generator's stream) */
    nb_tensor *tp, *tg;
    nb_adam *opt;
    uint64_t rng;
    float *tsteps, *qa, *qb; /* host scratch for cap images */
    int cap;
    int profile;
    nb_event *ev[PH_COUNT];
    nb_ddpm_profile prof;
    /* CUDA graph of the step's forward + backward (nb_ddpm_set_cuda_graphs) */
    int graphs;              /* wanted (CUDA; off after a failed capture) */
    nb_device_graph *graph;
    int graph_n, graph_prec; /* batch and tape precision of the capture */
    uint64_t graph_resets;   /* the tape's reset count right after the captured step's reset */
    uint64_t graph_frees;    /* the device's buffer frees at the capture */
    nb_tvar gx0, gx, gtarget, gl; /* the captured step's values (their memory is the graph's) */
    int warm, warm_n;        /* ordinary steps in a row with batch warm_n and no foreign reset */
    int captures;            /* graphs captured (nb_ddpm_graph_captures) */
    uint64_t warm_resets;
    nb_buffer *ts_buf;       /* the timesteps on the device (the graph reads them there) */
    float *ts_dev;
    int ts_cap;
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

void nb_ddpm_free(nb_ddpm *d) {
    if (!d) return;
    nb_adam_destroy(d->opt);
    nb_tensor_free(d->tp);
    nb_tensor_free(d->tg);
    if (d->ema_buf) nb_buffer_release(d->ema_buf);
    if (d->stats_buf) nb_buffer_release(d->stats_buf);
    if (d->x_buf) nb_buffer_release(d->x_buf);
    if (d->ts_buf) nb_buffer_release(d->ts_buf);
    nb_device_graph_destroy(d->graph);
    for (int i = 0; i < PH_COUNT; i++)
        if (d->ev[i]) nb_event_destroy(d->ev[i]);
    nb_ddpm_dev_release(&d->k);
    free(d->betas), free(d->acp), free(d->tsteps), free(d->qa), free(d->qb);
    free(d);
}

static nb_status dev_alloc(nb_ddpm *d, int64_t count, nb_buffer **buf, float **p) {
    TRY(nb_buffer_alloc(d->k.dev, sizeof(float) * (size_t)(count > 0 ? count : 1), buf));
    *p = nb_buffer_ptr(*buf);
    return NB_OK;
}

nb_status nb_ddpm_create(nb_unet *u, const nb_ddpm_config *cfg, nb_ddpm **out) {
    if (!u || !cfg || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_create: NULL argument");
    if (cfg->timesteps < 1 || cfg->timesteps > 100000)
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: timesteps %d not in 1..100000", cfg->timesteps);
    if (!(cfg->beta_start > 0) || !(cfg->beta_end >= cfg->beta_start) || !(cfg->beta_end * 1000.0 / cfg->timesteps < 1))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: need 0 < beta_start <= beta_end and scaled betas < 1");
    /* each value named with its allowed range (NaN and infinity fail every test) */
    if (!(cfg->lr > 0 && cfg->lr <= 10))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: need lr > 0 and <= 10, got %g", (double)cfg->lr);
    if (!(cfg->weight_decay >= 0 && cfg->weight_decay <= 10))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: weight_decay %g not in [0, 10]", (double)cfg->weight_decay);
    if (!(cfg->grad_clip >= 0 && cfg->grad_clip < INFINITY))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: grad_clip %g must be finite and >= 0 (0 = off)",
                        (double)cfg->grad_clip);
    if (!(cfg->ema_decay >= 0 && cfg->ema_decay < 1))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: ema_decay %g not in [0, 1) (0 = no EMA)", (double)cfg->ema_decay);
    nb_ddpm *d = calloc(1, sizeof *d);
    if (!d) return nb_error(NB_ERR_OUT_OF_MEMORY, "DDPM: out of memory");
    d->cfg = *cfg;
    d->u = u;
    d->t = nb_unet_tape(u);
    d->rng = cfg->seed * 0x2545F4914F6CDD1Dull + 7;
    d->grads_dirty = 1; /* the first step zeroes whatever an earlier backward left */
    if (nb_env_cuda_graph(&d->graphs) != NB_OK) /* a bad $NABLA_CUDA_GRAPH: said, graphs on */
        NB_LOG_W("%s; using 1", nb_last_error());
    nb_status s = nb_unet_get_config(u, &d->ucfg);
    if (!s) s = nb_ddpm_dev_init(&d->k, nb_tape_device(d->t));
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
    if (!s) s = nb_tensor_wrap(d->k.dev, NB_F32, 1, &d->np, NULL, d->params, &d->tp);
    if (!s) s = nb_tensor_wrap(d->k.dev, NB_F32, 1, &d->np, NULL, d->grads, &d->tg);
    if (!s) {
        nb_adam_config ac = nb_adam_config_default();
        ac.lr = cfg->lr;
        ac.weight_decay = cfg->weight_decay;
        ac.decoupled = 1;
        s = nb_adam_create(d->k.dev, d->np, &ac, &d->opt);
    }
    if (!s) s = dev_alloc(d, NB_DDPM_STATS, &d->stats_buf, &d->stats);
    if (!s) {
        float z[NB_DDPM_STATS] = {0};
        s = nb_ddpm_put(&d->k, d->stats, z, NB_DDPM_STATS);
    }
    if (!s && cfg->ema_decay > 0) {
        s = dev_alloc(d, d->np, &d->ema_buf, &d->ema);
        if (!s) s = nb_ddpm_copy(&d->k, d->ema, d->params, d->np);
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
    free(d->tsteps), free(d->qa), free(d->qb);
    d->tsteps = malloc(sizeof(float) * (size_t)n);
    d->qa = malloc(sizeof(float) * (size_t)n);
    d->qb = malloc(sizeof(float) * (size_t)n);
    d->cap = n;
    if (!d->tsteps || !d->qa || !d->qb) {
        d->cap = 0;
        return nb_error(NB_ERR_OUT_OF_MEMORY, "DDPM: out of memory for a batch of %d", n);
    }
    return NB_OK;
}

static nb_status phase(nb_ddpm *d, int ph) {
    if (!d->profile) return NB_OK;
    return nb_event_record(d->ev[ph], nb_device_stream(d->k.dev));
}

static nb_status end_profile(nb_ddpm *d) {
    if (!d->profile) return NB_OK;
    TRY(nb_event_synchronize(d->ev[PH_OPT]));
    float ms[PH_COUNT];
    for (int i = 1; i < PH_COUNT; i++) TRY(nb_event_elapsed_ms(d->ev[i - 1], d->ev[i], &ms[i]));
    d->prof.input_ms += ms[PH_INPUT];
    d->prof.forward_ms += ms[PH_FORWARD];
    d->prof.backward_ms += ms[PH_BACKWARD];
    d->prof.optimizer_ms += ms[PH_OPT];
    d->prof.steps++;
    return NB_OK;
}

static nb_status diverged(void) {
    return nb_error(NB_ERR_INVALID_ARG, "DDPM: gradient norm is not finite (diverged; lower --lr)");
}

static uint64_t device_frees(nb_device *dev) {
    nb_mem_stats st;
    return nb_device_mem_stats(dev, &st) == NB_OK ? st.buffer_frees : UINT64_MAX;
}

/* The step's tape work: inputs, noise and x_t, UNet forward, MSE, backward (*l: the loss value).
 * capture: the forward and backward are recorded into d->graph (see nb_ddpm_set_cuda_graphs)
 * and launched once captured; a failed capture comes back as an error with nothing run past the
 * noise (the caller records the step again without one). */
static nb_status record_step(nb_ddpm *d, const float *x0, int n, uint32_t key, int capture, nb_tvar *l) {
    int S = d->ucfg.image_size, C = d->ucfg.in_channels;
    int64_t img = (int64_t)C * S * S, shape[4] = {n, C, S, S};
    nb_tvar x0v, x, target, pred;
    TRY(nb_tape_reset(d->t));
    if (d->grads_dirty) TRY(nb_tape_zero_grad(d->t));
    TRY(nb_tape_input(d->t, 4, shape, x0, 0, &x0v));
    TRY(nb_tape_new_value(d->t, 4, shape, 0, &x));
    TRY(nb_tape_new_value(d->t, 4, shape, 0, &target));
    float *x0p, *xp, *ep;
    TRY(nb_tape_data(d->t, x0v, &x0p, NULL));
    TRY(nb_tape_data(d->t, x, &xp, NULL));
    TRY(nb_tape_data(d->t, target, &ep, NULL));
    TRY(nb_ddpm_qsample(&d->k, x0p, ep, xp, img, n, key, d->qa, d->qb));
    TRY(phase(d, PH_INPUT));
    if (d->k.cuda) { /* the timesteps from device memory: a graph replays whatever is there */
        if (n > d->ts_cap) {
            if (d->ts_buf) nb_buffer_release(d->ts_buf);
            d->ts_buf = NULL, d->ts_cap = 0;
            TRY(dev_alloc(d, n, &d->ts_buf, &d->ts_dev));
            d->ts_cap = n;
        }
        TRY(nb_memcpy_h2d(d->k.dev, d->ts_dev, d->tsteps, sizeof(float) * (size_t)n));
    }
    uint64_t frees = capture ? device_frees(d->k.dev) : 0;
    if (capture) TRY(nb_device_graph_capture_begin(d->k.dev));
    if (d->k.cuda && n <= NB_TAPE_TEMB_MAX) nb_tape_set_device_timesteps(d->t, d->ts_dev);
    nb_status s = nb_unet_forward(d->u, x, d->tsteps, &pred);
    nb_tape_set_device_timesteps(d->t, NULL);
    if (!s) s = nb_tape_mse(d->t, pred, target, l);
    if (!s) s = phase(d, PH_FORWARD);
    d->grads_dirty = 1;
    if (!s) s = nb_tape_backward(d->t, *l);
    if (!capture) return s;
    nb_device_graph *g = NULL;
    nb_status e = nb_device_graph_capture_end(d->k.dev, &g);
    if (s || e) {
        nb_device_graph_destroy(g);
        return s ? s : e;
    }
    nb_status ls = nb_device_graph_launch(g);
    if (ls || device_frees(d->k.dev) != frees) { /* or memory changed hands while capturing */
        nb_device_graph_destroy(g);
        return ls;
    }
    d->graph = g;
    d->captures++;
    d->graph_n = n;
    d->graph_prec = nb_tape_get_precision(d->t);
    d->graph_resets = d->t->resets;
    d->graph_frees = frees;
    d->gx0 = x0v, d->gx = x, d->gtarget = target, d->gl = *l;
    return NB_OK;
}

/* A replay of the captured step with new inputs: x0, noise and x_t, timesteps, then the graph. */
static nb_status replay_step(nb_ddpm *d, const float *x0, int n, uint32_t key) {
    int64_t img = (int64_t)d->ucfg.in_channels * d->ucfg.image_size * d->ucfg.image_size;
    float *x0p, *xp, *ep;
    TRY(nb_tape_data(d->t, d->gx0, &x0p, NULL));
    TRY(nb_tape_data(d->t, d->gx, &xp, NULL));
    TRY(nb_tape_data(d->t, d->gtarget, &ep, NULL));
    if (d->grads_dirty) TRY(nb_tape_zero_grad(d->t));
    TRY(nb_memcpy_h2d(d->k.dev, x0p, x0, sizeof(float) * (size_t)(n * img)));
    TRY(nb_ddpm_qsample(&d->k, x0p, ep, xp, img, n, key, d->qa, d->qb));
    TRY(nb_memcpy_h2d(d->k.dev, d->ts_dev, d->tsteps, sizeof(float) * (size_t)n));
    d->grads_dirty = 1;
    return nb_device_graph_launch(d->graph);
}

static int graph_usable(nb_ddpm *d) {
    return d->k.cuda && d->graphs && !d->profile && !d->t->prof_level;
}

nb_status nb_ddpm_set_cuda_graphs(nb_ddpm *d, int on) {
    if (!d) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_set_cuda_graphs: NULL argument");
    d->graphs = on != 0;
    if (!on) {
        nb_device_graph_destroy(d->graph);
        d->graph = NULL;
    }
    d->warm = 0;
    return NB_OK;
}

int nb_ddpm_graph_captures(const nb_ddpm *d) { return d ? d->captures : 0; }

int nb_ddpm_graph_state(const nb_ddpm *d) {
    return !d || !d->k.cuda || !d->graphs ? 0 : d->graph ? 2 : 1;
}

nb_status nb_ddpm_train_step(nb_ddpm *d, const float *x0, int n, float *loss, float *grad_norm) {
    if (!d || !x0 || n < 1) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_train_step: NULL data or n < 1");
    if (d->ucfg.in_channels != d->ucfg.out_channels)
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: epsilon prediction needs out_channels == in_channels (%d vs %d)",
                        d->ucfg.out_channels, d->ucfg.in_channels);
    TRY(reserve(d, n));
    int S = d->ucfg.image_size, C = d->ucfg.in_channels;
    int64_t img = (int64_t)C * S * S;
    if ((int64_t)n * img >= ((int64_t)1 << 30))
        return nb_error(NB_ERR_INVALID_ARG, "DDPM: a batch of %d images of %lld values is too large", n,
                        (long long)img);
    for (int i = 0; i < n; i++) {
        int t = (int)(next_u64(&d->rng) % (uint64_t)d->cfg.timesteps);
        d->tsteps[i] = (float)t;
        d->qa[i] = (float)sqrt(d->acp[t]);
        d->qb[i] = (float)sqrt(1.0 - d->acp[t]);
    }
    TRY(phase(d, PH_START));
    uint32_t key = nb_nn_rng_key(d->cfg.seed, (uint32_t)d->step);
    d->step++;
    nb_tvar l;
    float *lp;
    int usable = graph_usable(d);
    if (d->graph && usable && n == d->graph_n && d->t->resets == d->graph_resets &&
        (int)nb_tape_get_precision(d->t) == d->graph_prec && device_frees(d->k.dev) == d->graph_frees) {
        TRY(replay_step(d, x0, n, key));
        l = d->gl;
    } else {
        nb_device_graph_destroy(d->graph);
        d->graph = NULL;
        if (n != d->warm_n || d->t->resets != d->warm_resets) d->warm = 0, d->warm_n = n;
        int capture = usable && d->warm >= 2;
        nb_status s = record_step(d, x0, n, key, capture, &l);
        if (s && capture) { /* cannot be captured: record it plainly, and no graphs from now on */
            NB_LOG_W("DDPM: CUDA graph capture failed, running without graphs: %s", nb_last_error());
            d->graphs = 0;
            s = record_step(d, x0, n, key, 0, &l);
        }
        TRY(s);
        d->warm++;
        d->warm_resets = d->t->resets;
    }
    TRY(nb_tape_data(d->t, l, &lp, NULL));
    TRY(phase(d, PH_BACKWARD));
    TRY(nb_ddpm_sumsq(&d->k, d->grads, d->np, d->stats + d->slot));
    if (!d->k.cuda && !isfinite(d->stats[d->slot])) { /* the CPU can check before the update */
        d->stats[d->slot] = 0;
        return diverged();
    }
    TRY(nb_ddpm_clip(&d->k, d->grads, d->np, d->stats, d->slot, d->cfg.grad_clip, lp));
    d->slot ^= 1;
    TRY(nb_adam_step(d->opt, d->tp, d->tg, 1));
    d->grads_dirty = 0;
    if (d->ema) {
        /* warm-up (TF's ExponentialMovingAverage with num_updates): the EMA forgets the initial
         * weights quickly, so a short run's EMA is not shrunk towards the zero-initialised layers */
        double ns = (double)nb_adam_steps(d->opt), w = (1.0 + ns) / (10.0 + ns);
        float a = (float)(d->cfg.ema_decay < w ? d->cfg.ema_decay : w);
        TRY(nb_ddpm_ema_update(&d->k, d->ema, d->params, d->np, a));
    }
    TRY(phase(d, PH_OPT));
    TRY(end_profile(d));
    if (grad_norm || loss) {
        float st[NB_DDPM_STATS];
        TRY(nb_ddpm_get(&d->k, st, d->stats, NB_DDPM_STATS));
        if (grad_norm) *grad_norm = st[NB_DDPM_LAST_NORM];
        if (st[NB_DDPM_BAD]) return diverged();
    }
    if (loss) TRY(nb_tape_read(d->t, l, loss, 1));
    return NB_OK;
}

nb_status nb_ddpm_read_stats(nb_ddpm *d, nb_ddpm_stats *out) {
    if (!d || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_read_stats: NULL argument");
    float st[NB_DDPM_STATS];
    TRY(nb_ddpm_get(&d->k, st, d->stats, NB_DDPM_STATS));
    out->steps = (int64_t)st[NB_DDPM_COUNT];
    out->mean_loss = st[NB_DDPM_COUNT] > 0 ? st[NB_DDPM_LOSS_SUM] / st[NB_DDPM_COUNT] : 0.0;
    out->last_grad_norm = st[NB_DDPM_LAST_NORM];
    out->max_grad_norm = st[NB_DDPM_MAX_NORM];
    int bad = st[NB_DDPM_BAD] != 0;
    st[NB_DDPM_COUNT] = st[NB_DDPM_LOSS_SUM] = st[NB_DDPM_MAX_NORM] = st[NB_DDPM_BAD] = 0;
    TRY(nb_ddpm_put(&d->k, d->stats, st, NB_DDPM_STATS));
    return bad ? diverged() : NB_OK;
}

nb_status nb_ddpm_set_profile(nb_ddpm *d, int on) {
    if (!d) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_set_profile: NULL argument");
    for (int i = 0; on && i < PH_COUNT; i++)
        if (!d->ev[i]) TRY(nb_event_create(d->k.dev, &d->ev[i]));
    d->profile = on != 0;
    memset(&d->prof, 0, sizeof d->prof);
    return nb_unet_set_profile(d->u, on);
}

nb_status nb_ddpm_get_profile(const nb_ddpm *d, nb_ddpm_profile *out) {
    if (!d || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_get_profile: NULL argument");
    *out = d->prof;
    return NB_OK;
}

nb_status nb_ddpm_ema_params(nb_ddpm *d, float **out) {
    if (!d || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_ema_params: NULL argument");
    *out = d->ema ? d->ema : d->params;
    return NB_OK;
}

nb_status nb_ddpm_read_ema(nb_ddpm *d, float *host, int64_t count) {
    if (!d || !host) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_read_ema: NULL argument");
    if (count != d->np)
        return nb_error(NB_ERR_SHAPE, "nb_ddpm_read_ema: count %lld does not match the %lld parameters",
                        (long long)count, (long long)d->np);
    if (!d->ema) return nb_tape_read_params(d->t, host, count);
    return nb_ddpm_get(&d->k, host, d->ema, count);
}

nb_status nb_ddpm_use_ema(nb_ddpm *d) {
    if (!d) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_use_ema: NULL argument");
    return d->ema ? nb_ddpm_copy(&d->k, d->params, d->ema, d->np) : NB_OK;
}

nb_status nb_ddpm_save(nb_ddpm *d, const char *path) {
    if (!d || !path) return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_save: NULL argument");
    float *h = malloc(sizeof(float) * (size_t)d->np);
    if (!h) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_ddpm_save: out of host memory");
    nb_status s = nb_ddpm_read_ema(d, h, d->np);
    if (!s) s = nb_unet_save(d->u, h, path);
    free(h);
    return s;
}

/* The sampler's noise generator: keyed by (seed, step), counters = image * img + element, so the
 * numbers do not depend on the chunk size. */
static uint32_t sample_key(uint64_t seed, int step) {
    return nb_nn_rng_key(seed ^ 0xD1B54A32D192ED03ull, (uint32_t)step);
}

static nb_status sample_chunk(nb_ddpm *d, nb_sampler sampler, const int *ts, int steps, int i0, int n,
                              uint64_t seed, float *out) {
    int S = d->ucfg.image_size, C = d->ucfg.in_channels;
    int64_t img = (int64_t)C * S * S, shape[4] = {n, C, S, S}, cnt = img * n;
    uint32_t base = (uint32_t)((int64_t)i0 * img);
    TRY(nb_ddpm_randn(&d->k, d->x, cnt, sample_key(seed, 0), base));
    for (int i = steps - 1; i >= 0; i--) {
        int t = ts[i];
        double ab = d->acp[t], abp = i > 0 ? d->acp[ts[i - 1]] : 1.0;
        for (int j = 0; j < n; j++) d->tsteps[j] = (float)t;
        nb_tvar xv, ev;
        float *xp, *e;
        TRY(nb_tape_reset(d->t));
        TRY(nb_tape_new_value(d->t, 4, shape, 0, &xv));
        TRY(nb_tape_data(d->t, xv, &xp, NULL));
        TRY(nb_ddpm_copy(&d->k, xp, d->x, cnt));
        TRY(nb_unet_forward(d->u, xv, d->tsteps, &ev));
        TRY(nb_tape_data(d->t, ev, &e, NULL));
        double beta = 1 - ab / abp;
        nb_ddpm_update_args a;
        memset(&a, 0, sizeof a);
        a.mode = sampler == NB_SAMPLER_DDIM ? 0 : i > 0 ? 1 : 2;
        a.sa = (float)sqrt(ab), a.s1a = (float)sqrt(1 - ab);
        a.sap = (float)sqrt(abp), a.s1ap = (float)sqrt(1 - abp);
        a.c0 = (float)(sqrt(abp) * beta / (1 - ab));
        a.c1 = (float)(sqrt(1 - beta) * (1 - abp) / (1 - ab));
        a.sigma = (float)sqrt(beta * (1 - abp) / (1 - ab));
        a.key = sample_key(seed, steps - i);
        a.base = base;
        TRY(nb_ddpm_update(&d->k, d->x, e, cnt, &a));
    }
    return nb_ddpm_get(&d->k, out, d->x, cnt);
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
    int64_t img = (int64_t)d->ucfg.in_channels * d->ucfg.image_size * d->ucfg.image_size;
    if ((int64_t)n * img >= ((int64_t)1 << 30))
        return nb_error(NB_ERR_INVALID_ARG, "nb_ddpm_sample: %d images of %lld values are too many", n,
                        (long long)img);
    int chunk = d->k.cuda ? 64 : 16;
    if (chunk > n) chunk = n;
    TRY(reserve(d, chunk));
    if (d->x_cap < chunk * img) {
        if (d->x_buf) nb_buffer_release(d->x_buf);
        d->x_buf = NULL, d->x_cap = 0;
        TRY(dev_alloc(d, chunk * img, &d->x_buf, &d->x));
        d->x_cap = chunk * img;
    }
    int *ts = malloc(sizeof(int) * (size_t)steps);
    if (!ts) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_ddpm_sample: out of memory");
    /* evenly spaced in [0, T-1], rounded (guided-diffusion's space_timesteps for one section) */
    for (int i = 0; i < steps; i++)
        ts[i] = steps == 1 ? T - 1 : (int)floor((double)i * (T - 1) / (steps - 1) + 0.5);
    nb_status s = NB_OK;
    for (int i = 0; i < n && !s; i += chunk) {
        int m = n - i < chunk ? n - i : chunk;
        s = sample_chunk(d, sampler, ts, steps, i, m, seed, out + i * img);
    }
    free(ts);
    return s;
}
