/* The 3x3 stride-1 pad-1 convolution forward and data gradient with a vectorized im2col
 * (conv_cuda_fw4.c): the weights as the GEMM's A in their own [O][9C] order, three kw-shifted
 * input rows from each 16-byte load.
 *   if (nb_conv_fw4_preferred(d, NB_TAPE_BF16, NB_BF16, NB_BF16, 0))
 *       nb_conv_fw4_forward(dev, NB_TAPE_BF16, d, x, w, b, y);     // y := conv(x, w) + b
 *   if (nb_conv_fw4_preferred(d, prec, xdt, ydt, 1))
 *       nb_conv_fw4_dgrad(dev, prec, d, w, dy, dx, store);         // dx (+)= conv^T(dy, w)
 * Activations bf16 at BF16 precision, f32 at TF32 (16-byte aligned); w [O][C][3][3] and b f32.
 * Needs W % 8 == 0 and the GEMM's input channels (C forward, O data gradient) % 16 == 0.
 * Uses conv scratch slot 1 for the bf16 / flipped weights. NABLA_CONV_FW4=0: off (A/B). */
#ifndef NB_NN_CONV_CUDA_FW4_H
#define NB_NN_CONV_CUDA_FW4_H

#include "nn/conv_cuda.h"

/* which: 0 forward, 1 data gradient */
int nb_conv_fw4_supports(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt, int which);
int nb_conv_fw4_preferred(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt, int which);
nb_status nb_conv_fw4_forward(nb_device *dev, int precision, const nb_conv_dims *d, const void *x,
                              const float *w, const float *b, void *y);
/* store: dx = (every element written, none read); else dx += */
nb_status nb_conv_fw4_dgrad(nb_device *dev, int precision, const nb_conv_dims *d, const float *w,
                            const void *dy, void *dx, int store);
/* Source without its "#define PREC / BN" lines, for compile tests. */
const char *nb_conv_fw4_source(void);
/* Tests / benchmarks: 1 / 0 forces nb_conv_fw4_preferred's switch, -1 back to the environment. */
void nb_conv_fw4_enable(int on);

#endif
