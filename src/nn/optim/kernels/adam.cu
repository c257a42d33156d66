// Adam / AdamW step over several parameter segments in one launch (src/nn/optim/optim.c;
// Args mirrors its host struct).
struct Seg { float *p, *g; long long start, end; };
struct Args { float *m, *v; long long n;
    float lr_bc1, inv_sqrt_bc2, beta1, beta2, eps, l2, lr_wd; int zero, nseg; Seg seg[8]; };
extern "C" __global__ void nb_adam_step(const Args a) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.n;
         i += (long long)gridDim.x * blockDim.x) {
        int s = 0;
        while (s < a.nseg - 1 && i >= a.seg[s].end) s++;
        long long j = i - a.seg[s].start;
        float *pp = a.seg[s].p + j, *gp = a.seg[s].g + j;
        float p = *pp, g = *gp + a.l2 * p;
        float m = a.beta1 * a.m[i] + (1.0f - a.beta1) * g;
        float v = a.beta2 * a.v[i] + (1.0f - a.beta2) * g * g;
        a.m[i] = m; a.v[i] = v;
        p -= a.lr_wd * p;
        p -= a.lr_bc1 * m / (sqrtf(v) * a.inv_sqrt_bc2 + a.eps);
        *pp = p;
        if (a.zero) *gp = 0.0f;
    }
}
