/* CUDA rows of the tape's group norm and fused group norm + SiLU (CPU reference: the group-norm
 * part of tape_ops_conv.c).
 *
 * One block per (n, group): the group's M = C/G × S floats are contiguous, so the block reads
 * them as float4 chunks (when S % 4 == 0) into registers (2, 4 or 8 chunks per thread, a kernel
 * variant each; groups beyond 16384 floats are processed in tiles that are re-read), computes the mean and then the variance from
 * the registers (two-pass, exact), saves mean / rstd [N*G] in the arena like the CPU path, and
 * writes y (silu applied in the same pass for the fused op). Backward: a block per (n, group)
 * recomputes x̂ (and z = x̂ γ + β, silu'(z) for the fused op) from x and the saved statistics,
 * reduces Σ dx̂ and Σ dx̂ x̂, accumulates dx, and writes per-(n, channel) partials of Σ dz x̂ and
 * Σ dz; a second small kernel sums them over n in fixed order into dγ, dβ (deterministic, no
 * float atomics on global memory).
 * BF16 storage (op_rows.h, NB_TOPF_*): x / dx and y / dy may each be bf16 (gn_args.dt);
 * then the *_bf kernel variants run (the same code reading / writing 4 bf16 per 8-byte access;
 * the f32 kernels are unchanged). Statistics, sums, γ / β and their gradients stay f32.
 *
 * The split path (the default for bf16 storage where S % 8 == 0 and the buffers are 16-byte
 * aligned; the per-group kernels above stay for f32 storage, mixed storage, other shapes and
 * the backward of groups under 4096 elements): one block per (n, group)
 * leaves most SMs waiting on a group's reduction, and a group beyond the registers is re-read;
 * instead the reductions are per (n, channel) plane in a statistics kernel (many small blocks,
 * 8 elements per 16-byte load), and a second kernel combines a group's channel sums (Cg of them)
 * and streams over slices of the group:
 *   forward:  gn_fst  plane mean and sum of squared deviations (exact two-pass, in registers)
 *             gn_fnm  group mean / variance from its channels' (Chan et al.'s combination),
 *                     saves mean / rstd, writes y (silu fused); a group of at most 4096
 *                     elements is one block of gn_fnm, which then takes the statistics from
 *                     its registers and gn_fst is skipped
 *   backward: gn_bst  plane sums of dz xh and dz (dz = dy, times silu'(z) when fused)
 *             gn_bdx  md = Σ_c γ_c Σdz / M, mdx = Σ_c γ_c Σdz xh / M, dx (+)= rstd (dz γ - md -
 *                     xh mdx); dγ, dβ summed over n in a fixed order (gn_dgb's work, fused)
 * x (and dy) are read twice; the second kernel walks its blocks in reverse so that its first
 * reads hit what the first kernel read last in L2. Each step's results equal the per-group
 * kernels' up to rounding (tests/test_nn_gn_cuda.c). Measured on the H100 (tools/device/gn.sh (removed; git history),
 * session 5): the reference UNet's 56 group norms + SiLU in bf16, 20 calls back to back, forward
 * 0.760 -> 0.669 ms, backward 1.506 -> 1.192 ms per step (byte floors 0.291 / 0.437 ms);
 * `nabla unet bench --batch 32 --precision bf16` 12.89 -> 12.47 ms/step. In f32 storage the
 * split forward is slower (1.02 vs 0.93 ms; the per-group forward is near its floor there) and
 * the backward only a little faster, so f32 keeps the per-group kernels (the f32 split kernels
 * and the A/B switches NABLA_GN_IMPL, NABLA_GN_CPT, NABLA_GN_BF16_R, NABLA_GN_SPLIT_MIN_FWD /
 * _BWD were removed; the choices are in gn_split_ok and gn_split_tp).
 * Tried and dropped (H100, session 5): thread-block clusters of 8 per group exchanging partial
 * sums through distributed shared memory (x, dy read once, but 1.2-4.6x slower than this path as
 * written, 14.10 vs 12.64 ms per UNet step), and L2 evict_last / evict_first hints on the two
 * reads (12.67 ms: no change). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cuda_files.h"
#include "nabla/device.h"
#include "nn/common/nn_common.h"
#include "graph/op_rows.h"

#define VAL(t, v) (&(t)->vals[(v)])
#define GN_MAX_CG 1024 /* channels per group of the backward's shared partials */

