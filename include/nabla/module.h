/* nabla — kernel-language modules and vectorized calls (SlangPy's model, from C).
 *
 *   nb_module *m;  nb_func *add;  nb_call *c;  nb_tensor *y;
 *   nb_module_load(dev, "add.nb", NULL, &m);        // parse + check; nothing compiled yet
 *   nb_module_func(m, "add", &add);                 // float add(float a, float b)
 *   nb_call_begin(add, &c);
 *   nb_call_arg(c, 0, a);                           // f32[N] array
 *   nb_call_arg_double(c, 1, 2.0);                  // a scalar: one value for every thread
 *   nb_call_run(c, &y);                             // y = new f32[N] on m's device
 *
 * Binding rules (DESIGN.md, "Calling a function over arrays"):
 *   - call rank of an argument = its rank - the parameter's value rank: an f32[N,3] array feeding a
 *     float3 parameter has call shape [N]; a float3x4 parameter needs an array ending in [3,4].
 *   - the kernel shape is the NumPy-style broadcast (right-aligned, equal or 1) of all call
 *     shapes; the kernel runs f once per index of it. Mismatches are NB_ERR_SHAPE naming both
 *     arguments and their shapes.
 *   - nb_call_map places an argument's call dims at chosen kernel dims (SlangPy's .map):
 *     outer product a.map(0), b.map(1) -> kernel shape [len(a), len(b)]; transposes.
 *   - the result is a new array of shape kernel shape + the return type's value shape (float3 ->
 *     [..., 3]) and the return type's dtype, unless nb_call_result gives an existing one.
 *   - out / inout parameters need tensors (written in place) whose call shape equals the kernel
 *     shape, or nb_call_arg_alloc for an out parameter the call should allocate.
 *   - struct parameters are bound field by field: nb_call_arg_named(c, "s.pos", t) (and
 *     nb_call_arg_value_named for host values); each field may be an array or a single value.
 *   - Tensor<T,N> parameters take a whole tensor of rank N and dtype T (no broadcasting).
 *   - a parameter with a default value (`float f(float x, float s = 2.0)`) may be left unbound:
 *     every thread then gets the default. Defaults are evaluated on the host when the function is
 *     reflected (constant scalars, vectors, matrices, arrays: literals, constants, constructors);
 *     a default the host cannot evaluate (a struct value, a function call) must be bound.
 *   - a struct result is returned field by field: nb_call_run_results gives one array per field
 *     ("_result.pos", "_result.scale", in nb_func_result_leaf order); nb_call_result_named
 *     writes one field into an existing array.
 *
 * Dtypes: the kernel reads an array in its own dtype and converts to the parameter's type, so an
 * f64 or i32 array feeds a float parameter. Conversions that lose meaning are NB_ERR_DTYPE:
 * float data for an int/uint parameter, bool for a number or a number for a bool, and for
 * out/inout arrays any change of category (float/int/bool). Host values (nb_call_arg_value) are
 * converted on the host under the same rules.
 *
 * Host values: a value whose rank equals the parameter's value rank is passed inline to every
 * thread (a "uniform": no upload); a larger one is uploaded to the module's device for the call.
 *
 * Aliasing: an out/inout array may be the same array as an input (x = f(x) elementwise: each
 * index reads its inputs before it writes, and no other index touches that element). Any other
 * overlap between an output and an input gives unspecified results.
 *
 * Execution: on the CPU a call runs on the thread pool (small calls inline) and has finished when
 * nb_call_run returns. On CUDA it is queued on the device's main stream (asynchronous, like every
 * nabla operation); reading a result back (nb_tensor_to_host) waits for it.
 *
 * Kernels are compiled once per signature — the argument dtypes and ranks and how each is bound,
 * never the extents — so a new batch size reuses the compiled kernel. Compiled code is cached on
 * disk as well (see `nabla cache`).
 *
 * Threads: a module and its functions may be used from several threads; one nb_call belongs to
 * one thread. nb_module_set_constant must not run while calls on the same module are running.
 *
 * DiffTensor<T,N> parameters also take a gradient array (nb_call_grad / nb_call_tangent, in any
 * mode; docs/AUTODIFF.md "DiffTensor gradients").
 *
 * Not yet: Tensor<vector,N>, arrays of structs as parameters or results of a vectorized call
 * (NB_ERR_UNSUPPORTED; pass the fields as separate parameters).
 */
#ifndef NABLA_MODULE_H
#define NABLA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_module nb_module;
typedef struct nb_func nb_func;
typedef struct nb_call nb_call;

