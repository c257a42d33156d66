/* `nabla fit-image [IMAGE.png]`: fits a neural field to an image (tiny-cuda-nn's image sample:
 * multiresolution hash grid -> fused MLP, Adam), shows progress, writes the reconstruction and
 * prints the final PSNR and the mean time per training step.
 *
 * A training step is seven calls, each one launch on CUDA, with no host synchronisation and no
 * allocation:  sample (x, target) -> encode -> MLP forward -> loss + dL/dy -> MLP backward (dL/dfeat)
 * -> encoding backward (grid gradients, accumulated) -> Adam over both parameter buffers (which
 * also zeroes the grid gradients for the next step). The loss is summed on the device and read
 * only when the progress line is printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nabla/file.h"
#include "cli.h"
#include "nabla/image.h"
#include "nabla/nabla.h"
#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_optim.h"

#define FIT_TRY(expr)                                                                          \
    do {                                                                                       \
        nb_status fit_s_ = (expr);                                                             \
        if (fit_s_ != NB_OK) return fit_s_;                                                    \
    } while (0)

static void fit_usage(FILE *to) {
    fprintf(to,
            "usage: nabla fit-image [IMAGE.png] [options]\n"
            "\n"
            "Fits a neural field (hash grid -> MLP) to IMAGE.png, or to a built-in procedural image\n"
            "when no file is given; writes the reconstruction and prints PSNR and ms/step.\n"
            "\n"
            "options:\n"
            "  --model hash|grid     hash: tiny-cuda-nn's image model (16 levels x 2 features, 2^15\n"
            "                        entries, base 16, scale 1.5 -> MLP 64 wide, 2 hidden, ReLU, no bias)\n"
            "                        grid: the reference example's model in the kernel language\n"
            "                        (examples/image_model.nb): a 33x33 grid of 14 features -> inline MLP\n"
            "                        of three 16x16 layers; every pixel per step unless --batch is smaller\n"
            "                        (default: hash)\n"
            "  --steps N             training steps (default: 1000 on CUDA, 150 on the CPU)\n"
            "  --batch N             samples per step (default: 262144 on CUDA, 4096 on the CPU)\n"
            "  --lr X                Adam learning rate (default: 0.01)\n"
            "  --loss l2|l1|relative_l2   (default: l2)\n"
            "  --sampling uniform|stratified   training positions: uniform random (tiny-cuda-nn's), or\n"
            "                        jittered strata in Morton order (default: uniform)\n"
            "  --out FILE.png        where to write the reconstruction (default: fit.png)\n"
            "  --no-out              write no file\n"
            "  --size N              side of the procedural image (default: 512 on CUDA, 256 on the CPU)\n"
            "  --eval-every K        PSNR over the whole image every K steps (default: only at the end)\n"
            "  --device auto|cpu|cuda[:N]   (default: auto)\n"
            "  --seed S              random seed (default: 1337)\n"
            "  --profile             after training, time each phase of 50 more steps\n"
            "  -h, --help            show this help\n"
            "\n"
            "Progress goes to stderr; the PSNR curve (--eval-every), the final PSNR and the mean\n"
            "ms/step (steps after the first, which includes compilation) go to stdout.\n");
}

static int fit_bad(const char *fmt, const char *arg) {
    fprintf(stderr, "nabla fit-image: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `nabla fit-image --help`)\n");
    return 2;
}

static int parse_i64(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct fit_opts {
    const char *image, *out, *device, *model;
    long long steps, batch, size, eval_every;
    unsigned long long seed;
    float lr;
    int loss;
    int stratified;
} fit_opts;

typedef struct fit_state {
    nb_device *dev;
    nb_tensor *img;            /* f32 [H, W, 3] */
    int W, H;
    nb_encoding *enc;
    nb_mlp *mlp;
    nb_adam *opt;
    nb_tensor *enc_params, *enc_grads; /* f32 [n_enc] */
    nb_tensor *x, *target, *feat, *y, *dy, *dfeat, *loss; /* training batch, [B, .]; feat f16 */
    nb_tensor *coords, *pred;  /* whole image: f32 [H*W, 2], [H*W, 3] */
    nb_tensor *efeat;          /* eval chunk features f16 [chunk, 32] */
    int64_t chunk;
    int fused_bwd;             /* hash model ($NB_FIT_FUSED_BWD): 1 nb_encoding_backward_mlp,
                                  2 nb_encoding_mlp_train (MLP forward + loss + both backwards) */
} fit_state;

