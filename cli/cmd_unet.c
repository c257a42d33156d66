/* `nabla unet train|sample|bench`: a diffusion UNet (guided-diffusion's UNetModel) trained with
 * DDPM on the tape, on the CPU or a CUDA GPU; checkpoints in safetensors, DDPM / DDIM sampling to a
 * PNG grid, a loss curve (CSV / PNG), and a training benchmark (CUDA-event timing, TFLOP/s, the
 * compute floor). See include/nabla/nn_unet.h. */
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "nabla/file.h"
#include "nabla/image.h"
#include "nabla/nabla.h"
#include "nabla/nn_dataset.h"
#include "nabla/nn_unet.h"

static void unet_usage(FILE *to) {
    fprintf(to,
            "usage: nabla unet train  [options]       train a diffusion UNet (DDPM, epsilon MSE, AdamW)\n"
            "       nabla unet sample --ckpt FILE [--n 16] [--sampler ddpm|ddim] [--steps N] [--out grid.png]\n"
            "       nabla unet bench  [--batch 32] [--steps N] [--warmup N] [--precision P] [--profile] [model options]\n"
            "\n"
            "model options (train, bench; sample reads them from the checkpoint):\n"
            "  --image-size N        side of the square images (default: 32 for fashion-mnist, else 64)\n"
            "  --in-channels N       image channels (default: 1 for fashion-mnist, else 3)\n"
            "  --channels C          base channels (default: 64)\n"
            "  --mult 1,2,3,4        channel multiplier per level (default: 1,2,3,4)\n"
            "  --res-blocks N        ResBlocks per level (default: 2)\n"
            "  --attn 16,8|none      resolutions with self-attention (default: 16,8)\n"
            "  --head-channels N     channels per attention head (default: 32)\n"
            "  --groups N            GroupNorm groups (default: 32)\n"
            "  --conv-resample       stride-2 conv down / nearest + conv up (default: avg pool / nearest)\n"
            "\n"
            "device options (all sub-commands):\n"
            "  --device auto|cpu|cuda[:N]   (default: auto = cuda:0 when a GPU is usable, else cpu)\n"
            "  --precision fp32|tf32|bf16   GEMM / conv / attention math on CUDA (default: fp32);\n"
            "                        the CPU computes in fp32 only: tf32 / bf16 there are an error\n"
            "\n"
            "training options:\n"
            "  --data fashion-mnist[:DIR]|synthetic|DIR   data set (DIR: a folder of PNGs; fashion-mnist:DIR\n"
            "                        reads the IDX files from DIR; default: fashion-mnist)\n"
            "  --batch B             images per step (default: 32)\n"
            "  --steps N             training steps (default: 1000); sample: sampling steps (default: 50)\n"
            "  --lr X                AdamW learning rate (default: 2e-4)\n"
            "  --weight-decay X      AdamW weight decay (default: 0)\n"
            "  --clip X              max global gradient norm, 0 = off (default: 1)\n"
            "  --ema X               EMA decay of the saved weights, 0 = off (default: 0.9999)\n"
            "  --ckpt FILE           checkpoint to write (train) or read (sample) (default: unet.safetensors)\n"
            "  --log-every K         read the loss every K steps (default: 1 on the CPU, 20 on CUDA;\n"
            "                        CUDA steps do not wait for the GPU in between)\n"
            "  --max-seconds S       stop (and save) at the first logging point after S seconds of training\n"
            "  --loss-csv FILE       write step,loss,ms rows (mean loss and ms/step of each K-step window;\n"
            "                        written beside FILE while training, renamed into place at the end)\n"
            "  --loss-png FILE       plot the loss curve (log-scale y) into a PNG\n"
            "  --profile             time the phases (input, forward, backward, optimizer) and the forward's\n"
            "                        op kinds with device events (each step then waits for the GPU);\n"
            "                        bench also prints every op kind's forward and backward time\n"
            "  --seed S              random seed (default: 0)\n"
            "  --no-progress         no progress bar\n"
            "\n"
            "sampling options: --n N (default 16), --sampler ddpm|ddim (default ddim), --steps N,\n"
            "  --out FILE.png (default grid.png), --scale K (pixel repeat, default 1), --seed S.\n"
            "  Checkpoints hold the EMA weights when EMA was on.\n"
            "bench: one fixed synthetic batch, the reference config (64x64x3, 20,494,211 parameters) unless\n"
            "  model options change it; --warmup steps (default 1 on the CPU, 3 on CUDA), then --steps timed\n"
            "  steps (default 3 / 20) between two device events; prints ms/step, FLOPs per step (3x the\n"
            "  forward's multiply-adds of convs, linears and attention), TFLOP/s and the floor at an assumed\n"
            "  peak; --profile adds a profiled pass.\n");
}

