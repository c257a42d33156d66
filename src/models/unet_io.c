/* UNet checkpoints: safetensors with the parameters under guided-diffusion's names (F32) and the
 * config in __metadata__ (see include/nabla/nn_unet.h). The tensors go through host memory, so a
 * checkpoint written from a CUDA model loads on the CPU and vice versa. Saving is atomic (see
 * nb_safetensors_write). Loading refuses NaN / Inf parameters, naming the tensor: the generic
 * safetensors reader accepts any float values (a file may hold masks or statistics with Inf on
 * purpose), but weights that are not finite only ever come from a diverged run or a corrupt file,
 * and would silently turn every sample into NaN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nabla/nn_unet.h"
#include "nabla/safetensors.h"
#include "nabla/tensor.h"

nb_status nb_unet_save(const nb_unet *u, const float *params, const char *path) {
    if (!u || !params || !path) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_save: NULL argument");
    const nb_unet_param_name *names;
    int n;
    nb_status s = nb_unet_params(u, &names, &n);
    if (s) return s;
    nb_st_tensor *ts = calloc((size_t)n, sizeof *ts);
    if (!ts) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_unet_save: out of memory");
    for (int i = 0; i < n && !s; i++) {
        int64_t off, cnt;
        s = nb_tape_param_info(nb_unet_tape(u), names[i].id, &off, &cnt);
        ts[i].name = names[i].name;
        ts[i].ndim = names[i].ndim;
        memcpy(ts[i].shape, names[i].shape, sizeof(int64_t) * (size_t)names[i].ndim);
        ts[i].data = params + off;
    }
    nb_unet_config cfg;
    const char *keys[NB_UNET_META_N + 1];
    char vals[NB_UNET_META_N][64];
    const char *vp[NB_UNET_META_N + 1];
    if (!s) s = nb_unet_get_config(u, &cfg);
    if (!s) s = nb_unet_config_to_meta(&cfg, keys, vals);
    for (int i = 0; i < NB_UNET_META_N; i++) vp[i] = vals[i];
    keys[NB_UNET_META_N] = "format", vp[NB_UNET_META_N] = "nabla.unet.v1";
    if (!s) s = nb_safetensors_write(path, n, ts, NB_UNET_META_N + 1, keys, vp);
    free(ts);
    return s;
}

static nb_status config_from_file(const nb_safetensors *f, const char *path, nb_unet_config *out) {
    nb_unet_config c;
    memset(&c, 0, sizeof c);
    const char *keys[NB_UNET_META_N];
    char vals[NB_UNET_META_N][64];
    nb_unet_config_to_meta(&c, keys, vals); /* for the key list */
    for (int i = 0; i < NB_UNET_META_N; i++) {
        const char *v;
        nb_safetensors_meta(f, keys[i], &v);
        if (!v)
            return nb_error(NB_ERR_INVALID_ARG,
                            "'%s' has no UNet config: metadata key '%s' is missing (not a nabla "
                            "UNet checkpoint?)", path, keys[i]);
        nb_status s = nb_unet_config_set(&c, keys[i], v);
        if (s) return nb_error(s, "'%s': bad UNet config in its metadata: %s", path, nb_last_error());
    }
    nb_status s = nb_unet_config_validate(&c);
    if (s) return nb_error(s, "'%s': %s", path, nb_last_error()); /* (nb_error may quote it) */
    *out = c;
    return NB_OK;
}

