/* Private to src/call: the module/function handles (module.c), the builder and binding
 * (call.c, bind.c) and the per-signature kernel cache (kcache.c).
 *
 * The hot path of a warm call (nb_call_begin .. nb_call_run with a cached signature) touches only
 * what is here: no string formatting, no allocation except the result array (the nb_call itself
 * is recycled through nb_func.spare). Error paths may do anything.
 */
#ifndef NB_CALL_INTERNAL_H
#define NB_CALL_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "jit/jit.h"
#include "lang/callsig.h"
#include "lang/compiler.h"
#include "nabla/module.h"

#define NB_CALL_MAX_ARGS NB_CALL_MAX_LEAVES
#define NB_CALL_MAX_MAPS 16
#define NB_CALL_BLOCK_MAX 4096 /* parameter block bytes (callsig.h: <= 4 KiB) */

/* ---- the kernel cache: one per function, keyed by the signature's numbers ----------------- */

/* The signature as plain numbers, compared with memcmp over its used prefix. The function is
 * implied (one cache per nb_func) and leaf paths follow from (overload, leaf index). */
typedef struct nb_sig_key {
    int32_t overload, target, mode, ndim, has_result, blocks, contig4, nleaves;
    struct {
        int16_t param;
        uint8_t bind;
        uint8_t storage;
        uint8_t vec4;
        uint8_t gen;        /* NB_BIND_GEN: nb_gen_sig */
        uint8_t owned, bcast, shacc; /* nb_leaf_sig.owned, .bcast, .shacc */
    } leaves[NB_CALL_MAX_LEAVES];
} nb_sig_key;

typedef struct nb_kentry {
    uint64_t hash;
    size_t key_bytes;
    nb_sig_key key;
    nb_call_layout layout;
    nb_jit_kernel *kernel;
} nb_kentry;

typedef struct nb_kcache {
    nb_kentry **entries;
    int count, cap;
} nb_kcache;

size_t nb_sig_key_bytes(const nb_sig_key *k);
uint64_t nb_sig_key_hash(const nb_sig_key *k, size_t bytes);
/* Finds the entry (NULL if absent). Caller holds the module lock. */
nb_kentry *nb_kcache_find(nb_kcache *c, const nb_sig_key *k, size_t bytes, uint64_t hash);
/* Takes ownership of e (allocated with nb_alloc). */
nb_status nb_kcache_add(nb_kcache *c, nb_kentry *e);
void nb_kcache_clear(nb_kcache *c);

/* ---- deferred bounds checks (defer.c) ------------------------------------------------------- */

#define NB_DEFER_SLOTS 256 /* records per module: launch n writes slot (n - 1) % NB_DEFER_SLOTS */

typedef struct nb_defer_log { /* what a slot's launch was, for its message */
    uint64_t seq;           /* launch number, from 1 */
    struct nb_func *f;
    const nb_kentry *e;
    int overload, nleaves;
} nb_defer_log;

typedef struct nb_defer {
    nb_oob_rec *rec;        /* NB_DEFER_SLOTS records in host-mapped memory (host addresses) */
    unsigned *note;         /* after them: set by a kernel once it filled its record */
    uint64_t rec_dev;       /* the records' device address */
    uint64_t seq;           /* deferred launches so far */
    nb_event *mark[2];      /* recorded at the start of each half of the ring (slot reuse) */
    nb_status err;          /* found, not yet reported */
    int registered;         /* its module's check runs at the device's sync points */
    char msg[1024];
    nb_defer_log log[NB_DEFER_SLOTS];
} nb_defer;

/* ---- module and function handles ------------------------------------------------------------ */

struct nb_module {
    nb_device *dev;         /* a reference of our own (nb_device_open), or NULL */
    nb_program *prog;
    int gen;                /* bumped by set_constant: reflection and kernels are stale */
    int no_disk_cache;
    char *name;             /* the file, for messages */
    char *source;           /* nb_module_load_source's text (a copy), NULL for files */
    pthread_mutex_t lock;   /* guards funcs and every function's kernel cache (and oob_dev) */
    nb_buffer *oob_dev;     /* CUDA: the nb_oob_rec its launches report out-of-range indices in */
    nb_defer *defer;        /* deferred checks' records (defer.c), made by the first such launch */
    int defer_off;          /* they could not be made: every launch is checked at once */
    nb_func **funcs;
    int nfuncs, cap_funcs;
    nb_jit_kernel *host;    /* the host unit's entry (host.c), compiled on the first host call */
    int host_gen;           /* generation it was compiled for */
};

struct nb_func {
    nb_module *m;
    char *name;
    int gen;                /* module generation the infos belong to */
    const nb_fn_info *infos;
    int count;
    nb_kcache kcache;
    nb_call *spare;         /* a finished call kept for reuse (under the module lock) */
};

