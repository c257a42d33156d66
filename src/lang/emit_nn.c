/* Code of the inline-MLP intrinsics (intrinsics.h NN_*, used by lib/nn.nb):
 *
 *   nn_matvec16(w, off, x)      y[i] = sum_j W[i][j] x[j]          W = w[off .. off + 256), row-major
 *   nn_matvec16_t(w, off, x)    y[j] = sum_i W[i][j] x[i]          (W^T x)
 *   nn_outer16_acc(w, off, dy, x)   grad(w)[off + 16 i + j] += dy[i] x[j]
 *
 * C (and CUDA before sm_80): plain per-thread loops in f32 — the reference.
 * CUDA sm_80+: warp-cooperative. The 32 lanes' 16-vectors form a 32x16 tile staged in shared
 * memory (one 2.5 KiB slice per warp) and multiplied with mma.sync.m16n8k16 (f16 operands, f32
 * accumulation): a mat-vec is Y^T (16x32) = W (16x16) . X^T (16x32), four 16x8 tiles; the outer
 * product is dW (16x16) = DY^T (16x32) . X (32x16), summed over the warp's 32 lanes by the tensor
 * cores, then one atomicAdd per weight per warp. Every lane of the warp must call these together
 * (callgen.c keeps whole warps in its grid-stride loop when a kernel reaches them; tail lanes run
 * a clamped index with zero gradients and store nothing).
 *
 * Weights are read from the f32 tensor (L1-resident, 1 KiB per layer) and rounded to f16 per
 * call; inputs are rounded to f16 too. */
#include <stdio.h>
#include <string.h>

#include "lang/emit_c.h"
#include "lang/intrinsics.h"

#define APPEND(sb, ...) nb_strbuf_printf((sb), __VA_ARGS__)

/* max warps per block the shared staging buffer holds: call kernels launch 256 threads
 * (jit.h NB_JIT_CUDA_BLOCK); a bigger block traps instead of corrupting memory */
#define NB_NN_WARPS 8
#define NB_NN_WARP_FLOATS 640

static void nan_helper(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "nb_nn_nan")) return;
    APPEND(&e->helpers, "%s float nb_nn_nan(void) { union { unsigned u; float f; } v; v.u = 0x7fc00000u; return v.f; }\n",
           nb_emit_inline_kw(e));
}

static void cuda_common(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "nb_nn_common")) return;
    APPEND(&e->helpers,
           "/* inline MLP (lib/nn.nb): per-warp shared staging, f16x2 packing, mma.sync m16n8k16 */\n"
           "static __device__ __forceinline__ float *nb_nn_warp_buf(void) {\n"
           "    __shared__ __align__(16) float nb_nn_smem[%d][%d];\n"
           "    if ((threadIdx.x >> 5) >= %d) __trap(); /* (blocks of at most %d threads) */\n"
           "    return nb_nn_smem[threadIdx.x >> 5];\n}\n"
           "#if __CUDA_ARCH__ >= 800\n"
           "static __device__ __forceinline__ unsigned nb_nn_h2(float lo, float hi) {\n"
           "    unsigned r; asm(\"cvt.rn.f16x2.f32 %%0, %%1, %%2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo)); return r;\n}\n"
           "static __device__ __forceinline__ unsigned short nb_nn_h1(float v) {\n"
           "    unsigned short r; asm(\"cvt.rn.f16.f32 %%0, %%1;\" : \"=h\"(r) : \"f\"(v)); return r;\n}\n"
           "static __device__ __forceinline__ void nb_nn_mma(float d[4], const unsigned a[4], unsigned b0, unsigned b1, const float c[4]) {\n"
           "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%%0,%%1,%%2,%%3}, {%%4,%%5,%%6,%%7}, {%%8,%%9}, {%%10,%%11,%%12,%%13};\"\n"
           "                 : \"=f\"(d[0]), \"=f\"(d[1]), \"=f\"(d[2]), \"=f\"(d[3])\n"
           "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1),\n"
           "                   \"f\"(c[0]), \"f\"(c[1]), \"f\"(c[2]), \"f\"(c[3]));\n}\n"
           "#endif\n",
           NB_NN_WARPS, NB_NN_WARP_FLOATS, NB_NN_WARPS, NB_NN_WARPS * 32);
}

