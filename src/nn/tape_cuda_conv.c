/* CUDA rows of the tape's GEMM ops: linear and conv2d (in progress). */
#include "nn/tape_internal.h"

const nb_top_cuda_impl nb_top_linear_cuda, nb_top_conv2d_cuda;