static int unet_bad(const char *fmt, const char *arg) {
    fprintf(stderr, "nabla unet: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `nabla unet --help`)\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "nabla unet: %s: %s\n", what, nb_last_error());
    return 1;
}

/* What the last failed parse_int / parse_float wanted ("an integer in 1..4096"): every bad
 * numeric flag value is reported with its allowed range. */
static char g_want[96];

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        snprintf(g_want, sizeof g_want, "an integer in %ld..%ld", lo, hi);
        return 0;
    }
    *out = (int)v;
    return 1;
}
static int parse_float(const char *s, double lo, double hi, float *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi)) {
        snprintf(g_want, sizeof g_want, "a number in [%g, %g]", lo, hi);
        return 0;
    }
    *out = (float)v;
    return 1;
}

/* Output files are checked before any work (a missing directory fails in a second, not after
 * training). */
static int check_out(const char *flag, const char *path) {
    if (!path || nb_file_check_writable(path, flag) == NB_OK) return 0;
    fprintf(stderr, "nabla unet: %s\n", nb_last_error());
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct opts {
    nb_unet_config cfg;
    int size_set, inch_set;
    const char *data, *ckpt, *out, *precision, *device, *loss_csv, *loss_png;
    int batch, steps, steps_set, n, sampler, progress, log_every, warmup, warmup_set, profile, scale;
    float lr, wd, clip, ema, max_seconds;
    uint64_t seed;
} opts;

static nb_tape_precision precision_of(const char *p) {
    return !strcmp(p, "tf32") ? NB_TAPE_TF32 : !strcmp(p, "bf16") ? NB_TAPE_BF16 : NB_TAPE_FP32;
}

/* Parses argv into o; returns 0 when all consumed, else the exit code (2 usage, -1 help). */
static int parse(int argc, char **argv, opts *o, int mode /* 0 train, 1 sample, 2 bench */) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            unet_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--conv-resample") && mode != 1) {
            o->cfg.conv_resample = 1;
            continue;
        }
        if (!strcmp(a, "--no-progress")) {
            o->progress = 0;
            continue;
        }
        if (!strcmp(a, "--profile") && mode != 1) {
            o->profile = 1;
            continue;
        }
        static const char *valued[] = {"--data", "--image-size", "--in-channels", "--channels", "--mult",
                                       "--res-blocks", "--attn", "--head-channels", "--groups", "--batch",
                                       "--steps", "--lr", "--weight-decay", "--clip", "--ema", "--ckpt",
                                       "--precision", "--device", "--seed", "--n", "--sampler", "--out",
                                       "--log-every", "--loss-csv", "--loss-png", "--warmup", "--max-seconds",
                                       "--scale", NULL};
        int known = 0;
        for (int k = 0; valued[k]; k++) known |= !strcmp(a, valued[k]);
        if (!known) return unet_bad("unknown argument '%s'", a);
        if (i + 1 >= argc) {
            fprintf(stderr, "nabla unet: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char msg[224];
        g_want[0] = '\0';
        int ok = 1;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--image-size")) ok = parse_int(v, 4, 1024, &o->cfg.image_size), o->size_set = 1;
        else if (!strcmp(a, "--in-channels")) {
            ok = parse_int(v, 1, 3, &o->cfg.in_channels) && o->cfg.in_channels != 2, o->inch_set = 1;
            if (!ok) snprintf(g_want, sizeof g_want, "1 or 3 (a grey or an RGB image)");
            o->cfg.out_channels = o->cfg.in_channels;
        } else if (!strcmp(a, "--channels")) ok = parse_int(v, 1, 4096, &o->cfg.model_channels);
        else if (!strcmp(a, "--mult")) {
            ok = nb_unet_parse_int_list(v, NB_UNET_MAX_LEVELS, 0, o->cfg.channel_mult, &o->cfg.n_levels) == NB_OK;
            if (!ok) snprintf(g_want, sizeof g_want, "1..%d comma-separated integers in 1..64", NB_UNET_MAX_LEVELS);
        }
        else if (!strcmp(a, "--res-blocks")) ok = parse_int(v, 1, 8, &o->cfg.num_res_blocks);
        else if (!strcmp(a, "--attn")) {
            ok = nb_unet_parse_int_list(strcmp(v, "none") ? v : "", NB_UNET_MAX_LEVELS, 1, o->cfg.attention_res,
                                        &o->cfg.n_attn) == NB_OK;
            if (!ok) snprintf(g_want, sizeof g_want, "none or up to %d comma-separated resolutions", NB_UNET_MAX_LEVELS);
        }
        else if (!strcmp(a, "--head-channels")) ok = parse_int(v, 1, 4096, &o->cfg.num_head_channels);
        else if (!strcmp(a, "--groups")) ok = parse_int(v, 1, 4096, &o->cfg.num_groups);
        else if (!strcmp(a, "--batch")) ok = parse_int(v, 1, 4096, &o->batch);
        else if (!strcmp(a, "--steps")) ok = parse_int(v, 1, 100000000, &o->steps), o->steps_set = 1;
        else if (!strcmp(a, "--warmup")) ok = parse_int(v, 0, 1000, &o->warmup), o->warmup_set = 1;
        else if (!strcmp(a, "--log-every")) ok = parse_int(v, 1, 100000000, &o->log_every);
        else if (!strcmp(a, "--max-seconds")) ok = parse_float(v, 0, 1e9, &o->max_seconds);
        else if (!strcmp(a, "--lr")) ok = parse_float(v, 1e-12, 10, &o->lr);
        else if (!strcmp(a, "--weight-decay")) ok = parse_float(v, 0, 10, &o->wd);
        else if (!strcmp(a, "--clip")) ok = parse_float(v, 0, 1e9, &o->clip);
        else if (!strcmp(a, "--ema")) ok = parse_float(v, 0, 0.999999999, &o->ema);
        else if (!strcmp(a, "--ckpt")) o->ckpt = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--loss-csv")) o->loss_csv = v;
        else if (!strcmp(a, "--loss-png")) o->loss_png = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--precision")) {
            ok = !strcmp(v, "fp32") || !strcmp(v, "tf32") || !strcmp(v, "bf16");
            if (!ok) return unet_bad("unknown precision '%s' (fp32, tf32 or bf16)", v);
            o->precision = v;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            ok = *v && *v != '-' && !*end && errno == 0;
            if (!ok) snprintf(g_want, sizeof g_want, "an integer in 0..18446744073709551615");
        } else if (!strcmp(a, "--n")) ok = parse_int(v, 1, 1024, &o->n);
        else if (!strcmp(a, "--scale")) ok = parse_int(v, 1, 16, &o->scale);
        else if (!strcmp(a, "--sampler")) {
            if (!strcmp(v, "ddpm")) o->sampler = NB_SAMPLER_DDPM;
            else if (!strcmp(v, "ddim")) o->sampler = NB_SAMPLER_DDIM;
            else return unet_bad("unknown sampler '%s' (ddpm or ddim)", v);
        }
        if (!ok) {
            snprintf(msg, sizeof msg, "bad value for %s: '%%s' (allowed: %s)", a, g_want[0] ? g_want : "see --help");
            return unet_bad(msg, v);
        }
    }
    const char *dv = o->device;
    int idx;
    if (strcmp(dv, "auto") && strcmp(dv, "cpu") && strcmp(dv, "cuda") &&
        !(!strncmp(dv, "cuda:", 5) && parse_int(dv + 5, 0, 1023, &idx)))
        return unet_bad("unknown device '%s' (auto, cpu or cuda[:N])", dv);
    return 0;
}

