// nb_attn_delta / nb_attn_delta_t / nb_attn_dq_fin (see simt.cu), shared by simt.cu and aux.cu.
#pragma once
extern "C" __global__ void nb_attn_delta(const DeltaArgs a) {
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
         row < a.rows; row += warps) {
        const long long bh = row / a.T;
        const int t = (int)(row - bh * a.T);
        const long long oi = at(a.o, bh, t, 0), gi = at(a.dout, bh, t, 0);
        float s = 0.0f;
        for (int e = lane; e < a.d; e += 32)
            s += nb_ld(a.o.p, oi + e * a.o.cs, mbf(a.o)) * nb_ld(a.dout.p, gi + e * a.dout.cs, mbf(a.dout));
        _Pragma("unroll") for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
        if (lane == 0) a.delta[row] = s;
        if (a.z.p)
            for (int e = lane; e < a.d; e += 32) ((float *)a.z.p)[at(a.z, bh, t, e)] = 0.0f;
    }
}
extern "C" __global__ void nb_attn_delta_t(const DeltaArgs a) {
    for (long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x; row < a.rows;
         row += (long long)gridDim.x * blockDim.x) {
        const long long bh = row / a.T;
        const int t = (int)(row - bh * a.T);
        const long long oi = at(a.o, bh, t, 0), gi = at(a.dout, bh, t, 0);
        float s = 0.0f;
        for (int e = 0; e < a.d; e++)
            s += nb_ld(a.o.p, oi + e * a.o.cs, mbf(a.o)) * nb_ld(a.dout.p, gi + e * a.dout.cs, mbf(a.dout));
        a.delta[row] = s;
        if (a.z.p)
            for (int e = 0; e < a.d; e++) ((float *)a.z.p)[at(a.z, bh, t, e)] = 0.0f;
    }
}
/* dst(bh, t, i) = [dst +] src[(bh d + i) T + t] */
extern "C" __global__ void nb_attn_dq_fin(const FinArgs a) {
    const long long dT = (long long)a.d * a.T;
    for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; x < a.n;
         x += (long long)gridDim.x * blockDim.x) {
        const long long bh = x / dT, r = x - bh * dT;
        const int i = (int)(r / a.T), t = (int)(r - (long long)i * a.T);
        const long long gi = at(a.dst, bh, t, i);
        float v = a.src[x];
        if (a.add) v += nb_ld(a.dst.p, gi, mbf(a.dst));
        nb_st(a.dst.p, gi, mbf(a.dst), v);
    }
}