/* ---- modules --------------------------------------------------------------------------------- */

typedef struct nb_module_options {
    const char *const *include_dirs; /* searched by `import` and `#include` after the file's own
                                        directory */
    int ninclude_dirs;
    int max_errors;                  /* diagnostics to collect before stopping; 0 = 50 */
    int no_disk_cache;               /* compile privately; do not read or write the disk cache */
    int unchecked;                   /* no bounds checks on tensor and local-array indices: for
                                        benchmarks only (an index out of range is then undefined
                                        behaviour); docs/LANGUAGE.md "Bounds checks" */
    const char *const *defines;      /* preprocessor macros for every file of the module and its
                                        imports: "NAME=VALUE", or "NAME" (defined empty, as
                                        Slang's -DNAME); like `nabla ... -D NAME=VALUE`. They
                                        change the generated code, and so the kernel-cache key */
    int ndefines;
    const char *const *conformances; /* Slang's type conformance ids, "TYPE:INTERFACE=ID" (like
                                        `nabla ... --conformance A:IFoo=0`): which conforming
                                        type `createDynamicObject<INTERFACE>(ID, data)` makes.
                                        Without any for an interface, its conforming structs
                                        get 0, 1, … in declaration order */
    int nconformances;
} nb_module_options;

/* Parses and checks `path` and its imports. dev is where calls run; it may be NULL for a module
 * that is only checked or dumped (calls then fail with NB_ERR_NO_DEVICE). Compile errors:
 * NB_ERR_COMPILE with every diagnostic (file:line:col: error: …, source line, caret) in
 * nb_last_error(). opts may be NULL. */
nb_status nb_module_load(nb_device *dev, const char *path, const nb_module_options *opts,
                         nb_module **out);
/* The same from a string; `name` is the file name used in diagnostics ("inline.nb"). */
nb_status nb_module_load_source(nb_device *dev, const char *name, const char *source,
                                const nb_module_options *opts, nb_module **out);
void nb_module_free(nb_module *m);
nb_device *nb_module_device(const nb_module *m);

/* Sets a link-time constant (`extern static const int N = 4;`) for the following calls. Unknown
 * names are NB_ERR_NOT_FOUND. Kernels compiled before are recompiled on their next call. */
nb_status nb_module_set_constant(nb_module *m, const char *name, double value);

typedef enum nb_dump_format {
    NB_DUMP_C = 0,    /* the C the CPU path compiles */
    NB_DUMP_CUDA = 1, /* the CUDA C NVRTC compiles */
    NB_DUMP_IR = 2,   /* the compiler's IR, as text */
    NB_DUMP_HOST = 3, /* the host unit: [TorchEntryPoint] host functions as C for the host CPU
                         (whole module; entry and mode are ignored) */
} nb_dump_format;

typedef enum nb_diff_mode {
    NB_MODE_PRIMAL = 0,
    NB_MODE_FWD = 1, /* forward-mode derivative code */
    NB_MODE_BWD = 2, /* reverse-mode derivative code */
} nb_diff_mode;

/* Readable generated code of the whole module, or of `entry` (NULL = all) and what it calls.
 * *text is NUL-terminated; free it with nb_module_free_text. */
nb_status nb_module_dump(nb_module *m, nb_dump_format format, const char *entry, nb_diff_mode mode,
                         char **text);
void nb_module_free_text(char *text);
/* The compiler's warnings for a module that loaded (file:line:col: warning: …, source line,
 * caret), or NULL when there are none. Free with nb_module_free_text. */
char *nb_module_warnings(const nb_module *m);

/* ---- functions and reflection ---------------------------------------------------------------- */

/* The module's callable functions (its own, not its imports'; generic ones left out), in
 * declaration order, one name per overloaded function: names[i] for i < min(count, max) lives as
 * long as the module; returns the count. */
int nb_module_function_names(nb_module *m, const char **names, int max);

/* The function `name` (all its overloads; the call picks one by its arguments). The handle lives
 * as long as the module. NB_ERR_NOT_FOUND lists the module's functions. */
nb_status nb_module_func(nb_module *m, const char *name, nb_func **out);

typedef enum nb_arg_dir { NB_ARG_IN = 0, NB_ARG_OUT = 1, NB_ARG_INOUT = 2 } nb_arg_dir;

/* One bindable piece of a parameter: the parameter itself, or one field of a struct parameter
 * ("s.pos"), or the result ("_result"). */