static void defaults(opts *o) {
    memset(o, 0, sizeof *o);
    o->cfg = nb_unet_config_reference();
    o->data = "fashion-mnist";
    o->ckpt = "unet.safetensors";
    o->out = "grid.png";
    o->precision = "fp32";
    o->device = "auto";
    o->batch = 32, o->steps = 1000, o->n = 16, o->sampler = NB_SAMPLER_DDIM, o->progress = 1, o->scale = 1;
    o->lr = 2e-4f, o->clip = 1.0f, o->ema = 0.9999f;
}

/* Opens o->device; tf32 / bf16 on the CPU is an error (exit 1). Returns 0 or the exit code. */
static int open_device(const opts *o, nb_device **dev) {
    if (nb_device_open(o->device, dev)) return fail("device");
    if (nb_device_get_kind(*dev) != NB_DEVICE_CUDA && strcmp(o->precision, "fp32")) {
        fprintf(stderr, "nabla unet: --precision %s needs a CUDA device (the CPU path computes in fp32; "
                        "device here: %s)\n", o->precision, nb_device_name(*dev));
        nb_device_close(*dev);
        *dev = NULL;
        return 1;
    }
    return 0;
}

static void progress(int step, int total, float loss, double ms) {
    int w = 24, fill = (int)((double)step * w / total);
    char bar[32];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
    bar[w] = 0;
    fprintf(stderr, "\r  step %d/%d [%s] loss %.4f  %.1f ms/step ", step, total, bar, loss, ms);
    if (step == total) fputc('\n', stderr);
    fflush(stderr);
}

