/* CUDA rows of the tape's elementwise, normalisation and layout ops (in progress). */
#include "nn/tape_internal.h"

const nb_top_cuda_impl nb_top_silu_cuda, nb_top_add_cuda, nb_top_add_channel_cuda,
    nb_top_concat_cuda, nb_top_upsample_cuda, nb_top_avgpool_cuda, nb_top_mse_cuda,
    nb_top_group_norm_cuda, nb_top_reshape_cuda, nb_top_transpose_cuda, nb_top_slice_cuda;
