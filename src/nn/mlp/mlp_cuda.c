/* Fused MLP on CUDA: specialises the kernel file (kernels/mlp.cu) for one configuration,
 * compiles it once through the JIT layer (NVRTC + disk cache), owns the workspaces, launches.
 *
 * Per training step: mlp_convert (f32 master weights -> padded f16/bf16 copies, forward and
 * transposed, + f32 bias), mlp_fwd_train (all layers fused; saves the fragments backward needs),
 * then one of three backwards (docs/NN.md): split = mlp_bwd[_dx] (all layers fused in reverse;
 * saves dL/dz per layer, writes dx) + memset + mlp_dw (weight gradients, f32 atomics); fused =
 * mlp_bwd_fused[_dx] (dL/dz and weight gradients in one kernel, per-block f32 accumulators) +
 * mlp_dw_reduce; recompute = like fused, but mlp_bwd_rc recomputes the forward from the saved
 * input (and the training forward, mlp_fwd_train_nz, saves nothing else). Inference:
 * mlp_convert + mlp_fwd. */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "jit/jit.h"
#include "nabla/alloc.h"
#include "nn/mlp/mlp_internal.h"

/* Must match struct MlpParams in kernels/mlp_head.cuh field by field. */
typedef struct mlp_params {
    const void *x;
    float *y;
    const float *dy;
    float *dx;
    void *wf, *wt;
    float *bias;
    const float *params;
    void *s_in, *s_z, *s_zo, *s_delta;
    float *grads;
    long long batch;
    int n_wtiles, t16, t16_valid, dw_tiles;
    float scale, inv_scale;
    float *scratch;
    const float *enc_x;
    float *enc_grads;
    const float *target;
    float *loss;
    float inv_n;
    int loss_kind;
} mlp_params;

struct nb_mlp_cuda {
    nb_jit_kernel *convert, *fwd[2][2] /* [train][x is f16] */, *bwd[2] /* [dx] */, *dw;
    nb_jit_kernel *bwd_fused[2] /* [dx] */, *dw_reduce;
    char prefix[1024];        /* the #define prefix of this configuration's source */
    nb_jit_kernel *bwd_enc;   /* mlp_bwd_rc_enc for the grid defines hashed in enc_hash */
    nb_jit_kernel *train_enc[2]; /* mlp_train_rc_enc_{f32,f16}, same defines */
    uint64_t enc_hash;
    int enc_bps;              /* blocks per SM of the enc kernels (launch bounds in their source) */
    size_t scratch_cap;       /* bytes of scratch */
    int fused;                /* backward: 1 = mlp_bwd_fused + mlp_dw_reduce, 0 = mlp_bwd + mlp_dw */
    int rc;                   /* fused and recomputing (mlp_bwd_rc; training forward saves x only) */
    unsigned smem_fused, grid_fused;
    int fw, fwsmem, kspl;     /* fused backward: warps per block, weights in shared memory,
                                 accumulator copies per block */
    int64_t acc_block;        /* floats of one block's weight-gradient accumulator */
    nb_buffer *scratch;       /* [grid_fused][kspl][acc_block] f32 */
    nb_event *prof_e0, *prof_e1; /* nb_mlp_set_profile */
    double prof_ms[8];
    long prof_n[8];
    int in_pad, out_pad, mt, warps, minb, dww, ncho, nchi, wsmem_f, wsmem_b, sms;
    unsigned smem_f, smem_b;
    int64_t ftot, ttot, btot; /* halves, halves, floats */
    nb_buffer *wbuf;          /* [ftot + ttot] compute dtype, then [btot] f32 */
    nb_buffer *saved;         /* fragment-order workspace, grow-only */
    size_t saved_cap;
    int64_t t16_cap;          /* 16-row tiles the saved buffer was laid out for */
};

/* nb_mlp_set_profile(m, 1): every launch is timed with events (and synchronised: slow) and the
 * per-kernel totals are printed to stderr when the mlp is freed. For benchmarks only. */
enum { K_CONVERT, K_FWD, K_FWD_TRAIN, K_BWD, K_DW, K_BWD_FUSED, K_DW_REDUCE, K_COUNT };
static const char *const k_names[K_COUNT] = {"convert", "fwd", "fwd_train", "bwd",
                                             "dw", "bwd_fused", "dw_reduce"};