typedef struct nb_leaf_info {
    const char *path;        /* "x", "s.pos", "_result" */
    int param;               /* parameter index; -1 for the result */
    nb_arg_dir dir;
    int is_tensor;           /* a Tensor<T,N> parameter: takes a whole array */
    int tensor_rank;         /* N of Tensor<T,N>; 0 for a host function's TorchTensor<T> (any rank) */
    int is_diff_tensor;      /* DiffTensor<T,N>: also takes a gradient array (nb_call_grad) */
    nb_dtype dtype;          /* scalar type: float -> NB_F32, int -> NB_I32, bool -> NB_BOOL, … */
    int value_rank;          /* float -> 0, float3 -> 1, float3x4 -> 2, float[4] -> 1 */
    int64_t value_shape[8];  /* float3x4 -> [3,4] */
    int differentiable;      /* takes part in derivatives: float-based and not no_diff (a gradient
                                of a [Differentiable] function's parameter exists for it) */
} nb_leaf_info;

int nb_func_overload_count(const nb_func *f);
const char *nb_func_name(const nb_func *f);
/* Reflection of one overload (0-based; 0 if the function is not overloaded). Out-of-range
 * overloads/indices give 0 / NULL / NB_ERR_INVALID_ARG. */
const char *nb_func_signature(const nb_func *f, int overload); /* "float add(float a, float b)" */
int nb_func_param_count(const nb_func *f, int overload);
const char *nb_func_param_name(const nb_func *f, int overload, int param);
nb_arg_dir nb_func_param_dir(const nb_func *f, int overload, int param);
/* 1 when the parameter has a default value and may be left unbound. */
int nb_func_param_has_default(const nb_func *f, int overload, int param);
int nb_func_is_kernel(const nb_func *f, int overload); /* [Kernel]: nb_call_run_grid */
/* 1 for a [Differentiable] function (its reverse mode: nb_call_set_mode(c, NB_MODE_BWD)). */
int nb_func_is_differentiable(const nb_func *f, int overload);
/* The module the function belongs to (NULL for NULL). */
nb_module *nb_func_module(const nb_func *f);
/* Where the module came from: the path given to nb_module_load, or the name given to
 * nb_module_load_source (then nb_module_source is its text, else NULL). For code that generates
 * modules importing or containing it (compiled graphs inline user functions). */
const char *nb_module_path(const nb_module *m);
const char *nb_module_source(const nb_module *m);
/* [numthreads(x,y,z)] entry points: 1 and out = {x, y, z} (the thread group; a grid given to
 * nb_call_run_grid counts threads and must be a multiple of it), else 0. */
int nb_func_numthreads(const nb_func *f, int overload, int out[3]);
/* Host functions (slang-torch's [TorchEntryPoint]): run on the host CPU, allocate tensors and
 * launch the module's kernels; called with nb_host_call, not nb_call_*. */
int nb_func_is_host(const nb_func *f, int overload);
/* Struct-valued parameter nodes of an overload, depth-first: a struct parameter or field ("foo",
 * "mlp.layers[1]") or an array of structs ("mlp.layers"), with its type as written ("Foo",
 * "Linear<16>[3]", "Linear<16>"); their fields are the leaves (and nodes) below the path. For
 * hosts that build struct values (slangtorch's m.Foo namedtuples). */
int nb_func_struct_count(const nb_func *f, int overload);
nb_status nb_func_struct_node(const nb_func *f, int overload, int i, const char **path, const char **type_name);
/* Leaves of all parameters in order (struct fields depth-first; an array of structs element by
 * element: "mlp.layers[0].weights", "mlp.layers[0].bias", "mlp.layers[1].weights", …). */
int nb_func_leaf_count(const nb_func *f, int overload);
nb_status nb_func_leaf(const nb_func *f, int overload, int leaf, nb_leaf_info *out);
/* The result's leaf; 0 for a void function, else 1 and *out filled (for a struct result
 * value_rank is -1: its fields are the result leaves below). */
int nb_func_result(const nb_func *f, int overload, nb_leaf_info *out);
/* Leaves of the result: 0 for void (or a result that cannot be bound), 1 for a non-struct result
 * ("_result"), one per field of a struct result, depth-first ("_result.pos", "_result.t.x"). */
