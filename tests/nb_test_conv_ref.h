/* Double references shared by the CUDA conv tests (test_nn_tape_conv_cuda.c,
 * test_nn_conv_bf16_cuda.c, test_nn_conv_aux_cuda.c): conv2d forward + backward computed
 * directly in double (conv_ref; a linear is the 1x1 conv of 1x1 images), the error relative to a
 * tensor's scale (rel_err) and a CHECK_ERR that prints the failing case. Include after nb_test.h. */
#ifndef NB_TEST_CONV_REF_H
#define NB_TEST_CONV_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "nn/conv/conv_cuda.h"

/* y = conv(x, w) + b (b may be NULL); dx += conv^T(dy, w), dw += x (*) dy, db += sum dy over
 * n, p (accumulated: the caller zeroes or seeds them). x [N,C,H,W], w [O,C,K,K], y/dy
 * [N,O,OH,OW]. */
static void conv_ref(const nb_conv_dims *d, const float *x, const float *w, const float *b,
                     const float *dy, double *y, double *dx, double *dw, double *db) {
    int64_t N = d->N, C = d->C, H = d->H, W = d->W, O = d->O, K = d->K, OH = d->OH, OW = d->OW;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = b ? b[o] : 0.0;
                    double g = dy[((n * O + o) * OH + oh) * OW + ow];
                    db[o] += g;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t ki = 0; ki < K; ki++) {
                            int64_t ih = oh * d->stride - d->pad + ki;
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t kj = 0; kj < K; kj++) {
                                int64_t iw = ow * d->stride - d->pad + kj;
                                if (iw < 0 || iw >= W) continue;
                                int64_t xi = ((n * C + c) * H + ih) * W + iw;
                                int64_t wi = ((o * C + c) * K + ki) * K + kj;
                                acc += (double)w[wi] * x[xi];
                                dx[xi] += (double)w[wi] * g;
                                dw[wi] += (double)x[xi] * g;
                            }
                        }
                    y[((n * O + o) * OH + oh) * OW + ow] = acc;
                }
}

/* max |a - ref| / max(max |ref|, 1e-3): the error relative to the tensor's scale (NaN where an
 * element was never written or is bad) */
static double rel_err(const float *a, const double *ref, int64_t n) {
    double m = 1e-3, e = 0.0;
    for (int64_t i = 0; i < n; i++) m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d != d) return d;
        if (d > e) e = d;
    }
    return e / m;
}

#define CHECK_ERR(what, err, tol, ...)                                                          \
    do {                                                                                       \
        double e_ = (err);                                                                     \
        if (!(e_ <= (tol))) {                                                                  \
            fprintf(stderr, "  %s: %s rel err %.3g > %.3g for ", nb_test_name_, (what), e_,     \
                    (double)(tol));                                                            \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            nb_test_failures_++;                                                               \
        }                                                                                      \
    } while (0)

#endif