static void fit_free(fit_state *s) {
    nb_tensor *ts[] = {s->img, s->enc_params, s->enc_grads, s->x, s->target, s->feat, s->y, s->dy,
                       s->dfeat, s->loss, s->coords, s->pred, s->efeat};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) nb_tensor_free(ts[i]);
    nb_adam_destroy(s->opt);
    nb_mlp_free(s->mlp);
    nb_encoding_destroy(s->enc);
    if (s->dev) nb_device_close(s->dev);
}

static nb_status mk_t(fit_state *s, nb_dtype dt, int64_t d0, int64_t d1, nb_tensor **t) {
    int64_t shape[2] = {d0, d1};
    return nb_tensor_zeros(s->dev, dt, d1 > 0 ? 2 : (d0 > 0 ? 1 : 0), shape, t);
}
static nb_status mk(fit_state *s, int64_t d0, int64_t d1, nb_tensor **t) { return mk_t(s, NB_F32, d0, d1, t); }

static nb_status fit_setup(fit_state *s, const fit_opts *o) {
    if (o->image) {
        FIT_TRY(nb_image_read_png(o->image, 3, s->dev, &s->img));
    } else {
        FIT_TRY(nb_image_procedural(s->dev, (int)o->size, (int)o->size, &s->img));
    }
    s->H = (int)nb_tensor_shape(s->img)[0];
    s->W = (int)nb_tensor_shape(s->img)[1];
    if (s->W < 2 || s->H < 2)
        return nb_error(NB_ERR_INVALID_ARG, "'%s' is %dx%d pixels: fit-image needs at least 2x2", o->image,
                        s->W, s->H);
    nb_encoding_config ec = strcmp(o->model, "grid") ? nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f)
                                                     : nb_dense_grid_config(2, 14, 33, 33, 0);
    FIT_TRY(nb_encoding_create(s->dev, &ec, &s->enc));
    FIT_TRY(nb_encoding_set_spatially_ordered(s->enc, o->stratified)); /* Morton-ordered batches */
    { /* hash model on CUDA: MLP forward + loss + both backwards in one kernel (nb_encoding_mlp_train)
       * unless NB_FIT_FUSED_BWD = 0 (separate calls) or 1 (only the backwards fused) */
        const char *fb = getenv("NB_FIT_FUSED_BWD");
        int cuda = nb_device_get_kind(s->dev) == NB_DEVICE_CUDA;
        s->fused_bwd = strcmp(o->model, "grid") == 0 || !cuda ? 0 : !fb ? 2 : !strcmp(fb, "0") ? 0 : !strcmp(fb, "1") ? 1 : 2;
    }
    int F = nb_encoding_n_output_dims(s->enc);
    int64_t n_enc = nb_encoding_n_params(s->enc);
    nb_mlp_config mc = nb_mlp_config_default(F, 3, 64, 2);
    mc.act = NB_ACT_RELU;
    mc.out_act = NB_ACT_NONE;
    mc.bias = 0;
    FIT_TRY(nb_mlp_create(s->dev, &mc, &s->mlp));
    FIT_TRY(nb_mlp_init_params(s->mlp, o->seed));
    FIT_TRY(mk(s, n_enc, 0, &s->enc_params));
    FIT_TRY(mk(s, n_enc, 0, &s->enc_grads));
    FIT_TRY(nb_encoding_init_params(s->enc, s->enc_params, o->seed));
    nb_adam_config ac = {o->lr, 0.9f, 0.99f, 1e-15f, 0.0f, 0}; /* tiny-cuda-nn's image sample */
    FIT_TRY(nb_adam_create(s->dev, n_enc + nb_mlp_n_params(s->mlp), &ac, &s->opt));
    int64_t B = o->batch;
    FIT_TRY(mk(s, B, 2, &s->x));
    FIT_TRY(mk(s, B, 3, &s->target));
    /* f16 features: the MLP rounds its inputs to f16 anyway, so this only halves the traffic */
    FIT_TRY(mk_t(s, NB_F16, B, F, &s->feat));
    FIT_TRY(mk(s, B, 3, &s->y));
    FIT_TRY(mk(s, B, 3, &s->dy));
    FIT_TRY(mk(s, B, F, &s->dfeat));
    FIT_TRY(mk(s, 0, 0, &s->loss));
    int64_t HW = (int64_t)s->W * s->H;
    FIT_TRY(nb_image_pixel_coords(s->dev, s->W, s->H, &s->coords));
    FIT_TRY(mk(s, HW, 3, &s->pred));
    s->chunk = HW < ((int64_t)1 << 18) ? HW : ((int64_t)1 << 18);
    FIT_TRY(mk_t(s, NB_F16, s->chunk, F, &s->efeat));
    return NB_OK;
}

