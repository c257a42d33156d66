// CPU emulation of the CUDA layer under the tape's CUDA rows (tape_cuda_basic.c, tape_cuda_norm.c),
// to run tests/test_nn_tape_cuda.c and tools/device/tapecuda_bench.c without a GPU (build and run:
// tools/device/tapecuda_emu.sh). Device memory = host memory, filled with NaN when allocated (a
// read of memory no one wrote shows); the kernel sources are compiled as C++ and every launch runs
// one pthread per CUDA thread of a block, blocks one after another (__shared__ = static,
// __syncthreads = a barrier, __shfl_xor_sync = an exchange through a per-warp slot array and
// barrier). Plain launches get at most 3 blocks, so grid-stride loops take several rounds.
// bf16 storage: the NB_CUDA_BF16_HELPERS of src/nn/common/bf16_cuda.h are host functions here (same
// rounding); 4-element bf16 accesses check their 8-byte alignment. The cast op's kernel
// (src/nn/tape/tape_cast.c) is emulated too.
// Not emulated: misaligned f32 vector accesses (fine on x86), register / shared-memory limits, timing.
// The rows of linear / conv2d / attention are absent here (NB_ERR_UNSUPPORTED).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <string>
#include <vector>

struct uint3_ { unsigned x, y, z; };
static thread_local uint3_ threadIdx, blockIdx;
static uint3_ blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct uint2 { unsigned x, y; };
static inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
#define __expf(x) expf(x)
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
template <class T> static inline T __ldg(const T *p) { return *p; }
static std::mutex g_atomic;
static inline float atomicAdd(float *p, float v) { std::lock_guard<std::mutex> l(g_atomic); float o = *p; *p = o + v; return o; }
static pthread_barrier_t g_block_bar;
static std::vector<pthread_barrier_t> g_warp_bar;
static std::vector<double> g_slots;
static inline void __syncthreads() { pthread_barrier_wait(&g_block_bar); }
static inline unsigned lin_tid() { return threadIdx.x + threadIdx.y * blockDim.x; }
template <class T> static inline T shfl_xor(T v, int o) {
    unsigned t = lin_tid(), w = t / 32, lane = t % 32;
    g_slots[t] = (double)v;
    pthread_barrier_wait(&g_warp_bar[w]);
    T r = (T)g_slots[w * 32 + (lane ^ (unsigned)o)];
    pthread_barrier_wait(&g_warp_bar[w]);
    return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int o) { return shfl_xor<float>(v, o); }
static inline double __shfl_xor_sync(unsigned, double v, int o) { return shfl_xor<double>(v, o); }

// The bf16 helpers of src/nn/common/bf16_cuda.h (NB_CUDA_BF16_HELPERS), on the host: the same
// semantics (bf16 = top 16 bits of the f32, f32 -> bf16 rounds to nearest even, NaN kept).
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float nb_bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
static inline unsigned short nb_f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); /* NaN */
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline unsigned nb_f2bf2(float lo, float hi) { return (unsigned)nb_f2bf(lo) | (unsigned)nb_f2bf(hi) << 16; }
static inline float nb_ld(const void *p, long long i, int bf) {
    return bf ? nb_bf2f(((const unsigned short *)p)[i]) : ((const float *)p)[i];
}
static inline void nb_st(void *p, long long i, int bf, float v) {
    if (bf) ((unsigned short *)p)[i] = nb_f2bf(v); else ((float *)p)[i] = v;
}
static inline float4 nb_ld4(const void *p, long long i, int bf) {
    if (bf && ((uintptr_t)((const unsigned short *)p + i) & 7u)) { fprintf(stderr, "emu: misaligned bf16 x4 load\n"); abort(); }
    return make_float4(nb_ld(p, i, bf), nb_ld(p, i + 1, bf), nb_ld(p, i + 2, bf), nb_ld(p, i + 3, bf));
}
static inline void nb_st4(void *p, long long i, int bf, float4 v) {
    if (bf && ((uintptr_t)((unsigned short *)p + i) & 7u)) { fprintf(stderr, "emu: misaligned bf16 x4 store\n"); abort(); }
    nb_st(p, i, bf, v.x); nb_st(p, i + 1, bf, v.y); nb_st(p, i + 2, bf, v.z); nb_st(p, i + 3, bf, v.w);
}

