/* Fused kernels, part 1: the table of fusable op kinds (each one's kernel-language expression)
 * and the generator that turns a fuse spec (fuse.h) into the text of one [Differentiable]
 * function. The text is a pure function of the spec: names are positional (x0.. inputs, t0..
 * nodes, w the reduction weight), so the same structure gives the same bytes and the module
 * layer's disk cache hits in the next process.
 *
 * For silu(add_channel(x0, x1)) followed by mse against x2 the text is
 *
 *   // nabla fused kernel: add_channel+silu+mse
 *   // x0 [full], x1 [channel], x2 [full]; reduction: w * term, summed (w = 1/n: the mean)
 *   [Differentiable]
 *   float nb_fused(float x0, float x1, float x2, float w)
 *   {
 *       float t0 = x0 + x1; // add_channel
 *       float t1 = t0 / (1.0 + exp(-t0)); // silu
 *       float t2 = (t1 - x2) * (t1 - x2); // mse
 *       return w * t2;
 *   }
 *
 * How a reduction runs (fuse_kernel.c): its forward is the gradient of w summed over every
 * thread (w a single value broadcast to all of them: the call layer's per-block sums), its
 * backward the gradients of the inputs with w = 1/n. */
#include <stdio.h>
#include <string.h>

#include "graph/fuse.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "nabla/alloc.h"

/* One fusable op kind. expr: the per-element value with $0, $1 the operands' names (each a
 * plain identifier, so a repeated $0 costs nothing: the compiler reads a register twice). A
 * reducing kind's expr is its per-element term; the function returns w * term. The expressions
 * follow the CPU rows' arithmetic (tape_ops_basic.c): silu is v / (1 + exp(-v)) there too. */
typedef struct fuse_rule {
    int kind;
    int nin;
    int reduces;
    const char *expr;
} fuse_rule;

static const fuse_rule rules[] = {
    {NB_TOP_SILU, 1, 0, "$0 / (1.0 + exp(-$0))"},
    {NB_TOP_ADD, 2, 0, "$0 + $1"},
    {NB_TOP_ADD_CHANNEL, 2, 0, "$0 + $1"}, /* $1 is a channel input, broadcast by its binding */
    {NB_TOP_CAST, 1, 0, "$0"},             /* to f32 only (exact); bf16 rounding does not fuse */
    {NB_TOP_MSE, 2, 1, "($0 - $1) * ($0 - $1)"},
    /* relu as its CPU row: NaN passes (x * 0), the derivative is 1 only where x > 0 */
    {NB_TOP_RELU, 1, 0, "$0 > 0.0 ? $0 : ($0 < 0.0 ? 0.0 : $0 * 0.0)"},
};

static const fuse_rule *rule_of(int kind) {
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].kind == kind) return &rules[i];
    return NULL;
}

int nb_fuse_kind_fusable(int kind) { return rule_of(kind) != NULL; }

int nb_fuse_kind_reduces(int kind) {
    const fuse_rule *r = rule_of(kind);
    return r && r->reduces;
}

int nb_fuse_add_input(nb_fuse_spec *s, nb_fuse_in_kind kind) {
    if (!s) {
        nb_error(NB_ERR_INVALID_ARG, "nb_fuse_add_input: spec is NULL");
        return -1;
    }
    if (s->n_nodes > 0) {
        nb_error(NB_ERR_INVALID_ARG, "nb_fuse_add_input: inputs come before the first node");
        return -1;
    }
    if (s->n_in >= NB_FUSE_MAX_IN) {
        nb_error(NB_ERR_UNSUPPORTED, "nb_fuse_add_input: a fused kernel takes at most %d inputs",
                 NB_FUSE_MAX_IN);
        return -1;
    }
    s->in_kind[s->n_in] = kind;
    return s->n_in++;
}

