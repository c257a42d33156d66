// The implicit-GEMM kernels' bf16-activation variants (ABF = 1, PREC 2), included by igemm.cu
// at each of its MODE == m && ABF branches (this file picks the section of that MODE): the body of MODE 3 (halo
// weight gradient on bf16 dy and x), of MODE 1 up to its main loop's end (halo forward /
// data gradient on a bf16 image; with OBF its own bf16 epilogue through shared memory, else
// the shared f32 epilogue follows), of MODE 2 up to its main loop's end (weight gradient on
// bf16 dy and x; the shared epilogue follows) and of MODE 0 up to its main loop's end (the
// gathered forward / data gradient on a bf16 image; the shared epilogue follows). See igemm.cu for the macros they use. No include guard: included once per branch.
#if MODE == 3
/* the halo weight gradient on bf16 activations (PREC 2): dy rows [BM][KP + 8] and the x halo
 * [32][HR][RS] (RS = W + 16: 8 zero elements each side) as bf16, copied with cp.async (16 bytes
 * = 8 elements; W % 8 == 0); A fragment registers are single 4-byte loads (LDA = KP + 8 keeps
 * them conflict-free); the B pairs of a tap row's KS shifts come from aligned 4-byte words,
 * joined with byte_perm where the tap shift splits a pair. */
