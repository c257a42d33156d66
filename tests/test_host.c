/* [TorchEntryPoint] host functions from C (include/nabla/module.h nb_host_call): reflection, the
 * tutorial's square_fwd / square_bwd, struct arguments and results, results that are arguments,
 * freeing on failure, and every argument error. CPU, and the same on CUDA when there is a GPU. */
#include <string.h>

#include "device/cuda/cuda_api.h"
#include "nabla/alloc.h"
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC =
    "[BackwardDifferentiable] float square(float x) { return x * x; }\n"
    "[CudaKernel] void sq_k(TensorView<float> input, TensorView<float> output) {\n"
    "  uint3 i = cudaBlockIdx() * cudaBlockDim() + cudaThreadIdx();\n"
    "  if (i.x >= input.size(0) || i.y >= input.size(1)) return;\n"
    "  output.store(i.x, i.y, square(input.load(i.x, i.y))); }\n"
    "[CudaKernel] void sq_bwd_k(TensorView<float> input, TensorView<float> grad_in, TensorView<float> grad_out) {\n"
    "  uint3 i = cudaBlockIdx() * cudaBlockDim() + cudaThreadIdx();\n"
    "  if (i.x >= input.size(0) || i.y >= input.size(1)) return;\n"
    "  var dp = diffPair(input.load(i.x, i.y));\n"
    "  __bwd_diff(square)(dp, grad_in.load(i.x, i.y));\n"
    "  grad_out.store(i.x, i.y, dp.d); }\n"
    "[TorchEntryPoint] TorchTensor<float> square_fwd(TorchTensor<float> input) {\n"
    "  var result = TorchTensor<float>.alloc(input.size(0), input.size(1));\n"
    "  __dispatch_kernel(sq_k, uint3(1), uint3(result.size(0), result.size(1), 1))(input, result);\n"
    "  return result; }\n"
    "[TorchEntryPoint] TorchTensor<float> square_bwd(TorchTensor<float> input, TorchTensor<float> grad_in) {\n"
    "  var g = TorchTensor<float>.zerosLike(input);\n"
    "  __dispatch_kernel(sq_bwd_k, uint3(1), uint3(input.size(0), input.size(1), 1))(input, grad_in, g);\n"
    "  return g; }\n"
    "struct In { TorchTensor<float> t; float s; };\n"
    "struct Out { TorchTensor<float> same; TorchTensor<float> sq; uint n; float s2; };\n"
    "[TorchEntryPoint] Out pack(In a) {\n"
    "  Out o; o.same = a.t; o.sq = square_fwd(a.t); o.n = a.t.dims(); o.s2 = a.s * 2; return o; }\n"
    "[TorchEntryPoint] TorchTensor<float> leaky(TorchTensor<float> a) {\n"
    "  var keep = TorchTensor<float>.alloc(4);\n"
    "  var r = TorchTensor<float>.alloc(a.size(0), a.size(3));\n"
    "  return r; }\n"
    "float plain(float x) { return x; }\n";

static nb_tensor *arr2(nb_device *dev, const float *v, int64_t r, int64_t c) {
    nb_tensor *t = NULL;
    int64_t sh[2] = {r, c};
    return nb_tensor_from_host(dev, NB_F32, 2, sh, v, &t) == NB_OK ? t : NULL;
}

