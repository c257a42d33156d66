// The fused backward (mlp_bwd_fused*, one block per SM, per-block f32 weight-gradient sums reduced by
// mlp_dw_reduce_w).
constexpr long long ACC_TOT = (long long)W * IN_PAD + (long long)(NL - 2) * W * W + (long long)OUT_PAD * W;
constexpr long long ACC_BLOCK = ACC_TOT + BTOT;
__device__ __forceinline__ long long acc_off(int l) { return l == 0 ? 0 : (long long)W * IN_PAD + (long long)(l - 1) * W * W; }

template <int I_PAD> struct FusedTile {
    static constexpr int N8 = I_PAD / 8;
    static constexpr int NI = (N8 % 4 == 0) ? 4 : 2;
    static constexpr int NIG = N8 / NI;
};

/* dW_l (O_PAD x I_PAD) += sum over the block tile of delta^T h; delta^T and h^T fragments are in
 * shared memory (sD: FR16 x KD tiles, sH: FR16 x KH tiles, 32 lanes x uint4 each). Each slice
 * (item) is split over KSPL warps by rows, each with its own accumulator copy (KSPL copies of
 * ACC_BLOCK per block), so that narrow layers keep all warps busy. */
template <int O_PAD, int I_PAD>
__device__ __forceinline__ void fused_dw_phase(float *acc_base, const uint4 *sD, const uint4 *sH, int warp, int lane) {
    constexpr int NI = FusedTile<I_PAD>::NI, NIG = FusedTile<I_PAD>::NIG;
    constexpr int NOG = O_PAD / 16, ITEMS = NOG * NIG;
    constexpr int KD = O_PAD / 16, KH = I_PAD / 16;
    for (int u = warp; u < ITEMS * KSPL; u += FW) {
        const int it = u % ITEMS, ksub = u / ITEMS;
        const int og = it / NIG, ig = it % NIG;
        float4 *ap = (float4 *)(acc_base + (long long)ksub * ACC_BLOCK) + (long long)it * NI * 32 + lane;
        float acc[NI][4];
        _Pragma("unroll") for (int n = 0; n < NI; n++) {
            float4 v = ap[n * 32];
            acc[n][0] = v.x; acc[n][1] = v.y; acc[n][2] = v.z; acc[n][3] = v.w;
        }
        _Pragma("unroll 2") for (int ks = ksub; ks < FR16; ks += KSPL) {
            uint4 av = sD[(ks * KD + og) * 32 + lane];
            const u32 a[4] = {av.x, av.y, av.z, av.w};
            _Pragma("unroll") for (int j = 0; j < NI / 2; j++) {
                uint4 hv = sH[(ks * KH + ig * (NI / 2) + j) * 32 + lane];
                mma(acc[2 * j], a, hv.x, hv.y);
                mma(acc[2 * j + 1], a, hv.z, hv.w);
            }
        }
        _Pragma("unroll") for (int n = 0; n < NI; n++) ap[n * 32] = make_float4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]);
    }
}

/* Adds the column sums of one 16x16 gradient fragment (rows: batch) to the bias accumulator. */
__device__ __forceinline__ void bias_sums(float *sb, int col0, int g, int t, const u32 *d) {
    float x0, x1, y0, y1, z0, z1, w0, w1;
    unpack2(d[0], x0, x1); unpack2(d[1], y0, y1); unpack2(d[2], z0, z1); unpack2(d[3], w0, w1);
    float v[4] = {x0 + y0, x1 + y1, z0 + w0, z1 + w1};
    _Pragma("unroll") for (int q = 0; q < 4; q++) {
        v[q] += __shfl_xor_sync(0xffffffffu, v[q], 4);
        v[q] += __shfl_xor_sync(0xffffffffu, v[q], 8);
        v[q] += __shfl_xor_sync(0xffffffffu, v[q], 16);
    }
    if (g == 0) {
        atomicAdd(sb + col0 + 2 * t, v[0]);
        atomicAdd(sb + col0 + 2 * t + 1, v[1]);
        atomicAdd(sb + col0 + 2 * t + 8, v[2]);
        atomicAdd(sb + col0 + 2 * t + 9, v[3]);
    }
}

