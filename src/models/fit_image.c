/* The image-fitting trainer's public API (include/nabla/fit_image.h): configuration checks, the
 * image, the shared tensors (pixel coordinates, prediction), a training step as the model's
 * phases in order, the per-phase profiler and the evaluation's PSNR. The models themselves are
 * fit_image_hash.c and fit_image_grid.c. */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "models/fit_image_internal.h"
#include "nabla/image.h"

nb_fit_image_config nb_fit_image_config_default(void) {
    nb_fit_image_config c;
    memset(&c, 0, sizeof c);
    c.model = NB_FIT_IMAGE_HASH;
    c.batch = 0;
    c.lr = 1e-2f;
    c.loss = NB_LOSS_L2;
    c.stratified = 0;
    c.seed = 1337;
    return c;
}

int nb_fit_image_model_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "hash")) return NB_FIT_IMAGE_HASH;
    if (!strcmp(name, "grid")) return NB_FIT_IMAGE_GRID;
    return -1;
}

static nb_status check_config(const nb_fit_image_config *c) {
    if (c->model != NB_FIT_IMAGE_HASH && c->model != NB_FIT_IMAGE_GRID)
        return nb_error(NB_ERR_INVALID_ARG, "fit-image: unknown model %d (NB_FIT_IMAGE_HASH or NB_FIT_IMAGE_GRID)",
                        (int)c->model);
    if (c->batch < 0 || c->batch > ((int64_t)1 << 24))
        return nb_error(NB_ERR_INVALID_ARG, "fit-image: batch %lld: want 0 (the default) or 1..16777216",
                        (long long)c->batch);
    if (!(c->lr > 0 && c->lr < 10))
        return nb_error(NB_ERR_INVALID_ARG, "fit-image: learning rate %g: want a number in (0, 10)", (double)c->lr);
    if ((unsigned)c->loss > NB_LOSS_RELATIVE_L2)
        return nb_error(NB_ERR_INVALID_ARG, "fit-image: unknown loss %d (l2, l1 or relative_l2)", (int)c->loss);
    if (c->stratified != 0 && c->stratified != 1)
        return nb_error(NB_ERR_INVALID_ARG, "fit-image: stratified %d: want 0 or 1", c->stratified);
    if (c->model == NB_FIT_IMAGE_GRID && c->loss != NB_LOSS_L2)
        return nb_error(NB_ERR_INVALID_ARG,
                        "fit-image: the grid model trains image_loss (squared error, examples/image_model.nb): "
                        "loss %s is for the hash model", nb_loss_name(c->loss));
    if (c->model == NB_FIT_IMAGE_GRID && c->stratified)
        return nb_error(NB_ERR_INVALID_ARG,
                        "fit-image: the grid model samples uniformly (or takes every pixel): stratified sampling "
                        "is for the hash model");
    return NB_OK;
}

static nb_status check_image(nb_device *dev, const nb_tensor *img) {
    char buf[128];
    const int64_t *s = nb_tensor_shape(img);
    if (nb_tensor_dtype(img) != NB_F32 || nb_tensor_ndim(img) != 3 || s[2] != 3)
        return nb_error(NB_ERR_INVALID_ARG, "fit-image: the image is %s: want f32 [H, W, 3]",
                        nb_tensor_describe(img, buf, sizeof buf));
    if (nb_tensor_device(img) != dev)
        return nb_error(NB_ERR_INVALID_ARG, "fit-image: the image is on %s, the fit on %s",
                        nb_device_name(nb_tensor_device(img)), nb_device_name(dev));
    if (s[0] < 2 || s[1] < 2)
        return nb_error(NB_ERR_INVALID_ARG, "the image is %lldx%lld pixels: fit-image needs at least 2x2",
                        (long long)s[1], (long long)s[0]);
    return NB_OK;
}

void nb_fit_image_free(nb_fit_image *f) {
    if (!f) return;
    nb_fit_hash_free(f->hash);
    nb_fit_grid_free(f->grid);
    nb_tensor_free(f->img);
    nb_tensor_free(f->coords);
    nb_tensor_free(f->pred);
    free(f);
}

static nb_status create(nb_fit_image *f, const nb_tensor *image) {
    NB_TRY(nb_tensor_contiguous(image, &f->img));
    f->H = (int)nb_tensor_shape(f->img)[0];
    f->W = (int)nb_tensor_shape(f->img)[1];
    int64_t HW = (int64_t)f->W * f->H;
    int cuda = nb_device_get_kind(f->dev) == NB_DEVICE_CUDA;
    if (f->cfg.model == NB_FIT_IMAGE_GRID) /* every pixel unless the batch is smaller */
        f->batch = f->cfg.batch > 0 && f->cfg.batch < HW ? f->cfg.batch : HW;
    else
        f->batch = f->cfg.batch > 0 ? f->cfg.batch : cuda ? ((int64_t)1 << 18) : 4096;
    NB_TRY(nb_image_pixel_coords(f->dev, f->W, f->H, &f->coords));
    int64_t sp[2] = {HW, 3};
    NB_TRY(nb_tensor_zeros(f->dev, NB_F32, 2, sp, &f->pred));
    return f->cfg.model == NB_FIT_IMAGE_GRID ? nb_fit_grid_create(f) : nb_fit_hash_create(f);
}