int nb_func_result_count(const nb_func *f, int overload);
nb_status nb_func_result_leaf(const nb_func *f, int overload, int leaf, nb_leaf_info *out);
/* The leaves of the module's struct type `type_name` (SlangPy's `module.MyStruct` as a dtype),
 * as nb_func_leaf gives them for a parameter of that type: fields depth-first, paths "x", "pos",
 * "t.x" (param 0). Up to max are written to out (paths live as long as the module); *count gets
 * the total. An unknown name: NB_ERR_NOT_FOUND listing the module's structs; a field that cannot
 * be bound (an array of structs): NB_ERR_UNSUPPORTED. */
nb_status nb_module_type_leaves(nb_module *m, const char *type_name, nb_leaf_info *out, int max, int *count);

/* ---- calls ----------------------------------------------------------------------------------- */

/* Starts a call. Setters return an error at once where they can tell (bad index, NULL tensor);
 * the first error also sticks to the call and nb_call_run reports it again, so a sequence of
 * setters may be checked once at the end. Names and host data given to setters are borrowed:
 * they must stay valid until nb_call_run / nb_call_free. */
nb_status nb_call_begin(nb_func *f, nb_call **out);

/* Argument `index` (0-based parameter position) is the array t. */
nb_status nb_call_arg(nb_call *c, int index, nb_tensor *t);
/* By name: a parameter name ("x"), or a struct field path ("s.pos") to bind one field. */
nb_status nb_call_arg_named(nb_call *c, const char *name, nb_tensor *t);
/* Host values: ndim dims of shape, dtype's elements in C order at data. */
nb_status nb_call_arg_value(nb_call *c, int index, nb_dtype dtype, int ndim, const int64_t *shape,
                            const void *data);
nb_status nb_call_arg_value_named(nb_call *c, const char *name, nb_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data);
/* A scalar for every thread (value rank 0). */
nb_status nb_call_arg_double(nb_call *c, int index, double v);
nb_status nb_call_arg_int(nb_call *c, int index, int64_t v);
/* An out parameter the call allocates (kernel shape + value shape, the parameter's dtype, on the
 * module's device); *slot receives it when nb_call_run succeeds (NULL otherwise). */
nb_status nb_call_arg_alloc(nb_call *c, int index, nb_tensor **slot);
/* By name: an out parameter or one field of a struct out parameter ("s.pos"). */
nb_status nb_call_arg_alloc_named(nb_call *c, const char *name, nb_tensor **slot);

/* ---- generators (SlangPy's call_id / thread_id / grid / wang_hash / rand_float) -----------
 * A generator argument computes its value in the kernel, per kernel index, instead of reading
 * it from memory. nb_generator_init(&g, kind) sets the defaults below; then change fields.
 *   NB_GEN_CALL_ID    the kernel index. An int/uint parameter of the kernel's rank K: a vector
 *                     intK gets x = the LAST (fastest) dim, y the one before, …; an array int[K]
 *                     gets the dims in order; a scalar needs K == 1; a vector of K+1 components
 *                     gets a zero last component. Adds no dims to the kernel (another argument or
 *                     the result array must give the shape).
 *   NB_GEN_GRID       offset[i] + index[i] * stride[i] over its own call shape `shape` (ndim =
 *                     dims): it broadcasts like an array of that shape (-1: 1, i.e. taken from
 *                     the other arguments); components as for CALL_ID with K = dims.
 *   NB_GEN_THREAD_ID  the linear kernel index (row-major) as x, 0 for y, z: int/uint scalar or
 *                     vector of 1..3 components. Adds no dims.
 *   NB_GEN_WANG_HASH  SlangPy's hash of the thread index: h = tid * n (n = components, 1 for a
 *                     scalar), `warmup` times h = wang(h), h ^= seed, then each component h =
 *                     wang(h). int/uint scalar or vector of 1..3. seed is hashed once on the host
 *                     first when hash_seed is set (SlangPy's default).
 *   NB_GEN_RAND_FLOAT the same hashes as floats in [min, max): min + (max-min) * (h & 0x7fffff)
 *                     / 2^23; float/double scalar or vector of 1..3.
 * dims (all but GRID) = -1: any size the parameter has; else it must be the parameter's size.
 * A parameter type a generator cannot fill (a float for call_id, a struct, an out parameter) is
 * NB_ERR_INVALID_ARG naming the parameter, its type and the generator. */
typedef enum nb_generator_kind {
    NB_GEN_CALL_ID = 1,
    NB_GEN_THREAD_ID = 2,
    NB_GEN_GRID = 3,
    NB_GEN_WANG_HASH = 4,
    NB_GEN_RAND_FLOAT = 5,
} nb_generator_kind;