static int round16(int n) { return (n + 15) / 16 * 16; }

static int pick_chunk(int n8, int cap) {
    int best = 2;
    for (int d = 2; d <= cap && d <= n8; d += 2)
        if (n8 % d == 0) best = d;
    return best;
}

/* Creates the profiling events (nb_mlp_set_profile); without them the launches are not timed. */
static void mlp_profile_on(nb_mlp *m) {
    nb_mlp_cuda *c = m->cuda;
    if (c->prof_e0) return;
    if (nb_event_create(m->dev, &c->prof_e0) != NB_OK || nb_event_create(m->dev, &c->prof_e1) != NB_OK) {
        nb_event_destroy(c->prof_e0);
        c->prof_e0 = NULL;
    }
}

void nb_mlp_cuda_set_profile(nb_mlp *m) {
    nb_mlp_cuda *c = m->cuda;
    if (!c) return;
    if (m->profile) {
        mlp_profile_on(m);
        return;
    }
    nb_event_destroy(c->prof_e0); /* off: launches untimed again, the totals dropped */
    nb_event_destroy(c->prof_e1);
    c->prof_e0 = c->prof_e1 = NULL;
    memset(c->prof_ms, 0, sizeof c->prof_ms);
    memset(c->prof_n, 0, sizeof c->prof_n);
}

void nb_mlp_cuda_free(nb_mlp *m) {
    if (!m->cuda) return;
    if (m->cuda->prof_e0) {
        nb_mlp_cuda *c = m->cuda;
        fprintf(stderr, "nabla: mlp profile (width %d, %d layers, %s backward, %d warps, mt %d):",
                m->cfg.width, m->n_layers, c->rc ? "recompute" : c->fused ? "fused" : "split",
                c->fused ? c->fw : c->warps, c->mt);
        for (int k = 0; k < K_COUNT; k++)
            if (c->prof_n[k])
                fprintf(stderr, " %s %.4f ms", k_names[k], c->prof_ms[k] / (double)c->prof_n[k]);
        fprintf(stderr, " (mean per launch)\n");
        nb_event_destroy(c->prof_e0);
        nb_event_destroy(c->prof_e1);
    }
    nb_buffer_release(m->cuda->wbuf);
    nb_buffer_release(m->cuda->saved);
    nb_buffer_release(m->cuda->scratch);
    nb_free(m->cuda, sizeof *m->cuda);
    m->cuda = NULL;
}

size_t nb_mlp_cuda_workspace_bytes(const nb_mlp *m) {
    if (!m->cuda) return 0;
    return m->cuda->saved_cap + (m->cuda->wbuf ? nb_buffer_size(m->cuda->wbuf) : 0) +
           (m->cuda->scratch ? nb_buffer_size(m->cuda->scratch) : 0);
}

/* The configuration of an mlp of cfg with L layers on a device of info: the kernel shapes and
 * backward mode in c, and c->prefix = the #define lines the kernels are specialised with (the -D
 * defines of kernels/mlp.cu; the source prefix of the grid-fused variant, load_enc). */
