// CPU emulation of the whole-sequence attention kernels nb_attn_fwd_fa / nb_attn_bwd_fa
// (src/nn/attention/kernels/tc.cu), to check them without a GPU (build and run: tests/emu/attn2_emu.sh).
// The kernel files (attn_common.cuh, atomic.cuh, tc_frag.cuh, fa.cuh of one module variant) are compiled
// as C++ with the PTX helpers (NB_ATTN_SRC_TC_ASM, NB_ATTN_SRC_FA_ASM, the bf16 helpers) replaced
// by host code: one pthread per CUDA thread, blocks one after another; mma.sync (bf16 m16n8k16,
// tf32 m16n8k8) and ldmatrix (.x4 / .x2, .trans) are warp-collective exchanges through per-warp
// slots and barriers, with the PTX fragment layouts; cp.async copies at once. Shared memory is
// filled with 0xff (NaN) before each block. Checks: forward o / lse and the backward's dq, dk, dv
// (STORE mode over NaN-filled gradients: every element must be written; ADD mode over ones)
// against a double reference on the rounded inputs, on the legacy qkv layout.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <vector>

struct uint3_ { unsigned x, y, z; };
static thread_local uint3_ threadIdx, blockIdx;
static uint3_ blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
static inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned f2u(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline unsigned __float_as_uint(float f) { return f2u(f); }
static std::mutex g_atomic;
static inline float atomicAdd(float *p, float v) { std::lock_guard<std::mutex> l(g_atomic); float o = *p; *p = o + v; return o; }
static pthread_barrier_t g_block_bar;
static std::vector<pthread_barrier_t> g_warp_bar;
static inline void __syncthreads() { pthread_barrier_wait(&g_block_bar); }
static inline void wbar() { pthread_barrier_wait(&g_warp_bar[threadIdx.x / 32]); }
static double g_fslot[512];
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
    g_fslot[t] = v;
    wbar();
    float r = (float)g_fslot[w * 32 + (lane ^ (unsigned)o)];
    wbar();
    return r;
}
// bf16 helpers (src/graph/kernels/bf16.cuh): round to nearest even
static inline float nb_bf2f(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
static inline unsigned short nb_f2bf(float f) {
    unsigned u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline unsigned nb_f2bf2(float lo, float hi) { return nb_f2bf(lo) | ((unsigned)nb_f2bf(hi) << 16); }
static inline float nb_ld(const void *p, long long i, int bf) {
    return bf ? nb_bf2f(((const unsigned short *)p)[i]) : ((const float *)p)[i];
}
static inline void nb_st(void *p, long long i, int bf, float v) {
    if (bf) ((unsigned short *)p)[i] = nb_f2bf(v); else ((float *)p)[i] = v;
}
static inline float4 nb_ld4(const void *p, long long i, int bf) {
    return {nb_ld(p, i, bf), nb_ld(p, i + 1, bf), nb_ld(p, i + 2, bf), nb_ld(p, i + 3, bf)};
}
typedef unsigned int u32;
// the kernel prefix (DP, IS_BF16, FM, SBF) and NB_ATTN_SRC_HEAD
#include "attn2_emu_head.inc"
// NB_ATTN_SRC_TC_ASM
static inline u32 cvt2(float lo, float hi) { return nb_f2bf2(lo, hi); }
static inline u32 cvt1(float x) { // cvt.rna.tf32.f32
    unsigned u = f2u(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}
static u32 g_slot[512][10];
static const void *g_pslot[512];
static inline float opv(u32 r, int half) { return IS_BF16 ? __uint_as_float(half ? (r & 0xffff0000u) : (r << 16)) : __uint_as_float(r); }
static inline void mma(float *c, const u32 *a, const u32 *b) {
    const unsigned t0 = threadIdx.x, w = t0 / 32, lane = t0 % 32;
    for (int i = 0; i < 4; i++) g_slot[t0][i] = a[i];
    g_slot[t0][4] = b[0], g_slot[t0][5] = b[1];
    wbar();
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int r = g + 8 * (i >> 1), n = 2 * t + (i & 1);
        double s = c[i];
        const int K = IS_BF16 ? 16 : 8;
        for (int k = 0; k < K; k++) {
            float av, bv;
            if (IS_BF16) {
                const u32 *A = g_slot[w * 32 + (r % 8) * 4 + (k % 8) / 2];
                av = opv(A[(r >= 8) + 2 * (k >= 8)], k & 1);
                const u32 *B = g_slot[w * 32 + n * 4 + (k % 8) / 2];
                bv = opv(B[4 + (k >= 8)], k & 1);
            } else {
                const u32 *A = g_slot[w * 32 + (r % 8) * 4 + k % 4];
                av = opv(A[(r >= 8) + 2 * (k >= 4)], 0);
                const u32 *B = g_slot[w * 32 + n * 4 + k % 4];
                bv = opv(B[4 + (k >= 4)], 0);
            }
            s += (double)av * bv;
        }
        g_fslot[t0] = 0; // (unused)
        c[i] = (float)s;
    }
    wbar();
}
#include "attn2_emu_frag.inc" // NB_ATTN_SRC_ATOMIC, NB_ATTN_SRC_TC_FRAG
// NB_ATTN_SRC_FA_ASM
static inline void cp16(void *s, const void *g) { memcpy(s, g, 16); }
static pthread_barrier_t g_named[16];
static inline void nbar_sync(int id, int n) { (void)n; pthread_barrier_wait(&g_named[id]); }
static inline void nbar_arrive(int id, int n) { (void)n; pthread_barrier_wait(&g_named[id]); }
static inline void cp_commit() {}
static inline void cp_wait_n(int) {}
static void ldsm(u32 *r, const void *p, int nmat, bool trans) {
    const unsigned t0 = threadIdx.x, w = t0 / 32, lane = t0 % 32;
    g_pslot[t0] = p;
    wbar();
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < nmat; i++) {
        const unsigned short *row[8];
        for (int j = 0; j < 8; j++) {
            row[j] = (const unsigned short *)g_pslot[w * 32 + 8 * i + j];
            if (((uintptr_t)row[j] & 15) != 0) { fprintf(stderr, "ldmatrix: misaligned row\n"); abort(); }
        }
        unsigned lo, hi;
        if (!trans) lo = row[g][2 * t], hi = row[g][2 * t + 1];
        else lo = row[2 * t][g], hi = row[2 * t + 1][g];
        r[i] = lo | (hi << 16);
    }
    wbar();
}
static inline void ldsm4(u32 *r, const void *p) { ldsm(r, p, 4, false); }
static inline void ldsm4t(u32 *r, const void *p) { ldsm(r, p, 4, true); }
static inline void ldsm2t(u32 *r, const void *p) { ldsm(r, p, 2, true); }
static unsigned char *g_dyn_smem;
static int g_split = 0;
static inline int min(int a, int b) { return a < b ? a : b; }
#include "attn2_emu_fa.inc" // NB_ATTN_SRC_FA (dynamic shared memory -> g_dyn_smem)

// ---- launch --------------------------------------------------------------------------------
template <class A> struct Launch { void (*fn)(A); const A *args; unsigned bx; };
template <class A> static void *thread_main(void *p) {
    Launch<A> *L = (Launch<A> *)p;
    blockIdx = {L->bx, 0, 0};
    L->fn(*L->args);
    return nullptr;
}
template <class A> static void launch(void (*fn)(A), const A &args, unsigned blocks, unsigned threads, size_t smem) {
    static std::vector<unsigned char> sm;
    sm.assign(smem + 64, 0xff);
    g_dyn_smem = (unsigned char *)(((uintptr_t)sm.data() + 15) & ~(uintptr_t)15);
    blockDim = {threads, 1, 1};
    gridDim = {blocks, 1, 1};
    pthread_barrier_init(&g_block_bar, nullptr, threads);
    for (auto &b : g_named) pthread_barrier_init(&b, nullptr, 64);
    g_warp_bar.resize(threads / 32);
    for (auto &b : g_warp_bar) pthread_barrier_init(&b, nullptr, 32);
    std::vector<pthread_t> th(threads);
    std::vector<unsigned> tid(threads);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 << 10);
    for (unsigned b = 0; b < blocks; b++) {
        memset(g_dyn_smem, 0xff, smem);
        Launch<A> L = {fn, &args, b};
        struct Ctx { Launch<A> *L; unsigned t; };
        std::vector<Ctx> ctx(threads);
        for (unsigned t = 0; t < threads; t++) {
            ctx[t] = {&L, t};
            pthread_create(&th[t], &at, [](void *p) -> void * {
                Ctx *c = (Ctx *)p;
                threadIdx = {c->t, 0, 0};
                return thread_main<A>(c->L);
            }, &ctx[t]);
        }
        for (unsigned t = 0; t < threads; t++) pthread_join(th[t], nullptr);
    }
    pthread_barrier_destroy(&g_block_bar);
    for (auto &b : g_named) pthread_barrier_destroy(&b);
    for (auto &b : g_warp_bar) pthread_barrier_destroy(&b);
}