#include "basic.cu" /* extracted from src/nn/tape/tape_cuda_basic.c by tapecuda_emu.sh */
#include "norm.cu"  /* from src/nn/norm/tape_cuda_norm.c */
#include "cast.cu"  /* from src/nn/tape/tape_cast.c */

typedef void (*kfn)(const void *);
struct kent { const char *name; kfn fn; };
#define K(n, T) {#n, [](const void *a) { n(*(const T *)a); }}
static const kent g_kernels[] = {
    K(tk_add_scalar, A), K(tk_silu_fwd, A), K(tk_silu_bwd, A), K(tk_add_fwd, A), K(tk_acc, A),
    K(tk_addc_fwd, A), K(tk_addc_bwd, A), K(tk_concat_fwd, A), K(tk_concat_bwd, A),
    K(tk_up_fwd, A), K(tk_up_bwd, A), K(tk_pool_fwd, A), K(tk_pool_bwd, A), K(tk_mse_part, A),
    K(tk_mse_fin, A), K(tk_mse_bwd, A), K(tk_transpose, A), K(tk_slice_fwd, A),
    K(tk_slice_bwd, A), K(tk_temb, TE), K(gn_fwd2, G), K(gn_fwd4, G), K(gn_fwd8, G),
    K(gn_bwd2, G), K(gn_bwd4, G), K(gn_dgb, G), K(gn_fwd2_bf, G), K(gn_fwd4_bf, G),
    K(gn_fwd8_bf, G), K(gn_bwd2_bf, G), K(gn_bwd4_bf, G), K(tk_cast, CastP),
};

struct launch { kfn fn; const void *args; };
struct wctx { launch *L; unsigned t; };
static void *run_thread(void *p) {
    wctx *c = (wctx *)p;
    threadIdx = {c->t % blockDim.x, c->t / blockDim.x, 0};
    for (unsigned bz = 0; bz < gridDim.z; bz++)
        for (unsigned by = 0; by < gridDim.y; by++)
            for (unsigned bx = 0; bx < gridDim.x; bx++) {
                blockIdx = {bx, by, bz};
                c->L->fn(c->L->args);
                pthread_barrier_wait(&g_block_bar); // block done before the next reuses statics
            }
    return nullptr;
}
static void run(kfn fn, const void *args, const unsigned g[3], const unsigned b[3]) {
    blockDim = {b[0], b[1], b[2]};
    gridDim = {g[0], g[1], g[2]};
    unsigned n = b[0] * b[1] * b[2];
    if (n % 32) { fprintf(stderr, "emu: block of %u threads\n", n); abort(); }
    pthread_barrier_init(&g_block_bar, nullptr, n);
    g_warp_bar.resize(n / 32);
    for (auto &w : g_warp_bar) pthread_barrier_init(&w, nullptr, 32);
    g_slots.assign(n, 0.0);
    launch L{fn, args};
    std::vector<pthread_t> th(n);
    std::vector<wctx> cx(n);
    for (unsigned t = 0; t < n; t++) {
        cx[t] = {&L, t};
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, 256 * 1024);
        pthread_create(&th[t], &at, run_thread, &cx[t]);
        pthread_attr_destroy(&at);
    }
    for (unsigned t = 0; t < n; t++) pthread_join(th[t], nullptr);
    for (auto &w : g_warp_bar) pthread_barrier_destroy(&w);
    pthread_barrier_destroy(&g_block_bar);
}

