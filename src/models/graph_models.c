/* Built-in small models recorded as graphs (include/nabla/graph_models.h): a training step of
 * an MLP or a small UNet recorded through the tape, for `nabla graph dump` and tests. The CLI
 * only parses and prints; building, recording and the model table live here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nabla/graph_models.h"
#include "nabla/nn_tape.h"
#include "nabla/nn_unet.h"

#define TRY(expr)                                                                              \
    do {                                                                                       \
        nb_status try_s_ = (expr);                                                             \
        if (try_s_ != NB_OK) return try_s_;                                                    \
    } while (0)

struct nb_graph_model {
    nb_tape *t;
    nb_unet *u;      /* unet: the model (owns nothing of the tape) */
    nb_graph *g;
    nb_tvar y, loss;
    nb_tvar p[6];    /* mlp: its parameters */
    nb_tvar emb;     /* unet: the timestep embedding, made before recording (a graph constant) */
};

typedef nb_status (*model_build)(nb_graph_model *m, uint64_t seed);

/* Deterministic data in [-1, 1) (splitmix64). */
static void fill(float *p, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = (float)((double)(z >> 40) / (double)(1ull << 23) - 1.0);
    }
}

/* Records x (input 0) -> f -> mse(y, target input 1) -> backward; f given as a callback. */
typedef nb_status (*model_fwd)(nb_graph_model *m, nb_tvar x, nb_tvar *y);
static nb_status record_step(nb_graph_model *m, int xnd, const int64_t *xs, int tnd, const int64_t *ts,
                             uint64_t seed, model_fwd f) {
    int64_t nx = 1, nt = 1;
    for (int k = 0; k < xnd; k++) nx *= xs[k];
    for (int k = 0; k < tnd; k++) nt *= ts[k];
    float *hx = malloc((size_t)(nx + nt) * sizeof(float));
    if (!hx) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_model_record: out of host memory");
    fill(hx, nx, seed + 101);
    fill(hx + nx, nt, seed + 202);
    nb_status s = nb_graph_record_begin(m->t);
    nb_tvar x, tgt;
    if (!s) s = nb_tape_input(m->t, xnd, xs, hx, 0, &x);
    if (!s) s = nb_tape_input(m->t, tnd, ts, hx + nx, 0, &tgt);
    if (!s) s = f(m, x, &m->y);
    if (!s) s = nb_tape_mse(m->t, m->y, tgt, &m->loss);
    if (!s) s = nb_tape_backward(m->t, m->loss);
    free(hx);
    if (nb_graph_recording(m->t)) { /* end it either way; the first error wins */
        nb_status e = nb_graph_record_end(m->t, &m->g);
        if (!s) s = e;
    }
    if (!s) s = nb_graph_output(m->g, m->y);
    return s;
}

/* ---- mlp ------------------------------------------------------------------------------------- */

enum { MLP_B = 64, MLP_IN = 32, MLP_H = 64, MLP_OUT = 8 };

/* h1 = relu(linear(x)); y = linear(silu(silu(linear(h1)) + h1)): a linear -> relu pair (one
 * node when compiled) and an elementwise chain silu -> add -> silu (one fused node) */
static nb_status mlp_fwd(nb_graph_model *m, nb_tvar x, nb_tvar *y) {
    nb_tvar h1, h;
    TRY(nb_tape_linear(m->t, x, m->p[0], m->p[1], &h1));
    TRY(nb_tape_relu(m->t, h1, &h1));
    TRY(nb_tape_linear(m->t, h1, m->p[2], m->p[3], &h));
    TRY(nb_tape_silu(m->t, h, &h));
    TRY(nb_tape_add(m->t, h, h1, &h));
    TRY(nb_tape_silu(m->t, h, &h));
    return nb_tape_linear(m->t, h, m->p[4], m->p[5], y);
}