/* Per-warp accumulation of the weight gradients (CUDA): nn_outer16_acc adds a warp's 16x16
 * product into one of the warp's NB_NN_SLOTS shared-memory matrices (keyed by the address of the
 * matrix in the gradient array), kept in the mma accumulator layout so that each lane updates
 * its own 8 values with plain loads and stores (no atomics); at the end of the call kernel
 * (nb_nn_block_begin / nb_nn_block_end, emitted by callgen.c around the grid-stride loop when
 * nb_emit_nn_block_accum says so) the block sums its warps' matrices and adds them to global
 * memory: one atomic per weight per block. A warp that meets more distinct matrices than slots
 * sends the rest straight to global atomics (one per weight per warp). Shared memory: 8 warps x
 * 3 slots x 1 KiB = 24 KiB (+ 20 KiB of staging). */
#define NB_NN_SLOTS 3

static void cuda_block_accum(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "nb_nn_block")) return;
    APPEND(&e->helpers,
           "typedef struct nb_nn_block_t {\n"
           "    unsigned long long key[%d][%d]; long long ws[%d][%d];\n"
           "    float acc[%d][%d][256]; /* [warp][slot][lane * 8 + 4 u + r]: the lane's mma accumulators */\n"
           "} nb_nn_block_t;\n"
           "static __device__ __forceinline__ nb_nn_block_t *nb_nn_block(void) {\n"
           "    __shared__ __align__(16) nb_nn_block_t nb_nn_blk;\n"
           "    return &nb_nn_blk;\n}\n"
           "/* every thread of the block, before anything calls nn_outer16_acc */\n"
           "static __device__ void nb_nn_block_begin(void) {\n"
           "    nb_nn_block_t *B = nb_nn_block();\n"
           "    float *a = &B->acc[0][0][0];\n"
           "    for (int i = threadIdx.x; i < %d * %d * 256; i += blockDim.x) a[i] = 0.0f;\n"
           "    if (threadIdx.x < %d * %d) B->key[threadIdx.x / %d][threadIdx.x %% %d] = 0ull;\n"
           "    __syncthreads();\n}\n"
           "/* every thread of the block, at the end: the warps' sums into the gradient arrays */\n"
           "static __device__ void nb_nn_block_end(void) {\n"
           "    nb_nn_block_t *B = nb_nn_block();\n"
           "    __syncthreads();\n"
           "    const int nw = (int)(blockDim.x >> 5) < %d ? (int)(blockDim.x >> 5) : %d;\n"
           "    for (int e = threadIdx.x; e < %d * 256; e += blockDim.x) {\n"
           "        const int s = e >> 8, idx = e & 255, l = idx >> 3, u = (idx >> 2) & 1, r = idx & 3;\n"
           "        const int i = (l >> 2) + (r >= 2 ? 8 : 0), j = 8 * u + 2 * (l & 3) + (r & 1);\n"
           "        const unsigned long long k0 = B->key[0][s];\n"
           "        float sum = 0.0f;\n"
           "        for (int w = 0; w < nw; w++) {\n"
           "            const unsigned long long k = B->key[w][s];\n"
           "            const float v = B->acc[w][s][idx];\n"
           "            if (k == k0) sum += v;\n"
           "            else if (k && v != 0.0f) atomicAdd((float *)((char *)k + (long long)(16 * i + j) * B->ws[w][s]), v);\n"
           "        }\n"
           "        if (k0 && sum != 0.0f) atomicAdd((float *)((char *)k0 + (long long)(16 * i + j) * B->ws[0][s]), sum);\n"
           "    }\n}\n"
           "/* this warp's slot of the matrix at `key` (warp-uniform; -1: none free) */\n"
           "static __device__ __forceinline__ int nb_nn_slot(unsigned long long key, long long ws) {\n"
           "    nb_nn_block_t *B = nb_nn_block();\n"
           "    const int w = threadIdx.x >> 5;\n"
           "    int s = -1;\n"
           "    for (int i = 0; i < %d; i++) {\n"
           "        const unsigned long long k = B->key[w][i];\n"
           "        if (k == key || k == 0ull) { s = i; break; }\n"
           "    }\n"
           "    if (s >= 0 && B->key[w][s] == 0ull) { /* claim it */\n"
           "        __syncwarp();\n"
           "        if ((threadIdx.x & 31) == 0) { B->key[w][s] = key; B->ws[w][s] = ws; }\n"
           "        __syncwarp();\n"
           "    }\n"
           "    return s;\n}\n",
           NB_NN_WARPS, NB_NN_SLOTS, NB_NN_WARPS, NB_NN_SLOTS, NB_NN_WARPS, NB_NN_SLOTS, NB_NN_WARPS, NB_NN_SLOTS,
           NB_NN_WARPS, NB_NN_SLOTS, NB_NN_SLOTS, NB_NN_SLOTS, NB_NN_WARPS, NB_NN_WARPS, NB_NN_SLOTS, NB_NN_SLOTS);
}

