/* guided-diffusion's UNetModel on the tape: config, validation, parameter registration under the
 * PyTorch state_dict names, init, forward (see include/nabla/nn_unet.h for the structure). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nabla/nn_unet.h"
#include "graph/op_rows.h"

#define TRY(expr)                                                                              \
    do {                                                                                       \
        nb_status try_s_ = (expr);                                                             \
        if (try_s_ != NB_OK) return try_s_;                                                    \
    } while (0)

typedef struct ures {
    int cin, cout;
    int emb_off; /* first row of this block's emb_layers in the stacked projection */
    nb_tvar gn1_w, gn1_b, c1_w, c1_b, emb_w, emb_b, gn2_w, gn2_b, c2_w, c2_b, skip_w, skip_b;
} ures;
typedef struct uattn {
    int c, heads;
    nb_tvar gn_w, gn_b, qkv_w, qkv_b, proj_w, proj_b;
} uattn;
/* One entry of input_blocks / output_blocks / middle_block. */
typedef struct ublock {
    int kind;          /* 0: res [+ attn] [+ up]; 1: first conv; 2: downsample */
    int has_attn, up;
    ures res, res2;    /* res2: middle block's second ResBlock */
    uattn attn;
    nb_tvar rs_w, rs_b; /* resample conv (conv_resample) or the first conv */
} ublock;

/* Forward profile (nb_unet_set_profile): an event after every op; the time between an op's
 * start event and its end event goes to its kind. */
enum { PK_CONV3, PK_CONV1, PK_CONV_DOWN, PK_LINEAR, PK_GN, PK_GN_SILU, PK_SILU, PK_ADD, PK_ADD_CH,
       PK_CONCAT, PK_RESAMPLE, PK_ATTN, PK_LAYOUT, PK_TEMB, PK_COUNT };
static const char *const pk_names[PK_COUNT] = {
    "conv3x3", "conv1x1", "conv3x3 s2", "linear", "group_norm", "gn_silu", "silu", "add",
    "add_channel", "concat", "up/downsample", "attention", "layout (reshape/transpose/slice)",
    "timestep_embedding"};
typedef struct uprof {
    int on;
    nb_event **ev;     /* ev[0]: start of the forward; ev[i]: end of op i */
    int *kind;         /* kind of op i (1-based like ev) */
    int n, cap;        /* events recorded in this forward, capacity */
    int64_t calls[PK_COUNT];
    double ms[PK_COUNT];
} uprof;

#define MAXB 64
struct nb_unet {
    nb_unet_config cfg;
    nb_tape *t;
    nb_tvar te0_w, te0_b, te2_w, te2_b, out_gn_w, out_gn_b, out_w, out_b;
    /* every ResBlock's emb_layers.1 weight [cout, emb] and bias, registered consecutively and
     * seen as one [sum cout, emb] / [sum cout] parameter: one GEMM per step instead of one per
     * block (each block then slices its rows) */
    nb_tvar emb_wcat, emb_bcat;
    int emb_rows;
    int n_in, n_out;
    ublock in[MAXB], mid, out[MAXB];
    double flops;
    int n_names, names_cap;
    nb_unet_param_name *names; /* registration order */
    uprof prof;
};

nb_unet_config nb_unet_config_reference(void) {
    nb_unet_config c;
    memset(&c, 0, sizeof c);
    c.image_size = 64;
    c.in_channels = c.out_channels = 3;
    c.model_channels = 64;
    c.n_levels = 4;
    for (int i = 0; i < 4; i++) c.channel_mult[i] = i + 1;
    c.num_res_blocks = 2;
    c.n_attn = 2;
    c.attention_res[0] = 16;
    c.attention_res[1] = 8;
    c.num_head_channels = 32;
    c.conv_resample = 0;
    c.num_groups = 32;
    return c;
}

static int attn_at(const nb_unet_config *c, int level) {
    for (int i = 0; i < c->n_attn; i++)
        if (c->attention_res[i] == (c->image_size >> level)) return 1;
    return 0;
}

static nb_status check_gn(const nb_unet_config *c, int ch, const char *where) {
    if (ch % c->num_groups)
        return nb_error(NB_ERR_INVALID_ARG,
                        "UNet config: %d channels (%s) are not divisible by %d GroupNorm groups", ch,
                        where, c->num_groups);
    return NB_OK;
}

