/* `nabla unet train|sample|bench`: a diffusion UNet (guided-diffusion's UNetModel) trained with
 * DDPM on the tape (CPU reference path), checkpoints in safetensors, DDPM / DDIM sampling to a PNG
 * grid, and a training benchmark. See include/nabla/nn_unet.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "nabla/image.h"
#include "nabla/nabla.h"
#include "nabla/nn_dataset.h"
#include "nabla/nn_unet.h"

static void unet_usage(FILE *to) {
    fprintf(to,
            "usage: nabla unet train  [options]       train a diffusion UNet (DDPM, epsilon MSE, AdamW)\n"
            "       nabla unet sample --ckpt FILE [--n 16] [--sampler ddpm|ddim] [--steps N] [--out grid.png]\n"
            "       nabla unet bench  [--batch 32] [--steps 3] [model options]\n"
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
            "training options:\n"
            "  --data fashion-mnist|synthetic|DIR   data set (DIR: a folder of PNGs; default: fashion-mnist)\n"
            "  --batch B             images per step (default: 32)\n"
            "  --steps N             training steps (default: 1000); sample: sampling steps (default: 50)\n"
            "  --lr X                AdamW learning rate (default: 2e-4)\n"
            "  --weight-decay X      AdamW weight decay (default: 0)\n"
            "  --clip X              max global gradient norm, 0 = off (default: 1)\n"
            "  --ema X               EMA decay of the saved weights, 0 = off (default: 0.9999)\n"
            "  --ckpt FILE           checkpoint to write (train) or read (sample) (default: unet.safetensors)\n"
            "  --precision fp32|tf32|bf16   (only fp32 exists: the CPU path)\n"
            "  --device auto|cpu|cuda       (default: auto = cpu; the CUDA path is not implemented yet)\n"
            "  --seed S              random seed (default: 0)\n"
            "  --no-progress         no progress bar\n"
            "\n"
            "sampling options: --n N (default 16), --sampler ddpm|ddim (default ddim), --steps N,\n"
            "  --out FILE.png (default grid.png), --seed S. Checkpoints hold the EMA weights when EMA was on.\n"
            "bench: synthetic data, the reference config (64x64x3, 20,494,211 parameters) unless model\n"
            "  options change it; prints ms/step and TFLOP/s (3x the forward's multiply-adds).\n");
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

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}
static int parse_float(const char *s, double lo, double hi, float *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi)) return 0;
    *out = (float)v;
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
    const char *data, *ckpt, *out, *precision, *device;
    int batch, steps, steps_set, n, sampler, progress;
    float lr, wd, clip, ema;
    uint64_t seed;
} opts;

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
        static const char *valued[] = {"--data", "--image-size", "--in-channels", "--channels", "--mult",
                                       "--res-blocks", "--attn", "--head-channels", "--groups", "--batch",
                                       "--steps", "--lr", "--weight-decay", "--clip", "--ema", "--ckpt",
                                       "--precision", "--device", "--seed", "--n", "--sampler", "--out", NULL};
        int known = 0;
        for (int k = 0; valued[k]; k++) known |= !strcmp(a, valued[k]);
        if (!known) return unet_bad("unknown argument '%s'", a);
        if (i + 1 >= argc) {
            fprintf(stderr, "nabla unet: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char msg[96];
        snprintf(msg, sizeof msg, "bad value for %s: '%%s'", a);
        int ok = 1;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--image-size")) ok = parse_int(v, 4, 1024, &o->cfg.image_size), o->size_set = 1;
        else if (!strcmp(a, "--in-channels")) {
            ok = parse_int(v, 1, 3, &o->cfg.in_channels) && o->cfg.in_channels != 2, o->inch_set = 1;
            o->cfg.out_channels = o->cfg.in_channels;
        } else if (!strcmp(a, "--channels")) ok = parse_int(v, 1, 4096, &o->cfg.model_channels);
        else if (!strcmp(a, "--mult"))
            ok = nb_unet_parse_int_list(v, NB_UNET_MAX_LEVELS, 0, o->cfg.channel_mult, &o->cfg.n_levels) == NB_OK;
        else if (!strcmp(a, "--res-blocks")) ok = parse_int(v, 1, 8, &o->cfg.num_res_blocks);
        else if (!strcmp(a, "--attn"))
            ok = nb_unet_parse_int_list(strcmp(v, "none") ? v : "", NB_UNET_MAX_LEVELS, 1, o->cfg.attention_res,
                                        &o->cfg.n_attn) == NB_OK;
        else if (!strcmp(a, "--head-channels")) ok = parse_int(v, 1, 4096, &o->cfg.num_head_channels);
        else if (!strcmp(a, "--groups")) ok = parse_int(v, 1, 4096, &o->cfg.num_groups);
        else if (!strcmp(a, "--batch")) ok = parse_int(v, 1, 4096, &o->batch);
        else if (!strcmp(a, "--steps")) ok = parse_int(v, 1, 100000000, &o->steps), o->steps_set = 1;
        else if (!strcmp(a, "--lr")) ok = parse_float(v, 1e-12, 10, &o->lr);
        else if (!strcmp(a, "--weight-decay")) ok = parse_float(v, 0, 10, &o->wd);
        else if (!strcmp(a, "--clip")) ok = parse_float(v, 0, 1e9, &o->clip);
        else if (!strcmp(a, "--ema")) ok = parse_float(v, 0, 0.999999999, &o->ema);
        else if (!strcmp(a, "--ckpt")) o->ckpt = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--precision")) {
            ok = !strcmp(v, "fp32") || !strcmp(v, "tf32") || !strcmp(v, "bf16");
            if (!ok) return unet_bad("unknown precision '%s' (fp32, tf32 or bf16)", v);
            o->precision = v;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            o->seed = strtoull(v, &end, 10);
            ok = *v && !*end;
        } else if (!strcmp(a, "--n")) ok = parse_int(v, 1, 1024, &o->n);
        else if (!strcmp(a, "--sampler")) {
            if (!strcmp(v, "ddpm")) o->sampler = NB_SAMPLER_DDPM;
            else if (!strcmp(v, "ddim")) o->sampler = NB_SAMPLER_DDIM;
            else return unet_bad("unknown sampler '%s' (ddpm or ddim)", v);
        }
        if (!ok) return unet_bad(msg, v);
    }
    if (strcmp(o->device, "auto") && strcmp(o->device, "cpu")) {
        if (!strncmp(o->device, "cuda", 4)) {
            fprintf(stderr, "nabla unet: --device %s: the CUDA path is not implemented yet (the tape has "
                            "CPU ops only); use --device cpu\n", o->device);
            return 1;
        }
        return unet_bad("unknown device '%s' (auto, cpu or cuda[:N])", o->device);
    }
    if (strcmp(o->precision, "fp32")) {
        fprintf(stderr, "nabla unet: --precision %s is not implemented (the CPU path computes in fp32)\n",
                o->precision);
        return 1;
    }
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
    o->batch = 32, o->steps = 1000, o->n = 16, o->sampler = NB_SAMPLER_DDIM, o->progress = 1;
    o->lr = 2e-4f, o->clip = 1.0f, o->ema = 0.9999f;
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

static nb_status model_make(model *m, const nb_unet_config *cfg, const opts *o) {
    memset(m, 0, sizeof *m);
    nb_status s = nb_tape_create(&m->t);
    if (!s) s = nb_unet_create(cfg, m->t, &m->u);
    if (!s) s = nb_unet_init(m->u, o->seed);
    nb_ddpm_config dc = nb_ddpm_config_default();
    dc.lr = o->lr, dc.weight_decay = o->wd, dc.grad_clip = o->clip, dc.ema_decay = o->ema, dc.seed = o->seed;
    if (!s) s = nb_ddpm_create(m->u, &dc, &m->d);
    return s;
}

static int cmd_train(int argc, char **argv, int bench) {
    opts o;
    defaults(&o);
    if (bench) o.data = "synthetic", o.steps = 3;
    int r = parse(argc, argv, &o, bench ? 2 : 0);
    if (r) return r < 0 ? 0 : r;
    int fm = !strcmp(o.data, "fashion-mnist");
    if (!o.size_set) o.cfg.image_size = fm ? 32 : 64;
    if (!o.inch_set) o.cfg.in_channels = o.cfg.out_channels = fm ? 1 : 3;
    if (nb_unet_config_validate(&o.cfg)) {
        fprintf(stderr, "nabla unet: invalid model: %s\n", nb_last_error());
        return 2;
    }
    nb_dataset *ds;
    if (nb_dataset_open(o.data, o.cfg.image_size, o.cfg.in_channels, o.seed, &ds)) return fail("data");
    int64_t nimg, np;
    nb_dataset_count(ds, &nimg);
    nb_unet_param_count(&o.cfg, &np);
    model m;
    if (model_make(&m, &o.cfg, &o)) {
        nb_dataset_free(ds);
        model_free(&m);
        return fail("model");
    }
    printf("unet: %dx%dx%d, %lld parameters, data %s (%lld images), batch %d, %d steps, device cpu, fp32\n",
           o.cfg.image_size, o.cfg.image_size, o.cfg.in_channels, (long long)np, o.data, (long long)nimg,
           o.batch, o.steps);
    fflush(stdout);
    if (np > 5000000)
        fprintf(stderr, "note: the CPU reference path needs seconds per image per step for a model this "
                        "size (the CUDA path is not implemented yet)\n");
    float *x = malloc(sizeof(float) * (size_t)o.batch * o.cfg.in_channels * o.cfg.image_size * o.cfg.image_size);
    double t_total = 0, loss_tail = 0, flops = 0;
    int n_timed = 0, n_tail = 0, rc = 0;
    float loss = 0;
    for (int step = 0; step < o.steps && x; step++) {
        if (nb_dataset_batch(ds, o.batch, o.seed, (uint64_t)step, x)) {
            rc = fail("data");
            break;
        }
        double t0 = now_s();
        if (nb_ddpm_train_step(m.d, x, o.batch, &loss, NULL)) {
            if (o.progress) fputc('\n', stderr);
            rc = fail("training step");
            break;
        }
        double dt = now_s() - t0;
        if (step > 0 || o.steps == 1) t_total += dt, n_timed++;
        if (step >= o.steps - 10) loss_tail += loss, n_tail++;
        if (o.progress) progress(step + 1, o.steps, loss, 1e3 * (n_timed ? t_total / n_timed : dt));
    }
    nb_unet_last_forward_flops(m.u, &flops);
    double ms = n_timed ? 1e3 * t_total / n_timed : 0;
    if (!rc && x) {
        printf("final loss (mean of the last %d steps): %.4f\n", n_tail, loss_tail / (n_tail ? n_tail : 1));
        printf("mean ms/step: %.1f (steps after the first)\n", ms);
        if (bench) /* forward + backward ~ 3x the forward's multiply-adds */
            printf("training TFLOP/s: %.4f (%.2f GFLOP per step, 3x forward)\n", ms > 0 ? 3 * flops / (ms * 1e-3) / 1e12 : 0,
                   3 * flops / 1e9);
        else {
            float *ema;
            nb_ddpm_ema_params(m.d, &ema);
            if (nb_unet_save(m.u, ema, o.ckpt)) rc = fail("checkpoint");
            else printf("saved %s (%s weights)\n", o.ckpt, o.ema > 0 ? "EMA" : "raw");
        }
    }
    free(x);
    nb_dataset_free(ds);
    model_free(&m);
    return rc;
}

