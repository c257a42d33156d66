/* slang-torch's inline-MLP pattern (issue #14, seed 000), in nabla's own small version: a generic
 * Linear layer whose DiffTensorView fields get their ranks from their uses, an array of layers in
 * a struct parameter of a [Differentiable] [CudaKernel], thread indices read in methods, generic
 * methods with value parameters, a `static groupshared` staging buffer in a method (a Ptr<float>
 * slice per warp), [ForceUnroll], Ptr<float> into local arrays passed to a CUDA
 * __intrinsic_asm helper from a __requirePrelude'd header beside the module, v.primal.data_ptr(),
 * and a custom backward derivative adding into v.diff.diff with InterlockedAdd and WaveActiveSum.
 * The CUDA of the module and of bwd_diff(render) (what slangtorch's `.bwd` launches) compiles with
 * NVRTC for sm_90; the C back end names the function without a CPU case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/strbuf.h"
#include "device/cuda/cuda_api.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nabla/status.h"
#include "nb_test.h"

static char g_dir[256];

static void cleanup(void)
{
    if (!g_dir[0]) return;
    char p[400];
    snprintf(p, sizeof p, "%s/mlp.slang", g_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/tiny_prelude.cuh", g_dir);
    unlink(p);
    rmdir(g_dir);
}

static int write_file(const char *name, const char *text)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    if (!f) return 0;
    fputs(text, f);
    return fclose(f) == 0;
}

static const char *k_module =
        "static const int warpSize = WARP_SIZE;\n"
        "void mulImpl(Ptr<float> a, Ptr<float> b, Ptr<float> c, constexpr int N)\n"
        "{\n"
        "    __target_switch\n"
        "    {\n"
        "    case cuda:\n"
        "        __requirePrelude(\"#include \\\"tiny_prelude.cuh\\\"\");\n"
        "        __intrinsic_asm \"tiny_mul< $3 >($0, $1, $2)\";\n"
        "    }\n"
        "}\n"
        "struct Feat<let C : int> : IDifferentiable { float v[C]; };\n"
        "struct Lin<let C : int>\n"
        "{\n"
        "    typedef Feat<C> In;\n"
        "    DiffTensorView w;\n"
        "    DiffTensorView b;\n"
        "    uint lane<let N : int>() { return (cudaThreadIdx().x % warpSize) * N; }\n"
        "    Ptr<float> staging()\n"
        "    {\n"
        "        static groupshared float stage[8 * warpSize * C];\n"
        "        return &stage[(cudaThreadIdx().x / warpSize) * warpSize * C];\n"
        "    }\n"
        "    [BackwardDerivative(evalBwd)]\n"
        "    Feat<C> eval(Feat<C> x)\n"
        "    {\n"
        "        float wt[C];\n"
        "        Ptr<float> xs = staging();\n"
        "        Feat<C> y;\n"
        "        [ForceUnroll]\n"
        "        for (int i = 0; i < C; i++)\n"
        "        {\n"
        "            wt[i] = w[i, lane<1>()];\n"
        "            xs[lane<C>() + i] = x.v[i];\n"
        "        }\n"
        "        mulImpl(&xs[lane<C>()], &wt[0], &y.v[0], C);\n"
        "        Ptr<float> bp = b.primal.data_ptr();\n"
        "        [ForceUnroll]\n"
        "        for (int i = 0; i < C; i++) y.v[i] = y.v[i] + bp[i];\n"
        "        return y;\n"
        "    }\n"
        "    void evalBwd(inout DifferentialPair<In> x, Feat<C>.Differential dy)\n"
        "    {\n"
        "        float old;\n"
        "        [ForceUnroll]\n"
        "        for (int i = 0; i < C; i++)\n"
        "            w.diff.diff.InterlockedAdd(uint2(i, lane<1>()), dy.v[i] * x.p.v[i], old);\n"
        "        float s = WaveActiveSum(dy.v[0]);\n"
        "        if (WaveIsFirstLane())\n"
        "            b.diff.diff.InterlockedAdd(0, s, old);\n"
        "        In.Differential dx = dy;\n"
        "        x = DifferentialPair<In>(x.p, dx);\n"
        "    }\n"
        "};\n"
        "struct Net<let C : int, let N : int>\n"
        "{\n"
        "    typedef Feat<C> Output;\n"
        "    Lin<C> layers[N];\n"
        "    [Differentiable]\n"
        "    Output eval(Feat<C> x)\n"
        "    {\n"
        "        Output y = x;\n"
        "        [ForceUnroll]\n"
        "        for (int i = 0; i < N; i++) y = layers[i].eval(y);\n"
        "        return y;\n"
        "    }\n"
        "};\n"
        "[Differentiable]\n"
        "[CudaKernel]\n"
        "void render(Net<4, 2> net, DiffTensorView grid, DiffTensorView img)\n"
        "{\n"
        "    uint3 id = cudaThreadIdx() + cudaBlockIdx() * cudaBlockDim();\n"
        "    if (id.x >= img.size(0)) return;\n"
        "    Feat<4> f;\n"
        "    [ForceUnroll]\n"
        "    for (int i = 0; i < 4; i++) f.v[i] = grid.load(uint2(id.x, i));\n"
        "    net.Output o = net.eval(f);\n"
        "    img.storeOnce(uint2(id.x, 0), o.v[0]);\n"
        "}\n";

/* 1: compiled, 0: NVRTC missing (skip), -1: failed */
static int nvrtc(const char *src)
{
    void *img = NULL;
    size_t size = 0;
    int cubin = 0;
    nb_status s = nb_nvrtc_compile(src, "mlp.cu", "compute_90", NULL, &img, &size, &cubin);
    if (img) nb_free(img, size);
    if (s == NB_ERR_UNSUPPORTED) return 0;
    if (s != NB_OK) fprintf(stderr, "  NVRTC failed: %s\n", nb_last_error());
    return s == NB_OK ? 1 : -1;
}