typedef struct nb_generator {
    nb_generator_kind kind;
    int dims;              /* -1: from the parameter's type; GRID: the number of grid dims (<= 8) */
    int64_t shape[8];      /* GRID: extents (-1: inferred from the other arguments) */
    int64_t offset[8];     /* GRID: default 0 */
    int64_t stride[8];     /* GRID: default 1 */
    uint32_t seed;         /* WANG_HASH, RAND_FLOAT: default 2640457667 */
    int hash_seed;         /* hash the seed on the host first (default 1) */
    int warmup;            /* extra hash rounds of the thread index (default 0) */
    float min, max;        /* RAND_FLOAT: default 0, 1 */
} nb_generator;

void nb_generator_init(nb_generator *g, nb_generator_kind kind);
/* SlangPy's 32-bit wang hash (the one generators use). */
uint32_t nb_wang_hash(uint32_t x);
/* Argument `index` (or the parameter / field `name`) is generated. g is copied. */
nb_status nb_call_arg_generator(nb_call *c, int index, const nb_generator *g);
nb_status nb_call_arg_generator_named(nb_call *c, const char *name, const nb_generator *g);

/* Maps argument `index`'s call dims to kernel dims: call dim i goes to kernel dim dims[i]
 * (distinct, 0..7). ndims must equal the argument's call rank. */
nb_status nb_call_map(nb_call *c, int index, int ndims, const int *dims);
nb_status nb_call_map_named(nb_call *c, const char *name, int ndims, const int *dims);

/* Writes the result into `into` (SlangPy's _result=): its shape must be kernel shape + the
 * return type's value shape; its dtype of the return type's category; same device. */
nb_status nb_call_result(nb_call *c, nb_tensor *into);
/* The same for one field of a struct result: path "_result.pos" (or "_result" = nb_call_result).
 * Fields not given are allocated (and handed out by nb_call_run_results). */
nb_status nb_call_result_named(nb_call *c, const char *path, nb_tensor *into);
/* *overload receives the 0-based overload the call bound when nb_call_run / nb_call_run_grid /
 * nb_call_run_results succeeds (-1 before and on failure); for callers that bind generically
 * and must interpret the outputs (the CLI). */
nb_status nb_call_report_overload(nb_call *c, int *overload);

/* Binds, compiles if needed, and launches. *result (may be NULL when no result is wanted) gets
 * the new result array, or a new handle on `into`, or NULL for a void function. A struct result
 * needs nb_call_run_results (NB_ERR_UNSUPPORTED here when *result is wanted). Frees c, also on
 * failure. */
nb_status nb_call_run(nb_call *c, nb_tensor **result);
/* Runs like nb_call_run and gives one array per result leaf (nb_func_result_leaf order of the
 * bound overload; a non-struct result is one leaf): results[i] is new (allocated, or a new handle
 * on the array given with nb_call_result_named), free each with nb_tensor_free. *count gets the
 * number of leaves (0 for void); more than max is NB_ERR_INVALID_ARG (nothing runs). Frees c. */
nb_status nb_call_run_results(nb_call *c, nb_tensor **results, int max, int *count);
/* For [Kernel] functions: runs grid[0]*grid[1]*grid[2] threads, grid = {x, y, z}; the function
 * reads its index with dispatch_id() (x fastest). Arguments are single values and Tensor<T,N>
 * arrays. Frees c. */
nb_status nb_call_run_grid(nb_call *c, const int64_t grid[3]);
/* For [Kernel] / [CudaKernel] functions, slang-torch's launchRaw(blockSize=block, gridSize=grid):
 * grid[0]*grid[1]*grid[2] blocks of block[0]*block[1]*block[2] threads, {x, y, z} with x fastest.
 * In the kernel cudaThreadIdx(), cudaBlockIdx(), cudaBlockDim() and cudaGridDim() are the real
 * values and dispatch_id() = blockIdx * blockDim + threadIdx. CUDA: a <<<grid, block>>> launch.
 * CPU: the same program, blocks spread over the thread pool; a block's threads run as one group
 * (fibers) when the kernel uses barriers, groupshared memory or Wave* operations (a warp is 32
 * consecutive threads of the block, x fastest), so barriers and groupshared memory behave as on a
 * GPU. Limits (CUDA's, on every device): block x, y <= 1024, z <= 64, at most 1024 threads;
 * grid x < 2^31, y, z <= 65535; every size >= 1 (NB_ERR_INVALID_ARG naming the size). A
 * [numthreads(x,y,z)] function needs block == {x, y, z}. With nb_call_set_mode(c, NB_MODE_BWD /
 * NB_MODE_FWD) this launches the kernel's derivative (slangtorch's f.bwd / f.fwd): give each
 * DiffTensor parameter its gradient array (nb_call_grad / nb_call_grad_named); reverse mode adds
 * the loads' derivatives into them (atomically) and reads the stores' gradients from them (a
 * store consumes its element: zeroed; storeOnce leaves it), forward mode reads the tangents of
 * loads from them and writes the stores' tangents into them.
 * Value parameters get no derivative (slang-torch passes none). Frees c. */
