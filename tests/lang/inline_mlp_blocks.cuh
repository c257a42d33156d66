// CUDA prelude of inline_mlp_blocks.slang (included by its __requirePrelude, found beside it):
// c[R x O] = a[R x K] * b[K x O], row-major, computed by every calling thread (the test's own
// stand-in for slang-torch's WMMA matmul).
template<int R, int K, int O> __device__ void nb_test_matmul(float *a, float *b, float *c)
{
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += a[r * K + k] * b[k * O + o];
            c[r * O + o] = s;
        }
}