int nb_emit_nn_block_accum(const nb_emitter *e)
{
    for (int i = 0; i < e->nhelpers; i++)
        if (strcmp(e->helper_names[i], "nb_nn_block") == 0) return 1;
    return 0;
}

/* W's element (i, j) at byte stride ws: w + (off + 16 i + j) * ws */
#define WEL "(ok ? *(const float *)(w + (long long)(off + 16 * (%s) + (%s)) * ws) : 0.0f)"

static void matvec_c(nb_emitter *e, nb_strbuf *o, const char *an, int transpose, const char *atomic_add)
{
    (void)e;
    (void)atomic_add;
    APPEND(o, "    %s y;\n", an);
    APPEND(o, "    for (int i = 0; i < 16; i++) {\n        float s = 0.0f;\n");
    if (!transpose)
        APPEND(o, "        for (int j = 0; j < 16; j++) s += " WEL " * x.a[j];\n", "i", "j");
    else
        APPEND(o, "        for (int j = 0; j < 16; j++) s += " WEL " * x.a[j];\n", "j", "i");
    APPEND(o, "        y.a[i] = ok ? s : nb_nn_nan();\n    }\n    return y;\n");
}

static const char *matvec_helper(nb_emitter *e, int transpose, const char *an)
{
    const char *nm = transpose ? "nb_nn_matvec16_t" : "nb_nn_matvec16";
    if (!nb_emit_need_helper(e, nm)) return nm;
    nan_helper(e);
    const char *kw = nb_emit_inline_kw(e);
    nb_strbuf *h = &e->helpers;
    if (e->target != NB_TARGET_CUDA) {
        APPEND(h, "/* %s: W%s x, W = w[off .. off + 256) row-major (byte stride ws) */\n", nm, transpose ? "^T" : "");
        APPEND(h, "%s %s %s(const char *w, long long ws, long long n, int off, %s x) {\n"
              "    const int ok = off >= 0 && (long long)off + 256 <= n; /* (else: NaN, never out of bounds) */\n", kw, an, nm, an);
        matvec_c(e, h, an, transpose, NULL);
        APPEND(h, "}\n");
        return nm;
    }
    cuda_common(e);
    APPEND(h, "/* %s: W%s x over the warp's 32 lanes on tensor cores (f16 operands, f32 accumulation) */\n", nm,
           transpose ? "^T" : "");
    APPEND(h, "%s %s %s(const char *w, long long ws, long long n, int off, %s x) {\n"
              "    const int ok = off >= 0 && (long long)off + 256 <= n; /* (else: NaN, never out of bounds) */\n", kw, an, nm, an);
    APPEND(h, "#if __CUDA_ARCH__ >= 800\n");
    APPEND(h, "    float *buf = nb_nn_warp_buf();\n"
              "    unsigned *xs = (unsigned *)buf; /* [32 lanes][12 words]: x as f16 pairs (conflict-free B loads) */\n"
              "    const unsigned lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;\n"
              "#pragma unroll\n"
              "    for (int k = 0; k < 8; k++) xs[lane * 12 + k] = nb_nn_h2(x.a[2 * k], x.a[2 * k + 1]);\n");
    /* A fragment: a[0] (g, 2q..), a[1] (g+8, 2q..), a[2] (g, 2q+8..), a[3] (g+8, 2q+8..) */
    APPEND(h, "    unsigned a[4];\n");
    for (int k = 0; k < 4; k++) {
        char m[32], kk0[32], kk1[32];
        snprintf(m, sizeof m, "g%s", (k & 1) ? " + 8" : "");
        snprintf(kk0, sizeof kk0, "2 * q%s", (k & 2) ? " + 8" : "");
        snprintf(kk1, sizeof kk1, "2 * q + 1%s", (k & 2) ? " + 8" : "");
        /* A(m, k) = W(m, k) or, transposed, W(k, m) */
        if (!transpose)
            APPEND(h, "    a[%d] = nb_nn_h2(" WEL ", " WEL ");\n", k, m, kk0, m, kk1);
        else
            APPEND(h, "    a[%d] = nb_nn_h2(" WEL ", " WEL ");\n", k, kk0, m, kk1, m);
    }
    APPEND(h, "    __syncwarp();\n"
              "    unsigned b[4][2];\n"
              "#pragma unroll\n"
              "    for (int t = 0; t < 4; t++) { b[t][0] = xs[(8 * t + g) * 12 + q]; b[t][1] = xs[(8 * t + g) * 12 + q + 4]; }\n"
              "    __syncwarp(); /* ys below reuses the buffer */\n"
              "    float *ys = buf; /* [32 lanes][20]: y */\n"
              "    const float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n"
              "#pragma unroll\n"
              "    for (int t = 0; t < 4; t++) {\n"
              "        float d[4];\n"
              "        nb_nn_mma(d, a, b[t][0], b[t][1], z);\n"
              "        /* d: (row g, lanes 8t+2q, 8t+2q+1), (row g+8, same lanes) */\n"
              "        ys[(8 * t + 2 * q) * 20 + g] = d[0]; ys[(8 * t + 2 * q + 1) * 20 + g] = d[1];\n"
              "        ys[(8 * t + 2 * q) * 20 + g + 8] = d[2]; ys[(8 * t + 2 * q + 1) * 20 + g + 8] = d[3];\n"
              "    }\n"
              "    __syncwarp();\n"
              "    %s y;\n"
              "#pragma unroll\n"
              "    for (int k = 0; k < 4; k++) {\n"
              "        const float4 v = *(const float4 *)(ys + lane * 20 + 4 * k);\n"
              "        y.a[4 * k] = v.x; y.a[4 * k + 1] = v.y; y.a[4 * k + 2] = v.z; y.a[4 * k + 3] = v.w;\n"
              "    }\n"
              "    if (!ok)\n"
              "        for (int k = 0; k < 16; k++) y.a[k] = nb_nn_nan();\n"
              "    __syncwarp(); /* the buffer is free for the next call */\n"
              "    return y;\n",
           an);
    APPEND(h, "#else\n");
    matvec_c(e, h, an, transpose, NULL);
    APPEND(h, "#endif\n}\n");
    return nm;
}

