/* nabla — optimizers and losses over flat f32 buffers, CPU and CUDA.
 *
 *   nb_adam_config ac = nb_adam_config_default();     // PyTorch's defaults
 *   ac.lr = 1e-2f;
 *   nb_adam *opt;
 *   nb_adam_create(dev, n_params, &ac, &opt);           // owns m and v, f32[n_params] each, zeroed
 *   for (;;) {
 *       nb_loss_l2(pred, target, loss_sum, dpred);       // loss_sum += mean (y - t)^2; dpred = dL/dy
 *       ... backward into grads ...
 *       nb_adam_step(opt, params, grads, 1);             // one launch; 1: zero grads after use
 *   }
 *   nb_adam_destroy(opt);
 *
 * Adam (Kingma & Ba, as PyTorch's torch.optim.Adam / AdamW), step t = 1, 2, ...:
 *   g = grad (+ weight_decay * p       when !decoupled: Adam's L2 penalty)
 *   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
 *   p -= lr * weight_decay * p        when decoupled (AdamW)
 *   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The step count lives on the host and the bias corrections travel as kernel arguments: a step
 * is one launch with no host synchronisation (lib/nn_ops.nb's nn_adamw, a prepared call kept per
 * segment: a steady-state step allocates nothing). A model whose parameters lie in several
 * buffers (an encoding's and an MLP's) is updated by nb_adam_step_multi, one launch per buffer;
 * the optimizer's state is then one flat buffer over the concatenation of the segments.
 *
 * Losses over pred and target of the same shape (N elements in all), f32, contiguous, on one
 * device:   L2: (y - t)^2      L1: |y - t|      relative L2: (y - t)^2 / (y^2 + 0.01), with y in the
 * denominator treated as a constant (tiny-cuda-nn's RelativeL2, for HDR images).
 * The loss is the MEAN over the N elements. It is ADDED into loss_sum (f32, one element, on the
 * same device; NULL: not computed) so that a training loop can sum it over many steps and read it
 * only when it prints; zero it yourself. dpred (same shape, or NULL) is OVERWRITTEN with dL/dpred
 * (dividing by N). On CUDA: one launch, no host synchronisation.
 */
#ifndef NABLA_NN_OPTIM_H
#define NABLA_NN_OPTIM_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_adam_config {
    float lr;           /* > 0 */
    float beta1, beta2; /* in [0, 1) */
    float eps;          /* >= 0 */
    float weight_decay; /* >= 0 */
    int decoupled;      /* 1: AdamW (decoupled weight decay); 0: Adam with an L2 penalty */
} nb_adam_config;

/* lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay, Adam. */
nb_adam_config nb_adam_config_default(void);

typedef struct nb_adam nb_adam;

#define NB_ADAM_MAX_SEGMENTS 8

nb_status nb_adam_create(nb_device *dev, int64_t n_params, const nb_adam_config *cfg, nb_adam **out);
void nb_adam_destroy(nb_adam *opt);

/* Changes the learning rate for the following steps (schedules). */
nb_status nb_adam_set_lr(nb_adam *opt, float lr);
/* Steps taken so far. */
int64_t nb_adam_steps(const nb_adam *opt);
/* Zeroes m and v and the step count. */
nb_status nb_adam_reset(nb_adam *opt);

/* One step over params and grads, f32[n_params] each. zero_grads = 1 sets grads to 0 after
 * reading them (saves a memset launch before the next accumulating backward). */
nb_status nb_adam_step(nb_adam *opt, nb_tensor *params, nb_tensor *grads, int zero_grads);

/* One step over n segments (1..NB_ADAM_MAX_SEGMENTS): params[i], grads[i] f32 1-D of equal
 * length per i; the lengths must add up to n_params. One launch per segment. */
nb_status nb_adam_step_multi(nb_adam *opt, int n, nb_tensor *const *params, nb_tensor *const *grads,
                             int zero_grads);

/* ---- losses --------------------------------------------------------------------------------- */

typedef enum nb_loss_kind { NB_LOSS_L2 = 0, NB_LOSS_L1 = 1, NB_LOSS_RELATIVE_L2 = 2 } nb_loss_kind;

/* "l2", "l1", "relative_l2"; -1 / "invalid" otherwise. */
int nb_loss_from_name(const char *name);
const char *nb_loss_name(nb_loss_kind kind);

nb_status nb_loss(nb_loss_kind kind, const nb_tensor *pred, const nb_tensor *target,
                  nb_tensor *loss_sum, nb_tensor *dpred);
nb_status nb_loss_l2(const nb_tensor *pred, const nb_tensor *target, nb_tensor *loss_sum, nb_tensor *dpred);
nb_status nb_loss_l1(const nb_tensor *pred, const nb_tensor *target, nb_tensor *loss_sum, nb_tensor *dpred);
nb_status nb_loss_relative_l2(const nb_tensor *pred, const nb_tensor *target, nb_tensor *loss_sum,
                              nb_tensor *dpred);

#ifdef __cplusplus
}
#endif
#endif
