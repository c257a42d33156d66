/* CUDA row of the tape's fused attention (in progress). */
#include "nn/tape_internal.h"

const nb_top_cuda_impl nb_top_attention_cuda;