nb_status nb_unet_read_config(const char *path, nb_unet_config *out) {
    if (!path || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_read_config: NULL argument");
    nb_safetensors *f;
    nb_status s = nb_safetensors_read(path, &f);
    if (s) return s;
    s = config_from_file(f, path, out);
    nb_safetensors_free(f);
    return s;
}

static int same_config(const nb_unet_config *a, const nb_unet_config *b) {
    const char *ka[NB_UNET_META_N], *kb[NB_UNET_META_N];
    char va[NB_UNET_META_N][64], vb[NB_UNET_META_N][64];
    nb_unet_config_to_meta(a, ka, va);
    nb_unet_config_to_meta(b, kb, vb);
    for (int i = 0; i < NB_UNET_META_N; i++)
        if (strcmp(va[i], vb[i])) {
            nb_error(NB_ERR_INVALID_ARG,
                     "checkpoint config does not match the model: %s is %s in the file, %s in the model",
                     ka[i], va[i], vb[i]);
            return 0;
        }
    return 1;
}

nb_status nb_unet_load(nb_unet *u, const char *path) {
    if (!u || !path) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_load: NULL argument");
    nb_safetensors *f;
    nb_status s = nb_safetensors_read(path, &f);
    if (s) return s;
    nb_unet_config fc, mc;
    s = config_from_file(f, path, &fc);
    if (!s) s = nb_unet_get_config(u, &mc);
    if (!s && !same_config(&fc, &mc)) s = NB_ERR_INVALID_ARG;
    const nb_unet_param_name *names;
    int n = 0, nf = 0;
    float *p = NULL, *dev_p;
    int64_t np = 0;
    if (!s) s = nb_unet_params(u, &names, &n);
    if (!s) s = nb_tape_params(nb_unet_tape(u), &dev_p, &np);
    /* a host image of the whole buffer (every parameter is overwritten below), then one write */
    if (!s && !(p = malloc(sizeof(float) * (size_t)(np ? np : 1))))
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_unet_load: out of host memory");
    if (!s) s = nb_safetensors_count(f, &nf);
    for (int i = 0; i < n && !s; i++) {
        const nb_st_tensor *t;
        s = nb_safetensors_find(f, names[i].name, &t);
        if (s) {
            s = nb_error(NB_ERR_NOT_FOUND, "'%s' lacks parameter '%s'", path, names[i].name);
            break;
        }
        int ok = t->ndim == names[i].ndim;
        for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == names[i].shape[d];
        if (!ok) {
            char a[96], b[96];
            nb_shape_str(t->ndim, t->shape, a, sizeof a);
            nb_shape_str(names[i].ndim, names[i].shape, b, sizeof b);
            s = nb_error(NB_ERR_SHAPE, "'%s': tensor '%s' has shape %s, the model %s", path, names[i].name, a, b);
            break;
        }
        int64_t off, cnt;
        s = nb_tape_param_info(nb_unet_tape(u), names[i].id, &off, &cnt);
        for (int64_t e = 0; !s && e < cnt; e++)
            if (!isfinite(t->data[e]))
                s = nb_error(NB_ERR_INVALID_ARG,
                             "'%s': parameter '%s' holds a non-finite value (%g at element %lld); "
                             "the checkpoint is corrupt or comes from a diverged run",
                             path, names[i].name, (double)t->data[e], (long long)e);
        if (!s) memcpy(p + off, t->data, (size_t)cnt * sizeof(float));
    }
    if (!s && nf != n)
        s = nb_error(NB_ERR_SHAPE, "'%s' holds %d tensors; the model has %d parameters", path, nf, n);
    if (!s) s = nb_tape_write_params(nb_unet_tape(u), p, np);
    free(p);
    nb_safetensors_free(f);
    return s;
}

/* ---- samples as one image (nb_ddpm_sample_grid) ---------------------------------------------- */

nb_status nb_ddpm_sample_grid(const float *x, int n, int channels, int size, int scale, nb_tensor **out) {
    NB_CHECK_ARG(x);
    NB_CHECK_ARG(out);
    *out = NULL;
    if (n < 1) return nb_error(NB_ERR_INVALID_ARG, "sample grid: %d samples: want at least 1", n);
    if (channels != 1 && channels != 3)
        return nb_error(NB_ERR_INVALID_ARG, "sample grid: %d channels: a PNG grid needs 1 or 3", channels);
    if (size < 1 || scale < 1 || scale > 16)
        return nb_error(NB_ERR_INVALID_ARG, "sample grid: size %d, scale %d: want size >= 1, scale 1..16", size,
                        scale);
    int C = channels, S = size, K = scale, cols = (int)ceil(sqrt((double)n)), rows = (n + cols - 1) / cols;
    int64_t shape[3] = {(int64_t)rows * S * K, (int64_t)cols * S * K, C};
    nb_device *cpu = NULL;
    NB_TRY(nb_device_open("cpu", &cpu));
    nb_status st = nb_tensor_zeros(cpu, NB_F32, 3, shape, out); /* the tensor keeps the device open */
    nb_device_close(cpu);
    NB_TRY(st);
    float *g = nb_tensor_data(*out); /* [rows*S*K][cols*S*K][C] */
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < S * K; y++)
                for (int xx = 0; xx < S * K; xx++) {
                    size_t gy = (size_t)(i / cols) * S * K + y, gx = (size_t)(i % cols) * S * K + xx;
                    float v = (x[(((size_t)i * C + c) * S + y / K) * S + xx / K] + 1) * 0.5f;
                    g[(gy * cols * S * K + gx) * C + c] = v < 0 ? 0 : v > 1 ? 1 : v;
                }
    return NB_OK;
}
