/* The hash model of the image-fitting trainer (tiny-cuda-nn's image sample; fit_image.h):
 * multiresolution hash grid -> MLP (64 wide, 2 hidden, ReLU, no bias) -> RGB, one Adam over both
 * parameter buffers.
 *
 * A training step is seven phases, each one launch on CUDA, with no host synchronisation and no
 * allocation: sample (x, target) -> encode -> MLP forward -> loss + dL/dy -> MLP backward (dL/dfeat)
 * -> encoding backward (grid gradients, accumulated) -> Adam over both parameter buffers (which
 * also zeroes the grid gradients for the next step). On CUDA the MLP forward, the loss and both
 * backwards are one fused call (nb_encoding_mlp_train: 0.213 ms against 0.295 for the separate
 * calls, H100, docs/PERF.md's fit-image table), run in the "mlp fwd" phase; the CPU runs the separate calls.
 * The loss is summed on the device and read only by nb_fit_image_read_loss. */
#include <stdlib.h>

#include "core/util.h"
#include "models/fit_image_internal.h"
#include "nabla/image.h"
#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_optim.h"

struct nb_fit_hash {
    nb_encoding *enc;
    nb_mlp *mlp;
    nb_adam *opt;
    nb_tensor *enc_params, *enc_grads;                    /* f32 [n_enc] */
    nb_tensor *x, *target, *feat, *y, *dy, *dfeat, *loss; /* batch: [B, 2], [B, 3], f16 [B, F], [B, 3],
                                                             [B, 3], [B, F], f32 scalar (sum) */
    nb_tensor *efeat;                                     /* evaluation chunk features f16 [chunk, F] */
    int64_t chunk;
    int fused;                                            /* CUDA: nb_encoding_mlp_train */
};

void nb_fit_hash_free(nb_fit_hash *h) {
    if (!h) return;
    nb_tensor *ts[] = {h->enc_params, h->enc_grads, h->x, h->target, h->feat, h->y, h->dy, h->dfeat, h->loss, h->efeat};
    for (size_t i = 0; i < NB_ARRAY_LEN(ts); i++) nb_tensor_free(ts[i]);
    nb_adam_destroy(h->opt);
    nb_mlp_free(h->mlp);
    nb_encoding_destroy(h->enc);
    free(h);
}

static nb_status mk(nb_device *dev, nb_dtype dt, int64_t d0, int64_t d1, nb_tensor **t) {
    int64_t shape[2] = {d0, d1};
    return nb_tensor_zeros(dev, dt, d1 > 0 ? 2 : (d0 > 0 ? 1 : 0), shape, t);
}

/* ---- the phases of a step ---- */

static nb_status ph_sample(nb_fit_image *f, uint32_t step) {
    nb_fit_hash *h = f->hash;
    if (f->cfg.stratified) return nb_image_sample_stratified(f->img, f->cfg.seed, step, h->x, h->target);
    return nb_image_sample(f->img, f->cfg.seed, step, h->x, h->target);
}

static nb_status ph_encode(nb_fit_image *f, uint32_t step) {
    (void)step;
    return nb_encoding_forward(f->hash->enc, f->hash->enc_params, f->hash->x, f->hash->feat);
}

static nb_status ph_mlp_fwd(nb_fit_image *f, uint32_t step) {
    (void)step;
    nb_fit_hash *h = f->hash;
    if (h->fused) /* forward, loss and both backwards */
        return nb_encoding_mlp_train(h->enc, h->mlp, h->enc_params, h->x, h->feat, h->target, f->cfg.loss, h->loss,
                                     h->enc_grads);
    return nb_mlp_forward(h->mlp, h->feat, h->y, 1);
}

static nb_status ph_loss(nb_fit_image *f, uint32_t step) {
    (void)step;
    nb_fit_hash *h = f->hash;
    return h->fused ? NB_OK : nb_loss(f->cfg.loss, h->y, h->target, h->loss, h->dy);
}

static nb_status ph_mlp_bwd(nb_fit_image *f, uint32_t step) {
    (void)step;
    nb_fit_hash *h = f->hash;
    return h->fused ? NB_OK : nb_mlp_backward(h->mlp, h->dy, h->dfeat);
}

static nb_status ph_encode_bwd(nb_fit_image *f, uint32_t step) {
    (void)step;
    nb_fit_hash *h = f->hash;
    return h->fused ? NB_OK : nb_encoding_backward(h->enc, h->enc_params, h->x, h->dfeat, h->enc_grads, NULL);
}

static nb_status ph_adam(nb_fit_image *f, uint32_t step) {
    (void)step;
    nb_fit_hash *h = f->hash;
    nb_tensor *ps[2] = {h->enc_params, nb_mlp_params(h->mlp)};
    nb_tensor *gs[2] = {h->enc_grads, nb_mlp_grads(h->mlp)};
    return nb_adam_step_multi(h->opt, 2, ps, gs, 1);
}

