/* Warp-aggregated atomic adds (emit_nn.c nb_warp_red_add): on CUDA, DiffTensor gradient adds and
 * atomic adds whose result is unused combine the lanes of a warp that add into one element before
 * the atomic. Here, without a GPU:
 *   - the call kernels (vectorized --bwd, explicit blocks, InterlockedAdd with and without its
 *     result) use the helper where they may and compile with NVRTC for sm_90 (PTX checked for the
 *     peer matching and the atomics);
 *   - the helper's two reductions, emulated lane by lane in C exactly as the CUDA does them, give
 *     every group's sum to exactly one lane for many random addresses and active masks.
 * The GPU runs of tests/lang/ad_grad_warp_add.slang check the results on a device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "device/cuda/cuda_api.h"
#include "lang/callsig.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nabla/status.h"
#include "nb_test.h"

static const char *SRC =
    "[Differentiable]\n"
    "float pick(DiffTensor<float, 1> t, int i) { return t[i]; }\n"
    "[Differentiable]\n"
    "double pickd(DiffTensor<double, 1> t, int i) { return t[i / 16]; }\n"
    "[CudaKernel]\n"
    "[Differentiable]\n"
    "void spread(DiffTensorView t, DiffTensorView o)\n"
    "{\n"
    "    uint3 id = cudaThreadIdx() + cudaBlockIdx() * cudaBlockDim();\n"
    "    if (id.x >= o.size(0) || id.y >= o.size(1)) return;\n"
    "    o[id.x, id.y] = t[id.x / 4, id.y / 2];\n"
    "}\n"
    "[CudaKernel]\n"
    "void hist(TensorView<float> h, TensorView<int> bin)\n"
    "{\n"
    "    uint i = (cudaThreadIdx() + cudaBlockIdx() * cudaBlockDim()).x;\n"
    "    if (i >= bin.size(0)) return;\n"
    "    float old;\n"
    "    h.InterlockedAdd(bin[i], 1.0, old);\n"
    "}\n"
    "[CudaKernel]\n"
    "void ticket(TensorView<float> h, TensorView<float> got)\n"
    "{\n"
    "    uint i = (cudaThreadIdx() + cudaBlockIdx() * cudaBlockDim()).x;\n"
    "    if (i >= got.size(0)) return;\n"
    "    float old;\n"
    "    h.InterlockedAdd(0, 1.0, old);\n"
    "    got[i] = old;\n"
    "}\n";

/* leaves: t = tensor f32, T = tensor f64, i = tensor i32, a = array i32, f = array f32, d = array f64 */
static nb_status emit(nb_program *p, const char *fn, nb_call_mode mode, int blocks, const char *leaves, nb_strbuf *src)
{
    nb_call_sig sig;
    memset(&sig, 0, sizeof sig);
    sig.func = fn;
    sig.target = NB_TARGET_CUDA;
    sig.mode = mode;
    sig.ndim = blocks ? 6 : 1;
    sig.blocks = blocks;
    sig.nleaves = (int)strlen(leaves);
    for (int i = 0; leaves[i]; i++) {
        char k = leaves[i];
        sig.leaves[i].param = -1;
        sig.leaves[i].path = "x";
        sig.leaves[i].bind = k == 't' || k == 'T' || k == 'i' ? NB_BIND_TENSOR : NB_BIND_ARRAY;
        sig.leaves[i].storage = k == 'a' || k == 'i' ? NB_I32 : k == 'T' || k == 'd' ? NB_F64 : NB_F32;
    }
    nb_call_layout lay;
    return nb_program_emit_call(p, &sig, src, &lay);
}

/* PTX of src for compute_90 into *ptx (caller frees); 0 when NVRTC is missing, -1 on failure */
static int nvrtc_ptx(const char *src, char **ptx)
{
    void *img = NULL;
    size_t size = 0;
    int cubin = 0;
    nb_status s = nb_nvrtc_compile(src, "warp_red.cu", "compute_90", NULL, &img, &size, &cubin);
    if (s == NB_ERR_UNSUPPORTED) return 0;
    if (s != NB_OK) {
        fprintf(stderr, "  NVRTC failed: %s\n", nb_last_error());
        return -1;
    }
    *ptx = malloc(size + 1);
    if (*ptx) {
        memcpy(*ptx, img, size);
        (*ptx)[size] = 0;
    }
    nb_free(img, size);
    return *ptx ? 1 : -1;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *q = strstr(s, what); q; q = strstr(q + 1, what)) n++;
    return n;
}

