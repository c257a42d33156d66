/* `nabla fit-image --model grid`: the reference example's model written in the kernel language
 * (examples/image_model.nb, embedded as cli/image_model_nb.c by tools/embed_nb.py): a 33x33x14
 * feature grid, bilinear features + the pixel's cell position -> MLP of three 16x16 layers
 * (lib/nn.nb: tensor cores on CUDA) -> RGB.
 *
 * A training step is two launches on CUDA: the generated backward kernel of image_loss over the
 * batch (every pixel by default; it recomputes the forward and adds dL/dgrid and dL/dw into one
 * flat gradient buffer) and Adam over the flat parameters (which also zeroes the gradients).
 * With --batch N smaller than the image, a third launch samples N random positions first.
 *
 * Parameters, gradients (and Adam's state) are one contiguous f32 buffer each:
 *   params [33*33*14 + 768] = grid [33, 33, 14] | w [768] (three row-major 16x16 matrices) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "nabla/image.h"
#include "nabla/nabla.h"
#include "nabla/nn_optim.h"

extern const char nb_cli_image_model_nb[]; /* image_model_nb.c */

enum { GRID = 33, FEAT = 14, NGRID = GRID * GRID * FEAT, NW = 3 * 256, NPAR = NGRID + NW };

#define GTRY(expr)                                                                             \
    do {                                                                                       \
        nb_status g_s_ = (expr);                                                               \
        if (g_s_ != NB_OK) return g_s_;                                                        \
    } while (0)

typedef struct grid_fit {
    nb_device *dev;
    nb_module *mod;
    nb_func *loss, *model;
    nb_tensor *img;                 /* f32 [H, W, 3] */
    int W, H;
    int64_t batch;                  /* samples per step; HW = every pixel */
    nb_tensor *params, *grads;      /* f32 [NPAR] */
    nb_tensor *grid, *w, *ggrid, *gw; /* views: [33, 33, 14], [768] */
    nb_tensor *coords, *pixels;     /* every pixel: f32 [HW, 2], [HW, 3] (a view of img) */
    nb_tensor *x, *target;          /* sampled batch: f32 [B, 2], [B, 3] (when B < HW) */
    nb_tensor *dout;                /* f32 scalar 1/B: dL/d(per-sample loss) for the mean */
    nb_tensor *pred;                /* f32 [HW, 3] */
    nb_tensor *lossv;               /* f32 [B]: per-sample squared error of the last step */
    nb_adam *opt;
} grid_fit;

static void grid_free(grid_fit *g) {
    nb_tensor *ts[] = {g->img, g->params, g->grads, g->grid, g->w, g->ggrid, g->gw, g->coords,
                       g->pixels, g->x, g->target, g->dout, g->pred, g->lossv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) nb_tensor_free(ts[i]);
    nb_adam_destroy(g->opt);
    nb_module_free(g->mod);
}

/* Initial parameters: grid features uniform in [-1, 1] x 0.1; weights uniform in +-sqrt(6/16)
 * (He, for ReLU layers). */