static nb_status mlp_build(nb_graph_model *m, uint64_t seed) {
    static const char *names[6] = {"l1.w", "l1.b", "l2.w", "l2.b", "l3.w", "l3.b"};
    static const int64_t shapes[6][2] = {{MLP_H, MLP_IN}, {MLP_H, 0},  {MLP_H, MLP_H},
                                         {MLP_H, 0},      {MLP_OUT, MLP_H}, {MLP_OUT, 0}};
    static const int fan_in[3] = {MLP_IN, MLP_H, MLP_H};
    for (int k = 0; k < 6; k++) {
        TRY(nb_tape_param(m->t, names[k], shapes[k][1] ? 2 : 1, shapes[k], &m->p[k]));
        /* PyTorch's default: uniform(+-1/sqrt(fan_in)) for weights and biases */
        TRY(nb_tape_param_init_uniform(m->t, m->p[k], 1.0f / sqrtf((float)fan_in[k / 2]), seed + (uint64_t)k));
    }
    static const int64_t xs[2] = {MLP_B, MLP_IN}, ts[2] = {MLP_B, MLP_OUT};
    return record_step(m, 2, xs, 2, ts, seed, mlp_fwd);
}

/* ---- unet ------------------------------------------------------------------------------------ */

enum { UNET_N = 2, UNET_S = 16, UNET_C = 3 };

static nb_status unet_fwd(nb_graph_model *m, nb_tvar x, nb_tvar *y) { return nb_unet_forward_emb(m->u, x, m->emb, y); }

static nb_status unet_build(nb_graph_model *m, uint64_t seed) {
    static const char *const knobs[][2] = {
        {"image_size", "16"}, {"in_channels", "3"},  {"out_channels", "3"},           {"model_channels", "32"},
        {"channel_mult", "1,2"}, {"num_res_blocks", "1"}, {"attention_resolutions", "8"},
        {"num_head_channels", "32"}, {"conv_resample", "0"}, {"num_groups", "8"},
    };
    nb_unet_config c = nb_unet_config_reference();
    for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++) TRY(nb_unet_config_set(&c, knobs[k][0], knobs[k][1]));
    TRY(nb_unet_create(&c, m->t, &m->u));
    TRY(nb_unet_init(m->u, seed));
    static const float ts[UNET_N] = {10.0f, 500.0f};
    TRY(nb_tape_timestep_embedding(m->t, UNET_N, ts, c.model_channels, 10000.0f, &m->emb));
    static const int64_t xs[4] = {UNET_N, UNET_C, UNET_S, UNET_S};
    return record_step(m, 4, xs, 4, xs, seed, unet_fwd);
}

/* ---- the table ------------------------------------------------------------------------------- */

static const struct {
    const char *name, *help;
    model_build build;
} models[] = {
    {"mlp", "x [64,32] -> linear 64 -> relu = h -> linear 64 -> silu -> + h -> silu -> linear 8, mse, backward",
     mlp_build},
    {"unet", "nabla's UNet at 16x16x3 (32 channels, mult 1,2, attention at 8), N=2, mse, backward", unet_build},
};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

const char *nb_graph_model_list(int i, const char **description) {
    if (i < 0 || i >= N_MODELS) return NULL;
    if (description) *description = models[i].help;
    return models[i].name;
}

nb_status nb_graph_model_record(const char *name, nb_device *dev, uint64_t seed, nb_graph_model **out) {
    if (!name || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_model_record: name or out is NULL");
    *out = NULL;
    int k = 0;
    while (k < N_MODELS && strcmp(models[k].name, name)) k++;
    if (k == N_MODELS) return nb_error(NB_ERR_NOT_FOUND, "graph model '%s': unknown (mlp, unet)", name);
    nb_graph_model *m = calloc(1, sizeof *m);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_model_record: out of host memory");
    nb_status s = dev ? nb_tape_create_on(dev, &m->t) : nb_tape_create(&m->t);
    if (!s) s = models[k].build(m, seed);
    if (s) {
        nb_graph_model_free(m);
        return s;
    }
    *out = m;
    return NB_OK;
}

nb_graph *nb_graph_model_graph(const nb_graph_model *m) { return m ? m->g : NULL; }
nb_tape *nb_graph_model_tape(const nb_graph_model *m) { return m ? m->t : NULL; }
nb_tvar nb_graph_model_prediction(const nb_graph_model *m) { return m ? m->y : NB_TVAR_NONE; }
nb_tvar nb_graph_model_loss(const nb_graph_model *m) { return m ? m->loss : NB_TVAR_NONE; }

void nb_graph_model_free(nb_graph_model *m) {
    if (!m) return;
    nb_graph_free(m->g);
    nb_unet_free(m->u);
    nb_tape_free(m->t);
    free(m);
}