nb_status nb_unet_config_validate(const nb_unet_config *c) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "UNet config: NULL");
    if (c->n_levels < 1 || c->n_levels > NB_UNET_MAX_LEVELS)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: channel_mult needs 1..%d entries, got %d",
                        NB_UNET_MAX_LEVELS, c->n_levels);
    if (c->image_size < 1 || c->image_size > 4096 ||
        c->image_size % (1 << (c->n_levels - 1)))
        return nb_error(NB_ERR_INVALID_ARG,
                        "UNet config: image size %d must be in 1..4096 and divisible by 2^%d "
                        "(one halving per level after the first)",
                        c->image_size, c->n_levels - 1);
    if (c->in_channels < 1 || c->in_channels > 64 || c->out_channels < 1 || c->out_channels > 64)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: in/out channels %d/%d not in 1..64",
                        c->in_channels, c->out_channels);
    if (c->model_channels < 1 || c->model_channels > 4096)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: base channels %d not in 1..4096",
                        c->model_channels);
    if (c->num_res_blocks < 1 || c->num_res_blocks > 8)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: res blocks %d not in 1..8", c->num_res_blocks);
    if (c->num_groups < 1)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: GroupNorm groups %d must be >= 1",
                        c->num_groups);
    if (c->num_head_channels < 1)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: head channels %d must be >= 1",
                        c->num_head_channels);
    if (c->conv_resample != 0 && c->conv_resample != 1)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: conv_resample must be 0 or 1");
    for (int l = 0; l < c->n_levels; l++)
        if (c->channel_mult[l] < 1 || c->channel_mult[l] > 64)
            return nb_error(NB_ERR_INVALID_ARG, "UNet config: channel_mult[%d] = %d not in 1..64", l,
                            c->channel_mult[l]);
    if (c->n_attn < 0 || c->n_attn > NB_UNET_MAX_LEVELS)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config: too many attention resolutions");
    for (int i = 0; i < c->n_attn; i++) {
        int found = 0;
        for (int l = 0; l < c->n_levels; l++) found |= c->attention_res[i] == (c->image_size >> l);
        if (!found) {
            char pyr[128] = "";
            for (int l = 0; l < c->n_levels; l++)
                snprintf(pyr + strlen(pyr), sizeof pyr - strlen(pyr), "%s%d", l ? "," : "",
                         c->image_size >> l);
            return nb_error(NB_ERR_INVALID_ARG,
                            "UNet config: attention resolution %d is not in the pyramid (%s)",
                            c->attention_res[i], pyr);
        }
    }
    /* every normalised channel count: each level's channels and the concatenations on the way up */
    int mc = c->model_channels, chans[4 * MAXB], nch = 0, ch = mc;
    TRY(check_gn(c, ch, "base channels"));
    chans[nch++] = ch;
    for (int l = 0; l < c->n_levels; l++) {
        ch = mc * c->channel_mult[l];
        TRY(check_gn(c, ch, "a level's channels"));
        if (attn_at(c, l) && ch % c->num_head_channels)
            return nb_error(NB_ERR_INVALID_ARG,
                            "UNet config: %d attention channels at resolution %d are not divisible "
                            "by %d head channels",
                            ch, c->image_size >> l, c->num_head_channels);
        for (int r = 0; r < c->num_res_blocks; r++) chans[nch++] = ch;
        if (l != c->n_levels - 1) chans[nch++] = ch;
    }
    if (ch % c->num_head_channels)
        return nb_error(NB_ERR_INVALID_ARG,
                        "UNet config: %d middle-block channels are not divisible by %d head channels",
                        ch, c->num_head_channels);
    for (int l = c->n_levels - 1; l >= 0; l--)
        for (int r = 0; r <= c->num_res_blocks; r++) {
            int ich = chans[--nch];
            TRY(check_gn(c, ch + ich, "an up-path concatenation"));
            ch = mc * c->channel_mult[l];
        }
    return NB_OK;
}

/* ---- registration -------------------------------------------------------------------------- */

typedef struct reg {
    nb_unet *u;
    nb_tape *t;      /* NULL: only count */
    int64_t count;
    /* emb_layers parameters, registered after all the others (build_emb) */
    int n_emb;
    ures *emb_blk[3 * MAXB];
    char emb_pre[3 * MAXB][96];
} reg;

