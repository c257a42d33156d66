/* `nabla fit-image [IMAGE.png]`: parses the options, runs the library's image-fitting trainer
 * (include/nabla/fit_image.h: the hash model, tiny-cuda-nn's image sample, or the grid model,
 * examples/image_model.nb), shows progress, writes the reconstruction and prints the final PSNR,
 * the per-phase profile and the mean time per training step. The loss is read only when a
 * progress line is printed (a CUDA step does not wait for the GPU otherwise). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "nabla/file.h"
#include "nabla/fit_image.h"
#include "nabla/image.h"
#include "nabla/nabla.h"

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
            "  --loss l2|l1|relative_l2   (default: l2; the grid model trains l2 only)\n"
            "  --sampling uniform|stratified   training positions: uniform random (tiny-cuda-nn's), or\n"
            "                        jittered strata in Morton order (default: uniform; grid: uniform only)\n"
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
    const char *image, *out, *device;
    long long steps, size, eval_every;
    nb_fit_image_config cfg;
} fit_opts;

static void progress(int tty, int bar, long long step, long long steps, double loss, double ms) {
    double psnr = loss > 0 ? -10.0 * log10(loss) : INFINITY;
    if (tty && bar) {
        int w = 24, fill = (int)(w * step / steps);
        char b[32];
        for (int i = 0; i < w; i++) b[i] = i < fill ? '#' : '.';
        b[w] = '\0';
        fprintf(stderr, "\r[%s] %3d%% step %lld/%lld  loss %.5f  psnr~%5.2f dB  %.3f ms/step ", b,
                (int)(100 * step / steps), step, steps, loss, psnr, ms);
    } else if (tty) {
        fprintf(stderr, "\rstep %lld/%lld  loss %.5f  psnr~%5.2f dB  %.3f ms/step ", step, steps, loss, psnr, ms);
    } else {
        fprintf(stderr, "step %lld/%lld  loss %.5f  psnr~%.2f dB  %.3f ms/step\n", step, steps, loss, psnr, ms);
    }
    if (tty && step == steps) fprintf(stderr, "\n");
    fflush(stderr);
}

static void print_profile(const nb_fit_image_profile *p, int n) {
    double total = 0;
    for (int i = 0; i < p->n_phases; i++) total += p->ms[i];
    printf("profile (%d steps, ms/step per phase):\n", n);
    for (int i = 0; i < p->n_phases; i++)
        printf("  %-11s %8.4f ms  %5.1f%%\n", p->phase[i], p->ms[i], total > 0 ? 100 * p->ms[i] / total : 0.0);
    printf("  %-11s %8.4f ms\n", "total", total);
    if (p->note) printf("  (fused: %s)\n", p->note);
}

/* The header line on stderr: image, device, model and batch. */
static void print_setup(const fit_opts *o, nb_device *dev, const nb_fit_image_info *in, long long steps) {
    char model[128], batch[64];
    if (in->model == NB_FIT_IMAGE_GRID) {
        snprintf(model, sizeof model, "dense grid %lld + MLP %lld params (examples/image_model.nb)",
                 (long long)in->encoding_params, (long long)in->mlp_params);
        snprintf(batch, sizeof batch, "batch %lld (%s)", (long long)in->batch, in->every_pixel ? "every pixel" : "uniform");
    } else {
        snprintf(model, sizeof model, "hash grid %lld + MLP %lld params", (long long)in->encoding_params,
                 (long long)in->mlp_params);
        snprintf(batch, sizeof batch, "batch %lld (%s)", (long long)in->batch, o->cfg.stratified ? "stratified" : "uniform");
    }
    fprintf(stderr, "fit-image: %s %dx%d on %s (%s), %s, %s, %lld steps\n", o->image ? o->image : "procedural image",
            in->width, in->height, nb_device_name(dev), nb_device_get_info(dev)->name, model, batch, steps);
}