static void test_call_kernels(void)
{
    nb_program *p = NULL;
    NB_REQUIRE_OK(nb_program_compile_source("warp_red.slang", SRC, NULL, &p));
    struct {
        const char *fn;
        nb_call_mode mode;
        int blocks;
        const char *leaves;
        int aggregated; /* the kernel adds through nb_warp_red_add */
        const char *type;
    } ks[] = {
        {"pick", NB_CALL_BWD, 0, "taf", 1, "float"},    /* vectorized reverse mode */
        {"pickd", NB_CALL_BWD, 0, "Tad", 1, "double"},  /* double gradients */
        {"spread", NB_CALL_BWD, 1, "tt", 1, "float"},   /* slangtorch's .bwd launch: explicit 2-D blocks */
        {"hist", NB_CALL_PRIMAL, 1, "ti", 1, "float"},  /* InterlockedAdd, old value unused */
        {"ticket", NB_CALL_PRIMAL, 1, "tt", 0, NULL},   /* old value used: one atomic per lane */
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        nb_strbuf src;
        nb_strbuf_init(&src);
        nb_status s = emit(p, ks[i].fn, ks[i].mode, ks[i].blocks, ks[i].leaves, &src);
        NB_EXPECT_OK(s);
        if (s != NB_OK) {
            fprintf(stderr, "  %s: %s\n", ks[i].fn, nb_last_error());
            nb_strbuf_free(&src);
            continue;
        }
        const char *c = nb_strbuf_cstr(&src);
        char call[64];
        snprintf(call, sizeof call, "nb_warp_red_add((%s *)p, v);", ks[i].type ? ks[i].type : "float");
        NB_EXPECT((strstr(c, call) != NULL) == ks[i].aggregated);
        if (!ks[i].aggregated) NB_EXPECT(strstr(c, "return atomicAdd((float *)p, v);") != NULL);
        char *ptx = NULL;
        int r = nvrtc_ptx(c, &ptx);
        if (r) ran = 1;
        NB_EXPECT(r >= 0);
        if (r == 1) {
            /* the peer matching of partial warps, the run detection of full ones */
            NB_EXPECT((count(ptx, "match.any.sync.b64") > 0) == ks[i].aggregated);
            NB_EXPECT((count(ptx, "shfl.sync.up.b32") > 0) == ks[i].aggregated);
            NB_EXPECT(count(ptx, "atom.global.add") + count(ptx, "red.global.add") > 0);
            if (ks[i].aggregated && !strcmp(ks[i].type, "double"))
                NB_EXPECT(count(ptx, "add.f64") + count(ptx, ".f64") > 0);
        }
        if (r < 0) fprintf(stderr, "  kernel %s:\n%s\n", ks[i].fn, c);
        free(ptx);
        nb_strbuf_free(&src);
    }
    nb_program_free(p);
    if (!ran) NB_SKIP("NVRTC is not available: the CUDA was emitted but not compiled");
}

/* ---- the helper's reductions, one array slot per lane (mirrors emit_nn.c line by line) ---- */

static unsigned ffs32(unsigned x) { return x ? (unsigned)__builtin_ctz(x) + 1u : 0u; }

/* full warp: segmented suffix sums over runs of equal addresses; returns the mask of lanes that add */
static unsigned runs(const uint64_t a[32], const double v[32], double s[32])
{
    unsigned heads = 0;
    for (unsigned l = 0; l < 32; l++)
        if (l == 0 || a[l - 1] != a[l]) heads |= 1u << l;
    for (unsigned l = 0; l < 32; l++) s[l] = v[l];
    if (heads == 0xffffffffu) return heads;
    unsigned end[32];
    for (unsigned l = 0; l < 32; l++) {
        unsigned after = heads & ~(unsigned)((2ull << l) - 1u);
        end[l] = after ? ffs32(after) - 1u : 32u;
    }
    for (unsigned o = 1; o < 32; o <<= 1) {
        double t[32];
        for (unsigned l = 0; l < 32; l++) t[l] = l + o < 32 ? s[l + o] : s[l]; /* shfl_down keeps its own */
        for (unsigned l = 0; l < 32; l++)
            if (l + o < end[l]) s[l] += t[l];
    }
    return heads;
}

