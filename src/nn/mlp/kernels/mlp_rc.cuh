// The recomputing fused backward (mlp_fwd_train_nz_*, mlp_bwd_rc*): only for configurations that
// use it (widths <= 64, no output activation, few layers, MT = 1).
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_fwd_train_nz_f32(MlpParams p) { fwd_body<0, 1, 0>(p); }
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB) mlp_fwd_train_nz_f16(MlpParams p) { fwd_body<1, 1, 0>(p); }

/* FL = 1 (mlp_train_rc_enc_*): the training forward and the loss are done here too: the input
 * rows come from p.x (XH: f16, else f32) instead of the saved s_in, the output layer is computed
 * after the recompute, and dL/dy = loss'(y, p.target) * p.inv_n (the loss mean added into
 * p.loss, as nb_loss) replaces p.dy. Needs OUT_PAD == 16 and KI <= 4 (checked by the host). */
__device__ __forceinline__ float fl_grad(const MlpParams &p, float y, bool ok, long long r, int c, float &lacc) {
    if (!ok || c >= N_OUT) return 0.f;
    const float d = y - p.target[r * N_OUT + c];
    float l, gr;
    if (p.loss_kind == 0) { l = d * d; gr = 2.0f * d; }
    else if (p.loss_kind == 1) { l = fabsf(d); gr = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f); }
    else { const float sc = 1.0f / (y * y + 0.01f); l = d * d * sc; gr = 2.0f * d * sc; }
    lacc += l;
    return gr * p.inv_n * p.scale;
}