/* Re-reads reflection after a constant changed (under the module lock). */
nb_status nb_func_refresh(nb_func *f);

/* ---- calls ---------------------------------------------------------------------------------- */

typedef enum nb_arg_kind {
    NB_ARGK_NONE = 0,
    NB_ARGK_TENSOR,
    NB_ARGK_VALUE,
    NB_ARGK_ALLOC,
    NB_ARGK_GEN,            /* a generator (nb_call_arg_generator) */
} nb_arg_kind;

typedef struct nb_call_arg_rec {
    nb_arg_kind kind;
    int index;              /* parameter index, or -1 when given by name */
    const char *name;       /* parameter name or field path (borrowed) */
    nb_tensor *tensor;
    nb_dtype dtype;         /* VALUE */
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    const void *data;
    nb_tensor **slot;       /* ALLOC */
    nb_generator gen;       /* GEN */
} nb_call_arg_rec;

typedef struct nb_call_map_rec {
    int index;              /* parameter, or -1 with name */
    const char *name;
    int ndims;
    int dims[NB_MAX_DIMS];
} nb_call_map_rec;

/* How one leaf is bound in the chosen overload (bind.c fills, call.c launches). */
#define NB_ARG_DEFAULT (-2) /* nb_leaf_bind.arg of an unbound parameter given its default value */

typedef struct nb_leaf_bind {
    int arg;                /* index into nb_call.args; -1 for result leaves; NB_ARG_DEFAULT */
    nb_bind_kind bind;
    nb_dtype storage;
    int dir;
    int call_rank;          /* dims of the argument that are call dims */
    int64_t call_shape[NB_MAX_DIMS];
    int64_t call_strides[NB_MAX_DIMS];
    int value_rank;
    int64_t inner[NB_MAX_DIMS];
    int mapped;             /* nb_call_map gave kernel dims */
    int map_dims[NB_MAX_DIMS];
    int64_t kstrides[NB_MAX_DIMS]; /* strides per kernel dim (after alignment) */
    uint64_t data;          /* address of element [0,…] (ARRAY / TENSOR) */
    nb_tensor *tensor;      /* the array bound (user's, uploaded or allocated) */
    int owns_tensor;        /* uploaded host value or allocated out: freed / handed out by us */
    int tensor_rank;        /* TENSOR */
    int64_t tshape[NB_MAX_DIMS], tstrides[NB_MAX_DIMS];
    int gen;                /* GEN: nb_gen_sig */
    int64_t gen_kdim[NB_MAX_DIMS]; /* GEN (index kinds): the kernel dim of each array-order
                               component (-1: none, the value is its offset) */
} nb_leaf_bind;

struct nb_call {
    nb_func *f;
    nb_func *origin;        /* the function given to nb_call_begin (f may become its derivative
                               wrapper): nb_call_free keeps the call as its spare */
    nb_status err;          /* first setter error (sticky) */
    char errmsg[512];       /* its message */
    int nargs;
    nb_call_arg_rec args[NB_CALL_MAX_ARGS];
    int nmaps;
    nb_call_map_rec maps[NB_CALL_MAX_MAPS];
    nb_tensor *into;        /* nb_call_result: the whole (non-struct) result */
    int ninto;              /* nb_call_result_named: fields of a struct result */
    struct { const char *path; nb_tensor *t; } intos[NB_CALL_MAX_LEAVES];
    int *overload_slot;     /* nb_call_report_overload */
    int blocks;             /* nb_call_run_blocks: launched with explicit blocks */
    int defer;              /* nb_call_defer_checks: bounds errors reported at a later check point */
    nb_stream *stream;      /* nb_call_set_stream: the launch's stream (NULL: the device's) */
    int64_t bdim[3];        /* its block size {x, y, z} (the grid goes where run_grid's does) */
    int ntgrads;            /* nb_call_grad / nb_call_tangent on DiffTensor parameters, by name */
    struct { const char *param; nb_tensor *t; } tgrads[NB_CALL_MAX_LEAVES]; /* param: leaf path */
    /* binding scratch for the chosen overload */
    int overload;
    int nleaves;            /* leaves of the overload's parameters (result not included) */
    int nres;               /* result leaves bound after them (sig.has_result ? nresults : 0) */
    nb_leaf_bind leaves[NB_CALL_MAX_LEAVES + 1]; /* parameters, then the result's leaves */
    int kdim;
    int64_t kshape[NB_MAX_DIMS];
    nb_call_sig sig;
    nb_oob_rec oob;         /* CPU launches: the first out-of-range index (lang/callsig.h) */
    _Alignas(16) unsigned char block[NB_CALL_BLOCK_MAX];
};

/* bind.c: chooses the overload and fills c->leaves/kdim/kshape/sig (no device work); then
 * materializes host values and allocations. grid != NULL for [Kernel] launches. */