static const char *outer_helper(nb_emitter *e, const char *an)
{
    const char *nm = "nb_nn_outer16_acc";
    if (!nb_emit_need_helper(e, nm)) return nm;
    const char *kw = nb_emit_inline_kw(e);
    nb_strbuf *h = &e->helpers;
    if (e->target != NB_TARGET_CUDA) {
        APPEND(h, "/* %s: grad(w)[off + 16 i + j] += dy[i] x[j] (byte stride ws; nothing without a gradient) */\n", nm);
        APPEND(h, "%s void %s(char *w, long long ws, long long n, int off, %s dy, %s x) {\n"
              "    const int ok = off >= 0 && (long long)off + 256 <= n;\n", kw, nm, an, an);
        APPEND(h, "    if (!w || !ok) return;\n"
                  "    for (int i = 0; i < 16; i++) {\n"
                  "        if (dy.a[i] == 0.0f) continue;\n"
                  "        for (int j = 0; j < 16; j++) {\n"
                  "            unsigned *p = (unsigned *)(w + (long long)(off + 16 * i + j) * ws);\n"
                  "            const float v = dy.a[i] * x.a[j];\n"
                  "            union { float f; unsigned u; } o_, n_;\n"
                  "            o_.u = __atomic_load_n(p, __ATOMIC_RELAXED);\n"
                  "            do { n_.f = o_.f + v; } while (!__atomic_compare_exchange_n(p, &o_.u, n_.u, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));\n"
                  "        }\n"
                  "    }\n}\n");
        return nm;
    }
    cuda_common(e);
    cuda_block_accum(e);
    APPEND(h, "/* %s: grad(w)[off + 16 i + j] += sum over the warp's lanes of dy[i] x[j]: tensor cores, then\n"
              " * one atomicAdd per weight per warp */\n", nm);
    APPEND(h, "%s void %s(char *w, long long ws, long long n, int off, %s dy, %s x) {\n"
              "    const int ok = off >= 0 && (long long)off + 256 <= n;\n", kw, nm, an, an);
    APPEND(h, "#if __CUDA_ARCH__ >= 800\n"
              "    float *buf = nb_nn_warp_buf();\n"
              "    /* transposed f16 staging: dyT[i][lane], xT[j][lane], rows of 40 halves (20 words) */\n"
              "    unsigned short *dyT = (unsigned short *)buf, *xT = dyT + 16 * 40;\n"
              "    const unsigned lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;\n"
              "#pragma unroll\n"
              "    for (int i = 0; i < 16; i++) { dyT[i * 40 + lane] = nb_nn_h1(dy.a[i]); xT[i * 40 + lane] = nb_nn_h1(x.a[i]); }\n"
              "    __syncwarp();\n"
              "    const unsigned *dyw = (const unsigned *)dyT, *xw = (const unsigned *)xT;\n"
              "    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};\n"
              "#pragma unroll\n"
              "    for (int s = 0; s < 2; s++) { /* K = lanes 16s .. 16s + 15 */\n"
              "        unsigned a[4];\n"
              "        /* A(m = i, k = lane): (g, 2q..), (g+8, 2q..), (g, 2q+8..), (g+8, 2q+8..) */\n"
              "        a[0] = dyw[g * 20 + 8 * s + q]; a[1] = dyw[(g + 8) * 20 + 8 * s + q];\n"
              "        a[2] = dyw[g * 20 + 8 * s + q + 4]; a[3] = dyw[(g + 8) * 20 + 8 * s + q + 4];\n"
              "#pragma unroll\n"
              "        for (int u = 0; u < 2; u++) { /* N = j in 8u .. 8u + 7; B(k = lane, n = j) */\n"
              "            const unsigned b0 = xw[(8 * u + g) * 20 + 8 * s + q], b1 = xw[(8 * u + g) * 20 + 8 * s + q + 4];\n"
              "            nb_nn_mma(acc[u], a, b0, b1, acc[u]);\n"
              "        }\n"
              "    }\n"
              "    __syncwarp(); /* the buffer is free for the next call */\n"
              "    if (!w || !ok) return;\n"
              "    const int slot = nb_nn_slot((unsigned long long)(w + (long long)off * ws), ws);\n"
              "    if (slot >= 0) { /* into this warp's sums (its own 8 values per lane: no atomics) */\n"
              "        float4 *sa = (float4 *)(nb_nn_block()->acc[threadIdx.x >> 5][slot] + lane * 8);\n"
              "        float4 v0 = sa[0], v1 = sa[1];\n"
              "        v0.x += acc[0][0]; v0.y += acc[0][1]; v0.z += acc[0][2]; v0.w += acc[0][3];\n"
              "        v1.x += acc[1][0]; v1.y += acc[1][1]; v1.z += acc[1][2]; v1.w += acc[1][3];\n"
              "        sa[0] = v0; sa[1] = v1;\n"
              "        return;\n"
              "    }\n"
              "#pragma unroll\n"
              "    for (int u = 0; u < 2; u++) { /* acc[u]: (i = g, j = 8u+2q, +1), (i = g+8, same j) */\n"
              "        const int j = 8 * u + 2 * q;\n"
              "        atomicAdd((float *)(w + (long long)(off + 16 * g + j) * ws), acc[u][0]);\n"
              "        atomicAdd((float *)(w + (long long)(off + 16 * g + j + 1) * ws), acc[u][1]);\n"
              "        atomicAdd((float *)(w + (long long)(off + 16 * (g + 8) + j) * ws), acc[u][2]);\n"
              "        atomicAdd((float *)(w + (long long)(off + 16 * (g + 8) + j + 1) * ws), acc[u][3]);\n"
              "    }\n"
              "#else\n"
              "    if (!w || !ok) return;\n"
              "    for (int i = 0; i < 16; i++)\n"
              "        for (int j = 0; j < 16; j++) atomicAdd((float *)(w + (long long)(off + 16 * i + j) * ws), dy.a[i] * x.a[j]);\n"
              "#endif\n}\n");
    return nm;
}

