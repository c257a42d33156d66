/* nabla — a diffusion UNet (guided-diffusion's UNetModel) on the tape, DDPM training and sampling,
 * on the CPU or a CUDA GPU (the model lives on its tape's device).
 *
 *   nb_unet_config cfg = nb_unet_config_reference();   // 64x64x3, 64 ch, mult 1,2,3,4, ... 20,494,211 params
 *   cfg.image_size = 32;  ...                           // or change any knob
 *   nb_device *dev; nb_device_open("cuda", &dev);       // or "cpu"
 *   nb_tape *t; nb_tape_create_on(dev, &t);             // nb_tape_create(&t): the CPU
 *   nb_tape_set_precision(t, NB_TAPE_TF32);             // CUDA only: FP32 / TF32 / BF16 GEMMs and convs
 *   nb_unet *u;
 *   nb_unet_create(&cfg, t, &u);                        // validates cfg, registers its parameters on t
 *   nb_unet_init(u, seed);                              // PyTorch's default init (built on the host, uploaded)
 *   nb_tape_reset(t);
 *   nb_tvar x, eps;                                     // x [N,C,H,W] input on the tape
 *   nb_unet_forward(u, x, timesteps, &eps);              // timesteps: host float[N] -> eps [N,out,H,W]
 *
 *   nb_ddpm *d; nb_ddpm_create(u, &dcfg, &d);            // linear beta schedule, AdamW, clip, EMA
 *   nb_ddpm_train_step(d, x0, n, NULL, NULL);            // x0 host [n,C,H,W] in [-1,1]; no host wait
 *   nb_ddpm_stats st; nb_ddpm_read_stats(d, &st);        // every K steps: mean loss (waits once)
 *   nb_ddpm_use_ema(d);
 *   nb_ddpm_sample(d, NB_SAMPLER_DDIM, 50, 16, seed, out);   // out host [16,C,H,W]
 *   nb_ddpm_save(d, "unet.safetensors");                 // the EMA weights, F32 safetensors
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
 * softmax(q k^T / sqrt(d)) v -> 1x1 proj -> + input. GroupNorm eps 1e-5 (GN + SiLU pairs run as
 * the tape's fused nb_tape_group_norm_silu).
 * Parameter names and shapes are guided-diffusion's state_dict keys (attention qkv / proj_out
 * weights are [O, C, 1] conv1d weights), e.g. "input_blocks.0.0.weight" [C0, in, 3, 3]; on the
 * tape the conv1d weights are [O, C, 1, 1] (nb_unet_params lists the state_dict shapes).
 *
 * Devices. Everything follows the tape's device (nb_tape_create_on). On CUDA a training step is
 * queued without any host wait: x0 is uploaded, t is drawn on the host (n numbers, passed as
 * kernel arguments), the noise and x_t = sqrt(ab) x0 + sqrt(1-ab) eps are made on the GPU by a
 * counter-based generator (the same numbers as the CPU reference), and the gradient norm,
 * clipping, AdamW and the EMA run as kernels; the step's loss is accumulated on the device and
 * read by nb_ddpm_read_stats (or when train_step's loss / grad_norm pointers are given, which
 * waits). Sampling keeps x on the device; only the timestep embedding's n floats go up per step.
 */
#ifndef NABLA_NN_UNET_H
#define NABLA_NN_UNET_H

#include <stdint.h>

#include "nabla/nn_tape.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

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
/* The same from a timestep embedding emb [N, model_channels] already on the tape (e.g. made by
 * nb_tape_timestep_embedding before nb_graph_record_begin, so that a recorded graph holds it as
 * a constant: a recording cannot repeat an embedding made from host data). */
nb_status nb_unet_forward_emb(nb_unet *u, nb_tvar x, nb_tvar emb, nb_tvar *out);
/* Multiply-add FLOPs (2 per MAC) of convs, linears and attention in the last forward. */
nb_status nb_unet_last_forward_flops(const nb_unet *u, double *out);

/* Forward profile: with profiling on, every op of nb_unet_forward is bracketed by device events
 * (host clock on the CPU) and its time added to its kind ("conv3x3", "gn_silu", "attention", ...).
 * Forwards wait for the device when profiling (for the events); off by default. */
typedef struct nb_unet_prof_entry {
    const char *op;   /* kind name (static string) */
    int64_t calls;
    double ms;        /* total over the calls */
} nb_unet_prof_entry;
#define NB_UNET_PROF_KINDS 16
nb_status nb_unet_set_profile(nb_unet *u, int on);
/* Totals since profiling was switched on: *n entries (kinds with calls > 0). */
nb_status nb_unet_get_profile(nb_unet *u, nb_unet_prof_entry out[NB_UNET_PROF_KINDS], int *n);

/* ---- checkpoints (safetensors, F32, config in __metadata__) -------------------------------- */
/* Writes params (HOST memory in the tape's layout, e.g. from nb_tape_read_params or
 * nb_ddpm_read_ema) under their names. */
nb_status nb_unet_save(const nb_unet *u, const float *params, const char *path);
/* Reads the config from path's metadata (NB_ERR_IO / NB_ERR_INVALID_ARG naming what is wrong). */
nb_status nb_unet_read_config(const char *path, nb_unet_config *out);
/* Loads path's tensors into u's parameters (on any device: through nb_tape_write_params): every
 * parameter must be present with its shape (NB_ERR_SHAPE / NB_ERR_NOT_FOUND naming the tensor),
 * and the file's config must equal u's. */
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

