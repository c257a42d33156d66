/* Call kernels (callsig.h) and compiler.h's code-generation entry points.
 *
 * For a signature the generated source holds the program's functions (emit_c.h), then
 *   typedef struct nb_params_ENTRY { … } nb_params_ENTRY;   laid out exactly as nb_call_layout
 *   nb_body_ENTRY(P, idx)   one kernel index: load leaves, call, store result / out leaves
 *   ENTRY                   CPU: void ENTRY(const void *params, int64_t begin, int64_t end)
 *                                runs linear indices [begin, end) with an incrementally
 *                                unravelled index (no division per element);
 *                           CUDA: extern "C" __global__ void ENTRY(nb_params_ENTRY params):
 *                                grid-stride loop over numel = prod(shape), with a 32-bit index
 *                                path when numel < 2^31 (cheap unravel) and a 64-bit one otherwise.
 * [Kernel] functions use the same entry points; the kernel "shape" is the grid. They receive
 * nb_thread_ids: dispatch_id = the grid index with x = last (fastest) dimension, y, z the ones
 * before it; without [numthreads] thread_idx = dispatch_id, block_idx = 0, block_dim = 1 on both
 * targets (so blockDim * blockIdx + threadIdx, slang-torch's global index, is the dispatch id).
 * Launched with explicit blocks (sig.blocks, slangtorch's launchRaw) the ids are the real ones:
 * CUDA launches <<<grid, block>>> (ENTRY takes nothing but the block); the CPU entry runs blocks
 * [begin, end) and each block's threads, as fibers when the kernel uses barriers, groupshared
 * memory or Wave* operations (emit_group.c), else one after the other.
 */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "lang/ad.h"
#include "lang/emit_c.h"
#include "lang/intrinsics.h"
#include "lang/ir.h"
#include "lang/lower_scope.h"
#include "lang/program.h"
#include "nabla/alloc.h"

#define APPEND(sb, ...) nb_strbuf_printf((sb), __VA_ARGS__)

/* ---- the lowered-IR cache on the program ------------------------------------------------- */

typedef struct ir_cache {
    nb_ir_module m;
    nb_lower_faults faults; /* functions whose bodies could not be lowered (lower_scope.h) */
} ir_cache;

static void ir_cache_free(void *p)
{
    ir_cache *c = p;
    if (!c) return;
    nb_lower_faults_free(&c->faults);
    nb_ir_module_free(&c->m);
    nb_free(c, sizeof *c);
}

static nb_status get_ir(nb_program *p, nb_ir_module **out)
{
    if (p->ir && p->ir_free == ir_cache_free) {
        *out = &((ir_cache *)p->ir)->m;
        return NB_OK;
    }
    if (p->ir && p->ir_free) p->ir_free(p->ir);
    p->ir = NULL;
    ir_cache *c = nb_calloc(sizeof *c, sizeof(void *));
    if (!c) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory lowering the program");
    nb_ir_module_init(&c->m, &p->types);
    int ndiags0 = p->src.ndiags, nerrors0 = p->src.nerrors;
    nb_status s = nb_ir_lower_program(p, &c->m);
    if (s == NB_ERR_COMPILE && p->src.nerrors > nerrors0) {
        /* Some function bodies use what the IR cannot lower yet: keep the rest callable; an
         * entry that reaches a broken function reports its diagnostics (nb_lower_faults_check). */
        s = nb_lower_faults_collect(p, ndiags0, nerrors0, &c->faults);
        if (s == NB_OK && c->faults.global)
            s = nb_error(NB_ERR_COMPILE, "%s", c->faults.all ? c->faults.all : "lowering failed");
        if (s == NB_OK && c->faults.n == 0) s = nb_error(NB_ERR_INTERNAL, "lowering failed without diagnostics");
    }
    if (s != NB_OK) {
        if (s == NB_ERR_COMPILE) { /* nb_error's message ends without the renderer's newline */
            char *m = (char *)nb_last_error();
            size_t n = strlen(m);
            while (n && m[n - 1] == '\n') m[--n] = '\0';
        }
        ir_cache_free(c);
        return s;
    }
    nb_strbuf errs;
    nb_strbuf_init(&errs);
    if (c->faults.n) {
        /* verify and optimize the functions that lowered cleanly */
        int bad = 0;
        for (int i = 0; i < c->m.nfuncs; i++) {
            nb_ir_func *f = c->m.funcs[i];
            if (nb_lower_faults_func_broken(&c->faults, f)) continue;
            bad += nb_ir_verify_func(f, &errs);
            for (int round = 0; !bad && round < 4; round++)
                if (!nb_ir_fold(f) + !nb_ir_dce(f) == 2) break;
            if (!bad) bad += nb_ir_verify_func(f, &errs);
        }
        if (bad) {
            s = nb_error(NB_ERR_INTERNAL, "IR verification failed:\n%s", nb_strbuf_cstr(&errs));
            nb_strbuf_free(&errs);
            ir_cache_free(c);
            return s;
        }
        nb_strbuf_free(&errs);
        p->ir = c;
        p->ir_free = ir_cache_free;
        *out = &c->m;
        return NB_OK;
    }
    if (nb_ir_verify_module(&c->m, &errs)) {
        s = nb_error(NB_ERR_INTERNAL, "IR verification failed after lowering:\n%s", nb_strbuf_cstr(&errs));
        nb_strbuf_free(&errs);
        ir_cache_free(c);
        return s;
    }
    nb_ir_optimize_module(&c->m);
    if (nb_ir_verify_module(&c->m, &errs)) {
        s = nb_error(NB_ERR_INTERNAL, "IR verification failed after optimization:\n%s", nb_strbuf_cstr(&errs));
        nb_strbuf_free(&errs);
        ir_cache_free(c);
        return s;
    }
    nb_strbuf_free(&errs);
    p->ir = c;
    p->ir_free = ir_cache_free;
    *out = &c->m;
    return NB_OK;
}

/* NB_OK when nothing f reaches failed to lower (get_ir kept the module despite broken bodies). */
static nb_status check_scope(nb_program *p, nb_ir_module *m, nb_ir_func *f)
{
    if (!p->ir || p->ir_free != ir_cache_free) return NB_OK;
    return nb_lower_faults_check(&((ir_cache *)p->ir)->faults, m, f);
}

nb_status nb_program_get_ir(nb_program *p, nb_ir_module **out) { return get_ir(p, out); }
nb_status nb_program_ir_scope(nb_program *p, nb_ir_module *m, nb_ir_func *f) { return check_scope(p, m, f); }

/* ---- leaves ------------------------------------------------------------------------------ */

typedef struct leaf {
    int param;             /* index in f->params */
    char path[128];        /* "s.pos" */
    char access[160];      /* C lvalue suffix inside the param value: ".pos" */
    const nb_type *type;   /* leaf value type (or tensor type) */
    int is_tensor;
    int rank;              /* value rank */
    long long shape[8];
    nb_scalar_kind scalar;
} leaf;

typedef struct leaves {
    leaf *items;
    int n, cap;
} leaves;

static int value_shape(const nb_type *t, long long *dims, int *rank, nb_scalar_kind *s)
{
    *rank = 0;
    while (t->kind == NB_TY_ARRAY) {
        if (*rank >= 8) return 0;
        dims[(*rank)++] = t->length;
        t = t->elem;
    }
    if (t->kind == NB_TY_VECTOR) {
        if (*rank >= 8) return 0;
        dims[(*rank)++] = t->cols;
    } else if (t->kind == NB_TY_MATRIX) {
        if (*rank >= 7) return 0;
        dims[(*rank)++] = t->rows;
        dims[(*rank)++] = t->cols;
    } else if (t->kind != NB_TY_SCALAR) {
        return 0;
    }
    *s = t->scalar;
    return 1;
}

static nb_status add_leaves(nb_emitter *e, leaves *L, int param, const nb_type *t, const char *path,
                            const char *access)
{
    if (t->kind == NB_TY_STRUCT && t->decl) {
        nb_decl *d = t->decl;
        for (int i = 0; i < d->u.strct.nfields; i++) {
            nb_decl *fd = d->u.strct.fields[i];
            char p2[128], a2[160];
            snprintf(p2, sizeof p2, "%s.%s", path, fd->name);
            snprintf(a2, sizeof a2, "%s.%s", access, nb_emit_safe_name(e, fd->name));
            NB_TRY(add_leaves(e, L, param, fd->u.var.type, p2, a2));
        }
        return NB_OK;
    }
    const nb_type *inner = t;
    while (inner->kind == NB_TY_ARRAY) inner = inner->elem;
    if (t->kind == NB_TY_ARRAY && (inner->kind == NB_TY_STRUCT || (inner->kind == NB_TY_TENSOR && !inner->buffer))) {
        /* element by element (program.c's leaves): arrays of structs, arrays of views */
        for (int i = 0; i < t->length; i++) {
            char p2[128], a2[160];
            snprintf(p2, sizeof p2, "%s[%d]", path, i);
            snprintf(a2, sizeof a2, "%s.a[%d]", access, i);
            NB_TRY(add_leaves(e, L, param, t->elem, p2, a2));
        }
        return NB_OK;
    }
    if (L->n == L->cap) {
        int nc = L->cap ? L->cap * 2 : 16;
        leaf *n = nb_arena_alloc(&e->m->arena, sizeof *n * (size_t)nc, sizeof(void *));
        if (!n) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        if (L->n) memcpy(n, L->items, sizeof *n * (size_t)L->n);
        L->items = n;
        L->cap = nc;
    }
    leaf *l = &L->items[L->n];
    memset(l, 0, sizeof *l);
    l->param = param;
    snprintf(l->path, sizeof l->path, "%s", path);
    snprintf(l->access, sizeof l->access, "%s", access);
    l->type = t;
    if (t->kind == NB_TY_TENSOR || t->kind == NB_TY_PTR) { /* (a pointer binds a whole array: check_ptr.c) */
        l->is_tensor = 1;
        l->scalar = nb_type_elem_scalar(t->elem);
    } else if (!value_shape(t, l->shape, &l->rank, &l->scalar)) {
        return nb_error(NB_ERR_UNSUPPORTED, "parameter '%s' of type '%s' cannot be bound in a vectorized call", path,
                        t->name ? t->name : "?");
    }
    L->n++;
    return NB_OK;
}

/* ---- layout ------------------------------------------------------------------------------ */

typedef struct field {
    char decl[200];
} field;

static size_t place_field(size_t *off, size_t *maxalign, size_t size, size_t align)
{
    *off = nb_align_up(*off, align);
    size_t at = *off;
    *off += size;
    if (align > *maxalign) *maxalign = align;
    return at;
}

static const char *storage_ctype(nb_dtype d)
{
    switch (d) {
    case NB_F32: return "float";
    case NB_F64: return "double";
    case NB_F16: case NB_BF16: return "unsigned short";
    case NB_I32: return "int";
    case NB_U32: return "unsigned";
    case NB_I64: return "long long";
    default: return "unsigned char";
    }
}

/* ---- code generation helpers ------------------------------------------------------------- */

/* Emits loads (store = 0) or stores (store = 1) of every component of a value of type t at
 * lvalue `lv`, from/to address expression `addr` whose per-dimension byte strides are
 * inner[depth…]; store = 2 adds lv atomically (nb_accum_*, a gradient), 3 adds it with a plain
 * read-modify-write (a gradient element only this index writes). */