static nb_status fit_sample(fit_state *s, const fit_opts *o, uint32_t step) {
    if (o->stratified) return nb_image_sample_stratified(s->img, o->seed, step, s->x, s->target);
    return nb_image_sample(s->img, o->seed, step, s->x, s->target);
}

static nb_status fit_step(fit_state *s, const fit_opts *o, uint32_t step) {
    FIT_TRY(fit_sample(s, o, step));
    FIT_TRY(nb_encoding_forward(s->enc, s->enc_params, s->x, s->feat));
    if (s->fused_bwd == 2) {
        FIT_TRY(nb_encoding_mlp_train(s->enc, s->mlp, s->enc_params, s->x, s->feat, s->target, o->loss, s->loss,
                                      s->enc_grads));
    } else {
        FIT_TRY(nb_mlp_forward(s->mlp, s->feat, s->y, 1));
        FIT_TRY(nb_loss((nb_loss_kind)o->loss, s->y, s->target, s->loss, s->dy));
        if (s->fused_bwd) {
            FIT_TRY(nb_encoding_backward_mlp(s->enc, s->mlp, s->enc_params, s->x, s->dy, s->enc_grads));
        } else {
            FIT_TRY(nb_mlp_backward(s->mlp, s->dy, s->dfeat));
            FIT_TRY(nb_encoding_backward(s->enc, s->enc_params, s->x, s->dfeat, s->enc_grads, NULL));
        }
    }
    nb_tensor *ps[2] = {s->enc_params, nb_mlp_params(s->mlp)};
    nb_tensor *gs[2] = {s->enc_grads, nb_mlp_grads(s->mlp)};
    return nb_adam_step_multi(s->opt, 2, ps, gs, 1);
}

/* --profile: per-phase GPU (or host) time of `n` more training steps, each phase bracketed by
 * events (which serialises nothing on the GPU; the host waits once per step). */