typedef struct model {
    nb_tape *t;
    nb_unet *u;
    nb_ddpm *d;
} model;

static void model_free(model *m) {
    nb_ddpm_free(m->d);
    nb_unet_free(m->u);
    nb_tape_free(m->t);
}

static nb_status model_make(model *m, const nb_unet_config *cfg, const opts *o, nb_device *dev) {
    memset(m, 0, sizeof *m);
    nb_status s = nb_tape_create_on(dev, &m->t);
    if (!s && nb_device_get_kind(dev) == NB_DEVICE_CUDA) s = nb_tape_set_precision(m->t, precision_of(o->precision));
    if (!s) s = nb_unet_create(cfg, m->t, &m->u);
    if (!s) s = nb_unet_init(m->u, o->seed);
    nb_ddpm_config dc = nb_ddpm_config_default();
    dc.lr = o->lr, dc.weight_decay = o->wd, dc.grad_clip = o->clip, dc.ema_decay = o->ema, dc.seed = o->seed;
    if (!s) s = nb_ddpm_create(m->u, &dc, &m->d);
    return s;
}

static nb_status open_data(const opts *o, nb_dataset **ds) {
    if (!strncmp(o->data, "fashion-mnist:", 14))
        return nb_dataset_fashion_mnist(o->data + 14, o->cfg.image_size, o->cfg.in_channels, ds);
    return nb_dataset_open(o->data, o->cfg.image_size, o->cfg.in_channels, o->seed, ds);
}

static void print_profile(model *m) {
    nb_ddpm_profile p;
    nb_unet_prof_entry e[NB_UNET_PROF_KINDS];
    int n = 0;
    if (nb_ddpm_get_profile(m->d, &p) || nb_unet_get_profile(m->u, e, &n) || p.steps < 1) return;
    double k = 1.0 / (double)p.steps, tot = (p.input_ms + p.forward_ms + p.backward_ms + p.optimizer_ms) * k;
    printf("profile (%lld steps, device events; each profiled step waits for the device):\n", (long long)p.steps);
    printf("  phase      ms/step    share\n");
    const char *nm[4] = {"input", "forward", "backward", "optimizer"};
    double v[4] = {p.input_ms, p.forward_ms, p.backward_ms, p.optimizer_ms};
    for (int i = 0; i < 4; i++) printf("  %-9s %8.3f  %6.1f%%\n", nm[i], v[i] * k, tot > 0 ? 100 * v[i] * k / tot : 0);
    double fsum = 0;
    for (int i = 0; i < n; i++) fsum += e[i].ms;
    printf("  forward op kinds (per step; the backward is one tape call, not split):\n");
    for (int i = 0; i < n; i++)
        printf("    %-34s %6.1f calls %8.3f ms  %5.1f%%\n", e[i].op, (double)e[i].calls * k, e[i].ms * k,
               fsum > 0 ? 100 * e[i].ms / fsum : 0);
}