/* Renders a call of an NN_* intrinsic: args[0] is the tensor value, args[1] the offset, then
 * the float[16] vectors. */
void nb_emit_nn_intrinsic(nb_emitter *e, int id, const nb_type *const *at, const char *const *args, int n,
                          nb_strbuf *o)
{
    if (n < 3 || !at[0] || at[0]->kind != NB_TY_TENSOR) {
        nb_emit_fail(e, "bad use of intrinsic '%s'", nb_intrinsic_name(id));
        return;
    }
    const char *an = nb_emit_ctype(e, at[2]);
    if (id == NB_INTR_NN_OUTER16_ACC) {
        if (n < 4) {
            nb_emit_fail(e, "bad use of intrinsic '%s'", nb_intrinsic_name(id));
            return;
        }
        const char *h = outer_helper(e, an);
        APPEND(o, "%s((%s).grad, (%s).grad_strides[0], (%s).shape[0], %s, %s, %s)", h, args[0], args[0], args[0], args[1], args[2],
           args[3]);
        return;
    }
    const char *h = matvec_helper(e, id == NB_INTR_NN_MATVEC16_T, an);
    APPEND(o, "%s((const char *)(%s).data, (%s).strides[0], (%s).shape[0], %s, %s)", h, args[0], args[0], args[0], args[1],
           args[2]);
}