static nb_status fit_profile(fit_state *s, const fit_opts *o, int n, uint32_t first_step) {
    static const char *const names[7] = {"sample", "encode fwd", "mlp fwd", "loss", "mlp bwd", "encode bwd", "adam"};
    nb_event *ev[8] = {0};
    double ms[7] = {0};
    nb_status st = NB_OK;
    for (int i = 0; i < 8 && st == NB_OK; i++) st = nb_event_create(s->dev, &ev[i]);
    nb_stream *q = nb_device_stream(s->dev);
    nb_tensor *ps[2] = {s->enc_params, nb_mlp_params(s->mlp)};
    nb_tensor *gs[2] = {s->enc_grads, nb_mlp_grads(s->mlp)};
    for (int k = 0; k < n && st == NB_OK; k++) {
        uint32_t step = first_step + (uint32_t)k;
        st = nb_event_record(ev[0], q);
        if (st == NB_OK) st = fit_sample(s, o, step);
        if (st == NB_OK) st = nb_event_record(ev[1], q);
        if (st == NB_OK) st = nb_encoding_forward(s->enc, s->enc_params, s->x, s->feat);
        if (st == NB_OK) st = nb_event_record(ev[2], q);
        if (st == NB_OK) /* fused 2: forward, loss and both backwards in the "mlp fwd" phase */
            st = s->fused_bwd == 2 ? nb_encoding_mlp_train(s->enc, s->mlp, s->enc_params, s->x, s->feat, s->target,
                                                           o->loss, s->loss, s->enc_grads)
                                   : nb_mlp_forward(s->mlp, s->feat, s->y, 1);
        if (st == NB_OK) st = nb_event_record(ev[3], q);
        if (st == NB_OK && s->fused_bwd != 2) st = nb_loss((nb_loss_kind)o->loss, s->y, s->target, s->loss, s->dy);
        if (st == NB_OK) st = nb_event_record(ev[4], q);
        if (st == NB_OK && s->fused_bwd != 2) /* fused 1: both backwards in the "mlp bwd" phase */
            st = s->fused_bwd ? nb_encoding_backward_mlp(s->enc, s->mlp, s->enc_params, s->x, s->dy, s->enc_grads)
                              : nb_mlp_backward(s->mlp, s->dy, s->dfeat);
        if (st == NB_OK) st = nb_event_record(ev[5], q);
        if (st == NB_OK && !s->fused_bwd)
            st = nb_encoding_backward(s->enc, s->enc_params, s->x, s->dfeat, s->enc_grads, NULL);
        if (st == NB_OK) st = nb_event_record(ev[6], q);
        if (st == NB_OK) st = nb_adam_step_multi(s->opt, 2, ps, gs, 1);
        if (st == NB_OK) st = nb_event_record(ev[7], q);
        if (st == NB_OK) st = nb_event_synchronize(ev[7]);
        for (int i = 0; i < 7 && st == NB_OK; i++) {
            float t = 0;
            st = nb_event_elapsed_ms(ev[i], ev[i + 1], &t);
            ms[i] += t;
        }
    }
    if (st == NB_OK) {
        double total = 0;
        for (int i = 0; i < 7; i++) total += ms[i];
        printf("profile (%d steps, ms/step per phase):\n", n);
        for (int i = 0; i < 7; i++)
            printf("  %-11s %8.4f ms  %5.1f%%\n", names[i], ms[i] / n, total > 0 ? 100 * ms[i] / total : 0.0);
        printf("  %-11s %8.4f ms\n", "total", total / n);
        if (s->fused_bwd) /* the hash model's fused kernel (NB_FIT_FUSED_BWD) */
            printf("  (fused: %s)\n", s->fused_bwd == 2 ? "\"mlp fwd\" is the MLP forward, loss and both backwards"
                                                        : "\"mlp bwd\" is both backwards");
    }
    for (int i = 0; i < 8; i++)
        if (ev[i]) nb_event_destroy(ev[i]);
    return st;
}

/* The whole image through the model, in chunks, into s->pred; PSNR against the image. */
static nb_status fit_eval(fit_state *s, double *psnr) {
    int64_t HW = (int64_t)s->W * s->H;
    for (int64_t b = 0; b < HW; b += s->chunk) {
        int64_t e = b + s->chunk < HW ? b + s->chunk : HW;
        nb_tensor *xc = NULL, *yc = NULL, *fc = NULL;
        nb_status st = nb_tensor_slice(s->coords, 0, b, e, 1, &xc);
        if (st == NB_OK) st = nb_tensor_slice(s->pred, 0, b, e, 1, &yc);
        if (st == NB_OK) st = nb_tensor_slice(s->efeat, 0, 0, e - b, 1, &fc);
        if (st == NB_OK) st = nb_encoding_forward(s->enc, s->enc_params, xc, fc);
        if (st == NB_OK) st = nb_mlp_inference(s->mlp, fc, yc);
        nb_tensor_free(xc), nb_tensor_free(yc), nb_tensor_free(fc);
        FIT_TRY(st);
    }
    nb_tensor *img3 = NULL;
    int64_t shape[3] = {s->H, s->W, 3};
    FIT_TRY(nb_tensor_reshape(s->pred, 3, shape, &img3));
    nb_status st = nb_image_psnr(img3, s->img, psnr);
    nb_tensor_free(img3);
    return st;
}

static void progress(int tty, long long step, long long steps, double loss, double ms) {
    double psnr = loss > 0 ? -10.0 * log10(loss) : INFINITY;
    if (tty) {
        int w = 24, fill = (int)(w * step / steps);
        char bar[32];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = '\0';
        fprintf(stderr, "\r[%s] %3d%% step %lld/%lld  loss %.5f  psnr~%5.2f dB  %.3f ms/step ", bar,
                (int)(100 * step / steps), step, steps, loss, psnr, ms);
        if (step == steps) fprintf(stderr, "\n");
    } else {
        fprintf(stderr, "step %lld/%lld  loss %.5f  psnr~%.2f dB  %.3f ms/step\n", step, steps, loss, psnr, ms);
    }
    fflush(stderr);
}