static void grid_init_params(float *p, unsigned long long seed) {
    unsigned long long r = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (int i = 0; i < NPAR; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(r >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0; /* [-1, 1) */
        p[i] = i < NGRID ? (float)(0.1 * u) : (float)(0.6123724 * u);
    }
}

static nb_status grid_views(grid_fit *g) {
    int64_t sg[3] = {GRID, GRID, FEAT};
    for (int k = 0; k < 2; k++) {
        nb_tensor *src = k ? g->grads : g->params, *flat = NULL;
        GTRY(nb_tensor_slice(src, 0, 0, NGRID, 1, &flat));
        nb_status st = nb_tensor_reshape(flat, 3, sg, k ? &g->ggrid : &g->grid);
        nb_tensor_free(flat);
        GTRY(st);
        GTRY(nb_tensor_slice(src, 0, NGRID, NPAR, 1, k ? &g->gw : &g->w));
    }
    return NB_OK;
}

static nb_status grid_setup(grid_fit *g, const nb_fit_grid_opts *o) {
    if (o->image) {
        GTRY(nb_image_read_png(o->image, 3, g->dev, &g->img));
    } else {
        GTRY(nb_image_procedural(g->dev, (int)o->size, (int)o->size, &g->img));
    }
    g->H = (int)nb_tensor_shape(g->img)[0];
    g->W = (int)nb_tensor_shape(g->img)[1];
    if (g->W < 2 || g->H < 2)
        return nb_error(NB_ERR_INVALID_ARG, "'%s' is %dx%d pixels: fit-image needs at least 2x2", o->image, g->W,
                        g->H);
    int64_t HW = (int64_t)g->W * g->H;
    g->batch = o->batch > 0 && o->batch < HW ? o->batch : HW;
    /* The model is nabla's own, its indices clamped in code: it runs without bounds checks, which
     * cost 55% of its training step on an H200 (0.135 -> 0.21 ms/step; docs/PERF.md). User modules
     * stay checked unless they ask (nb_module_options.unchecked). */
    nb_module_options mo = {0};
    mo.unchecked = 1;
    GTRY(nb_module_load_source(g->dev, "image_model.nb", nb_cli_image_model_nb, &mo, &g->mod));
    GTRY(nb_module_func(g->mod, "image_loss", &g->loss));
    GTRY(nb_module_func(g->mod, "image_model", &g->model));
    float *p = malloc(sizeof(float) * NPAR);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    grid_init_params(p, o->seed);
    int64_t sp[1] = {NPAR};
    nb_status st = nb_tensor_from_host(g->dev, NB_F32, 1, sp, p, &g->params);
    free(p);
    GTRY(st);
    GTRY(nb_tensor_zeros(g->dev, NB_F32, 1, sp, &g->grads));
    GTRY(grid_views(g));
    GTRY(nb_image_pixel_coords(g->dev, g->W, g->H, &g->coords));
    int64_t s3[2] = {HW, 3};
    GTRY(nb_tensor_reshape(g->img, 2, s3, &g->pixels));
    GTRY(nb_tensor_zeros(g->dev, NB_F32, 2, s3, &g->pred));
    if (g->batch < HW) {
        int64_t sx[2] = {g->batch, 2}, st3[2] = {g->batch, 3};
        GTRY(nb_tensor_zeros(g->dev, NB_F32, 2, sx, &g->x));
        GTRY(nb_tensor_zeros(g->dev, NB_F32, 2, st3, &g->target));
    }
    int64_t sb[1] = {g->batch};
    GTRY(nb_tensor_zeros(g->dev, NB_F32, 1, sb, &g->lossv));
    float inv = 1.0f / (float)g->batch;
    GTRY(nb_tensor_from_host(g->dev, NB_F32, 0, NULL, &inv, &g->dout));
    nb_adam_config ac = {o->lr, 0.9f, 0.99f, 1e-15f, 0.0f, 0};
    GTRY(nb_adam_create(g->dev, NPAR, &ac, &g->opt));
    return NB_OK;
}

/* The fused forward + backward of image_loss over the batch (one kernel, which also writes the
 * per-sample squared errors into lossv [B]). */
static nb_status grid_fwd_bwd(grid_fit *g) {
    nb_tensor *x = g->x ? g->x : g->coords, *t = g->target ? g->target : g->pixels;
    nb_call *c = NULL;
    GTRY(nb_call_begin(g->loss, &c));
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

static nb_status grid_sample(grid_fit *g, const nb_fit_grid_opts *o, uint32_t step) {
    return g->x ? nb_image_sample(g->img, o->seed, step, g->x, g->target) : NB_OK;
}

static nb_status grid_step(grid_fit *g, const nb_fit_grid_opts *o, uint32_t step, double *mse) {
    GTRY(grid_sample(g, o, step));
    GTRY(grid_fwd_bwd(g));
    nb_status st = nb_adam_step(g->opt, g->params, g->grads, 1);
    if (st == NB_OK && mse) { /* (report steps only: the loss comes from the same fused kernel) */
        float *l = malloc(sizeof(float) * (size_t)g->batch);
        if (!l) st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        if (st == NB_OK) st = nb_tensor_to_host(g->lossv, l, sizeof(float) * (size_t)g->batch);
        double sum = 0;
        for (int64_t i = 0; st == NB_OK && i < g->batch; i++) sum += l[i];
        *mse = sum / (3.0 * (double)g->batch);
        free(l);
    }
    return st;
}

static nb_status grid_eval(grid_fit *g, double *psnr) {
    nb_call *c = NULL;
    GTRY(nb_call_begin(g->model, &c));
    nb_status st = nb_call_arg(c, 0, g->grid);
    if (st == NB_OK) st = nb_call_arg(c, 1, g->w);
    if (st == NB_OK) st = nb_call_arg(c, 2, g->coords);
    if (st == NB_OK) st = nb_call_result(c, g->pred);
    if (st != NB_OK) {
        nb_call_free(c);
        return st;
    }
    GTRY(nb_call_run(c, NULL));
    nb_tensor *img3 = NULL;
    int64_t shape[3] = {g->H, g->W, 3};
    GTRY(nb_tensor_reshape(g->pred, 3, shape, &img3));
    st = nb_image_psnr(img3, g->img, psnr);
    nb_tensor_free(img3);
    return st;
}

/* --profile: GPU (or host) time per phase over n more steps */
static nb_status grid_profile(grid_fit *g, const nb_fit_grid_opts *o, int n, uint32_t first) {
    static const char *const names[3] = {"sample", "fwd+bwd", "adam"};
    nb_event *ev[4] = {0};
    double ms[3] = {0};
    nb_status st = NB_OK;
    for (int i = 0; i < 4 && st == NB_OK; i++) st = nb_event_create(g->dev, &ev[i]);
    nb_stream *q = nb_device_stream(g->dev);
    for (int k = 0; k < n && st == NB_OK; k++) {
        st = nb_event_record(ev[0], q);
        if (st == NB_OK) st = grid_sample(g, o, first + (uint32_t)k);
        if (st == NB_OK) st = nb_event_record(ev[1], q);
        if (st == NB_OK) st = grid_fwd_bwd(g);
        if (st == NB_OK) st = nb_event_record(ev[2], q);
        if (st == NB_OK) st = nb_adam_step(g->opt, g->params, g->grads, 1);
        if (st == NB_OK) st = nb_event_record(ev[3], q);
        if (st == NB_OK) st = nb_event_synchronize(ev[3]);
        for (int i = 0; i < 3 && st == NB_OK; i++) {
            float t = 0;
            st = nb_event_elapsed_ms(ev[i], ev[i + 1], &t);
            ms[i] += t;
        }
    }
    if (st == NB_OK) {
        double total = ms[0] + ms[1] + ms[2];
        printf("profile (%d steps, ms/step per phase):\n", n);
        for (int i = 0; i < 3; i++)
            printf("  %-11s %8.4f ms  %5.1f%%\n", names[i], ms[i] / n, total > 0 ? 100 * ms[i] / total : 0.0);
        printf("  %-11s %8.4f ms\n", "total", total / n);
    }
    for (int i = 0; i < 4; i++)
        if (ev[i]) nb_event_destroy(ev[i]);
    return st;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int grid_fail(grid_fit *g, const char *what) {
    fprintf(stderr, "nabla fit-image: %s: %s\n", what, nb_last_error());
    grid_free(g);
    return 1;
}

int nb_fit_grid(nb_device *dev, const nb_fit_grid_opts *o) {
    grid_fit g;
    memset(&g, 0, sizeof g);
    g.dev = dev;
    if (grid_setup(&g, o) != NB_OK) return grid_fail(&g, o->image ? o->image : "setup");
    int64_t HW = (int64_t)g.W * g.H;
    char bdesc[64];
    if (g.batch == HW) snprintf(bdesc, sizeof bdesc, "batch %lld (every pixel)", (long long)HW);
    else snprintf(bdesc, sizeof bdesc, "batch %lld (uniform)", (long long)g.batch);
    fprintf(stderr, "fit-image: %s %dx%d on %s (%s), dense grid %d + MLP %d params (examples/image_model.nb), %s, %lld steps\n",
            o->image ? o->image : "procedural image", g.W, g.H, nb_device_name(dev), nb_device_get_info(dev)->name, NGRID,
            NW, bdesc, o->steps);
    int tty = isatty(2);
    long long every = tty ? (o->steps >= 100 ? o->steps / 100 : 1) : (o->steps >= 10 ? o->steps / 10 : 1);
    double t_first = 0, t_train = 0, t_mark = now_s();
    long long mark = 0;
    for (long long step = 1; step <= o->steps; step++) {
        int report = step == 1 || step % every == 0 || step == o->steps;
        int eval = o->eval_every > 0 && step % o->eval_every == 0 && step != o->steps;
        double mse = 0;
        if (grid_step(&g, o, (uint32_t)step, report ? &mse : NULL) != NB_OK) return grid_fail(&g, "training step");
        if (!report && !eval) continue;
        if (nb_device_synchronize(dev) != NB_OK) return grid_fail(&g, "training step");
        double t = now_s(), dt = t - t_mark;
        if (step == 1) t_first = dt;
        else t_train += dt;
        if (report) {
            double psnr = mse > 0 ? -10.0 * log10(mse) : INFINITY, ms = 1e3 * dt / (double)(step - mark);
            if (tty) fprintf(stderr, "\rstep %lld/%lld  loss %.5f  psnr~%5.2f dB  %.3f ms/step ", step, o->steps, mse, psnr, ms);
            else fprintf(stderr, "step %lld/%lld  loss %.5f  psnr~%.2f dB  %.3f ms/step\n", step, o->steps, mse, psnr, ms);
            if (tty && step == o->steps) fprintf(stderr, "\n");
        }
        if (eval) {
            double psnr;
            if (grid_eval(&g, &psnr) != NB_OK) return grid_fail(&g, "evaluation");
            if (tty) fprintf(stderr, "\n");
            printf("eval step %lld psnr %.3f dB\n", step, psnr);
            fflush(stdout);
        }
        mark = step;
        t_mark = now_s();
    }
    double psnr;
    if (grid_eval(&g, &psnr) != NB_OK) return grid_fail(&g, "evaluation");
    if (o->eval_every > 0) printf("eval step %lld psnr %.3f dB\n", o->steps, psnr);
    if (o->out) {
        nb_tensor *img3 = NULL;
        int64_t shape[3] = {g.H, g.W, 3};
        if (nb_tensor_reshape(g.pred, 3, shape, &img3) != NB_OK || nb_image_write_png(o->out, img3) != NB_OK) {
            nb_tensor_free(img3);
            return grid_fail(&g, o->out);
        }
        nb_tensor_free(img3);
        fprintf(stderr, "fit-image: wrote %s\n", o->out);
    }
    printf("final PSNR: %.3f dB\n", psnr);
    if (o->profile && grid_profile(&g, o, 50, (uint32_t)o->steps + 1) != NB_OK) return grid_fail(&g, "profile");
    if (o->steps > 1)
        printf("mean ms/step: %.4f (steps 2..%lld; step 1 with compilation: %.1f ms)\n",
               1e3 * t_train / (double)(o->steps - 1), o->steps, 1e3 * t_first);
    else
        printf("mean ms/step: %.4f (one step, compilation included)\n", 1e3 * t_first);
    grid_free(&g);
    return 0;
}