extern "C" {
#include "nabla/device.h"
#include "nabla/status.h"
#include "nn/tape/tape_internal.h"

struct nb_device { int kind; int refs; char name[16]; };
static nb_device g_cuda = {1, 0, "cuda:0"}, g_cpu = {0, 0, "cpu"};
static uint64_t g_driver_allocs;
struct nb_buffer { void *p; size_t n; };
struct nb_jit_kernel { const kent *k; };
static nb_jit_kernel g_handles[sizeof g_kernels / sizeof g_kernels[0]];

nb_status nb_device_open(const char *spec, nb_device **out) {
    if (!strncmp(spec, "cuda", 4)) *out = &g_cuda;
    else if (!strcmp(spec, "cpu")) *out = &g_cpu;
    else return nb_error(NB_ERR_INVALID_ARG, "emu: device %s", spec);
    (*out)->refs++;
    return NB_OK;
}
void nb_device_close(nb_device *d) { if (d && --d->refs < 0) { fprintf(stderr, "emu: refcount < 0\n"); abort(); } }
nb_device_kind nb_device_get_kind(const nb_device *d) { return (nb_device_kind)d->kind; }
const char *nb_device_name(const nb_device *d) { return d->name; }
nb_stream *nb_device_stream(nb_device *d) { return (nb_stream *)d; }
nb_status nb_buffer_alloc(nb_device *, size_t n, nb_buffer **out) {
    nb_buffer *b = new nb_buffer;
    b->p = aligned_alloc(256, (n + 255) / 256 * 256);
    memset(b->p, 0xFF, n); /* NaN: reading memory nobody wrote shows */
    b->n = n;
    g_driver_allocs++;
    *out = b;
    return NB_OK;
}
void nb_buffer_release(nb_buffer *b) { if (b) { free(b->p); delete b; } }
void *nb_buffer_ptr(const nb_buffer *b) { return b->p; }
nb_status nb_memcpy_h2d(nb_device *, void *d, const void *s, size_t n) { memcpy(d, s, n); return NB_OK; }
nb_status nb_memcpy_d2h(nb_device *, void *d, const void *s, size_t n) { memcpy(d, s, n); return NB_OK; }
nb_status nb_memcpy_d2d(nb_device *, void *d, const void *s, size_t n) { memmove(d, s, n); return NB_OK; }
nb_status nb_memset(nb_device *, void *d, int v, size_t n) { memset(d, v, n); return NB_OK; }
nb_status nb_device_mem_stats(nb_device *, nb_mem_stats *m) { memset(m, 0, sizeof *m); m->driver_allocs = g_driver_allocs; return NB_OK; }
nb_status nb_nn_cuda_kernel(nb_device *, const char *, const char *entry, nb_jit_kernel **out) {
    for (size_t i = 0; i < sizeof g_kernels / sizeof g_kernels[0]; i++)
        if (!strcmp(g_kernels[i].name, entry)) { g_handles[i].k = &g_kernels[i]; *out = &g_handles[i]; return NB_OK; }
    return nb_error(NB_ERR_NOT_FOUND, "emu: no kernel %s", entry);
}
nb_status nb_jit_launch_cuda(nb_jit_kernel *k, const void *params, size_t, int64_t n, nb_stream *) {
    if (n <= 0) return NB_OK;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 3) blocks = 3; /* small grids: the grid-stride loops run several rounds */
    const unsigned g[3] = {(unsigned)blocks, 1, 1}, b[3] = {256, 1, 1};
    run(k->k->fn, params, g, b);
    return NB_OK;
}
nb_status nb_jit_launch_cuda_grid(nb_jit_kernel *k, const void *params, size_t, const unsigned g[3],
                                  const unsigned b[3], nb_stream *) {
    run(k->k->fn, params, g, b);
    return NB_OK;
}
const nb_top_cuda_impl nb_top_linear_cuda = {0, 0, 0}, nb_top_conv2d_cuda = {0, 0, 0},
                       nb_top_attention_cuda = {0, 0, 0}, nb_top_qkv_attention_cuda = {0, 0, 0};
}
extern "C" {
struct nb_event { int x; };
nb_status nb_event_create(nb_device *, nb_event **e) { *e = new nb_event; return NB_OK; }
void nb_event_destroy(nb_event *e) { delete e; }
nb_status nb_event_record(nb_event *, nb_stream *) { return NB_OK; }
nb_status nb_event_synchronize(nb_event *) { return NB_OK; }
nb_status nb_event_elapsed_ms(nb_event *, nb_event *, float *ms) { *ms = 1.0f; return NB_OK; }
static nb_device_info g_info = {NB_DEVICE_CUDA, 0, "emulated", 9, 0};
const nb_device_info *nb_device_get_info(const nb_device *) { return &g_info; }
}
extern "C" nb_status nb_device_synchronize(nb_device *) { return NB_OK; }
extern "C" nb_status nb_device_empty_cache(nb_device *) { return NB_OK; }