nb_status nb_fit_image_create(nb_device *dev, const nb_tensor *image, const nb_fit_image_config *cfg,
                              nb_fit_image **out) {
    NB_CHECK_ARG(dev);
    NB_CHECK_ARG(image);
    NB_CHECK_ARG(out);
    *out = NULL;
    nb_fit_image_config c = cfg ? *cfg : nb_fit_image_config_default();
    NB_TRY(check_config(&c));
    NB_TRY(check_image(dev, image));
    nb_fit_image *f = calloc(1, sizeof *f);
    if (!f) return nb_error(NB_ERR_OUT_OF_MEMORY, "fit-image: out of memory");
    f->dev = dev;
    f->cfg = c;
    nb_status st = create(f, image);
    if (st != NB_OK) {
        nb_fit_image_free(f);
        return st;
    }
    *out = f;
    return NB_OK;
}

nb_status nb_fit_image_get_info(const nb_fit_image *f, nb_fit_image_info *out) {
    NB_CHECK_ARG(f);
    NB_CHECK_ARG(out);
    out->model = f->cfg.model;
    out->width = f->W;
    out->height = f->H;
    out->batch = f->batch;
    out->every_pixel = f->cfg.model == NB_FIT_IMAGE_GRID && f->batch == (int64_t)f->W * f->H;
    out->encoding_params = f->enc_params;
    out->mlp_params = f->mlp_params;
    return NB_OK;
}

nb_status nb_fit_image_step(nb_fit_image *f, uint32_t step) {
    NB_CHECK_ARG(f);
    for (int i = 0; i < f->n_phases; i++) NB_TRY(f->phase[i](f, step));
    f->since_read++;
    return NB_OK;
}

nb_status nb_fit_image_read_loss(nb_fit_image *f, double *out) {
    NB_CHECK_ARG(f);
    NB_CHECK_ARG(out);
    nb_status st = f->hash ? nb_fit_hash_read_loss(f, out) : nb_fit_grid_read_loss(f, out);
    if (st == NB_OK) f->since_read = 0;
    return st;
}

nb_status nb_fit_image_prediction(const nb_fit_image *f, nb_tensor **out) {
    NB_CHECK_ARG(f);
    NB_CHECK_ARG(out);
    int64_t shape[3] = {f->H, f->W, 3};
    return nb_tensor_reshape(f->pred, 3, shape, out);
}

nb_status nb_fit_image_eval(nb_fit_image *f, double *psnr) {
    NB_CHECK_ARG(f);
    NB_CHECK_ARG(psnr);
    NB_TRY(f->hash ? nb_fit_hash_eval(f) : nb_fit_grid_eval(f));
    nb_tensor *img3 = NULL;
    NB_TRY(nb_fit_image_prediction(f, &img3));
    nb_status st = nb_image_psnr(img3, f->img, psnr);
    nb_tensor_free(img3);
    return st;
}

/* Events around every phase of n steps; each phase's time summed, then divided by n. The steps
 * count as training steps (their losses join the next read). */
nb_status nb_fit_image_profile_steps(nb_fit_image *f, int n, uint32_t first_step, nb_fit_image_profile *out) {
    NB_CHECK_ARG(f);
    NB_CHECK_ARG(out);
    if (n < 1) return nb_error(NB_ERR_INVALID_ARG, "fit-image profile: %d steps: want at least 1", n);
    memset(out, 0, sizeof *out);
    int np = f->n_phases;
    nb_event *ev[NB_FIT_IMAGE_MAX_PHASES + 1] = {0};
    nb_status st = NB_OK;
    for (int i = 0; i <= np && st == NB_OK; i++) st = nb_event_create(f->dev, &ev[i]);
    nb_stream *q = nb_device_stream(f->dev);
    for (int k = 0; k < n && st == NB_OK; k++) {
        uint32_t step = first_step + (uint32_t)k;
        st = nb_event_record(ev[0], q);
        for (int i = 0; i < np && st == NB_OK; i++) {
            st = f->phase[i](f, step);
            if (st == NB_OK) st = nb_event_record(ev[i + 1], q);
        }
        if (st == NB_OK) st = nb_event_synchronize(ev[np]);
        for (int i = 0; i < np && st == NB_OK; i++) {
            float t = 0;
            st = nb_event_elapsed_ms(ev[i], ev[i + 1], &t);
            out->ms[i] += t;
        }
        if (st == NB_OK) f->since_read++;
    }
    for (int i = 0; i <= np; i++)
        if (ev[i]) nb_event_destroy(ev[i]);
    if (st != NB_OK) return st;
    out->n_phases = np;
    for (int i = 0; i < np; i++) out->phase[i] = f->phase_name[i], out->ms[i] /= n;
    out->note = f->profile_note;
    return NB_OK;
}