static void mlp_plan(nb_mlp_cuda *c, const nb_mlp_config *cfg, int L, const nb_device_info *info) {
    int W = cfg->width;
    c->in_pad = round16(cfg->n_in);
    c->out_pad = round16(cfg->n_out);
    c->ftot = (int64_t)W * (c->in_pad + 8) + (int64_t)(L - 2) * W * (W + 8) +
              (int64_t)c->out_pad * (W + 8);
    c->ttot = (int64_t)c->in_pad * (W + 8) + (int64_t)(L - 2) * W * (W + 8) +
              (int64_t)W * (c->out_pad + 8);
    c->btot = (int64_t)W * (L - 1) + c->out_pad;
    size_t smem_f = (size_t)c->ftot * 2 + (cfg->bias ? (size_t)c->btot * 4 : 0);
    size_t smem_b = (size_t)c->ttot * 2;
    size_t optin = info->shared_mem_per_block_optin;
    int kw = W / 16, ki = c->in_pad / 16, ko = c->out_pad / 16;
    /* Backward, chosen from the shape (docs/NN.md and docs/PERF.md give the H100 measurements):
     * recompute (fused, recomputing the forward from the saved input instead of saving every
     * layer) where it can run (widths <= 64, no output activation, few layers, fits in shared
     * memory), else fused where the weights fit in shared memory beside the tiles, else split
     * (width 128: split measured faster than fused without the weights in shared memory). */
    size_t smem_rc = (size_t)(c->ftot + c->ttot) * 2 +
                     (size_t)8 * 512 * (size_t)((kw > ko ? kw : ko) + (kw > ki ? kw : ki)) +
                     (cfg->bias ? (size_t)c->btot * 4 : 0);
    c->rc = W <= 64 && cfg->out_act == NB_ACT_NONE &&
            (L - 1) * kw * 4 <= 96 && smem_rc <= optin;
    /* 16-row tiles per warp; 2 at 128 too: measured faster than 1 (docs/NN.md) */
    c->mt = W == 16 ? 8 : W == 32 ? 4 : 2;
    if (c->rc) c->mt = 1;
    c->warps = 8;
    c->minb = W <= 64 ? 2 : 1;
    if (W <= 64 && c->mt == 1) c->minb = 3; /* fewer registers per warp: 24 warps per SM */
    c->dww = 8;
    int cap = 16 / c->mt < 2 ? 2 : (16 / c->mt > 8 ? 8 : 16 / c->mt);
    c->ncho = pick_chunk(c->out_pad / 8, cap);
    c->nchi = pick_chunk(c->in_pad / 8, cap);
    c->wsmem_f = smem_f <= optin;
    c->wsmem_b = smem_b <= optin;
    c->smem_f = c->wsmem_f ? (unsigned)smem_f : 0;
    c->smem_b = c->wsmem_b ? (unsigned)smem_b : 0;
    c->sms = info->multiprocessors > 0 ? info->multiprocessors : 1;
    /* Fused backward: FW warps per block (8, with the next layer prefetched in registers), the
     * weights staged in shared memory if they fit beside the transposed dL/dz and input tiles
     * and the bias sums. */
    c->fw = 8; /* measured on the H100 (docs/NN.md): 8 beats 16 and 4 at every width */
    int fr16 = c->fw * c->mt;
    size_t tiles = (size_t)fr16 * 512 * (size_t)((kw > ko ? kw : ko) + (kw > ki ? kw : ki)) +
                   (cfg->bias ? (size_t)c->btot * 4 : 0);
    c->fwsmem = tiles + smem_b <= optin;
    size_t smem_fu = tiles + (c->fwsmem ? smem_b : 0);
    /* fused only where its weights fit in shared memory, else split (width 128: split measured
     * faster than fused on the H100) */
    int want_fused = c->fwsmem || c->rc;
    if (c->rc) smem_fu = smem_rc;
    c->smem_fused = (unsigned)smem_fu;
    c->acc_block = (int64_t)W * c->in_pad + (int64_t)(L - 2) * W * W + (int64_t)c->out_pad * W + c->btot;
    { /* row split of the hidden layers' weight-gradient slices over the block's warps */
        int ni = (W / 8) % 4 == 0 ? 4 : 2, items = (W / 16) * ((W / 8) / ni);
        c->kspl = c->fw / items > 1 ? c->fw / items : 1;
    }
    /* one block per SM (8 warps; the recompute kernel too: 2 per SM and its weight-gradient sums
     * kept in registers measured no faster, docs/PERF.md) */
    c->grid_fused = (unsigned)c->sms;
    /* per-block f32 accumulators of all weights: fine for small models, not for 1000 layers */
    int64_t scratch_bytes = (int64_t)c->grid_fused * c->kspl * c->acc_block * 4;
    c->fused = want_fused && smem_fu <= optin && scratch_bytes <= ((int64_t)256 << 20);
    if (!c->fused) c->rc = 0;

    char *prefix = c->prefix;
    snprintf(prefix, sizeof c->prefix,
             "#define W %d\n#define IN_PAD %d\n#define OUT_PAD %d\n#define N_IN %d\n"
             "#define N_OUT %d\n#define NL %d\n#define ACT %d\n#define OUT_ACT %d\n"
             "#define HAS_BIAS %d\n#define IS_BF16 %d\n#define MT %d\n#define WARPS %d\n"
             "#define MINB %d\n#define NCHO %d\n#define NCHI %d\n#define WSMEM_F %d\n"
             "#define WSMEM_B %d\n#define DWW %d\n#define FW %d\n#define FMINB 1\n"
             "#define FWSMEM %d\n#define FR16 %d\n#define FKD %d\n#define FKH %d\n#define KSPL %d\n"
             "#define FPF %d\n#define RCMINB 1\n",
             W, c->in_pad, c->out_pad, cfg->n_in, cfg->n_out, L, (int)cfg->act,
             (int)cfg->out_act, cfg->bias ? 1 : 0, cfg->compute == NB_BF16, c->mt, c->warps,
             c->minb, c->ncho, c->nchi, c->wsmem_f, c->wsmem_b, c->dww, c->fw, c->fwsmem, fr16,
             kw > ko ? kw : ko, kw > ki ? kw : ki, c->kspl, c->fw <= 8);
}

