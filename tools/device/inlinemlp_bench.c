/* Device-run breakdown of the grid model's step (tools/device/inlinemlp.sh): GPU time of the
 * fused forward+backward call of examples/image_model.nb's image_loss over every pixel of a
 * SIZE x SIZE image, with and without each gradient (an unbound DiffTensor gradient skips its
 * atomics), the forward alone (image_model), and Adam. Uses only the public API.
 *
 *   cc -O2 -Iinclude tools/device/inlinemlp_bench.c BUILD/libnabla.a -lm -lpthread -ldl
 *   ./a.out MODEL.nb [SIZE] [DEVICE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/image.h"
#include "nabla/nabla.h"
#include "nabla/nn_optim.h"

enum { G = 33, F = 14, NGRID = G * G * F, NW = 768, NPAR = NGRID + NW, REPS = 50 };

static nb_device *dev;
static nb_module *mod;
static nb_func *floss, *fmodel;
static nb_tensor *params, *grads, *grid, *w, *ggrid, *gw, *uv, *target, *dout, *lossv, *pred;

#define CHECK(x)                                                                               \
    do {                                                                                       \
        if ((x) != NB_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, nb_last_error());       \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static void bwd(int with_grid, int with_w, int with_result) {
    nb_call *c;
    CHECK(nb_call_begin(floss, &c));
    CHECK(nb_call_set_mode(c, NB_MODE_BWD));
    CHECK(nb_call_arg(c, 0, grid));
    CHECK(nb_call_arg(c, 1, w));
    CHECK(nb_call_arg(c, 2, uv));
    CHECK(nb_call_arg(c, 3, target));
    if (with_grid) CHECK(nb_call_grad(c, 0, ggrid));
    if (with_w) CHECK(nb_call_grad(c, 1, gw));
    CHECK(nb_call_dout(c, dout));
    if (with_result) CHECK(nb_call_result(c, lossv));
    CHECK(nb_call_run(c, NULL));
}

static void fwd(void) {
    nb_call *c;
    CHECK(nb_call_begin(fmodel, &c));
    CHECK(nb_call_arg(c, 0, grid));
    CHECK(nb_call_arg(c, 1, w));
    CHECK(nb_call_arg(c, 2, uv));
    CHECK(nb_call_result(c, pred));
    CHECK(nb_call_run(c, NULL));
}

static nb_adam *opt;
static void adam(void) { CHECK(nb_adam_step(opt, params, grads, 1)); }

typedef void (*fn_t)(void);
static int g_a, g_b, g_c;
static void bwd_cfg(void) { bwd(g_a, g_b, g_c); }

static double time_ms(fn_t f) {
    nb_event *e0, *e1;
    CHECK(nb_event_create(dev, &e0));
    CHECK(nb_event_create(dev, &e1));
    for (int i = 0; i < 3; i++) f(); /* compile + warm */
    CHECK(nb_device_synchronize(dev));
    CHECK(nb_event_record(e0, nb_device_stream(dev)));
    for (int i = 0; i < REPS; i++) f();
    CHECK(nb_event_record(e1, nb_device_stream(dev)));
    CHECK(nb_event_synchronize(e1));
    float ms = 0;
    CHECK(nb_event_elapsed_ms(e0, e1, &ms));
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    return ms / REPS;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "examples/image_model.nb";
    int S = argc > 2 ? atoi(argv[2]) : 512;
    CHECK(nb_device_open(argc > 3 ? argv[3] : "cuda", &dev));
    CHECK(nb_module_load(dev, model, NULL, &mod));
    CHECK(nb_module_func(mod, "image_loss", &floss));
    CHECK(nb_module_func(mod, "image_model", &fmodel));
    float *p = malloc(sizeof(float) * NPAR);
    for (int i = 0; i < NPAR; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f * (i < NGRID ? 0.2f : 1.2f) - (i < NGRID ? 0.1f : 0.6f);
    int64_t sp[1] = {NPAR}, sg[3] = {G, G, F}, HW = (int64_t)S * S, s3[2] = {HW, 3}, s1[1] = {HW};
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, sp, p, &params));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, sp, &grads));
    nb_tensor *t;
    CHECK(nb_tensor_slice(params, 0, 0, NGRID, 1, &t));
    CHECK(nb_tensor_reshape(t, 3, sg, &grid));
    nb_tensor_free(t);
    CHECK(nb_tensor_slice(grads, 0, 0, NGRID, 1, &t));
    CHECK(nb_tensor_reshape(t, 3, sg, &ggrid));
    nb_tensor_free(t);
    CHECK(nb_tensor_slice(params, 0, NGRID, NPAR, 1, &w));
    CHECK(nb_tensor_slice(grads, 0, NGRID, NPAR, 1, &gw));
    CHECK(nb_image_pixel_coords(dev, S, S, &uv));
    nb_tensor *img;
    CHECK(nb_image_procedural(dev, S, S, &img));
    CHECK(nb_tensor_reshape(img, 2, s3, &target));
    float inv = 1.0f / (float)HW;
    CHECK(nb_tensor_from_host(dev, NB_F32, 0, NULL, &inv, &dout));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, s1, &lossv));
    CHECK(nb_tensor_zeros(dev, NB_F32, 2, s3, &pred));
    nb_adam_config ac = {1e-2f, 0.9f, 0.99f, 1e-15f, 0.0f, 0};
    CHECK(nb_adam_create(dev, NPAR, &ac, &opt));
    printf("grid model, %dx%d = %lld pixels, %s, ms per call (mean of %d):\n", S, S, (long long)HW,
           nb_device_get_info(dev)->name, REPS);
    static const struct { int a, b, c; const char *what; } cfg[] = {
        {1, 1, 1, "fwd+bwd, grid + w gradients, loss written (the training call)"},
        {1, 1, 0, "fwd+bwd, grid + w gradients"},
        {0, 1, 0, "fwd+bwd, w gradient only (no grid atomics)"},
        {1, 0, 0, "fwd+bwd, grid gradient only (no weight accumulation)"},
        {0, 0, 0, "fwd+bwd, no gradient stored"},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        g_a = cfg[i].a, g_b = cfg[i].b, g_c = cfg[i].c;
        printf("  %8.4f  %s\n", time_ms(bwd_cfg), cfg[i].what);
    }
    printf("  %8.4f  forward only (image_model)\n", time_ms(fwd));
    printf("  %8.4f  adam over %d parameters\n", time_ms(adam), NPAR);
    return 0;
}