#define C3 32
extern "C" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {
    extern __shared__ __align__(16) float smem[];
    unsigned short *sm = (unsigned short *)smem;
    IG_THREAD_IDS
    const int wm0 = (warp >> 2) * (BM / 2), cg = (warp & 3) * 8;
    const int P = p.OH * p.OW;
    const int RT = min(p.OH, 128 / p.OW), KP = RT * p.OW, LDA = KP + 8;
    const int HR = RT + KS - 1, RS = p.W + 16;
    const int CS = HR * RS + (8 - (HR * RS) % 64 + 64) % 64;
    const int A_EL = BM * LDA, B_EL = C3 * CS;
    unsigned short *As = sm, *Bs = sm + STAGES * A_EL;
    const unsigned short *ga = (const unsigned short *)p.a, *gb = (const unsigned short *)p.b;
    IG_ROWS_SPLIT
    for (int i = tid; i < STAGES * C3 * HR * 16; i += NTH) {
        int col = i & 15, r = i >> 4, hr = r % HR, sc = r / HR;
        Bs[sc * CS + hr * RS + (col < 8 ? col : p.W + col)] = 0;
    }
    const int WQ = p.W >> 3, KQ = KP >> 3;
    auto load = [&](int s, int step) {
        const int n = step / tpi, r0 = (step - n * tpi) * RT;
        unsigned short *Ad = As + s * A_EL;
        for (int i = tid; i < BM * KQ; i += NTH) {
            int q = i % KQ, row = i / KQ, o = m0 + row;
            bool v = o < p.O;
            cp16((float *)(Ad + row * LDA + 8 * q),
                 v ? (const float *)(ga + ((long long)n * p.O + o) * P + r0 * p.OW + 8 * q) : p.a, v);
        }
        unsigned short *Bd = Bs + s * B_EL;
        for (int i = tid; i < C3 * HR * WQ; i += NTH) {
            int q = i % WQ, r = i / WQ, hr = r % HR, c = r / HR;
            int ih = r0 - p.pad + hr;
            bool v = ih >= 0 && ih < p.H;
            cp16((float *)(Bd + c * CS + hr * RS + 8 + 8 * q),
                 v ? (const float *)(gb + (((long long)n * p.C + c0 + c) * p.H + ih) * p.W + 8 * q) : p.b, v);
        }
    };
    IG_ACC_ZERO(KK)
    IG_CP_PROLOGUE(load)
    for (int kt = kt0; kt < kt1; kt++) {
        IG_CP_STEP(load)
        const unsigned short *Ah = As + s * A_EL, *Bh = Bs + s * B_EL + cg * CS;
        for (int k16 = 0; k16 < KP; k16 += 16) {
            const int ra = k16 / p.OW, rb = (k16 + 8) / p.OW;
            const int hba = ra * RS + (k16 - ra * p.OW) + 2 * t + 8 - p.pad;
            const int hbb = rb * RS + (k16 + 8 - rb * p.OW) + 2 * t + 8 - p.pad;
            unsigned a[MT][4];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                const unsigned short *ap = Ah + (wm0 + i * 16 + g) * LDA + k16 + 2 * t;
                a[i][0] = *(const unsigned *)ap;
                a[i][1] = *(const unsigned *)(ap + 8 * LDA);
                a[i][2] = *(const unsigned *)(ap + 8);
                a[i][3] = *(const unsigned *)(ap + 8 * LDA + 8);
            }
            /* per tap row: the KS shifted pairs from aligned words (the pair offset's parity
             * is pad's for every lane), byte_perm where a pair straddles two words */
            const unsigned *Bw = (const unsigned *)Bh;
            _Pragma("unroll")
            for (int kh = 0; kh < KS; kh++) {
                unsigned bp[2][KS];
                _Pragma("unroll")
                for (int hf = 0; hf < 2; hf++) {
                    const int e = g * CS + kh * RS + (hf ? hbb : hba);
                    const unsigned *wp = Bw + (e >> 1);
                    if (e & 1) {
                        unsigned w0 = wp[0], w1 = wp[1], w2 = wp[2];
                        bp[hf][0] = __byte_perm(w0, w1, 0x5432);
                        bp[hf][1] = w1;
                        bp[hf][2] = __byte_perm(w1, w2, 0x5432);
                    } else {
                        unsigned w0 = wp[0], w1 = wp[1];
                        bp[hf][0] = w0;
                        bp[hf][1] = __byte_perm(w0, w1, 0x5432);
                        bp[hf][2] = w1;
                    }
                }
                _Pragma("unroll")
                for (int kw = 0; kw < KS; kw++) {
                    unsigned b[2] = {bp[0][kw], bp[1][kw]};
                    _Pragma("unroll")
                    for (int i = 0; i < MT; i++) mma_bf16(acc[i][kh * KS + kw], a[i], b);
                }
            }
        }
    }
    cp_wait<0>();
    /* split partial sums (accum): plain stores into out + z * O * C * KK (summed afterwards) */
    IG_DW_EPILOGUE(
        if (p.accum) {
            d += (long long)blockIdx.z * p.O * p.C * KK;
            _Pragma("unroll")
            for (int j = 0; j < KK; j++) d[j] = acc[i][j][2 * h + e];
        } else {
            _Pragma("unroll")
            for (int j = 0; j < KK; j++) atomicAdd(d + j, acc[i][j][2 * h + e]);
        }
    )
}
#elif MODE == 2
/* the weight gradient on bf16 activations (PREC 2), any shape MODE 2 takes: A = dy rows
 * [BM][BK + 8] bf16 by cp.async (16 bytes = 8 pixels); B = the gathered x columns [BN][BK + 8]
 * bf16, each thread two adjacent pixels (one 32-bit pair) of BN / 16 columns, gathered into
 * registers two steps ahead and stored one step ahead. Fragment registers are single
 * 4-byte loads (rows of 20 words: conflict-free). Its own epilogue adds column pairs into dwr
 * with 8-byte atomics (the shared epilogue below it is not reached). */
