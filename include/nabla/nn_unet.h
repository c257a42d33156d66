/* nabla — a diffusion UNet (guided-diffusion's UNetModel) on the tape, DDPM training and sampling.
 *
 *   nb_unet_config cfg = nb_unet_config_reference();   // 64x64x3, 64 ch, mult 1,2,3,4, ... 20,494,211 params
 *   cfg.image_size = 32;  ...                           // or change any knob
 *   nb_tape *t; nb_tape_create(&t);
 *   nb_unet *u;
 *   nb_unet_create(&cfg, t, &u);                        // validates cfg, registers its parameters on t
 *   nb_unet_init(u, seed);                              // PyTorch's default init, zero_module convs zeroed
 *   nb_tape_reset(t);
 *   nb_tvar x, eps;                                     // x [N,C,H,W] input on the tape
 *   nb_unet_forward(u, x, timesteps, &eps);              // timesteps: host float[N] -> eps [N,out,H,W]
 *
 *   nb_ddpm *d; nb_ddpm_create(u, &dcfg, &d);            // linear beta schedule, AdamW, clip, EMA
 *   nb_ddpm_train_step(d, x0, n, &loss);                 // x0 host [n,C,H,W] in [-1,1]
 *   nb_ddpm_sample(d, NB_SAMPLER_DDIM, 50, 16, seed, out);   // out host [16,C,H,W]
 *
 * Structure (guided-diffusion, num_head_channels set, use_scale_shift_norm=False,
 * resblock_updown=False, learn_sigma=False, no dropout, no class labels): time_embed =
 * sinusoidal(model_channels) -> linear -> SiLU -> linear (4 * model_channels wide);
 * input_blocks.0 = conv3x3; per level l, num_res_blocks x (ResBlock [+ AttentionBlock when the
 * level's resolution is listed]) then (not on the last level) a downsample: 2x2 average pool, or
 * a stride-2 conv3x3 when conv_resample; middle_block = Res, Attn, Res; output_blocks mirror
 * with num_res_blocks + 1 ResBlocks per level on [h ‖ skip], upsample (nearest x2, + conv3x3 when
 * conv_resample) at the end of every level but the first; out = GN -> SiLU -> conv3x3.
 * ResBlock: GN -> SiLU -> conv3x3 (+ linear(SiLU(emb)) per channel) -> GN -> SiLU -> conv3x3,
 * plus the input (through a 1x1 conv when channels change). AttentionBlock: GN -> 1x1 qkv ->
 * heads of num_head_channels (guided-diffusion's legacy [head][q,k,v][d] channel order) ->
 * softmax(q k^T / sqrt(d)) v -> 1x1 proj -> + input. GroupNorm eps 1e-5.
 * Parameter names and shapes are guided-diffusion's state_dict keys (attention qkv / proj_out
 * weights are [O, C, 1] conv1d weights), e.g. "input_blocks.0.0.weight" [C0, in, 3, 3].
 * CPU only (the tape has no CUDA path yet); f32 only.
 */
#ifndef NABLA_NN_UNET_H
#define NABLA_NN_UNET_H

#include <stdint.h>

#include "nabla/nn_tape.h"
#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NB_UNET_MAX_LEVELS 8

typedef struct nb_unet_config {
    int image_size;        /* H = W; divisible by 2^(levels - 1) */
    int in_channels, out_channels;
    int model_channels;    /* base channels */
    int n_levels;          /* entries of channel_mult (1..NB_UNET_MAX_LEVELS) */
    int channel_mult[NB_UNET_MAX_LEVELS];
    int num_res_blocks;
    int n_attn;            /* entries of attention_res (0..NB_UNET_MAX_LEVELS) */
    int attention_res[NB_UNET_MAX_LEVELS]; /* in pixels, e.g. 16 and 8: each image_size >> level */
    int num_head_channels; /* divides every attention block's channels */
    int conv_resample;     /* 1: stride-2 conv down, nearest + conv up; 0: avg pool / nearest */
    int num_groups;        /* GroupNorm groups; divides every normalised channel count */
} nb_unet_config;

/* The reference: 64x64x3 -> 3, 64 channels, mult 1,2,3,4, 2 res blocks, attention at
 * 16 and 8 with 32-channel heads, no resample convs, GroupNorm(32): 20,494,211 parameters. */
nb_unet_config nb_unet_config_reference(void);
/* NB_ERR_INVALID_ARG naming the knob: sizes out of range, channels not divisible by groups,
 * attention resolution not in the pyramid, head channels not dividing the channels. */
nb_status nb_unet_config_validate(const nb_unet_config *cfg);
/* Parameter count of a (valid) config, computed without allocating. */
nb_status nb_unet_param_count(const nb_unet_config *cfg, int64_t *out);

/* Config <-> string pairs (safetensors metadata). Keys: image_size, in_channels, out_channels,
 * model_channels, channel_mult ("1,2,3,4"), num_res_blocks, attention_resolutions ("16,8" or
 * ""), num_head_channels, conv_resample, num_groups. *n_out = number of pairs (NB_UNET_META_N);
 * vals: caller buffers of 64 chars each. */
#define NB_UNET_META_N 10
nb_status nb_unet_config_to_meta(const nb_unet_config *cfg, const char *keys[NB_UNET_META_N],
                                 char vals[NB_UNET_META_N][64]);