nb_status nb_fit_hash_create(nb_fit_image *f) {
    nb_fit_hash *h = calloc(1, sizeof *h);
    if (!h) return nb_error(NB_ERR_OUT_OF_MEMORY, "fit-image: out of memory");
    f->hash = h;
    nb_device *dev = f->dev;
    nb_encoding_config ec = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f);
    NB_TRY(nb_encoding_create(dev, &ec, &h->enc));
    NB_TRY(nb_encoding_set_spatially_ordered(h->enc, f->cfg.stratified)); /* Morton-ordered batches */
    h->fused = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    int F = nb_encoding_n_output_dims(h->enc);
    int64_t n_enc = nb_encoding_n_params(h->enc);
    nb_mlp_config mc = nb_mlp_config_default(F, 3, 64, 2);
    mc.act = NB_ACT_RELU;
    mc.out_act = NB_ACT_NONE;
    mc.bias = 0;
    NB_TRY(nb_mlp_create(dev, &mc, &h->mlp));
    NB_TRY(nb_mlp_init_params(h->mlp, f->cfg.seed));
    NB_TRY(mk(dev, NB_F32, n_enc, 0, &h->enc_params));
    NB_TRY(mk(dev, NB_F32, n_enc, 0, &h->enc_grads));
    NB_TRY(nb_encoding_init_params(h->enc, h->enc_params, f->cfg.seed));
    nb_adam_config ac = {f->cfg.lr, 0.9f, 0.99f, 1e-15f, 0.0f, 0}; /* tiny-cuda-nn's image sample */
    NB_TRY(nb_adam_create(dev, n_enc + nb_mlp_n_params(h->mlp), &ac, &h->opt));
    int64_t B = f->batch;
    NB_TRY(mk(dev, NB_F32, B, 2, &h->x));
    NB_TRY(mk(dev, NB_F32, B, 3, &h->target));
    /* f16 features: the MLP rounds its inputs to f16 anyway, so this only halves the traffic */
    NB_TRY(mk(dev, NB_F16, B, F, &h->feat));
    NB_TRY(mk(dev, NB_F32, B, 3, &h->y));
    NB_TRY(mk(dev, NB_F32, B, 3, &h->dy));
    NB_TRY(mk(dev, NB_F32, B, F, &h->dfeat));
    NB_TRY(mk(dev, NB_F32, 0, 0, &h->loss));
    int64_t HW = (int64_t)f->W * f->H;
    h->chunk = HW < ((int64_t)1 << 18) ? HW : ((int64_t)1 << 18);
    NB_TRY(mk(dev, NB_F16, h->chunk, F, &h->efeat));
    f->enc_params = n_enc;
    f->mlp_params = nb_mlp_n_params(h->mlp);
    static const char *const names[7] = {"sample", "encode fwd", "mlp fwd", "loss", "mlp bwd", "encode bwd", "adam"};
    static const nb_fit_phase_fn fns[7] = {ph_sample, ph_encode, ph_mlp_fwd, ph_loss, ph_mlp_bwd, ph_encode_bwd, ph_adam};
    f->n_phases = 7;
    for (int i = 0; i < 7; i++) f->phase_name[i] = names[i], f->phase[i] = fns[i];
    f->profile_note = h->fused ? "\"mlp fwd\" is the MLP forward, loss and both backwards" : NULL;
    return NB_OK;
}

/* The device sum of the per-step losses over the steps since the last read, then restarted (the
 * sum is zeroed on the device: no host value is kept, so no drift). */
nb_status nb_fit_hash_read_loss(nb_fit_image *f, double *out) {
    float sum = 0;
    NB_TRY(nb_tensor_to_host(f->hash->loss, &sum, sizeof sum));
    *out = f->since_read > 0 ? sum / (double)f->since_read : 0.0;
    return nb_tensor_fill_bytes(f->hash->loss, 0);
}

/* The whole image through the model into f->pred, in chunks of at most 2^18 pixels. */
nb_status nb_fit_hash_eval(nb_fit_image *f) {
    nb_fit_hash *h = f->hash;
    int64_t HW = (int64_t)f->W * f->H;
    for (int64_t b = 0; b < HW; b += h->chunk) {
        int64_t e = b + h->chunk < HW ? b + h->chunk : HW;
        nb_tensor *xc = NULL, *yc = NULL, *fc = NULL;
        nb_status st = nb_tensor_slice(f->coords, 0, b, e, 1, &xc);
        if (st == NB_OK) st = nb_tensor_slice(f->pred, 0, b, e, 1, &yc);
        if (st == NB_OK) st = nb_tensor_slice(h->efeat, 0, 0, e - b, 1, &fc);
        if (st == NB_OK) st = nb_encoding_forward(h->enc, h->enc_params, xc, fc);
        if (st == NB_OK) st = nb_mlp_inference(h->mlp, fc, yc);
        nb_tensor_free(xc), nb_tensor_free(yc), nb_tensor_free(fc);
        NB_TRY(st);
    }
    return NB_OK;
}