/* c->prefix's "#define NAME VALUE" lines as "NAME=VALUE" defines in buf, plus RC=rc; defs ends
 * with NULL. */
#define MLP_MAX_DEFS 30
static void mlp_defines(const char *prefix, int rc, char buf[MLP_MAX_DEFS][48], const char *defs[MLP_MAX_DEFS + 1]) {
    int n = 0;
    for (const char *s = prefix; n < MLP_MAX_DEFS - 1 && !strncmp(s, "#define ", 8);) {
        const char *e = strchr(s, '\n');
        if (!e) break;
        int len = (int)(e - s) - 8;
        snprintf(buf[n], sizeof buf[n], "%.*s", len, s + 8);
        char *sp = strchr(buf[n], ' ');
        if (sp) *sp = '=';
        defs[n] = buf[n];
        n++;
        s = e + 1;
    }
    snprintf(buf[n], sizeof buf[n], "RC=%d", rc);
    defs[n] = buf[n];
    defs[n + 1] = NULL;
}

static nb_status load_k(nb_device *dev, const char *const *defs, const char *entry, nb_jit_kernel **out) {
    return nb_jit_cuda_kernel(dev, "src/nn/mlp/kernels/mlp.cu", defs, entry, out);
}

static nb_status cuda_init(nb_mlp *m) {
    if (m->cuda) return NB_OK;
    const nb_device_info *info = nb_device_get_info(m->dev);
    if (info->cc_major < 8)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "nb_mlp: the CUDA MLP needs compute capability 8.0 or newer (mma.sync "
                        "f16/bf16); %s is %d.%d", nb_device_name(m->dev), info->cc_major,
                        info->cc_minor);
    nb_mlp_cuda *c = nb_calloc(sizeof *c, 16);
    if (!c) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_mlp: out of host memory");
    mlp_plan(c, &m->cfg, m->n_layers, info);
    char dbuf[MLP_MAX_DEFS][48];
    const char *defs[MLP_MAX_DEFS + 1];
    mlp_defines(c->prefix, c->rc, dbuf, defs);
    nb_status s = load_k(m->dev, defs, "mlp_convert", &c->convert);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_fwd_f32", &c->fwd[0][0]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_fwd_f16", &c->fwd[0][1]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_fwd_train_f32", &c->fwd[1][0]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_fwd_train_f16", &c->fwd[1][1]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_bwd", &c->bwd[0]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_bwd_dx", &c->bwd[1]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_dw", &c->dw);
    if (s == NB_OK && c->fused) {
        const char *e0 = c->rc ? "mlp_bwd_rc" : "mlp_bwd_fused";
        const char *e1 = c->rc ? "mlp_bwd_rc_dx" : "mlp_bwd_fused_dx";
        s = load_k(m->dev, defs, e0, &c->bwd_fused[0]);
        if (s == NB_OK) s = load_k(m->dev, defs, e1, &c->bwd_fused[1]);
        if (s == NB_OK && c->rc) s = load_k(m->dev, defs, "mlp_fwd_train_nz_f32", &c->fwd[1][0]);
        if (s == NB_OK && c->rc) s = load_k(m->dev, defs, "mlp_fwd_train_nz_f16", &c->fwd[1][1]);
        if (s == NB_OK)
            s = load_k(m->dev, defs, "mlp_dw_reduce_w", &c->dw_reduce);
        c->scratch_cap = (size_t)c->grid_fused * (size_t)c->kspl * (size_t)c->acc_block * 4;
        if (s == NB_OK) s = nb_buffer_alloc(m->dev, c->scratch_cap, &c->scratch);
    }
    if (s == NB_OK)
        s = nb_buffer_alloc(m->dev, (size_t)(c->ftot + c->ttot) * 2 + (size_t)c->btot * 4, &c->wbuf);
    if (s != NB_OK) {
        nb_buffer_release(c->scratch);
        nb_buffer_release(c->wbuf);
        nb_free(c, sizeof *c);
        return s;
    }
    m->cuda = c;
    if (m->profile) mlp_profile_on(m);
    return NB_OK;
}