static int fit_fail(nb_fit_image *f, nb_tensor *img, nb_device *dev, const char *what) {
    fprintf(stderr, "nabla fit-image: %s: %s\n", what, nb_last_error());
    nb_fit_image_free(f);
    nb_tensor_free(img);
    nb_device_close(dev);
    return 1;
}

/* Trains o->steps steps with progress on stderr, the PSNR curve and summary on stdout. */
static int fit_run(const fit_opts *o, nb_device *dev, int profile) {
    nb_tensor *img = NULL;
    nb_fit_image *f = NULL;
    const char *src = o->image ? o->image : "setup";
    if ((o->image ? nb_image_read_png(o->image, 3, dev, &img) : nb_image_procedural(dev, (int)o->size, (int)o->size, &img)) !=
            NB_OK ||
        nb_fit_image_create(dev, img, &o->cfg, &f) != NB_OK)
        return fit_fail(f, img, dev, src);
    nb_fit_image_info in;
    nb_fit_image_get_info(f, &in);
    print_setup(o, dev, &in, o->steps);
    int tty = isatty(2), bar = o->cfg.model == NB_FIT_IMAGE_HASH;
    long long every = tty ? (o->steps >= 100 ? o->steps / 100 : 1) : (o->steps >= 10 ? o->steps / 10 : 1);
    double t_first = 0, t_train = 0; /* step 1 (compiles kernels) and steps 2..N */
    double t_mark = now_s();
    long long mark_step = 0;
    for (long long step = 1; step <= o->steps; step++) {
        if (nb_fit_image_step(f, (uint32_t)step) != NB_OK) return fit_fail(f, img, dev, "training step");
        int report = step == 1 || step % every == 0 || step == o->steps;
        int eval = o->eval_every > 0 && (step % o->eval_every == 0) && step != o->steps;
        if (!report && !eval) continue;
        if (nb_device_synchronize(dev) != NB_OK) return fit_fail(f, img, dev, "training step");
        double t = now_s(), dt = t - t_mark;
        if (step == 1)
            t_first = dt;
        else
            t_train += dt;
        double loss;
        if (nb_fit_image_read_loss(f, &loss) != NB_OK) return fit_fail(f, img, dev, "reading the loss");
        if (report) progress(tty, bar, step, o->steps, loss, 1e3 * dt / (double)(step - mark_step));
        if (eval) {
            double psnr;
            if (nb_fit_image_eval(f, &psnr) != NB_OK) return fit_fail(f, img, dev, "evaluation");
            if (tty) fprintf(stderr, "\n");
            printf("eval step %lld psnr %.3f dB\n", step, psnr);
            fflush(stdout);
        }
        mark_step = step;
        t_mark = now_s();
    }
    double psnr;
    if (nb_fit_image_eval(f, &psnr) != NB_OK) return fit_fail(f, img, dev, "evaluation");
    if (o->eval_every > 0) printf("eval step %lld psnr %.3f dB\n", o->steps, psnr);
    if (o->out) {
        nb_tensor *pred = NULL;
        if (nb_fit_image_prediction(f, &pred) != NB_OK || nb_image_write_png(o->out, pred) != NB_OK) {
            nb_tensor_free(pred);
            return fit_fail(f, img, dev, o->out);
        }
        nb_tensor_free(pred);
        fprintf(stderr, "fit-image: wrote %s\n", o->out);
    }
    printf("final PSNR: %.3f dB\n", psnr);
    if (profile) {
        nb_fit_image_profile p;
        if (nb_fit_image_profile_steps(f, 50, (uint32_t)o->steps + 1, &p) != NB_OK)
            return fit_fail(f, img, dev, "profile");
        print_profile(&p, 50);
    }
    if (o->steps > 1)
        printf("mean ms/step: %.4f (steps 2..%lld; step 1 with compilation: %.1f ms)\n",
               1e3 * t_train / (double)(o->steps - 1), o->steps, 1e3 * t_first);
    else
        printf("mean ms/step: %.4f (one step, compilation included)\n", 1e3 * t_first);
    nb_fit_image_free(f);
    nb_tensor_free(img);
    nb_device_close(dev);
    return 0;
}