// ---- the check -----------------------------------------------------------------------------
static uint32_t rng = 12345;
static float frand() { rng = rng * 1664525u + 1013904223u; return ((rng >> 8) * (1.0f / 16777216.0f)) * 2 - 1; }
struct Buf { std::vector<unsigned char> b; int bf; long long n;
    Buf(long long n_, int bf_) : b(n_ * (bf_ ? 2 : 4) + 16), bf(bf_), n(n_) {}
    void *p() { return b.data(); }
    float get(long long i) { return nb_ld(b.data(), i, bf); }
    void set(long long i, float v) { nb_st(b.data(), i, bf, v); }
};
static double maxabs(const std::vector<double> &v) { double m = 0; for (double x : v) m = fmax(m, fabs(x)); return m; }

static int run_case(int BH, int L, int d, int qbf, int obf, double tol) {
    const int fm_ok = 1; (void)fm_ok;
    const long long nx = (long long)BH * 3 * d * L, no = (long long)BH * d * L;
    Buf X(nx, qbf), O(no, obf), G(no, obf), DX(nx, qbf);
    for (long long i = 0; i < nx; i++) X.set(i, 1.5f * frand());
    for (long long i = 0; i < no; i++) G.set(i, frand());
    std::vector<float> lse(BH * L, NAN);
    auto view = [&](Buf &b, int j, long long bs) { Mat m; m.p = (char *)b.p() + (size_t)j * d * L * (b.bf ? 2 : 4); m.bs = bs; m.rs = 1; m.cs = L; m.bf = b.bf; return m; };
    Mat q = view(X, 0, 3LL * d * L), k = view(X, 1, 3LL * d * L), v = view(X, 2, 3LL * d * L);
    Mat o = view(O, 0, (long long)d * L), gm = view(G, 0, (long long)d * L);
    Mat dq = view(DX, 0, 3LL * d * L), dk = view(DX, 1, 3LL * d * L), dv = view(DX, 2, 3LL * d * L);
    const float sl2 = (float)(1.4426950408889634 / sqrt((double)d)), scale = (float)(1.0 / sqrt((double)d));
    // forward
    const int cap = getenv("ATTN2_EMU_FWD_WARPS") ? atoi(getenv("ATTN2_EMU_FWD_WARPS")) : 8;
    const int nw = (L + 15) / 16 > cap ? cap : (L + 15) / 16, ntiles = (L + 16 * nw - 1) / (16 * nw);
    const size_t es = IS_BF16 ? 2 : 4, pad = IS_BF16 ? 8 : 4, tk64 = (L + 63) / 64 * 64;
    FwdArgs fa = {q, k, v, o, lse.data(), L, L, d, ntiles, sl2};
    launch<FwdArgs>(nb_attn_fwd_fa, fa, ntiles * BH, 32 * nw, (2 * DP * (tk64 + pad) + DP * (16 * nw + pad)) * es);
    // reference (double, on the stored inputs)
    int bad = 0;
    double eo = 0, el = 0, eg[3] = {0, 0, 0};
    for (int mode = 1; mode <= 2; mode++) {
        for (long long i = 0; i < nx; i++) DX.set(i, mode == 1 ? NAN : 1.0f);
        const int nwb = (L + 15) / 16;
        const size_t tk = (L + 15) / 16 * 16, tq = (L + 31) / 32 * 32;
        const size_t smb = (2 * DP * (tk + pad) + 2 * DP * (tq + pad) + 2 * tk * (32 + pad)) * es + 2 * tq * 4 + 2 * DP * 33 * 4;
        BwdArgs ba = {q, k, v, gm, dq, dk, dv, lse.data(), nullptr, mode, mode, L, L, d, 1, sl2, scale, o, g_split};
        launch<BwdArgs>(nb_attn_bwd_fa, ba, BH, 32 * nwb, smb); // (fa_flags & 1: ATTN2_EMU_SPLIT=1)
        if (getenv("ATTN2_EMU_SUM")) { double cs = 0; for (long long i = 0; i < nx; i++) cs += DX.get(i) * (double)(i % 7 + 1); printf("  dx checksum %.12e\n", cs); }
        for (int bh = 0; bh < BH; bh++) {
            auto Q = [&](int t, int f) { return (double)X.get(bh * 3LL * d * L + (long long)f * L + t); };
            auto K = [&](int t, int f) { return (double)X.get(bh * 3LL * d * L + (long long)(d + f) * L + t); };
            auto V = [&](int t, int f) { return (double)X.get(bh * 3LL * d * L + (long long)(2 * d + f) * L + t); };
            auto GO = [&](int t, int f) { return (double)G.get(bh * (long long)d * L + (long long)f * L + t); };
            std::vector<double> P(L * L), Or(L * d, 0), dP(L * L), dS(L * L), dQ(L * d, 0), dK(L * d, 0), dV(L * d, 0), lr(L);
            for (int i = 0; i < L; i++) {
                double mx = -1e300;
                for (int j = 0; j < L; j++) {
                    double s = 0;
                    for (int f = 0; f < d; f++) s += Q(i, f) * K(j, f);
                    P[i * L + j] = s / sqrt((double)d);
                    mx = fmax(mx, P[i * L + j]);
                }
                double sum = 0;
                for (int j = 0; j < L; j++) sum += (P[i * L + j] = exp(P[i * L + j] - mx));
                for (int j = 0; j < L; j++) P[i * L + j] /= sum;
                lr[i] = (mx + log(sum)) / log(2.0);
                for (int j = 0; j < L; j++)
                    for (int f = 0; f < d; f++) Or[i * d + f] += P[i * L + j] * V(j, f);
            }
            for (int i = 0; i < L; i++) {
                double D = 0;
                for (int f = 0; f < d; f++) D += GO(i, f) * O.get(bh * (long long)d * L + (long long)f * L + i);
                for (int j = 0; j < L; j++) {
                    double s = 0;
                    for (int f = 0; f < d; f++) s += GO(i, f) * V(j, f);
                    dS[i * L + j] = P[i * L + j] * (s - D) / sqrt((double)d);
                }
            }
            for (int i = 0; i < L; i++)
                for (int j = 0; j < L; j++)
                    for (int f = 0; f < d; f++) {
                        dQ[i * d + f] += dS[i * L + j] * K(j, f);
                        dK[j * d + f] += dS[i * L + j] * Q(i, f);
                        dV[j * d + f] += P[i * L + j] * GO(i, f);
                    }
            /* floors: with L = 1, dq = dk = 0 exactly (rounding noise only) */
            const double mo = fmax(maxabs(Or), 1e-3), mq = fmax(maxabs(dQ), 0.05 * maxabs(dV)), mk = fmax(maxabs(dK), 0.05 * maxabs(dV)), mv = fmax(maxabs(dV), 1e-3);
            for (int i = 0; i < L; i++) {
                if (mode == 1) el = fmax(el, fabs(lse[bh * L + i] - lr[i]));
                for (int f = 0; f < d; f++) {
                    if (mode == 1) eo = fmax(eo, fabs(O.get(bh * (long long)d * L + (long long)f * L + i) - Or[i * d + f]) / mo);
                    const double add = mode == 2 ? 1.0 : 0.0;
                    const long long base = bh * 3LL * d * L + (long long)f * L + i;
                    double x[3] = {DX.get(base), DX.get(base + (long long)d * L), DX.get(base + 2LL * d * L)};
                    double r[3] = {dQ[i * d + f] / mq, dK[i * d + f] / mk, dV[i * d + f] / mv};
                    double sc[3] = {mq, mk, mv};
                    for (int c = 0; c < 3; c++) {
                        double e = fabs((x[c] - add) / sc[c] - r[c]);
                        if (std::isnan(x[c])) e = 1e9;
                        eg[c] = fmax(eg[c], e);
                    }
                }
            }
        }
    }
    bad = !(eo < tol && el < 10 * tol && eg[0] < 2 * tol && eg[1] < 2 * tol && eg[2] < 2 * tol);
    printf("%s DP=%d %s qkv %s o %s BH=%d L=%d d=%d: err o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
           bad ? "FAIL" : "ok  ", DP, IS_BF16 ? "bf16" : "tf32", qbf ? "bf16" : "f32", obf ? "bf16" : "f32",
           BH, L, d, eo, el, eg[0], eg[1], eg[2]);
    return bad;
}

int main(int argc, char **argv) {
    int fails = 0;
    if (getenv("ATTN2_EMU_SPLIT")) g_split = atoi(getenv("ATTN2_EMU_SPLIT"));
    const int qbf = SBF == 2 ? 1 : SBF == 1 ? 1 : 0, obf = SBF == 2 ? 1 : 0;
    const double tol = IS_BF16 || qbf ? 3e-2 : 4e-3; /* bf16 operands or bf16 storage */
    struct { int BH, L, d; } cases[] = {{2, 64, DP}, {1, 256, DP}, {2, 37, DP - 3}, {1, 130, DP - 8}, {1, 8, DP / 2}, {1, 1, 3}};
    int n = sizeof cases / sizeof cases[0];
    if (argc > 1) n = atoi(argv[1]);
    for (int i = 0; i < n; i++) fails += run_case(cases[i].BH, cases[i].L, cases[i].d, qbf, obf, tol);
    printf("%d failed\n", fails);
    return fails != 0;
}