/* Trainer + sampler over u (borrowed), on u's tape's device. Allocates AdamW state and the EMA
 * copy there. */
nb_status nb_ddpm_create(nb_unet *u, const nb_ddpm_config *cfg, nb_ddpm **out);
void nb_ddpm_free(nb_ddpm *d);
/* alpha_bar[t] for t < timesteps (host array owned by d). */
nb_status nb_ddpm_alphas_cumprod(const nb_ddpm *d, const double **out);
/* One step: t ~ U{0..T-1} (host), eps ~ N(0,1) and x_t = sqrt(ab) x0 + sqrt(1-ab) eps (on the
 * device), loss = MSE(model, eps), backward, global-norm clip, AdamW, EMA. x0 host [n, in, S, S].
 * *loss (may be NULL) <- this batch's loss; *grad_norm (may be NULL) <- global grad norm before
 * clipping; either one makes the call wait for the device (leave both NULL in a fast loop and
 * use nb_ddpm_read_stats). A non-finite gradient norm is an error: at once on the CPU; on CUDA
 * the step's update is skipped (gradients scaled by 0) and the error is returned by the next call
 * that reads (this one with loss / grad_norm, or nb_ddpm_read_stats). */
nb_status nb_ddpm_train_step(nb_ddpm *d, const float *x0, int n, float *loss, float *grad_norm);
/* CUDA graphs (on by default on CUDA; the environment variable NABLA_CUDA_GRAPH=0 starts them
 * off): after two ordinary steps of the same batch size, a step's forward and backward are
 * captured into a CUDA graph (device.h) and later steps replay it (new x0, noise and timesteps
 * reach it through fixed device buffers), without the per-kernel launch gaps. Anything that
 * resets the tape in between (sampling, a forward of your own), another batch size, a precision
 * change or a device buffer freed since the capture makes the next step record afresh. A capture
 * that fails turns graphs off for this DDPM (warning in the log). Profiling (nb_ddpm_set_profile)
 * runs without graphs. nb_ddpm_graph_state: 0 off, 1 on (not captured yet), 2 replaying. */
nb_status nb_ddpm_set_cuda_graphs(nb_ddpm *d, int on);
int nb_ddpm_graph_state(const nb_ddpm *d);
/* Captures made so far (a number that keeps growing in a training loop means something resets
 * the tape or frees device memory every few steps). */
int nb_ddpm_graph_captures(const nb_ddpm *d);

/* Training statistics accumulated on the device since the last read. Waits for the device. */
typedef struct nb_ddpm_stats {
    int64_t steps;        /* steps in the window */
    double mean_loss;     /* mean of the steps' losses */
    float last_grad_norm; /* before clipping, last step */
    float max_grad_norm;
} nb_ddpm_stats;
nb_status nb_ddpm_read_stats(nb_ddpm *d, nb_ddpm_stats *out);

/* Phase times of the training steps since profiling was switched on (device events around the
 * phases; each profiled step waits for the device at its end). */
typedef struct nb_ddpm_profile {
    int64_t steps;
    double input_ms;     /* upload x0, noise + x_t */
    double forward_ms;   /* UNet forward + MSE */
    double backward_ms;  /* tape backward */
    double optimizer_ms; /* grad norm + clip, AdamW, EMA */
} nb_ddpm_profile;
nb_status nb_ddpm_set_profile(nb_ddpm *d, int on);
nb_status nb_ddpm_get_profile(const nb_ddpm *d, nb_ddpm_profile *out);

/* The EMA parameters (the raw parameters when ema_decay == 0), the tape's layout, ON THE TAPE'S
 * DEVICE (a device address on CUDA). */
nb_status nb_ddpm_ema_params(nb_ddpm *d, float **out);
/* Copies the EMA (or raw) parameters into host memory (count = the tape's parameter count). */
nb_status nb_ddpm_read_ema(nb_ddpm *d, float *host, int64_t count);
/* Copies the EMA parameters into the model (for sampling after training). */
nb_status nb_ddpm_use_ema(nb_ddpm *d);
/* nb_unet_save of the EMA (or raw) parameters, from any device. */
nb_status nb_ddpm_save(nb_ddpm *d, const char *path);
/* n samples with the current model parameters over `steps` evenly spaced timesteps (1..T):
 * DDPM ancestral (posterior variance, x0 clipped to [-1,1]) or DDIM with eta = 0.
 * out host [n, out, S, S]. Runs the model in chunks (16 images on the CPU, 64 on CUDA); the
 * noise depends on (seed, image index), not on the chunking. */
nb_status nb_ddpm_sample(nb_ddpm *d, nb_sampler sampler, int steps, int n, uint64_t seed, float *out);
/* The n samples of nb_ddpm_sample (host [n, channels, size, size], values in [-1, 1]) as one image
 * for nb_image_write_png: a grid of ceil(sqrt(n)) columns (row-major, the last row may be short,
 * the rest black), every pixel repeated `scale` times each way (1..16), values mapped to [0, 1]
 * and clamped. *out: a new f32 [rows*size*scale, cols*size*scale, channels] tensor on the CPU.
 * channels 1 or 3 (a grey or an RGB PNG); NB_ERR_INVALID_ARG naming the value otherwise. */
nb_status nb_ddpm_sample_grid(const float *x, int n, int channels, int size, int scale, nb_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
