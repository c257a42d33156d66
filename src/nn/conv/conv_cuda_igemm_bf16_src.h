/* CUDA source of the implicit-GEMM kernels' bf16-activation variants (ABF = 1, PREC 2), pasted
 * into nb_conv_igemm_src (conv_cuda_igemm_src.h) at their #if branches: the body of MODE 3 (halo
 * weight gradient on bf16 dy and x), of MODE 1 up to its main loop's end (halo forward /
 * data gradient on a bf16 image; with OBF its own bf16 epilogue through shared memory, else
 * the shared f32 epilogue follows), of MODE 2 up to its main loop's end (weight gradient on
 * bf16 dy and x; the shared epilogue follows) and of MODE 0 up to its main loop's end (the
 * gathered forward / data gradient on a bf16 image; the shared epilogue follows). See conv_cuda_igemm_src.h for the macros they use. */
#ifndef NB_NN_CONV_CUDA_IGEMM_BF16_SRC_H
#define NB_NN_CONV_CUDA_IGEMM_BF16_SRC_H

#define NB_IG_SRC_MODE3_BF16 \
    "/* the halo weight gradient on bf16 activations (PREC 2): dy rows [BM][KP + 8] and the x halo\n" \
    " * [32][HR][RS] (RS = W + 16: 8 zero elements each side) as bf16, copied with cp.async (16 bytes\n" \
    " * = 8 elements; W % 8 == 0); A fragment registers are single 4-byte loads (LDA = KP + 8 keeps\n" \
    " * them conflict-free); the B pairs of a tap row's KS shifts come from aligned 4-byte words,\n" \
    " * joined with byte_perm where the tap shift splits a pair. */\n" \
    "#define C3 32\n" \
    "extern \"C\" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {\n" \
    "    extern __shared__ __align__(16) float smem[];\n" \
    "    unsigned short *sm = (unsigned short *)smem;\n" \
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n" \
    "    const int g = lane >> 2, t = lane & 3;\n" \
    "    const int wm0 = (warp >> 2) * (BM / 2), cg = (warp & 3) * 8;\n" \
    "    const int P = p.OH * p.OW;\n" \
    "    const int RT = min(p.OH, 128 / p.OW), KP = RT * p.OW, LDA = KP + 8;\n" \
    "    const int HR = RT + KS - 1, RS = p.W + 16;\n" \
    "    const int CS = HR * RS + (8 - (HR * RS) % 64 + 64) % 64;\n" \
    "    const int A_EL = BM * LDA, B_EL = C3 * CS;\n" \
    "    unsigned short *As = sm, *Bs = sm + STAGES * A_EL;\n" \
    "    const unsigned short *ga = (const unsigned short *)p.a, *gb = (const unsigned short *)p.b;\n" \
    "    const int m0 = blockIdx.x * BM, c0 = blockIdx.y * C3;\n" \
    "    const int tpi = p.OH / RT, nsteps = p.N * tpi;\n" \
    "    const int kt0 = blockIdx.z * p.kt_per_split, kt1 = min(nsteps, kt0 + p.kt_per_split);\n" \
    "    for (int i = tid; i < STAGES * C3 * HR * 16; i += NTH) {\n" \
    "        int col = i & 15, r = i >> 4, hr = r % HR, sc = r / HR;\n" \
    "        Bs[sc * CS + hr * RS + (col < 8 ? col : p.W + col)] = 0;\n" \
    "    }\n" \
    "    const int WQ = p.W >> 3, KQ = KP >> 3;\n" \
    "    auto load = [&](int s, int step) {\n" \
    "        const int n = step / tpi, r0 = (step - n * tpi) * RT;\n" \
    "        unsigned short *Ad = As + s * A_EL;\n" \
    "        for (int i = tid; i < BM * KQ; i += NTH) {\n" \
    "            int q = i % KQ, row = i / KQ, o = m0 + row;\n" \
    "            bool v = o < p.O;\n" \
    "            cp16((float *)(Ad + row * LDA + 8 * q),\n" \
    "                 v ? (const float *)(ga + ((long long)n * p.O + o) * P + r0 * p.OW + 8 * q) : p.a, v);\n" \
    "        }\n" \
    "        unsigned short *Bd = Bs + s * B_EL;\n" \
    "        for (int i = tid; i < C3 * HR * WQ; i += NTH) {\n" \
    "            int q = i % WQ, r = i / WQ, hr = r % HR, c = r / HR;\n" \
    "            int ih = r0 - p.pad + hr;\n" \
    "            bool v = ih >= 0 && ih < p.H;\n" \
    "            cp16((float *)(Bd + c * CS + hr * RS + 8 + 8 * q),\n" \
    "                 v ? (const float *)(gb + (((long long)n * p.C + c0 + c) * p.H + ih) * p.W + 8 * q) : p.b, v);\n" \
    "        }\n" \
    "    };\n" \
    "    float acc[MT][KK][4];\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int j = 0; j < KK; j++)\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int s = 0; s < STAGES - 1; s++) {\n" \
    "        if (kt0 + s < kt1) load(s, kt0 + s);\n" \
    "        cp_commit();\n" \
    "    }\n" \
    "    for (int kt = kt0; kt < kt1; kt++) {\n" \
    "        cp_wait<STAGES - 2>();\n" \
    "        __syncthreads();\n" \
    "        {\n" \
    "            int nk = kt + STAGES - 1;\n" \
    "            if (nk < kt1) load((nk - kt0) % STAGES, nk);\n" \
    "            cp_commit();\n" \
    "        }\n" \
    "        const int s = (kt - kt0) % STAGES;\n" \
    "        const unsigned short *Ah = As + s * A_EL, *Bh = Bs + s * B_EL + cg * CS;\n" \
    "        for (int k16 = 0; k16 < KP; k16 += 16) {\n" \
    "            const int ra = k16 / p.OW, rb = (k16 + 8) / p.OW;\n" \
    "            const int hba = ra * RS + (k16 - ra * p.OW) + 2 * t + 8 - p.pad;\n" \
    "            const int hbb = rb * RS + (k16 + 8 - rb * p.OW) + 2 * t + 8 - p.pad;\n" \
    "            unsigned a[MT][4];\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int i = 0; i < MT; i++) {\n" \
    "                const unsigned short *ap = Ah + (wm0 + i * 16 + g) * LDA + k16 + 2 * t;\n" \
    "                a[i][0] = *(const unsigned *)ap;\n" \
    "                a[i][1] = *(const unsigned *)(ap + 8 * LDA);\n" \
    "                a[i][2] = *(const unsigned *)(ap + 8);\n" \
    "                a[i][3] = *(const unsigned *)(ap + 8 * LDA + 8);\n" \
    "            }\n" \
    "            /* per tap row: the KS shifted pairs from aligned words (the pair offset's parity\n" \
    "             * is pad's for every lane), byte_perm where a pair straddles two words */\n" \
    "            const unsigned *Bw = (const unsigned *)Bh;\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int kh = 0; kh < KS; kh++) {\n" \
    "                unsigned bp[2][KS];\n" \
    "                _Pragma(\"unroll\")\n" \
    "                for (int hf = 0; hf < 2; hf++) {\n" \
    "                    const int e = g * CS + kh * RS + (hf ? hbb : hba);\n" \
    "                    const unsigned *wp = Bw + (e >> 1);\n" \
    "                    if (e & 1) {\n" \
    "                        unsigned w0 = wp[0], w1 = wp[1], w2 = wp[2];\n" \
    "                        bp[hf][0] = __byte_perm(w0, w1, 0x5432);\n" \
    "                        bp[hf][1] = w1;\n" \
    "                        bp[hf][2] = __byte_perm(w1, w2, 0x5432);\n" \
    "                    } else {\n" \
    "                        unsigned w0 = wp[0], w1 = wp[1];\n" \
    "                        bp[hf][0] = w0;\n" \
    "                        bp[hf][1] = __byte_perm(w0, w1, 0x5432);\n" \
    "                        bp[hf][2] = w1;\n" \
    "                    }\n" \
    "                }\n" \
    "                _Pragma(\"unroll\")\n" \
    "                for (int kw = 0; kw < KS; kw++) {\n" \
    "                    unsigned b[2] = {bp[0][kw], bp[1][kw]};\n" \
    "                    _Pragma(\"unroll\")\n" \
    "                    for (int i = 0; i < MT; i++) mma_bf16(acc[i][kh * KS + kw], a[i], b);\n" \
    "                }\n" \
    "            }\n" \
    "        }\n" \
    "    }\n" \
    "    cp_wait<0>();\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int h = 0; h < 2; h++) {\n" \
    "            int o = m0 + wm0 + i * 16 + g + 8 * h;\n" \
    "            if (o >= p.O) continue;\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int e = 0; e < 2; e++) {\n" \
    "                float *d = p.out + ((long long)o * p.C + c0 + cg + 2 * t + e) * KK;\n" \
    "                if (p.accum) { /* partial sums of split z: plain stores (summed afterwards) */\n" \
    "                    d += (long long)blockIdx.z * p.O * p.C * KK;\n" \
    "                    _Pragma(\"unroll\")\n" \
    "                    for (int j = 0; j < KK; j++) d[j] = acc[i][j][2 * h + e];\n" \
    "                } else {\n" \
    "                    _Pragma(\"unroll\")\n" \
    "                    for (int j = 0; j < KK; j++) atomicAdd(d + j, acc[i][j][2 * h + e]);\n" \
    "                }\n" \
    "            }\n" \
    "        }\n" \
    "}\n"

#define NB_IG_SRC_MODE1_BF16 \
    "/* x bf16 [N][C][H][W]; wr bf16 [C/CB][O][KK][CB] with the k pairs of a tap permuted (32-bit\n" \
    " * word 2q + h holds channels 2q + 8h and 2q + 8h + 1: a B fragment is one 8-byte load). The\n" \
    " * halo in shared memory is 32-bit words of channel pairs: plane cp (channels 2cp, 2cp + 1)\n" \
    " * [HR][RS] (RS = W + 8 words, 4 zero words each side), plane stride CS % 32 == 8 (an A\n" \
    " * fragment register is one conflict-free 4-byte load). It is loaded through registers two steps\n" \
    " * ahead (16-byte loads of two channels' rows, interleaved with byte_perm, stored one step\n" \
    " * ahead), the weights by cp.async. Needs W % 8 == 0 and <= 2 halo units per thread. */\n" \
    "#define HBRS (KK * CB / 2)\n" \
    "extern \"C\" __global__ void __launch_bounds__(NTH, 2) nb_conv_igemm(IgP p) {\n" \
    "    extern __shared__ __align__(16) float smem[];\n" \
    "    unsigned *sm = (unsigned *)smem;\n" \
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n" \
    "    const int g = lane >> 2, t = lane & 3;\n" \
    "    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;\n" \
    "    const int P = p.OH * p.OW, M = p.N * P, Nn = p.O;\n" \
    "    const int R = BM / p.OW, HR = R + KS - 1, RS = p.W + 8;\n" \
    "    const int CS = HR * RS + (8 - (HR * RS) % 32 + 32) % 32;\n" \
    "    const int A_EL = (CB / 2) * CS, B_EL = BN * HBRS;\n" \
    "    unsigned *As = sm, *Bs = sm + STAGES * A_EL;\n" \
    "    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;\n" \
    "    const int nb = m0 / P, oh0 = (m0 - nb * P) / p.OW;\n" \
    "    const int nch = (p.C + CB - 1) / CB;\n" \
    "    const int kt0 = p.kt_per_split ? blockIdx.z * p.kt_per_split : 0;\n" \
    "    const int kt1 = p.kt_per_split ? min(nch, kt0 + p.kt_per_split) : nch;\n" \
    "    const unsigned short *xb = (const unsigned short *)p.a + (long long)nb * p.C * p.H * p.W;\n" \
    "    for (int i = tid; i < STAGES * (CB / 2) * HR * 8; i += NTH) {\n" \
    "        int col = i & 7, r = i >> 3, hr = r % HR, sc = r / HR;\n" \
    "        As[sc * CS + hr * RS + (col < 4 ? col : p.W + col)] = 0u;\n" \
    "    }\n" \
    "    int hb[MT][2];\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int h = 0; h < 2; h++) {\n" \
    "            int m = wm0 + i * 16 + g + 8 * h, r = m / p.OW, col = m - r * p.OW;\n" \
    "            hb[i][h] = r * RS + col + 4 - p.pad;\n" \
    "        }\n" \
    "    /* halo units: (pair plane, halo row, 8-pixel chunk), at most 2 per thread */\n" \
    "    const int WQ = p.W >> 3, NU = (CB / 2) * HR * WQ;\n" \
    "    uint4 ra[2][2];\n" \
    "    auto gload = [&](int cc) {\n" \
    "        const int c0 = cc * CB;\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int u = 0; u < 2; u++) {\n" \
    "            int i = tid + u * NTH;\n" \
    "            ra[u][0] = make_uint4(0u, 0u, 0u, 0u);\n" \
    "            ra[u][1] = ra[u][0];\n" \
    "            if (i >= NU) continue;\n" \
    "            int q = i % WQ, r = i / WQ, hr = r % HR, cp = r / HR;\n" \
    "            int ih = oh0 - p.pad + hr, c = c0 + 2 * cp;\n" \
    "            if (ih < 0 || ih >= p.H) continue;\n" \
    "            const unsigned short *src = xb + ((long long)c * p.H + ih) * p.W + 8 * q;\n" \
    "            if (c < p.C) ra[u][0] = *(const uint4 *)src;\n" \
    "            if (c + 1 < p.C) ra[u][1] = *(const uint4 *)(src + (long long)p.H * p.W);\n" \
    "        }\n" \
    "    };\n" \
    "    auto sstore = [&](int s) {\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int u = 0; u < 2; u++) {\n" \
    "            int i = tid + u * NTH;\n" \
    "            if (i >= NU) continue;\n" \
    "            int q = i % WQ, r = i / WQ, hr = r % HR, cp = r / HR;\n" \
    "            uint4 a = ra[u][0], b = ra[u][1];\n" \
    "            uint4 *d = (uint4 *)(As + s * A_EL + cp * CS + hr * RS + 4 + 8 * q);\n" \
    "            d[0] = make_uint4(__byte_perm(a.x, b.x, 0x5410), __byte_perm(a.x, b.x, 0x7632),\n" \
    "                              __byte_perm(a.y, b.y, 0x5410), __byte_perm(a.y, b.y, 0x7632));\n" \
    "            d[1] = make_uint4(__byte_perm(a.z, b.z, 0x5410), __byte_perm(a.z, b.z, 0x7632),\n" \
    "                              __byte_perm(a.w, b.w, 0x5410), __byte_perm(a.w, b.w, 0x7632));\n" \
    "        }\n" \
    "    };\n" \
    "    auto bload = [&](int s, int cc) {\n" \
    "        unsigned *Bd = Bs + s * B_EL;\n" \
    "        const unsigned short *wsrc = (const unsigned short *)p.b + ((long long)cc * p.O + n0) * (KK * CB);\n" \
    "        for (int i = tid; i < BN * (HBRS / 4); i += NTH) {\n" \
    "            int q = i % (HBRS / 4), n = i / (HBRS / 4);\n" \
    "            bool v = n0 + n < Nn;\n" \
    "            cp16((float *)(Bd + n * HBRS + 4 * q),\n" \
    "                 v ? (const float *)(wsrc + (long long)n * (KK * CB) + 8 * q) : p.b, v);\n" \
    "        }\n" \
    "    };\n" \
    "    float acc[MT][NT][4];\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int j = 0; j < NT; j++)\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;\n" \
    "    _Pragma(\"unroll\")\n" \
    "    /* B by cp.async STAGES - 1 steps ahead; A through registers: gathered two steps ahead,\n" \
    "     * stored into its stage one step ahead (a whole step of mma hides the loads' latency) */\n" \
    "    for (int s = 0; s < STAGES - 1; s++) {\n" \
    "        if (kt0 + s < kt1) bload(s, kt0 + s);\n" \
    "        cp_commit();\n" \
    "    }\n" \
    "    if (kt0 < kt1) {\n" \
    "        gload(kt0);\n" \
    "        sstore(0);\n" \
    "    }\n" \
    "    if (kt0 + 1 < kt1) gload(kt0 + 1);\n" \
    "    for (int kt = kt0; kt < kt1; kt++) {\n" \
    "        cp_wait<STAGES - 2>();\n" \
    "        __syncthreads();\n" \
    "        if (kt + 1 < kt1) sstore((kt + 1 - kt0) % STAGES);\n" \
    "        if (kt + 2 < kt1) gload(kt + 2);\n" \
    "        const int nk = kt + STAGES - 1;\n" \
    "        if (nk < kt1) bload((nk - kt0) % STAGES, nk);\n" \
    "        cp_commit();\n" \
    "        const int s = (kt - kt0) % STAGES;\n" \
    "        const unsigned *Ah = As + s * A_EL, *Bh = Bs + s * B_EL;\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int tap = 0; tap < KK; tap++) {\n" \
    "            const int toff = (tap / KS) * RS + tap % KS;\n" \
    "            unsigned a[MT][4], b[NT][2];\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int i = 0; i < MT; i++) {\n" \
    "                const unsigned *q0 = Ah + t * CS + toff, *q4 = q0 + 4 * CS;\n" \
    "                a[i][0] = q0[hb[i][0]];\n" \
    "                a[i][1] = q0[hb[i][1]];\n" \
    "                a[i][2] = q4[hb[i][0]];\n" \
    "                a[i][3] = q4[hb[i][1]];\n" \
    "            }\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int j = 0; j < NT; j++) {\n" \
    "                uint2 v = *(const uint2 *)(Bh + (wn0 + j * 8 + g) * HBRS + tap * (CB / 2) + 2 * t);\n" \
    "                b[j][0] = v.x;\n" \
    "                b[j][1] = v.y;\n" \
    "            }\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int i = 0; i < MT; i++)\n" \
    "                _Pragma(\"unroll\")\n" \
    "                for (int j = 0; j < NT; j++) mma_bf16(acc[i][j], a[i], b[j]);\n" \
    "        }\n" \
    "    }\n" \
    "    cp_wait<0>();\n" \
    "#if OBF\n" \
    "    /* bf16 output through shared memory: the f32 tile [BN][BM + 4] (+ bias), then 8-pixel\n" \
    "     * rows (16-byte stores; the block's BM pixels are contiguous in each output plane) */\n" \
    "    __syncthreads();\n" \
    "    float *Os = smem;\n" \
    "    const int OLD = BM + 4;\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int h = 0; h < 2; h++)\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int j = 0; j < NT; j++)\n" \
    "                _Pragma(\"unroll\")\n" \
    "                for (int e = 0; e < 2; e++) {\n" \
    "                    int n = wn0 + j * 8 + 2 * t + e;\n" \
    "                    float v = acc[i][j][2 * h + e];\n" \
    "                    if (!p.accum && p.bias && n0 + n < Nn) v += p.bias[n0 + n];\n" \
    "                    Os[n * OLD + wm0 + i * 16 + g + 8 * h] = v;\n" \
    "                }\n" \
    "    __syncthreads();\n" \
    "    unsigned short *ob = (unsigned short *)p.out + (long long)nb * p.O * P + (m0 - nb * P);\n" \
    "    for (int idx = tid; idx < BN * (BM / 8); idx += NTH) {\n" \
    "        int n = idx / (BM / 8), q = idx - n * (BM / 8);\n" \
    "        if (n0 + n >= Nn) continue;\n" \
    "        const float *src = Os + n * OLD + 8 * q;\n" \
    "        float4 lo = *(const float4 *)src, hi = *(const float4 *)(src + 4);\n" \
    "        uint4 *dst = (uint4 *)(ob + (long long)(n0 + n) * P + 8 * q);\n" \
    "        if (p.accum) {\n" \
    "            uint4 o = *dst;\n" \
    "            lo.x += __uint_as_float(o.x << 16), lo.y += __uint_as_float(o.x & 0xffff0000u);\n" \
    "            lo.z += __uint_as_float(o.y << 16), lo.w += __uint_as_float(o.y & 0xffff0000u);\n" \
    "            hi.x += __uint_as_float(o.z << 16), hi.y += __uint_as_float(o.z & 0xffff0000u);\n" \
    "            hi.z += __uint_as_float(o.w << 16), hi.w += __uint_as_float(o.w & 0xffff0000u);\n" \
    "        }\n" \
    "        *dst = make_uint4(pack_bf16(lo.x, lo.y), pack_bf16(lo.z, lo.w), pack_bf16(hi.x, hi.y),\n" \
    "                          pack_bf16(hi.z, hi.w));\n" \
    "    }\n" \
    "    return;\n" \
    "#endif\n"

#define NB_IG_SRC_MODE2_BF16 \
    "/* the weight gradient on bf16 activations (PREC 2), any shape MODE 2 takes: A = dy rows\n" \
    " * [BM][BK + 8] bf16 by cp.async (16 bytes = 8 pixels); B = the gathered x columns [BN][BK + 8]\n" \
    " * bf16, each thread two adjacent pixels (one 32-bit pair) of BN / 16 columns, gathered into\n" \
    " * registers two steps ahead and stored one step ahead. Fragment registers are single\n" \
    " * 4-byte loads (rows of 20 words: conflict-free). Its own epilogue adds column pairs into dwr\n" \
    " * with 8-byte atomics (the shared epilogue below it is not reached). */\n" \
    "#define LDK (BK + 8)\n" \
    "extern \"C\" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {\n" \
    "    extern __shared__ __align__(16) float smem[];\n" \
    "    unsigned short *As = (unsigned short *)smem;\n" \
    "    unsigned *Bs = (unsigned *)(As + STAGES * BM * LDK);\n" \
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n" \
    "    const int g = lane >> 2, t = lane & 3;\n" \
    "    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;\n" \
    "    const int HW = p.H * p.W, P = p.OH * p.OW;\n" \
    "    const int M = p.O, Nn = KK * p.C;\n" \
    "    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;\n" \
    "    const int nkt = (p.N * P) / BK;\n" \
    "    const int kt0 = blockIdx.z * p.kt_per_split;\n" \
    "    const int kt1 = min(nkt, kt0 + p.kt_per_split);\n" \
    "    const unsigned short *ga = (const unsigned short *)p.a, *gb = (const unsigned short *)p.b;\n" \
    "    const int kp = tid & 15, bg = tid >> 4;\n" \
    "    int joff[BN / 16], jbit[BN / 16];\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < BN / 16; i++) {\n" \
    "        int j = n0 + bg + i * 16;\n" \
    "        if (j < Nn) { int kk = j / p.C; joff[i] = (j - kk * p.C) * HW + (kk / KS) * p.W + kk % KS; jbit[i] = kk; }\n" \
    "        else { joff[i] = 0; jbit[i] = 31; }\n" \
    "    }\n" \
    "    unsigned rb[BN / 16];\n" \
    "    auto aload = [&](int s, int kt) {\n" \
    "        int k0 = kt * BK, nb = k0 / P, p0 = k0 - nb * P;\n" \
    "        for (int i = tid; i < BM * (BK / 8); i += NTH) {\n" \
    "            int q = i & 3, row = i >> 2, o = m0 + row;\n" \
    "            bool v = o < M;\n" \
    "            cp16((float *)(As + (s * BM + row) * LDK + 8 * q),\n" \
    "                 v ? (const float *)(ga + ((long long)nb * p.O + o) * P + p0 + 8 * q) : p.a, v);\n" \
    "        }\n" \
    "    };\n" \
    "    auto bgather = [&](int kt) {\n" \
    "        int k0 = kt * BK, nb = k0 / P, p0 = k0 - nb * P;\n" \
    "        unsigned mask[2];\n" \
    "        int base[2];\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int e = 0; e < 2; e++) {\n" \
    "            int pp = p0 + 2 * kp + e, oh = pp / p.OW, ow = pp - oh * p.OW;\n" \
    "            int ihb = oh * STRIDE - p.pad, iwb = ow * STRIDE - p.pad;\n" \
    "            unsigned cols = 0, m = 0;\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int q = 0; q < KS; q++) cols |= (unsigned)(iwb + q >= 0 && iwb + q < p.W) << q;\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int q = 0; q < KS; q++) if (ihb + q >= 0 && ihb + q < p.H) m |= cols << (q * KS);\n" \
    "            mask[e] = m;\n" \
    "            base[e] = ihb * p.W + iwb;\n" \
    "        }\n" \
    "        const unsigned short *xb = gb + (long long)nb * p.C * HW;\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int i = 0; i < BN / 16; i++) {\n" \
    "            unsigned lo = (mask[0] >> jbit[i]) & 1u ? (unsigned)xb[base[0] + joff[i]] : 0u;\n" \
    "            unsigned hi = (mask[1] >> jbit[i]) & 1u ? (unsigned)xb[base[1] + joff[i]] : 0u;\n" \
    "            rb[i] = lo | (hi << 16);\n" \
    "        }\n" \
    "    };\n" \
    "    auto bstore = [&](int s) {\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int i = 0; i < BN / 16; i++) Bs[(s * BN + bg + i * 16) * (LDK / 2) + kp] = rb[i];\n" \
    "    };\n" \
    "    float acc[MT][NT][4];\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int j = 0; j < NT; j++)\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;\n" \
    "    _Pragma(\"unroll\")\n" \
    "    /* A by cp.async STAGES - 1 steps ahead; B through registers: gathered two steps ahead,\n" \
    "     * stored into its stage one step ahead */\n" \
    "    for (int s = 0; s < STAGES - 1; s++) {\n" \
    "        if (kt0 + s < kt1) aload(s, kt0 + s);\n" \
    "        cp_commit();\n" \
    "    }\n" \
    "    if (kt0 < kt1) {\n" \
    "        bgather(kt0);\n" \
    "        bstore(0);\n" \
    "    }\n" \
    "    if (kt0 + 1 < kt1) bgather(kt0 + 1);\n" \
    "    for (int kt = kt0; kt < kt1; kt++) {\n" \
    "        cp_wait<STAGES - 2>();\n" \
    "        __syncthreads();\n" \
    "        if (kt + 1 < kt1) bstore((kt + 1 - kt0) % STAGES);\n" \
    "        if (kt + 2 < kt1) bgather(kt + 2);\n" \
    "        const int nk = kt + STAGES - 1;\n" \
    "        if (nk < kt1) aload((nk - kt0) % STAGES, nk);\n" \
    "        cp_commit();\n" \
    "        const int s = (kt - kt0) % STAGES;\n" \
    "        const unsigned short *Ah = As + s * BM * LDK;\n" \
    "        const unsigned *Bh = Bs + s * BN * (LDK / 2);\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int k16 = 0; k16 < BK; k16 += 16) {\n" \
    "            unsigned a[MT][4], b[NT][2];\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int i = 0; i < MT; i++) {\n" \
    "                const unsigned short *ap = Ah + (wm0 + i * 16 + g) * LDK + k16 + 2 * t;\n" \
    "                a[i][0] = *(const unsigned *)ap;\n" \
    "                a[i][1] = *(const unsigned *)(ap + 8 * LDK);\n" \
    "                a[i][2] = *(const unsigned *)(ap + 8);\n" \
    "                a[i][3] = *(const unsigned *)(ap + 8 * LDK + 8);\n" \
    "            }\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int j = 0; j < NT; j++) {\n" \
    "                const unsigned *bp = Bh + (wn0 + j * 8 + g) * (LDK / 2) + k16 / 2 + t;\n" \
    "                b[j][0] = bp[0];\n" \
    "                b[j][1] = bp[4];\n" \
    "            }\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int i = 0; i < MT; i++)\n" \
    "                _Pragma(\"unroll\")\n" \
    "                for (int j = 0; j < NT; j++) mma_bf16(acc[i][j], a[i], b[j]);\n" \
    "        }\n" \
    "    }\n" \
    "    cp_wait<0>();\n" \
    "    /* epilogue: the two adjacent columns of an accumulator pair in one 8-byte atomic add\n" \
    "     * (red.v2) where aligned (dwr always; dw of a 1x1 may sit at any float offset); accum 1:\n" \
    "     * the split's partial sums stored into out + blockIdx.z * O * Nn (summed afterwards) */\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int h = 0; h < 2; h++) {\n" \
    "            int m = m0 + wm0 + i * 16 + g + 8 * h;\n" \
    "            if (m >= M) continue;\n" \
    "            float *orow = p.out + (long long)m * Nn;\n" \
    "            if (p.accum) orow += (long long)blockIdx.z * M * Nn; /* partials of split z */\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int j = 0; j < NT; j++) {\n" \
    "                int n = n0 + wn0 + j * 8 + 2 * t;\n" \
    "                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];\n" \
    "                if (p.accum) {\n" \
    "                    if (n < Nn) orow[n] = v0;\n" \
    "                    if (n + 1 < Nn) orow[n + 1] = v1;\n" \
    "                } else if (n + 1 < Nn && ((unsigned long long)(orow + n) & 7) == 0) {\n" \
    "                    ig_red2(orow + n, v0, v1);\n" \
    "                } else {\n" \
    "                    if (n < Nn) atomicAdd(orow + n, v0);\n" \
    "                    if (n + 1 < Nn) atomicAdd(orow + n + 1, v1);\n" \
    "                }\n" \
    "            }\n" \
    "        }\n" \
    "    return;\n"

#define NB_IG_SRC_MODE0_BF16 \
    "/* the forward-style conv (MODE 0) on a bf16 image (PREC 2): A = the gathered image as 32-bit\n" \
    " * channel pairs [16 pairs][BM + 8] (each thread one output pixel, two 2-byte loads per pair,\n" \
    " * gathered into registers two steps ahead and stored one step ahead), B = bf16 weights\n" \
    " * wr [O][KK][C] rows [BN][BK + 8] by cp.async. A k tile lies within one tap (C % 32 == 0). The\n" \
    " * shared epilogue follows (bf16 output with OBF). */\n" \
    "#define LDK (BK + 8)\n" \
    "#define APW (BM + 8)\n" \
    "extern \"C\" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {\n" \
    "    extern __shared__ __align__(16) float smem[];\n" \
    "    unsigned *As = (unsigned *)smem;\n" \
    "    unsigned short *Bs = (unsigned short *)(As + STAGES * 16 * APW);\n" \
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n" \
    "    const int g = lane >> 2, t = lane & 3;\n" \
    "    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;\n" \
    "    const int HW = p.H * p.W, P = p.OH * p.OW;\n" \
    "    const int M = p.N * P, Nn = p.O, Kd = KK * p.C;\n" \
    "    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;\n" \
    "    const int nkt = Kd / BK;\n" \
    "    const int kt0 = p.kt_per_split ? blockIdx.z * p.kt_per_split : 0;\n" \
    "    const int kt1 = p.kt_per_split ? min(nkt, kt0 + p.kt_per_split) : nkt;\n" \
    "    const unsigned short *ga = (const unsigned short *)p.a, *gw = (const unsigned short *)p.b;\n" \
    "    /* A: this thread's output pixel (fixed) and channel pairs kp0 + i * PSTEP */\n" \
    "    const int PSTEP = NTH / BM, NP = 16 / PSTEP, am = tid % BM, kp0 = tid / BM;\n" \
    "    int ih0, iw0; const unsigned short *xb; bool mval;\n" \
    "    {\n" \
    "        int m = m0 + am; mval = m < M; if (!mval) m = 0;\n" \
    "        int nb = m / P, pp = m - nb * P, oh = pp / p.OW, ow = pp - oh * p.OW;\n" \
    "        ih0 = oh * STRIDE - p.pad; iw0 = ow * STRIDE - p.pad;\n" \
    "        xb = ga + (long long)nb * p.C * HW;\n" \
    "    }\n" \
    "    unsigned ra[NP];\n" \
    "    auto agather = [&](int kt) {\n" \
    "        int k0 = kt * BK, kk = k0 / p.C, c0 = k0 - kk * p.C;\n" \
    "        int ih = ih0 + kk / KS, iw = iw0 + kk % KS;\n" \
    "        bool v = mval && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;\n" \
    "        const unsigned short *src = xb + (long long)(c0 + 2 * kp0) * HW + ih * p.W + iw;\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int i = 0; i < NP; i++) {\n" \
    "            const unsigned short *q = src + (long long)(2 * i * PSTEP) * HW;\n" \
    "            ra[i] = v ? (unsigned)q[0] | ((unsigned)q[HW] << 16) : 0u;\n" \
    "        }\n" \
    "    };\n" \
    "    auto astore = [&](int s) {\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int i = 0; i < NP; i++) As[(s * 16 + kp0 + i * PSTEP) * APW + am] = ra[i];\n" \
    "    };\n" \
    "    auto bload = [&](int s, int kt) {\n" \
    "        int k0 = kt * BK;\n" \
    "        for (int i = tid; i < BN * (BK / 8); i += NTH) {\n" \
    "            int q = i & 3, n = i >> 2;\n" \
    "            bool v = n0 + n < Nn;\n" \
    "            cp16((float *)(Bs + (s * BN + n) * LDK + 8 * q),\n" \
    "                 v ? (const float *)(gw + (long long)(n0 + n) * Kd + k0 + 8 * q) : p.b, v);\n" \
    "        }\n" \
    "    };\n" \
    "    float acc[MT][NT][4];\n" \
    "    _Pragma(\"unroll\")\n" \
    "    for (int i = 0; i < MT; i++)\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int j = 0; j < NT; j++)\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;\n" \
    "    _Pragma(\"unroll\")\n" \
    "    /* B by cp.async STAGES - 1 steps ahead; A through registers: gathered two steps ahead,\n" \
    "     * stored into its stage one step ahead */\n" \
    "    for (int s = 0; s < STAGES - 1; s++) {\n" \
    "        if (kt0 + s < kt1) bload(s, kt0 + s);\n" \
    "        cp_commit();\n" \
    "    }\n" \
    "    if (kt0 < kt1) {\n" \
    "        agather(kt0);\n" \
    "        astore(0);\n" \
    "    }\n" \
    "    if (kt0 + 1 < kt1) agather(kt0 + 1);\n" \
    "    for (int kt = kt0; kt < kt1; kt++) {\n" \
    "        cp_wait<STAGES - 2>();\n" \
    "        __syncthreads();\n" \
    "        if (kt + 1 < kt1) astore((kt + 1 - kt0) % STAGES);\n" \
    "        if (kt + 2 < kt1) agather(kt + 2);\n" \
    "        const int nk = kt + STAGES - 1;\n" \
    "        if (nk < kt1) bload((nk - kt0) % STAGES, nk);\n" \
    "        cp_commit();\n" \
    "        const int s = (kt - kt0) % STAGES;\n" \
    "        const unsigned *Ah = As + s * 16 * APW;\n" \
    "        const unsigned *Bh = (const unsigned *)(Bs + s * BN * LDK);\n" \
    "        _Pragma(\"unroll\")\n" \
    "        for (int k16 = 0; k16 < BK; k16 += 16) {\n" \
    "            unsigned a[MT][4], b[NT][2];\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int i = 0; i < MT; i++) {\n" \
    "                const unsigned *ap = Ah + (k16 / 2 + t) * APW + wm0 + i * 16 + g;\n" \
    "                a[i][0] = ap[0];\n" \
    "                a[i][1] = ap[8];\n" \
    "                a[i][2] = ap[4 * APW];\n" \
    "                a[i][3] = ap[4 * APW + 8];\n" \
    "            }\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int j = 0; j < NT; j++) {\n" \
    "                const unsigned *bp = Bh + (wn0 + j * 8 + g) * (LDK / 2) + k16 / 2 + t;\n" \
    "                b[j][0] = bp[0];\n" \
    "                b[j][1] = bp[4];\n" \
    "            }\n" \
    "            _Pragma(\"unroll\")\n" \
    "            for (int i = 0; i < MT; i++)\n" \
    "                _Pragma(\"unroll\")\n" \
    "                for (int j = 0; j < NT; j++) mma_bf16(acc[i][j], a[i], b[j]);\n" \
    "        }\n" \
    "    }\n" \
    "    cp_wait<0>();\n"

#endif
