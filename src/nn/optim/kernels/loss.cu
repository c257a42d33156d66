// Losses over f32 arrays (src/nn/optim/loss.c): per-element loss and gradient, reduced per
// block into a.loss; kind 0 = MSE, 1 = L1, 2 = relative L2 (the Args struct mirrors nb_loss_args).
struct Args { const float *pred, *target; float *loss, *dpred; long long n; float inv_n; int kind; };
extern "C" __global__ void nb_loss(const Args a) {
    float acc = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.n;
         i += (long long)gridDim.x * blockDim.x) {
        float y = a.pred[i], d = y - a.target[i], l, g;
        if (a.kind == 0) { l = d * d; g = 2.0f * d; }
        else if (a.kind == 1) { l = fabsf(d); g = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f); }
        else { float s = 1.0f / (y * y + 0.01f); l = d * d * s; g = 2.0f * d * s; }
        acc += l;
        if (a.dpred) a.dpred[i] = g * a.inv_n;
    }
    if (!a.loss) return;
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    __shared__ float part[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0) atomicAdd(a.loss, acc * a.inv_n);
    }
}