/* CUDA, kernels that iterate whole warps (callgen.c): DiffTensor gradient adds (the reverse
 * sweep's `tgatomic_add`) aggregated over the warp — runs of consecutive lanes adding into the
 * same element (neighbouring pixels hitting one feature-grid corner) are summed by a segmented
 * shuffle reduction (5 steps for all runs at once) and the run's first lane adds, so a warp
 * issues one atomic per run instead of one per lane. Equal addresses that are not adjacent are
 * separate runs (still correct). Falls back to plain atomics when the warp is not converged or
 * no two neighbours share an address. Returns the helper's name. */
const char *nb_emit_nn_warp_red_helper(nb_emitter *e)
{
    const char *nm = "nb_warp_red_add_f32";
    if (!nb_emit_need_helper(e, nm)) return nm;
    APPEND(&e->helpers,
           "/* atomicAdd(p, v), one atomic per run of consecutive lanes with the same p */\n"
           "static __device__ __forceinline__ void nb_warp_red_add_f32(float *p, float v) {\n"
           "    const unsigned full = 0xffffffffu;\n"
           "    if (__activemask() != full) { atomicAdd(p, v); return; }\n"
           "    const unsigned lane = threadIdx.x & 31;\n"
           "    const unsigned long long a = (unsigned long long)p, prev = __shfl_up_sync(full, a, 1);\n"
           "    const bool head = lane == 0 || prev != a;\n"
           "    const unsigned heads = __ballot_sync(full, head);\n"
           "    if (heads == full) { atomicAdd(p, v); return; }\n"
           "    const unsigned after = heads & ~((2u << lane) - 1u); /* run heads above this lane */\n"
           "    const unsigned end = after ? (unsigned)__ffs(after) - 1u : 32u; /* first lane of the next run */\n"
           "    float s = v;\n"
           "    for (unsigned o = 1; o < 32; o <<= 1) {\n"
           "        const float t = __shfl_down_sync(full, s, o);\n"
           "        if (lane + o < end) s += t;\n"
           "    }\n"
           "    if (head) atomicAdd(p, s);\n}\n");
    return nm;
}
