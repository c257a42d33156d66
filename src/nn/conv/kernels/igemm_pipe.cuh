// Pieces every implicit-GEMM kernel of igemm.cu (f32 / tf32 / bf16-from-f32) and igemm_bf16.cuh
// (bf16 activations) shares: thread ids, the per-kernel reduction split, the accumulator tile,
// the cp.async pipeline (prologue and per-step head), the halo and gather geometry, the tap
// masks and the mma / FFMA tile updates. Macros (not functions) so that the kernels compile to
// the same machine code as when each spelled them out (checked by comparing NVRTC sm_90 cubins of
// every configuration the loaders build). They name the kernels' locals (p, tid, kt, kt0, kt1,
// acc, a, b, ...) as each kernel does; arguments are pasted as written (pass `(CB / 2)`, not
// `CB / 2`, where precedence matters). Included once by igemm.cu, after ptx.cuh.

/* tid; lane; warp; g = lane / 4 (fragment row), t = lane % 4 (fragment column pair) */
#define IG_THREAD_IDS                                                                      \
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;                         \
    const int g = lane >> 2, t = lane & 3;
/* this warp's WTM x WTN sub-tile of the block tile (WM x WN warps) */
#define IG_WARP_TILE const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;

/* float acc[MT][NJ][4] = 0: MT 16-row fragments x NJ 8-column fragments (or taps) x 4 */
#define IG_ACC_ZERO(NJ)                                                                    \
    float acc[MT][NJ][4];                                                                  \
    _Pragma("unroll")                                                                      \
    for (int i = 0; i < MT; i++)                                                           \
        _Pragma("unroll")                                                                  \
        for (int j = 0; j < NJ; j++)                                                       \
            _Pragma("unroll")                                                              \
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

/* the cp.async pipeline: steps kt0 .. kt1 - 1, stage = (step - kt0) % STAGES; the prologue
 * issues the first STAGES - 1 steps' copies (one commit group each, empty past kt1) */
#define IG_CP_PROLOGUE(load)                                                               \
    _Pragma("unroll")                                                                      \
    for (int s = 0; s < STAGES - 1; s++) {                                                 \
        if (kt0 + s < kt1) load(s, kt0 + s);                                               \
        cp_commit();                                                                       \
    }
/* head of step kt: wait for its stage, then issue step kt + STAGES - 1's copies into the stage
 * every thread has finished reading; declares s (this step's stage) */
#define IG_CP_STEP(load)                                                                   \
    cp_wait<STAGES - 2>();                                                                 \
    __syncthreads();                                                                       \
    {                                                                                      \
        int nk = kt + STAGES - 1;                                                          \
        if (nk < kt1) load((nk - kt0) % STAGES, nk);                                       \
        cp_commit();                                                                       \
    }                                                                                      \
    const int s = (kt - kt0) % STAGES;
/* the same pipeline with one operand through registers: cpload (cp.async, STAGES - 1 steps
 * ahead), gather (global -> registers, two steps ahead), store (registers -> its stage, one
 * step ahead) */
#define IG_REG_PROLOGUE(cpload, gather, store)                                             \
    IG_CP_PROLOGUE(cpload)                                                                 \
    if (kt0 < kt1) {                                                                       \
        gather(kt0);                                                                       \
        store(0);                                                                          \
    }                                                                                      \
    if (kt0 + 1 < kt1) gather(kt0 + 1);
#define IG_REG_STEP(cpload, gather, store)                                                 \
    cp_wait<STAGES - 2>();                                                                 \
    __syncthreads();                                                                       \
    if (kt + 1 < kt1) store((kt + 1 - kt0) % STAGES);                                      \
    if (kt + 2 < kt1) gather(kt + 2);                                                      \
    const int nk = kt + STAGES - 1;                                                        \
    if (nk < kt1) cpload((nk - kt0) % STAGES, nk);                                         \
    cp_commit();                                                                           \
    const int s = (kt - kt0) % STAGES;

/* MODE 0: M = N * P output pixels x Nn = O channels, k = KK * C in BK tiles, split over
 * blockIdx.z when kt_per_split (0: one block column does all) */
