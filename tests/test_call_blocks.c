/* Explicit-block launches of [Kernel] / [CudaKernel] functions from C (nb_call_run_blocks,
 * slangtorch's launchRaw), their derivative kernels (nb_call_set_mode + nb_call_grad /
 * nb_call_grad_named), struct and array-of-struct arguments by leaf path, and the errors. The
 * same checks run on the CPU and, when there is a GPU, on CUDA. */
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC =
    "groupshared float sh[256];\n"
    "[CudaKernel]\n"
    "void ids(TensorView<uint> o) {\n"
    "  uint3 t = cudaThreadIdx(), b = cudaBlockIdx(), bd = cudaBlockDim(), gd = cudaGridDim();\n"
    "  uint i = (b.x * bd.x + t.x) + (b.y * bd.y + t.y) * bd.x * gd.x;\n"
    "  o[i, 0] = t.x; o[i, 1] = t.y; o[i, 2] = b.x; o[i, 3] = b.y; o[i, 4] = bd.x * 10 + bd.y; o[i, 5] = gd.x * 10 + gd.y;\n"
    "}\n"
    "uint laneSum(uint v) { return WaveActiveSum(v); }\n"
    "[CudaKernel]\n"
    "void blocksum(TensorView<float> x, TensorView<float> sums, TensorView<uint> lanes) {\n"
    "  uint t = cudaThreadIdx().x, b = cudaBlockIdx().x;\n"
    "  uint g = b * cudaBlockDim().x + t;\n"
    "  sh[t] = x[g];\n"
    "  GroupMemoryBarrierWithGroupSync();\n"
    "  for (uint s = cudaBlockDim().x / 2; s > 0; s /= 2) {\n"
    "    if (t < s) sh[t] += sh[t + s];\n"
    "    AllMemoryBarrierWithGroupSync();\n"
    "  }\n"
    "  if (t == 0) sums[b] = sh[0];\n"
    "  lanes[g] = laneSum(1u);\n"
    "}\n"
    "[CudaKernel] [Differentiable]\n"
    "void square(DiffTensorView input, DiffTensorView output) {\n"
    "  uint i = cudaThreadIdx().x + cudaBlockIdx().x * cudaBlockDim().x;\n"
    "  if (i >= input.size(0)) return;\n"
    "  output[i] = input[i] * input[i];\n"
    "}\n"
    "struct Lin { DiffTensorView w; DiffTensorView b; };\n"
    "struct Net { Lin layers[2]; float gain; };\n"
    "[CudaKernel] [Differentiable]\n"
    "void net(Net n, DiffTensorView y) {\n"
    "  uint i = cudaThreadIdx().x;\n"
    "  if (i >= y.size(0)) return;\n"
    "  y[i] = n.gain * (n.layers[0].w[i] * n.layers[1].b[i] + n.layers[1].w[i]);\n"
    "}\n";

static nb_tensor *f32(nb_device *dev, int64_t n, const float *v) {
    nb_tensor *t = NULL;
    int64_t s[1] = {n};
    if (nb_tensor_from_host(dev, NB_F32, 1, s, v, &t) != NB_OK) return NULL;
    return t;
}

static void get(nb_tensor *t, void *out, size_t bytes) { NB_EXPECT_OK(nb_tensor_to_host(t, out, bytes)); }