/* active lanes act: tree sums over groups of equal addresses; returns the mask of lanes that add */
static unsigned peers_tree(unsigned act, const uint64_t a[32], const double v[32], double s[32])
{
    unsigned above[32], rank[32], lead = 0;
    for (unsigned l = 0; l < 32; l++) {
        if (!(act >> l & 1u)) continue;
        unsigned peers = 0;
        for (unsigned m = 0; m < 32; m++)
            if ((act >> m & 1u) && a[m] == a[l]) peers |= 1u << m;
        unsigned me = 1u << l;
        above[l] = peers & ~(me | (me - 1u));
        rank[l] = (unsigned)__builtin_popcount(peers & (me - 1u));
        s[l] = v[l];
        if (rank[l] == 0) lead |= me;
    }
    for (;;) {
        int any = 0;
        for (unsigned l = 0; l < 32; l++)
            if ((act >> l & 1u) && above[l]) any = 1;
        if (!any) break;
        double t[32];
        for (unsigned l = 0; l < 32; l++)
            if (act >> l & 1u) t[l] = s[above[l] ? ffs32(above[l]) - 1u : l];
        unsigned odd = 0;
        for (unsigned l = 0; l < 32; l++)
            if ((act >> l & 1u) && (rank[l] & 1u)) odd |= 1u << l;
        for (unsigned l = 0; l < 32; l++) {
            if (!(act >> l & 1u)) continue;
            if (above[l]) s[l] += t[l];
            above[l] &= ~odd;
            rank[l] >>= 1;
        }
    }
    return lead;
}

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* every address's total arrives through exactly one adding lane (integers: exact sums) */
static int check(unsigned act, const uint64_t a[32], const double v[32], const double s[32], unsigned adders)
{
    for (unsigned l = 0; l < 32; l++) {
        if (!(act >> l & 1u)) continue;
        double want = 0, got = 0;
        int n = 0;
        for (unsigned m = 0; m < 32; m++) {
            if (!(act >> m & 1u) || a[m] != a[l]) continue;
            want += v[m];
            if (adders >> m & 1u) {
                got += s[m];
                n++;
            }
        }
        if (want != got || n < 1) return 0;
    }
    return (adders & ~act) == 0;
}

static void test_reductions_emulated(void)
{
    int bad_runs = 0, bad_peers = 0, one_per_addr = 1;
    for (int it = 0; it < 20000; it++) {
        uint64_t a[32];
        double v[32], s[32];
        unsigned pattern = (unsigned)it % 5, act;
        for (unsigned l = 0; l < 32; l++) {
            switch (pattern) {
            case 0: a[l] = 1000; break;                    /* one address */
            case 1: a[l] = 1000 + l; break;                /* all distinct */
            case 2: a[l] = 1000 + l / (1 + rnd(16)); break; /* runs */
            case 3: a[l] = 1000 + l % 3; break;            /* equal, not adjacent */
            default: a[l] = 1000 + rnd(4); break;          /* random few */
            }
            v[l] = (double)rnd(9) - 4.0;
        }
        if (!check(0xffffffffu, a, v, s, runs(a, v, s))) bad_runs++;
        act = it % 7 == 0 ? 0xffffffffu : (unsigned)(rng >> 7) | (1u << rnd(32)); /* never empty */
        unsigned adders = peers_tree(act, a, v, s);
        if (!check(act, a, v, s, adders)) bad_peers++;
        /* the tree path adds once per distinct address */
        for (unsigned l = 0; l < 32; l++)
            for (unsigned m = l + 1; m < 32; m++)
                if ((adders >> l & 1u) && (adders >> m & 1u) && a[l] == a[m]) one_per_addr = 0;
    }
    NB_EXPECT(bad_runs == 0);
    NB_EXPECT(bad_peers == 0);
    NB_EXPECT(one_per_addr);
}

int main(int argc, char **argv)
{
    NB_TEST_MAIN(argc, argv, test_call_kernels, test_reductions_emulated);
}