#define LDK (BK + 8)
extern "C" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {
    extern __shared__ __align__(16) float smem[];
    unsigned short *As = (unsigned short *)smem;
    unsigned *Bs = (unsigned *)(As + STAGES * BM * LDK);
    IG_THREAD_IDS
    IG_WARP_TILE
    const int HW = p.H * p.W, P = p.OH * p.OW;
    IG_WG_SPLIT
    const unsigned short *ga = (const unsigned short *)p.a, *gb = (const unsigned short *)p.b;
    const int kp = tid & 15, bg = tid >> 4;
    IG_COL_TAPS(BN / 16, bg, 16)
    unsigned rb[BN / 16];
    auto aload = [&](int s, int kt) {
        int k0 = kt * BK, nb = k0 / P, p0 = k0 - nb * P;
        for (int i = tid; i < BM * (BK / 8); i += NTH) {
            int q = i & 3, row = i >> 2, o = m0 + row;
            bool v = o < M;
            cp16((float *)(As + (s * BM + row) * LDK + 8 * q),
                 v ? (const float *)(ga + ((long long)nb * p.O + o) * P + p0 + 8 * q) : p.a, v);
        }
    };
    auto bgather = [&](int kt) {
        int k0 = kt * BK, nb = k0 / P, p0 = k0 - nb * P;
        unsigned mask[2];
        int base[2];
        _Pragma("unroll")
        for (int e = 0; e < 2; e++) {
            int pp = p0 + 2 * kp + e, oh = pp / p.OW, ow = pp - oh * p.OW;
            int ihb = oh * STRIDE - p.pad, iwb = ow * STRIDE - p.pad;
            IG_TAP_MASK(m)
            mask[e] = m;
            base[e] = ihb * p.W + iwb;
        }
        const unsigned short *xb = gb + (long long)nb * p.C * HW;
        _Pragma("unroll")
        for (int i = 0; i < BN / 16; i++) {
            unsigned lo = (mask[0] >> jbit[i]) & 1u ? (unsigned)xb[base[0] + joff[i]] : 0u;
            unsigned hi = (mask[1] >> jbit[i]) & 1u ? (unsigned)xb[base[1] + joff[i]] : 0u;
            rb[i] = lo | (hi << 16);
        }
    };
    auto bstore = [&](int s) {
        _Pragma("unroll")
        for (int i = 0; i < BN / 16; i++) Bs[(s * BN + bg + i * 16) * (LDK / 2) + kp] = rb[i];
    };
    IG_ACC_ZERO(NT)
    /* A by cp.async STAGES - 1 steps ahead; B through registers: gathered two steps ahead,
     * stored into its stage one step ahead */
    IG_REG_PROLOGUE(aload, bgather, bstore)
    for (int kt = kt0; kt < kt1; kt++) {
        IG_REG_STEP(aload, bgather, bstore)
        const unsigned short *Ah = As + s * BM * LDK;
        const unsigned *Bh = Bs + s * BN * (LDK / 2);
        _Pragma("unroll")
        for (int k16 = 0; k16 < BK; k16 += 16) {
            unsigned a[MT][4], b[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                const unsigned short *ap = Ah + (wm0 + i * 16 + g) * LDK + k16 + 2 * t;
                a[i][0] = *(const unsigned *)ap;
                a[i][1] = *(const unsigned *)(ap + 8 * LDK);
                a[i][2] = *(const unsigned *)(ap + 8);
                a[i][3] = *(const unsigned *)(ap + 8 * LDK + 8);
            }
            IG_BF16_BFRAG
            IG_MMA_TILE(mma_bf16)
        }
    }
    cp_wait<0>();
    /* epilogue: the two adjacent columns of an accumulator pair in one 8-byte atomic add
     * (red.v2) where aligned (dwr always; dw of a 1x1 may sit at any float offset); accum 1:
     * the split's partial sums stored into out + blockIdx.z * O * Nn (summed afterwards) */
    _Pragma("unroll")
    for (int i = 0; i < MT; i++)
        _Pragma("unroll")
        for (int h = 0; h < 2; h++) {
            int m = m0 + wm0 + i * 16 + g + 8 * h;
            if (m >= M) continue;
            float *orow = p.out + (long long)m * Nn;
            if (p.accum) orow += (long long)blockIdx.z * M * Nn; /* partials of split z */
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                int n = n0 + wn0 + j * 8 + 2 * t;
                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (p.accum) {
                    if (n < Nn) orow[n] = v0;
                    if (n + 1 < Nn) orow[n + 1] = v1;
                } else if (n + 1 < Nn && ((unsigned long long)(orow + n) & 7) == 0) {
                    ig_red2(orow + n, v0, v1);
                } else {
                    if (n < Nn) atomicAdd(orow + n, v0);
                    if (n + 1 < Nn) atomicAdd(orow + n + 1, v1);
                }
            }
        }
    return;