template <int DX> __device__ __forceinline__ void bwd_fused_body(const MlpParams &p) {
    u16 *sw = (u16 *)nb_smem;
    uint4 *sD = nb_smem + (FWSMEM ? (TTOT + 7) / 8 : 0);
    uint4 *sH = sD + FR16 * FKD * 32;
    float *sb = (float *)(sH + FR16 * FKH * 32);
    if (FWSMEM) {
        const uint4 *src = (const uint4 *)p.wt;
        for (int i = threadIdx.x; i < (int)(TTOT / 8); i += blockDim.x) nb_smem[i] = src[i];
    }
    if (HAS_BIAS) for (int i = threadIdx.x; i < BTOT; i += blockDim.x) sb[i] = 0.f;
    float *accb = p.scratch + (long long)blockIdx.x * KSPL * ACC_BLOCK;
    for (long long i = threadIdx.x; i < KSPL * ACC_BLOCK; i += blockDim.x) accb[i] = 0.f;
    __syncthreads();
    const u16 *wsrc = FWSMEM ? (const u16 *)sw : (const u16 *)p.wt;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int n_btiles = (p.n_wtiles + FW - 1) / FW;
    for (int bt = blockIdx.x; bt < n_btiles; bt += gridDim.x) {
        const int tile = bt * FW + warp;
        const bool valid = tile < p.n_wtiles;
        const long long row0 = (long long)tile * (16 * MT);
        float acc[MT][NW][4];
        _Pragma("unroll") for (int m = 0; m < MT; m++)
            _Pragma("unroll") for (int nt = 0; nt < NW; nt++)
                _Pragma("unroll") for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.f;
        /* FPF: the pre-activations of the next layer are loaded one step ahead, so their latency
         * hides behind the weight-gradient phase and the matrix product. */
        uint4 zn[FPF ? MT : 1][FPF ? KW : 1];
        if (FPF) {
            _Pragma("unroll") for (int m = 0; m < MT; m++)
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++)
                    zn[FPF ? m : 0][FPF ? kt : 0] = valid ? p.s_z[(((long long)(NL - 2) * p.t16 + tile * MT + m) * KW + kt) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u);
        }
        const u16 *wl = wsrc + wt_off(NL - 1);
        _Pragma("unroll 4") for (int kt = 0; kt < KO; kt++) {
            u32 d[MT][4];
            _Pragma("unroll") for (int m = 0; m < MT; m++) {
                long long r0 = row0 + m * 16 + g, r1 = r0 + 8;
                int c = kt * 16 + 2 * t;
                float v[8];
                const long long rr[4] = {r0, r1, r0, r1};
                const int cc[4] = {c, c, c + 8, c + 8};
                _Pragma("unroll") for (int q = 0; q < 4; q++) {
                    bool ok = valid && rr[q] < p.batch;
                    const float *src = p.dy + rr[q] * N_OUT + cc[q];
                    if (N_OUT % 2 == 0) { /* cc even: both or neither in range, 8-byte aligned */
                        float2 dv = (ok && cc[q] < N_OUT) ? *(const float2 *)src : make_float2(0.f, 0.f);
                        v[2 * q] = dv.x * p.scale;
                        v[2 * q + 1] = dv.y * p.scale;
                    } else {
                        v[2 * q] = (ok && cc[q] < N_OUT) ? src[0] * p.scale : 0.f;
                        v[2 * q + 1] = (ok && cc[q] + 1 < N_OUT) ? src[1] * p.scale : 0.f;
                    }
                }
                if (OUT_ACT != 0 && valid) {
                    uint4 zo = p.s_zo[((long long)(tile * MT + m) * KO + kt) * 32 + lane];
                    const u32 zz[4] = {zo.x, zo.y, zo.z, zo.w};
                    _Pragma("unroll") for (int q = 0; q < 4; q++) {
                        float lo, hi;
                        unpack2(zz[q], lo, hi);
                        v[2 * q] *= dact_f<OUT_ACT>(lo);
                        v[2 * q + 1] *= dact_f<OUT_ACT>(hi);
                    }
                }
                _Pragma("unroll") for (int q = 0; q < 4; q++) d[m][q] = pack2(v[2 * q], v[2 * q + 1]);
                sD[((warp * MT + m) * KO + kt) * 32 + lane] = make_uint4(trans8(d[m][0]), trans8(d[m][2]), trans8(d[m][1]), trans8(d[m][3]));
                if (HAS_BIAS) bias_sums(sb + (NL - 1) * W, kt * 16, g, t, d[m]);
            }
            _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                u32 b0, b1;
                ldb(wl, STL, nt, kt, g, t, b0, b1);
                _Pragma("unroll") for (int m = 0; m < MT; m++) mma(acc[m][nt], d[m], b0, b1);
            }
        }
        _Pragma("unroll 1") for (int l = NL - 2; l >= 0; l--) {
            u32 d[MT][KW][4];
            _Pragma("unroll") for (int m = 0; m < MT; m++) {
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                    uint4 zr = FPF ? zn[FPF ? m : 0][FPF ? kt : 0]
                                   : (valid ? p.s_z[(((long long)l * p.t16 + tile * MT + m) * KW + kt) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u));
                    const u32 zz[4] = {zr.x, zr.y, zr.z, zr.w};
                    const float av[8] = {acc[m][2 * kt][0], acc[m][2 * kt][1], acc[m][2 * kt][2], acc[m][2 * kt][3],
                                         acc[m][2 * kt + 1][0], acc[m][2 * kt + 1][1], acc[m][2 * kt + 1][2], acc[m][2 * kt + 1][3]};
                    u32 hh[4];
                    _Pragma("unroll") for (int q = 0; q < 4; q++) {
                        float lo, hi;
                        unpack2(zz[q], lo, hi);
                        d[m][kt][q] = pack2(av[2 * q] * dact_f<ACT>(lo), av[2 * q + 1] * dact_f<ACT>(hi));
                        hh[q] = act_pair<ACT>(zz[q]);
                    }
                    sH[((warp * MT + m) * KW + kt) * 32 + lane] = make_uint4(trans8(hh[0]), trans8(hh[1]), trans8(hh[2]), trans8(hh[3]));
                }
            }
            if (FPF && l > 0) {
                _Pragma("unroll") for (int m = 0; m < MT; m++)
                    _Pragma("unroll") for (int kt = 0; kt < KW; kt++)
                        zn[FPF ? m : 0][FPF ? kt : 0] = valid ? p.s_z[(((long long)(l - 1) * p.t16 + tile * MT + m) * KW + kt) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u);
            } else if (FPF && KI <= KW) { /* l == 0: the saved input, for layer 0's gradient */
                _Pragma("unroll") for (int m = 0; m < MT; m++)
                    _Pragma("unroll") for (int kt = 0; kt < (KI <= KW ? KI : 1); kt++)
                        zn[FPF ? m : 0][FPF ? kt : 0] = valid ? p.s_in[((long long)(tile * MT + m) * KI + kt) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u);
            }
            __syncthreads();
            if (l + 1 == NL - 1) fused_dw_phase<OUT_PAD, W>(accb + acc_off(l + 1), sD, sH, warp, lane);
            else fused_dw_phase<W, W>(accb + acc_off(l + 1), sD, sH, warp, lane);
            __syncthreads();
            _Pragma("unroll") for (int m = 0; m < MT; m++) {
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                    sD[((warp * MT + m) * KW + kt) * 32 + lane] = make_uint4(trans8(d[m][kt][0]), trans8(d[m][kt][2]), trans8(d[m][kt][1]), trans8(d[m][kt][3]));
                    if (HAS_BIAS) bias_sums(sb + l * W, kt * 16, g, t, d[m][kt]);
                }
            }
            if (l > 0) {
                const u16 *wh = wsrc + wt_off(l);
                _Pragma("unroll") for (int m = 0; m < MT; m++)
                    _Pragma("unroll") for (int nt = 0; nt < NW; nt++)
                        _Pragma("unroll") for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.f;
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                    _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                        u32 b0, b1;
                        ldb(wh, STH, nt, kt, g, t, b0, b1);
                        _Pragma("unroll") for (int m = 0; m < MT; m++) mma(acc[m][nt], d[m][kt], b0, b1);
                    }
                }
            } else if (DX && valid) {
                const u16 *w0 = wsrc;
                _Pragma("unroll 1") for (int nc = 0; nc < NI8; nc += NCHI) {
                    float o[MT][NCHI][4];
                    _Pragma("unroll") for (int m = 0; m < MT; m++)
                        _Pragma("unroll") for (int j = 0; j < NCHI; j++)
                            _Pragma("unroll") for (int i = 0; i < 4; i++) o[m][j][i] = 0.f;
                    _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                        _Pragma("unroll") for (int j = 0; j < NCHI; j++) {
                            u32 b0, b1;
                            ldb(w0, ST0, nc + j, kt, g, t, b0, b1);
                            _Pragma("unroll") for (int m = 0; m < MT; m++) mma(o[m][j], d[m][kt], b0, b1);
                        }
                    }
                    _Pragma("unroll") for (int m = 0; m < MT; m++) {
                        long long r0 = row0 + m * 16 + g;
                        _Pragma("unroll") for (int j = 0; j < NCHI; j++) {
                            int c = (nc + j) * 8 + 2 * t;
                            st2<N_IN>(p.dx, p.batch, r0, c, o[m][j][0] * p.inv_scale, o[m][j][1] * p.inv_scale);
                            st2<N_IN>(p.dx, p.batch, r0 + 8, c, o[m][j][2] * p.inv_scale, o[m][j][3] * p.inv_scale);
                        }
                    }
                }
            }
        }
        /* layer 0: h_0 = the saved input */
        _Pragma("unroll") for (int m = 0; m < MT; m++) {
            _Pragma("unroll 4") for (int kt = 0; kt < KI; kt++) {
                uint4 hv = (FPF && KI <= KW) ? zn[FPF ? m : 0][(FPF && KI <= KW) ? kt : 0]
                           : (valid ? p.s_in[((long long)(tile * MT + m) * KI + kt) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u));
                sH[((warp * MT + m) * KI + kt) * 32 + lane] = make_uint4(trans8(hv.x), trans8(hv.y), trans8(hv.z), trans8(hv.w));
            }
        }
        __syncthreads();
        fused_dw_phase<W, IN_PAD>(accb, sD, sH, warp, lane);
        __syncthreads();
    }
    if (HAS_BIAS) for (int i = threadIdx.x; i < BTOT; i += blockDim.x) accb[ACC_TOT + i] = sb[i];
}