int nb_fuse_add_node(nb_fuse_spec *s, int kind, int nin, const int *in) {
    if (!s || (nin > 0 && !in) || nin < 0 || nin > NB_FUSE_MAX_IN) {
        nb_error(NB_ERR_INVALID_ARG, "nb_fuse_add_node: spec or operands missing (nin %d)", nin);
        return -1;
    }
    if (s->n_nodes >= NB_FUSE_MAX_NODES) {
        nb_error(NB_ERR_UNSUPPORTED, "nb_fuse_add_node: a fused kernel holds at most %d ops",
                 NB_FUSE_MAX_NODES);
        return -1;
    }
    nb_fuse_node *n = &s->node[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->nin = nin;
    for (int i = 0; i < nin; i++) n->in[i] = in[i];
    if (kind == NB_TOP_CAST) n->ip[0] = NB_F32;
    return s->n_in + s->n_nodes++;
}

int nb_fuse_add_call(nb_fuse_spec *s, const nb_fuse_call *c, int nin, const int *in) {
    if (!s || !c || !c->f || c->nparams < 0 || c->nparams > NB_FUSE_MAX_PARAMS) {
        nb_error(NB_ERR_INVALID_ARG, "nb_fuse_add_call: spec or call missing, or %d parameters",
                 c ? c->nparams : -1);
        return -1;
    }
    if (s->n_calls >= NB_FUSE_MAX_CALLS) {
        nb_error(NB_ERR_UNSUPPORTED, "nb_fuse_add_call: a fused kernel calls at most %d functions",
                 NB_FUSE_MAX_CALLS);
        return -1;
    }
    int o = nb_fuse_add_node(s, NB_TOP_CALL, nin, in);
    if (o < 0) return -1;
    s->call[s->n_calls] = *c;
    s->node[s->n_nodes - 1].call = s->n_calls++;
    return o;
}

int nb_fuse_func_inlinable(nb_func *f, int nparams) {
    nb_leaf_info li;
    if (!f || nb_func_overload_count(f) != 1 || !nb_func_is_differentiable(f, 0) || nb_func_is_kernel(f, 0) ||
        nb_func_is_host(f, 0) || nparams > NB_FUSE_MAX_PARAMS || nparams > nb_func_param_count(f, 0) ||
        nb_func_leaf_count(f, 0) != nb_func_param_count(f, 0))
        return 0;
    if (nb_func_result(f, 0, &li) != 1 || li.value_rank != 0 || li.dtype != NB_F32 || li.is_tensor) return 0;
    for (int p = 0; p < nparams; p++)
        if (nb_func_leaf(f, 0, p, &li) || li.param != p || li.dir != NB_ARG_IN || li.is_tensor || li.value_rank != 0 ||
            li.dtype != NB_F32)
            return 0;
    return 1;
}

/* The op name of node j for messages ("node 2 (silu)"). */
static const char *kname(int kind) {
    const char *n = nb_tape_op_name(kind);
    return n ? n : "?";
}

/* Node j, a CALL: its entry, the function inlinable, its operands full-shape values defined
 * before it, each used by a parameter. */
static nb_status check_call(const nb_fuse_spec *s, int j) {
    const char *fn = "fused kernel";
    const nb_fuse_node *n = &s->node[j];
    if (n->call < 0 || n->call >= s->n_calls)
        return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (call) has no function entry", fn, j);
    const nb_fuse_call *c = &s->call[n->call];
    if (!nb_fuse_func_inlinable(c->f, c->nparams))
        return nb_error(NB_ERR_UNSUPPORTED, "%s: node %d (call %s) cannot be inlined (one overload, "
                        "[Differentiable], float scalar parameters and result)", fn, j, c->f ? nb_func_name(c->f) : "NULL");
    int seen[NB_FUSE_MAX_IN] = {0};
    for (int p = 0; p < c->nparams; p++) {
        if (c->arg[p] >= n->nin)
            return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (call %s) parameter %d takes operand %d of %d", fn, j,
                            nb_func_name(c->f), p, c->arg[p], n->nin);
        if (c->arg[p] >= 0) seen[c->arg[p]] = 1;
    }
    for (int k = 0; k < n->nin; k++) {
        int o = n->in[k];
        if (o < 0 || o >= s->n_in + j)
            return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (call) operand %d is %d: not an input or an earlier node",
                            fn, j, k, o);
        if (o < s->n_in && s->in_kind[o] == NB_FUSE_CHANNEL)
            return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (call) operand %d must be a full-shape value", fn, j, k);
        if (!seen[k])
            return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (call %s) operand %d feeds no parameter", fn, j,
                            nb_func_name(c->f), k);
    }
    return NB_OK;
}