static int cmd_bench(opts *o, model *m, nb_device *dev, const float *x) {
    int cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    if (!o->warmup_set) o->warmup = cuda ? 3 : 1;
    if (!o->steps_set) o->steps = cuda ? 20 : 3;
    for (int i = 0; i < o->warmup; i++)
        if (nb_ddpm_train_step(m->d, x, o->batch, NULL, NULL)) return fail("warm-up step");
    nb_ddpm_stats st;
    if (nb_ddpm_read_stats(m->d, &st)) return fail("warm-up step");
    nb_event *e0 = NULL, *e1 = NULL;
    nb_stream *s = nb_device_stream(dev);
    float ms = 0;
    int rc = 0;
    if (nb_event_create(dev, &e0) || nb_event_create(dev, &e1) || nb_event_record(e0, s)) rc = fail("events");
    for (int i = 0; i < o->steps && !rc; i++)
        if (nb_ddpm_train_step(m->d, x, o->batch, NULL, NULL)) rc = fail("training step");
    if (!rc && (nb_event_record(e1, s) || nb_event_synchronize(e1) || nb_event_elapsed_ms(e0, e1, &ms)))
        rc = fail("events");
    if (e0) nb_event_destroy(e0);
    if (e1) nb_event_destroy(e1);
    if (rc) return rc;
    if (nb_ddpm_read_stats(m->d, &st)) return fail("training step");
    double flops = 0, per = ms / o->steps;
    nb_unet_last_forward_flops(m->u, &flops);
    double step_flops = 3 * flops; /* forward + backward (two GEMMs per forward GEMM) */
    printf("mean loss of the timed steps: %.4f\n", st.mean_loss);
    int gs = nb_ddpm_graph_state(m->d);
    printf("ms/step: %.3f (%d steps after %d warm-up, %s%s)\n", per, o->steps, o->warmup,
           cuda ? "CUDA events" : "host clock",
           gs == 2 ? ", forward + backward replayed from a CUDA graph"
                   : cuda ? ", no CUDA graph (NABLA_CUDA_GRAPH=0 or capture failed)" : "");
    printf("FLOPs per step: %.4g TFLOP = 3 x forward %.4g GFLOP (2 per multiply-add of convs, linears and "
           "attention matmuls)\n", step_flops / 1e12, flops / 1e9);
    printf("training TFLOP/s: %.3f\n", per > 0 ? step_flops / (per * 1e-3) / 1e12 : 0);
    if (cuda) {
        const char *what = NULL;
        double peak = 0;
        if (nb_device_datasheet_peak(dev, o->precision, &peak, &what)) return fail("datasheet peak");
        if (peak > 0)
            printf("floor: %.3f ms/step at %.1f TFLOP/s (ASSUMED peak: %s; not measured) -> %.1f%% of that peak\n",
                   step_flops / peak * 1e3, peak / 1e12, what, per > 0 ? 100 * step_flops / peak / (per * 1e-3) : 0);
        else
            printf("floor: %s\n", what);
    }
    if (o->profile) {
        int np = o->steps < 5 ? o->steps : 5;
        nb_tape *t = nb_unet_tape(m->u);
        if (nb_ddpm_set_profile(m->d, 1) || nb_tape_set_profiling(t, 1)) return fail("profile");
        for (int i = 0; i < np; i++)
            if (nb_ddpm_train_step(m->d, x, o->batch, NULL, NULL)) return fail("profiled step");
        print_profile(m);
        static char rep[16384];
        if (nb_tape_profile_report(t, rep, sizeof rep) || nb_tape_set_profiling(t, 0))
            return fail("profile report");
        printf("per op kind, forward and backward (tape profiler, %d steps):\n%s", np, rep);
    }
    return 0;
}

typedef struct curve {
    double *x, *y;
    int n, cap;
} curve;

static void curve_add(curve *c, double x, double y) {
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 256;
        double *nx = realloc(c->x, sizeof(double) * (size_t)cap);
        if (nx) c->x = nx;
        double *ny = nx ? realloc(c->y, sizeof(double) * (size_t)cap) : NULL;
        if (!ny) return; /* a point less on the plot */
        c->y = ny, c->cap = cap;
    }
    c->x[c->n] = x, c->y[c->n] = y, c->n++;
}