nb_status nb_call_run_blocks(nb_call *c, const int64_t block[3], const int64_t grid[3]);

/* Bounds-check errors, reported now or later. Every tensor / array index of a checked kernel is
 * checked; by default a call returns the error of its launch's first out-of-range index
 * (NB_ERR_SHAPE naming the tensor, index and shape), which on CUDA costs a wait for the launch
 * to finish. After nb_call_defer_checks(c) the call returns once the kernel is queued, and its
 * out-of-range index is reported like CUDA's own asynchronous errors: by the module's next check
 * point, with " (launch #N of this module, reported late)" naming the launch (the module counts
 * its deferred launches from 1). Check points: the start of every later call or launch of any
 * function of the module (its own arguments are not bound then: the call fails with that error),
 * nb_module_check, and the device's sync points, where nabla waits for the device on the caller's
 * behalf: nb_device_synchronize, nb_tensor_to_host, and copies into host memory (nb_tensor_copy
 * into a CPU tensor, nb_tensor_to the CPU) of any tensor of the device. One error is reported
 * once; an error still pending when the module is freed is handed to its device and returned by
 * the device's next sync point (" (module 'NAME' was freed before this was reported)"); one still
 * pending when the device closes is printed to stderr. slangtorch's launchRaw defers on CUDA (Python: docs/PYTHON.md).
 * Works on every device (on the CPU the launch has finished when the call returns, so the error
 * is known at once, but is still reported at the next check point). Calls recorded into a command
 * list (nb_cmdlist) keep the immediate check. */
nb_status nb_call_defer_checks(nb_call *c);
/* Launches the call's kernel on stream s of the module's device (NULL: the device's stream, the
 * default) — e.g. torch's current stream (nb_stream_wrap_native), so that torch's tensors need no
 * ordering between streams. The caller orders the arrays it binds with s. What nabla itself queues
 * for the call (uploaded host values, allocated outputs) goes on the device's stream: s waits for
 * it before the launch, and the device's stream waits for the launch after it (so also before an
 * immediate bounds check reads the record). The CPU ignores s. */
nb_status nb_call_set_stream(nb_call *c, nb_stream *s);
/* Waits for the module's device, then returns the pending error of a deferred launch, if any
 * (cleared: reported once). */
nb_status nb_module_check(nb_module *m);
/* Abandons a call without running it. */
void nb_call_free(nb_call *c);

/* One-line form: f(args[0], …, args[n-1]) with every argument an array. */
nb_status nb_func_call(nb_func *f, int nargs, nb_tensor *const *args, nb_tensor **result);