#define IG_GATHER_SPLIT                                                                    \
    const int M = p.N * P, Nn = p.O, Kd = KK * p.C;                                        \
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;                                  \
    const int nkt = Kd / BK;                                                               \
    const int kt0 = p.kt_per_split ? blockIdx.z * p.kt_per_split : 0;                      \
    const int kt1 = p.kt_per_split ? min(nkt, kt0 + p.kt_per_split) : nkt;
/* MODE 0: this thread's output pixel m0 + am: its top-left input tap (ih0, iw0), image base xb
 * (element type T, from base) and whether it exists (mval; else pixel 0, never read) */
#define IG_GATHER_PIXEL(T, base)                                                           \
    int ih0, iw0; const T *xb; bool mval;                                                  \
    {                                                                                      \
        int m = m0 + am; mval = m < M; if (!mval) m = 0;                                   \
        int nb = m / P, pp = m - nb * P, oh = pp / p.OW, ow = pp - oh * p.OW;              \
        ih0 = oh * STRIDE - p.pad; iw0 = ow * STRIDE - p.pad;                              \
        xb = base + (long long)nb * p.C * HW;                                              \
    }
/* MODE 2: M = O rows x Nn = KK * C columns, k = N * P pixels in BK tiles split over blockIdx.z */
#define IG_WG_SPLIT                                                                        \
    const int M = p.O, Nn = KK * p.C;                                                      \
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;                                  \
    const int nkt = (p.N * P) / BK;                                                        \
    const int kt0 = blockIdx.z * p.kt_per_split;                                           \
    const int kt1 = min(nkt, kt0 + p.kt_per_split);
/* MODE 2: per gathered column n0 + j0 + i * step (i < NC): offset of its tap in the image
 * (c * HW + ki * W + kj) and its tap's bit in the tile's validity mask (31: a padding column,
 * never valid) */
#define IG_COL_TAPS(NC, j0, step)                                                          \
    int joff[NC], jbit[NC];                                                                \
    _Pragma("unroll")                                                                      \
    for (int i = 0; i < NC; i++) {                                                         \
        int j = n0 + j0 + i * step;                                                        \
        if (j < Nn) { int kk = j / p.C; joff[i] = (j - kk * p.C) * HW + (kk / KS) * p.W + kk % KS; jbit[i] = kk; } \
        else { joff[i] = 0; jbit[i] = 31; }                                                \
    }
/* MODE 2: unsigned mvar = bit (ki * KS + kj) set where input (ihb + ki, iwb + kj) lies inside */
#define IG_TAP_MASK(mvar)                                                                  \
    unsigned cols = 0, mvar = 0;                                                           \
    _Pragma("unroll")                                                                      \
    for (int q = 0; q < KS; q++) cols |= (unsigned)(iwb + q >= 0 && iwb + q < p.W) << q;   \
    _Pragma("unroll")                                                                      \
    for (int q = 0; q < KS; q++) if (ihb + q >= 0 && ihb + q < p.H) mvar |= cols << (q * KS);

/* MODE 1 (halo reuse): the block's image nb and first output row oh0, its CB-channel steps
 * (channels past C read as zeros, weights padded too), split over blockIdx.z */
#define IG_HALO_SPLIT                                                                      \
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;                                  \
    const int nb = m0 / P, oh0 = (m0 - nb * P) / p.OW;                                     \
    const int nch = (p.C + CB - 1) / CB;                                                   \
    const int kt0 = p.kt_per_split ? blockIdx.z * p.kt_per_split : 0;                      \
    const int kt1 = p.kt_per_split ? min(nch, kt0 + p.kt_per_split) : nch;
/* the 4 zero elements on each side of every halo row of planes planes in all STAGES (never
 * written by the copies) */
#define IG_HALO_ZERO(buf, planes, zero)                                                    \
    for (int i = tid; i < STAGES * planes * HR * 8; i += NTH) {                            \
        int col = i & 7, r = i >> 3, hr = r % HR, sc = r / HR;                             \
        buf[sc * CS + hr * RS + (col < 4 ? col : p.W + col)] = zero;                       \
    }