static void gen_access(nb_emitter *e, nb_strbuf *o, int store, const nb_type *t, const char *lv, const char *addr,
                       char inner[][96], int depth, nb_dtype dt, int ind)
{
    char pad[64];
    int np = ind * 4 < 60 ? ind * 4 : 60;
    memset(pad, ' ', (size_t)np);
    pad[np] = 0;
    if (t->kind == NB_TY_ARRAY) {
        char lv2[400], addr2[400];
        snprintf(lv2, sizeof lv2, "%s.a[nb_k%d]", lv, depth);
        snprintf(addr2, sizeof addr2, "%s + nb_k%d * %s", addr, depth, inner[depth]);
        APPEND(o, "%sfor (int nb_k%d = 0; nb_k%d < %d; nb_k%d++) {\n", pad, depth, depth, t->length, depth);
        gen_access(e, o, store, t->elem, lv2, addr2, inner, depth + 1, dt, ind + 1);
        APPEND(o, "%s}\n", pad);
        return;
    }
    int n = nb_type_components(t);
    for (int k = 0; k < n; k++) {
        nb_strbuf a, l;
        nb_strbuf_init(&a);
        nb_strbuf_init(&l);
        nb_strbuf_append(&a, addr);
        if (t->kind == NB_TY_VECTOR && k) APPEND(&a, " + %d * %s", k, inner[depth]);
        if (t->kind == NB_TY_MATRIX) {
            int r = k / t->cols, c = k % t->cols;
            if (r) APPEND(&a, " + %d * %s", r, inner[depth]);
            if (c) APPEND(&a, " + %d * %s", c, inner[depth + 1]);
        }
        nb_strbuf_append(&l, lv);
        nb_emit_comp(t, k, &l);
        nb_strbuf_append(o, pad);
        if (store == 3) { /* accumulate into an element this index owns (nb_leaf_sig.owned): no atomic */
            const char *ct = dt == NB_F64 ? "double" : "float";
            APPEND(o, "*(%s *)(%s) += (%s)%s;\n", ct, nb_strbuf_cstr(&a), ct, nb_strbuf_cstr(&l));
        } else if (store == 2) { /* accumulate (bwds gradients): nb_accum_* helpers, see gen_accum_helpers */
            APPEND(o, "nb_accum_%s((void *)(%s), (%s)%s, nb_bc);\n", dt == NB_F64 ? "f64" : "f32", nb_strbuf_cstr(&a),
                   dt == NB_F64 ? "double" : "float", nb_strbuf_cstr(&l));
        } else if (store) {
            nb_emit_store_scalar(e, dt, t->kind == NB_TY_SCALAR ? t->scalar : t->scalar, nb_strbuf_cstr(&a),
                                 nb_strbuf_cstr(&l), o);
            nb_strbuf_append(o, "\n");
        } else {
            APPEND(o, "%s = ", nb_strbuf_cstr(&l));
            nb_emit_load_scalar(e, dt, t->scalar, nb_strbuf_cstr(&a), o);
            nb_strbuf_append(o, ";\n");
        }
        nb_strbuf_free(&a);
        nb_strbuf_free(&l);
    }
}

static int leaf_writes_back(const nb_ir_func *f, const leaf *l) { return f->params[l->param]->dir != NB_DIR_IN; }

/* Gradient accumulation of bwds kernels (out params flagged NB_IRF_ACCUM, lang/ad.h): every
 * thread adds its contribution (a gradient whose elements each belong to one index is added
 * without atomics instead: nb_leaf_sig.owned). On CUDA, when a full warp adds into one address
 * (nb_bc: the leaf is broadcast over the whole kernel, e.g. a shared weight; or the 32 lanes'
 * addresses agree, e.g. a per-channel bias over a row of H*W elements) the warp sums by shuffles
 * and lane 0 does one atomicAdd, not 32; otherwise (and on the CPU) each thread adds atomically. */
static void gen_accum_helpers(nb_emitter *e, int cuda)
{
    if (!nb_emit_need_helper(e, "nb_accum")) return;
    if (cuda)
        for (int k = 0; k < 2; k++)
            APPEND(&e->helpers,
                   "static __device__ __forceinline__ void nb_accum_%s(void *p, %s v, int bc) {\n"
                   "    if (__activemask() == 0xffffffffu) {\n"
                   "        const unsigned long long a = (unsigned long long)p;\n"
                   "        if (bc || __all_sync(0xffffffffu, a == __shfl_sync(0xffffffffu, a, 0))) { /* one address */\n"
                   "            for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);\n"
                   "            if ((threadIdx.x & 31) == 0) atomicAdd((%s *)p, v);\n"
                   "            return;\n"
                   "        }\n"
                   "    }\n"
                   "    atomicAdd((%s *)p, v);\n}\n",
                   k ? "f64" : "f32", k ? "double" : "float", k ? "double" : "float", k ? "double" : "float");
    else
        APPEND(&e->helpers,
               "static inline void nb_accum_f32(void *p, float v, int bc) {\n"
               "    union { float f; unsigned u; } o, n; (void)bc;\n"
               "    o.u = __atomic_load_n((unsigned *)p, __ATOMIC_RELAXED);\n"
               "    do { n.f = o.f + v; } while (!__atomic_compare_exchange_n((unsigned *)p, &o.u, n.u, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));\n}\n"
               "static inline void nb_accum_f64(void *p, double v, int bc) {\n"
               "    union { double f; unsigned long long u; } o, n; (void)bc;\n"
               "    o.u = __atomic_load_n((unsigned long long *)p, __ATOMIC_RELAXED);\n"
               "    do { n.f = o.f + v; } while (!__atomic_compare_exchange_n((unsigned long long *)p, &o.u, n.u, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));\n}\n");
}

/* Gradients broadcast over the whole kernel (all strides 0, e.g. a shared weight) are not added
 * element by element: the kernel keeps a thread-local sum per scalar component (nb_acc_ENTRY:
 * one per CPU chunk / CUDA thread over all its grid-stride iterations) and adds it once at the
 * end (CPU: one atomic per component per chunk; CUDA: a block reduction, then one atomicAdd per
 * component per block). CPU sums are double (chunks are long); a CUDA thread sums its few
 * grid-stride iterations (n / (SMs x 32 x 256) of them) in float for f32 gradients (registers:
 * occupancy) and the block reduction adds in double. Kernels with more than NB_ACC_LOCAL_MAX such
 * components keep the per-element path for the rest (local arrays would spill). */
#define NB_ACC_LOCAL_MAX 64

/* CUDA: nb_block_sum(v), the sum of v over a 1-D thread block; every thread of the block must
 * call it (no early return before it), thread 0 gets the total. */
static void gen_block_sum_helper(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "nb_block_sum")) return;
    APPEND(&e->helpers,
           "/* sum over the lanes of a warp of `width` threads (lane 0 gets it) */\n"
           "template <typename T> static __device__ __forceinline__ T nb_warp_sum(T v, unsigned width) {\n"
           "    const unsigned mask = width >= 32 ? 0xffffffffu : (1u << width) - 1u, lane = threadIdx.x & 31;\n"
           "    for (unsigned o = 16; o > 0; o >>= 1) {\n"
           "        T t = __shfl_down_sync(mask, v, o);\n"
           "        if (lane + o < width) v += t;\n"
           "    }\n"
           "    return v;\n}\n"
           "/* sum of v over the (1-D) block: every thread must call it; thread 0 gets the total */\n"
           "template <typename T> static __device__ __forceinline__ T nb_block_sum(T v) {\n"
           "    __shared__ T nb_warp_sums[32];\n"
           "    const unsigned warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;\n"
           "    const unsigned left = blockDim.x - (warp << 5);\n"
           "    v = nb_warp_sum(v, left < 32 ? left : 32u);\n"
           "    if ((threadIdx.x & 31) == 0) nb_warp_sums[warp] = v;\n"
           "    __syncthreads();\n"
           "    if (warp == 0) v = nb_warp_sum((threadIdx.x < nwarps ? nb_warp_sums[threadIdx.x] : (T)0), blockDim.x < 32 ? blockDim.x : 32u);\n"
           "    __syncthreads(); /* nb_warp_sums is reused by the next call */\n"
           "    return v;\n}\n");
}

/* Number of scalars of a leaf value (arrays of scalars / vectors / matrices); 0 for others. */
static int leaf_scalars(const nb_type *t)
{
    if (t->kind == NB_TY_ARRAY) return t->length > 0 ? t->length * leaf_scalars(t->elem) : 0;
    return nb_type_components(t);
}

/* The thread-local sums of a broadcast gradient leaf (see NB_ACC_LOCAL_MAX). mode 0 (body):
 * `ACC[j] += component j of lv`; mode 1 (CPU entry, after the loop): atomic add of ACC[j] at
 * its address; mode 2 (CUDA entry, after the loop): block sum of ACC[j], then thread 0 adds it.
 * j is the flat component index (row-major over arrays, then components). */
static void gen_acc(nb_emitter *e, nb_strbuf *o, int mode, const nb_type *t, const char *lv, const char *acc,
                    const char *flat, const char *addr, char inner[][96], int depth, nb_dtype dt, int ind)
{
    char pad[64];
    int np = ind * 4 < 60 ? ind * 4 : 60;
    memset(pad, ' ', (size_t)np);
    pad[np] = 0;
    int cuda = e->target == NB_TARGET_CUDA;
    if (t->kind == NB_TY_ARRAY) {
        char lv2[400], addr2[400], flat2[400];
        snprintf(lv2, sizeof lv2, "%s.a[nb_k%d]", lv, depth);
        snprintf(addr2, sizeof addr2, "%s + nb_k%d * %s", addr, depth, inner[depth]);
        snprintf(flat2, sizeof flat2, "%s + nb_k%d * %d", flat, depth, leaf_scalars(t->elem));
        if (cuda) APPEND(o, "%s#pragma unroll\n", pad); /* constant indices keep the sums in registers */
        APPEND(o, "%sfor (int nb_k%d = 0; nb_k%d < %d; nb_k%d++) {\n", pad, depth, depth, t->length, depth);
        gen_acc(e, o, mode, t->elem, lv2, acc, flat2, addr2, inner, depth + 1, dt, ind + 1);
        APPEND(o, "%s}\n", pad);
        return;
    }
    const char *ct = dt == NB_F64 ? "double" : "float";
    int n = nb_type_components(t);
    for (int k = 0; k < n; k++) {
        nb_strbuf a;
        nb_strbuf_init(&a);
        if (mode == 0) {
            nb_strbuf_append(&a, lv);
            nb_emit_comp(t, k, &a);
            APPEND(o, "%s%s[%s + %d] += %s;\n", pad, acc, flat, k, nb_strbuf_cstr(&a));
            nb_strbuf_free(&a);
            continue;
        }
        nb_strbuf_append(&a, addr);
        if (t->kind == NB_TY_VECTOR && k) APPEND(&a, " + %d * %s", k, inner[depth]);
        if (t->kind == NB_TY_MATRIX) {
            int r = k / t->cols, c = k % t->cols;
            if (r) APPEND(&a, " + %d * %s", r, inner[depth]);
            if (c) APPEND(&a, " + %d * %s", c, inner[depth + 1]);
        }
        if (mode == 1)
            APPEND(o, "%snb_accum_%s((void *)(%s), (%s)%s[%s + %d], 1);\n", pad, dt == NB_F64 ? "f64" : "f32",
                   nb_strbuf_cstr(&a), ct, acc, flat, k);
        else {
            APPEND(o, "%s{\n%s    const double nb_s = nb_block_sum((double)%s[%s + %d]);\n", pad, pad, acc, flat, k);
            APPEND(o, "%s    if (threadIdx.x == 0) atomicAdd((%s *)(%s), (%s)nb_s);\n%s}\n", pad, ct, nb_strbuf_cstr(&a), ct, pad);
        }
        nb_strbuf_free(&a);
    }
}