extern "C" __global__ void __launch_bounds__(FW * 32, FMINB) mlp_bwd_fused(MlpParams p) { bwd_fused_body<0>(p); }
extern "C" __global__ void __launch_bounds__(FW * 32, FMINB) mlp_bwd_fused_dx(MlpParams p) { bwd_fused_body<1>(p); }

/* grads = inv_scale * sum over the per-block accumulators (p.dw_tiles = blocks x KSPL). */
template <int O_PAD, int I_PAD>
__device__ __forceinline__ void reduce_map(long long e, int &o, int &i) {
    constexpr int NI = FusedTile<I_PAD>::NI, NIG = FusedTile<I_PAD>::NIG;
    const int comp = (int)(e & 3), lane = (int)((e >> 2) & 31);
    const long long rest = e >> 7; /* (item * NI + n) */
    const int n = (int)(rest % NI), it = (int)(rest / NI);
    const int og = it / NIG, ig = it % NIG, g = lane >> 2, t = lane & 3;
    o = og * 16 + g + (comp >= 2 ? 8 : 0);
    i = (ig * NI + n) * 8 + 2 * t + (comp & 1);
}

/* The same sums with the blocks split over the 8 warps of a block (32 consecutive elements per
 * block, coalesced), then combined in shared memory: many more loads in flight per element than
 * one thread walking all p.dw_tiles copies. Launched with ceil(ACC_BLOCK / 32) blocks of 256. */