static void run(nb_device *dev) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "host.slang", SRC, NULL, &m));
    nb_func *fwd, *bwd, *pack, *leaky, *plain;
    NB_REQUIRE_OK(nb_module_func(m, "square_fwd", &fwd));
    NB_REQUIRE_OK(nb_module_func(m, "square_bwd", &bwd));
    NB_REQUIRE_OK(nb_module_func(m, "pack", &pack));
    NB_REQUIRE_OK(nb_module_func(m, "leaky", &leaky));
    NB_REQUIRE_OK(nb_module_func(m, "plain", &plain));
    NB_EXPECT(nb_func_is_host(fwd, 0) && !nb_func_is_host(plain, 0));
    nb_leaf_info li;
    NB_REQUIRE_OK(nb_func_leaf(fwd, 0, 0, &li));
    NB_EXPECT(li.is_tensor && li.tensor_rank == 0 && li.dtype == NB_F32 && !strcmp(li.path, "input"));
    NB_EXPECT(nb_func_result_count(pack, 0) == 4 && nb_func_leaf_count(pack, 0) == 2);
    NB_REQUIRE_OK(nb_func_result_leaf(pack, 0, 2, &li));
    NB_EXPECT(!li.is_tensor && !strcmp(li.path, "_result.n") && li.dtype == NB_U32);

    const float x[4] = {3, 4, 0, 1}, ones[4] = {1, 1, 1, 1};
    nb_tensor *tx = arr2(dev, x, 2, 2), *t1 = arr2(dev, ones, 2, 2);
    nb_host_value a[2] = {{.tensor = tx, .number = 0}, {.tensor = t1, .number = 0}}, r[4];
    int n = -1;
    NB_REQUIRE_OK(nb_host_call(fwd, 1, a, r, 4, &n));
    float y[4] = {0};
    NB_EXPECT(n == 1 && r[0].tensor && nb_tensor_device(r[0].tensor) == dev);
    NB_REQUIRE_OK(nb_tensor_to_host(r[0].tensor, y, sizeof y));
    NB_EXPECT(y[0] == 9 && y[1] == 16 && y[2] == 0 && y[3] == 1);
    nb_tensor_free(r[0].tensor);
    NB_REQUIRE_OK(nb_host_call(bwd, 2, a, r, 4, &n));
    NB_REQUIRE_OK(nb_tensor_to_host(r[0].tensor, y, sizeof y));
    NB_EXPECT(y[0] == 6 && y[1] == 8 && y[2] == 0 && y[3] == 2);
    nb_tensor_free(r[0].tensor);

    /* a struct argument (leaves t, s) and a struct result; a host entry calling another */
    nb_host_value sa[2] = {{.tensor = tx, .number = 0}, {.tensor = NULL, .number = 1.5}};
    NB_REQUIRE_OK(nb_host_call(pack, 2, sa, r, 4, &n));
    NB_EXPECT(n == 4 && r[0].tensor && r[0].tensor != tx && r[1].tensor && !r[2].tensor);
    NB_EXPECT(r[2].number == 2 && r[3].number == 3);
    NB_EXPECT(nb_tensor_data(r[0].tensor) == nb_tensor_data(tx)); /* the argument's memory */
    NB_REQUIRE_OK(nb_tensor_to_host(r[1].tensor, y, sizeof y));
    NB_EXPECT(y[0] == 9 && y[3] == 1);
    nb_tensor_free(r[0].tensor);
    nb_tensor_free(r[1].tensor);

    /* errors */
    NB_EXPECT_ERR(nb_host_call(fwd, 2, a, r, 4, &n), NB_ERR_INVALID_ARG, "square_fwd: 2 arguments given");
    NB_EXPECT(n == 0);
    NB_EXPECT_ERR(nb_host_call(plain, 1, a, r, 4, &n), NB_ERR_INVALID_ARG, "plain is not a host function");
    nb_host_value num = {.tensor = NULL, .number = 2};
    NB_EXPECT_ERR(nb_host_call(fwd, 1, &num, r, 4, &n), NB_ERR_INVALID_ARG, "is a TorchTensor<f32>; a number was given");
    NB_EXPECT_ERR(nb_host_call(pack, 2, a, r, 4, &n), NB_ERR_INVALID_ARG, "argument 'a.s' is a f32 number; a tensor");
    nb_tensor *ti = NULL;
    int32_t iv[2] = {1, 2};
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_I32, 1, (int64_t[]){2}, iv, &ti));
    nb_host_value wrong = {.tensor = ti, .number = 0};
    NB_EXPECT_ERR(nb_host_call(fwd, 1, &wrong, r, 4, &n), NB_ERR_DTYPE,
                  "square_fwd: argument 'input' is i32 but parameter 'input' is TorchTensor<f32>");
    NB_EXPECT_ERR(nb_host_call(pack, 2, sa, r, 2, &n), NB_ERR_INVALID_ARG, "4 result leaves, room for 2");
    /* a failure after allocations: nothing leaks, nothing is returned */
    NB_EXPECT_ERR(nb_host_call(leaky, 1, a, r, 4, &n), NB_ERR_SHAPE, "leaky: size(3) of a 2-dimensional tensor");
    NB_EXPECT(n == 0);
    char *text = NULL;
    NB_REQUIRE_OK(nb_module_dump(m, NB_DUMP_HOST, NULL, NB_MODE_PRIMAL, &text));
    NB_EXPECT(text && strstr(text, "void nb_host_entry(") && strstr(text, "nb_hrt->alloc("));
    nb_module_free_text(text);
    nb_tensor_free(ti);
    nb_tensor_free(tx);
    nb_tensor_free(t1);
    nb_module_free(m);
}