/* Forgets diagnostics added since (nd0, ne0) (already rendered into an error message). */
static void drop_diags(nb_program *p, int nd0, int ne0)
{
    for (int i = nd0; i < p->src.ndiags; i++)
        if (p->src.diags[i].msg) nb_free((void *)p->src.diags[i].msg, strlen(p->src.diags[i].msg) + 1);
    p->src.ndiags = nd0;
    p->src.nerrors = ne0;
}

static int leaf_accumulates(const nb_ir_func *f, const leaf *l) { return (f->params[l->param]->flags & NB_IRF_ACCUM) != 0; }

/* After the index loop of an entry point: adds the thread-local sums (nb_acc, see
 * NB_ACC_LOCAL_MAX) of every broadcast gradient leaf into its array. P is the parameter block
 * ("nb_P->" on the CPU, "params." on CUDA). */
static void gen_acc_flush(nb_emitter *e, nb_strbuf *o, const leaves *L, const nb_call_sig *sig, const char *acc_local,
                          int nd_, const char *P)
{
    int cuda = e->target == NB_TARGET_CUDA;
    for (int i = 0; i < L->n; i++) {
        if (!acc_local[i]) continue;
        const leaf *l = &L->items[i];
        char inner[8][96], addr[64], acc[32];
        for (int d = 0; d < l->rank; d++) snprintf(inner[d], sizeof inner[d], "%sl%d_inner[%d]", P, i, d);
        snprintf(addr, sizeof addr, "(char *)%sl%d_data", P, i);
        snprintf(acc, sizeof acc, "nb_acc.l%d", i);
        APPEND(o, "    if (1");
        for (int d = 0; d < nd_; d++) APPEND(o, " && %sl%d_strides[%d] == 0", P, i, d);
        APPEND(o, ") { /* %s broadcast: %s */\n", l->path,
               cuda ? "block sums, one atomicAdd per component and block (every thread gets here)"
                    : "this chunk's sums, one atomic add per component");
        gen_acc(e, o, cuda ? 2 : 1, l->type, "", acc, "0", addr, inner, 0, sig->leaves[i].storage, 2);
        nb_strbuf_append(o, "    }\n");
    }
}

/* ---- warp-cooperative kernels ------------------------------------------------------------
 * A function that reaches a warp-cooperative intrinsic (intrinsics.h NB_IFLAG_WARP: lib/nn.nb's
 * tensor-core products) needs all 32 lanes of a warp converged when it calls it. Its CUDA call
 * kernel therefore iterates whole warps: lanes past the end run the last element again
 * ("tail lanes": nb_live = 0) with their incoming gradients (_dout, out-parameter gradients)
 * zeroed, and store nothing. */
typedef struct warp_scan {
    const nb_ir_func *seen[256];
    int nseen, found;
    unsigned flags;   /* intrinsic flags looked for (NB_IFLAG_WARP, NB_IFLAG_GROUP) */
    int shared_vars;  /* also groupshared variables (NB_IRF_SHARED) */
} warp_scan;

static void warp_scan_func(warp_scan *w, const nb_ir_func *f);

static void warp_scan_inst(nb_ir_inst *in, void *ud)
{
    warp_scan *w = ud;
    if (w->found) return;
    if (in->op == NB_IR_INTRIN) {
        const nb_intrinsic_info *ii = nb_intrinsic_get(in->intrinsic);
        if (ii && (ii->flags & w->flags)) w->found = 1;
    } else if (in->op == NB_IR_CALL && in->callee) warp_scan_func(w, in->callee);
}

static void warp_scan_func(warp_scan *w, const nb_ir_func *f)
{
    for (int i = 0; i < w->nseen; i++)
        if (w->seen[i] == f) return;
    if (w->nseen == (int)(sizeof w->seen / sizeof w->seen[0])) {
        w->found = 1; /* (a huge call graph: assume the worst, the warp loop is always correct) */
        return;
    }
    w->seen[w->nseen++] = f;
    for (int i = 0; w->shared_vars && i < f->nvars; i++)
        if (f->vars[i]->flags & NB_IRF_SHARED) w->found = 1;
    nb_ir_walk(f->body, warp_scan_inst, w);
}

static int reaches_warp_intrinsic(const nb_ir_func *f)
{
    warp_scan w;
    memset(&w, 0, sizeof w);
    w.flags = NB_IFLAG_WARP;
    warp_scan_func(&w, f);
    return w.found;
}

/* A [numthreads] function that synchronizes its group (barriers, Wave*) or has groupshared
 * memory: on the CPU its groups run as groups (emit_group.c). */
static int needs_cpu_groups(const nb_ir_func *f)
{
    warp_scan w;
    memset(&w, 0, sizeof w);
    w.flags = NB_IFLAG_GROUP;
    w.shared_vars = 1;
    warp_scan_func(&w, f);
    return w.found;
}

/* ---- generators (callsig.h NB_BIND_GEN) ----------------------------------------------------- */

/* Scalars of a generator leaf (1 for a scalar, n for a vector or a 1-d array). */
static int gen_count(const leaf *l) { return l->rank == 0 ? 1 : (int)l->shape[0]; }

/* Bytes of a generator leaf's block in the parameter block. */
static size_t gen_block_bytes(int gen, int n)
{
    if (gen == NB_GEN_SIG_INDEX) return 24 * (size_t)n;
    if (gen == NB_GEN_SIG_HASH || gen == NB_GEN_SIG_RAND) return 16;
    return 0;
}

/* The generator leaf's type is one the kind can fill (the call layer checks this with a message
 * for the user; this is the compiler's own guard). */
static int gen_type_ok(int gen, const leaf *l)
{
    const nb_type *t = l->type;
    int integer = l->scalar == NB_SC_INT || l->scalar == NB_SC_UINT || l->scalar == NB_SC_INT64 || l->scalar == NB_SC_UINT64;
    int flt = l->scalar == NB_SC_FLOAT || l->scalar == NB_SC_DOUBLE;
    if (l->is_tensor || l->rank > 1) return 0;
    if (t->kind == NB_TY_ARRAY && (t->elem->kind != NB_TY_SCALAR || gen != NB_GEN_SIG_INDEX)) return 0;
    if (t->kind != NB_TY_SCALAR && t->kind != NB_TY_VECTOR && t->kind != NB_TY_ARRAY) return 0;
    if (gen == NB_GEN_SIG_RAND) return flt;
    return integer && gen >= NB_GEN_SIG_INDEX && gen <= NB_GEN_SIG_HASH;
}

static const char *gen_scalar_ctype(nb_scalar_kind s)
{
    switch (s) {
    case NB_SC_INT: return "int";
    case NB_SC_UINT: return "unsigned";
    case NB_SC_INT64: return "long long";
    case NB_SC_UINT64: return "unsigned long long";
    case NB_SC_DOUBLE: return "double";
    default: return "float";
    }
}

/* SlangPy's wang hash (slangpy/slang/wanghasharg.slang), on 32-bit unsigned. */
static void gen_wang_helper(nb_emitter *e, int cuda)
{
    if (!nb_emit_need_helper(e, "nb_wang_hash")) return;
    APPEND(&e->helpers,
           "/* Thomas Wang's 32-bit integer hash, as SlangPy's wang_hash generator */\n"
           "static %s unsigned nb_wang_hash(unsigned s) {\n"
           "    s = (s ^ 61u) ^ (s >> 16); s *= 9u; s = s ^ (s >> 4); s *= 0x27d4eb2du; s = s ^ (s >> 15);\n"
           "    return s;\n}\n", cuda ? "__device__ __forceinline__" : "inline");
}

/* Loads a generator leaf into lvalue lv in the body; its block is at byte `off` of the parameter
 * block; nb_lin is the linear kernel index. */
static void gen_load(nb_emitter *e, nb_strbuf *b, const leaf *l, const nb_leaf_sig *ls, size_t off, const char *lv, int cuda)
{
    int n = gen_count(l), vec = l->type->kind == NB_TY_VECTOR, arr = l->type->kind == NB_TY_ARRAY;
    const char *ct = gen_scalar_ctype(l->scalar);
    APPEND(b, "    { /* %s: generated */\n", l->path);
    if (ls->gen == NB_GEN_SIG_INDEX)
        APPEND(b, "        const long long *nb_g = (const long long *)((const char *)nb_P + %zu);\n", off);
    else if (ls->gen == NB_GEN_SIG_HASH || ls->gen == NB_GEN_SIG_RAND) {
        gen_wang_helper(e, cuda);
        APPEND(b, "        const char *nb_g = (const char *)nb_P + %zu;\n"
                  "        unsigned nb_h = (unsigned)nb_lin * %du;\n"
                  "        const int nb_warm = *(const int *)(nb_g + 4);\n"
                  "        for (int nb_w = 0; nb_w < nb_warm; nb_w++) nb_h = nb_wang_hash(nb_h);\n"
                  "        nb_h ^= *(const unsigned *)nb_g;\n", off, n > 1 ? n : 1);
    }
    for (int k = 0; k < n; k++) {
        nb_strbuf c;
        nb_strbuf_init(&c);
        nb_strbuf_append(&c, lv);
        if (arr) APPEND(&c, ".a[%d]", k);
        else if (vec) nb_emit_comp(l->type, k, &c);
        int ai = vec ? n - 1 - k : k; /* array-order index: a vector's x is the last dim */
        switch (ls->gen) {
        case NB_GEN_SIG_INDEX:
            APPEND(b, "        %s = (%s)(nb_g[%d] + (nb_g[%d] >= 0 ? (long long)nb_idx[nb_g[%d]] : 0LL) * nb_g[%d]);\n",
                   nb_strbuf_cstr(&c), ct, ai, 2 * n + ai, 2 * n + ai, n + ai);
            break;
        case NB_GEN_SIG_THREAD:
            APPEND(b, "        %s = (%s)%s;\n", nb_strbuf_cstr(&c), ct, k == 0 ? "nb_lin" : "0");
            break;
        case NB_GEN_SIG_HASH:
            APPEND(b, "        nb_h = nb_wang_hash(nb_h); %s = (%s)nb_h;\n", nb_strbuf_cstr(&c), ct);
            break;
        default: /* RAND: lerp(min, max, u), u = 23 hash bits / 2^23 in [0, 1) */
            APPEND(b, "        nb_h = nb_wang_hash(nb_h);\n"
                      "        { const float nb_mn = *(const float *)(nb_g + 8), nb_mx = *(const float *)(nb_g + 12);\n"
                      "          const float nb_u = (float)(nb_h & 0x7fffffu) / 8388608.0f;\n"
                      "          %s = (%s)(nb_mn + (nb_mx - nb_mn) * nb_u); }\n", nb_strbuf_cstr(&c), ct);
            break;
        }
        nb_strbuf_free(&c);
    }
    nb_strbuf_append(b, "    }\n");
}