/* ---- prepared calls: bind once, relaunch over other arrays (capturable in a CUDA graph) ----
 *   nb_call_begin(silu, &c); nb_call_arg(c, 0, x); nb_call_result(c, y);
 *   nb_prepared *p;  int xs, ys;
 *   nb_call_prepare(c, &p);                       // binds, checks, compiles: everything but the launch
 *   nb_prepared_slot(p, "x", &xs);  nb_prepared_slot(p, "_result", &ys);
 *   nb_prepared_launch(p, NULL);                  // y = silu(x)
 *   nb_prepared_set_arg(p, xs, x2);               // another array of x's dtype, shape and strides
 *   nb_prepared_set_ptr(p, ys, y2_data);          // or a raw address, laid out as y was
 *   nb_prepared_launch(p, stream);                // y2 = silu(x2)
 *   nb_prepared_free(p);
 * nb_call_prepare does what nb_call_run(c, NULL) does except the launch: the overload, the kernel
 * shape, dtypes and the kernel (compiled now) are fixed; host values are uploaded and out
 * parameters given with nb_call_arg_alloc allocated (handed out now; they stay the caller's).
 * The result is computed only when bound with nb_call_result. A launch then only patches the
 * pointers set since the last one into the parameter block and queues the kernel: no allocation,
 * hashing, lock, host synchronisation or host-mapped memory, so it may be captured into a CUDA
 * graph (nb_device_graph_*; the graph keeps the pointers it was captured with).
 * Slots: the leaves of the bound function (nb_func_leaf order, then the result's leaves): a
 * parameter or field path ("x", "s.pos"), "_result" / "_result.pos"; in NB_MODE_BWD the gradient
 * arrays are the wrapper's parameters "<param>_grad" and "_dout" (nb_func_signature of
 * "f__bwds" lists them).
 * Shapes are fixed at prepare time: every array set later must have the dtype, shape and strides
 * of the one bound then (nb_prepared_set_arg checks: NB_ERR_DTYPE / NB_ERR_SHAPE / NB_ERR_DEVICE
 * naming the slot; nb_prepared_set_ptr trusts the caller for them). Both check what the kernel
 * was specialised for: the address alignment of vectorized arrays (NB_ERR_INVALID_ARG naming the
 * alignment) and, where gradients are added without atomics, that no other written array
 * overlaps them differently. Integer arrays narrowed to a smaller parameter type (range-checked
 * by a call when bound) cannot be set: NB_ERR_UNSUPPORTED.
 * Bounds checks (kernels that index Tensor parameters or local arrays): because every shape was
 * validated at prepare time, nothing is read back per launch. On the CPU a launch returns its
 * first out-of-range index as NB_ERR_SHAPE at once (the kernel has finished); on CUDA the
 * prepared call's own device record keeps the first one, and nb_prepared_check waits for the
 * device and reports it (once). Device printf output appears at the next synchronisation.
 * Not for [Kernel] grids or explicit blocks, nor a deferred-check call (NB_ERR_UNSUPPORTED).
 * A prepared call belongs to one thread; nb_module_set_constant makes it stale (launch:
 * NB_ERR_INVALID_ARG, prepare again). Free it before its module. */
typedef struct nb_prepared nb_prepared;
/* Takes c (freed on failure; *out NULL). */
nb_status nb_call_prepare(nb_call *c, nb_prepared **out);
/* The slot of leaf `path` (NB_ERR_NOT_FOUND listing the slots), or of positional parameter
 * `index` (a struct parameter has one slot per field: name it). */
nb_status nb_prepared_slot(const nb_prepared *p, const char *path, int *slot);
nb_status nb_prepared_param_slot(const nb_prepared *p, int index, int *slot);
/* The next launches read / write t (checked as above; t is borrowed: keep it alive while
 * launches that use it may run). */
nb_status nb_prepared_set_arg(nb_prepared *p, int slot, nb_tensor *t);
/* The same with the device address of element [0, …] of an array laid out as the one bound. */
nb_status nb_prepared_set_ptr(nb_prepared *p, int slot, void *data);
/* A scalar parameter bound as a single value (a uniform) gets v for the next launches (converted
 * like nb_call_arg_double; an int parameter needs a whole number in its range: NB_ERR_DTYPE). */
nb_status nb_prepared_set_double(nb_prepared *p, int slot, double v);
/* Queues the kernel on stream s of the module's device (NULL: the device's stream). */
nb_status nb_prepared_launch(nb_prepared *p, nb_stream *s);
/* CUDA: waits for the device and returns the first out-of-range index a launch recorded since
 * the last check (cleared). The CPU: NB_OK (launches report at once). */
nb_status nb_prepared_check(nb_prepared *p);
/* The kernel's index count (the product of the kernel shape). */
int64_t nb_prepared_size(const nb_prepared *p);
/* Waits for the device where the call owns memory a launch may use, then frees it. */
void nb_prepared_free(nb_prepared *p);

/* ---- host functions ([TorchEntryPoint]; docs/LANGUAGE.md "slang-torch host code") -------------
 *   [TorchEntryPoint] TorchTensor<float> square_fwd(TorchTensor<float> input) { … alloc,
 *   __dispatch_kernel(square_fwd_kernel, uint3(1), uint3(n, m, 1))(input, result); … }
 * runs on the host CPU for a module on any device (compiled to C once per module), allocating its
 * tensors on the module's device and launching the module's kernels there, in order, on the
 * device's main stream (asynchronous on CUDA, like every call).
 *
 * Arguments and results are leaves (nb_func_leaf / nb_func_result_leaf order: struct fields
 * depth-first, arrays of structs or TorchTensors element by element: "inputs.input", "_result.v0",
 * "ts[1]"): a TorchTensor<T> leaf is a tensor (is_tensor, tensor_rank 0: any rank) of dtype T on
 * the module's device -- for TorchTensor<float3> (value_rank 1, value_shape [3]) one whose last
 * dimension is 3, as slang-torch lays it out; a scalar leaf is a number; a vector, matrix or array
 * leaf (float3, int2, float2x2, float[4]: value_rank > 0) is prod(value_shape) numbers in C order. */
