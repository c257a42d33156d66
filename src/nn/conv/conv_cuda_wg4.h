/* The 3x3 stride-1 pad-1 weight gradient as one kernel with a vectorized im2col
 * (conv_cuda_wg4.c): three kw-shifted columns from each 16-byte load of an x row.
 *   if (nb_conv_wg4_preferred(d, NB_TAPE_BF16, NB_BF16, NB_BF16))
 *       nb_conv_wg4(dev, NB_TAPE_BF16, d, x, dy, dw, db); // dw [O][C][3][3], db [O] f32 +=
 * x [N][C][H][W], dy [N][O][H][W]: bf16 at BF16 precision, f32 at TF32 (16-byte aligned);
 * W % 8 == 0, H*W % 32 == 0. */
#ifndef NB_NN_CONV_CUDA_WG4_H
#define NB_NN_CONV_CUDA_WG4_H

#include "nn/conv/conv_cuda.h"

int nb_conv_wg4_supports(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt);
/* supported and measured ahead of the other weight-gradient paths (C, O >= 32) */
int nb_conv_wg4_preferred(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt);
/* db (may be NULL): the bias gradient, summed from the dy tiles the kernel reads anyway */
nb_status nb_conv_wg4(nb_device *dev, int precision, const nb_conv_dims *d, const void *x,
                      const void *dy, float *dw, float *db);
/* Tests / benchmarks (like nb_cuda_conv_set_algo): 0 makes nb_conv_wg4_preferred say no, so the
 * other weight-gradient paths (production for the shapes this kernel does not take) run on these
 * shapes too; 1 or -1 back to the default (on). Process-wide. */
void nb_conv_wg4_enable(int on);

#endif
