/* Per-op forward / backward profile of a DDPM training step of the reference UNet on the tape
 * (nb_tape_set_profiling). Usage:
 *   tapeprof_unet [device=cuda] [batch=32] [image_size=64] [model_channels=64] [precision=tf32]
 *                 [out_dir=.]
 * 3 warm-up steps, 3 steps timed without the profiler (ddpm phase times), 3 steps profiled per
 * op kind, 3 per op kind and shape; writes tapeprof_kinds.txt and tapeprof_shapes.txt to out_dir
 * and prints both. Build: cc -O2 -std=c11 -Iinclude tools/device/tapeprof_unet.c
 *   build-dev-tapeprof/libnabla.a -lm -ldl -lpthread */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla/device.h"
#include "nabla/nn_tape.h"
#include "nabla/nn_unet.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        nb_status s_ = (x);                                                                        \
        if (s_) {                                                                                  \
            fprintf(stderr, "tapeprof_unet: %s failed: %s\n", #x, nb_last_error());        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void dump(nb_tape *t, const char *dir, const char *file, const char *title) {
    size_t cap = 1 << 20;
    char *rep = malloc(cap);
    TRY(nb_tape_profile_report(t, rep, cap));
    printf("== %s\n%s\n", title, rep);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "== %s\n%s", title, rep);
        fclose(f);
    }
    free(rep);
}

int main(int argc, char **argv) {
    const char *devname = argc > 1 ? argv[1] : "cuda";
    int batch = argc > 2 ? atoi(argv[2]) : 32;
    nb_unet_config cfg = nb_unet_config_reference();
    if (argc > 3) cfg.image_size = atoi(argv[3]);
    if (argc > 4) cfg.model_channels = atoi(argv[4]);
    const char *prec = argc > 5 ? argv[5] : "tf32";
    const char *dir = argc > 6 ? argv[6] : ".";
    nb_tape_precision p = !strcmp(prec, "fp32") ? NB_TAPE_FP32
                          : !strcmp(prec, "bf16") ? NB_TAPE_BF16 : NB_TAPE_TF32;
    if (cfg.model_channels < 32) /* small CPU smoke runs */
        cfg.num_groups = cfg.model_channels, cfg.num_head_channels = cfg.model_channels;

    nb_device *dev;
    TRY(nb_device_open(devname, &dev));
    nb_tape *t;
    TRY(nb_tape_create_on(dev, &t));
    TRY(nb_tape_set_precision(t, p));
    nb_unet *u;
    TRY(nb_unet_create(&cfg, t, &u));
    TRY(nb_unet_init(u, 1));
    nb_ddpm_config dc = nb_ddpm_config_default();
    nb_ddpm *d;
    TRY(nb_ddpm_create(u, &dc, &d));
    int64_t per = (int64_t)cfg.in_channels * cfg.image_size * cfg.image_size;
    float *x0 = malloc((size_t)(batch * per) * sizeof(float));
    uint64_t r = 12345;
    for (int64_t i = 0; i < batch * per; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x0[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    int64_t np;
    TRY(nb_unet_param_count(&cfg, &np));
    printf("tapeprof_unet: %s, batch %d, %dx%dx%d, %d channels, %lld params, precision %s\n",
           devname, batch, cfg.image_size, cfg.image_size, cfg.in_channels, cfg.model_channels,
           (long long)np, prec);
    nb_ddpm_stats st;
    for (int i = 0; i < 3; i++) TRY(nb_ddpm_train_step(d, x0, batch, NULL, NULL)); /* warm-up */
    TRY(nb_ddpm_read_stats(d, &st));

    /* unprofiled steps: wall time per step, and the trainer's phase times */
    double t0 = now_ms();
    for (int i = 0; i < 3; i++) TRY(nb_ddpm_train_step(d, x0, batch, NULL, NULL));
    TRY(nb_ddpm_read_stats(d, &st));
    double plain = (now_ms() - t0) / 3;
    TRY(nb_ddpm_set_profile(d, 1));
    for (int i = 0; i < 3; i++) TRY(nb_ddpm_train_step(d, x0, batch, NULL, NULL));
    nb_ddpm_profile ph;
    TRY(nb_ddpm_get_profile(d, &ph));
    TRY(nb_ddpm_set_profile(d, 0));
    printf("step (no profiler): %.3f ms wall; phases per step: input %.3f, forward %.3f, "
           "backward %.3f, optimizer %.3f ms (loss %.4f)\n",
           plain, ph.input_ms / ph.steps, ph.forward_ms / ph.steps, ph.backward_ms / ph.steps,
           ph.optimizer_ms / ph.steps, st.mean_loss);

    const char *titles[2] = {"per op kind", "per op kind and shape"};
    const char *files[2] = {"tapeprof_kinds.txt", "tapeprof_shapes.txt"};
    for (int level = 1; level <= 2; level++) {
        TRY(nb_tape_set_profiling(t, level));
        TRY(nb_tape_profile_reset(t));
        t0 = now_ms();
        for (int i = 0; i < 3; i++) TRY(nb_ddpm_train_step(d, x0, batch, NULL, NULL));
        TRY(nb_ddpm_read_stats(d, &st));
        double prof = (now_ms() - t0) / 3;
        char title[256];
        snprintf(title, sizeof title, "%s (%s, batch %d, %s; step with the profiler %.3f ms wall "
                 "vs %.3f without)", titles[level - 1], devname, batch, prec, prof, plain);
        dump(t, dir, files[level - 1], title);
    }
    TRY(nb_tape_set_profiling(t, 0));
    nb_ddpm_free(d);
    nb_unet_free(u);
    nb_tape_free(t);
    nb_device_close(dev);
    free(x0);
    return 0;
}