/* MODE 1: this thread's output pixels: offset of (row, column) in a plane of the halo */
#define IG_HALO_PIXELS                                                                     \
    int hb[MT][2];                                                                         \
    _Pragma("unroll")                                                                      \
    for (int i = 0; i < MT; i++)                                                           \
        _Pragma("unroll")                                                                  \
        for (int h = 0; h < 2; h++) {                                                      \
            int m = wm0 + i * 16 + g + 8 * h, r = m / p.OW, col = m - r * p.OW;            \
            hb[i][h] = r * RS + col + 4 - p.pad;                                           \
        }

/* MODE 3 (halo weight gradient): the block's output channels m0, its 32 input channels c0 and
 * its steps of RT whole output rows of one image, split over blockIdx.z */
#define IG_ROWS_SPLIT                                                                      \
    const int m0 = blockIdx.x * BM, c0 = blockIdx.y * C3;                                  \
    const int tpi = p.OH / RT, nsteps = p.N * tpi;                                         \
    const int kt0 = blockIdx.z * p.kt_per_split, kt1 = min(nsteps, kt0 + p.kt_per_split);
/* MODE 3 epilogue: for each accumulator (i, j, r): output channel o = m0 + wm0 + 16 i + g +
 * 8 (r / 2), input channel c0 + cg + 2 t + (r % 2), tap j: d = dw row of (o, channel); the
 * statements store acc[i][j][2 * h + e] for j < KK */
#define IG_DW_EPILOGUE(...)                                                                \
    _Pragma("unroll")                                                                      \
    for (int i = 0; i < MT; i++)                                                           \
        _Pragma("unroll")                                                                  \
        for (int h = 0; h < 2; h++) {                                                      \
            int o = m0 + wm0 + i * 16 + g + 8 * h;                                         \
            if (o >= p.O) continue;                                                        \
            _Pragma("unroll")                                                              \
            for (int e = 0; e < 2; e++) {                                                  \
                float *d = p.out + ((long long)o * p.C + c0 + cg + 2 * t + e) * KK;        \
                __VA_ARGS__                                                                \
            }                                                                              \
        }

/* acc[i][j] += a[i] x b[j] for the MT x NT fragments (mma: mma_tf32 or mma_bf16) */
#define IG_MMA_TILE(mma)                                                                   \
    _Pragma("unroll")                                                                      \
    for (int i = 0; i < MT; i++)                                                           \
        _Pragma("unroll")                                                                  \
        for (int j = 0; j < NT; j++) mma(acc[i][j], a[i], b[j]);
/* exact fp32: acc[i][j] += (av[i][0], av[i][1]) x (bv[j][0], bv[j][1]) in the mma layout */
#define IG_FMA_TILE                                                                        \
    _Pragma("unroll")                                                                      \
    for (int i = 0; i < MT; i++)                                                           \
        _Pragma("unroll")                                                                  \
        for (int j = 0; j < NT; j++) {                                                     \
            acc[i][j][0] = fmaf(av[i][0], bv[j][0], acc[i][j][0]);                         \
            acc[i][j][1] = fmaf(av[i][0], bv[j][1], acc[i][j][1]);                         \
            acc[i][j][2] = fmaf(av[i][1], bv[j][0], acc[i][j][2]);                         \
            acc[i][j][3] = fmaf(av[i][1], bv[j][1], acc[i][j][3]);                         \
        }
/* bf16 B fragments from a stage of 32-bit k pairs Bh [BN][LDK / 2] (MODE 0 / 2, ABF) */
#define IG_BF16_BFRAG                                                                      \
    _Pragma("unroll")                                                                      \
    for (int j = 0; j < NT; j++) {                                                         \
        const unsigned *bp = Bh + (wn0 + j * 8 + g) * (LDK / 2) + k16 / 2 + t;             \
        b[j][0] = bp[0];                                                                   \
        b[j][1] = bp[4];                                                                   \
    }