#elif MODE == 0
/* the forward-style conv (MODE 0) on a bf16 image (PREC 2): A = the gathered image as 32-bit
 * channel pairs [16 pairs][BM + 8] (each thread one output pixel, two 2-byte loads per pair,
 * gathered into registers two steps ahead and stored one step ahead), B = bf16 weights
 * wr [O][KK][C] rows [BN][BK + 8] by cp.async. A k tile lies within one tap (C % 32 == 0). The
 * shared epilogue follows (bf16 output with OBF). */
#define LDK (BK + 8)
#define APW (BM + 8)
extern "C" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {
    extern __shared__ __align__(16) float smem[];
    unsigned *As = (unsigned *)smem;
    unsigned short *Bs = (unsigned short *)(As + STAGES * 16 * APW);
    IG_THREAD_IDS
    IG_WARP_TILE
    const int HW = p.H * p.W, P = p.OH * p.OW;
    IG_GATHER_SPLIT
    const unsigned short *ga = (const unsigned short *)p.a, *gw = (const unsigned short *)p.b;
    /* A: this thread's output pixel (fixed) and channel pairs kp0 + i * PSTEP */
    const int PSTEP = NTH / BM, NP = 16 / PSTEP, am = tid % BM, kp0 = tid / BM;
    IG_GATHER_PIXEL(unsigned short, ga)
    unsigned ra[NP];
    auto agather = [&](int kt) {
        int k0 = kt * BK, kk = k0 / p.C, c0 = k0 - kk * p.C;
        int ih = ih0 + kk / KS, iw = iw0 + kk % KS;
        bool v = mval && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
        const unsigned short *src = xb + (long long)(c0 + 2 * kp0) * HW + ih * p.W + iw;
        _Pragma("unroll")
        for (int i = 0; i < NP; i++) {
            const unsigned short *q = src + (long long)(2 * i * PSTEP) * HW;
            ra[i] = v ? (unsigned)q[0] | ((unsigned)q[HW] << 16) : 0u;
        }
    };
    auto astore = [&](int s) {
        _Pragma("unroll")
        for (int i = 0; i < NP; i++) As[(s * 16 + kp0 + i * PSTEP) * APW + am] = ra[i];
    };
    auto bload = [&](int s, int kt) {
        int k0 = kt * BK;
        for (int i = tid; i < BN * (BK / 8); i += NTH) {
            int q = i & 3, n = i >> 2;
            bool v = n0 + n < Nn;
            cp16((float *)(Bs + (s * BN + n) * LDK + 8 * q),
                 v ? (const float *)(gw + (long long)(n0 + n) * Kd + k0 + 8 * q) : p.b, v);
        }
    };
    IG_ACC_ZERO(NT)
    /* B by cp.async STAGES - 1 steps ahead; A through registers: gathered two steps ahead,
     * stored into its stage one step ahead */
    IG_REG_PROLOGUE(bload, agather, astore)
    for (int kt = kt0; kt < kt1; kt++) {
        IG_REG_STEP(bload, agather, astore)
        const unsigned *Ah = As + s * 16 * APW;
        const unsigned *Bh = (const unsigned *)(Bs + s * BN * LDK);
        _Pragma("unroll")
        for (int k16 = 0; k16 < BK; k16 += 16) {
            unsigned a[MT][4], b[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                const unsigned *ap = Ah + (k16 / 2 + t) * APW + wm0 + i * 16 + g;
                a[i][0] = ap[0];
                a[i][1] = ap[8];
                a[i][2] = ap[4 * APW];
                a[i][3] = ap[4 * APW + 8];
            }
            IG_BF16_BFRAG
            IG_MMA_TILE(mma_bf16)
        }
    }
    cp_wait<0>();
#else /* MODE 1 */
/* x bf16 [N][C][H][W]; wr bf16 [C/CB][O][KK][CB] with the k pairs of a tap permuted (32-bit
 * word 2q + h holds channels 2q + 8h and 2q + 8h + 1: a B fragment is one 8-byte load). The
 * halo in shared memory is 32-bit words of channel pairs: plane cp (channels 2cp, 2cp + 1)
 * [HR][RS] (RS = W + 8 words, 4 zero words each side), plane stride CS % 32 == 8 (an A
 * fragment register is one conflict-free 4-byte load). It is loaded through registers two steps
 * ahead (16-byte loads of two channels' rows, interleaved with byte_perm, stored one step
 * ahead), the weights by cp.async. Needs W % 8 == 0 and <= 2 halo units per thread. */
#define HBRS (KK * CB / 2)
extern "C" __global__ void __launch_bounds__(NTH, 2) nb_conv_igemm(IgP p) {
    extern __shared__ __align__(16) float smem[];
    unsigned *sm = (unsigned *)smem;
    IG_THREAD_IDS
    IG_WARP_TILE
    const int P = p.OH * p.OW, M = p.N * P, Nn = p.O;
    const int R = BM / p.OW, HR = R + KS - 1, RS = p.W + 8;
    const int CS = HR * RS + (8 - (HR * RS) % 32 + 32) % 32;
    const int A_EL = (CB / 2) * CS, B_EL = BN * HBRS;
    unsigned *As = sm, *Bs = sm + STAGES * A_EL;
    IG_HALO_SPLIT
    const unsigned short *xb = (const unsigned short *)p.a + (long long)nb * p.C * p.H * p.W;
    IG_HALO_ZERO(As, (CB / 2), 0u)
    IG_HALO_PIXELS
    /* halo units: (pair plane, halo row, 8-pixel chunk), at most 2 per thread */
    const int WQ = p.W >> 3, NU = (CB / 2) * HR * WQ;
    uint4 ra[2][2];
    auto gload = [&](int cc) {
        const int c0 = cc * CB;
        _Pragma("unroll")
        for (int u = 0; u < 2; u++) {
            int i = tid + u * NTH;
            ra[u][0] = make_uint4(0u, 0u, 0u, 0u);
            ra[u][1] = ra[u][0];
            if (i >= NU) continue;
            int q = i % WQ, r = i / WQ, hr = r % HR, cp = r / HR;
            int ih = oh0 - p.pad + hr, c = c0 + 2 * cp;
            if (ih < 0 || ih >= p.H) continue;
            const unsigned short *src = xb + ((long long)c * p.H + ih) * p.W + 8 * q;
            if (c < p.C) ra[u][0] = *(const uint4 *)src;
            if (c + 1 < p.C) ra[u][1] = *(const uint4 *)(src + (long long)p.H * p.W);
        }
    };
    auto sstore = [&](int s) {
        _Pragma("unroll")
        for (int u = 0; u < 2; u++) {
            int i = tid + u * NTH;
            if (i >= NU) continue;
            int q = i % WQ, r = i / WQ, hr = r % HR, cp = r / HR;
            uint4 a = ra[u][0], b = ra[u][1];
            uint4 *d = (uint4 *)(As + s * A_EL + cp * CS + hr * RS + 4 + 8 * q);
            d[0] = make_uint4(__byte_perm(a.x, b.x, 0x5410), __byte_perm(a.x, b.x, 0x7632),
                              __byte_perm(a.y, b.y, 0x5410), __byte_perm(a.y, b.y, 0x7632));
            d[1] = make_uint4(__byte_perm(a.z, b.z, 0x5410), __byte_perm(a.z, b.z, 0x7632),
                              __byte_perm(a.w, b.w, 0x5410), __byte_perm(a.w, b.w, 0x7632));
        }
    };
    auto bload = [&](int s, int cc) {
        unsigned *Bd = Bs + s * B_EL;
        const unsigned short *wsrc = (const unsigned short *)p.b + ((long long)cc * p.O + n0) * (KK * CB);
        for (int i = tid; i < BN * (HBRS / 4); i += NTH) {
            int q = i % (HBRS / 4), n = i / (HBRS / 4);
            bool v = n0 + n < Nn;
            cp16((float *)(Bd + n * HBRS + 4 * q),
                 v ? (const float *)(wsrc + (long long)n * (KK * CB) + 8 * q) : p.b, v);
        }
    };
    IG_ACC_ZERO(NT)
    /* B by cp.async STAGES - 1 steps ahead; A through registers: gathered two steps ahead,
     * stored into its stage one step ahead (a whole step of mma hides the loads' latency) */
    IG_REG_PROLOGUE(bload, gload, sstore)
    for (int kt = kt0; kt < kt1; kt++) {
        IG_REG_STEP(bload, gload, sstore)
        const unsigned *Ah = As + s * A_EL, *Bh = Bs + s * B_EL;
        _Pragma("unroll")
        for (int tap = 0; tap < KK; tap++) {
            const int toff = (tap / KS) * RS + tap % KS;
            unsigned a[MT][4], b[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                const unsigned *q0 = Ah + t * CS + toff, *q4 = q0 + 4 * CS;
                a[i][0] = q0[hb[i][0]];
                a[i][1] = q0[hb[i][1]];
                a[i][2] = q4[hb[i][0]];
                a[i][3] = q4[hb[i][1]];
            }
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                uint2 v = *(const uint2 *)(Bh + (wn0 + j * 8 + g) * HBRS + tap * (CB / 2) + 2 * t);
                b[j][0] = v.x;
                b[j][1] = v.y;
            }
            IG_MMA_TILE(mma_bf16)
        }
    }
    cp_wait<0>();
#if OBF
    /* bf16 output through shared memory: the f32 tile [BN][BM + 4] (+ bias), then 8-pixel
     * rows (16-byte stores; the block's BM pixels are contiguous in each output plane) */
    __syncthreads();
    float *Os = smem;
    const int OLD = BM + 4;
    _Pragma("unroll")
    for (int i = 0; i < MT; i++)
        _Pragma("unroll")
        for (int h = 0; h < 2; h++)
            _Pragma("unroll")
            for (int j = 0; j < NT; j++)
                _Pragma("unroll")
                for (int e = 0; e < 2; e++) {
                    int n = wn0 + j * 8 + 2 * t + e;
                    float v = acc[i][j][2 * h + e];
                    if (!p.accum && p.bias && n0 + n < Nn) v += p.bias[n0 + n];
                    Os[n * OLD + wm0 + i * 16 + g + 8 * h] = v;
                }
    __syncthreads();
    unsigned short *ob = (unsigned short *)p.out + (long long)nb * p.O * P + (m0 - nb * P);
    for (int idx = tid; idx < BN * (BM / 8); idx += NTH) {
        int n = idx / (BM / 8), q = idx - n * (BM / 8);
        if (n0 + n >= Nn) continue;
        const float *src = Os + n * OLD + 8 * q;
        float4 lo = *(const float4 *)src, hi = *(const float4 *)(src + 4);
        uint4 *dst = (uint4 *)(ob + (long long)(n0 + n) * P + 8 * q);
        if (p.accum) {
            uint4 o = *dst;
            lo.x += __uint_as_float(o.x << 16), lo.y += __uint_as_float(o.x & 0xffff0000u);
            lo.z += __uint_as_float(o.y << 16), lo.w += __uint_as_float(o.y & 0xffff0000u);
            hi.x += __uint_as_float(o.z << 16), hi.y += __uint_as_float(o.z & 0xffff0000u);
            hi.z += __uint_as_float(o.w << 16), hi.w += __uint_as_float(o.w & 0xffff0000u);
        }
        *dst = make_uint4(pack_bf16(lo.x, lo.y), pack_bf16(lo.z, lo.w), pack_bf16(hi.x, hi.y),
                          pack_bf16(hi.z, hi.w));
    }
    return;
#endif
#endif
