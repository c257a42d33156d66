/* nabla — fitting a neural field to an image (the trainer behind `nabla fit-image`).
 *
 *   nb_tensor *img;  nb_image_read_png("astronaut.png", 3, dev, &img);  // f32 [H, W, 3]
 *   nb_fit_image_config c = nb_fit_image_config_default();              // hash model, lr 0.01, L2
 *   nb_fit_image *f;  nb_fit_image_create(dev, img, &c, &f);            // keeps its own view of img
 *   for (uint32_t s = 1; s <= 1000; s++) nb_fit_image_step(f, s);       // no host wait on CUDA
 *   double loss, psnr;  nb_fit_image_read_loss(f, &loss);               // waits once
 *   nb_fit_image_eval(f, &psnr);                                        // whole image -> prediction
 *   nb_tensor *pred;  nb_fit_image_prediction(f, &pred);                // f32 [H, W, 3] view
 *   nb_image_write_png("fit.png", pred);
 *
 * Two models (nb_fit_image_model):
 * - NB_FIT_IMAGE_HASH: tiny-cuda-nn's image sample. A multiresolution hash grid (16 levels x 2
 *   features, 2^15 entries per level, base resolution 16, scale 1.5; nn_encoding.h) -> MLP 64
 *   wide, 2 hidden layers, ReLU, no bias, 3 outputs (nn_mlp.h); one Adam (lr, 0.9, 0.99, 1e-15)
 *   over both parameter buffers. A step: sample `batch` positions (uniform or stratified) ->
 *   encode (f16 features) -> MLP forward -> loss -> backward -> Adam. On CUDA the MLP forward, the
 *   loss and both backwards are one fused call (nb_encoding_mlp_train, docs/PERF.md); on the CPU
 *   they are separate calls. The loss (l2, l1, relative_l2) is summed on the device.
 * - NB_FIT_IMAGE_GRID: the reference example's model in the kernel language
 *   (examples/image_model.nb, built in): a 33x33 grid of 14 features, bilinear features + the
 *   pixel's cell position -> MLP of three 16x16 layers (lib/nn.nb) -> RGB. A step is the generated
 *   backward kernel of image_loss (squared error) over the batch (every pixel unless `batch` is
 *   smaller; then uniform random positions first) and Adam over the flat parameters. Only the L2
 *   loss and uniform sampling exist for it: other settings are NB_ERR_INVALID_ARG.
 *
 * The image is f32 [H, W, 3] on the fit's device, H, W >= 2. Training positions come from a
 * counter-based generator keyed by (seed, step), so a run is reproducible; pass step numbers
 * 1, 2, 3, ... to nb_fit_image_step.
 */
#ifndef NABLA_FIT_IMAGE_H
#define NABLA_FIT_IMAGE_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/nn_optim.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_fit_image_model { NB_FIT_IMAGE_HASH = 0, NB_FIT_IMAGE_GRID = 1 } nb_fit_image_model;

typedef struct nb_fit_image_config {
    nb_fit_image_model model;
    int64_t batch;      /* samples per step, 0: the default (hash: 262144 on CUDA, 4096 on the CPU;
                           grid: every pixel). Grid: >= the pixel count means every pixel. */
    float lr;           /* Adam learning rate, in (0, 10) (default 0.01) */
    nb_loss_kind loss;  /* hash: any; grid: NB_LOSS_L2 only (default L2) */
    int stratified;     /* hash: jittered strata in Morton order (nb_image_sample_stratified)
                           instead of uniform positions; grid: 0 only (default 0) */
    uint64_t seed;      /* parameter initialisation and sampling (default 1337) */
} nb_fit_image_config;

nb_fit_image_config nb_fit_image_config_default(void);

/* "hash" / "grid" -> the model, else -1. */
int nb_fit_image_model_from_name(const char *name);

typedef struct nb_fit_image nb_fit_image;

/* A model of cfg on dev, its parameters initialised from cfg->seed, fitting `image` (f32
 * [H, W, 3] on dev; the fit keeps its own view, the caller may free its handle). Errors:
 * NB_ERR_INVALID_ARG for a bad config or image (naming the field), the device's errors. */
nb_status nb_fit_image_create(nb_device *dev, const nb_tensor *image, const nb_fit_image_config *cfg,
                              nb_fit_image **out);
void nb_fit_image_free(nb_fit_image *f);

typedef struct nb_fit_image_info {
    nb_fit_image_model model;
    int width, height;
    int64_t batch;           /* samples per step (the resolved default) */
    int every_pixel;         /* grid: the batch is the whole image, in pixel order */
    int64_t encoding_params; /* hash grid / dense feature grid */
    int64_t mlp_params;
} nb_fit_image_info;
nb_status nb_fit_image_get_info(const nb_fit_image *f, nb_fit_image_info *out);

/* One training step (sampling keyed by `step`). Enqueued on the device's stream; no host wait. */
nb_status nb_fit_image_step(nb_fit_image *f, uint32_t step);

/* The training loss since the last read (waits for the device). Hash: the mean of the steps'
 * losses since the last read (summed on the device, then restarted); grid: the last step's mean
 * squared error per channel. 0 before any step. */
nb_status nb_fit_image_read_loss(nb_fit_image *f, double *out);

/* The whole image through the model into the prediction, and its PSNR against the image (dB;
 * waits for the device). */
nb_status nb_fit_image_eval(nb_fit_image *f, double *psnr);

/* A new view f32 [H, W, 3] of the prediction of the last nb_fit_image_eval (zeros before). */
nb_status nb_fit_image_prediction(const nb_fit_image *f, nb_tensor **out);

/* Per-phase device time of n more training steps (steps first_step .. first_step + n - 1),
 * each phase bracketed by events (the host waits once per step). */
#define NB_FIT_IMAGE_MAX_PHASES 8
typedef struct nb_fit_image_profile {
    int n_phases;
    const char *phase[NB_FIT_IMAGE_MAX_PHASES]; /* "sample", "encode fwd", ... */
    double ms[NB_FIT_IMAGE_MAX_PHASES];         /* mean ms per step */
    const char *note;                           /* what a fused phase holds, or NULL */
} nb_fit_image_profile;
nb_status nb_fit_image_profile_steps(nb_fit_image *f, int n, uint32_t first_step, nb_fit_image_profile *out);

#ifdef __cplusplus
}
#endif
#endif