__device__ __forceinline__ void dw_reduce_store(const MlpParams &p, long long e, float s) {
    if (e < ACC_TOT) {
        int l, o, i;
        long long loc;
        if (e < acc_off(1)) { l = 0; loc = e; reduce_map<W, IN_PAD>(loc, o, i); }
        else if (e >= acc_off(NL - 1)) { l = NL - 1; loc = e - acc_off(NL - 1); reduce_map<OUT_PAD, W>(loc, o, i); }
        else { l = 1 + (int)((e - acc_off(1)) / ((long long)W * W)); loc = e - acc_off(l); reduce_map<W, W>(loc, o, i); }
        if (o < l_rows(l) && i < l_cols(l)) p.grads[p_off(l) + (long long)o * l_cols(l) + i] = s;
    } else if (HAS_BIAS) {
        int j = (int)(e - ACC_TOT);
        int l = j / W;
        if (l > NL - 1) l = NL - 1;
        int o = j - l * W;
        if (o < l_rows(l)) p.grads[p_off(l) + (long long)l_rows(l) * l_cols(l) + o] = s;
    }
}
extern "C" __global__ void __launch_bounds__(256) mlp_dw_reduce_w(MlpParams p) {
    __shared__ float part[8][33];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long e = (long long)blockIdx.x * 32 + lane;
    float s = 0.f;
    if (e < ACC_BLOCK) {
        float s1 = 0.f;
        int b = warp;
        for (; b + 8 < p.dw_tiles; b += 16) {
            s += p.scratch[(long long)b * ACC_BLOCK + e];
            s1 += p.scratch[(long long)(b + 8) * ACC_BLOCK + e];
        }
        if (b < p.dw_tiles) s += p.scratch[(long long)b * ACC_BLOCK + e];
        s += s1;
    }
    part[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && e < ACC_BLOCK) {
        float t = 0.f;
        _Pragma("unroll") for (int w = 0; w < 8; w++) t += part[w][lane];
        dw_reduce_store(p, e, t * p.inv_scale);
    }
}

