/* Internals of the fused MLP shared by mlp.c (config, params, CPU reference) and mlp_cuda.c. */
#ifndef NB_NN_MLP_INTERNAL_H
#define NB_NN_MLP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/nn_mlp.h"

typedef struct nb_mlp_cuda nb_mlp_cuda; /* CUDA state (kernels, workspaces), mlp_cuda.c */

struct nb_mlp {
    nb_device *dev;
    nb_mlp_config cfg;   /* with loss_scale resolved */
    int n_layers;        /* n_hidden_layers + 1 */
    int *rows, *cols;    /* [n_layers] out / in features of each layer (unpadded) */
    int64_t *w_off, *b_off; /* [n_layers] offsets into the flat buffer (b_off -1 without bias) */
    int64_t n_params;
    nb_tensor *params, *grads; /* [n_params] f32 on dev */

    /* CPU reference training state: what the last training forward saved. */
    float *cpu_h;        /* [n_layers][B][cols_l] rounded layer inputs (h_0 = x) */
    float *cpu_z;        /* [n_layers][B][rows_l] rounded pre-activations */
    size_t cpu_cap;      /* floats in each of cpu_h / cpu_z */
    int64_t saved_batch; /* batch of the last training forward, -1 if none */

    nb_mlp_cuda *cuda;
    int profile;         /* nb_mlp_set_profile: time every CUDA launch */
};

/* Offsets of layer l's blocks in cpu_h / cpu_z for batch B. */
int64_t nb_mlp_cpu_h_off(const nb_mlp *m, int l, int64_t B);
int64_t nb_mlp_cpu_z_off(const nb_mlp *m, int l, int64_t B);

/* The activation and its derivative (at the pre-activation z), as the GPU computes them. */
float nb_mlp_act(nb_activation a, float x);
float nb_mlp_dact(nb_activation a, float z);

/* CUDA side (mlp_cuda.c). Forward/backward assume validated arguments. */
nb_status nb_mlp_cuda_forward(nb_mlp *m, const nb_tensor *x, nb_tensor *y, int training);
nb_status nb_mlp_cuda_backward(nb_mlp *m, const nb_tensor *dy, nb_tensor *dx);
void nb_mlp_cuda_free(nb_mlp *m);
/* Starts timing the launches of an mlp whose CUDA state exists (else its setup does). */
void nb_mlp_cuda_set_profile(nb_mlp *m);
/* The backward with a grid encoding's backward fused in (nb_encoding_backward_mlp, encoding.c);
 * NB_ERR_UNSUPPORTED when this mlp has no such path (then nothing was launched). */
nb_status nb_mlp_cuda_backward_enc(nb_mlp *m, const nb_tensor *dy, const char *const *enc_defs, int enc_smem_floats,
                                   const float *x, float *grads);
/* Forward (from in = the encoded x, f16 or f32), loss (kind as nb_loss_kind, mean added into
 * loss_sum) and that backward in one kernel (nb_encoding_mlp_train); NB_ERR_UNSUPPORTED as above. */
nb_status nb_mlp_cuda_train_enc(nb_mlp *m, const nb_tensor *in, const nb_tensor *target, int loss_kind,
                                float *loss_sum, const char *const *enc_defs, int enc_smem_floats, const float *x,
                                float *grads);
size_t nb_mlp_cuda_workspace_bytes(const nb_mlp *m);

/* CPU reference (mlp.c). */
nb_status nb_mlp_cpu_forward(nb_mlp *m, const nb_tensor *x, nb_tensor *y, int training);
nb_status nb_mlp_cpu_backward(nb_mlp *m, const nb_tensor *dy, nb_tensor *dx);

#endif
