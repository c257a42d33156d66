/* nabla — command lists: a batch of vectorized calls recorded once and submitted as one
 * (SlangPy's command encoder: `m.f.append_to(enc, ...)`, `device.submit_command_buffer(...)`).
 *
 *   nb_cmdlist *l;
 *   nb_cmdlist_create(dev, &l);
 *   nb_call_begin(f, &c); nb_call_arg(c, 0, x); ...;
 *   nb_cmdlist_append(l, c, &y, 1, &n);     // binds, checks and compiles now; y allocated, filled
 *   ...                                     // when the list is submitted
 *   nb_cmdlist_submit(l);                   // runs every call in order
 *   nb_cmdlist_submit(l);                   // again (same arrays, their current contents)
 *   nb_cmdlist_free(l);
 *
 * Appending does everything a call does except the launch: the overload is chosen, arguments are
 * bound and checked (a bad argument is an error of nb_cmdlist_append, naming it), host values are
 * uploaded, outputs allocated and the kernel compiled. The parameter blocks are fixed then: a
 * submit runs the same kernels over the same arrays (their contents at submit time), so every
 * array bound — inputs, outputs, results handed out — must stay alive and in place until the list
 * is freed. Host values are copied at append time.
 *
 * Submitting runs the calls in order on the device's main stream. On CUDA the first submit
 * captures them into a CUDA graph (nb_device_graph_*) and launches it; later submits replay the graph
 * (one launch for the whole batch). On the CPU the calls just run in order. Out-of-range tensor
 * indices are reported by the submit (the first call whose module recorded one is named).
 * Appending to a list that has been submitted drops its graph (the next submit captures anew).
 *
 * A list belongs to one thread at a time.
 */
#ifndef NABLA_CMDLIST_H
#define NABLA_CMDLIST_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/module.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_cmdlist nb_cmdlist;

nb_status nb_cmdlist_create(nb_device *dev, nb_cmdlist **out);
/* Records call c (its function's module must run on the list's device). Results as
 * nb_call_run_results (results may be NULL with max 0: none wanted). Takes c, also on failure. */
nb_status nb_cmdlist_append(nb_cmdlist *l, nb_call *c, nb_tensor **results, int max, int *count);
/* Records a [Kernel] / [numthreads] launch over grid = {x, y, z} (as nb_call_run_grid). Takes c. */
nb_status nb_cmdlist_append_grid(nb_cmdlist *l, nb_call *c, const int64_t grid[3]);
/* Keeps t alive until the list is freed (takes ownership): arrays a caller made only for an
 * appended call. */
nb_status nb_cmdlist_keep(nb_cmdlist *l, nb_tensor *t);
/* Runs the recorded calls in order (see above). An empty list is a no-op. */
nb_status nb_cmdlist_submit(nb_cmdlist *l);
int nb_cmdlist_count(const nb_cmdlist *l);
/* 1 once a submit captured the calls into a CUDA graph (CUDA devices only). */
int nb_cmdlist_uses_graph(const nb_cmdlist *l);
nb_device *nb_cmdlist_device(const nb_cmdlist *l);
/* Waits for a graph launch that may still run, then frees the calls and every kept array. */
void nb_cmdlist_free(nb_cmdlist *l);

#ifdef __cplusplus
}
#endif
#endif