typedef struct nb_host_value {
    nb_tensor *tensor; /* TorchTensor leaves (borrowed in args; new in results: nb_host_results_free) */
    double number;     /* scalar leaves (converted to the leaf's type; ints must be whole) */
    double *values;    /* vector / matrix / array leaves: count numbers (args: read, borrowed;
                          results: new, nb_host_results_free) */
    int64_t count;
} nb_host_value;
/* Runs host function f (the overload with nargs parameter leaves) with args[0 .. nargs); the
 * result leaves go to results[0 .. *count) (max slots; a void function gives 0). A result that
 * is an argument tensor comes back as a new handle on it. Errors: NB_ERR_INVALID_ARG for the
 * wrong number of arguments or a tensor given for a number or vice versa, NB_ERR_DTYPE for a
 * tensor of another dtype or a fraction for an integer, NB_ERR_SHAPE for a vector / array of
 * another length or a TorchTensor<float3> whose last dimension is not 3, NB_ERR_DEVICE for a
 * tensor on another device, and what a TorchTensor operation or a launch reports (named by the
 * host function and the kernel); nothing it allocated survives a failure. */
nb_status nb_host_call(nb_func *f, int nargs, const nb_host_value *args, nb_host_value *results, int max,
                       int *count);
/* Frees the tensors and number arrays of results[0 .. n) and zeroes them. */
void nb_host_results_free(nb_host_value *results, int n);

/* ---- derivatives over arrays (docs/AUTODIFF.md) --------------------------------------------
 * A function marked [Differentiable] can be called in forward or reverse mode over arrays (the
 * SlangPy `.fwds` / `.bwds`). Set the mode right after nb_call_begin, then bind the arguments as
 * usual plus:
 *   NB_MODE_FWD  nb_call_tangent(c, i, t): the tangent of differentiable parameter i (default 0;
 *                broadcast like any input); nb_call_tangent(c, -1, t) / nb_call_tangent_alloc:
 *                the result's tangent (an output of the result's shape). nb_call_run gives the
 *                result as usual.
 *   NB_MODE_BWD  nb_call_grad(c, i, g): dL/d(parameter i) is ADDED into g (as in PyTorch: zero
 *                it yourself); g is an f32/f64 array of parameter i's argument shape and may be
 *                broadcast (a weight shared by every thread: its gradient is summed per thread,
 *                per block, then one atomic per block on CUDA; per chunk on the CPU); gradients
 *                not asked for are not computed. nb_call_dout(c, t): the gradient of the result
 *                (default 1). Out parameters of f take no argument (positional indices after one
 *                shift down); an out parameter's gradient dL/d(out) is an input given with
 *                nb_call_grad (default 1). Asking for the result (nb_call_run(c, &y) with a slot,
 *                or nb_call_result) runs ONE fused kernel computing f's result and the
 *                gradients (for dL/dR known before the forward pass); nb_call_run(c, NULL)
 *                computes the gradients only.
 *   any mode     nb_call_grad / nb_call_tangent on a DiffTensor parameter bind its gradient array.
 * The calls are ordinary calls of the generated functions "f__fwds" / "f__bwds" / "f__bwdr"
 * (nb_module_func gives them too; nb_func_signature shows their parameters). */
nb_status nb_call_set_mode(nb_call *c, nb_diff_mode mode);
nb_status nb_call_grad(nb_call *c, int index, nb_tensor *grad);
nb_status nb_call_dout(nb_call *c, nb_tensor *dout);
/* The gradient array of the DiffTensor leaf `path` (a parameter "x", a struct field "foo.A", an
 * element of an array of structs "mlp.layers[1].weights"), in any mode; other leaves: as
 * nb_call_grad of their parameter. Unknown paths are NB_ERR_NOT_FOUND. */
nb_status nb_call_grad_named(nb_call *c, const char *path, nb_tensor *grad);
nb_status nb_call_tangent(nb_call *c, int index, nb_tensor *tangent);
nb_status nb_call_tangent_alloc(nb_call *c, nb_tensor **slot);

#ifdef __cplusplus
}
#endif
#endif