typedef struct gn_args {
    const float *x, *gamma, *beta, *dy;
    float *y, *dx, *mean, *rstd, *pg, *pb, *dgamma, *dbeta;
    int32_t N, C, G, S, Cg, M, v4, silu, tiles, wuni;
    int32_t ow; /* bit 0: store dx (fresh gradient) rather than add; bit 1: dgamma; bit 2: dbeta */
    float eps;
    int32_t dt; /* storage: bit 0 x and dx are bf16, bit 1 y and dy (else f32) */
    int32_t tp, nsl; /* split path: threads per (n, c) plane; blocks (slices) per group */
    int32_t self;    /* split forward: one block per group computes its own statistics */
} gn_args;

/* kernel ids NB_TK_GN_FWD2 .. NB_TK_GN_DGB, in order; then the bf16 variants of the first five */
static const char *const gn_entry[11] = {"gn_fwd2",    "gn_fwd4",    "gn_fwd8",    "gn_bwd2",
                                         "gn_bwd4",    "gn_dgb",     "gn_fwd2_bf", "gn_fwd4_bf",
                                         "gn_fwd8_bf", "gn_bwd2_bf", "gn_bwd4_bf"};

_Static_assert(NB_TK_GN_FWD2_BF - NB_TK_GN_FWD2 == 6 && NB_TK_GN_BWD4_BF - NB_TK_GN_FWD2_BF == 4,
               "bf16 group-norm kernel ids follow the f32 ones' order");

/* Loads entry into t->kern[id] once, from src/nn/norm/kernels/group_norm.cu with the defines
 * GN_ONLY and GN_ONLY_<entry>, so NVRTC compiles that entry's kernels only (the file holds 16
 * kernels; compiling all of them for each entry loaded made a cold start slow). */
static nb_status gn_kernel(nb_tape *t, int id, const char *entry) {
    if (t->kern[id]) return NB_OK;
    char only[48];
    snprintf(only, sizeof only, "GN_ONLY_%s", entry);
    const char *defs[] = {"GN_ONLY", only, NULL};
    return nb_jit_cuda_kernel(t->dev, "src/nn/norm/kernels/group_norm.cu", defs, entry, &t->kern[id]);
}

/* Launches kernel id (NB_TK_GN_FWD2 .. NB_TK_GN_DGB), its bf16 variant when a->dt != 0. */
static nb_status gn_launch(nb_tape *t, int id, const gn_args *a, unsigned grid, unsigned block) {
    int e = id - NB_TK_GN_FWD2;
    if (a->dt && id != NB_TK_GN_DGB) {
        id = NB_TK_GN_FWD2_BF + e;
        e += 6;
    }
    nb_status s = gn_kernel(t, id, gn_entry[e]);
    if (s) return s;
    const unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
    return nb_jit_launch_cuda_grid(t->kern[id], a, sizeof *a, g, b, nb_device_stream(t->dev));
}

static int al16(const void *p) { return p == NULL || ((uintptr_t)p & 15u) == 0; }

/* Which kernels run (nb_gn_cuda_set_path): 0 the choice below, 1 the per-group kernels, 2 the
 * split ones wherever they can run. Process-wide; tests compare the paths on the same shapes. */
static int gn_path;
void nb_gn_cuda_set_path(int path) { gn_path = path == 1 || path == 2 ? path : 0; }

/* The split path (the kernels' comment above) for bf16 storage (x and y both bf16: f32 keeps the
 * per-group kernels, their forward is near the byte floor in f32 and the split path's second
 * read of x and dy costs more than it saves there). Needs S % 8 == 0 and 16-byte aligned
 * buffers (x, y and dy, and dx in the backward); other cases take the per-group kernels. The
 * backward of groups under 4096 elements too: a group that one block holds needs no split, and
 * the per-group backward reads x and dy once (the split forward does the same with gn_fnm
 * alone, see above). */
static int gn_split_ok(const gn_args *a, int pass, const float *dx) {
    if (gn_path == 1 || a->dt != 3) return 0;
    if (pass && a->M < 4096 && gn_path != 2) return 0;
    return a->S % 8 == 0 && al16(a->x) && al16(a->y) && al16(a->dy) && al16(dx);
}