static nb_status launch_k(nb_mlp_cuda *c, int kind, nb_jit_kernel *k, unsigned grid_x,
                          unsigned grid_y, unsigned threads, unsigned smem, mlp_params *p) {
    const unsigned grid[3] = {grid_x, grid_y, 1}, block[3] = {threads, 1, 1};
    void *args[1] = {p};
    if (!c->prof_e0) return nb_cuda_launch(nb_jit_kernel_cuda_fn(k), grid, block, smem, NULL, args);
    NB_TRY(nb_event_record(c->prof_e0, NULL));
    NB_TRY(nb_cuda_launch(nb_jit_kernel_cuda_fn(k), grid, block, smem, NULL, args));
    NB_TRY(nb_event_record(c->prof_e1, NULL));
    NB_TRY(nb_event_synchronize(c->prof_e1));
    float ms = 0;
    NB_TRY(nb_event_elapsed_ms(c->prof_e0, c->prof_e1, &ms));
    c->prof_ms[kind] += ms;
    c->prof_n[kind]++;
    return NB_OK;
}


static void fill_common(nb_mlp *m, mlp_params *p, int64_t B) {
    nb_mlp_cuda *c = m->cuda;
    char *wb = nb_buffer_ptr(c->wbuf);
    memset(p, 0, sizeof *p);
    p->wf = wb;
    p->wt = wb + c->ftot * 2;
    p->bias = (float *)(wb + (c->ftot + c->ttot) * 2);
    p->params = nb_tensor_data(m->params);
    p->grads = nb_tensor_data(m->grads);
    p->batch = B;
    p->n_wtiles = (int)((B + 16 * c->mt - 1) / (16 * c->mt));
    p->t16 = p->n_wtiles * c->mt;
    p->t16_valid = (int)((B + 15) / 16);
    p->scale = m->cfg.loss_scale;
    p->inv_scale = 1.f / m->cfg.loss_scale;
}

/* Saved-fragment layout for t16 tiles of 16 rows: s_in, s_z[L-1], s_zo, s_delta[L]. Each
 * 16x16 tile is 512 bytes. */
static void saved_layout(const nb_mlp *m, int64_t t16, size_t off[4], size_t *total) {
    const nb_mlp_cuda *c = m->cuda;
    int64_t KW = m->cfg.width / 16, KI = c->in_pad / 16, KO = c->out_pad / 16;
    int L = m->n_layers;
    off[0] = 0;
    off[1] = off[0] + (size_t)(t16 * KI * 512);
    off[2] = off[1] + (c->rc ? 0 : (size_t)(t16 * KW * 512 * (L - 1)));
    off[3] = off[2] + (m->cfg.out_act != NB_ACT_NONE ? (size_t)(t16 * KO * 512) : 0);
    /* dL/dz per layer only for the split backward (the fused one keeps it on chip) */
    *total = off[3] + (c->fused ? 0 : (size_t)(t16 * 512 * (KW * (L - 1) + KO)));
}

static nb_status convert_weights(nb_mlp *m, mlp_params *p) {
    nb_mlp_cuda *c = m->cuda;
    int64_t n = c->ftot + c->ttot + c->btot;
    int64_t blocks = (n + 255) / 256;
    if (blocks > (int64_t)c->sms * 8) blocks = (int64_t)c->sms * 8;
    return launch_k(c, K_CONVERT, c->convert, (unsigned)blocks, 1, 256, 0, p);
}