/* Vectors, matrices, arrays and structs of values in and out of host functions and through
 * __dispatch_kernel; TorchTensor<float3> (last dimension 3); DiffTensorView(x, dx) arguments. */
static const char *SRC_VALUES =
    "[CudaKernel] void shift3(TensorView<float3> src, TensorView<float3> dst, float3 by) {\n"
    "  uint i = (cudaBlockIdx() * cudaBlockDim() + cudaThreadIdx()).x;\n"
    "  if (i < src.size(0)) dst[i] = src[i] + by; }\n"
    "struct P { float2x2 m; int k[2]; };\n"
    "[CudaKernel] void mix(DiffTensorView x, TensorView<float> r, P p, float w[2]) {\n"
    "  uint i = cudaThreadIdx().x;\n"
    "  if (i < x.size(0)) r[i] = x.primal[i] * p.m[1][0] + x.diff.diff[i] * w[1] + p.k[1]; }\n"
    "[TorchEntryPoint] TorchTensor<float3> shifted(TorchTensor<float3> pts, float3 by) {\n"
    "  var r = TorchTensor<float3>.alloc(pts.size(0));\n"
    "  __dispatch_kernel(shift3, uint3(2, 1, 1), uint3(2, 1, 1))(pts, r, by);\n"
    "  return r; }\n"
    "struct Res { float3 v; TorchTensor<float> t[2]; int2 n; };\n"
    "[TorchEntryPoint] Res mixed(TorchTensor<float> x, TorchTensor<float> dx, float2x2 m, int2 k, float w[2]) {\n"
    "  Res o; o.t[0] = TorchTensor<float>.zerosLike(x); o.t[1] = x;\n"
    "  P p; p.m = m; p.k[0] = k.x; p.k[1] = k.y;\n"
    "  __dispatch_kernel(mix, uint3(1), uint3(x.size(0), 1, 1))(DiffTensorView(x, dx), o.t[0], p, w);\n"
    "  o.v = float3(m[0][0], m[0][1], w[0]); o.n = k * 2; return o; }\n"
    "struct L { TensorView<float> w; DiffTensorView b; float s; };\n"
    "[CudaKernel] void lk(L l, TensorView<float> r) {\n"
    "  uint i = cudaThreadIdx().x; if (i < r.size(0)) r[i] = l.w[i] * l.s + l.b[i]; }\n"
    "[TorchEntryPoint] TorchTensor<float> viaStruct(TorchTensor<float> w, TorchTensor<float> b) {\n"
    "  var r = TorchTensor<float>.alloc(w.size(0)); L l; l.w = w; l.b = b; l.s = 3;\n"
    "  __dispatch_kernel(lk, uint3(1), uint3(w.size(0), 1, 1))(l, r); return r; }\n";

