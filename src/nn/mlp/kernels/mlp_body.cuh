// The split kernels: weight conversion (mlp_convert), forward (mlp_fwd_*, mlp_fwd_train_*),
// backward (mlp_bwd, mlp_bwd_dx) and weight gradient (mlp_dw).
template <int A> __device__ __forceinline__ float act_f(float x) {
    if (A == 1) return fmaxf(x, 0.f);
    if (A == 2) return x > 0.f ? x : 0.01f * x;
    if (A == 3) return x / (1.f + __expf(-x));
    if (A == 4) return 1.f / (1.f + __expf(-x));
    if (A == 5) return tanhf(x);
    return x;
}
template <int A> __device__ __forceinline__ float dact_f(float z) {
    if (A == 1) return z > 0.f ? 1.f : 0.f;
    if (A == 2) return z > 0.f ? 1.f : 0.01f;
    if (A == 3) { float s = 1.f / (1.f + __expf(-z)); return s * (1.f + z * (1.f - s)); }
    if (A == 4) { float s = 1.f / (1.f + __expf(-z)); return s * (1.f - s); }
    if (A == 5) { float t = tanhf(z); return 1.f - t * t; }
    return 1.f;
}
template <int A> __device__ __forceinline__ u32 act_pair(u32 v) {
    if (A == 0) return v;
    float lo, hi;
    unpack2(v, lo, hi);
    return pack2(act_f<A>(lo), act_f<A>(hi));
}

/* B fragment of y = a * M^T for a matrix M [rows n][cols k] with row stride S (halves). */
__device__ __forceinline__ void ldb(const u16 *w, int S, int nt, int kt, int g, int t, u32 &b0, u32 &b1) {
    const u16 *p = w + (nt * 8 + g) * S + kt * 16 + 2 * t;
    b0 = *(const u32 *)p;
    b1 = *(const u32 *)(p + 8);
}

/* Two consecutive input features of row r as a packed pair (zeros outside the matrix). */
template <int XH> __device__ __forceinline__ u32 ldx(const void *x, long long B, long long r, int c) {
    if (r >= B || c >= N_IN) return 0u;
    if (XH) {
        const u16 *p = (const u16 *)x + r * N_IN + c;
        if (N_IN % 2 == 0 && !IS_BF16) return *(const u32 *)p;
        float lo = f16_to_f32(p[0]), hi = c + 1 < N_IN ? f16_to_f32(p[1]) : 0.f;
        return pack2(lo, hi);
    } else {
        const float *p = (const float *)x + r * N_IN + c;
        if (N_IN % 2 == 0) { float2 v = *(const float2 *)p; return pack2(v.x, v.y); }
        return pack2(p[0], c + 1 < N_IN ? p[1] : 0.f);
    }
}

/* Stores accumulator pair (v0, v1) at row r, columns c, c+1 of a [B, NCOLS] f32 matrix. */
template <int NCOLS> __device__ __forceinline__ void st2(float *y, long long B, long long r, int c, float v0, float v1) {
    if (r >= B || c >= NCOLS) return;
    float *p = y + r * NCOLS + c;
    if (NCOLS % 2 == 0) { *(float2 *)p = make_float2(v0, v1); return; }
    p[0] = v0;
    if (c + 1 < NCOLS) p[1] = v1;
}

extern __shared__ uint4 nb_smem[];

