/* nabla — differentiable GPU kernels and small fast neural models, in C.
 * One include for the whole public API. */
#ifndef NABLA_H
#define NABLA_H

#include "nabla/alloc.h"
#include "nabla/cache.h"
#include "nabla/cmdlist.h"
#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/env.h"
#include "nabla/file.h"
#include "nabla/log.h"
#include "nabla/module.h"
#include "nabla/npy.h"
#include "nabla/shape.h"
#include "nabla/status.h"
#include "nabla/tensor.h"
#include "nabla/version.h"
/* neural library (docs/NN.md) */
#include "nabla/fit_image.h"
#include "nabla/graph_bench.h"
#include "nabla/graph_chain_bench.h"
#include "nabla/image.h"
#include "nabla/nn_dataset.h"
#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_optim.h"
#include "nabla/nn_tape.h"
#include "nabla/graph.h"
#include "nabla/graph_models.h"
#include "nabla/nn_unet.h"
#include "nabla/safetensors.h"

#endif
