/* nabla — built-in small models recorded as computational graphs (include/nabla/graph.h): one
 * training step each (forward, mse against a target, backward) on a new tape, for `nabla graph
 * dump`, tests and the docs.
 *
 *   nb_graph_model *m;
 *   nb_graph_model_record("unet", dev, 0, &m);   // dev NULL: the CPU
 *   nb_graph *g = nb_graph_model_graph(m);        // inputs: 0 x, 1 target; outputs: y and the loss
 *   nb_graph_run(g); nb_graph_dump_file(g, NB_GRAPH_DUMP_TEXT, stdout);
 *   nb_graph_model_free(m);                       // the graph, its tape and model
 *
 * Models (nb_graph_model_list):
 *   mlp   x [64,32] -> linear 64 -> relu = h -> linear 64 -> silu -> + h -> silu -> linear 8;
 *         target [64,8] (compiled: one linear_relu node and one fused silu-add-silu node)
 *   unet  nabla's UNet (nn_unet.h) at a small size: 16x16x3, 32 channels, mult 1,2, one res
 *         block, attention at 8x8 (32-channel heads), GroupNorm(8); x [2,3,16,16]; the timestep
 *         embedding (timesteps 10, 500) is made before recording: a constant of the graph. */
#ifndef NABLA_GRAPH_MODELS_H
#define NABLA_GRAPH_MODELS_H

#include <stdint.h>

#include "nabla/graph.h"
#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct nb_device;

typedef struct nb_graph_model nb_graph_model;

/* Model i (0-based): its name and a one-line description; NULL past the last. */
const char *nb_graph_model_list(int i, const char **description);

/* Builds model `name` on a new tape on dev (NULL: the CPU), parameters initialised from seed,
 * runs one step in immediate mode while recording it, and returns the graph with the model.
 * NB_ERR_NOT_FOUND for an unknown name (the message lists the models). */
nb_status nb_graph_model_record(const char *name, struct nb_device *dev, uint64_t seed, nb_graph_model **out);
nb_graph *nb_graph_model_graph(const nb_graph_model *m);
nb_tape *nb_graph_model_tape(const nb_graph_model *m);
/* The prediction (an output) and the loss. */
nb_tvar nb_graph_model_prediction(const nb_graph_model *m);
nb_tvar nb_graph_model_loss(const nb_graph_model *m);
/* Frees the graph, the model and the tape (in that order). NULL: no-op. */
void nb_graph_model_free(nb_graph_model *m);

#ifdef __cplusplus
}
#endif

#endif