static nb_status param(reg *r, nb_tvar *out, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static nb_status param(reg *r, nb_tvar *out, int ndim, const int64_t *shape, const char *fmt, ...) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    r->count += n;
    if (!r->t) {
        *out = NB_TVAR_NONE;
        return NB_OK;
    }
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    nb_unet *u = r->u;
    if (u->n_names == u->names_cap) {
        int cap = u->names_cap ? 2 * u->names_cap : 256;
        nb_unet_param_name *nn = realloc(u->names, (size_t)cap * sizeof *nn);
        if (!nn) return nb_error(NB_ERR_OUT_OF_MEMORY, "UNet: out of memory");
        u->names = nn, u->names_cap = cap;
    }
    /* conv1d weights [O, C, 1] live on the tape as conv2d weights [O, C, 1, 1] (no reshape per
     * forward); the names list keeps the state_dict's 3-D shape for checkpoints */
    int64_t tshape[4] = {shape[0], ndim > 1 ? shape[1] : 1, ndim > 2 ? shape[2] : 1, 1};
    nb_status s = nb_tape_param(r->t, name, ndim == 3 ? 4 : ndim, ndim == 3 ? tshape : shape, out);
    if (s) return s;
    nb_unet_param_name *e = &u->names[u->n_names++];
    e->id = *out;
    e->ndim = ndim;
    memcpy(e->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(e->name, name, strlen(name) + 1); /* the tape accepted it: < 64 chars */
    return NB_OK;
}

#define P1(dst, a, ...) TRY(param(r, &(dst), 1, (int64_t[]){a}, __VA_ARGS__))
#define P2(dst, a, b, ...) TRY(param(r, &(dst), 2, (int64_t[]){a, b}, __VA_ARGS__))
#define P3(dst, a, b, c, ...) TRY(param(r, &(dst), 3, (int64_t[]){a, b, c}, __VA_ARGS__))
#define P4(dst, a, b, c, d, ...) TRY(param(r, &(dst), 4, (int64_t[]){a, b, c, d}, __VA_ARGS__))

static nb_status reg_res(reg *r, ures *b, int cin, int cout, const char *pre) {
    b->cin = cin, b->cout = cout;
    P1(b->gn1_w, cin, "%s.in_layers.0.weight", pre);
    P1(b->gn1_b, cin, "%s.in_layers.0.bias", pre);
    P4(b->c1_w, cout, cin, 3, 3, "%s.in_layers.2.weight", pre);
    P1(b->c1_b, cout, "%s.in_layers.2.bias", pre);
    /* emb_layers: registered later by build_emb */
    if (r->n_emb == 3 * MAXB) return nb_error(NB_ERR_INVALID_ARG, "UNet config: too many blocks");
    r->emb_blk[r->n_emb] = b;
    snprintf(r->emb_pre[r->n_emb++], sizeof r->emb_pre[0], "%s", pre);
    P1(b->gn2_w, cout, "%s.out_layers.0.weight", pre);
    P1(b->gn2_b, cout, "%s.out_layers.0.bias", pre);
    P4(b->c2_w, cout, cout, 3, 3, "%s.out_layers.3.weight", pre);
    P1(b->c2_b, cout, "%s.out_layers.3.bias", pre);
    b->skip_w = b->skip_b = NB_TVAR_NONE;
    if (cin != cout) {
        P4(b->skip_w, cout, cin, 1, 1, "%s.skip_connection.weight", pre);
        P1(b->skip_b, cout, "%s.skip_connection.bias", pre);
    }
    return NB_OK;
}

static nb_status reg_attn(reg *r, uattn *a, int c, int hc, const char *pre) {
    a->c = c, a->heads = c / hc;
    P1(a->gn_w, c, "%s.norm.weight", pre);
    P1(a->gn_b, c, "%s.norm.bias", pre);
    P3(a->qkv_w, 3 * c, c, 1, "%s.qkv.weight", pre);
    P1(a->qkv_b, 3 * c, "%s.qkv.bias", pre);
    P3(a->proj_w, c, c, 1, "%s.proj_out.weight", pre);
    P1(a->proj_b, c, "%s.proj_out.bias", pre);
    return NB_OK;
}

/* The emb_layers weights of all ResBlocks, then their biases, each run consecutive in the
 * parameter buffer, and the two views over them. */
static nb_status build_emb(nb_unet *u, reg *r) {
    int emb = 4 * u->cfg.model_channels, rows = 0;
    for (int i = 0; i < r->n_emb; i++) {
        ures *b = r->emb_blk[i];
        P2(b->emb_w, b->cout, emb, "%s.emb_layers.1.weight", r->emb_pre[i]);
        b->emb_off = rows;
        rows += b->cout;
    }
    for (int i = 0; i < r->n_emb; i++)
        P1(r->emb_blk[i]->emb_b, r->emb_blk[i]->cout, "%s.emb_layers.1.bias", r->emb_pre[i]);
    u->emb_rows = rows;
    u->emb_wcat = u->emb_bcat = NB_TVAR_NONE;
    if (!r->t || !r->n_emb) return NB_OK;
    TRY(nb_tape_param_view(r->t, "~emb_layers.1.weight (all blocks)", r->emb_blk[0]->emb_w, 2,
                           (int64_t[]){rows, emb}, &u->emb_wcat));
    return nb_tape_param_view(r->t, "~emb_layers.1.bias (all blocks)", r->emb_blk[0]->emb_b, 1,
                              (int64_t[]){rows}, &u->emb_bcat);
}

static nb_status build(nb_unet *u, reg *r) {
    const nb_unet_config *c = &u->cfg;
    int mc = c->model_channels, emb = 4 * mc, hc = c->num_head_channels;
    char pre[96];
    P2(u->te0_w, emb, mc, "time_embed.0.weight");
    P1(u->te0_b, emb, "time_embed.0.bias");
    P2(u->te2_w, emb, emb, "time_embed.2.weight");
    P1(u->te2_b, emb, "time_embed.2.bias");
    int chans[4 * MAXB], nch = 0, ch = mc, k = 0;
    ublock *b = &u->in[k];
    b->kind = 1;
    P4(b->rs_w, mc, c->in_channels, 3, 3, "input_blocks.0.0.weight");
    P1(b->rs_b, mc, "input_blocks.0.0.bias");
    chans[nch++] = ch;
    k++;
    for (int l = 0; l < c->n_levels; l++) {
        for (int i = 0; i < c->num_res_blocks; i++, k++) {
            b = &u->in[k];
            b->kind = 0;
            snprintf(pre, sizeof pre, "input_blocks.%d.0", k);
            TRY(reg_res(r, &b->res, ch, mc * c->channel_mult[l], pre));
            ch = mc * c->channel_mult[l];
            if ((b->has_attn = attn_at(c, l))) {
                snprintf(pre, sizeof pre, "input_blocks.%d.1", k);
                TRY(reg_attn(r, &b->attn, ch, hc, pre));
            }
            chans[nch++] = ch;
        }
        if (l != c->n_levels - 1) {
            b = &u->in[k];
            b->kind = 2;
            b->rs_w = b->rs_b = NB_TVAR_NONE;
            if (c->conv_resample) {
                P4(b->rs_w, ch, ch, 3, 3, "input_blocks.%d.0.op.weight", k);
                P1(b->rs_b, ch, "input_blocks.%d.0.op.bias", k);
            }
            chans[nch++] = ch;
            k++;
        }
    }
    u->n_in = k;
    TRY(reg_res(r, &u->mid.res, ch, ch, "middle_block.0"));
    TRY(reg_attn(r, &u->mid.attn, ch, hc, "middle_block.1"));
    TRY(reg_res(r, &u->mid.res2, ch, ch, "middle_block.2"));
    k = 0;
    for (int l = c->n_levels - 1; l >= 0; l--) {
        for (int i = 0; i <= c->num_res_blocks; i++, k++) {
            b = &u->out[k];
            b->kind = 0;
            int ich = chans[--nch], j = 1;
            snprintf(pre, sizeof pre, "output_blocks.%d.0", k);
            TRY(reg_res(r, &b->res, ch + ich, mc * c->channel_mult[l], pre));
            ch = mc * c->channel_mult[l];
            if ((b->has_attn = attn_at(c, l))) {
                snprintf(pre, sizeof pre, "output_blocks.%d.1", k);
                TRY(reg_attn(r, &b->attn, ch, hc, pre));
                j++;
            }
            b->up = l && i == c->num_res_blocks;
            b->rs_w = b->rs_b = NB_TVAR_NONE;
            if (b->up && c->conv_resample) {
                P4(b->rs_w, ch, ch, 3, 3, "output_blocks.%d.%d.conv.weight", k, j);
                P1(b->rs_b, ch, "output_blocks.%d.%d.conv.bias", k, j);
            }
        }
    }
    u->n_out = k;
    P1(u->out_gn_w, ch, "out.0.weight");
    P1(u->out_gn_b, ch, "out.0.bias");
    P4(u->out_w, c->out_channels, ch, 3, 3, "out.2.weight");
    P1(u->out_b, c->out_channels, "out.2.bias");
    return build_emb(u, r);
}

nb_status nb_unet_param_count(const nb_unet_config *cfg, int64_t *out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_param_count: NULL out");
    TRY(nb_unet_config_validate(cfg));
    nb_unet *u = calloc(1, sizeof *u);
    if (!u) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_unet_param_count: out of memory");
    u->cfg = *cfg;
    reg r = {.u = u, .t = NULL};
    nb_status s = build(u, &r);
    free(u);
    *out = r.count;
    return s;
}

nb_status nb_unet_create(const nb_unet_config *cfg, nb_tape *t, nb_unet **out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_create: NULL tape or out");
    TRY(nb_unet_config_validate(cfg));
    nb_unet *u = calloc(1, sizeof *u);
    if (!u) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_unet_create: out of memory");
    u->cfg = *cfg;
    u->t = t;
    reg r = {.u = u, .t = t};
    nb_status s = build(u, &r);
    if (s) {
        free(u->names);
        free(u);
        return s;
    }
    *out = u;
    return NB_OK;
}

static void prof_release(nb_unet *u) {
    for (int i = 0; i < u->prof.cap; i++)
        if (u->prof.ev[i]) nb_event_destroy(u->prof.ev[i]);
    free(u->prof.ev);
    free(u->prof.kind);
    u->prof.ev = NULL, u->prof.kind = NULL, u->prof.cap = u->prof.n = 0;
}

void nb_unet_free(nb_unet *u) {
    if (u) {
        prof_release(u);
        free(u->names);
    }
    free(u);
}

nb_status nb_unet_params(const nb_unet *u, const nb_unet_param_name **out, int *n) {
    if (!u || !out || !n) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_params: NULL argument");
    *out = u->names;
    *n = u->n_names;
    return NB_OK;
}

nb_status nb_unet_get_config(const nb_unet *u, nb_unet_config *out) {
    if (!u || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_get_config: NULL argument");
    *out = u->cfg;
    return NB_OK;
}

nb_tape *nb_unet_tape(const nb_unet *u) { return u ? u->t : NULL; }

/* ---- init ---------------------------------------------------------------------------------- */

/* Two passes over the layers: pass 0 writes the GroupNorm ones into a host image h of the whole
 * parameter buffer (zeros elsewhere), which nb_tape_write_params stores (one upload on CUDA);
 * pass 1 draws the uniform layers with nb_tape_param_init_uniform (the tape's deterministic
 * generator, on the host; uploaded on CUDA). */
typedef struct initc {
    nb_unet *u;
    float *h;      /* pass 0 */
    int pass;
    uint64_t seed; /* pass 1 */
} initc;

static nb_status init_pair(initc *c, nb_tvar w, nb_tvar b, int64_t fan_in, int zero) {
    if (w == NB_TVAR_NONE || c->pass == 0) return NB_OK;
    float bound = zero ? 0.0f : (float)(1.0 / sqrt((double)fan_in));
    TRY(nb_tape_param_init_uniform(c->u->t, w, bound, c->seed++));
    return nb_tape_param_init_uniform(c->u->t, b, bound, c->seed++);
}

static nb_status init_gn(initc *c, nb_tvar w) {
    if (c->pass != 0) return NB_OK;
    int64_t off, n;
    TRY(nb_tape_param_info(c->u->t, w, &off, &n));
    for (int64_t i = 0; i < n; i++) c->h[off + i] = 1.0f; /* bias stays 0 */
    return NB_OK;
}

static nb_status init_res(initc *c, const ures *b) {
    int mc = c->u->cfg.model_channels;
    TRY(init_gn(c, b->gn1_w));
    TRY(init_pair(c, b->c1_w, b->c1_b, (int64_t)b->cin * 9, 0));
    TRY(init_pair(c, b->emb_w, b->emb_b, 4 * mc, 0));
    TRY(init_gn(c, b->gn2_w));
    TRY(init_pair(c, b->c2_w, b->c2_b, 1, 1));
    return init_pair(c, b->skip_w, b->skip_b, b->cin, 0);
}

static nb_status init_attn(initc *c, const uattn *a) {
    TRY(init_gn(c, a->gn_w));
    TRY(init_pair(c, a->qkv_w, a->qkv_b, a->c, 0));
    return init_pair(c, a->proj_w, a->proj_b, 1, 1);
}

static nb_status init_all(initc *c) {
    nb_unet *u = c->u;
    int mc = u->cfg.model_channels;
    TRY(init_pair(c, u->te0_w, u->te0_b, mc, 0));
    TRY(init_pair(c, u->te2_w, u->te2_b, 4 * mc, 0));
    for (int k = 0; k < u->n_in; k++) {
        ublock *b = &u->in[k];
        int cin = k == 0 ? u->cfg.in_channels : b->kind == 2 ? u->in[k - 1].res.cout : 0;
        if (b->kind == 1 || b->kind == 2) TRY(init_pair(c, b->rs_w, b->rs_b, (int64_t)cin * 9, 0));
        if (b->kind == 0) TRY(init_res(c, &b->res));
        if (b->kind == 0 && b->has_attn) TRY(init_attn(c, &b->attn));
    }
    TRY(init_res(c, &u->mid.res));
    TRY(init_attn(c, &u->mid.attn));
    TRY(init_res(c, &u->mid.res2));
    for (int k = 0; k < u->n_out; k++) {
        ublock *b = &u->out[k];
        TRY(init_res(c, &b->res));
        if (b->has_attn) TRY(init_attn(c, &b->attn));
        TRY(init_pair(c, b->rs_w, b->rs_b, (int64_t)b->res.cout * 9, 0));
    }
    TRY(init_gn(c, u->out_gn_w));
    return init_pair(c, u->out_w, u->out_b, 1, 1);
}

nb_status nb_unet_init(nb_unet *u, uint64_t seed) {
    if (!u) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_init: NULL model");
    float *p;
    int64_t np;
    TRY(nb_tape_params(u->t, &p, &np));
    initc c = {u, calloc((size_t)np, sizeof(float)), 0, seed * 1000003u + 1};
    if (!c.h) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_unet_init: out of host memory");
    nb_status s = init_all(&c);
    if (!s) s = nb_tape_write_params(u->t, c.h, np);
    free(c.h);
    c.pass = 1;
    return s ? s : init_all(&c);
}

/* ---- forward profile ------------------------------------------------------------------------ */

/* Records event i = 0 (kind < 0: the forward's start) or the next op's end event. */
static nb_status prof_record(nb_unet *u, int kind) {
    uprof *p = &u->prof;
    int i = kind < 0 ? 0 : p->n + 1;
    if (i >= p->cap) {
        int cap = p->cap ? 2 * p->cap : 512;
        nb_event **ev = realloc(p->ev, sizeof *ev * (size_t)cap);
        if (ev) p->ev = ev;
        int *k = ev ? realloc(p->kind, sizeof *k * (size_t)cap) : NULL;
        if (!ev || !k) return nb_error(NB_ERR_OUT_OF_MEMORY, "UNet profile: out of memory");
        p->kind = k;
        for (int j = p->cap; j < cap; j++) {
            p->ev[j] = NULL;
            nb_status s = nb_event_create(nb_tape_device(u->t), &p->ev[j]);
            p->cap = j + 1;
            if (s) return s;
        }
    }
    TRY(nb_event_record(p->ev[i], nb_device_stream(nb_tape_device(u->t))));
    p->kind[i] = kind;
    p->n = i;
    return NB_OK;
}

static nb_status prof_op(nb_unet *u, int kind) { return u->prof.on ? prof_record(u, kind) : NB_OK; }

/* Waits for the last event and adds each op's time to its kind. */
static nb_status prof_collect(nb_unet *u) {
    uprof *p = &u->prof;
    if (!p->on || p->n == 0) return NB_OK;
    TRY(nb_event_synchronize(p->ev[p->n]));
    for (int i = 1; i <= p->n; i++) {
        float ms;
        TRY(nb_event_elapsed_ms(p->ev[i - 1], p->ev[i], &ms));
        p->ms[p->kind[i]] += ms;
        p->calls[p->kind[i]]++;
    }
    p->n = 0;
    return NB_OK;
}

nb_status nb_unet_set_profile(nb_unet *u, int on) {
    if (!u) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_set_profile: NULL model");
    u->prof.on = on != 0;
    u->prof.n = 0;
    memset(u->prof.calls, 0, sizeof u->prof.calls);
    memset(u->prof.ms, 0, sizeof u->prof.ms);
    if (!on) prof_release(u);
    return NB_OK;
}

nb_status nb_unet_get_profile(nb_unet *u, nb_unet_prof_entry out[NB_UNET_PROF_KINDS], int *n) {
    if (!u || !out || !n) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_get_profile: NULL argument");
    *n = 0;
    for (int k = 0; k < PK_COUNT; k++)
        if (u->prof.calls[k]) {
            out[*n].op = pk_names[k];
            out[*n].calls = u->prof.calls[k];
            out[*n].ms = u->prof.ms[k];
            (*n)++;
        }
    return NB_OK;
}

/* ---- forward ------------------------------------------------------------------------------- */

/* Runs an op and, when profiling, records its end event under its kind. */
#define OPK(kind, call)                                                                        \
    do {                                                                                       \
        TRY(call);                                                                             \
        TRY(prof_op(u, kind));                                                                 \
    } while (0)

static void count_conv(nb_unet *u, nb_tvar y, int64_t cin, int k) {
    int nd;
    int64_t s[4];
    if (nb_tape_shape(u->t, y, &nd, s) == NB_OK) u->flops += 2.0 * s[0] * s[1] * s[2] * s[3] * cin * k * k;
}

static nb_status conv(nb_unet *u, nb_tvar x, nb_tvar w, nb_tvar b, int stride, int pad, nb_tvar *y) {
    int nd;
    int64_t xs[4], ws[4];
    TRY(nb_tape_shape(u->t, x, &nd, xs));
    TRY(nb_tape_shape(u->t, w, &nd, ws));
    if (nd == 3) { /* conv1d weight [O, C, 1] -> [O, C, 1, 1] */
        ws[3] = 1;
        OPK(PK_LAYOUT, nb_tape_reshape(u->t, w, 4, ws, &w));
    }
    OPK(stride == 2 ? PK_CONV_DOWN : ws[2] == 3 ? PK_CONV3 : PK_CONV1,
        nb_tape_conv2d(u->t, x, w, b, stride, pad, y));
    count_conv(u, *y, xs[1], (int)ws[2]);
    return NB_OK;
}

static nb_status gn_silu(nb_unet *u, nb_tvar x, nb_tvar g, nb_tvar b, nb_tvar *y) {
    OPK(PK_GN_SILU, nb_tape_group_norm_silu(u->t, x, u->cfg.num_groups, g, b, 1e-5f, y));
    return NB_OK;
}

static nb_status res_fwd(nb_unet *u, const ures *b, nb_tvar x, nb_tvar emb_proj, nb_tvar *y) {
    nb_tvar h, e, skip = x;
    TRY(gn_silu(u, x, b->gn1_w, b->gn1_b, &h));
    TRY(conv(u, h, b->c1_w, b->c1_b, 1, 1, &h));
    /* emb_proj: [N, sum cout] from the one stacked linear (forward) */
    OPK(PK_LAYOUT, nb_tape_slice_channels(u->t, emb_proj, b->emb_off, b->cout, &e));
    OPK(PK_ADD_CH, nb_tape_add_channel(u->t, h, e, &h));
    TRY(gn_silu(u, h, b->gn2_w, b->gn2_b, &h));
    TRY(conv(u, h, b->c2_w, b->c2_b, 1, 1, &h));
    if (b->skip_w != NB_TVAR_NONE) TRY(conv(u, x, b->skip_w, b->skip_b, 1, 0, &skip));
    OPK(PK_ADD, nb_tape_add(u->t, skip, h, y));
    return NB_OK;
}

static nb_status attn_fwd(nb_unet *u, const uattn *a, nb_tvar x, nb_tvar *y) {
    nb_tape *t = u->t;
    int nd;
    int64_t s[4];
    TRY(nb_tape_shape(t, x, &nd, s));
    int64_t n = s[0], c = s[1], hw = s[2] * s[3], heads = a->heads, d = c / heads;
    nb_tvar h, qkv, o;
    OPK(PK_GN, nb_tape_group_norm(t, x, u->cfg.num_groups, a->gn_w, a->gn_b, 1e-5f, &h));
    TRY(conv(u, h, a->qkv_w, a->qkv_b, 1, 0, &qkv));
    /* fused, on the legacy order (channel = head * 3d + {q,k,v} * d + i): [n, c, H, W] out */
    OPK(PK_ATTN, nb_tape_qkv_attention(t, qkv, (int)heads, &o));
    u->flops += 4.0 * n * heads * hw * hw * d;
    TRY(conv(u, o, a->proj_w, a->proj_b, 1, 0, &o));
    OPK(PK_ADD, nb_tape_add(t, x, o, y));
    return NB_OK;
}

/* emb: the sinusoidal timestep embedding [N, model_channels] (a tape value). */
static nb_status forward(nb_unet *u, nb_tvar x, nb_tvar emb, const int64_t *s, nb_tvar *out) {
    const nb_unet_config *c = &u->cfg;
    nb_tape *t = u->t;
    int mc = c->model_channels;
    nb_tvar h, hs[4 * MAXB];
    int nh = 0;
    OPK(PK_LINEAR, nb_tape_linear(t, emb, u->te0_w, u->te0_b, &emb));
    OPK(PK_SILU, nb_tape_silu(t, emb, &emb));
    OPK(PK_LINEAR, nb_tape_linear(t, emb, u->te2_w, u->te2_b, &emb));
    u->flops += 2.0 * s[0] * (mc * 4 * mc + 16.0 * mc * mc);
    OPK(PK_SILU, nb_tape_silu(t, emb, &emb)); /* every emb_layers starts with SiLU: shared */
    /* every ResBlock's emb_layers.1 in one GEMM: [N, sum cout] */
    OPK(PK_LINEAR, nb_tape_linear(t, emb, u->emb_wcat, u->emb_bcat, &emb));
    u->flops += 2.0 * s[0] * u->emb_rows * 4 * mc;
    h = x;
    for (int k = 0; k < u->n_in; k++) {
        const ublock *b = &u->in[k];
        if (b->kind == 1) TRY(conv(u, h, b->rs_w, b->rs_b, 1, 1, &h));
        else if (b->kind == 2) {
            if (b->rs_w != NB_TVAR_NONE) TRY(conv(u, h, b->rs_w, b->rs_b, 2, 1, &h));
            else OPK(PK_RESAMPLE, nb_tape_avgpool2x(t, h, &h));
        } else {
            TRY(res_fwd(u, &b->res, h, emb, &h));
            if (b->has_attn) TRY(attn_fwd(u, &b->attn, h, &h));
        }
        hs[nh++] = h;
    }
    TRY(res_fwd(u, &u->mid.res, h, emb, &h));
    TRY(attn_fwd(u, &u->mid.attn, h, &h));
    TRY(res_fwd(u, &u->mid.res2, h, emb, &h));
    for (int k = 0; k < u->n_out; k++) {
        const ublock *b = &u->out[k];
        OPK(PK_CONCAT, nb_tape_concat(t, h, hs[--nh], &h));
        TRY(res_fwd(u, &b->res, h, emb, &h));
        if (b->has_attn) TRY(attn_fwd(u, &b->attn, h, &h));
        if (b->up) {
            OPK(PK_RESAMPLE, nb_tape_upsample2x(t, h, &h));
            if (b->rs_w != NB_TVAR_NONE) TRY(conv(u, h, b->rs_w, b->rs_b, 1, 1, &h));
        }
    }
    TRY(gn_silu(u, h, u->out_gn_w, u->out_gn_b, &h));
    return conv(u, h, u->out_w, u->out_b, 1, 1, out);
}

/* x's shape into s (checked against the config). */
static nb_status input_shape(const nb_unet *u, nb_tvar x, int64_t *s) {
    const nb_unet_config *c = &u->cfg;
    int nd;
    TRY(nb_tape_shape(u->t, x, &nd, s));
    if (nd != 4 || s[1] != c->in_channels || s[2] != c->image_size || s[3] != c->image_size)
        return nb_error(NB_ERR_SHAPE, "UNet forward: input must be [N,%d,%d,%d], got %d dims [%lld,%lld,...]",
                        c->in_channels, c->image_size, c->image_size, nd, (long long)s[0],
                        (long long)(nd > 1 ? s[1] : 0));
    return NB_OK;
}

/* The forward from the embedding on (both entry points); the prediction in f32. */
static nb_status forward_from(nb_unet *u, nb_tvar x, nb_tvar emb, const int64_t *s, nb_tvar *out) {
    nb_status st = forward(u, x, emb, s, out);
    /* the prediction in f32 whatever the storage (bf16 tapes): DDPM's kernels read it */
    if (!st) st = nb_tape_cast(u->t, *out, NB_F32, out);
    nb_status pc = prof_collect(u);
    return st ? st : pc;
}

nb_status nb_unet_forward_emb(nb_unet *u, nb_tvar x, nb_tvar emb, nb_tvar *out) {
    if (!u || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_forward_emb: NULL argument");
    int64_t s[4];
    TRY(input_shape(u, x, s));
    int nd;
    int64_t es[4];
    TRY(nb_tape_shape(u->t, emb, &nd, es));
    if (nd != 2 || es[0] != s[0] || es[1] != u->cfg.model_channels)
        return nb_error(NB_ERR_SHAPE, "nb_unet_forward_emb: the embedding must be [%lld,%d] (N, model_channels), "
                        "got %d dims [%lld,...]", (long long)s[0], u->cfg.model_channels, nd, (long long)es[0]);
    u->flops = 0;
    if (u->prof.on) TRY(prof_record(u, -1));
    return forward_from(u, x, emb, s, out);
}

nb_status nb_unet_forward(nb_unet *u, nb_tvar x, const float *timesteps, nb_tvar *out) {
    if (!u || !timesteps || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_forward: NULL argument");
    int64_t s[4];
    TRY(input_shape(u, x, s));
    u->flops = 0;
    if (u->prof.on) TRY(prof_record(u, -1));
    nb_tvar emb;
    nb_status st = nb_tape_timestep_embedding(u->t, s[0], timesteps, u->cfg.model_channels, 10000.0f, &emb);
    if (!st) st = prof_op(u, PK_TEMB);
    if (st) {
        prof_collect(u);
        return st;
    }
    return forward_from(u, x, emb, s, out);
}

nb_status nb_unet_last_forward_flops(const nb_unet *u, double *out) {
    if (!u || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_last_forward_flops: NULL argument");
    *out = u->flops;
    return NB_OK;
}

/* ---- config <-> strings -------------------------------------------------------------------- */

static void list_str(char *buf, const int *v, int n) {
    buf[0] = 0;
    for (int i = 0; i < n; i++) snprintf(buf + strlen(buf), 64 - strlen(buf), "%s%d", i ? "," : "", v[i]);
}

nb_status nb_unet_config_to_meta(const nb_unet_config *c, const char *keys[NB_UNET_META_N],
                                 char vals[NB_UNET_META_N][64]) {
    if (!c || !keys || !vals) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_config_to_meta: NULL argument");
    static const char *k[NB_UNET_META_N] = {"image_size", "in_channels", "out_channels",
                                            "model_channels", "channel_mult", "num_res_blocks",
                                            "attention_resolutions", "num_head_channels",
                                            "conv_resample", "num_groups"};
    int iv[NB_UNET_META_N] = {c->image_size, c->in_channels, c->out_channels, c->model_channels, 0,
                              c->num_res_blocks, 0, c->num_head_channels, c->conv_resample,
                              c->num_groups};
    for (int i = 0; i < NB_UNET_META_N; i++) {
        keys[i] = k[i];
        snprintf(vals[i], 64, "%d", iv[i]);
    }
    list_str(vals[4], c->channel_mult, c->n_levels);
    list_str(vals[6], c->attention_res, c->n_attn);
    return NB_OK;
}

nb_status nb_unet_parse_int_list(const char *s, int max, int allow_empty, int *vals, int *n) {
    if (!s || !vals || !n) return nb_error(NB_ERR_INVALID_ARG, "int list: NULL argument");
    *n = 0;
    if (!*s) {
        if (allow_empty) return NB_OK;
        return nb_error(NB_ERR_INVALID_ARG, "empty list of integers");
    }
    const char *p = s;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20 || (*end && *end != ','))
            return nb_error(NB_ERR_INVALID_ARG, "'%s' is not a comma-separated list of positive integers", s);
        if (*n == max) return nb_error(NB_ERR_INVALID_ARG, "'%s' has more than %d entries", s, max);
        vals[(*n)++] = (int)v;
        if (!*end) return NB_OK;
        p = end + 1;
    }
}

nb_status nb_unet_config_set(nb_unet_config *c, const char *key, const char *value) {
    if (!c || !key || !value) return nb_error(NB_ERR_INVALID_ARG, "nb_unet_config_set: NULL argument");
    if (!strcmp(key, "channel_mult"))
        return nb_unet_parse_int_list(value, NB_UNET_MAX_LEVELS, 0, c->channel_mult, &c->n_levels);
    if (!strcmp(key, "attention_resolutions"))
        return nb_unet_parse_int_list(value, NB_UNET_MAX_LEVELS, 1, c->attention_res, &c->n_attn);
    int *dst = !strcmp(key, "image_size")          ? &c->image_size
               : !strcmp(key, "in_channels")       ? &c->in_channels
               : !strcmp(key, "out_channels")      ? &c->out_channels
               : !strcmp(key, "model_channels")    ? &c->model_channels
               : !strcmp(key, "num_res_blocks")    ? &c->num_res_blocks
               : !strcmp(key, "num_head_channels") ? &c->num_head_channels
               : !strcmp(key, "conv_resample")     ? &c->conv_resample
               : !strcmp(key, "num_groups")        ? &c->num_groups
                                                   : NULL;
    if (!dst) return nb_error(NB_ERR_NOT_FOUND, "unknown UNet config key '%s'", key);
    char *end;
    long v = strtol(value, &end, 10);
    if (!*value || *end || v < 0 || v > 1 << 20)
        return nb_error(NB_ERR_INVALID_ARG, "UNet config key '%s': '%s' is not an integer", key, value);
    *dst = (int)v;
    return NB_OK;
}