static unsigned persistent_grid(const nb_mlp_cuda *c, int n_wtiles, unsigned smem, size_t smem_sm) {
    int64_t want = (n_wtiles + c->warps - 1) / c->warps;
    int64_t per_sm = c->minb;
    if (smem > 0) {
        int64_t fit = (int64_t)(smem_sm / (smem + 1024));
        if (fit < per_sm) per_sm = fit < 1 ? 1 : fit;
    }
    int64_t cap = (int64_t)c->sms * per_sm;
    return (unsigned)(want < cap ? want : cap);
}

nb_status nb_mlp_cuda_forward(nb_mlp *m, const nb_tensor *x, nb_tensor *y, int training) {
    NB_TRY(cuda_init(m));
    nb_mlp_cuda *c = m->cuda;
    int64_t B = nb_tensor_shape(x)[0];
    if ((B + 15) / 16 > (int64_t)1 << 30)
        return nb_error(NB_ERR_UNSUPPORTED, "nb_mlp_forward: batch %lld is too large",
                        (long long)B);
    mlp_params p;
    fill_common(m, &p, B);
    p.x = nb_tensor_data(x);
    p.y = nb_tensor_data(y);
    if (training) {
        size_t off[4], total;
        saved_layout(m, p.t16, off, &total);
        if (total > c->saved_cap) {
            nb_buffer_release(c->saved);
            c->saved = NULL;
            c->saved_cap = 0;
            NB_TRY(nb_buffer_alloc(m->dev, total, &c->saved));
            c->saved_cap = total;
        }
        char *sb = nb_buffer_ptr(c->saved);
        p.s_in = sb + off[0];
        p.s_z = sb + off[1];
        p.s_zo = sb + off[2];
        p.s_delta = sb + off[3];
        c->t16_cap = p.t16;
    }
    NB_TRY(convert_weights(m, &p));
    const nb_device_info *info = nb_device_get_info(m->dev);
    unsigned grid = persistent_grid(c, p.n_wtiles, c->smem_f, info->shared_mem_per_sm);
    int xh = nb_tensor_dtype(x) == NB_F16;
    return launch_k(c, training ? K_FWD_TRAIN : K_FWD, c->fwd[training ? 1 : 0][xh], grid, 1,
                    (unsigned)c->warps * 32, c->smem_f, &p);
}

nb_status nb_mlp_cuda_backward(nb_mlp *m, const nb_tensor *dy, nb_tensor *dx) {
    nb_mlp_cuda *c = m->cuda;
    if (!c || !c->saved)
        return nb_error(NB_ERR_INTERNAL, "nb_mlp_backward: no saved CUDA state");
    int64_t B = m->saved_batch;
    mlp_params p;
    fill_common(m, &p, B);
    size_t off[4], total;
    saved_layout(m, p.t16, off, &total);
    char *sb = nb_buffer_ptr(c->saved);
    p.s_in = sb + off[0];
    p.s_z = sb + off[1];
    p.s_zo = sb + off[2];
    p.s_delta = sb + off[3];
    p.dy = nb_tensor_data(dy);
    p.dx = dx ? nb_tensor_data(dx) : NULL;
    const nb_device_info *info = nb_device_get_info(m->dev);
    if (c->fused) {
        unsigned nbt = (unsigned)((p.n_wtiles + c->fw - 1) / c->fw);
        unsigned grid = nbt < c->grid_fused ? nbt : c->grid_fused;
        p.scratch = nb_buffer_ptr(c->scratch);
        p.dw_tiles = (int)grid * c->kspl;
        NB_TRY(launch_k(c, K_BWD_FUSED, c->bwd_fused[dx ? 1 : 0], grid, 1, (unsigned)c->fw * 32,
                        c->smem_fused, &p));
        int64_t blocks = (c->acc_block + 31) / 32; /* mlp_dw_reduce_w: 32 elements per block */
        return launch_k(c, K_DW_REDUCE, c->dw_reduce, (unsigned)blocks, 1, 256, 0, &p);
    }
    unsigned grid = persistent_grid(c, p.n_wtiles, c->smem_b, info->shared_mem_per_sm);
    NB_TRY(launch_k(c, K_BWD, c->bwd[dx ? 1 : 0], grid, 1, (unsigned)c->warps * 32, c->smem_b, &p));
    NB_TRY(nb_memset(m->dev, p.grads, 0, (size_t)m->n_params * sizeof(float)));
    int64_t target = (int64_t)c->sms * 2;
    int64_t per = (p.t16_valid + target - 1) / target;
    if (per < 4) per = 4;
    p.dw_tiles = (int)per;
    unsigned gx = (unsigned)((p.t16_valid + per - 1) / per);
    return launch_k(c, K_DW, c->dw, gx, (unsigned)m->n_layers, (unsigned)c->dww * 32, 0, &p);
}