/* ---- weights: f32 master -> padded compute-dtype copies (forward, transposed), f32 bias ---- */
extern "C" __global__ void mlp_convert(MlpParams p) {
    long long n = FTOT + TTOT + BTOT;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (long long)gridDim.x * blockDim.x) {
        if (idx < FTOT) {
            int l = idx < F0 ? 0 : 1 + (int)((idx - F0) / FH);
            if (l > NL - 1) l = NL - 1;
            long long loc = idx - wf_off(l);
            int S = l == 0 ? SF0 : SFH;
            int r = (int)(loc / S), c = (int)(loc % S);
            float v = (r < l_rows(l) && c < l_cols(l)) ? p.params[p_off(l) + (long long)r * l_cols(l) + c] : 0.f;
            p.wf[idx] = to_c(v);
        } else if (idx < FTOT + TTOT) {
            long long j = idx - FTOT;
            int l = j < T0 ? 0 : 1 + (int)((j - T0) / TH);
            if (l > NL - 1) l = NL - 1;
            long long loc = j - wt_off(l);
            int S = l == 0 ? ST0 : (l == NL - 1 ? STL : STH);
            int r = (int)(loc / S), c = (int)(loc % S);
            float v = (c < l_rows(l) && r < l_cols(l)) ? p.params[p_off(l) + (long long)c * l_cols(l) + r] : 0.f;
            p.wt[j] = to_c(v);
        } else {
            int j = (int)(idx - FTOT - TTOT);
            int l = j / W;
            if (l > NL - 1) l = NL - 1;
            int o = j - l * W;
            p.bias[j] = (HAS_BIAS && o < l_rows(l)) ? p.params[p_off(l) + (long long)l_rows(l) * l_cols(l) + o] : 0.f;
        }
    }
}