static void run_values(nb_device *dev) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "values.slang", SRC_VALUES, NULL, &m));
    nb_func *shifted, *mixed;
    NB_REQUIRE_OK(nb_module_func(m, "shifted", &shifted));
    NB_REQUIRE_OK(nb_module_func(m, "mixed", &mixed));
    nb_leaf_info li;
    NB_REQUIRE_OK(nb_func_leaf(shifted, 0, 0, &li)); /* TorchTensor<float3>: value_shape [3] */
    NB_EXPECT(li.is_tensor && li.dtype == NB_F32 && li.value_rank == 1 && li.value_shape[0] == 3);
    NB_REQUIRE_OK(nb_func_leaf(shifted, 0, 1, &li));
    NB_EXPECT(!li.is_tensor && li.value_rank == 1 && li.value_shape[0] == 3);
    NB_EXPECT(nb_func_leaf_count(mixed, 0) == 5 && nb_func_result_count(mixed, 0) == 4);
    NB_REQUIRE_OK(nb_func_result_leaf(mixed, 0, 2, &li));
    NB_EXPECT(li.is_tensor && !strcmp(li.path, "_result.t[1]"));

    const float pts[9] = {0, 0, 0, 1, 1, 1, 2, 2, 2};
    nb_tensor *tp = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 2, (int64_t[]){3, 3}, pts, &tp));
    double by[3] = {1, 10, 100};
    nb_host_value a[2] = {{.tensor = tp}, {.values = by, .count = 3}}, r[4];
    int n = 0;
    NB_REQUIRE_OK(nb_host_call(shifted, 2, a, r, 4, &n));
    float y[9] = {0};
    NB_EXPECT(n == 1 && nb_tensor_ndim(r[0].tensor) == 2 && nb_tensor_shape(r[0].tensor)[1] == 3);
    NB_REQUIRE_OK(nb_tensor_to_host(r[0].tensor, y, sizeof y));
    NB_EXPECT(y[0] == 1 && y[1] == 10 && y[2] == 100 && y[8] == 102); /* the 4th thread of 2x2 returns */
    nb_host_results_free(r, n);
    NB_EXPECT(r[0].tensor == NULL);

    const float xs[2] = {1, 2}, dxs[2] = {0.5f, 0.25f};
    nb_tensor *tx = NULL, *tdx = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, (int64_t[]){2}, xs, &tx));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, (int64_t[]){2}, dxs, &tdx));
    double mat[4] = {1, 2, 3, 4}, k[2] = {5, 6}, w[2] = {7, 8};
    nb_host_value b[5] = {{.tensor = tx}, {.tensor = tdx}, {.values = mat, .count = 4}, {.values = k, .count = 2},
                          {.values = w, .count = 2}};
    NB_REQUIRE_OK(nb_host_call(mixed, 5, b, r, 4, &n));
    NB_EXPECT(n == 4 && r[0].count == 3 && r[0].values && !r[0].tensor);
    NB_EXPECT(r[0].values[0] == 1 && r[0].values[1] == 2 && r[0].values[2] == 7);
    NB_EXPECT(r[3].count == 2 && r[3].values[0] == 10 && r[3].values[1] == 12);
    NB_EXPECT(nb_tensor_data(r[2].tensor) == nb_tensor_data(tx));
    float t0[2] = {0}; /* x * m[1][0] + dx * w[1] + k[1] */
    NB_REQUIRE_OK(nb_tensor_to_host(r[1].tensor, t0, sizeof t0));
    NB_EXPECT(t0[0] == 1 * 3 + 0.5f * 8 + 6 && t0[1] == 2 * 3 + 0.25f * 8 + 6);
    nb_host_results_free(r, n);

    /* a struct with view fields filled in host code (l.w = w) */
    nb_func *via;
    NB_REQUIRE_OK(nb_module_func(m, "viaStruct", &via));
    nb_host_value c2[2] = {{.tensor = tx}, {.tensor = tdx}};
    NB_REQUIRE_OK(nb_host_call(via, 2, c2, r, 4, &n));
    NB_REQUIRE_OK(nb_tensor_to_host(r[0].tensor, t0, sizeof t0));
    NB_EXPECT(n == 1 && t0[0] == 1 * 3 + 0.5f && t0[1] == 2 * 3 + 0.25f);
    nb_host_results_free(r, n);

    /* errors: a vector of another length, no numbers, a fraction for an int, a float3 tensor of
     * the wrong last dimension */
    double two[2] = {1, 2};
    nb_host_value bad[2] = {{.tensor = tp}, {.values = two, .count = 2}};
    NB_EXPECT_ERR(nb_host_call(shifted, 2, bad, r, 4, &n), NB_ERR_SHAPE, "argument 'by' is a f32[3] (3 numbers); 2 given");
    bad[1].values = NULL;
    NB_EXPECT_ERR(nb_host_call(shifted, 2, bad, r, 4, &n), NB_ERR_SHAPE, "argument 'by' is a f32[3] (3 numbers); 1 given");
    double kf[2] = {5, 6.5};
    b[3].values = kf;
    NB_EXPECT_ERR(nb_host_call(mixed, 5, b, r, 4, &n), NB_ERR_DTYPE, "argument 'k' is an integer (i32[2]); 6.5 was given");
    nb_host_value wrong[2] = {{.tensor = tx}, {.values = by, .count = 3}};
    NB_EXPECT_ERR(nb_host_call(shifted, 2, wrong, r, 4, &n), NB_ERR_SHAPE,
                  "argument 'pts' is a TorchTensor of f32 vectors of 3: its last dimension must be 3, got shape [2]");
    NB_EXPECT(n == 0);
    nb_tensor_free(tp);
    nb_tensor_free(tx);
    nb_tensor_free(tdx);
    nb_module_free(m);
}