/* The recomputing backward with a 2-D, 2-feature grid encoding's backward fused in
 * (nb_encoding_backward_mlp): enc_defs configure the grid's device code (nb_enc_cuda_mlp_defines,
 * src/nn/encoding/kernels/grid_scatter.cuh), x the grid positions [B, 2] and grads the grid's
 * parameter gradients (accumulated). The MLP's input gradient is never stored. NB_ERR_UNSUPPORTED
 * (nothing launched) where the mlp does not run the recomputing backward or the coarse-level sums
 * do not fit in shared memory. */
static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The defines of the grid-fused kernels: the mlp's (mlp_defines) with RCMINB = bps blocks per SM,
 * then ENC=1 and the encoding's enc_defs. NB_ERR_INTERNAL if they do not fit. */
#define MLP_ENC_MAX_DEFS (MLP_MAX_DEFS + 17)
static nb_status mlp_enc_defines(const nb_mlp_cuda *c, int bps, const char *const *enc_defs,
                                 char buf[MLP_MAX_DEFS][48], const char *defs[MLP_ENC_MAX_DEFS + 1]) {
    mlp_defines(c->prefix, c->rc, buf, defs);
    int n = 0;
    for (; defs[n]; n++)
        if (!strncmp(defs[n], "RCMINB=", 7)) snprintf(buf[n], sizeof buf[n], "RCMINB=%d", bps);
    defs[n++] = "ENC=1";
    for (int i = 0; enc_defs && enc_defs[i]; i++) {
        if (n >= MLP_ENC_MAX_DEFS) return nb_error(NB_ERR_INTERNAL, "nb_mlp: too many grid defines");
        defs[n++] = enc_defs[i];
    }
    defs[n] = NULL;
    return NB_OK;
}

/* Loads mlp_bwd_rc_enc and mlp_train_rc_enc_* for enc_defs (one compile per grid configuration);
 * the shared memory they take in *smem. NB_ERR_UNSUPPORTED where this mlp has no such path. */
static nb_status load_enc(nb_mlp *m, const char *const *enc_defs, int enc_smem_floats, size_t *smem) {
    nb_mlp_cuda *c = m->cuda;
    if (!c || !c->saved)
        return nb_error(NB_ERR_INTERNAL, "nb_encoding_backward_mlp: no saved CUDA state in the mlp");
    const nb_device_info *info = nb_device_get_info(m->dev);
    *smem = (size_t)c->smem_fused + (size_t)enc_smem_floats * 4;
    if (!c->fused || !c->rc || m->cfg.n_in % 2 != 0 || *smem > info->shared_mem_per_block_optin)
        return nb_error(NB_ERR_UNSUPPORTED, "nb_encoding_backward_mlp: this mlp has no fused grid backward");
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; enc_defs && enc_defs[i]; i++) h = fnv1a(fnv1a(h, enc_defs[i]), " ");
    if (c->bwd_enc && h == c->enc_hash) return NB_OK;
    /* Blocks per SM: 2 where two fit in shared memory (measured faster on the H100 than 1:
     * docs/PERF.md, 0.230 vs 0.251 ms); the scratch grows to match. */
    int bps = 2 * (*smem + 1024) > info->shared_mem_per_sm ? 1 : 2;
    size_t need = (size_t)c->sms * (size_t)bps * (size_t)c->kspl * (size_t)c->acc_block * 4;
    if (need > c->scratch_cap) {
        nb_buffer *nbuf = NULL;
        NB_TRY(nb_buffer_alloc(m->dev, need, &nbuf));
        NB_TRY(nb_device_synchronize(m->dev)); /* no kernel in flight still uses the old one */
        nb_buffer_release(c->scratch);
        c->scratch = nbuf;
        c->scratch_cap = need;
    }
    c->enc_bps = bps;
    char dbuf[MLP_MAX_DEFS][48];
    const char *defs[MLP_ENC_MAX_DEFS + 1];
    NB_TRY(mlp_enc_defines(c, bps, enc_defs, dbuf, defs));
    c->bwd_enc = NULL;
    nb_status s = load_k(m->dev, defs, "mlp_train_rc_enc_f32", &c->train_enc[0]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_train_rc_enc_f16", &c->train_enc[1]);
    if (s == NB_OK) s = load_k(m->dev, defs, "mlp_bwd_rc_enc", &c->bwd_enc);
    if (s != NB_OK) c->bwd_enc = NULL;
    NB_TRY(s);
    c->enc_hash = h;
    return NB_OK;
}

