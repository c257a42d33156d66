/* Thread groups and waves: barriers, Wave* intrinsics, and the CPU's group runtime.
 *
 * CUDA: a [numthreads(X,Y,Z)] call kernel launches one block of X*Y*Z threads per thread group
 * (callgen.c), so GroupMemoryBarrierWithGroupSync is __syncthreads() and groupshared variables
 * are __shared__. Waves are warps: Wave* operations combine the lanes of __activemask() in lane
 * order (a sum is the same on every lane and deterministic). Outside a [numthreads] kernel a
 * thread is its own group: barriers are memory fences only.
 *
 * CPU: a [numthreads] kernel that reaches a barrier, a Wave* operation or groupshared memory runs
 * each group on one worker thread, its threads as fibers (ucontext; 256 KiB stacks, allocated
 * once per worker and group size). A fiber runs until it reaches a barrier, a wave operation or
 * its end, then the next one runs:
 *   - a barrier completes when every live thread of the group waits at one (barriers must be
 *     reached by the whole group, as in HLSL);
 *   - a wave operation completes for the threads of one wave (32 consecutive group indices, as
 *     a warp) waiting at the same call site: the lowest waiting thread's site first; the
 *     threads there are the operation's active lanes (lanes that left a branch or returned take
 *     no part, as on a GPU);
 *   - groupshared variables are `static __thread`: one copy per worker, i.e. per running group.
 * Outside such a kernel (no fiber is running) a thread is a group and a wave of one lane.
 */
#include <stdio.h>
#include <string.h>

#include "lang/emit_c.h"
#include "lang/intrinsics.h"

#define APPEND(sb, ...) nb_strbuf_printf((sb), __VA_ARGS__)

/* Wave operation codes shared by the C runtime below and the call sites. */
enum { W_SUM, W_PRODUCT, W_MIN, W_MAX, W_PREFIX_SUM, W_PREFIX_PRODUCT, W_AND, W_OR, W_XOR, W_ALL, W_ANY, W_BALLOT,
       W_COUNT, W_READ_AT, W_READ_FIRST, W_IS_FIRST };