nb_status nb_fuse_spec_check(const nb_fuse_spec *s) {
    const char *fn = "fused kernel";
    if (!s) return nb_error(NB_ERR_INVALID_ARG, "%s: spec is NULL", fn);
    if (s->n_in < 1 || s->n_in > NB_FUSE_MAX_IN)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d inputs (1 .. %d)", fn, s->n_in, NB_FUSE_MAX_IN);
    if (s->n_nodes < 1 || s->n_nodes > NB_FUSE_MAX_NODES)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d ops (1 .. %d)", fn, s->n_nodes, NB_FUSE_MAX_NODES);
    int full = 0;
    for (int i = 0; i < s->n_in; i++) {
        if (s->in_kind[i] != NB_FUSE_FULL && s->in_kind[i] != NB_FUSE_CHANNEL)
            return nb_error(NB_ERR_INVALID_ARG, "%s: input %d has unknown kind %d", fn, i, (int)s->in_kind[i]);
        full |= s->in_kind[i] == NB_FUSE_FULL;
    }
    if (!full)
        return nb_error(NB_ERR_INVALID_ARG, "%s: no input has the kernel's full shape (only per-channel inputs)", fn);
    int used[NB_FUSE_MAX_IN + NB_FUSE_MAX_NODES] = {0};
    for (int j = 0; j < s->n_nodes; j++) {
        const nb_fuse_node *n = &s->node[j];
        const fuse_rule *r = rule_of(n->kind);
        if (n->kind == NB_TOP_CALL) {
            NB_TRY(check_call(s, j));
            for (int k = 0; k < n->nin; k++) used[n->in[k]] = 1;
            continue;
        }
        if (!r)
            return nb_error(NB_ERR_UNSUPPORTED, "%s: node %d (%s) is not an op that fuses", fn, j,
                            n->kind >= 0 && n->kind < NB_TOP_COUNT ? kname(n->kind) : "unknown kind");
        if (n->nin != r->nin)
            return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (%s) has %d operands, the op takes %d", fn, j,
                            kname(n->kind), n->nin, r->nin);
        if (r->reduces && j != s->n_nodes - 1)
            return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (%s) reduces to one value: only the last op may", fn,
                            j, kname(n->kind));
        if (n->kind == NB_TOP_CAST && n->ip[0] != NB_F32)
            return nb_error(NB_ERR_UNSUPPORTED, "%s: node %d (cast) to %s rounds; only casts to f32 fuse", fn, j,
                            nb_dtype_name((nb_dtype)n->ip[0]));
        for (int k = 0; k < n->nin; k++) {
            int o = n->in[k];
            if (o < 0 || o >= s->n_in + j)
                return nb_error(NB_ERR_INVALID_ARG,
                                "%s: node %d (%s) operand %d is %d: not an input or an earlier node", fn, j,
                                kname(n->kind), k, o);
            int chan = o < s->n_in && s->in_kind[o] == NB_FUSE_CHANNEL;
            int want_chan = n->kind == NB_TOP_ADD_CHANNEL && k == 1;
            if (chan != want_chan)
                return nb_error(NB_ERR_INVALID_ARG, "%s: node %d (%s) operand %d must be %s", fn, j,
                                kname(n->kind), k, want_chan ? "a per-channel input" : "a full-shape value");
            used[o] = 1;
        }
    }
    for (int i = 0; i < s->n_in + s->n_nodes - 1; i++)
        if (!used[i])
            return i < s->n_in ? nb_error(NB_ERR_INVALID_ARG, "%s: input %d is not used", fn, i)
                               : nb_error(NB_ERR_INVALID_ARG, "%s: the result of node %d (%s) is not used", fn,
                                          i - s->n_in, kname(s->node[i - s->n_in].kind));
    return NB_OK;
}

/* Appends operand o's name (x<i> or t<j>). */
static void operand(nb_strbuf *b, const nb_fuse_spec *s, int o) {
    if (o < s->n_in) nb_strbuf_printf(b, "x%d", o);
    else nb_strbuf_printf(b, "t%d", o - s->n_in);
}

const char *nb_fuse_describe(const nb_fuse_spec *s, char *buf, size_t cap) {
    if (!buf || !cap) return "";
    buf[0] = 0;
    size_t len = 0;
    for (int j = 0; s && j < s->n_nodes && len < cap; j++) {
        const nb_fuse_node *n = &s->node[j];
        int w = n->kind == NB_TOP_CALL && n->call >= 0 && n->call < s->n_calls
                    ? snprintf(buf + len, cap - len, "%scall(%s)", j ? "+" : "", nb_func_name(s->call[n->call].f))
                    : snprintf(buf + len, cap - len, "%s%s", j ? "+" : "", kname(n->kind));
        if (w < 0) break;
        len += (size_t)w;
    }
    return buf;
}