/* Threads per (n, c) plane of the split statistics kernels: a power of two in 8 .. 256, about
 * 2 chunks of 8 per thread (4 measured 0.045 ms faster in the forward, equal end to end); 256 /
 * tp planes per block of 256. gn_fst keeps 2 chunks in registers and re-reads the others (L1)
 * for its second pass. */
static int32_t gn_split_tp(int64_t S) {
    int64_t tp = 8;
    while (tp < 256 && tp * 8 * 2 < S) tp *= 2;
    return (int32_t)tp;
}

/* Block size (a multiple of 32, 32 .. 256) and slices per group of the split slice kernels
 * (2 chunks of 8 per thread). */
static unsigned gn_split_slices(gn_args *a) {
    int64_t ch = a->M / 8, bt = ((ch + 1) / 2 + 31) / 32 * 32;
    if (bt < 32) bt = 32;
    if (bt > 256) bt = 256;
    a->nsl = (int32_t)((ch + 2 * bt - 1) / (2 * bt));
    return (unsigned)bt;
}

static const char *const gn_split_entry[4] = {"gn_fst_bf", "gn_fnm_bf", "gn_bst_bf", "gn_bdx_bf"};

/* Launches split kernel id (NB_TK_GN_FST_BF .. NB_TK_GN_BDX_BF; bf16 storage only). */
static nb_status gn_launch_split(nb_tape *t, int id, const gn_args *a, unsigned grid, unsigned block) {
    nb_status s = gn_kernel(t, id, gn_split_entry[id - NB_TK_GN_FST_BF]);
    if (s) return s;
    const unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
    return nb_jit_launch_cuda_grid(t->kern[id], a, sizeof *a, g, b, nb_device_stream(t->dev));
}

/* Statistics kernel grid: 256 / tp planes per block. */
static unsigned gn_split_grid(gn_args *a) {
    a->tp = gn_split_tp(a->S);
    int64_t ppb = 256 / a->tp, NC = (int64_t)a->N * a->C;
    return (unsigned)((NC + ppb - 1) / ppb);
}

/* Shapes, block size, register depth (variant 0, 1, 2 = R 2, 4, 8 chunks of 4 floats per thread,
 * at most rmax) and tiling of op; NB_ERR_UNSUPPORTED for sizes the kernels do not take. Shallow
 * register tiles keep more warps resident (the backward holds x and dy: 40 / 58 / 99 registers).
 * The backward takes rmax 4: at R 8 (99 registers) only one 512-thread block fits an SM, whose
 * load / reduce / store phases then never overlap (measured 3.6-4.8x the forward on the H100);
 * at R 4 two blocks fit, and the extra tiles re-read x and dy (mostly from L2). */
static nb_status gn_setup(nb_tape *t, const nb_top *op, int rmax, gn_args *a, unsigned *block,
                          int *variant) {
    const nb_tval *x = VAL(t, op->in[0]), *y = VAL(t, op->out);
    memset(a, 0, sizeof *a);
    int64_t N = x->shape[0], C = x->shape[1], G = op->ip[0], S = x->count / (N * C);
    int64_t Cg = C / G, M = Cg * S;
    if (x->count >= ((int64_t)1 << 31) || N * G > INT32_MAX)
        return nb_error(NB_ERR_UNSUPPORTED, "tape (CUDA): group norm on %lld elements (>= 2^31)",
                        (long long)x->count);
    a->x = x->data;
    a->gamma = op->in[1] >= 0 ? VAL(t, op->in[1])->data : NULL;
    a->beta = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    a->y = y->data;
    a->dy = y->grad;
    a->mean = op->saved[0];
    a->rstd = op->saved[1];
    a->N = (int32_t)N, a->C = (int32_t)C, a->G = (int32_t)G, a->S = (int32_t)S;
    a->Cg = (int32_t)Cg, a->M = (int32_t)M;
    a->eps = op->fp[0];
    a->silu = op->kind == NB_TOP_GROUP_NORM_SILU;
    a->dt = (x->dtype == NB_BF16 ? 1 : 0) | (y->dtype == NB_BF16 ? 2 : 0);
    a->v4 = S % 4 == 0 && al16(a->x) && al16(a->y) && al16(a->dy);
    a->wuni = a->v4 && S % 128 == 0;
    int64_t nch = (M + 3) / 4, R = nch <= 2 * 512 ? 2 : nch <= 4 * 512 || rmax < 8 ? 4 : 8;
    int64_t b = ((nch + R - 1) / R + 31) / 32 * 32;
    if (b < 64) b = 64;
    if (b > 512) b = 512;
    a->tiles = (int32_t)((nch + R * b - 1) / (R * b));
    *block = (unsigned)b;
    *variant = R == 2 ? 0 : R == 4 ? 1 : 2;
    return NB_OK;
}