/* The fused kernel k over batch B (p filled but for the workspaces), then the weight-gradient
 * reduction. */
static nb_status launch_enc(nb_mlp *m, nb_jit_kernel *k, size_t smem, mlp_params *p) {
    nb_mlp_cuda *c = m->cuda;
    size_t off[4], total;
    saved_layout(m, p->t16, off, &total);
    char *sb = nb_buffer_ptr(c->saved);
    p->s_in = sb + off[0];
    p->s_z = sb + off[1];
    p->s_zo = sb + off[2];
    p->s_delta = sb + off[3];
    unsigned nbt = (unsigned)((p->n_wtiles + c->fw - 1) / c->fw), cap = (unsigned)(c->sms * c->enc_bps);
    unsigned grid = nbt < cap ? nbt : cap;
    p->scratch = nb_buffer_ptr(c->scratch);
    p->dw_tiles = (int)grid * c->kspl;
    NB_TRY(launch_k(c, K_BWD_FUSED, k, grid, 1, (unsigned)c->fw * 32, (unsigned)smem, p));
    int64_t blocks = (c->acc_block + 31) / 32; /* mlp_dw_reduce_w: 32 elements per block */
    return launch_k(c, K_DW_REDUCE, c->dw_reduce, (unsigned)blocks, 1, 256, 0, p);
}

nb_status nb_mlp_cuda_backward_enc(nb_mlp *m, const nb_tensor *dy, const char *const *enc_defs, int enc_smem_floats,
                                   const float *x, float *grads) {
    size_t smem = 0;
    NB_TRY(load_enc(m, enc_defs, enc_smem_floats, &smem));
    mlp_params p;
    fill_common(m, &p, m->saved_batch);
    p.dy = nb_tensor_data(dy);
    p.enc_x = x;
    p.enc_grads = grads;
    return launch_enc(m, m->cuda->bwd_enc, smem, &p);
}

nb_status nb_mlp_cuda_train_enc(nb_mlp *m, const nb_tensor *in, const nb_tensor *target, int loss_kind,
                                float *loss_sum, const char *const *enc_defs, int enc_smem_floats, const float *x,
                                float *grads) {
    NB_TRY(cuda_init(m));
    nb_mlp_cuda *c = m->cuda;
    int64_t B = nb_tensor_shape(in)[0];
    if (c->out_pad != 16 || c->in_pad > 64 || (B + 15) / 16 > (int64_t)1 << 30)
        return nb_error(NB_ERR_UNSUPPORTED, "nb_encoding_mlp_train: no fused path for this mlp");
    mlp_params p;
    fill_common(m, &p, B);
    { /* the workspace for B rows (the kernel reads none of it, but launch_enc lays it out) */
        size_t off[4], total;
        saved_layout(m, p.t16, off, &total);
        if (total > c->saved_cap) {
            nb_buffer_release(c->saved);
            c->saved = NULL;
            c->saved_cap = 0;
            NB_TRY(nb_buffer_alloc(m->dev, total, &c->saved));
            c->saved_cap = total;
        }
    }
    size_t smem = 0;
    NB_TRY(load_enc(m, enc_defs, enc_smem_floats, &smem));
    NB_TRY(convert_weights(m, &p));
    p.x = nb_tensor_data(in);
    p.enc_x = x;
    p.enc_grads = grads;
    p.target = nb_tensor_data(target);
    p.loss = loss_sum;
    p.inv_n = (float)(1.0 / (double)(B * m->cfg.n_out)); /* as nb_loss */
    p.loss_kind = loss_kind;
    return launch_enc(m, c->train_enc[nb_tensor_dtype(in) == NB_F16], smem, &p);
}
