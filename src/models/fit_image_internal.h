/* Shared state of the image-fitting trainer (include/nabla/fit_image.h): fit_image.c holds the
 * public API, the step / profile loop over the model's phases and the evaluation's PSNR;
 * fit_image_hash.c and fit_image_grid.c hold the two models. */
#ifndef NB_MODELS_FIT_IMAGE_INTERNAL_H
#define NB_MODELS_FIT_IMAGE_INTERNAL_H

#include "nabla/fit_image.h"

typedef struct nb_fit_hash nb_fit_hash; /* fit_image_hash.c */
typedef struct nb_fit_grid nb_fit_grid; /* fit_image_grid.c */

/* One phase of a training step; a step runs the model's phases in order (the profiler brackets
 * each with events). */
typedef nb_status (*nb_fit_phase_fn)(nb_fit_image *f, uint32_t step);

struct nb_fit_image {
    nb_device *dev;
    nb_fit_image_config cfg;
    nb_tensor *img;       /* f32 [H, W, 3], contiguous: the fit's own view of the image */
    int W, H;
    int64_t batch;        /* resolved samples per step */
    nb_tensor *coords;    /* every pixel's centre: f32 [H*W, 2] */
    nb_tensor *pred;      /* the last evaluation: f32 [H*W, 3] */
    int64_t since_read;   /* steps since the last nb_fit_image_read_loss */
    int64_t enc_params, mlp_params;
    int n_phases;
    const char *phase_name[NB_FIT_IMAGE_MAX_PHASES];
    nb_fit_phase_fn phase[NB_FIT_IMAGE_MAX_PHASES];
    const char *profile_note;
    nb_fit_hash *hash;
    nb_fit_grid *grid;
};

/* Each model: create (its state, its phases, the parameter counts; f->img, coords, pred and batch
 * are set), free, the mean loss since the last read, and the whole image into f->pred. */
nb_status nb_fit_hash_create(nb_fit_image *f);
void nb_fit_hash_free(nb_fit_hash *h);
nb_status nb_fit_hash_read_loss(nb_fit_image *f, double *out);
nb_status nb_fit_hash_eval(nb_fit_image *f);

nb_status nb_fit_grid_create(nb_fit_image *f);
void nb_fit_grid_free(nb_fit_grid *g);
nb_status nb_fit_grid_read_loss(nb_fit_image *f, double *out);
nb_status nb_fit_grid_eval(nb_fit_image *f);

#endif