static int cmd_train(int argc, char **argv, int bench) {
    opts o;
    defaults(&o);
    if (bench) o.data = "synthetic";
    int r = parse(argc, argv, &o, bench ? 2 : 0);
    if (r) return r < 0 ? 0 : r;
    int fm = !strncmp(o.data, "fashion-mnist", 13);
    if (!o.size_set) o.cfg.image_size = fm ? 32 : 64;
    if (!o.inch_set) o.cfg.in_channels = o.cfg.out_channels = fm ? 1 : 3;
    if (nb_unet_config_validate(&o.cfg)) {
        fprintf(stderr, "nabla unet: invalid model: %s\n", nb_last_error());
        return 2;
    }
    if (!bench && (check_out("--ckpt", o.ckpt) || check_out("--loss-csv", o.loss_csv) ||
                   check_out("--loss-png", o.loss_png)))
        return 1;
    nb_device *dev;
    if ((r = open_device(&o, &dev))) return r;
    int cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    nb_dataset *ds;
    if (open_data(&o, &ds)) {
        nb_device_close(dev);
        return fail("data");
    }
    int64_t nimg, np;
    nb_dataset_count(ds, &nimg);
    nb_unet_param_count(&o.cfg, &np);
    model m;
    if (model_make(&m, &o.cfg, &o, dev)) {
        r = fail("model");
        nb_dataset_free(ds);
        model_free(&m);
        nb_device_close(dev);
        return r;
    }
    const nb_device_info *di = nb_device_get_info(dev);
    printf("unet%s: %dx%dx%d, %lld parameters, data %s (%lld images), batch %d, device %s (%s), %s\n",
           bench ? " bench" : "", o.cfg.image_size, o.cfg.image_size, o.cfg.in_channels, (long long)np, o.data,
           (long long)nimg, o.batch, nb_device_name(dev), di->name, o.precision);
    fflush(stdout);
    if (!cuda && np > 5000000)
        fprintf(stderr, "note: the CPU reference path needs seconds per image per step for a model this size\n");
    size_t xn = (size_t)o.batch * o.cfg.in_channels * o.cfg.image_size * o.cfg.image_size;
    float *x = malloc(sizeof(float) * xn);
    int rc = 0;
    if (!x) rc = fail("out of memory");
    if (!rc && bench) {
        if (nb_dataset_batch(ds, o.batch, o.seed, 0, x)) rc = fail("data");
        else rc = cmd_bench(&o, &m, dev, x);
        goto done;
    }
    /* --loss-csv is written to a temporary file beside it while training (flushed at every
     * logging window) and renamed into place at the end, also when --max-seconds stops the run:
     * the file at the path is only ever a whole, finished CSV. */
    nb_file_atomic csv_file = {0};
    FILE *csv = NULL;
    if (!rc && o.loss_csv) {
        if (nb_file_atomic_open(&csv_file, o.loss_csv, "--loss-csv")) rc = fail("loss CSV");
        else csv = csv_file.f;
    }
    if (csv) fprintf(csv, "step,loss,ms\n");
    int every = o.log_every ? o.log_every : cuda ? 20 : 1;
    if (!rc && o.profile && nb_ddpm_set_profile(m.d, 1)) rc = fail("profile");
    curve cv = {0};
    double t_start = now_s(), t_win = t_start, t_after_first = 0, t_end = 0, tail_sum = 0;
    int first_end = 0, tail_n = 0, done_steps = 0;
    for (int step = 0; step < o.steps && !rc; step++) {
        if (nb_dataset_batch(ds, o.batch, o.seed, (uint64_t)step, x)) {
            rc = fail("data");
            break;
        }
        if (nb_ddpm_train_step(m.d, x, o.batch, NULL, NULL)) {
            if (o.progress) fputc('\n', stderr);
            rc = fail("training step");
            break;
        }
        if ((step + 1) % every && step + 1 != o.steps) continue;
        nb_ddpm_stats st;
        if (nb_ddpm_read_stats(m.d, &st)) { /* waits for the device */
            if (o.progress) fputc('\n', stderr);
            rc = fail("training step");
            break;
        }
        double t = now_s(), ms = 1e3 * (t - t_win) / (double)(st.steps ? st.steps : 1);
        t_win = t;
        if (!first_end) first_end = step + 1, t_after_first = t;
        t_end = t;
        curve_add(&cv, step + 1, st.mean_loss);
        if (csv) {
            fprintf(csv, "%d,%.6g,%.3f\n", step + 1, st.mean_loss, ms);
            fflush(csv);
        }
        if (o.progress) progress(step + 1, o.steps, (float)st.mean_loss, ms);
        done_steps = step + 1;
        if (o.max_seconds > 0 && t - t_start >= o.max_seconds && step + 1 < o.steps) {
            if (o.progress) fputc('\n', stderr);
            printf("stopped after %d steps: --max-seconds %g reached\n", step + 1, (double)o.max_seconds);
            break;
        }
    }
    /* the final loss: the last windows covering >= 10 steps */
    for (int i = cv.n - 1, covered = 0; i >= 0 && covered < 10; i--) {
        int w = (int)(cv.x[i] - (i ? cv.x[i - 1] : 0));
        tail_sum += cv.y[i] * w, tail_n += w, covered += w;
    }
    if (!rc) {
        printf("final loss (mean of the last %d steps): %.4f\n", tail_n, tail_n ? tail_sum / tail_n : 0);
        if (done_steps > first_end)
            printf("mean ms/step: %.1f (steps after the first%s)\n",
                   1e3 * (t_end - t_after_first) / (done_steps - first_end), every > 1 ? " logging window" : "");
        else
            printf("mean ms/step: %.1f (one window, includes start-up)\n", 1e3 * (t_end - t_start) / done_steps);
        if (o.profile) print_profile(&m);
        if (nb_ddpm_save(m.d, o.ckpt)) rc = fail("checkpoint");
        else printf("saved %s (%s weights)\n", o.ckpt, o.ema > 0 ? "EMA" : "raw");
    }
    if (csv && !rc) {
        if (nb_file_atomic_commit(&csv_file)) rc = fail("loss CSV");
    } else if (csv) {
        nb_file_atomic_abort(&csv_file);
    }
    if (!rc && o.loss_csv) printf("wrote %s\n", o.loss_csv);
    if (!rc && o.loss_png) {
        if (nb_image_plot_loss(o.loss_png, cv.x, cv.y, cv.n)) rc = fail("loss plot");
        else printf("wrote %s\n", o.loss_png);
    }
    free(cv.x), free(cv.y);
done:
    free(x);
    nb_dataset_free(ds);
    model_free(&m);
    nb_device_close(dev);
    return rc;
}