/* Sets the knob named key from its string; NB_ERR_NOT_FOUND for an unknown key. */
nb_status nb_unet_config_set(nb_unet_config *cfg, const char *key, const char *value);
/* Parses "1,2,3,4" into at most max ints > 0 (empty string allowed when allow_empty). */
nb_status nb_unet_parse_int_list(const char *s, int max, int allow_empty, int *vals, int *n);

typedef struct nb_unet nb_unet;

/* Validates cfg and registers all parameters on t (which must have no other step yet). */
nb_status nb_unet_create(const nb_unet_config *cfg, nb_tape *t, nb_unet **out);
void nb_unet_free(nb_unet *u);
nb_status nb_unet_get_config(const nb_unet *u, nb_unet_config *out);
nb_tape *nb_unet_tape(const nb_unet *u);
/* The parameters in registration (state_dict) order: tape handle, name, shape. */
typedef struct nb_unet_param_name {
    nb_tvar id;
    int ndim;
    int64_t shape[4];
    char name[64];
} nb_unet_param_name;
nb_status nb_unet_params(const nb_unet *u, const nb_unet_param_name **out, int *n);
/* PyTorch's default init (uniform +-1/sqrt(fan_in) for weights and biases of convs / linears,
 * GroupNorm weight 1, bias 0), with guided-diffusion's zero_module layers (each ResBlock's last
 * conv, each attention proj_out, the output conv) zeroed. Deterministic in seed. */
nb_status nb_unet_init(nb_unet *u, uint64_t seed);
/* x [N, in, S, S] (a tape value), timesteps host float[N] -> *out [N, out, S, S]. */
nb_status nb_unet_forward(nb_unet *u, nb_tvar x, const float *timesteps, nb_tvar *out);
/* Multiply-add FLOPs (2 per MAC) of convs, linears and attention in the last forward. */
nb_status nb_unet_last_forward_flops(const nb_unet *u, double *out);

/* ---- checkpoints (safetensors, F32, config in __metadata__) -------------------------------- */
/* Writes params (the tape's layout, e.g. nb_tape_params or an EMA copy) under their names. */
nb_status nb_unet_save(const nb_unet *u, const float *params, const char *path);
/* Reads the config from path's metadata (NB_ERR_IO / NB_ERR_INVALID_ARG naming what is wrong). */
nb_status nb_unet_read_config(const char *path, nb_unet_config *out);
/* Loads path's tensors into u's parameters: every parameter must be present with its shape
 * (NB_ERR_SHAPE / NB_ERR_NOT_FOUND naming the tensor), and the file's config must equal u's. */
nb_status nb_unet_load(nb_unet *u, const char *path);

/* ---- DDPM ------------------------------------------------------------------------------------ */

typedef struct nb_ddpm_config {
    int timesteps;           /* 1000 */
    float beta_start, beta_end; /* 1e-4, 0.02 (linear; scaled by 1000 / timesteps as guided-diffusion) */
    float lr;                /* AdamW: 1e-4 */
    float weight_decay;      /* 0 */
    float grad_clip;         /* max global grad norm; 0 = off (default 1) */
    float ema_decay;         /* 0 = no EMA (default 0.9999); step n uses min(ema_decay, (1+n)/(10+n)) */
    uint64_t seed;
} nb_ddpm_config;

nb_ddpm_config nb_ddpm_config_default(void);

typedef enum nb_sampler { NB_SAMPLER_DDPM = 0, NB_SAMPLER_DDIM = 1 } nb_sampler;

typedef struct nb_ddpm nb_ddpm;

/* Trainer + sampler over u (borrowed). Allocates AdamW state and the EMA copy. */
nb_status nb_ddpm_create(nb_unet *u, const nb_ddpm_config *cfg, nb_ddpm **out);
void nb_ddpm_free(nb_ddpm *d);
/* alpha_bar[t] for t < timesteps (host array owned by d). */
nb_status nb_ddpm_alphas_cumprod(const nb_ddpm *d, const double **out);
/* One step: t ~ U{0..T-1}, eps ~ N(0,1), x_t = sqrt(ab) x0 + sqrt(1-ab) eps, loss = MSE(model, eps),
 * backward, clip, AdamW, EMA. x0 host [n, in, S, S]. *loss (may be NULL) <- this batch's loss;
 * *grad_norm (may be NULL) <- global grad norm before clipping. */
nb_status nb_ddpm_train_step(nb_ddpm *d, const float *x0, int n, float *loss, float *grad_norm);
/* The EMA parameters (the raw parameters when ema_decay == 0), the tape's layout. */
nb_status nb_ddpm_ema_params(nb_ddpm *d, float **out);
/* Copies the EMA parameters into the model (for sampling after training). */
nb_status nb_ddpm_use_ema(nb_ddpm *d);
/* n samples with the current model parameters over `steps` evenly spaced timesteps (1..T):
 * DDPM ancestral (posterior variance, x0 clipped to [-1,1]) or DDIM with eta = 0.
 * out host [n, out, S, S]. Runs the model in chunks of at most 16 images. */
nb_status nb_ddpm_sample(nb_ddpm *d, nb_sampler sampler, int steps, int n, uint64_t seed, float *out);

#ifdef __cplusplus
}
#endif
#endif