static int fit_fail(fit_state *s, const char *what) {
    fprintf(stderr, "nabla fit-image: %s: %s\n", what, nb_last_error());
    fit_free(s);
    return 1;
}

int nb_cmd_fit_image(int argc, char **argv) {
    fit_opts o = {NULL, "fit.png", "auto", "hash", -1, -1, -1, 0, 1337, 1e-2f, NB_LOSS_L2, 0};
    int no_out = 0, profile = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fit_usage(stdout);
            return 0;
        }
        if (a[0] != '-') {
            if (o.image) return fit_bad("more than one image given ('%s')", a);
            o.image = a;
            continue;
        }
        if (!strcmp(a, "--no-out")) {
            no_out = 1;
            continue;
        }
        if (!strcmp(a, "--profile")) {
            profile = 1;
            continue;
        }
        int known = !strcmp(a, "--model") || !strcmp(a, "--steps") || !strcmp(a, "--batch") ||
                    !strcmp(a, "--out") || !strcmp(a, "--device") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--lr") || !strcmp(a, "--loss") || !strcmp(a, "--size") ||
                    !strcmp(a, "--eval-every") || !strcmp(a, "--sampling");
        if (!known) return fit_bad("unknown argument '%s'", a);
        if (!v) return fit_bad("%s needs a value", a);
        i++;
        if (!strcmp(a, "--model")) {
            if (strcmp(v, "hash") && strcmp(v, "grid")) return fit_bad("unknown model '%s' (want hash or grid)", v);
            o.model = v;
        } else if (!strcmp(a, "--steps")) {
            if (!parse_i64(v, 1, 10000000, &n)) return fit_bad("--steps '%s': want an integer in 1..10000000", v);
            o.steps = n;
        } else if (!strcmp(a, "--batch")) {
            if (!parse_i64(v, 1, 1 << 24, &n)) return fit_bad("--batch '%s': want an integer in 1..16777216", v);
            o.batch = n;
        } else if (!strcmp(a, "--size")) {
            if (!parse_i64(v, 2, 8192, &n)) return fit_bad("--size '%s': want an integer in 2..8192", v);
            o.size = n;
        } else if (!strcmp(a, "--eval-every")) {
            if (!parse_i64(v, 1, 10000000, &n)) return fit_bad("--eval-every '%s': want an integer in 1..10000000", v);
            o.eval_every = n;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_i64(v, 0, 0x7fffffffffffffffll, &n)) return fit_bad("--seed '%s': want an integer in 0..9223372036854775807", v);
            o.seed = (unsigned long long)n;
        } else if (!strcmp(a, "--lr")) {
            char *end;
            double lr = strtod(v, &end);
            if (!*v || *end || !(lr > 0 && lr < 10)) return fit_bad("--lr '%s': want a number in (0, 10)", v);
            o.lr = (float)lr;
        } else if (!strcmp(a, "--loss")) {
            int k = nb_loss_from_name(v);
            if (k < 0) return fit_bad("unknown loss '%s' (want l2, l1 or relative_l2)", v);
            o.loss = k;
        } else if (!strcmp(a, "--sampling")) {
            if (strcmp(v, "uniform") && strcmp(v, "stratified"))
                return fit_bad("unknown sampling '%s' (want uniform or stratified)", v);
            o.stratified = !strcmp(v, "stratified");
        } else if (!strcmp(a, "--out")) {
            o.out = v;
        } else if (!strcmp(a, "--device")) {
            o.device = v;
        }
    }
    /* The output file is checked before training: a missing directory fails now, not after it. */
    if (!no_out && nb_file_check_writable(o.out, "--out") != NB_OK) {
        fprintf(stderr, "nabla fit-image: %s\n", nb_last_error());
        return 1;
    }
    fit_state s;
    memset(&s, 0, sizeof s);
    nb_status ds = nb_device_open(o.device, &s.dev);
    if (ds != NB_OK) {
        fprintf(stderr, "nabla fit-image: device '%s': %s\n", o.device, nb_last_error());
        return ds == NB_ERR_INVALID_ARG ? 2 : 1;
    }
    int cuda = nb_device_get_kind(s.dev) == NB_DEVICE_CUDA;
    if (!strcmp(o.model, "grid")) { /* the kernel-language model, every pixel per step: fit_grid.c */
        nb_fit_grid_opts g = {o.image, no_out ? NULL : o.out, o.steps < 0 ? (cuda ? 1000 : 150) : o.steps,
                              o.batch, o.size < 0 ? (cuda ? 512 : 256) : o.size, o.eval_every, o.seed, o.lr, profile};
        int rc = nb_fit_grid(s.dev, &g);
        nb_device_close(s.dev);
        return rc;
    }
    if (o.steps < 0) o.steps = cuda ? 1000 : 150;
    if (o.batch < 0) o.batch = cuda ? (1 << 18) : 4096;
    if (o.size < 0) o.size = cuda ? 512 : 256;
    if (fit_setup(&s, &o) != NB_OK) return fit_fail(&s, o.image ? o.image : "setup");
    fprintf(stderr, "fit-image: %s %dx%d on %s (%s), %s %lld + MLP %lld params, batch %lld (%s), %lld steps\n",
            o.image ? o.image : "procedural image", s.W, s.H, nb_device_name(s.dev),
            nb_device_get_info(s.dev)->name, strcmp(o.model, "grid") ? "hash grid" : "dense grid",
            (long long)nb_encoding_n_params(s.enc),
            (long long)nb_mlp_n_params(s.mlp), o.batch, o.stratified ? "stratified" : "uniform", o.steps);

    int tty = isatty(2);
    long long every = tty ? (o.steps >= 100 ? o.steps / 100 : 1) : (o.steps >= 10 ? o.steps / 10 : 1);
    double t_first = 0, t_train = 0; /* step 1 (compiles kernels) and steps 2..N */
    double t_mark = now_s();
    long long mark_step = 0;
    for (long long step = 1; step <= o.steps; step++) {
        if (fit_step(&s, &o, (uint32_t)step) != NB_OK) return fit_fail(&s, "training step");
        int report = step == 1 || step % every == 0 || step == o.steps;
        int eval = o.eval_every > 0 && (step % o.eval_every == 0) && step != o.steps;
        if (!report && !eval) continue;
        if (nb_device_synchronize(s.dev) != NB_OK) return fit_fail(&s, "training step");
        double t = now_s(), dt = t - t_mark;
        if (step == 1)
            t_first = dt;
        else
            t_train += dt;
        float loss_sum = 0;
        if (nb_tensor_to_host(s.loss, &loss_sum, sizeof loss_sum) != NB_OK) return fit_fail(&s, "reading the loss");
        double loss = loss_sum / (double)(step - mark_step); /* mean over the window */
        if (report) progress(tty, step, o.steps, loss, 1e3 * dt / (double)(step - mark_step));
        /* restart the window: zero the device sum (no host value kept, so no drift) */
        if (nb_tensor_fill_bytes(s.loss, 0) != NB_OK) return fit_fail(&s, "loss");
        if (eval) {
            double psnr;
            if (fit_eval(&s, &psnr) != NB_OK) return fit_fail(&s, "evaluation");
            if (tty) fprintf(stderr, "\n");
            printf("eval step %lld psnr %.3f dB\n", step, psnr);
            fflush(stdout);
        }
        mark_step = step;
        t_mark = now_s();
    }
    double psnr;
    if (fit_eval(&s, &psnr) != NB_OK) return fit_fail(&s, "evaluation");
    if (o.eval_every > 0) printf("eval step %lld psnr %.3f dB\n", o.steps, psnr);
    if (!no_out) {
        nb_tensor *img3 = NULL;
        int64_t shape[3] = {s.H, s.W, 3};
        if (nb_tensor_reshape(s.pred, 3, shape, &img3) != NB_OK || nb_image_write_png(o.out, img3) != NB_OK) {
            nb_tensor_free(img3);
            return fit_fail(&s, o.out);
        }
        nb_tensor_free(img3);
        fprintf(stderr, "fit-image: wrote %s\n", o.out);
    }
    printf("final PSNR: %.3f dB\n", psnr);
    if (profile && fit_profile(&s, &o, 50, (uint32_t)o.steps + 1) != NB_OK) return fit_fail(&s, "profile");
    if (o.steps > 1)
        printf("mean ms/step: %.4f (steps 2..%lld; step 1 with compilation: %.1f ms)\n",
               1e3 * t_train / (double)(o.steps - 1), o.steps, 1e3 * t_first);
    else
        printf("mean ms/step: %.4f (one step, compilation included)\n", 1e3 * t_first);
    fit_free(&s);
    return 0;
}