static void test_inline_mlp_cuda(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/nb_mlp_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) { g_dir[0] = 0; NB_EXPECT(0); return; }
    NB_EXPECT(write_file("tiny_prelude.cuh",
                         "template<int N> __device__ void tiny_mul(float *a, float *b, float *c) {\n"
                         "    for (int i = 0; i < N; i++) c[i] = a[i] * b[i];\n}\n"));
    NB_EXPECT(write_file("mlp.slang", k_module));
    char path[400];
    snprintf(path, sizeof path, "%s/mlp.slang", g_dir);
    const char *defs[] = {"WARP_SIZE=32"};
    nb_compile_opts o;
    memset(&o, 0, sizeof o);
    o.defines = defs;
    o.ndefines = 1;
    nb_program *p = NULL;
    NB_EXPECT_OK(nb_program_compile_file(path, &o, &p));
    if (!p) return;
    nb_strbuf prim, bwd, c;
    nb_strbuf_init(&prim);
    nb_strbuf_init(&bwd);
    nb_strbuf_init(&c);
    NB_EXPECT_OK(nb_program_emit(p, NB_TARGET_CUDA, NULL, NB_CALL_PRIMAL, &prim));
    NB_EXPECT_OK(nb_program_emit(p, NB_TARGET_CUDA, "render", NB_CALL_BWD, &bwd));
    NB_EXPECT(strstr(nb_strbuf_cstr(&prim), "tiny_mul<") != NULL);                /* the prelude is inlined */
    NB_EXPECT(strstr(nb_strbuf_cstr(&bwd), "render_bwd(const nb_thread_ids *nb_tid") != NULL);
    NB_EXPECT(strstr(nb_strbuf_cstr(&bwd), "evalBwd(nb_tid") != NULL);           /* the custom derivative, with the ids */
    /* the CPU back end: the asm helper has no cpp case, named in the diagnostic */
    NB_EXPECT(nb_program_emit(p, NB_TARGET_C, NULL, NB_CALL_PRIMAL, &c) != NB_OK);
    NB_EXPECT(strstr(nb_last_error(), "function 'mulImpl' has no __target_switch case for the CPU back end") != NULL);
    int a = nvrtc(nb_strbuf_cstr(&prim));
    int b = a ? nvrtc(nb_strbuf_cstr(&bwd)) : 0;
    nb_strbuf_free(&prim);
    nb_strbuf_free(&bwd);
    nb_strbuf_free(&c);
    nb_program_free(p);
    if (!a) NB_SKIP("NVRTC is not available: the CUDA was emitted but not compiled");
    NB_EXPECT(a == 1 && b == 1);
}

int main(int argc, char **argv)
{
    atexit(cleanup);
    NB_TEST_MAIN(argc, argv, test_inline_mlp_cuda);
}