nb_status nb_program_emit_call(nb_program *p, const nb_call_sig *sig, nb_strbuf *source, nb_call_layout *layout)
{
    NB_CHECK_ARG(p);
    NB_CHECK_ARG(sig);
    NB_CHECK_ARG(source);
    NB_CHECK_ARG(layout);
    memset(layout, 0, sizeof *layout);
    if (sig->mode != NB_CALL_PRIMAL && sig->mode != NB_CALL_FWD && sig->mode != NB_CALL_BWD)
        return nb_error(NB_ERR_INVALID_ARG, "%s: unknown call mode %d", sig->func, (int)sig->mode);
    if (sig->ndim < 0 || sig->ndim > 8) return nb_error(NB_ERR_INVALID_ARG, "%s: kernel rank %d is out of range 0..8", sig->func, sig->ndim);
    if (sig->nleaves < 0 || sig->nleaves > NB_CALL_MAX_LEAVES)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d leaves (at most %d)", sig->func, sig->nleaves, NB_CALL_MAX_LEAVES);
    if (sig->target != NB_TARGET_C && sig->target != NB_TARGET_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "%s: unknown target %d", sig->func, (int)sig->target);
    nb_decl *decls[64];
    int nd = nb_program_find_functions(p, sig->func, decls, 64);
    char ad_base[256];
    int ad_kind = nd <= 0 ? nb_ad_wrapper_name(sig->func, ad_base, sizeof ad_base) : 0;
    if (ad_kind) { /* "f__fwds" / "f__bwds": the derivative-call wrapper of f (lang/ad.h) */
        if (sig->mode != NB_CALL_PRIMAL) return nb_error(NB_ERR_INVALID_ARG, "%s: call mode must be primal", sig->func);
        nd = nb_program_find_functions(p, ad_base, decls, 64);
        int k = 0; /* the overload numbering of nb_ad_reflect_wrappers: differentiable ones only */
        for (int i = 0; i < nd && i < 64; i++)
            if (decls[i]->u.func.differentiable) decls[k++] = decls[i];
        nd = k;
    }
    if (nd <= 0) return nb_error(NB_ERR_NOT_FOUND, "no function named '%s' in the program", sig->func);
    if (sig->overload < 0 || sig->overload >= nd || sig->overload >= 64)
        return nb_error(NB_ERR_NOT_FOUND, "function '%s' has %d overload(s); overload %d does not exist", sig->func, nd,
                        sig->overload);
    nb_ir_module *m;
    NB_TRY(get_ir(p, &m));
    nb_ir_func *f = nb_ir_find_func(m, decls[sig->overload]);
    if (!f) return nb_error(NB_ERR_NOT_FOUND, "function '%s' has no body", sig->func);
    NB_TRY(check_scope(p, m, f));
    if (sig->mode != NB_CALL_PRIMAL || ad_kind) { /* fwds / bwds: the kernel calls f's wrapper (lang/ad.h) */
        int nd0 = p->src.ndiags, ne0 = p->src.nerrors;
        f = nb_ad_call_wrapper(m, &p->src, f, ad_kind ? ad_kind : sig->mode == NB_CALL_BWD ? NB_AD_BWDS : NB_AD_FWDS);
        if (!f) {
            nb_status ds = p->src.nerrors > ne0 ? nb_diag_status(&p->src)
                                                : nb_error(NB_ERR_INTERNAL, "%s: no derivative generated", sig->func);
            drop_diags(p, nd0, ne0); /* (they are in the error message now) */
            return ds;
        }
    }

    nb_emitter E;
    nb_emit_init(&E, m, sig->target);
    nb_emitter *e = &E;
    e->unchecked = p->unchecked;
    e->src = &p->src;
    nb_status st = NB_OK;
    int cuda = sig->target == NB_TARGET_CUDA;
    /* explicit blocks (sig.blocks): every thread of every block runs, as on a GPU */
    int blocks = sig->blocks;
    if (blocks && (!f->is_kernel || sig->ndim != 6)) {
        nb_emit_free(e);
        return nb_error(NB_ERR_INVALID_ARG, "%s: only [Kernel] functions are launched with explicit blocks", sig->func);
    }
    int warp = cuda && !blocks && reaches_warp_intrinsic(f); /* whole warps iterate (see warp_scan) */
    e->warp_kernel = warp;
    /* [numthreads] kernels run as thread groups: on CUDA always (a block per group), on the CPU
     * when they synchronize or share memory (fibers, emit_group.c) */
    int gsize = f->is_kernel && f->numthreads[0] > 0 && sig->mode == NB_CALL_PRIMAL && !ad_kind && sig->ndim == 3 && !warp && !blocks
                    ? f->numthreads[0] * f->numthreads[1] * f->numthreads[2] : 0;
    if (gsize && !cuda && !needs_cpu_groups(f)) gsize = 0;
    /* a block's threads run as a group: CUDA's real block; on the CPU fibers when the kernel
     * synchronizes or shares memory, else one after the other */
    int bgroups = blocks && !cuda && needs_cpu_groups(f);
    if (f->is_kernel && f->numthreads[0] <= 0 && !blocks) {
        warp_scan ws;
        memset(&ws, 0, sizeof ws);
        ws.shared_vars = 1;
        warp_scan_func(&ws, f);
        layout->shared_mem = ws.found;
    }
    e->group_kernel = gsize > 0 || (blocks && cuda);
    layout->group_size = gsize;
    /* a bwds/bwdr wrapper's incoming gradients: its parameters after f's in/inout ones */
    int bwd_wrapper = ad_kind == NB_AD_BWDS || ad_kind == NB_AD_BWDR || (!ad_kind && sig->mode == NB_CALL_BWD);
    int nprim_in = 0;
    if (warp && bwd_wrapper && f->primal)
        for (int i = 0; i < f->primal->nparams; i++) nprim_in += f->primal->params[i]->dir != NB_DIR_OUT;
    int nd_ = sig->ndim;
    leaves L;
    memset(&L, 0, sizeof L);
    for (int i = 0; i < f->nparams && st == NB_OK; i++) {
        char acc[8];
        snprintf(acc, sizeof acc, "%s", "");
        st = add_leaves(e, &L, i, f->params[i]->type, f->params[i]->name, acc);
    }
    int want_result = sig->has_result && f->ret->kind != NB_TY_VOID;
    if (st == NB_OK && sig->has_result && f->ret->kind == NB_TY_VOID)
        st = nb_error(NB_ERR_INVALID_ARG, "%s returns void but the call asks for a result", sig->func);
    /* the result's leaves: one, or one per field of a struct result ("_result.pos") */
    leaves R;
    memset(&R, 0, sizeof R);
    if (st == NB_OK && want_result) {
        st = add_leaves(e, &R, -1, f->ret, "_result", "");
        for (int i = 0; i < R.n && st == NB_OK; i++)
            if (R.items[i].is_tensor)
                st = nb_error(NB_ERR_UNSUPPORTED, "%s: results of type '%s' cannot be stored by a vectorized call",
                              sig->func, f->ret->name ? f->ret->name : "?");
    }
#define LEAF_AT(i) ((i) < L.n ? &L.items[(i)] : &R.items[(i) - L.n])
    int total = L.n + (want_result ? R.n : 0);
    if (st == NB_OK && total != sig->nleaves)
        st = nb_error(NB_ERR_INVALID_ARG, "%s: the signature has %d leaves, the function needs %d", sig->func, sig->nleaves,
                      total);
    if (st == NB_OK && total > NB_CALL_MAX_LEAVES)
        st = nb_error(NB_ERR_UNSUPPORTED, "%s: too many leaves (%d)", sig->func, total);
    /* check binds */
    for (int i = 0; i < total && st == NB_OK; i++) {
        const nb_leaf_sig *ls = &sig->leaves[i];
        const leaf *l = LEAF_AT(i);
        if (!nb_dtype_is_valid((int)ls->storage))
            st = nb_error(NB_ERR_DTYPE, "%s: leaf '%s' has an invalid storage dtype", sig->func, l->path);
        else if (ls->bind == NB_BIND_GEN && (i >= L.n || leaf_writes_back(f, l) || !gen_type_ok(ls->gen, l)))
            st = nb_error(NB_ERR_INVALID_ARG, "%s: leaf '%s' (of type '%s') cannot be bound to a generator of kind %d", sig->func,
                          l->path, l->type->name ? l->type->name : "?", ls->gen);
        else if (ls->bind == NB_BIND_GEN)
            st = NB_OK;
        else if (l->is_tensor != (ls->bind == NB_BIND_TENSOR))
            st = nb_error(NB_ERR_INVALID_ARG, "%s: leaf '%s' %s", sig->func, l->path,
                          l->is_tensor ? "is a Tensor parameter and must be bound to a whole array" : "cannot be bound as a tensor");
        else if (l->is_tensor && ls->storage != nb_emit_natural_dtype(l->scalar))
            st = nb_error(NB_ERR_DTYPE, "%s: tensor '%s' needs %s storage, got %s", sig->func, l->path,
                          nb_dtype_name(nb_emit_natural_dtype(l->scalar)), nb_dtype_name(ls->storage));
        else if ((i >= L.n || (leaf_writes_back(f, l) && !leaf_accumulates(f, l))) && ls->bind == NB_BIND_UNIFORM)
            /* (an accumulated gradient bound to a uniform is one not asked for: never written) */
            st = nb_error(NB_ERR_INVALID_ARG, "%s: '%s' is written by the call and must be bound to an array", sig->func, l->path);
        else if (i < L.n && ls->param != l->param && ls->param != -1 && 0)
            st = NB_OK;
    }
    if (st != NB_OK) {
        nb_emit_free(e);
        return st;
    }

    /* ---- layout and the parameter struct ---- */
    char ename[128];
    snprintf(ename, sizeof ename, "nb_call_%s", nb_emit_safe_name(e, f->cname));
    snprintf(layout->entry, sizeof layout->entry, "%s", ename);
    nb_strbuf ps;
    nb_strbuf_init(&ps);
    size_t off = 0, maxal = 1;
    APPEND(&ps, "/* parameter block of %s (offsets as reported by nb_call_layout) */\ntypedef struct nb_params_%s {\n",
           sig->func, ename);
    if (nd_ > 0) {
        layout->shape_offset = place_field(&off, &maxal, 8 * (size_t)nd_, 8);
        APPEND(&ps, "    long long shape[%d]; /* @%zu */\n", nd_, layout->shape_offset);
    }
    for (int i = 0; i < total; i++) {
        const nb_leaf_sig *ls = &sig->leaves[i];
        const leaf *l = LEAF_AT(i);
        nb_leaf_layout *ll = &layout->leaves[i];
        ll->value_rank = l->rank;
        for (int d = 0; d < l->rank; d++) ll->value_shape[d] = l->shape[d];
        if (ls->bind == NB_BIND_UNIFORM) {
            size_t es = nb_dtype_size(ls->storage);
            size_t cnt = 1;
            for (int d = 0; d < l->rank; d++) cnt *= (size_t)l->shape[d];
            ll->value_bytes = es * cnt;
            ll->offset = place_field(&off, &maxal, es * cnt, es);
            APPEND(&ps, "    %s l%d_value[%zu]; /* %s @%zu */\n", storage_ctype(ls->storage), i, cnt, l->path, ll->offset);
        } else if (ls->bind == NB_BIND_GEN) {
            size_t gb = gen_block_bytes(ls->gen, gen_count(l));
            ll->value_bytes = gb;
            if (gb) {
                ll->offset = place_field(&off, &maxal, gb, 8);
                APPEND(&ps, "    long long l%d_gen[%zu]; /* %s (generator) @%zu */\n", i, gb / 8, l->path, ll->offset);
            }
        } else if (ls->bind == NB_BIND_ARRAY) {
            ll->offset = place_field(&off, &maxal, 8, 8);
            APPEND(&ps, "    unsigned long long l%d_data; /* %s @%zu */\n", i, l->path, ll->offset);
            if (nd_ > 0) {
                ll->strides_offset = place_field(&off, &maxal, 8 * (size_t)nd_, 8);
                APPEND(&ps, "    long long l%d_strides[%d];\n", i, nd_);
            }
            if (l->rank > 0) {
                ll->inner_offset = place_field(&off, &maxal, 8 * (size_t)l->rank, 8);
                APPEND(&ps, "    long long l%d_inner[%d];\n", i, l->rank);
            }
        } else {
            int r = l->type->kind == NB_TY_PTR ? 1 : l->type->rank;
            ll->offset = place_field(&off, &maxal, 8, 8);
            APPEND(&ps, "    unsigned long long l%d_data; /* %s (tensor) @%zu */\n", i, l->path, ll->offset);
            if (r > 0) {
                ll->strides_offset = place_field(&off, &maxal, 16 * (size_t)r, 8);
                APPEND(&ps, "    long long l%d_shape[%d];\n    long long l%d_strides[%d];\n", i, r, i, r);
            }
            if (l->type->diff_tensor) {
                ll->grad_offset = place_field(&off, &maxal, 8, 8);
                APPEND(&ps, "    unsigned long long l%d_grad;\n", i);
                if (r > 0) {
                    place_field(&off, &maxal, 8 * (size_t)r, 8);
                    APPEND(&ps, "    long long l%d_grad_strides[%d];\n", i, r);
                }
            }
        }
    }
    layout->oob_offset = place_field(&off, &maxal, 8, 8);
    APPEND(&ps, "    unsigned long long oob; /* nb_oob_rec of the launch (bounds checks) @%zu */\n", layout->oob_offset);
    layout->size = nb_align_up(off, maxal);
    APPEND(&ps, "} nb_params_%s; /* %zu bytes */\n", ename, layout->size);
    if (cuda && layout->size > 4096) {
        nb_strbuf_free(&ps);
        nb_emit_free(e);
        return nb_error(NB_ERR_UNSUPPORTED, "%s: parameter block of %zu bytes exceeds CUDA's 4 KiB limit", sig->func,
                        layout->size);
    }

    /* ---- per-block shared-memory sums of partly broadcast gradients (nb_leaf_sig.shacc) ---- */
    char shacc[NB_CALL_MAX_LEAVES + 1]; /* leaf i is summed per block in nb_sh<i>_<entry> */
    int nshacc = 0;
    memset(shacc, 0, sizeof shacc);
    for (int i = 0; i < L.n && cuda && !blocks && !gsize && !warp; i++) {
        const leaf *l = &L.items[i];
        const nb_leaf_sig *ls = &sig->leaves[i];
        if (!ls->shacc || ls->bind != NB_BIND_ARRAY || !leaf_writes_back(f, l) || !leaf_accumulates(f, l) || ls->owned ||
            l->type->kind != NB_TY_SCALAR || (ls->storage != NB_F32 && ls->storage != NB_F64) || nshacc >= NB_SHACC_LEAVES)
            continue;
        shacc[i] = 1;
        nshacc++;
        APPEND(&ps, "static __shared__ %s nb_sh%d_%s[%d]; /* block sums of %s (nb_leaf_sig.shacc) */\n",
               ls->storage == NB_F64 ? "double" : "float", i, ename, NB_SHACC_MAX, l->path);
    }

    /* ---- thread-local sums of broadcast gradients (NB_ACC_LOCAL_MAX) ---- */
    char acc_local[NB_CALL_MAX_LEAVES + 1]; /* leaf i sums locally when broadcast */
    const char *acc_ct[NB_CALL_MAX_LEAVES + 1];
    int nacc = 0;
    memset(acc_local, 0, sizeof acc_local);
    for (int i = 0; i < L.n; i++) {
        const leaf *l = &L.items[i];
        const nb_leaf_sig *ls = &sig->leaves[i];
        int ns = leaf_scalars(l->type);
        if (ls->bind != NB_BIND_ARRAY || !leaf_writes_back(f, l) || !leaf_accumulates(f, l) || ls->owned || shacc[i]) continue;
        if ((ls->storage != NB_F32 && ls->storage != NB_F64) || ns <= 0 || nacc + ns > NB_ACC_LOCAL_MAX) continue;
        acc_local[i] = 1;
        nacc += ns;
    }
    for (int i = 0; i < L.n; i++)
        acc_ct[i] = sig->leaves[i].storage == NB_F32 && cuda ? "float" : "double";
    /* measured on an H100 (docs/PERF.md): the fused tanh-sum bwds step takes 0.59 ms at 32 blocks
     * per SM, 0.41 ms at 2 (one wave: each block reduces once, over more elements) */
    if (nacc) layout->blocks_per_sm = 2;
    /* rows read with 16-byte loads (one thread per row): 4 blocks per SM measured 0.55 ms for the
     * dot(w[64], x) forward over 2^22 rows, 0.83 ms at 32 (the half-used sectors stay in L1) */
    for (int i = 0; cuda && !nacc && i < L.n; i++)
        if (sig->leaves[i].vec4) layout->blocks_per_sm = 4;
    /* shared sums: each block flushes once per element of the span; 8 blocks of 256 threads
     * still fill an SM */
    if (nshacc && !layout->blocks_per_sm) layout->blocks_per_sm = 8;
    if (nacc) {
        APPEND(&ps, "/* per-thread sums of the gradients broadcast over the whole kernel, added once at the end */\n"
                    "typedef struct nb_acc_%s {\n", ename);
        for (int i = 0; i < L.n; i++)
            if (acc_local[i]) APPEND(&ps, "    %s l%d[%d]; /* %s */\n", acc_ct[i], i, leaf_scalars(L.items[i].type), L.items[i].path);
        APPEND(&ps, "} nb_acc_%s;\n", ename);
    }

    /* ---- the function and everything it uses ---- */
    nb_emit_function(e, f);

    /* ---- 4 consecutive indices per thread (nb_call_sig.contig4) ---- */
    int c4 = cuda && sig->contig4 && !blocks && !gsize && !warp && !nacc && (nd_ == 1 || nd_ == 2) && !f->has_tid &&
             !f->is_kernel;
    for (int i = 0; c4 && i < total; i++) {
        const nb_leaf_sig *ls = &sig->leaves[i];
        const leaf *l = LEAF_AT(i);
        size_t es = nb_dtype_size(ls->storage);
        if (ls->bind == NB_BIND_UNIFORM) continue;
        if (ls->bind == NB_BIND_ARRAY && ls->bcast) { /* one element for every index: read in place */
            if (i >= L.n || leaf_writes_back(f, l) || leaf_accumulates(f, l) || l->type->kind != NB_TY_SCALAR) c4 = 0;
            continue;
        }
        if (ls->bind != NB_BIND_ARRAY || l->type->kind != NB_TY_SCALAR || (es != 2 && es != 4) || ls->vec4 ||
            (i < L.n && leaf_accumulates(f, l) && !ls->owned)) /* (atomics need the array's address) */
            c4 = 0;
    }

    /* ---- the per-index body ---- */
    nb_strbuf b;
    nb_strbuf_init(&b);
    const char *I = cuda ? "I" : "long long";
    if (c4) /* the body proper takes its element addresses: array memory or a register buffer */
        APPEND(&b, "template <typename I>\nstatic __device__ __forceinline__ void nb_lane_%s(const nb_params_%s *nb_P, const I *nb_idx", ename,
               ename);
    else if (cuda)
        APPEND(&b, "template <typename I>\nstatic __device__ __forceinline__ void nb_body_%s(const nb_params_%s *nb_P, const I *nb_idx", ename,
               ename);
    else APPEND(&b, "static inline void nb_body_%s(const nb_params_%s *nb_P, const long long *nb_idx", ename, ename);
    for (int i = 0; c4 && i < total; i++)
        if (sig->leaves[i].bind == NB_BIND_ARRAY) APPEND(&b, ", char *nb_a%d", i);
    if (nacc) APPEND(&b, ", nb_acc_%s *nb_acc", ename);
    if (warp) nb_strbuf_append(&b, ", int nb_live");
    nb_strbuf_append(&b, ") {\n");
    (void)I;
    if (nd_ == 0 || c4) nb_strbuf_append(&b, "    (void)nb_idx;\n");
    /* element addresses of array leaves */
    for (int i = 0; i < total && !c4; i++) {
        if (sig->leaves[i].bind != NB_BIND_ARRAY) continue;
        APPEND(&b, "    char *nb_a%d = (char *)nb_P->l%d_data", i, i);
        for (int d = 0; d < nd_; d++) APPEND(&b, " + (long long)nb_idx[%d] * nb_P->l%d_strides[%d]", d, i, d);
        nb_strbuf_append(&b, ";\n");
    }
    /* the linear kernel index (row-major), for thread-id and hash generators */
    int need_lin = 0;
    for (int i = 0; i < L.n; i++) need_lin |= sig->leaves[i].bind == NB_BIND_GEN && sig->leaves[i].gen >= NB_GEN_SIG_THREAD;
    if (need_lin) {
        nb_strbuf_append(&b, "    long long nb_lin = 0;\n");
        for (int d = 0; d < nd_; d++) APPEND(&b, "    nb_lin = nb_lin * nb_P->shape[%d] + (long long)nb_idx[%d];\n", d, d);
    }
    /* parameter values */
    for (int pi = 0; pi < f->nparams; pi++) {
        nb_ir_var *pv = f->params[pi];
        const char *tn = nb_emit_ctype(e, pv->type);
        nb_strbuf z;
        nb_strbuf_init(&z);
        nb_emit_zero(e, pv->type, &z);
        APPEND(&b, "    %s nb_v%d = %s; /* %s */\n", tn, pi, nb_strbuf_cstr(&z), pv->name);
        nb_strbuf_free(&z);
        if (pv->dir == NB_DIR_OUT) continue;
        for (int i = 0; i < L.n; i++) {
            const leaf *l = &L.items[i];
            if (l->param != pi) continue;
            const nb_leaf_sig *ls = &sig->leaves[i];
            char lv[256];
            snprintf(lv, sizeof lv, "nb_v%d%s", pi, l->access);
            if (ls->bind == NB_BIND_GEN) {
                gen_load(e, &b, l, ls, layout->leaves[i].offset, lv, cuda);
                continue;
            }
            if (ls->bind == NB_BIND_TENSOR && l->type->kind == NB_TY_PTR) { /* the array's address */
                APPEND(&b, "    %s = (%s)nb_P->l%d_data;\n", lv, nb_emit_ctype(e, l->type), i);
                continue;
            }
            if (ls->bind == NB_BIND_TENSOR) {
                int r = l->type->rank;
                APPEND(&b, "    %s.data = (char *)nb_P->l%d_data; %s.oob = (struct nb_oob_rec *)nb_P->oob; %s.site = %d;\n", lv, i, lv,
                       lv, i + 1);
                for (int d = 0; d < r; d++)
                    APPEND(&b, "    %s.shape[%d] = nb_P->l%d_shape[%d]; %s.strides[%d] = nb_P->l%d_strides[%d];\n", lv, d, i, d, lv,
                           d, i, d);
                if (l->type->diff_tensor) {
                    APPEND(&b, "    %s.grad = (char *)nb_P->l%d_grad;\n", lv, i);
                    for (int d = 0; d < r; d++) APPEND(&b, "    %s.grad_strides[%d] = nb_P->l%d_grad_strides[%d];\n", lv, d, i, d);
                }
                continue;
            }
            char inner[8][96];
            char addr[64];
            if (ls->bind == NB_BIND_ARRAY) {
                for (int d = 0; d < l->rank; d++) snprintf(inner[d], sizeof inner[d], "nb_P->l%d_inner[%d]", i, d);
                snprintf(addr, sizeof addr, "nb_a%d", i);
            } else {
                size_t es = nb_dtype_size(ls->storage);
                for (int d = l->rank - 1; d >= 0; d--) {
                    snprintf(inner[d], sizeof inner[d], "%zu", es);
                    for (int d2 = d + 1; d2 < l->rank; d2++) {
                        long long v = 0;
                        sscanf(inner[d], "%lld", &v);
                        snprintf(inner[d], sizeof inner[d], "%lld", v * l->shape[d2]);
                    }
                }
                snprintf(addr, sizeof addr, "(const char *)nb_P->l%d_value", i);
            }
            const nb_type *t = l->type;
            if (cuda && ls->vec4 && ls->bind == NB_BIND_ARRAY && ls->storage == NB_F32 && t->kind == NB_TY_ARRAY &&
                t->elem->kind == NB_TY_SCALAR && t->elem->scalar == NB_SC_FLOAT && t->length % 4 == 0) {
                /* a contiguous, 16-byte aligned row (the call layer checked): 16-byte loads */
                APPEND(&b, "#pragma unroll\n    for (int nb_q = 0; nb_q < %d; nb_q++) {\n"
                           "        const float4 nb_f4 = __ldg((const float4 *)nb_a%d + nb_q);\n"
                           "        %s.a[4 * nb_q] = nb_f4.x; %s.a[4 * nb_q + 1] = nb_f4.y; %s.a[4 * nb_q + 2] = nb_f4.z; %s.a[4 * nb_q + 3] = nb_f4.w;\n"
                           "    }\n", t->length / 4, i, lv, lv, lv, lv);
                continue;
            }
            gen_access(e, &b, 0, l->type, lv, addr, inner, 0, ls->storage, 1);
        }
    }
    if (warp && bwd_wrapper && f->primal) /* tail lanes carry no gradient */
        for (int pi = nprim_in; pi < f->nparams; pi++) {
            if (f->params[pi]->dir == NB_DIR_OUT) continue;
            nb_strbuf z;
            nb_strbuf_init(&z);
            nb_emit_zero(e, f->params[pi]->type, &z);
            APPEND(&b, "    if (!nb_live) nb_v%d = %s; /* %s of a tail lane */\n", pi, nb_strbuf_cstr(&z), f->params[pi]->name);
            nb_strbuf_free(&z);
        }
    /* the call */
    nb_strbuf call;
    nb_strbuf_init(&call);
    APPEND(&call, "%s(", nb_emit_safe_name(e, f->cname));
    int first = 1;
    if (f->has_tid) { /* (a function reading thread ids called over arrays: ids from the grid index) */
        nb_emit_thread_ids_type(e);
        const char *u3 = nb_emit_ctype(e, nb_type_vector(e->tt, NB_SC_UINT, 3));
        APPEND(&b, "    nb_thread_ids nb_tid;\n");
        for (int c = 0; c < 3 && blocks; c++) /* nb_idx = {block z, y, x, thread z, y, x}; shape = {grid…, block…} */
            APPEND(&b, "    nb_tid.thread_idx.%c = (unsigned)nb_idx[%d]; nb_tid.block_idx.%c = (unsigned)nb_idx[%d];\n"
                       "    nb_tid.block_dim.%c = (unsigned)nb_P->shape[%d]; nb_tid.grid_dim.%c = (unsigned)nb_P->shape[%d];\n"
                       "    nb_tid.dispatch_id.%c = nb_tid.block_idx.%c * nb_tid.block_dim.%c + nb_tid.thread_idx.%c;\n",
                   "xyz"[c], 5 - c, "xyz"[c], 2 - c, "xyz"[c], 5 - c, "xyz"[c], 2 - c, "xyz"[c], "xyz"[c], "xyz"[c], "xyz"[c]);
        for (int c = 0; c < 3 && !blocks; c++) {
            int d = nd_ - 1 - c;
            if (d >= 0) APPEND(&b, "    nb_tid.dispatch_id.%c = (unsigned)nb_idx[%d];\n", "xyz"[c], d);
            else APPEND(&b, "    nb_tid.dispatch_id.%c = 0;\n", "xyz"[c]);
        }
        if (blocks) {
        } else if (f->numthreads[0] > 0) { /* [numthreads]: groups tile the grid (x fastest), on both targets */
            for (int c = 0; c < 3; c++)
                APPEND(&b, "    nb_tid.thread_idx.%c = nb_tid.dispatch_id.%c %% %du; nb_tid.block_idx.%c = nb_tid.dispatch_id.%c / %du; "
                           "nb_tid.block_dim.%c = %du; nb_tid.grid_dim.%c = (unsigned)(nb_P->shape[%d] / %d);\n",
                       "xyz"[c], "xyz"[c], f->numthreads[c], "xyz"[c], "xyz"[c], f->numthreads[c], "xyz"[c], f->numthreads[c],
                       "xyz"[c], nd_ - 1 - c, f->numthreads[c]);
        } else { /* one thread per block on both targets: block_dim * block_idx + thread_idx is the
                  dispatch id whatever the launch's real geometry (a grid-stride CUDA launch's
                  threadIdx/blockIdx are not), so [CudaKernel] index arithmetic agrees with the CPU */
            APPEND(&b, "    nb_tid.thread_idx = nb_tid.dispatch_id;\n    nb_tid.block_idx.x = nb_tid.block_idx.y = nb_tid.block_idx.z = 0;\n"
                       "    nb_tid.block_dim.x = nb_tid.block_dim.y = nb_tid.block_dim.z = 1;\n");
            for (int c = 0; c < 3; c++) /* (blocks of one thread: the grid in blocks is the grid in threads) */
                if (nd_ - 1 - c >= 0) APPEND(&b, "    nb_tid.grid_dim.%c = (unsigned)nb_P->shape[%d];\n", "xyz"[c], nd_ - 1 - c);
                else APPEND(&b, "    nb_tid.grid_dim.%c = 1;\n", "xyz"[c]);
        }
        (void)u3;
        nb_strbuf_append(&call, "&nb_tid");
        first = 0;
    }
    for (int pi = 0; pi < f->nparams; pi++) {
        APPEND(&call, "%s%snb_v%d", first ? "" : ", ", f->params[pi]->dir != NB_DIR_IN ? "&" : "", pi);
        first = 0;
    }
    nb_strbuf_append_char(&call, ')');
    if (want_result) APPEND(&b, "    %s nb_r = %s;\n", nb_emit_ctype(e, f->ret), nb_strbuf_cstr(&call));
    else APPEND(&b, "    %s;\n", nb_strbuf_cstr(&call));
    nb_strbuf_free(&call);
    /* write back */
    if (warp) nb_strbuf_append(&b, "    if (!nb_live) return; /* a tail lane of a warp-cooperative kernel */\n");
    for (int i = 0; i < total; i++) {
        const leaf *l = LEAF_AT(i);
        const nb_leaf_sig *ls = &sig->leaves[i];
        if (ls->bind != NB_BIND_ARRAY) continue;
        if (i < L.n && !leaf_writes_back(f, l)) continue;
        char inner[8][96], addr[32], lv[256];
        for (int d = 0; d < l->rank; d++) snprintf(inner[d], sizeof inner[d], "nb_P->l%d_inner[%d]", i, d);
        snprintf(addr, sizeof addr, "nb_a%d", i);
        if (i < L.n) snprintf(lv, sizeof lv, "nb_v%d%s", l->param, l->access);
        else snprintf(lv, sizeof lv, "nb_r%s", l->access);
        if (i < L.n && leaf_accumulates(f, l)) {
            if (ls->storage != NB_F32 && ls->storage != NB_F64) {
                st = nb_error(NB_ERR_DTYPE, "%s: gradient '%s' must be an f32 or f64 array", sig->func, l->path);
                break;
            }
            if (ls->owned) { /* this index owns the element: a plain add (no atomic, no broadcast) */
                gen_access(e, &b, 3, l->type, lv, addr, inner, 0, ls->storage, 1);
                continue;
            }
            if (shacc[i]) { /* into the block's shared sums (element = byte offset / size; flushed at the end) */
                const char *ct = ls->storage == NB_F64 ? "double" : "float";
                APPEND(&b, "    atomicAdd(&nb_sh%d_%s[(unsigned)((unsigned long long)(nb_a%d - (char *)nb_P->l%d_data) / %zuu)], (%s)%s);\n", i, ename,
                       i, i, nb_dtype_size(ls->storage), ct, lv);
                continue;
            }
            gen_accum_helpers(e, cuda);
            APPEND(&b, "    {\n        const int nb_bc = 1");
            for (int d = 0; d < nd_; d++) APPEND(&b, " && nb_P->l%d_strides[%d] == 0", i, d);
            nb_strbuf_append(&b, ";\n");
            if (acc_local[i]) { /* broadcast: into this thread's sums (added once at the end of the kernel) */
                char acc[32];
                snprintf(acc, sizeof acc, "nb_acc->l%d", i);
                nb_strbuf_append(&b, "        if (nb_bc) {\n");
                gen_acc(e, &b, 0, l->type, lv, acc, "0", addr, inner, 0, ls->storage, 3);
                nb_strbuf_append(&b, "        } else {\n");
                gen_access(e, &b, 2, l->type, lv, addr, inner, 0, ls->storage, 3);
                nb_strbuf_append(&b, "        }\n    }\n");
                continue;
            }
            const nb_type *t = l->type;
            if (cuda && ls->vec4 && ls->storage == NB_F32 && t->kind == NB_TY_ARRAY && t->elem->kind == NB_TY_SCALAR &&
                t->elem->scalar == NB_SC_FLOAT && t->length % 4 == 0) {
                /* contiguous 16-byte aligned rows: one vector atomic per 4 floats on sm_90 */
                APPEND(&b, "#pragma unroll\n        for (int nb_q = 0; nb_q < %d; nb_q++) {\n"
                           "            const float4 nb_f4 = make_float4(%s.a[4 * nb_q], %s.a[4 * nb_q + 1], %s.a[4 * nb_q + 2], %s.a[4 * nb_q + 3]);\n"
                           "#if __CUDA_ARCH__ >= 900\n"
                           "            atomicAdd((float4 *)nb_a%d + nb_q, nb_f4);\n"
                           "#else\n"
                           "            float *nb_p = (float *)nb_a%d + 4 * nb_q;\n"
                           "            atomicAdd(nb_p, nb_f4.x); atomicAdd(nb_p + 1, nb_f4.y); atomicAdd(nb_p + 2, nb_f4.z); atomicAdd(nb_p + 3, nb_f4.w);\n"
                           "#endif\n"
                           "        }\n    }\n", t->length / 4, lv, lv, lv, lv, i, i);
                continue;
            }
            gen_access(e, &b, 2, l->type, lv, addr, inner, 0, ls->storage, 2);
            nb_strbuf_append(&b, "    }\n");
            continue;
        }
        gen_access(e, &b, 1, l->type, lv, addr, inner, 0, ls->storage, 1);
    }
    nb_strbuf_append(&b, "}\n");
    if (c4 && st == NB_OK) {
        /* one index: the addresses in the arrays */
        APPEND(&b, "template <typename I>\nstatic __device__ __forceinline__ void nb_body_%s(const nb_params_%s *nb_P, const I *nb_idx) {\n"
                   "    nb_lane_%s(nb_P, nb_idx", ename, ename, ename);
        for (int i = 0; i < total; i++) {
            if (sig->leaves[i].bind != NB_BIND_ARRAY) continue;
            APPEND(&b, ",\n        (char *)nb_P->l%d_data", i);
            for (int d = 0; d < nd_; d++) APPEND(&b, " + (long long)nb_idx[%d] * nb_P->l%d_strides[%d]", d, i, d);
        }
        nb_strbuf_append(&b, ");\n}\n");
        /* indices 4q .. 4q+3: every array read (in, inout, an owned gradient) with one vector
         * load into a register buffer, the four lanes run on the buffers, every array written
         * with one vector store (the call layer checked contiguity and alignment) */
        APPEND(&b, "static __device__ __forceinline__ void nb_quad_%s(const nb_params_%s *nb_P, unsigned nb_q) {\n", ename, ename);
        if (nd_ == 2) /* (rows hold a multiple of 4 indices: the quad lies in one row) */
            nb_strbuf_append(&b, "    const unsigned nb_w = (unsigned)nb_P->shape[1], nb_row = 4u * nb_q / nb_w, nb_col = 4u * nb_q - nb_row * nb_w;\n");
        for (int i = 0; i < total; i++) {
            if (sig->leaves[i].bind != NB_BIND_ARRAY || sig->leaves[i].bcast) continue;
            const leaf *l = LEAF_AT(i);
            const char *vt = nb_dtype_size(sig->leaves[i].storage) == 4 ? "uint4" : "uint2";
            int rd = i < L.n && (f->params[l->param]->dir != NB_DIR_OUT || leaf_accumulates(f, l));
            APPEND(&b, "    union { %s v; char c[sizeof(%s)]; } nb_b%d; /* %s */\n", vt, vt, i, l->path);
            if (rd) APPEND(&b, "    nb_b%d.v = ((const %s *)nb_P->l%d_data)[nb_q];\n", i, vt, i);
        }
        nb_strbuf_append(&b, "#pragma unroll\n    for (unsigned nb_k = 0; nb_k < 4u; nb_k++) {\n");
        nb_strbuf_append(&b, nd_ == 2 ? "        const unsigned nb_idx[2] = {nb_row, nb_col + nb_k};\n"
                                      : "        const unsigned nb_idx[1] = {4u * nb_q + nb_k};\n");
        APPEND(&b, "        nb_lane_%s(nb_P, nb_idx", ename);
        for (int i = 0; i < total; i++)
            if (sig->leaves[i].bind == NB_BIND_ARRAY && sig->leaves[i].bcast && nd_ == 2)
                APPEND(&b, ", (char *)nb_P->l%d_data + (long long)nb_row * nb_P->l%d_strides[0]", i, i);
            else if (sig->leaves[i].bind == NB_BIND_ARRAY && sig->leaves[i].bcast) APPEND(&b, ", (char *)nb_P->l%d_data", i);
            else if (sig->leaves[i].bind == NB_BIND_ARRAY)
                APPEND(&b, ", nb_b%d.c + nb_k * %zuu", i, nb_dtype_size(sig->leaves[i].storage));
        nb_strbuf_append(&b, ");\n    }\n");
        for (int i = 0; i < total; i++) {
            if (sig->leaves[i].bind != NB_BIND_ARRAY || sig->leaves[i].bcast) continue;
            const leaf *l = LEAF_AT(i);
            if (i < L.n && !leaf_writes_back(f, l)) continue;
            const char *vt = nb_dtype_size(sig->leaves[i].storage) == 4 ? "uint4" : "uint2";
            APPEND(&b, "    ((%s *)nb_P->l%d_data)[nb_q] = nb_b%d.v;\n", vt, i, i);
        }
        nb_strbuf_append(&b, "}\n");
    }
#undef LEAF_AT

    /* ---- entry points ---- */
    const int *NT = f->numthreads;
    if (blocks && !cuda) { /* explicit blocks on the CPU: [begin, end) are linear block indices (x fastest) */
        if (bgroups) { /* the block's threads as fibers (emit_group.c): barriers, groupshared, Wave* */
            nb_emit_need_group_runtime(e);
            APPEND(&b, "\nstatic __thread const nb_params_%s *nb_gP_%s;\nstatic __thread long long nb_gB_%s[3];\n", ename, ename, ename);
            APPEND(&b, "static void nb_lane_%s(void) { /* one thread of block nb_gB (z, y, x) */\n"
                       "    const nb_params_%s *nb_P = nb_gP_%s;\n"
                       "    const long long nb_t = nb_g_cur;\n"
                       "    long long nb_idx[6];\n"
                       "    nb_idx[0] = nb_gB_%s[0]; nb_idx[1] = nb_gB_%s[1]; nb_idx[2] = nb_gB_%s[2];\n"
                       "    nb_idx[5] = nb_t %% nb_P->shape[5]; nb_idx[4] = nb_t / nb_P->shape[5] %% nb_P->shape[4];\n"
                       "    nb_idx[3] = nb_t / (nb_P->shape[5] * nb_P->shape[4]);\n"
                       "    nb_body_%s(nb_P, nb_idx);\n"
                       "    nb_g_lanes[nb_t].state = NB_LANE_DONE;\n"
                       "}\n",
                   ename, ename, ename, ename, ename, ename, ename);
        }
        APPEND(&b, "\n/* runs blocks [begin, end) */\nvoid %s(const void *params, int64_t begin, int64_t end) {\n", ename);
        APPEND(&b, "    const nb_params_%s *nb_P = (const nb_params_%s *)params;\n", ename, ename);
        if (e->oob_cur_used) nb_strbuf_append(&b, "    nb_oob_cur = (nb_oob_rec *)nb_P->oob;\n");
        nb_strbuf_append(&b, "    const long long nb_gx = nb_P->shape[2], nb_gy = nb_P->shape[1];\n"
                             "    const long long nb_nt = nb_P->shape[3] * nb_P->shape[4] * nb_P->shape[5];\n"
                             "    for (long long nb_g = begin; nb_g < end; nb_g++) {\n"
                             "        long long nb_idx[6];\n"
                             "        nb_idx[0] = nb_g / (nb_gx * nb_gy); nb_idx[1] = nb_g / nb_gx % nb_gy; nb_idx[2] = nb_g % nb_gx;\n");
        if (bgroups)
            APPEND(&b, "        nb_gP_%s = nb_P;\n"
                       "        nb_gB_%s[0] = nb_idx[0]; nb_gB_%s[1] = nb_idx[1]; nb_gB_%s[2] = nb_idx[2];\n"
                       "        nb_run_group((int)nb_nt, nb_lane_%s);\n", ename, ename, ename, ename, ename);
        else
            APPEND(&b, "        for (long long nb_t = 0; nb_t < nb_nt; nb_t++) { /* no barrier: one thread after the other */\n"
                       "            nb_idx[5] = nb_t %% nb_P->shape[5]; nb_idx[4] = nb_t / nb_P->shape[5] %% nb_P->shape[4];\n"
                       "            nb_idx[3] = nb_t / (nb_P->shape[5] * nb_P->shape[4]);\n"
                       "            nb_body_%s(nb_P, nb_idx);\n"
                       "        }\n", ename);
        nb_strbuf_append(&b, bgroups ? "    }\n    nb_group_release();\n}\n" : "    }\n}\n");
    } else if (blocks && cuda) { /* a real <<<grid, block>>> launch: one thread per kernel thread */
        APPEND(&b, "\nextern \"C\" __global__ void %s(nb_params_%s params) {\n", ename, ename);
        if (e->oob_cur_used)
            nb_strbuf_append(&b, "    if (nb_oob_cur != (nb_oob_rec *)params.oob) nb_oob_cur = (nb_oob_rec *)params.oob;\n");
        APPEND(&b, "    const unsigned nb_idx[6] = {blockIdx.z, blockIdx.y, blockIdx.x, threadIdx.z, threadIdx.y, threadIdx.x};\n"
                   "    nb_body_%s(&params, nb_idx);\n}\n", ename);
    } else if (gsize && !cuda) { /* thread groups on the CPU: indices [begin, end) are groups (emit_group.c) */
        nb_emit_need_group_runtime(e);
        APPEND(&b, "\nstatic __thread const nb_params_%s *nb_gP_%s;\nstatic __thread long long nb_gG_%s;\n", ename, ename, ename);
        APPEND(&b, "static void nb_lane_%s(void) { /* one thread of group nb_gG */\n"
                   "    const nb_params_%s *nb_P = nb_gP_%s;\n"
                   "    const long long nb_g = nb_gG_%s, nb_t = nb_g_cur;\n"
                   "    const long long nb_gx = nb_P->shape[2] / %d, nb_gy = nb_P->shape[1] / %d;\n"
                   "    long long nb_idx[3];\n"
                   "    nb_idx[2] = nb_g %% nb_gx * %d + nb_t %% %d;\n"
                   "    nb_idx[1] = nb_g / nb_gx %% nb_gy * %d + nb_t / %d %% %d;\n"
                   "    nb_idx[0] = nb_g / (nb_gx * nb_gy) * %d + nb_t / %d;\n"
                   "    nb_body_%s(nb_P, nb_idx);\n"
                   "    nb_g_lanes[nb_t].state = NB_LANE_DONE;\n"
                   "}\n",
               ename, ename, ename, ename, NT[0], NT[1], NT[0], NT[0], NT[1], NT[0], NT[1], NT[2], NT[0] * NT[1], ename);
        APPEND(&b, "\n/* runs thread groups [begin, end) */\nvoid %s(const void *params, int64_t begin, int64_t end) {\n", ename);
        if (e->oob_cur_used) nb_strbuf_append(&b, "    nb_oob_cur = (nb_oob_rec *)((const nb_params_");
        if (e->oob_cur_used) APPEND(&b, "%s *)params)->oob;\n", ename);
        APPEND(&b, "    nb_gP_%s = (const nb_params_%s *)params;\n"
                   "    for (long long nb_g = begin; nb_g < end; nb_g++) {\n"
                   "        nb_gG_%s = nb_g;\n"
                   "        nb_run_group(%d, nb_lane_%s);\n"
                   "    }\n"
                   "    nb_group_release();\n}\n",
               ename, ename, ename, gsize, ename);
    } else if (gsize && cuda) { /* one block per thread group, blocks striding over the groups */
        APPEND(&b, "\nextern \"C\" __global__ void __launch_bounds__(%d) %s(nb_params_%s params) {\n", gsize, ename, ename);
        if (e->oob_cur_used)
            nb_strbuf_append(&b, "    if (nb_oob_cur != (nb_oob_rec *)params.oob) nb_oob_cur = (nb_oob_rec *)params.oob;\n");
        APPEND(&b, "    const long long nb_gx = params.shape[2] / %d, nb_gy = params.shape[1] / %d, nb_gz = params.shape[0] / %d;\n"
                   "    const long long nb_ng = nb_gx * nb_gy * nb_gz, nb_t = threadIdx.x;\n"
                   "    for (long long nb_g = blockIdx.x; nb_g < nb_ng; nb_g += gridDim.x) {\n"
                   "        long long nb_idx[3];\n"
                   "        nb_idx[2] = nb_g %% nb_gx * %d + nb_t %% %d;\n"
                   "        nb_idx[1] = nb_g / nb_gx %% nb_gy * %d + nb_t / %d %% %d;\n"
                   "        nb_idx[0] = nb_g / (nb_gx * nb_gy) * %d + nb_t / %d;\n"
                   "        nb_body_%s(&params, nb_idx);\n"
                   "        __syncthreads(); /* (the block's next group reuses its groupshared memory) */\n"
                   "    }\n}\n",
               NT[0], NT[1], NT[2], NT[0], NT[0], NT[1], NT[0], NT[1], NT[2], NT[0] * NT[1], ename);
    } else if (!cuda) {
        APPEND(&b, "\n/* runs kernel indices [begin, end) */\nvoid %s(const void *params, int64_t begin, int64_t end) {\n", ename);
        APPEND(&b, "    const nb_params_%s *nb_P = (const nb_params_%s *)params;\n", ename, ename);
        APPEND(&b, "    long long nb_idx[%d];\n", nd_ > 0 ? nd_ : 1);
        if (nacc) APPEND(&b, "    nb_acc_%s nb_acc;\n    memset(&nb_acc, 0, sizeof nb_acc);\n", ename);
        if (nd_ > 0) {
            nb_strbuf_append(&b, "    long long nb_rem = begin;\n");
            for (int d = 0; d < nd_; d++) APPEND(&b, "    if (nb_P->shape[%d] <= 0) return;\n", d);
            for (int d = nd_ - 1; d >= 0; d--) APPEND(&b, "    nb_idx[%d] = nb_rem %% nb_P->shape[%d]; nb_rem /= nb_P->shape[%d];\n", d, d, d);
        } else nb_strbuf_append(&b, "    nb_idx[0] = 0;\n");
        if (e->oob_cur_used) nb_strbuf_append(&b, "    nb_oob_cur = (nb_oob_rec *)nb_P->oob; /* (this thread's local-array checks) */\n");
        nb_strbuf_append(&b, "    for (long long nb_i = begin; nb_i < end; nb_i++) {\n");
        APPEND(&b, "        nb_body_%s(nb_P, nb_idx%s);\n", ename, nacc ? ", &nb_acc" : "");
        for (int d = nd_ - 1; d >= 0; d--) {
            if (d > 0) APPEND(&b, "        if (++nb_idx[%d] < nb_P->shape[%d]) continue;\n        nb_idx[%d] = 0;\n", d, d, d);
            else APPEND(&b, "        ++nb_idx[0];\n");
        }
        nb_strbuf_append(&b, "    }\n");
        if (nacc) gen_acc_flush(e, &b, &L, sig, acc_local, nd_, "nb_P->");
        nb_strbuf_append(&b, "}\n");
    } else {
        APPEND(&b, "\nextern \"C\" __global__ void %s(nb_params_%s params) {\n", ename, ename);
        nb_strbuf_append(&b, "    const long long nb_n = 1");
        for (int d = 0; d < nd_; d++) APPEND(&b, " * params.shape[%d]", d);
        nb_strbuf_append(&b, ";\n");
        if (nacc) APPEND(&b, "    nb_acc_%s nb_acc = {};\n", ename);
        if (nshacc) { /* zero the block's shared sums; every thread reaches both barriers (the
                         grid-stride loops below have no early return) */
            for (int i = 0; i < L.n; i++)
                if (shacc[i])
                    APPEND(&b, "    for (unsigned nb_t = threadIdx.x; nb_t < %du; nb_t += blockDim.x) nb_sh%d_%s[nb_t] = 0;\n",
                           NB_SHACC_MAX, i, ename);
            nb_strbuf_append(&b, "    __syncthreads();\n");
        }
        if (e->oob_cur_used) /* local-array checks report here (one record per module: the same value) */
            nb_strbuf_append(&b, "    if (nb_oob_cur != (nb_oob_rec *)params.oob) nb_oob_cur = (nb_oob_rec *)params.oob;\n");
        int nn_block = warp && nb_emit_nn_block_accum(e); /* per-block weight-gradient sums (emit_nn.c) */
        if (nn_block) { /* one wave of long-lived blocks: each flushes its sums once */
            nb_strbuf_append(&b, "    nb_nn_block_begin();\n");
            layout->blocks_per_sm = 2;
        }
        for (int pass = 0; pass < 2; pass++) {
            const char *T = pass == 0 ? "unsigned" : "long long";
            if (pass == 0) nb_strbuf_append(&b, "    if (nb_n < 0x7fffffffLL) {\n");
            else nb_strbuf_append(&b, "    } else {\n");
            APPEND(&b, "        const %s nb_stride = (%s)blockDim.x * gridDim.x;\n", T, T);
            if (warp) { /* whole warps (blockDim.x is a multiple of 32): tail lanes redo the last index */
                APPEND(&b, "        for (%s nb_w = (%s)blockIdx.x * blockDim.x + (threadIdx.x & ~31u); nb_w < (%s)nb_n; nb_w += nb_stride) {\n", T, T, T);
                APPEND(&b, "            %s nb_i = nb_w + (threadIdx.x & 31u);\n", T);
                APPEND(&b, "            const int nb_live = nb_i < (%s)nb_n;\n            if (!nb_live) nb_i = (%s)nb_n - 1;\n", T, T);
            } else if (c4 && pass == 0) { /* quads of contiguous indices, then the (< 4) tail one by one */
                APPEND(&b, "        const unsigned nb_n4 = (unsigned)nb_n >> 2;\n"
                           "        for (unsigned nb_q = blockIdx.x * blockDim.x + threadIdx.x; nb_q < nb_n4; nb_q += nb_stride)\n"
                           "            nb_quad_%s(&params, nb_q);\n", ename);
                nb_strbuf_append(&b, "        for (unsigned nb_i = (nb_n4 << 2) + blockIdx.x * blockDim.x + threadIdx.x; nb_i < (unsigned)nb_n; nb_i += nb_stride) {\n");
            } else
            APPEND(&b, "        for (%s nb_i = (%s)blockIdx.x * blockDim.x + threadIdx.x; nb_i < (%s)nb_n; nb_i += nb_stride) {\n", T, T, T);
            APPEND(&b, "            %s nb_idx[%d];\n", T, nd_ > 0 ? nd_ : 1);
            if (nd_ == 0) nb_strbuf_append(&b, "            nb_idx[0] = 0;\n");
            else if (nd_ == 1) nb_strbuf_append(&b, "            nb_idx[0] = nb_i;\n");
            else {
                APPEND(&b, "            %s nb_rem = nb_i;\n", T);
                for (int d = nd_ - 1; d > 0; d--)
                    APPEND(&b, "            nb_idx[%d] = nb_rem %% (%s)params.shape[%d]; nb_rem /= (%s)params.shape[%d];\n", d, T, d, T, d);
                nb_strbuf_append(&b, "            nb_idx[0] = nb_rem;\n");
            }
            APPEND(&b, "            nb_body_%s(&params, nb_idx%s%s);\n", ename, nacc ? ", &nb_acc" : "", warp ? ", nb_live" : "");
            nb_strbuf_append(&b, "        }\n");
        }
        nb_strbuf_append(&b, "    }\n");
        if (nn_block) nb_strbuf_append(&b, "    nb_nn_block_end(); /* every thread gets here */\n");
        if (nshacc) { /* the block's sums into the arrays: one atomic per element of the span */
            nb_strbuf_append(&b, "    __syncthreads();\n");
            for (int i = 0; i < L.n; i++) {
                if (!shacc[i]) continue;
                const char *ct = sig->leaves[i].storage == NB_F64 ? "double" : "float";
                size_t es = nb_dtype_size(sig->leaves[i].storage);
                APPEND(&b, "    if (nb_n > 0) {\n        long long nb_se = 1; /* elements from the first to the last touched */\n");
                for (int d = 0; d < nd_; d++)
                    APPEND(&b, "        nb_se += (params.shape[%d] - 1) * (params.l%d_strides[%d] / %zu);\n", d, i, d, es);
                APPEND(&b, "        for (unsigned nb_t = threadIdx.x; nb_t < (unsigned)nb_se; nb_t += blockDim.x) {\n"
                           "            const %s nb_s = nb_sh%d_%s[nb_t];\n"
                           "            if (nb_s != 0) atomicAdd((%s *)params.l%d_data + nb_t, nb_s);\n"
                           "        }\n    }\n", ct, i, ename, ct, i);
            }
        }
        if (nacc) {
            gen_block_sum_helper(e);
            gen_acc_flush(e, &b, &L, sig, acc_local, nd_, "params.");
        }
        nb_strbuf_append(&b, "}\n");
    }
    nb_strbuf_append(&e->tail, nb_strbuf_cstr(&ps));
    nb_strbuf_append(&e->tail, "\n");
    nb_strbuf_append(&e->tail, nb_strbuf_cstr(&b));
    nb_strbuf_free(&ps);
    nb_strbuf_free(&b);

    if (st != NB_OK) {
        /* (a write-back error above) */
    } else if (!e->ok) {
        st = nb_error(NB_ERR_UNSUPPORTED, "%s: %s", sig->func, e->err);
    } else {
        layout->noob_sites = e->noob_sites;
        layout->bounds_checked = e->oob_used;
        layout->prints = e->need_stdio;
        memcpy(layout->oob_sites, e->oob_sites, sizeof layout->oob_sites);
        nb_strbuf_clear(source);
        nb_emit_finish(e, source);
        if (!nb_strbuf_ok(source)) st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory emitting %s", sig->func);
    }
    nb_emit_free(e);
    return st;
}

