/* Helpers shared by src/nn and src/models (nn_common.h): f32 tensor checks with messages naming
 * the call and the argument, the thread-pool loop, and the CUDA kernel loader. */
#include <stdio.h>

#include "core/threadpool.h"
#include "core/util.h"
#include "nn/common/nn_common.h"

nb_status nb_nn_check_f32(const char *fn, const char *arg, const nb_tensor *t, nb_device *dev,
                          int ndim, int64_t d0, int64_t d1) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "%s: %s is NULL", fn, arg);
    char buf[128];
    if (nb_tensor_dtype(t) != NB_F32)
        return nb_error(NB_ERR_DTYPE, "%s: %s must be f32, got %s", fn, arg,
                        nb_tensor_describe(t, buf, sizeof buf));
    if (dev && nb_tensor_device(t) != dev)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s is on %s but the operation runs on %s", fn, arg,
                        nb_device_name(nb_tensor_device(t)), nb_device_name(dev));
    if (!nb_tensor_is_contiguous(t))
        return nb_error(NB_ERR_LAYOUT, "%s: %s must be contiguous, got %s", fn, arg,
                        nb_tensor_describe(t, buf, sizeof buf));
    const int64_t *sh = nb_tensor_shape(t);
    int bad = nb_tensor_ndim(t) != ndim || (d0 >= 0 && sh[0] != d0) ||
              (ndim >= 2 && d1 >= 0 && sh[1] != d1);
    if (bad) {
        char want[64];
        if (ndim == 1)
            snprintf(want, sizeof want, "[%lld]", (long long)d0);
        else if (d0 >= 0)
            snprintf(want, sizeof want, "[%lld,%lld]", (long long)d0, (long long)d1);
        else
            snprintf(want, sizeof want, "[B,%lld]", (long long)d1);
        return nb_error(NB_ERR_SHAPE, "%s: %s has shape %s, expected %s", fn, arg,
                        nb_shape_str(nb_tensor_ndim(t), sh, buf, sizeof buf), want);
    }
    return NB_OK;
}

void nb_nn_parallel(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t b, int64_t e), void *ctx) {
    if (n <= 0) return;
    nb_threadpool *p = nb_threadpool_global();
    if (!p || n <= grain)
        fn(ctx, 0, n);
    else
        nb_threadpool_run(p, n, grain, fn, ctx);
}