static int cmd_sample(int argc, char **argv) {
    opts o;
    defaults(&o);
    o.steps = 50;
    int r = parse(argc, argv, &o, 1);
    if (r) return r < 0 ? 0 : r;
    nb_unet_config cfg;
    if (nb_unet_read_config(o.ckpt, &cfg)) return fail("checkpoint");
    if (cfg.in_channels != 1 && cfg.in_channels != 3) {
        fprintf(stderr, "nabla unet: checkpoint has %d channels; PNG grids need 1 or 3\n", cfg.in_channels);
        return 1;
    }
    o.ema = 0; /* the checkpoint's weights are used as they are */
    model m;
    if (model_make(&m, &cfg, &o) || nb_unet_load(m.u, o.ckpt)) {
        model_free(&m);
        return fail("checkpoint");
    }
    int S = cfg.image_size, C = cfg.in_channels, cols = (int)ceil(sqrt((double)o.n)), rows = (o.n + cols - 1) / cols;
    float *x = malloc(sizeof(float) * (size_t)o.n * C * S * S);
    int rc = 0;
    double t0 = now_s();
    if (!x || nb_ddpm_sample(m.d, (nb_sampler)o.sampler, o.steps, o.n, o.seed, x)) rc = fail("sampling");
    double dt = now_s() - t0;
    nb_device *cpu;
    nb_tensor *grid = NULL;
    if (!rc && (nb_device_open("cpu", &cpu) ||
                nb_tensor_zeros(cpu, NB_F32, 3, (int64_t[]){(int64_t)rows * S, (int64_t)cols * S, C}, &grid)))
        rc = fail("grid");
    if (!rc) {
        float *g = nb_tensor_data(grid);
        for (int i = 0; i < o.n; i++)
            for (int c = 0; c < C; c++)
                for (int y = 0; y < S; y++)
                    for (int xx = 0; xx < S; xx++) {
                        size_t gy = (size_t)(i / cols) * S + y, gx = (size_t)(i % cols) * S + xx;
                        g[(gy * cols * S + gx) * C + c] = (x[(((size_t)i * C + c) * S + y) * S + xx] + 1) * 0.5f;
                    }
        if (nb_image_write_png(o.out, grid)) rc = fail("writing the grid");
        else printf("sampled %d images (%s, %d steps) in %.1f s -> %s\n", o.n,
                    o.sampler == NB_SAMPLER_DDPM ? "ddpm" : "ddim", o.steps, dt, o.out);
    }
    nb_tensor_free(grid);
    free(x);
    model_free(&m);
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