static void need_cpu_runtime(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "nb_group_runtime")) return;
    e->need_fibers = 1;
    APPEND(&e->helpers,
           "/* thread groups on the CPU: a group's threads are fibers (emit_group.c) */\n"
           "typedef struct nb_lane { ucontext_t ctx; int state, site, op; double f, fr; long long i, ir; } nb_lane;\n"
           "enum { NB_LANE_RUN, NB_LANE_BARRIER, NB_LANE_WAVE, NB_LANE_DONE };\n"
           "#define NB_LANE_STACK (256 * 1024)\n"
           "static __thread nb_lane *nb_g_lanes;\n"
           "static __thread char *nb_g_stacks;\n"
           "static __thread int nb_g_cap = 0, nb_g_n = 0, nb_g_cur = -1;\n"
           "static __thread ucontext_t nb_g_sched;\n"
           "static int nb_lane_index(void) { return nb_g_cur < 0 ? 0 : nb_g_cur; }\n"
           "static void nb_group_barrier(void) {\n"
           "    if (nb_g_cur < 0) return; /* (no group: one thread) */\n"
           "    nb_lane *l = &nb_g_lanes[nb_g_cur];\n"
           "    l->state = NB_LANE_BARRIER;\n"
           "    swapcontext(&l->ctx, &nb_g_sched);\n"
           "}\n"
           /* combine the lanes of one wave waiting at one site (active lanes, in lane order) */
           "static void nb_wave_resolve(int first) {\n"
           "    const int base = first & ~31, end = base + 32 < nb_g_n ? base + 32 : nb_g_n, site = nb_g_lanes[first].site;\n"
           "    const int op = nb_g_lanes[first].op;\n"
           "    double fs = 0, fp = 1, fmn = 0, fmx = 0; long long ia = -1, io = 0, ix = 0, ball = 0; int n = 0, lead = -1;\n"
           "    for (int k = base; k < end; k++) {\n"
           "        nb_lane *l = &nb_g_lanes[k];\n"
           "        if (l->state != NB_LANE_WAVE || l->site != site) continue;\n"
           "        if (lead < 0) lead = k;\n"
           "        l->fr = op == %d ? fs : fp; l->ir = op == %d ? (long long)fs : (long long)fp; /* prefix (exclusive) */\n"
           "        fs += l->f; fp *= l->f;\n"
           "        if (!n || l->f < fmn) fmn = l->f;\n"
           "        if (!n || l->f > fmx) fmx = l->f;\n"
           "        ia &= l->i; io |= l->i; ix ^= l->i;\n"
           "        if (l->i) ball |= 1LL << (k - base);\n"
           "        n++;\n"
           "    }\n"
           "    for (int k = base; k < end; k++) {\n"
           "        nb_lane *l = &nb_g_lanes[k];\n"
           "        if (l->state != NB_LANE_WAVE || l->site != site) continue;\n"
           "        switch (op) {\n"
           "        case %d: l->fr = fs; break;\n"
           "        case %d: l->fr = fp; break;\n"
           "        case %d: l->fr = fmn; break;\n"
           "        case %d: l->fr = fmx; break;\n"
           "        case %d: l->ir = ia; break;\n"
           "        case %d: l->ir = io; break;\n"
           "        case %d: l->ir = ix; break;\n"
           "        case %d: l->ir = ball == (long long)0 ? 0 : (__builtin_popcountll(ball) == n); break;\n"
           "        case %d: l->ir = ball != 0; break;\n"
           "        case %d: l->ir = ball; break;\n"
           "        case %d: l->ir = __builtin_popcountll(ball); break;\n"
           "        case %d: { long long src = base + l->i; /* the lane's requested lane (must be uniform) */\n"
           "            l->fr = src >= base && src < end && nb_g_lanes[src].state == NB_LANE_WAVE && nb_g_lanes[src].site == site ? nb_g_lanes[src].f : 0;\n"
           "            break; }\n"
           "        case %d: l->fr = nb_g_lanes[lead].f; break;\n"
           "        case %d: l->ir = k == lead; break;\n"
           "        default: break;\n"
           "        }\n"
           "    }\n"
           "    for (int k = base; k < end; k++)\n"
           "        if (nb_g_lanes[k].state == NB_LANE_WAVE && nb_g_lanes[k].site == site) nb_g_lanes[k].state = NB_LANE_RUN;\n"
           "}\n"
           "static void nb_wave_wait(int site, int op) {\n"
           "    nb_lane *l = &nb_g_lanes[nb_g_cur];\n"
           "    l->state = NB_LANE_WAVE; l->site = site; l->op = op;\n"
           "    swapcontext(&l->ctx, &nb_g_sched);\n"
           "}\n"
           /* float-valued operations (the value travels as a double: exact for f32, i32, u32) */
           "static double nb_wave_f(int site, int op, double v, long long lane) {\n"
           "    if (nb_g_cur < 0) return op == %d ? 0 : op == %d ? 1 : v; /* (a wave of one lane) */\n"
           "    nb_lane *l = &nb_g_lanes[nb_g_cur];\n"
           "    l->f = v; l->i = lane;\n"
           "    nb_wave_wait(site, op);\n"
           "    return l->fr;\n"
           "}\n"
           /* integer / bool operations */
           "static long long nb_wave_i(int site, int op, long long v) {\n"
           "    if (nb_g_cur < 0) return op == %d ? (v != 0) : op == %d ? 1 : v;\n"
           "    nb_lane *l = &nb_g_lanes[nb_g_cur];\n"
           "    l->i = v; l->f = (double)v;\n"
           "    nb_wave_wait(site, op);\n"
           "    return l->ir;\n"
           "}\n"
           /* frees this worker's lanes and stacks at the end of its share of a launch (they are
            * cached across the groups of one share; a worker thread that exits with them kept
            * would leak them) */
           "static void nb_group_release(void) {\n"
           "    free(nb_g_lanes); free(nb_g_stacks);\n"
           "    nb_g_lanes = NULL; nb_g_stacks = NULL; nb_g_cap = 0;\n"
           "}\n"
           /* runs one group of n threads: fn is the thread body (it reads nb_g_cur) */
           "static void nb_run_group(int n, void (*fn)(void)) {\n"
           "    if (n > nb_g_cap) {\n"
           "        free(nb_g_lanes); free(nb_g_stacks);\n"
           "        nb_g_lanes = (nb_lane *)calloc((size_t)n, sizeof(nb_lane));\n"
           "        nb_g_stacks = (char *)malloc((size_t)n * NB_LANE_STACK);\n"
           "        if (!nb_g_lanes || !nb_g_stacks) abort(); /* (out of memory for the group's stacks) */\n"
           "        nb_g_cap = n;\n"
           "    }\n"
           "    nb_g_n = n;\n"
           "    for (int k = 0; k < n; k++) {\n"
           "        nb_lane *l = &nb_g_lanes[k];\n"
           "        getcontext(&l->ctx);\n"
           "        l->ctx.uc_stack.ss_sp = nb_g_stacks + (size_t)k * NB_LANE_STACK;\n"
           "        l->ctx.uc_stack.ss_size = NB_LANE_STACK;\n"
           "        l->ctx.uc_link = &nb_g_sched;\n"
           "        makecontext(&l->ctx, fn, 0);\n"
           "        l->state = NB_LANE_RUN;\n"
           "    }\n"
           "    for (;;) {\n"
           "        for (int k = 0; k < n; k++)\n"
           "            if (nb_g_lanes[k].state == NB_LANE_RUN) { nb_g_cur = k; swapcontext(&nb_g_sched, &nb_g_lanes[k].ctx); }\n"
           "        nb_g_cur = -1;\n"
           "        int wave = -1, barrier = 0;\n"
           "        for (int k = 0; k < n && wave < 0; k++) if (nb_g_lanes[k].state == NB_LANE_WAVE) wave = k;\n"
           "        if (wave >= 0) { nb_wave_resolve(wave); continue; }\n"
           "        for (int k = 0; k < n; k++)\n"
           "            if (nb_g_lanes[k].state == NB_LANE_BARRIER) { nb_g_lanes[k].state = NB_LANE_RUN; barrier = 1; }\n"
           "        if (!barrier) break; /* every thread is done */\n"
           "    }\n"
           "}\n",
           W_PREFIX_SUM, W_PREFIX_SUM, W_SUM, W_PRODUCT, W_MIN, W_MAX, W_AND, W_OR, W_XOR, W_ALL, W_ANY, W_BALLOT, W_COUNT,
           W_READ_AT, W_READ_FIRST, W_IS_FIRST, W_PREFIX_SUM, W_PREFIX_PRODUCT, W_ALL, W_IS_FIRST);
}