/* ---- forward ------------------------------------------------------------------------------ */
template <int XH, int TRAIN, int SAVEZ = 1> __device__ __forceinline__ void fwd_body(const MlpParams &p) {
    u16 *sw = (u16 *)nb_smem;
    float *sb = (float *)(sw + FTOT);
    if (WSMEM_F) {
        const uint4 *src = (const uint4 *)p.wf;
        uint4 *dst = (uint4 *)sw;
        for (int i = threadIdx.x; i < (int)(FTOT / 8); i += blockDim.x) dst[i] = src[i];
        if (HAS_BIAS) for (int i = threadIdx.x; i < BTOT; i += blockDim.x) sb[i] = p.bias[i];
        __syncthreads();
    }
    const u16 *wsrc = WSMEM_F ? (const u16 *)sw : (const u16 *)p.wf;
    const float *bsrc = WSMEM_F ? (const float *)sb : (const float *)p.bias;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    for (int tile = blockIdx.x * WARPS + warp; tile < p.n_wtiles; tile += gridDim.x * WARPS) {
        const long long row0 = (long long)tile * (16 * MT);
        float acc[MT][NW][4];
        _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
            float b0 = HAS_BIAS ? bsrc[nt * 8 + 2 * t] : 0.f, b1 = HAS_BIAS ? bsrc[nt * 8 + 2 * t + 1] : 0.f;
            _Pragma("unroll") for (int m = 0; m < MT; m++) {
                acc[m][nt][0] = b0; acc[m][nt][1] = b1; acc[m][nt][2] = b0; acc[m][nt][3] = b1;
            }
        }
        _Pragma("unroll 4") for (int kt = 0; kt < KI; kt++) {
            u32 a[MT][4];
            _Pragma("unroll") for (int m = 0; m < MT; m++) {
                long long r0 = row0 + m * 16 + g, r1 = r0 + 8;
                int c = kt * 16 + 2 * t;
                a[m][0] = ldx<XH>(p.x, p.batch, r0, c);
                a[m][1] = ldx<XH>(p.x, p.batch, r1, c);
                a[m][2] = ldx<XH>(p.x, p.batch, r0, c + 8);
                a[m][3] = ldx<XH>(p.x, p.batch, r1, c + 8);
                if (TRAIN) p.s_in[((long long)(tile * MT + m) * KI + kt) * 32 + lane] = make_uint4(a[m][0], a[m][1], a[m][2], a[m][3]);
            }
            _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                u32 b0, b1;
                ldb(wsrc, SF0, nt, kt, g, t, b0, b1);
                _Pragma("unroll") for (int m = 0; m < MT; m++) mma(acc[m][nt], a[m], b0, b1);
            }
        }
        u32 h[MT][KW][4];
        _Pragma("unroll 1") for (int l = 1; l < NL; l++) {
            _Pragma("unroll") for (int m = 0; m < MT; m++) {
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                    u32 z0 = pack2(acc[m][2 * kt][0], acc[m][2 * kt][1]);
                    u32 z1 = pack2(acc[m][2 * kt][2], acc[m][2 * kt][3]);
                    u32 z2 = pack2(acc[m][2 * kt + 1][0], acc[m][2 * kt + 1][1]);
                    u32 z3 = pack2(acc[m][2 * kt + 1][2], acc[m][2 * kt + 1][3]);
                    if (TRAIN && SAVEZ) p.s_z[(((long long)(l - 1) * p.t16 + tile * MT + m) * KW + kt) * 32 + lane] = make_uint4(z0, z1, z2, z3);
                    h[m][kt][0] = act_pair<ACT>(z0); h[m][kt][1] = act_pair<ACT>(z1);
                    h[m][kt][2] = act_pair<ACT>(z2); h[m][kt][3] = act_pair<ACT>(z3);
                }
            }
            if (l < NL - 1) {
                const u16 *wl = wsrc + wf_off(l);
                const float *bl = bsrc + l * W;
                _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                    float b0 = HAS_BIAS ? bl[nt * 8 + 2 * t] : 0.f, b1 = HAS_BIAS ? bl[nt * 8 + 2 * t + 1] : 0.f;
                    _Pragma("unroll") for (int m = 0; m < MT; m++) {
                        acc[m][nt][0] = b0; acc[m][nt][1] = b1; acc[m][nt][2] = b0; acc[m][nt][3] = b1;
                    }
                }
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                    _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                        u32 b0, b1;
                        ldb(wl, SFH, nt, kt, g, t, b0, b1);
                        _Pragma("unroll") for (int m = 0; m < MT; m++) mma(acc[m][nt], h[m][kt], b0, b1);
                    }
                }
            }
        }
        const u16 *wl = wsrc + wf_off(NL - 1);
        const float *bl = bsrc + (NL - 1) * W;
        _Pragma("unroll 1") for (int nc = 0; nc < NO8; nc += NCHO) {
            float o[MT][NCHO][4];
            _Pragma("unroll") for (int j = 0; j < NCHO; j++) {
                int c = (nc + j) * 8 + 2 * t;
                float b0 = HAS_BIAS ? bl[c] : 0.f, b1 = HAS_BIAS ? bl[c + 1] : 0.f;
                _Pragma("unroll") for (int m = 0; m < MT; m++) {
                    o[m][j][0] = b0; o[m][j][1] = b1; o[m][j][2] = b0; o[m][j][3] = b1;
                }
            }
            _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                _Pragma("unroll") for (int j = 0; j < NCHO; j++) {
                    u32 b0, b1;
                    ldb(wl, SFH, nc + j, kt, g, t, b0, b1);
                    _Pragma("unroll") for (int m = 0; m < MT; m++) mma(o[m][j], h[m][kt], b0, b1);
                }
            }
            _Pragma("unroll") for (int m = 0; m < MT; m++) {
                long long r0 = row0 + m * 16 + g;
                if (TRAIN && OUT_ACT != 0) {
                    _Pragma("unroll") for (int j = 0; j < NCHO; j += 2) {
                        int kto = (nc + j) / 2;
                        p.s_zo[((long long)(tile * MT + m) * KO + kto) * 32 + lane] = make_uint4(
                            pack2(o[m][j][0], o[m][j][1]), pack2(o[m][j][2], o[m][j][3]),
                            pack2(o[m][j + 1][0], o[m][j + 1][1]), pack2(o[m][j + 1][2], o[m][j + 1][3]));
                    }
                }
                _Pragma("unroll") for (int j = 0; j < NCHO; j++) {
                    int c = (nc + j) * 8 + 2 * t;
                    st2<N_OUT>(p.y, p.batch, r0, c, act_f<OUT_ACT>(o[m][j][0]), act_f<OUT_ACT>(o[m][j][1]));
                    st2<N_OUT>(p.y, p.batch, r0 + 8, c, act_f<OUT_ACT>(o[m][j][2]), act_f<OUT_ACT>(o[m][j][3]));
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_fwd_f32(MlpParams p) { fwd_body<0, 0>(p); }
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_fwd_f16(MlpParams p) { fwd_body<1, 0>(p); }
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_fwd_train_f32(MlpParams p) { fwd_body<0, 1>(p); }
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_fwd_train_f16(MlpParams p) { fwd_body<1, 1>(p); }

/* ---- backward: dL/dz per layer (saved for the weight gradients) and dL/dx ------------------- */
template <int DX> __device__ __forceinline__ void bwd_body(const MlpParams &p) {
    u16 *sw = (u16 *)nb_smem;
    if (WSMEM_B) {
        const uint4 *src = (const uint4 *)p.wt;
        uint4 *dst = (uint4 *)sw;
        for (int i = threadIdx.x; i < (int)(TTOT / 8); i += blockDim.x) dst[i] = src[i];
        __syncthreads();
    }
    const u16 *wsrc = WSMEM_B ? (const u16 *)sw : (const u16 *)p.wt;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    uint4 *dlast = p.s_delta + (long long)(NL - 1) * p.t16 * KW * 32;
    for (int tile = blockIdx.x * WARPS + warp; tile < p.n_wtiles; tile += gridDim.x * WARPS) {
        const long long row0 = (long long)tile * (16 * MT);
        float acc[MT][NW][4];
        _Pragma("unroll") for (int m = 0; m < MT; m++)
            _Pragma("unroll") for (int nt = 0; nt < NW; nt++)
                _Pragma("unroll") for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.f;
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
                    bool ok = rr[q] < p.batch;
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
                if (OUT_ACT != 0) {
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
                dlast[((long long)(tile * MT + m) * KO + kt) * 32 + lane] = make_uint4(d[m][0], d[m][1], d[m][2], d[m][3]);
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
                    long long si = (((long long)l * p.t16 + tile * MT + m) * KW + kt) * 32 + lane;
                    uint4 zr = p.s_z[si];
                    const u32 zz[4] = {zr.x, zr.y, zr.z, zr.w};
                    const float av[8] = {acc[m][2 * kt][0], acc[m][2 * kt][1], acc[m][2 * kt][2], acc[m][2 * kt][3],
                                         acc[m][2 * kt + 1][0], acc[m][2 * kt + 1][1], acc[m][2 * kt + 1][2], acc[m][2 * kt + 1][3]};
                    _Pragma("unroll") for (int q = 0; q < 4; q++) {
                        float lo, hi;
                        unpack2(zz[q], lo, hi);
                        d[m][kt][q] = pack2(av[2 * q] * dact_f<ACT>(lo), av[2 * q + 1] * dact_f<ACT>(hi));
                    }
                    p.s_delta[si] = make_uint4(d[m][kt][0], d[m][kt][1], d[m][kt][2], d[m][kt][3]);
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
            } else if (DX) {
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
    }
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_bwd(MlpParams p) { bwd_body<0>(p); }
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_bwd_dx(MlpParams p) { bwd_body<1>(p); }

/* ---- weight gradients: dW_l = delta_l^T h_l over the batch (split over blocks, atomics) ---- */
template <int O_PAD, int I_PAD, int APPLY_ACT>
__device__ __forceinline__ void dw_layer(const MlpParams &p, const uint4 *dsrc, const uint4 *hsrc,
                                         int rows, int cols, long long w_off) {
    constexpr int MO = (O_PAD % 32 == 0) ? 2 : 1;
    constexpr int N8 = I_PAD / 8;
    constexpr int NI = (N8 % 8 == 0) ? 8 : ((N8 % 4 == 0) ? 4 : 2);
    constexpr int NIG = N8 / NI, NOG = O_PAD / (16 * MO), ITEMS = NOG * NIG;
    constexpr int BS = ITEMS >= DWW ? 1 : DWW / ITEMS;
    constexpr int KD = O_PAD / 16, KH = I_PAD / 16;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int t_begin = blockIdx.x * p.dw_tiles;
    int t_end = t_begin + p.dw_tiles;
    if (t_end > p.t16_valid) t_end = p.t16_valid;
    for (int u = warp; u < ITEMS * BS; u += DWW) {
        const int item = u % ITEMS, sub = u / ITEMS;
        const int og = item / NIG, ig = item % NIG;
        float acc[MO][NI][4];
        float bs[MO][4];
        _Pragma("unroll") for (int mo = 0; mo < MO; mo++) {
            _Pragma("unroll") for (int i = 0; i < 4; i++) bs[mo][i] = 0.f;
            _Pragma("unroll") for (int n = 0; n < NI; n++)
                _Pragma("unroll") for (int i = 0; i < 4; i++) acc[mo][n][i] = 0.f;
        }
        for (int tt = t_begin + sub; tt < t_end; tt += BS) {
            u32 a[MO][4];
            _Pragma("unroll") for (int mo = 0; mo < MO; mo++) {
                uint4 dv = dsrc[((long long)tt * KD + og * MO + mo) * 32 + lane];
                a[mo][0] = trans8(dv.x); a[mo][1] = trans8(dv.z);
                a[mo][2] = trans8(dv.y); a[mo][3] = trans8(dv.w);
                if (HAS_BIAS && ig == 0) {
                    float x0, x1, y0, y1;
                    unpack2(dv.x, x0, x1); unpack2(dv.y, y0, y1);
                    bs[mo][0] += x0 + y0; bs[mo][1] += x1 + y1;
                    unpack2(dv.z, x0, x1); unpack2(dv.w, y0, y1);
                    bs[mo][2] += x0 + y0; bs[mo][3] += x1 + y1;
                }
            }
            _Pragma("unroll") for (int j = 0; j < NI / 2; j++) {
                uint4 hv = hsrc[((long long)tt * KH + ig * (NI / 2) + j) * 32 + lane];
                if (APPLY_ACT) {
                    hv.x = act_pair<ACT>(hv.x); hv.y = act_pair<ACT>(hv.y);
                    hv.z = act_pair<ACT>(hv.z); hv.w = act_pair<ACT>(hv.w);
                }
                u32 b00 = trans8(hv.x), b01 = trans8(hv.y), b10 = trans8(hv.z), b11 = trans8(hv.w);
                _Pragma("unroll") for (int mo = 0; mo < MO; mo++) {
                    mma(acc[mo][2 * j], a[mo], b00, b01);
                    mma(acc[mo][2 * j + 1], a[mo], b10, b11);
                }
            }
        }
        _Pragma("unroll") for (int mo = 0; mo < MO; mo++) {
            int o0 = (og * MO + mo) * 16 + g;
            _Pragma("unroll") for (int n = 0; n < NI; n++) {
                int i0 = (ig * NI + n) * 8 + 2 * t;
                _Pragma("unroll") for (int q = 0; q < 4; q++) {
                    int o = o0 + (q >= 2 ? 8 : 0), i = i0 + (q & 1);
                    if (o < rows && i < cols) atomicAdd(p.grads + w_off + (long long)o * cols + i, acc[mo][n][q] * p.inv_scale);
                }
            }
            if (HAS_BIAS && ig == 0) {
                _Pragma("unroll") for (int q = 0; q < 4; q++) {
                    float v = bs[mo][q];
                    v += __shfl_xor_sync(0xffffffffu, v, 4);
                    v += __shfl_xor_sync(0xffffffffu, v, 8);
                    v += __shfl_xor_sync(0xffffffffu, v, 16);
                    int o = (og * MO + mo) * 16 + 2 * t + (q & 1) + (q >= 2 ? 8 : 0);
                    if (g == 0 && o < rows) atomicAdd(p.grads + w_off + (long long)rows * cols + o, v * p.inv_scale);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(DWW * 32, 2) mlp_dw(MlpParams p) {
    const int l = blockIdx.y;
    const long long tk = (long long)p.t16 * KW * 32;
    if (l == 0) {
        dw_layer<W, IN_PAD, 0>(p, p.s_delta, p.s_in, W, N_IN, 0);
    } else if (l == NL - 1) {
        dw_layer<OUT_PAD, W, (ACT != 0)>(p, p.s_delta + (long long)(NL - 1) * tk, p.s_z + (long long)(l - 1) * tk, N_OUT, W, p_off(l));
    } else {
        dw_layer<W, W, (ACT != 0)>(p, p.s_delta + (long long)l * tk, p.s_z + (long long)(l - 1) * tk, W, W, p_off(l));
    }
}