int nb_cmd_fit_image(int argc, char **argv) {
    fit_opts o = {NULL, "fit.png", "auto", -1, -1, 0, nb_fit_image_config_default()};
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
            int m = nb_fit_image_model_from_name(v);
            if (m < 0) return fit_bad("unknown model '%s' (want hash or grid)", v);
            o.cfg.model = (nb_fit_image_model)m;
        } else if (!strcmp(a, "--steps")) {
            if (!parse_i64(v, 1, 10000000, &n)) return fit_bad("--steps '%s': want an integer in 1..10000000", v);
            o.steps = n;
        } else if (!strcmp(a, "--batch")) {
            if (!parse_i64(v, 1, 1 << 24, &n)) return fit_bad("--batch '%s': want an integer in 1..16777216", v);
            o.cfg.batch = n;
        } else if (!strcmp(a, "--size")) {
            if (!parse_i64(v, 2, 8192, &n)) return fit_bad("--size '%s': want an integer in 2..8192", v);
            o.size = n;
        } else if (!strcmp(a, "--eval-every")) {
            if (!parse_i64(v, 1, 10000000, &n)) return fit_bad("--eval-every '%s': want an integer in 1..10000000", v);
            o.eval_every = n;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_i64(v, 0, 0x7fffffffffffffffll, &n)) return fit_bad("--seed '%s': want an integer in 0..9223372036854775807", v);
            o.cfg.seed = (uint64_t)n;
        } else if (!strcmp(a, "--lr")) {
            char *end;
            double lr = strtod(v, &end);
            if (!*v || *end || !(lr > 0 && lr < 10)) return fit_bad("--lr '%s': want a number in (0, 10)", v);
            o.cfg.lr = (float)lr;
        } else if (!strcmp(a, "--loss")) {
            int k = nb_loss_from_name(v);
            if (k < 0) return fit_bad("unknown loss '%s' (want l2, l1 or relative_l2)", v);
            o.cfg.loss = (nb_loss_kind)k;
        } else if (!strcmp(a, "--sampling")) {
            if (strcmp(v, "uniform") && strcmp(v, "stratified"))
                return fit_bad("unknown sampling '%s' (want uniform or stratified)", v);
            o.cfg.stratified = !strcmp(v, "stratified");
        } else if (!strcmp(a, "--out")) {
            o.out = v;
        } else if (!strcmp(a, "--device")) {
            o.device = v;
        }
    }
    if (o.cfg.model == NB_FIT_IMAGE_GRID && o.cfg.loss != NB_LOSS_L2)
        return fit_bad("--loss %s is for --model hash (the grid model trains image_loss, a squared error)",
                       nb_loss_name(o.cfg.loss));
    if (o.cfg.model == NB_FIT_IMAGE_GRID && o.cfg.stratified)
        return fit_bad("%s is for --model hash (the grid model samples uniformly)", "--sampling stratified");
    /* The output file is checked before training: a missing directory fails now, not after it. */
    if (!no_out && nb_file_check_writable(o.out, "--out") != NB_OK) {
        fprintf(stderr, "nabla fit-image: %s\n", nb_last_error());
        return 1;
    }
    if (no_out) o.out = NULL;
    nb_device *dev = NULL;
    nb_status ds = nb_device_open(o.device, &dev);
    if (ds != NB_OK) {
        fprintf(stderr, "nabla fit-image: device '%s': %s\n", o.device, nb_last_error());
        return ds == NB_ERR_INVALID_ARG ? 2 : 1;
    }
    int cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    if (o.steps < 0) o.steps = cuda ? 1000 : 150;
    if (o.size < 0) o.size = cuda ? 512 : 256;
    return fit_run(&o, dev, profile);
}