/* CUDA: the thread's lane in its warp. Warps are 32 consecutive linear thread indices of the block
 * (x fastest), so with a 2-D / 3-D block (explicit-block launches) it is not threadIdx.x & 31. */
static void need_cuda_lane(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "nb_lane_id")) return;
    APPEND(&e->helpers, "static __device__ __forceinline__ unsigned nb_lane_id(void) { unsigned l; asm volatile(\"mov.u32 %%0, %%%%laneid;\" : \"=r\"(l)); return l; }\n");
}

static void need_cuda_waves(nb_emitter *e)
{
    need_cuda_lane(e);
    if (!nb_emit_need_helper(e, "nb_wave_cuda")) return;
    APPEND(&e->helpers,
           "/* wave operations over the active lanes of a warp, in lane order (emit_group.c) */\n"
           "template <typename T> static __device__ T nb_wave_arith(T v, int op) {\n"
           "    const unsigned m = __activemask(), me = nb_lane_id();\n"
           "    T r = op == %d || op == %d ? (T)1 : (T)0; bool first = true;\n"
           "    for (unsigned k = 0; k < 32u; k++) {\n"
           "        if (!(m >> k & 1u)) continue;\n"
           "        const T x = __shfl_sync(m, v, (int)k);\n"
           "        if (op == %d || op == %d) { if (op == %d || k < me) r += x; }\n"
           "        else if (op == %d || op == %d) { if (op == %d || k < me) r *= x; }\n"
           "        else if (op == %d) { r = first || x < r ? x : r; }\n"
           "        else { r = first || x > r ? x : r; }\n"
           "        first = false;\n"
           "    }\n"
           "    return r;\n"
           "}\n"
           "/* floats combine in double, as the CPU runtime does (the same answers on both) */\n"
           "static __device__ float nb_wave_arith(float v, int op) { return (float)nb_wave_arith<double>((double)v, op); }\n"
           "template <typename T> static __device__ T nb_wave_bits(T v, int op) {\n"
           "    const unsigned m = __activemask();\n"
           "    T r = op == %d ? (T)~(T)0 : (T)0;\n"
           "    for (unsigned k = 0; k < 32u; k++) {\n"
           "        if (!(m >> k & 1u)) continue;\n"
           "        const T x = __shfl_sync(m, v, (int)k);\n"
           "        r = op == %d ? (T)(r & x) : op == %d ? (T)(r | x) : (T)(r ^ x);\n"
           "    }\n"
           "    return r;\n"
           "}\n",
           W_PRODUCT, W_PREFIX_PRODUCT, W_SUM, W_PREFIX_SUM, W_SUM, W_PRODUCT, W_PREFIX_PRODUCT, W_PRODUCT, W_MIN,
           W_AND, W_AND, W_OR);
}

