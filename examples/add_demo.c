/* SlangPy's first example, from C: call add.nb's
 *
 *     float add(float a, float b) { return a + b; }
 *
 * over whole arrays. The call layer generates the loop (a CPU kernel, or a CUDA kernel compiled
 * by NVRTC), broadcasts a scalar, maps two vectors into an outer product and writes into an
 * existing array.
 *
 *   usage: add_demo [path/to/add.nb] [cpu|cuda|auto]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nabla/nabla.h"

#define CHECK(x)                                                                               \
    do {                                                                                       \
        nb_status s_ = (x);                                                                    \
        if (s_ != NB_OK) {                                                                     \
            fprintf(stderr, "add_demo: %s failed: %s\n", #x, nb_last_error());                 \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

static int expect(const char *what, const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f) {
            fprintf(stderr, "add_demo: %s[%d] = %g, expected %g\n", what, i, got[i], want[i]);
            return 0;
        }
    printf("  %-34s ok\n", what);
    return 1;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "examples/add.nb";
    const char *spec = argc > 2 ? argv[2] : "auto";
    nb_device *dev = NULL;
    CHECK(nb_device_open(spec, &dev));
    nb_module *m = NULL;
    CHECK(nb_module_load(dev, path, NULL, &m));
    nb_func *add = NULL;
    CHECK(nb_module_func(m, "add", &add));
    printf("add_demo on %s: %s\n", nb_device_name(dev), nb_func_signature(add, 0));

    /* 1. a[i] + b[i] over two arrays of 5 floats: the kernel shape is [5]. */
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, y[20];
    int64_t n5[1] = {5};
    nb_tensor *ta = NULL, *tb = NULL, *ty = NULL;
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, n5, a, &ta));
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, n5, b, &tb));
    nb_tensor *args[2] = {ta, tb};
    CHECK(nb_func_call(add, 2, args, &ty));
    CHECK(nb_tensor_to_host(ty, y, sizeof(float) * 5));
    float want1[5] = {11, 22, 33, 44, 55};
    int ok = expect("add(a, b)", y, want1, 5);
    nb_tensor_free(ty);

    /* 2. A scalar broadcasts to every element: add(a, 0.5). */
    nb_call *c = NULL;
    CHECK(nb_call_begin(add, &c));
    CHECK(nb_call_arg(c, 0, ta));
    CHECK(nb_call_arg_double(c, 1, 0.5));
    CHECK(nb_call_run(c, &ty));
    CHECK(nb_tensor_to_host(ty, y, sizeof(float) * 5));
    float want2[5] = {1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
    ok &= expect("add(a, 0.5)", y, want2, 5);
    nb_tensor_free(ty);

    /* 3. Outer sum: a mapped to kernel dim 0, b[0..4) to dim 1 -> y[i][j] = a[i] + b[j]. */
    nb_tensor *tb4 = NULL;
    CHECK(nb_tensor_slice(tb, 0, 0, 4, 1, &tb4));
    int d0 = 0, d1 = 1;
    CHECK(nb_call_begin(add, &c));
    CHECK(nb_call_arg(c, 0, ta));
    CHECK(nb_call_arg(c, 1, tb4));
    CHECK(nb_call_map(c, 0, 1, &d0));
    CHECK(nb_call_map(c, 1, 1, &d1));
    CHECK(nb_call_run(c, &ty));
    float want3[20];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) want3[i * 4 + j] = a[i] + b[j];
    if (nb_tensor_ndim(ty) != 2 || nb_tensor_shape(ty)[0] != 5 || nb_tensor_shape(ty)[1] != 4) {
        fprintf(stderr, "add_demo: outer sum has the wrong shape\n");
        ok = 0;
    } else {
        CHECK(nb_tensor_to_host(ty, y, sizeof(float) * 20));
        ok &= expect("add(a.map(0), b.map(1))", y, want3, 20);
    }
    nb_tensor_free(ty);

    /* 4. Into an existing array (_result=): y = a + a. */
    nb_tensor *into = NULL;
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, n5, &into));
    CHECK(nb_call_begin(add, &c));
    CHECK(nb_call_arg(c, 0, ta));
    CHECK(nb_call_arg(c, 1, ta));
    CHECK(nb_call_result(c, into));
    CHECK(nb_call_run(c, NULL));
    CHECK(nb_tensor_to_host(into, y, sizeof(float) * 5));
    float want4[5] = {2, 4, 6, 8, 10};
    ok &= expect("add(a, a, _result=into)", y, want4, 5);

    /* 5. A mismatch is an error naming both arguments and shapes. */
    nb_tensor *bad[2] = {ta, tb4};
    nb_status s = nb_func_call(add, 2, bad, &ty);
    printf("  add(f32[5], f32[4]) -> %s: %s\n", nb_status_name(s), nb_last_error());
    ok &= s == NB_ERR_SHAPE;

    nb_tensor_free(into);
    nb_tensor_free(tb4);
    nb_tensor_free(ta);
    nb_tensor_free(tb);
    nb_module_free(m);
    nb_device_close(dev);
    printf(ok ? "add_demo: all ok\n" : "add_demo: FAILED\n");
    return ok ? 0 : 1;
}
