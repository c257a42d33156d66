/* Losses (nn_optim.h): L2, L1, relative L2. The mean over all elements is added into a device
 * scalar and dL/dpred is written, in one pass: CPU reference on the thread pool (per-chunk sums
 * added in chunk order, in double), CUDA one launch (block sums, one atomic per block). */
#include <math.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/alloc.h"
#include "nabla/nn_optim.h"
#include "nn/common/nn_common.h"

static const char *const nb_loss_names[] = {"l2", "l1", "relative_l2"};

int nb_loss_from_name(const char *name) {
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, nb_loss_names[i])) return i;
    return -1;
}

const char *nb_loss_name(nb_loss_kind kind) {
    return (unsigned)kind < 3 ? nb_loss_names[kind] : "invalid";
}

typedef struct nb_loss_args {
    const float *pred, *target;
    float *loss, *dpred;
    int64_t n;
    float inv_n;
    int32_t kind;
} nb_loss_args;

/* CPU: chunks of a fixed size so the sum does not depend on the thread count. */
#define NB_LOSS_CHUNK 4096

typedef struct nb_loss_cpu_ctx {
    const nb_loss_args *a;
    double *partial; /* one per chunk */
} nb_loss_cpu_ctx;

static void nb_loss_cpu_range(void *vctx, int64_t c0, int64_t c1) {
    const nb_loss_cpu_ctx *c = vctx;
    const nb_loss_args *a = c->a;
    for (int64_t ch = c0; ch < c1; ch++) {
        int64_t b = ch * NB_LOSS_CHUNK, e = b + NB_LOSS_CHUNK < a->n ? b + NB_LOSS_CHUNK : a->n;
        double acc = 0.0;
        for (int64_t i = b; i < e; i++) {
            float y = a->pred[i], d = y - a->target[i], l, g;
            if (a->kind == NB_LOSS_L2) {
                l = d * d;
                g = 2.0f * d;
            } else if (a->kind == NB_LOSS_L1) {
                l = fabsf(d);
                g = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
            } else {
                float s = 1.0f / (y * y + 0.01f);
                l = d * d * s;
                g = 2.0f * d * s;
            }
            acc += l;
            if (a->dpred) a->dpred[i] = g * a->inv_n;
        }
        c->partial[ch] = acc;
    }
}

nb_status nb_loss(nb_loss_kind kind, const nb_tensor *pred, const nb_tensor *target,
                  nb_tensor *loss_sum, nb_tensor *dpred) {
    const char *fn = "nb_loss";
    if ((unsigned)kind > NB_LOSS_RELATIVE_L2)
        return nb_error(NB_ERR_INVALID_ARG, "%s: unknown loss kind %d", fn, (int)kind);
    if (!pred || !target) return nb_error(NB_ERR_INVALID_ARG, "%s: pred or target is NULL", fn);
    nb_device *dev = nb_tensor_device(pred);
    int nd = nb_tensor_ndim(pred);
    const int64_t *sh = nb_tensor_shape(pred);
    NB_TRY(nb_nn_check_f32(fn, "pred", pred, dev, nd, nd >= 1 ? sh[0] : -1, nd >= 2 ? sh[1] : -1));
    char b1[128], b2[128];
    int same = nb_tensor_ndim(target) == nd;
    for (int i = 0; same && i < nd; i++) same = nb_tensor_shape(target)[i] == sh[i];
    if (!same)
        return nb_error(NB_ERR_SHAPE, "%s: pred %s and target %s differ in shape", fn,
                        nb_shape_str(nd, sh, b1, sizeof b1),
                        nb_shape_str(nb_tensor_ndim(target), nb_tensor_shape(target), b2, sizeof b2));
    NB_TRY(nb_nn_check_f32(fn, "target", target, dev, nd, nd >= 1 ? sh[0] : -1, nd >= 2 ? sh[1] : -1));
    if (dpred) {
        same = nb_tensor_ndim(dpred) == nd;
        for (int i = 0; same && i < nd; i++) same = nb_tensor_shape(dpred)[i] == sh[i];
        if (!same)
            return nb_error(NB_ERR_SHAPE, "%s: dpred %s must have pred's shape %s", fn,
                            nb_shape_str(nb_tensor_ndim(dpred), nb_tensor_shape(dpred), b1, sizeof b1),
                            nb_shape_str(nd, sh, b2, sizeof b2));
        NB_TRY(nb_nn_check_f32(fn, "dpred", dpred, dev, nd, nd >= 1 ? sh[0] : -1, nd >= 2 ? sh[1] : -1));
    }
    if (loss_sum) {
        if (nb_tensor_numel(loss_sum) != 1)
            return nb_error(NB_ERR_SHAPE, "%s: loss_sum must hold one element, has %lld", fn,
                            (long long)nb_tensor_numel(loss_sum));
        if (nb_tensor_dtype(loss_sum) != NB_F32 || nb_tensor_device(loss_sum) != dev)
            return nb_error(NB_ERR_DTYPE, "%s: loss_sum must be f32 on %s", fn, nb_device_name(dev));
    }
    int64_t n = nb_tensor_numel(pred);
    if (n == 0) return NB_OK;
    nb_loss_args a = {nb_tensor_data(pred), nb_tensor_data(target), loss_sum ? nb_tensor_data(loss_sum) : NULL,
                      dpred ? nb_tensor_data(dpred) : NULL, n, (float)(1.0 / (double)n), (int32_t)kind};
    if (nb_device_get_kind(dev) == NB_DEVICE_CUDA) {
        /* The JIT's in-process table answers repeated loads with a hash and a probe. */
        nb_jit_kernel *k;
        NB_TRY(nb_jit_cuda_kernel(dev, "src/nn/optim/kernels/loss.cu", NULL, "nb_loss", &k));
        /* One block of 1024 threads per SM: enough to stream the data, and few atomics on the
         * one scalar (atomics on one address serialise: 4 blocks per SM cost ~9 us at 2^18 x 3). */
        int64_t blocks = (n + 1023) / 1024, cap = (int64_t)nb_device_get_info(dev)->multiprocessors;
        if (blocks > cap) blocks = cap;
        if (blocks < 1) blocks = 1;
        const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {1024, 1, 1};
        return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
    }
    int64_t chunks = (n + NB_LOSS_CHUNK - 1) / NB_LOSS_CHUNK;
    double *partial = nb_alloc((size_t)chunks * sizeof(double), 16);
    if (!partial) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    nb_loss_cpu_ctx c = {&a, partial};
    nb_nn_parallel(chunks, 1, nb_loss_cpu_range, &c);
    if (a.loss) {
        double total = 0.0;
        for (int64_t i = 0; i < chunks; i++) total += partial[i];
        *a.loss += (float)(total / (double)n);
    }
    nb_free(partial, (size_t)chunks * sizeof(double));
    return NB_OK;
}

nb_status nb_loss_l2(const nb_tensor *pred, const nb_tensor *target, nb_tensor *loss_sum, nb_tensor *dpred) {
    return nb_loss(NB_LOSS_L2, pred, target, loss_sum, dpred);
}
nb_status nb_loss_l1(const nb_tensor *pred, const nb_tensor *target, nb_tensor *loss_sum, nb_tensor *dpred) {
    return nb_loss(NB_LOSS_L1, pred, target, loss_sum, dpred);
}
nb_status nb_loss_relative_l2(const nb_tensor *pred, const nb_tensor *target, nb_tensor *loss_sum,
                              nb_tensor *dpred) {
    return nb_loss(NB_LOSS_RELATIVE_L2, pred, target, loss_sum, dpred);
}