void nb_emit_need_group_runtime(nb_emitter *e)
{
    if (e->target != NB_TARGET_CUDA) need_cpu_runtime(e);
}

void nb_emit_group_intrinsic(nb_emitter *e, int id, const nb_type *rt, const nb_type *const *at, const char *const *args, int n,
                             nb_strbuf *o)
{
    int cuda = e->target == NB_TARGET_CUDA;
    (void)n;
    switch (id) {
    case NB_INTR_GROUP_SYNC: case NB_INTR_ALL_SYNC: case NB_INTR_DEVICE_SYNC: {
        const char *fence = id == NB_INTR_GROUP_SYNC ? "" : "__threadfence(), ";
        if (cuda) APPEND(o, e->group_kernel ? "(%s__syncthreads())" : "(%s__threadfence_block())", fence);
        else {
            need_cpu_runtime(e);
            nb_strbuf_append(o, "nb_group_barrier()");
        }
        return;
    }
    case NB_INTR_GROUP_FENCE: case NB_INTR_ALL_FENCE: case NB_INTR_DEVICE_FENCE:
        if (cuda) nb_strbuf_append(o, id == NB_INTR_GROUP_FENCE ? "__threadfence_block()" : "__threadfence()");
        else nb_strbuf_append(o, "__atomic_thread_fence(__ATOMIC_SEQ_CST)");
        return;
    case NB_INTR_WAVE_LANE_COUNT: nb_strbuf_append(o, "32u"); return;
    case NB_INTR_WAVE_LANE_INDEX:
        if (cuda) {
            need_cuda_lane(e);
            nb_strbuf_append(o, "nb_lane_id()");
        }
        else {
            need_cpu_runtime(e);
            nb_strbuf_append(o, "((unsigned)nb_lane_index() & 31u)");
        }
        return;
    default: break;
    }
    int site = e->wave_sites++;
    const char *T = nb_emit_ctype(e, rt);
    if (cuda) {
        switch (id) {
        case NB_INTR_WAVE_IS_FIRST:
            need_cuda_lane(e);
            nb_strbuf_append(o, "((int)nb_lane_id() == __ffs(__activemask()) - 1)");
            return;
        case NB_INTR_WAVE_ALL_TRUE: APPEND(o, "(bool)__all_sync(__activemask(), %s)", args[0]); return;
        case NB_INTR_WAVE_ANY_TRUE: APPEND(o, "(bool)__any_sync(__activemask(), %s)", args[0]); return;
        case NB_INTR_WAVE_COUNT_BITS: APPEND(o, "(unsigned)__popc(__ballot_sync(__activemask(), %s))", args[0]); return;
        case NB_INTR_WAVE_BALLOT:
            APPEND(o, "%s{__ballot_sync(__activemask(), %s), 0u, 0u, 0u}", T, args[0]);
            return;
        case NB_INTR_WAVE_READ_AT:
            if (at[0]->scalar == NB_SC_BOOL) APPEND(o, "(bool)__shfl_sync(__activemask(), (int)%s, (int)%s)", args[0], args[1]);
            else APPEND(o, "__shfl_sync(__activemask(), %s, (int)%s)", args[0], args[1]);
            return;
        case NB_INTR_WAVE_READ_FIRST:
            if (at[0]->scalar == NB_SC_BOOL) APPEND(o, "(bool)__shfl_sync(__activemask(), (int)%s, __ffs(__activemask()) - 1)", args[0]);
            else APPEND(o, "__shfl_sync(__activemask(), %s, __ffs(__activemask()) - 1)", args[0]);
            return;
        default: break;
        }
        need_cuda_waves(e);
        int op = id == NB_INTR_WAVE_SUM ? W_SUM : id == NB_INTR_WAVE_PRODUCT ? W_PRODUCT : id == NB_INTR_WAVE_MIN ? W_MIN
               : id == NB_INTR_WAVE_MAX ? W_MAX : id == NB_INTR_WAVE_PREFIX_SUM ? W_PREFIX_SUM
               : id == NB_INTR_WAVE_PREFIX_PRODUCT ? W_PREFIX_PRODUCT : id == NB_INTR_WAVE_BIT_AND ? W_AND
               : id == NB_INTR_WAVE_BIT_OR ? W_OR : W_XOR;
        int bits = op == W_AND || op == W_OR || op == W_XOR;
        APPEND(o, "(%s)nb_wave_%s(%s, %d)", T, bits ? "bits" : "arith", args[0], op);
        (void)site;
        return;
    }
    need_cpu_runtime(e);
    switch (id) {
    case NB_INTR_WAVE_IS_FIRST: APPEND(o, "(bool)nb_wave_i(%d, %d, 0)", site, W_IS_FIRST); return;
    case NB_INTR_WAVE_ALL_TRUE: APPEND(o, "(bool)nb_wave_i(%d, %d, %s)", site, W_ALL, args[0]); return;
    case NB_INTR_WAVE_ANY_TRUE: APPEND(o, "(bool)nb_wave_i(%d, %d, %s)", site, W_ANY, args[0]); return;
    case NB_INTR_WAVE_COUNT_BITS: APPEND(o, "(unsigned)nb_wave_i(%d, %d, %s)", site, W_COUNT, args[0]); return;
    case NB_INTR_WAVE_BALLOT: {
        /* uint4 {mask, 0, 0, 0}: a 32-lane wave */
        APPEND(o, "(%s){(unsigned)nb_wave_i(%d, %d, %s), 0u, 0u, 0u}", T, site, W_BALLOT, args[0]);
        return;
    }
    case NB_INTR_WAVE_BIT_AND: case NB_INTR_WAVE_BIT_OR: case NB_INTR_WAVE_BIT_XOR:
        APPEND(o, "(%s)nb_wave_i(%d, %d, (long long)%s)", T, site,
               id == NB_INTR_WAVE_BIT_AND ? W_AND : id == NB_INTR_WAVE_BIT_OR ? W_OR : W_XOR, args[0]);
        return;
    case NB_INTR_WAVE_READ_AT:
        APPEND(o, "(%s)nb_wave_f(%d, %d, (double)%s, (long long)%s)", T, site, W_READ_AT, args[0], args[1]);
        return;
    default: {
        int op = id == NB_INTR_WAVE_SUM ? W_SUM : id == NB_INTR_WAVE_PRODUCT ? W_PRODUCT : id == NB_INTR_WAVE_MIN ? W_MIN
               : id == NB_INTR_WAVE_MAX ? W_MAX : id == NB_INTR_WAVE_PREFIX_SUM ? W_PREFIX_SUM
               : id == NB_INTR_WAVE_PREFIX_PRODUCT ? W_PREFIX_PRODUCT : W_READ_FIRST;
        APPEND(o, "(%s)nb_wave_f(%d, %d, (double)%s, 0)", T, site, op, args[0]);
        return;
    }
    }
}