static int cmd_sample(int argc, char **argv) {
    opts o;
    defaults(&o);
    o.steps = 50;
    int r = parse(argc, argv, &o, 1);
    if (r) return r < 0 ? 0 : r;
    if (check_out("--out", o.out)) return 1;
    nb_unet_config cfg;
    if (nb_unet_read_config(o.ckpt, &cfg)) return fail("checkpoint");
    if (cfg.in_channels != 1 && cfg.in_channels != 3) {
        fprintf(stderr, "nabla unet: checkpoint has %d channels; PNG grids need 1 or 3\n", cfg.in_channels);
        return 1;
    }
    nb_device *dev;
    if ((r = open_device(&o, &dev))) return r;
    o.ema = 0; /* the checkpoint's weights are used as they are */
    model m;
    if (model_make(&m, &cfg, &o, dev) || nb_unet_load(m.u, o.ckpt)) {
        r = fail("checkpoint");
        model_free(&m);
        nb_device_close(dev);
        return r;
    }
    int S = cfg.image_size, C = cfg.in_channels;
    float *x = malloc(sizeof(float) * (size_t)o.n * C * S * S);
    int rc = 0;
    double t0 = now_s();
    if (!x || nb_ddpm_sample(m.d, (nb_sampler)o.sampler, o.steps, o.n, o.seed, x)) rc = fail("sampling");
    double dt = now_s() - t0;
    nb_tensor *grid = NULL;
    if (!rc && nb_ddpm_sample_grid(x, o.n, C, S, o.scale, &grid)) rc = fail("grid");
    if (!rc) {
        if (nb_image_write_png(o.out, grid)) rc = fail("writing the grid");
        else printf("sampled %d images (%s, %d steps) on %s in %.2f s -> %s\n", o.n,
                    o.sampler == NB_SAMPLER_DDPM ? "ddpm" : "ddim", o.steps, nb_device_name(dev), dt, o.out);
    }
    nb_tensor_free(grid);
    free(x);
    model_free(&m);
    nb_device_close(dev);
    return rc;
}

int nb_cmd_unet(int argc, char **argv) {
    if (argc < 1) return unet_bad("%s", "missing sub-command: train, sample or bench");
    if (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        unet_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[0], "train")) return cmd_train(argc - 1, argv + 1, 0);
    if (!strcmp(argv[0], "bench")) return cmd_train(argc - 1, argv + 1, 1);
    if (!strcmp(argv[0], "sample")) return cmd_sample(argc - 1, argv + 1);
    return unet_bad("unknown sub-command '%s' (train, sample or bench)", argv[0]);
}
