/* The grid model of the image-fitting trainer (fit_image.h): the reference example's model in the
 * kernel language (examples/image_model.nb, embedded as models/image_model_nb.c by
 * tools/embed_nb.py): a 33x33x14 feature grid, bilinear features + the pixel's cell position ->
 * MLP of three 16x16 layers (lib/nn.nb: tensor cores on CUDA) -> RGB.
 *
 * A training step is two launches on CUDA: the generated backward kernel of image_loss over the
 * batch (every pixel by default; it recomputes the forward and adds dL/dgrid and dL/dw into one
 * flat gradient buffer) and Adam over the flat parameters (which also zeroes the gradients).
 * With a batch smaller than the image, a third launch samples that many random positions first.
 *
 * Parameters, gradients (and Adam's state) are one contiguous f32 buffer each:
 *   params [33*33*14 + 768] = grid [33, 33, 14] | w [768] (three row-major 16x16 matrices) */
#include <stdlib.h>

#include "core/util.h"
#include "models/fit_image_internal.h"
#include "nabla/image.h"
#include "nabla/module.h"
#include "nabla/nn_optim.h"

extern const char nb_models_image_model_nb[]; /* image_model_nb.c */

enum { GRID = 33, FEAT = 14, NGRID = GRID * GRID * FEAT, NW = 3 * 256, NPAR = NGRID + NW };

struct nb_fit_grid {
    nb_module *mod;
    nb_func *loss, *model;
    nb_tensor *params, *grads;        /* f32 [NPAR] */
    nb_tensor *grid, *w, *ggrid, *gw; /* views: [33, 33, 14], [768] */
    nb_tensor *pixels;                /* every pixel: f32 [HW, 3] (a view of the image) */
    nb_tensor *x, *target;            /* sampled batch: f32 [B, 2], [B, 3] (when B < HW) */
    nb_tensor *dout;                  /* f32 scalar 1/B: dL/d(per-sample loss) for the mean */
    nb_tensor *lossv;                 /* f32 [B]: per-sample squared error of the last step */
    nb_adam *opt;
};

void nb_fit_grid_free(nb_fit_grid *g) {
    if (!g) return;
    nb_tensor *ts[] = {g->params, g->grads, g->grid, g->w, g->ggrid, g->gw,
                       g->pixels, g->x,     g->target, g->dout, g->lossv};
    for (size_t i = 0; i < NB_ARRAY_LEN(ts); i++) nb_tensor_free(ts[i]);
    nb_adam_destroy(g->opt);
    nb_module_free(g->mod);
    free(g);
}

/* Initial parameters: grid features uniform in [-1, 1] x 0.1; weights uniform in +-sqrt(6/16)
 * (He, for ReLU layers). */