static void run_all(nb_device *dev) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "blocks.slang", SRC, NULL, &m));
    nb_func *ids, *bsum, *sq, *net;
    NB_REQUIRE_OK(nb_module_func(m, "ids", &ids));
    NB_REQUIRE_OK(nb_module_func(m, "blocksum", &bsum));
    NB_REQUIRE_OK(nb_module_func(m, "square", &sq));
    NB_REQUIRE_OK(nb_module_func(m, "net", &net));
    nb_call *c;

    /* thread ids: blocks of (2, 2), a grid of (2, 1): 8 threads */
    nb_tensor *o = NULL;
    int64_t os[2] = {8, 6};
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_U32, 2, os, &o));
    NB_REQUIRE_OK(nb_call_begin(ids, &c));
    NB_EXPECT_OK(nb_call_arg_named(c, "o", o));
    int64_t blk[3] = {2, 2, 1}, grd[3] = {2, 1, 1};
    NB_EXPECT_OK(nb_call_run_blocks(c, blk, grd));
    unsigned ov[8][6];
    get(o, ov, sizeof ov);
    for (int i = 0; i < 8; i++) {
        int tx = i % 2, bx = i / 2 % 2, ty = i / 4;
        NB_EXPECT(ov[i][0] == (unsigned)tx && ov[i][1] == (unsigned)ty && ov[i][2] == (unsigned)bx && ov[i][3] == 0);
        NB_EXPECT(ov[i][4] == 22 && ov[i][5] == 21);
    }

    /* groupshared + barriers per block, a wave op in a callee: 3 blocks of 256 */
    float x[768];
    for (int i = 0; i < 768; i++) x[i] = (float)(i % 7);
    nb_tensor *xt = f32(dev, 768, x), *st = NULL, *lt = NULL;
    int64_t s3[1] = {3}, s768[3] = {768, 1, 1};
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, s3, &st));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_U32, 1, s768, &lt));
    NB_REQUIRE_OK(nb_call_begin(bsum, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, xt));
    NB_EXPECT_OK(nb_call_arg(c, 1, st));
    NB_EXPECT_OK(nb_call_arg(c, 2, lt));
    int64_t b256[3] = {256, 1, 1}, g3[3] = {3, 1, 1};
    NB_EXPECT_OK(nb_call_run_blocks(c, b256, g3));
    float sums[3];
    get(st, sums, sizeof sums);
    for (int b = 0; b < 3; b++) {
        float want = 0;
        for (int i = 0; i < 256; i++) want += (float)((b * 256 + i) % 7);
        NB_EXPECT(sums[b] == want);
    }
    unsigned lanes[768];
    get(lt, lanes, sizeof lanes);
    for (int i = 0; i < 768; i++) NB_EXPECT(lanes[i] == 32);

    /* errors: sizes, a groupshared kernel over a thread grid */
    int64_t big[3] = {1025, 1, 1}, cube[3] = {16, 16, 8}, zero[3] = {0, 1, 1}, z65[3] = {1, 1, 65};
    NB_REQUIRE_OK(nb_call_begin(bsum, &c));
    NB_EXPECT_ERR(nb_call_run_blocks(c, big, g3), NB_ERR_INVALID_ARG, "block size x is 1025; it must be 1..1024");
    NB_REQUIRE_OK(nb_call_begin(bsum, &c));
    NB_EXPECT_ERR(nb_call_run_blocks(c, cube, g3), NB_ERR_INVALID_ARG, "a block of (16, 16, 8) is 2048 threads; at most 1024");
    NB_REQUIRE_OK(nb_call_begin(bsum, &c));
    NB_EXPECT_ERR(nb_call_run_blocks(c, z65, g3), NB_ERR_INVALID_ARG, "block size z is 65");
    NB_REQUIRE_OK(nb_call_begin(bsum, &c));
    NB_EXPECT_ERR(nb_call_run_blocks(c, b256, zero), NB_ERR_INVALID_ARG, "grid size x is 0");
    NB_REQUIRE_OK(nb_call_begin(bsum, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, xt));
    NB_EXPECT_OK(nb_call_arg(c, 1, st));
    NB_EXPECT_OK(nb_call_arg(c, 2, lt));
    NB_EXPECT_ERR(nb_call_run_grid(c, s768), NB_ERR_INVALID_ARG,
                  "uses groupshared memory, which belongs to a thread block");

    /* square: primal, bwd with (tensor, grad) pairs, fwd */
    float xv[5] = {1, 2, 3, 4, 5}, yd[5] = {1, 0, 1, 0, 1}, xd[5] = {1, 0, 0, 1, 2}, zeros[5] = {0};
    nb_tensor *X = f32(dev, 5, xv), *Y = f32(dev, 5, zeros), *Xg = f32(dev, 5, zeros), *Yg = f32(dev, 5, yd);
    int64_t b4[3] = {4, 1, 1}, g2[3] = {2, 1, 1};
    NB_REQUIRE_OK(nb_call_begin(sq, &c));
    NB_EXPECT_OK(nb_call_arg_named(c, "input", X));
    NB_EXPECT_OK(nb_call_arg_named(c, "output", Y));
    NB_EXPECT_OK(nb_call_run_blocks(c, b4, g2));
    float yv[5];
    get(Y, yv, sizeof yv);
    for (int i = 0; i < 5; i++) NB_EXPECT(yv[i] == xv[i] * xv[i]);
    NB_REQUIRE_OK(nb_call_begin(sq, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_OK(nb_call_arg_named(c, "input", X));
    NB_EXPECT_OK(nb_call_grad(c, 0, Xg));
    NB_EXPECT_OK(nb_call_arg_named(c, "output", Y));
    NB_EXPECT_OK(nb_call_grad_named(c, "output", Yg));
    NB_EXPECT_OK(nb_call_run_blocks(c, b4, g2));
    float g[5];
    get(Xg, g, sizeof g);
    for (int i = 0; i < 5; i++) NB_EXPECT(g[i] == 2 * xv[i] * yd[i]);
    /* the store's reverse mode consumed output's gradient (Slang's DiffTensorView store) */
    get(Yg, g, sizeof g);
    for (int i = 0; i < 5; i++) NB_EXPECT(g[i] == 0);
    /* bwd again with a fresh output gradient: input gradients add up (as in PyTorch, zeroing is the caller's) */
    nb_tensor *Yg2 = f32(dev, 5, yd);
    NB_REQUIRE_OK(nb_call_begin(sq, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, X));
    NB_EXPECT_OK(nb_call_grad(c, 0, Xg));
    NB_EXPECT_OK(nb_call_arg(c, 1, Y));
    NB_EXPECT_OK(nb_call_grad(c, 1, Yg2));
    NB_EXPECT_OK(nb_call_run_blocks(c, b4, g2));
    get(Xg, g, sizeof g);
    for (int i = 0; i < 5; i++) NB_EXPECT(g[i] == 4 * xv[i] * yd[i]);
    /* a DiffTensor without its gradient in bwd mode: the error names it */
    NB_REQUIRE_OK(nb_call_begin(sq, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, X));
    NB_EXPECT_OK(nb_call_arg(c, 1, Y));
    NB_EXPECT_OK(nb_call_grad(c, 1, Yg));
    NB_EXPECT_ERR(nb_call_run_blocks(c, b4, g2), NB_ERR_INVALID_ARG,
                  "square.bwd: DiffTensor parameter 'input' has no gradient tensor");
    /* a derivative launch's size errors name f.bwd */
    NB_REQUIRE_OK(nb_call_begin(sq, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_ERR(nb_call_run_blocks(c, big, g2), NB_ERR_INVALID_ARG, "square.bwd: block size x is 1025");
    /* fwd: tangents in, tangents out */
    nb_tensor *Yt = f32(dev, 5, zeros), *Xt = f32(dev, 5, xd);
    NB_REQUIRE_OK(nb_call_begin(sq, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_FWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, X));
    NB_EXPECT_OK(nb_call_tangent(c, 0, Xt));
    NB_EXPECT_OK(nb_call_arg(c, 1, Y));
    NB_EXPECT_OK(nb_call_tangent(c, 1, Yt));
    NB_EXPECT_OK(nb_call_run_blocks(c, b4, g2));
    get(Yt, g, sizeof g);
    for (int i = 0; i < 5; i++) NB_EXPECT(g[i] == 2 * xv[i] * xd[i]);
    NB_REQUIRE_OK(nb_call_begin(sq, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_FWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, X));
    NB_EXPECT_OK(nb_call_arg(c, 1, Y));
    NB_EXPECT_OK(nb_call_tangent(c, 1, Yt));
    NB_EXPECT_ERR(nb_call_run_blocks(c, b4, g2), NB_ERR_INVALID_ARG, "square.fwd: DiffTensor parameter 'input'");

    /* a struct with an array of structs of DiffTensors, and a value field: leaf paths */
    float w0[4] = {1, 2, 3, 4}, b1[4] = {2, 2, 2, 2}, w1[4] = {10, 20, 30, 40}, b0[4] = {0}, dy[4] = {1, 1, 0, 1};
    nb_tensor *W0 = f32(dev, 4, w0), *B0 = f32(dev, 4, b0), *W1 = f32(dev, 4, w1), *B1 = f32(dev, 4, b1);
    nb_tensor *Yn = f32(dev, 4, b0), *DY = f32(dev, 4, dy), *gW0 = f32(dev, 4, b0), *gB1 = f32(dev, 4, b0);
    nb_tensor *gW1 = f32(dev, 4, b0), *gB0 = f32(dev, 4, b0);
    int64_t b32[3] = {32, 1, 1}, g1[3] = {1, 1, 1};
    float gain = 0.5f;
    for (int mode = 0; mode < 2; mode++) {
        NB_REQUIRE_OK(nb_call_begin(net, &c));
        if (mode) NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
        NB_EXPECT_OK(nb_call_arg_named(c, "n.layers[0].w", W0));
        NB_EXPECT_OK(nb_call_arg_named(c, "n.layers[0].b", B0));
        NB_EXPECT_OK(nb_call_arg_named(c, "n.layers[1].w", W1));
        NB_EXPECT_OK(nb_call_arg_named(c, "n.layers[1].b", B1));
        NB_EXPECT_OK(nb_call_arg_value_named(c, "n.gain", NB_F32, 0, NULL, &gain));
        NB_EXPECT_OK(nb_call_arg_named(c, "y", Yn));
        if (mode) {
            NB_EXPECT_OK(nb_call_grad_named(c, "n.layers[0].w", gW0));
            NB_EXPECT_OK(nb_call_grad_named(c, "n.layers[0].b", gB0));
            NB_EXPECT_OK(nb_call_grad_named(c, "n.layers[1].w", gW1));
            NB_EXPECT_OK(nb_call_grad_named(c, "n.layers[1].b", gB1));
            NB_EXPECT_OK(nb_call_grad_named(c, "y", DY));
        }
        NB_EXPECT_OK(nb_call_run_blocks(c, b32, g1));
    }
    float yn[4], gw0[4], gb1[4], gw1[4];
    get(Yn, yn, sizeof yn);
    get(gW0, gw0, sizeof gw0);
    get(gB1, gb1, sizeof gb1);
    get(gW1, gw1, sizeof gw1);
    for (int i = 0; i < 4; i++) {
        NB_EXPECT(yn[i] == gain * (w0[i] * b1[i] + w1[i]));
        NB_EXPECT(gw0[i] == gain * b1[i] * dy[i] && gb1[i] == gain * w0[i] * dy[i] && gw1[i] == gain * dy[i]);
    }
    /* path errors: a missing field, an unknown field, an element past the array */
    NB_REQUIRE_OK(nb_call_begin(net, &c));
    NB_EXPECT_OK(nb_call_arg_named(c, "n.layers[0].w", W0));
    NB_EXPECT_OK(nb_call_arg_named(c, "n.layers[0].b", B0));
    NB_EXPECT_OK(nb_call_arg_named(c, "n.layers[1].w", W1));
    NB_EXPECT_OK(nb_call_arg_value_named(c, "n.gain", NB_F32, 0, NULL, &gain));
    NB_EXPECT_OK(nb_call_arg_named(c, "y", Yn));
    NB_EXPECT_ERR(nb_call_run_blocks(c, b32, g1), NB_ERR_INVALID_ARG, "missing argument for parameter 'n.layers[1].b'");
    NB_REQUIRE_OK(nb_call_begin(net, &c));
    nb_call_arg_named(c, "n.layers[2].w", W0);
    NB_EXPECT_ERR(nb_call_run_blocks(c, b32, g1), NB_ERR_NOT_FOUND, "no parameter named 'n.layers[2].w'");
    NB_REQUIRE_OK(nb_call_begin(net, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_ERR(nb_call_grad_named(c, "n.layers[0].q", gW0), NB_ERR_NOT_FOUND, "no parameter or field 'n.layers[0].q'");
    nb_call_free(c);

    nb_tensor *all[] = {o, xt, st, lt, X, Y, Xg, Yg, Yg2, Yt, Xt, W0, B0, W1, B1, Yn, DY, gW0, gB1, gW1, gB0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) nb_tensor_free(all[i]);
    nb_module_free(m);
}

static void test_blocks_cpu(void) {
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    run_all(dev);
    nb_device_close(dev);
}

static void test_blocks_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &dev));
    run_all(dev);
    nb_device_close(dev);
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_blocks_cpu, test_blocks_cuda); }