/* ---- nabla emit / dump ------------------------------------------------------------------- */

nb_status nb_program_emit(nb_program *p, nb_call_target target, const char *entry, nb_call_mode mode, nb_strbuf *out)
{
    NB_CHECK_ARG(p);
    NB_CHECK_ARG(out);
    if (mode != NB_CALL_PRIMAL && mode != NB_CALL_FWD && mode != NB_CALL_BWD)
        return nb_error(NB_ERR_INVALID_ARG, "unknown mode %d", (int)mode);
    if (target != NB_TARGET_C && target != NB_TARGET_CUDA) return nb_error(NB_ERR_INVALID_ARG, "unknown target %d", (int)target);
    nb_ir_module *m;
    NB_TRY(get_ir(p, &m));
    nb_emitter E;
    nb_emit_init(&E, m, target);
    E.unchecked = p->unchecked;
    E.src = &p->src;
    if (entry && *entry) {
        nb_decl *decls[64];
        int nd = nb_program_find_functions(p, entry, decls, 64);
        if (nd <= 0) {
            nb_emit_free(&E);
            return nb_error(NB_ERR_NOT_FOUND, "no function named '%s' in the program", entry);
        }
        for (int i = 0; i < nd && i < 64; i++) {
            nb_ir_func *f = nb_ir_find_func(m, decls[i]);
            nb_status sc = check_scope(p, m, f);
            if (sc != NB_OK) {
                nb_emit_free(&E);
                return sc;
            }
            if (f && mode != NB_CALL_PRIMAL) { /* the derivative (and what it calls) */
                int nd0 = p->src.ndiags, ne0 = p->src.nerrors;
                nb_ir_func *d = nb_ad_deriv_on_demand(m, &p->src, f, mode == NB_CALL_BWD);
                if (!d) {
                    nb_status ds = nb_diag_status(&p->src);
                    drop_diags(p, nd0, ne0);
                    nb_emit_free(&E);
                    return ds;
                }
                f = d;
            }
            if (f) nb_emit_function(&E, f);
        }
    } else if (mode != NB_CALL_PRIMAL) {
        nb_emit_free(&E);
        return nb_error(NB_ERR_INVALID_ARG, "derivative code needs an entry function (--entry F)");
    } else {
        ir_cache *ic = p->ir_free == ir_cache_free ? p->ir : NULL;
        if (ic && ic->faults.n) { /* the whole program: every lowering error */
            nb_emit_free(&E);
            return nb_error(NB_ERR_COMPILE, "%s", ic->faults.all);
        }
        nb_emit_all(&E);
    }
    nb_status st = NB_OK;
    if (!E.ok) st = nb_error(NB_ERR_UNSUPPORTED, "%s", E.err);
    else {
        nb_emit_finish(&E, out);
        if (!nb_strbuf_ok(out)) st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory emitting code");
    }
    nb_emit_free(&E);
    return st;
}

nb_status nb_program_dump_ir(nb_program *p, const char *entry, nb_strbuf *out)
{
    NB_CHECK_ARG(p);
    NB_CHECK_ARG(out);
    nb_ir_module *m;
    NB_TRY(get_ir(p, &m));
    ir_cache *ic = p->ir_free == ir_cache_free ? p->ir : NULL;
    if (!entry || !*entry) {
        if (ic && ic->faults.n) /* the whole program: every lowering error */
            return nb_error(NB_ERR_COMPILE, "%s", ic->faults.all);
        nb_ir_print_module(m, out);
        return NB_OK;
    }
    int found = 0;
    for (int i = 0; i < m->nfuncs; i++) {
        nb_ir_func *f = m->funcs[i];
        if (strcmp(f->name, entry) != 0 && strcmp(f->cname, entry) != 0) continue;
        NB_TRY(check_scope(p, m, f));
        if (found++) nb_strbuf_append_char(out, '\n');
        nb_ir_print_func(f, out);
    }
    if (!found) return nb_error(NB_ERR_NOT_FOUND, "no function named '%s' in the program", entry);
    return NB_OK;
}
