// Types, the parameter block (struct MlpParams: must match mlp_params in mlp_cuda.c field by field)
// and the sizes / offsets of the padded weight copies.
typedef unsigned int u32;
typedef unsigned short u16;

struct MlpParams {
    const void *x; float *y; const float *dy; float *dx;
    u16 *wf; u16 *wt; float *bias; const float *params;
    uint4 *s_in; uint4 *s_z; uint4 *s_zo; uint4 *s_delta; float *grads;
    long long batch;
    int n_wtiles; int t16; int t16_valid; int dw_tiles;
    float scale; float inv_scale;
    float *scratch;
    const float *enc_x; float *enc_grads; /* mlp_bwd_rc_enc: grid positions [B, 2], grid gradients */
    const float *target; float *loss; float inv_n; int loss_kind; /* mlp_train_rc_enc_*: the loss */
};

constexpr int KW = W / 16, NW = W / 8, KI = IN_PAD / 16, KO = OUT_PAD / 16;
constexpr int NO8 = OUT_PAD / 8, NI8 = IN_PAD / 8;
constexpr int SF0 = IN_PAD + 8, SFH = W + 8;
constexpr long long F0 = (long long)W * SF0, FH = (long long)W * SFH, FL = (long long)OUT_PAD * SFH;
constexpr long long FTOT = F0 + (long long)(NL - 2) * FH + FL;
constexpr int ST0 = W + 8, STH = W + 8, STL = OUT_PAD + 8;
constexpr long long T0 = (long long)IN_PAD * ST0, TH = (long long)W * STH, TL = (long long)W * STL;
constexpr long long TTOT = T0 + (long long)(NL - 2) * TH + TL;
constexpr int BTOT = W * (NL - 1) + OUT_PAD;
constexpr long long P0 = (long long)W * N_IN + (HAS_BIAS ? W : 0);
constexpr long long PH = (long long)W * W + (HAS_BIAS ? W : 0);

__device__ __forceinline__ long long wf_off(int l) { return l == 0 ? 0 : F0 + (long long)(l - 1) * FH; }
__device__ __forceinline__ long long wt_off(int l) { return l == 0 ? 0 : T0 + (long long)(l - 1) * TH; }
__device__ __forceinline__ long long p_off(int l) { return l == 0 ? 0 : P0 + (long long)(l - 1) * PH; }
__device__ __forceinline__ int l_rows(int l) { return l == NL - 1 ? N_OUT : W; }
__device__ __forceinline__ int l_cols(int l) { return l == 0 ? N_IN : W; }