static void grid_init_params(float *p, uint64_t seed) {
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (int i = 0; i < NPAR; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(r >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0; /* [-1, 1) */
        p[i] = i < NGRID ? (float)(0.1 * u) : (float)(0.6123724 * u);
    }
}

static nb_status grid_views(nb_fit_grid *g) {
    int64_t sg[3] = {GRID, GRID, FEAT};
    for (int k = 0; k < 2; k++) {
        nb_tensor *src = k ? g->grads : g->params, *flat = NULL;
        NB_TRY(nb_tensor_slice(src, 0, 0, NGRID, 1, &flat));
        nb_status st = nb_tensor_reshape(flat, 3, sg, k ? &g->ggrid : &g->grid);
        nb_tensor_free(flat);
        NB_TRY(st);
        NB_TRY(nb_tensor_slice(src, 0, NGRID, NPAR, 1, k ? &g->gw : &g->w));
    }
    return NB_OK;
}

/* ---- the phases of a step ---- */

static nb_status ph_sample(nb_fit_image *f, uint32_t step) {
    nb_fit_grid *g = f->grid;
    return g->x ? nb_image_sample(f->img, f->cfg.seed, step, g->x, g->target) : NB_OK;
}

/* The fused forward + backward of image_loss over the batch (one kernel, which also writes the
 * per-sample squared errors into lossv [B]). */
static nb_status ph_fwd_bwd(nb_fit_image *f, uint32_t step) {
    (void)step;
    nb_fit_grid *g = f->grid;
    nb_tensor *x = g->x ? g->x : f->coords, *t = g->target ? g->target : g->pixels;
    nb_call *c = NULL;
    NB_TRY(nb_call_begin(g->loss, &c));
    nb_status st = nb_call_set_mode(c, NB_MODE_BWD);
    if (st == NB_OK) st = nb_call_arg(c, 0, g->grid);
    if (st == NB_OK) st = nb_call_arg(c, 1, g->w);
    if (st == NB_OK) st = nb_call_arg(c, 2, x);
    if (st == NB_OK) st = nb_call_arg(c, 3, t);
    if (st == NB_OK) st = nb_call_grad(c, 0, g->ggrid);
    if (st == NB_OK) st = nb_call_grad(c, 1, g->gw);
    if (st == NB_OK) st = nb_call_dout(c, g->dout);
    if (st == NB_OK) st = nb_call_result(c, g->lossv);
    if (st != NB_OK) {
        nb_call_free(c);
        return st;
    }
    return nb_call_run(c, NULL);
}

static nb_status ph_adam(nb_fit_image *f, uint32_t step) {
    (void)step;
    return nb_adam_step(f->grid->opt, f->grid->params, f->grid->grads, 1);
}

nb_status nb_fit_grid_create(nb_fit_image *f) {
    nb_fit_grid *g = calloc(1, sizeof *g);
    if (!g) return nb_error(NB_ERR_OUT_OF_MEMORY, "fit-image: out of memory");
    f->grid = g;
    nb_device *dev = f->dev;
    int64_t HW = (int64_t)f->W * f->H;
    /* The model is nabla's own, its indices clamped in code: it runs without bounds checks, which
     * cost 55% of its training step on an H200 (0.135 -> 0.21 ms/step; docs/PERF.md). User modules
     * stay checked unless they ask (nb_module_options.unchecked). */
    nb_module_options mo = {0};
    mo.unchecked = 1;
    NB_TRY(nb_module_load_source(dev, "image_model.nb", nb_models_image_model_nb, &mo, &g->mod));
    NB_TRY(nb_module_func(g->mod, "image_loss", &g->loss));
    NB_TRY(nb_module_func(g->mod, "image_model", &g->model));
    float *p = malloc(sizeof(float) * NPAR);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "fit-image: out of memory");
    grid_init_params(p, f->cfg.seed);
    int64_t sp[1] = {NPAR};
    nb_status st = nb_tensor_from_host(dev, NB_F32, 1, sp, p, &g->params);
    free(p);
    NB_TRY(st);
    NB_TRY(nb_tensor_zeros(dev, NB_F32, 1, sp, &g->grads));
    NB_TRY(grid_views(g));
    int64_t s3[2] = {HW, 3};
    NB_TRY(nb_tensor_reshape(f->img, 2, s3, &g->pixels));
    if (f->batch < HW) {
        int64_t sx[2] = {f->batch, 2}, st3[2] = {f->batch, 3};
        NB_TRY(nb_tensor_zeros(dev, NB_F32, 2, sx, &g->x));
        NB_TRY(nb_tensor_zeros(dev, NB_F32, 2, st3, &g->target));
    }
    int64_t sb[1] = {f->batch};
    NB_TRY(nb_tensor_zeros(dev, NB_F32, 1, sb, &g->lossv));
    float inv = 1.0f / (float)f->batch;
    NB_TRY(nb_tensor_from_host(dev, NB_F32, 0, NULL, &inv, &g->dout));
    nb_adam_config ac = {f->cfg.lr, 0.9f, 0.99f, 1e-15f, 0.0f, 0};
    NB_TRY(nb_adam_create(dev, NPAR, &ac, &g->opt));
    f->enc_params = NGRID;
    f->mlp_params = NW;
    f->n_phases = 3;
    f->phase_name[0] = "sample", f->phase[0] = ph_sample;
    f->phase_name[1] = "fwd+bwd", f->phase[1] = ph_fwd_bwd;
    f->phase_name[2] = "adam", f->phase[2] = ph_adam;
    f->profile_note = NULL;
    return NB_OK;
}

/* The last step's per-sample squared errors (image_loss's results), as the mean per channel. */
nb_status nb_fit_grid_read_loss(nb_fit_image *f, double *out) {
    nb_fit_grid *g = f->grid;
    *out = 0; /* (lossv is zeros before the first step) */
    float *l = malloc(sizeof(float) * (size_t)f->batch);
    if (!l) return nb_error(NB_ERR_OUT_OF_MEMORY, "fit-image: out of memory");
    nb_status st = nb_tensor_to_host(g->lossv, l, sizeof(float) * (size_t)f->batch);
    double sum = 0;
    for (int64_t i = 0; st == NB_OK && i < f->batch; i++) sum += l[i];
    free(l);
    if (st == NB_OK) *out = sum / (3.0 * (double)f->batch);
    return st;
}

/* image_model over every pixel into f->pred (one call). */
nb_status nb_fit_grid_eval(nb_fit_image *f) {
    nb_fit_grid *g = f->grid;
    nb_call *c = NULL;
    NB_TRY(nb_call_begin(g->model, &c));
    nb_status st = nb_call_arg(c, 0, g->grid);
    if (st == NB_OK) st = nb_call_arg(c, 1, g->w);
    if (st == NB_OK) st = nb_call_arg(c, 2, f->coords);
    if (st == NB_OK) st = nb_call_result(c, f->pred);
    if (st != NB_OK) {
        nb_call_free(c);
        return st;
    }
    return nb_call_run(c, NULL);
}