void nb_fuse_module_stem(const char *path, char *stem, size_t cap) {
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path ? path : "";
    const char *dot = strrchr(base, '.');
    size_t n = dot ? (size_t)(dot - base) : strlen(base);
    snprintf(stem, cap, "%.*s", (int)n, base);
}

void nb_fuse_module_dir(const char *path, char *dir, size_t cap) {
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!slash) snprintf(dir, cap, ".");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

nb_status nb_fuse_codegen(const nb_fuse_spec *s, const char *name, char **text) {
    if (!text) return nb_error(NB_ERR_INVALID_ARG, "nb_fuse_codegen: text is NULL");
    *text = NULL;
    if (!name || !*name) return nb_error(NB_ERR_INVALID_ARG, "nb_fuse_codegen: no function name");
    NB_TRY(nb_fuse_spec_check(s));
    int reduces = nb_fuse_kind_reduces(s->node[s->n_nodes - 1].kind);
    char desc[512];
    nb_strbuf b;
    nb_strbuf_init(&b);
    nb_strbuf_printf(&b, "// nabla fused kernel: %s\n// ", nb_fuse_describe(s, desc, sizeof desc));
    for (int i = 0; i < s->n_in; i++)
        nb_strbuf_printf(&b, "%sx%d [%s]", i ? ", " : "", i, s->in_kind[i] == NB_FUSE_CHANNEL ? "channel" : "full");
    if (reduces) nb_strbuf_append(&b, "; reduction: w * term, summed (w = 1/n: the mean)");
    nb_strbuf_append(&b, "\n");
    /* the modules of inlined functions, each once: imported by name (a file), or their text */
    for (int i = 0; i < s->n_calls; i++) {
        nb_module *m = nb_func_module(s->call[i].f);
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= nb_func_module(s->call[j].f) == m;
        if (dup) continue;
        const char *mtext = nb_module_source(m), *path = nb_module_path(m);
        if (mtext) {
            nb_strbuf_printf(&b, "// ---- the module of %s (%s), inlined ----\n%s\n// ----\n", nb_func_name(s->call[i].f),
                             path, mtext);
        } else {
            char stem[256];
            nb_fuse_module_stem(path, stem, sizeof stem);
            nb_strbuf_printf(&b, "import \"%s\"; // %s\n", stem, path);
        }
    }
    nb_strbuf_printf(&b, "[Differentiable]\nfloat %s(", name);
    for (int i = 0; i < s->n_in; i++) nb_strbuf_printf(&b, "%sfloat x%d", i ? ", " : "", i);
    if (reduces) nb_strbuf_append(&b, ", float w");
    nb_strbuf_append(&b, ")\n{\n");
    for (int j = 0; j < s->n_nodes; j++) {
        const nb_fuse_node *n = &s->node[j];
        nb_strbuf_printf(&b, "    float t%d = ", j);
        if (n->kind == NB_TOP_CALL) {
            const nb_fuse_call *c = &s->call[n->call];
            nb_strbuf_printf(&b, "%s(", nb_func_name(c->f));
            for (int p = 0; p < c->nparams; p++) {
                if (p) nb_strbuf_append(&b, ", ");
                if (c->arg[p] >= 0) {
                    operand(&b, s, n->in[c->arg[p]]);
                } else {
                    char lit[64];
                    snprintf(lit, sizeof lit, "%.9g", c->scalar[p]);
                    nb_strbuf_printf(&b, "%s%s", lit, strpbrk(lit, ".eEni") ? "" : ".0");
                }
            }
            nb_strbuf_printf(&b, "); // call\n");
            continue;
        }
        for (const char *p = rule_of(n->kind)->expr; *p; p++) {
            if (p[0] == '$' && p[1] >= '0' && p[1] < '0' + n->nin) {
                operand(&b, s, n->in[p[1] - '0']);
                p++;
            } else {
                nb_strbuf_append_char(&b, *p);
            }
        }
        nb_strbuf_printf(&b, "; // %s\n", kname(n->kind));
    }
    if (reduces) nb_strbuf_printf(&b, "    return w * t%d;\n}\n", s->n_nodes - 1);
    else nb_strbuf_printf(&b, "    return t%d;\n}\n", s->n_nodes - 1);
    if (!nb_strbuf_ok(&b)) {
        nb_strbuf_free(&b);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_fuse_codegen: out of host memory");
    }
    *text = nb_strbuf_take(&b, NULL);
    return *text ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "nb_fuse_codegen: out of host memory");
}

void nb_fuse_free_text(char *text) {
    if (text) nb_free(text, strlen(text) + 1);
}