nb_status nb_op_group_norm_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    int64_t NG = x->shape[0] * op->ip[0];
    op->saved[0] = nb_tape_alloc_f32(t, NG, 0);
    op->saved[1] = nb_tape_alloc_f32(t, NG, 0);
    if (!op->saved[0] || !op->saved[1]) return NB_ERR_OUT_OF_MEMORY;
    gn_args a;
    unsigned block = 0;
    int v = 0;
    nb_status s = gn_setup(t, op, 8, &a, &block, &v);
    if (s) return s;
    if (!gn_split_ok(&a, 0, NULL)) return gn_launch(t, NB_TK_GN_FWD2 + v, &a, (unsigned)NG, block);
    block = gn_split_slices(&a);
    a.self = a.nsl == 1; /* one kernel for small groups */
    if (!a.self) {
        int64_t NC = (int64_t)a.N * a.C; /* per-plane mean, squared deviations */
        a.pg = nb_tape_alloc_f32(t, NC, 0);
        a.pb = nb_tape_alloc_f32(t, NC, 0);
        if (!a.pg || !a.pb) return NB_ERR_OUT_OF_MEMORY;
        if ((s = gn_launch_split(t, NB_TK_GN_FST_BF, &a, gn_split_grid(&a), 256))) return s;
    }
    return gn_launch_split(t, NB_TK_GN_FNM_BF, &a, (unsigned)(NG * a.nsl), block);
}

nb_status nb_op_group_norm_cuda_bwd(nb_tape *t, const nb_top *op) {
    gn_args a;
    unsigned block = 0;
    int v = 0;
    nb_status s = gn_setup(t, op, 4, &a, &block, &v);
    if (s) return s;
    int wx, wg, wb;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &a.dx, &wx)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &a.dgamma, &wg)) ||
        (s = nb_tape_grad_buf_w(t, op->in[2], &a.dbeta, &wb)))
        return s;
    a.ow = wx | wg << 1 | wb << 2;
    a.v4 = a.v4 && al16(a.dx);
    a.wuni = a.wuni && a.v4;
    int affine = a.dgamma || a.dbeta;
    if (!a.dx && !affine) return NB_OK;
    if (gn_split_ok(&a, 1, a.dx)) { /* per-plane sums always: dx needs them too */
        int64_t NC = (int64_t)a.N * a.C;
        a.pg = nb_tape_alloc_f32(t, NC, 0);
        a.pb = nb_tape_alloc_f32(t, NC, 0);
        if (!a.pg || !a.pb) return NB_ERR_OUT_OF_MEMORY;
        if ((s = gn_launch_split(t, NB_TK_GN_BST_BF, &a, gn_split_grid(&a), 256))) return s;
        block = gn_split_slices(&a);
        return gn_launch_split(t, NB_TK_GN_BDX_BF, &a, (unsigned)(a.N * a.G * a.nsl), block);
    }
    if (affine) {
        if (a.Cg > GN_MAX_CG)
            return nb_error(NB_ERR_UNSUPPORTED,
                            "tape (CUDA): group norm backward with %d channels per group (the "
                            "kernel takes at most %d)", (int)a.Cg, GN_MAX_CG);
        int64_t NC = (int64_t)a.N * a.C;
        a.pg = nb_tape_alloc_f32(t, NC, 0);
        a.pb = nb_tape_alloc_f32(t, NC, 0);
        if (!a.pg || !a.pb) return NB_ERR_OUT_OF_MEMORY;
    }
    if ((s = gn_launch(t, NB_TK_GN_BWD2 + v, &a, (unsigned)(a.N * a.G), block))) return s;
    if (!affine) return NB_OK;
    unsigned blocks = (unsigned)((a.C + 7) / 8); /* 8 warps of 256 threads, a warp per channel */
    return gn_launch(t, NB_TK_GN_DGB, &a, blocks, 256);
}