static void test_host_cpu(void) {
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &d));
    run(d);
    run_values(d);
    nb_device_close(d);
}

static void test_host_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *g = NULL, *c = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &g));
    run(g);
    run_values(g);
    /* a tensor on another device than the module: an error, never a copy */
    NB_REQUIRE_OK(nb_device_open("cpu", &c));
    nb_module *m = NULL;
    nb_func *f = NULL;
    NB_REQUIRE_OK(nb_module_load_source(g, "host.slang", SRC, NULL, &m));
    NB_REQUIRE_OK(nb_module_func(m, "square_fwd", &f));
    const float x[4] = {1, 2, 3, 4};
    nb_tensor *t = arr2(c, x, 2, 2);
    nb_host_value a = {.tensor = t, .number = 0}, r[1];
    int n = 0;
    NB_EXPECT_ERR(nb_host_call(f, 1, &a, r, 1, &n), NB_ERR_DEVICE, "argument 'input' is on cpu but the module runs on cuda:0");
    nb_tensor_free(t);
    nb_module_free(m);
    nb_device_close(c);
    nb_device_close(g);
}

/* The module's CUDA code (its kernels; host code is not part of it) compiles with NVRTC, and the
 * host unit is plain C with the runtime table (no GPU needed). */
static void test_cuda_source_compiles(void) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(NULL, "host.slang", SRC, NULL, &m));
    { /* the kernels of the vector / struct / DiffTensorView host code too */
        nb_module *mv = NULL;
        char *cv = NULL;
        NB_REQUIRE_OK(nb_module_load_source(NULL, "values.slang", SRC_VALUES, NULL, &mv));
        NB_REQUIRE_OK(nb_module_dump(mv, NB_DUMP_CUDA, NULL, NB_MODE_PRIMAL, &cv));
        void *iv = NULL;
        size_t sv = 0;
        int cb = 0;
        nb_status sv_st = nb_nvrtc_compile(cv, "values_kernels.cu", "compute_90", NULL, &iv, &sv, &cb);
        NB_EXPECT(strstr(cv, "shift3(") && strstr(cv, "mix(") && strstr(cv, "lk(") && !strstr(cv, "viaStruct"));
        nb_module_free_text(cv);
        nb_module_free(mv);
        if (sv_st != NB_ERR_UNSUPPORTED) NB_EXPECT_OK(sv_st);
        if (iv) nb_free(iv, sv);
    }
    char *cu = NULL, *host = NULL;
    NB_REQUIRE_OK(nb_module_dump(m, NB_DUMP_CUDA, NULL, NB_MODE_PRIMAL, &cu));
    NB_REQUIRE_OK(nb_module_dump(m, NB_DUMP_HOST, NULL, NB_MODE_PRIMAL, &host));
    NB_EXPECT(strstr(cu, "sq_k(") && !strstr(cu, "square_fwd(") && !strstr(cu, "nb_hrt"));
    NB_EXPECT(strstr(host, "square_fwd(") && strstr(host, "pack(") && !strstr(host, "__global__"));
    nb_func *f = NULL; /* a module loaded without a device runs nothing */
    NB_REQUIRE_OK(nb_module_func(m, "square_fwd", &f));
    nb_host_value none = {.tensor = NULL, .number = 0}, res[1];
    int n = 0;
    NB_EXPECT_ERR(nb_host_call(f, 1, &none, res, 1, &n), NB_ERR_NO_DEVICE, "loaded without a device");
    void *img = NULL;
    size_t size = 0;
    int cubin = 0;
    nb_status s = nb_nvrtc_compile(cu, "host_kernels.cu", "compute_90", NULL, &img, &size, &cubin);
    nb_module_free_text(cu);
    nb_module_free_text(host);
    nb_module_free(m);
    if (s == NB_ERR_UNSUPPORTED) NB_SKIP("no NVRTC");
    NB_EXPECT_OK(s);
    if (img) nb_free(img, size);
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_host_cpu, test_host_cuda, test_cuda_source_compiles); }