/* call_ad.c: the gradient array bound to DiffTensor leaf j (its address and byte strides; 0 when
 * none), checked against the primal array's shape. */
nb_status nb_call_tgrad_for(nb_call *c, int j, const nb_leaf_bind *b, uint64_t *ptr, int64_t *strides);
/* call_ad.c: switches a bwds call whose result is wanted to the fused f__bwdr wrapper. */
nb_status nb_call_ad_fuse(nb_call *c, int want_result);
nb_status nb_call_bind(nb_call *c, int want_result, const int64_t *grid);
nb_status nb_call_materialize(nb_call *c, int want_result);
void nb_call_vec4_rows(nb_call *c);
/* Marks the scalar ARRAY gradient leaves of a bwds call (the gradients it accumulates) whose every
 * element belongs to one kernel index (nb_leaf_sig.owned). Part of the kernel's signature. */
void nb_call_owned_grads(nb_call *c);
/* Whether a scalar of elem_bytes at strides[0 .. n) (bytes) over extents shape[0 .. n) is reached
 * by exactly one index per element: extent-1 dims aside, no stride is 0 and, by increasing
 * |stride|, each stride is at least the extent of the dims below it (so rows never overlap). */
/* Whether c (bound, materialized) may run 4 consecutive indices per thread (nb_call_sig.contig4):
 * a 1-D kernel, or a 2-D one of rows of a multiple of 4 indices, of plain arguments only (arrays
 * and uniforms), every array a contiguous scalar array of 2- or 4-byte elements (rows back to
 * back) whose data address is aligned to 4 of them, or an input array at stride 0 along the last
 * kernel dim (one element for all, or per row: nb_leaf_sig.bcast), and at least one contiguous
 * array. */
int nb_call_contig4_ok(const nb_call *c);
/* Sets c->sig.contig4 (when cuda and nb_call_contig4_ok) and the leaves' bcast flags. */
void nb_call_mark_contig4(nb_call *c, int cuda);
/* Sets the shacc flags (nb_leaf_sig.shacc: per-block shared-memory sums) of c's gradient leaves
 * (bound, materialized, owned flags set): CUDA only, see the flag's rule. */
void nb_call_shared_grads(nb_call *c, int cuda);
int nb_call_strides_one_to_one(int n, const int64_t *shape, const int64_t *strides, int64_t elem_bytes);
/* The bytes [*lo, *hi) leaf b's elements span over c's kernel when its element [0, …] is at data. */
void nb_call_leaf_span(const nb_call *c, const nb_leaf_bind *b, uint64_t data, uint64_t *lo, uint64_t *hi);
/* Whether an integer array of dtype `have` feeding an integer parameter of dtype `param` can hold
 * values outside the parameter's range (a call then checks them value by value when it binds). */
int nb_call_int_narrowed(nb_dtype have, nb_dtype param);
/* Frees the temporaries of a bound call (uploads; allocations unless handed out). */
void nb_call_release_temps(nb_call *c);

/* call.c, for command lists (cmdlist.c): nb_call_record does everything a run does but the
 * launch (bind .. parameter block, results handed out) and keeps c (freed on failure);
 * nb_call_launch_only queues the kernel without waiting (capturable in a CUDA graph);
 * nb_call_after_launch flushes device printf and reads the bounds-check record. */
nb_status nb_call_record(nb_call *c, nb_tensor **results, int max, int *count, const int64_t *grid,
                         nb_kentry **entry);
nb_status nb_call_launch_only(nb_call *c, nb_kentry *e);
nb_status nb_call_after_launch(nb_call *c, nb_kentry *e);

/* Messages: "float add(float a, float b)" of the chosen overload, "f" when unknown. */
const char *nb_call_fname(const nb_call *c);

/* call.c: the NB_ERR_SHAPE error of a filled record r of a launch of f's overload (nleaves
 * parameter leaves, then its result's) with layout L; tail is appended ("" for none). */
nb_status nb_call_oob_error(const nb_oob_rec *r, const nb_call_layout *L, const struct nb_func *f, int overload,
                            int nleaves, const char *tail);

/* defer.c: the record a deferred launch of c with kernel e writes (its device address; 0 with
 * c->defer cleared where the records cannot be made: then the launch is checked at once); the
 * module's check point (returns a pending error, without waiting); nb_defer_settle waits for the
 * deferred launches and keeps their error as a message (before the kernels and reflection it
 * names are freed; caller holds the module lock); nb_defer_free does the same and frees the
 * records (module teardown). */
nb_status nb_defer_slot(nb_call *c, const nb_kentry *e, uint64_t *addr);
nb_status nb_defer_check(nb_module *m);
void nb_defer_settle(nb_module *m);
void nb_defer_free(nb_module *m);

#endif