template <int DX, int FL = 0, int XH = 1> __device__ __forceinline__ void bwd_rc_body(const MlpParams &p) {
    static_assert(MT == 1, "mlp_bwd_rc keeps one 16-row tile per warp");
    static_assert(OUT_ACT == 0, "mlp_bwd_rc needs no output activation");
    u16 *swf = (u16 *)nb_smem;
    u16 *swt = swf + FTOT;
    uint4 *sD = (uint4 *)(swt + TTOT);
    uint4 *sH = sD + FR16 * FKD * 32;
    float *sb = (float *)(sH + FR16 * FKH * 32);
    float *s_g = sb + (HAS_BIAS ? BTOT : 0); /* DX == 2: coarse grid levels' gradient sums */
    {
        const uint4 *src = (const uint4 *)p.wf;
        for (int i = threadIdx.x; i < (int)(FTOT / 8); i += blockDim.x) ((uint4 *)swf)[i] = src[i];
        src = (const uint4 *)p.wt;
        for (int i = threadIdx.x; i < (int)(TTOT / 8); i += blockDim.x) ((uint4 *)swt)[i] = src[i];
    }
    if (HAS_BIAS) for (int i = threadIdx.x; i < BTOT; i += blockDim.x) sb[i] = 0.f;
    float *accb = p.scratch + (long long)blockIdx.x * KSPL * ACC_BLOCK;
    for (long long i = threadIdx.x; i < KSPL * ACC_BLOCK; i += blockDim.x) accb[i] = 0.f;
    if (DX == 2) enc_smem_zero(s_g);
    __syncthreads();
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int n_btiles = (p.n_wtiles + FW - 1) / FW;
    float lacc = 0.f; /* FL: this lane's loss sum */
    for (int bt = blockIdx.x; bt < n_btiles; bt += gridDim.x) {
        const int tile = bt * FW + warp;
        const bool valid = tile < p.n_wtiles;
        const long long row0 = (long long)tile * 16;
        float acc[NW][4];
        u32 zs[NL - 1][KW][4]; /* recomputed pre-activations of the hidden layers */
        /* ---- forward recompute from the saved input ---- */
        _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
            float b0 = HAS_BIAS ? p.bias[nt * 8 + 2 * t] : 0.f, b1 = HAS_BIAS ? p.bias[nt * 8 + 2 * t + 1] : 0.f;
            acc[nt][0] = b0; acc[nt][1] = b1; acc[nt][2] = b0; acc[nt][3] = b1;
        }
        uint4 xin[FL ? KI : 1]; /* FL: the input fragments, kept for layer 0's weight gradient */
        if constexpr (FL) {
            _Pragma("unroll") for (int kt = 0; kt < KI; kt++) {
                const long long r0 = row0 + g, r1 = r0 + 8;
                const int c = kt * 16 + 2 * t;
                const long long B = valid ? p.batch : 0;
                xin[FL ? kt : 0] = make_uint4(ldx<XH>(p.x, B, r0, c), ldx<XH>(p.x, B, r1, c), ldx<XH>(p.x, B, r0, c + 8),
                                              ldx<XH>(p.x, B, r1, c + 8));
                const u32 a[4] = {xin[FL ? kt : 0].x, xin[FL ? kt : 0].y, xin[FL ? kt : 0].z, xin[FL ? kt : 0].w};
                _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                    u32 b0, b1;
                    ldb(swf, SF0, nt, kt, g, t, b0, b1);
                    mma(acc[nt], a, b0, b1);
                }
            }
        } else {
            _Pragma("unroll 4") for (int kt = 0; kt < KI; kt++) {
                uint4 xv = valid ? p.s_in[((long long)tile * KI + kt) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u);
                const u32 a[4] = {xv.x, xv.y, xv.z, xv.w};
                _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                    u32 b0, b1;
                    ldb(swf, SF0, nt, kt, g, t, b0, b1);
                    mma(acc[nt], a, b0, b1);
                }
            }
        }
        _Pragma("unroll") for (int l = 1; l < NL; l++) {
            u32 h[KW][4];
            _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                zs[l - 1][kt][0] = pack2(acc[2 * kt][0], acc[2 * kt][1]);
                zs[l - 1][kt][1] = pack2(acc[2 * kt][2], acc[2 * kt][3]);
                zs[l - 1][kt][2] = pack2(acc[2 * kt + 1][0], acc[2 * kt + 1][1]);
                zs[l - 1][kt][3] = pack2(acc[2 * kt + 1][2], acc[2 * kt + 1][3]);
                _Pragma("unroll") for (int q = 0; q < 4; q++) h[kt][q] = act_pair<ACT>(zs[l - 1][kt][q]);
            }
            if (l < NL - 1) {
                const u16 *wl = swf + wf_off(l);
                _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                    float b0 = HAS_BIAS ? p.bias[l * W + nt * 8 + 2 * t] : 0.f, b1 = HAS_BIAS ? p.bias[l * W + nt * 8 + 2 * t + 1] : 0.f;
                    acc[nt][0] = b0; acc[nt][1] = b1; acc[nt][2] = b0; acc[nt][3] = b1;
                }
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                    _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                        u32 b0, b1;
                        ldb(wl, SFH, nt, kt, g, t, b0, b1);
                        mma(acc[nt], h[kt], b0, b1);
                    }
                }
            }
        }
        float yo[FL ? NO8 : 1][4]; /* FL: the output layer's forward (C fragments) */
        if constexpr (FL) {
            const u16 *wo = swf + wf_off(NL - 1);
            u32 hl[KW][4];
            _Pragma("unroll") for (int kt = 0; kt < KW; kt++)
                _Pragma("unroll") for (int q = 0; q < 4; q++) hl[kt][q] = act_pair<ACT>(zs[NL - 2][kt][q]);
            _Pragma("unroll") for (int j = 0; j < NO8; j++) {
                const int c = j * 8 + 2 * t;
                const float b0 = HAS_BIAS ? p.bias[(NL - 1) * W + c] : 0.f, b1 = HAS_BIAS ? p.bias[(NL - 1) * W + c + 1] : 0.f;
                yo[FL ? j : 0][0] = b0; yo[FL ? j : 0][1] = b1; yo[FL ? j : 0][2] = b0; yo[FL ? j : 0][3] = b1;
            }
            _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                _Pragma("unroll") for (int j = 0; j < NO8; j++) {
                    u32 b0, b1;
                    ldb(wo, SFH, j, kt, g, t, b0, b1);
                    mma(yo[FL ? j : 0], hl[kt], b0, b1);
                }
            }
        }
        /* ---- backward: the output layer ---- */
        _Pragma("unroll") for (int nt = 0; nt < NW; nt++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) acc[nt][i] = 0.f;
        const u16 *wl = swt + wt_off(NL - 1);
        _Pragma("unroll 4") for (int kt = 0; kt < KO; kt++) {
            u32 d[4];
            const long long r0 = row0 + g, r1 = r0 + 8;
            const int c = kt * 16 + 2 * t;
            float v[8];
            const long long rr[4] = {r0, r1, r0, r1};
            const int cc[4] = {c, c, c + 8, c + 8};
            if constexpr (FL) {
                _Pragma("unroll") for (int q = 0; q < 4; q++) {
                    const bool ok = valid && rr[q] < p.batch;
                    const float *o = yo[FL ? 2 * kt + (q >> 1) : 0] + 2 * (q & 1);
                    v[2 * q] = fl_grad(p, o[0], ok, rr[q], cc[q], lacc);
                    v[2 * q + 1] = fl_grad(p, o[1], ok, rr[q], cc[q] + 1, lacc);
                }
            } else { /* braces: an _Pragma right after `else` breaks the statement binding */
                _Pragma("unroll") for (int q = 0; q < 4; q++) {
                    bool ok = valid && rr[q] < p.batch;
                    const float *src = p.dy + rr[q] * N_OUT + cc[q];
                    if (N_OUT % 2 == 0) {
                        float2 dv = (ok && cc[q] < N_OUT) ? *(const float2 *)src : make_float2(0.f, 0.f);
                        v[2 * q] = dv.x * p.scale;
                        v[2 * q + 1] = dv.y * p.scale;
                    } else {
                        v[2 * q] = (ok && cc[q] < N_OUT) ? src[0] * p.scale : 0.f;
                        v[2 * q + 1] = (ok && cc[q] + 1 < N_OUT) ? src[1] * p.scale : 0.f;
                    }
                }
            }
            _Pragma("unroll") for (int q = 0; q < 4; q++) d[q] = pack2(v[2 * q], v[2 * q + 1]);
            sD[(warp * KO + kt) * 32 + lane] = make_uint4(trans8(d[0]), trans8(d[2]), trans8(d[1]), trans8(d[3]));
            if (HAS_BIAS) bias_sums(sb + (NL - 1) * W, kt * 16, g, t, d);
            _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                u32 b0, b1;
                ldb(wl, STL, nt, kt, g, t, b0, b1);
                mma(acc[nt], d, b0, b1);
            }
        }
        /* ---- backward: hidden layers, last to first ---- */
        _Pragma("unroll") for (int l = NL - 2; l >= 0; l--) {
            u32 d[KW][4];
            _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                const float av[8] = {acc[2 * kt][0], acc[2 * kt][1], acc[2 * kt][2], acc[2 * kt][3],
                                     acc[2 * kt + 1][0], acc[2 * kt + 1][1], acc[2 * kt + 1][2], acc[2 * kt + 1][3]};
                u32 hh[4];
                _Pragma("unroll") for (int q = 0; q < 4; q++) {
                    float lo, hi;
                    unpack2(zs[l][kt][q], lo, hi);
                    d[kt][q] = pack2(av[2 * q] * dact_f<ACT>(lo), av[2 * q + 1] * dact_f<ACT>(hi));
                    hh[q] = act_pair<ACT>(zs[l][kt][q]);
                }
                sH[(warp * KW + kt) * 32 + lane] = make_uint4(trans8(hh[0]), trans8(hh[1]), trans8(hh[2]), trans8(hh[3]));
            }
            __syncthreads();
            if (l + 1 == NL - 1) fused_dw_phase<OUT_PAD, W>(accb + acc_off(l + 1), sD, sH, warp, lane);
            else fused_dw_phase<W, W>(accb + acc_off(l + 1), sD, sH, warp, lane);
            __syncthreads();
            _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                sD[(warp * KW + kt) * 32 + lane] = make_uint4(trans8(d[kt][0]), trans8(d[kt][2]), trans8(d[kt][1]), trans8(d[kt][3]));
                if (HAS_BIAS) bias_sums(sb + l * W, kt * 16, g, t, d[kt]);
            }
            if (l > 0) {
                const u16 *wh = swt + wt_off(l);
                _Pragma("unroll") for (int nt = 0; nt < NW; nt++)
                    _Pragma("unroll") for (int i = 0; i < 4; i++) acc[nt][i] = 0.f;
                _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                    _Pragma("unroll") for (int nt = 0; nt < NW; nt++) {
                        u32 b0, b1;
                        ldb(wh, STH, nt, kt, g, t, b0, b1);
                        mma(acc[nt], d[kt], b0, b1);
                    }
                }
            } else if (DX && valid) {
                _Pragma("unroll 1") for (int nc = 0; nc < NI8; nc += NCHI) {
                    float o[NCHI][4];
                    _Pragma("unroll") for (int j = 0; j < NCHI; j++)
                        _Pragma("unroll") for (int i = 0; i < 4; i++) o[j][i] = 0.f;
                    _Pragma("unroll") for (int kt = 0; kt < KW; kt++) {
                        _Pragma("unroll") for (int j = 0; j < NCHI; j++) {
                            u32 b0, b1;
                            ldb(swt, ST0, nc + j, kt, g, t, b0, b1);
                            mma(o[j], d[kt], b0, b1);
                        }
                    }
                    _Pragma("unroll") for (int j = 0; j < NCHI; j++) {
                        int c = (nc + j) * 8 + 2 * t;
                        if (DX == 2) { /* columns (c, c + 1): grid level c / 2, scattered at once (all lanes call) */
                            const bool a0 = c < N_IN && row0 + g < p.batch, a1 = c < N_IN && row0 + g + 8 < p.batch;
                            enc_scatter(p.enc_x, p.enc_grads, s_g, a0 ? row0 + g : 0, a0 ? c >> 1 : 0,
                                        o[j][0] * p.inv_scale, o[j][1] * p.inv_scale, a0);
                            enc_scatter(p.enc_x, p.enc_grads, s_g, a1 ? row0 + g + 8 : 0, a1 ? c >> 1 : 0,
                                        o[j][2] * p.inv_scale, o[j][3] * p.inv_scale, a1);
                        } else {
                            st2<N_IN>(p.dx, p.batch, row0 + g, c, o[j][0] * p.inv_scale, o[j][1] * p.inv_scale);
                            st2<N_IN>(p.dx, p.batch, row0 + g + 8, c, o[j][2] * p.inv_scale, o[j][3] * p.inv_scale);
                        }
                    }
                }
            }
        }
        /* layer 0: h_0 = the saved input */
        _Pragma("unroll 4") for (int kt = 0; kt < KI; kt++) {
            uint4 hv = FL ? xin[FL ? kt : 0] : valid ? p.s_in[((long long)tile * KI + kt) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u);
            sH[(warp * KI + kt) * 32 + lane] = make_uint4(trans8(hv.x), trans8(hv.y), trans8(hv.z), trans8(hv.w));
        }
        __syncthreads();
        fused_dw_phase<W, IN_PAD>(accb, sD, sH, warp, lane);
        __syncthreads();
    }
    if (HAS_BIAS) for (int i = threadIdx.x; i < BTOT; i += blockDim.x) accb[ACC_TOT + i] = sb[i];
    if (DX == 2) {
        __syncthreads();
        enc_smem_flush(p.enc_grads, s_g);
    }
    if (FL) {
        _Pragma("unroll") for (int o = 16; o > 0; o >>= 1) lacc += __shfl_xor_sync(0xffffffffu, lacc, o);
        if (lane == 0 && p.loss && lacc != 0.f) atomicAdd(p.loss, lacc * p.inv_n);
    }
}

extern "C" __global__ void __launch_bounds__(FW * 32, RCMINB) mlp_bwd_rc(MlpParams p) { bwd_rc_body<0>(p); }
extern "C" __global__ void __launch_bounds__(FW * 32, RCMINB) mlp_bwd_rc_dx(MlpParams p) { bwd_rc_body<1>(p); }
