/* Binding a call's arguments to a function's parameters: overload choice, call shapes, the
 * broadcast into the kernel shape (with nb_call_map placements), strides, and the nb_call_sig.
 *
 * Vocabulary (DESIGN.md, "Calling a function over arrays"):
 *   value shape  the dims of one parameter value: float -> [], float3 -> [3], float3x4 -> [3,4]
 *   call shape   an argument's leading dims, those beyond the value shape
 *   kernel shape the broadcast of every call shape; f runs once per kernel index
 * Each ARRAY leaf's call dims are placed into the kernel dims (right-aligned, or where the map
 * says); a call dim of extent 1, and every kernel dim the leaf does not have, gets stride 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "call/call_internal.h"
#include "core/layout.h"
#include "nabla/alloc.h"

/* ---- dtype categories ------------------------------------------------------------------------ */

typedef enum { CAT_FLOAT, CAT_INT, CAT_BOOL } dcat;

static dcat cat_of(nb_dtype d) {
    if (nb_dtype_is_float(d)) return CAT_FLOAT;
    if (d == NB_BOOL) return CAT_BOOL;
    return CAT_INT;
}

static const char *cat_name(dcat c) {
    return c == CAT_FLOAT ? "floating-point" : c == CAT_INT ? "integer" : "bool";
}

static const char *cat_article(dcat c) { return c == CAT_INT ? "an" : "a"; }

/* The language's name of a leaf scalar dtype. */
static const char *lang_scalar(nb_dtype d) {
    switch (d) {
    case NB_F32: return "float";
    case NB_F64: return "double";
    case NB_F16: return "half";
    case NB_I32: return "int";
    case NB_U32: return "uint";
    case NB_I64: return "int64_t";
    case NB_BOOL: return "bool";
    default: return nb_dtype_name(d);
    }
}

/* ---- messages -------------------------------------------------------------------------------- */

const char *nb_call_fname(const nb_call *c) {
    if (c->f->infos && c->overload >= 0 && c->overload < c->f->count)
        return c->f->infos[c->overload].name;
    return c->f->name;
}

/* The written type of parameter p, cut out of the signature "float f(in float3 a, out S s)". */
static const char *param_type(const nb_fn_info *in, int p, char *buf, size_t cap) {
    buf[0] = '\0';
    const char *s = strchr(in->signature ? in->signature : "", '(');
    if (!s) return buf;
    s++;
    for (int k = 0; *s && k <= p; k++) {
        const char *start = s;
        int depth = 0;
        while (*s && !(depth == 0 && (*s == ',' || *s == ')'))) {
            if (*s == '<' || *s == '(' || *s == '[') depth++;
            if (*s == '>' || *s == ')' || *s == ']') depth--;
            s++;
        }
        if (k == p) {
            /* start..s is "[in|out|inout] [no_diff] TYPE NAME [= default]" */
            char piece[256];
            size_t n = (size_t)(s - start) < sizeof piece - 1 ? (size_t)(s - start) : sizeof piece - 1;
            memcpy(piece, start, n);
            piece[n] = '\0';
            char *eq = strchr(piece, '=');
            if (eq) *eq = '\0';
            char *w = piece;
            for (;;) {
                while (*w == ' ') w++;
                if (!strncmp(w, "inout ", 6)) w += 6;
                else if (!strncmp(w, "in ", 3)) w += 3;
                else if (!strncmp(w, "out ", 4)) w += 4;
                else if (!strncmp(w, "no_diff ", 8)) w += 8;
                else break;
            }
            size_t len = strlen(w);
            while (len && w[len - 1] == ' ') w[--len] = '\0';
            char *name = strrchr(w, ' ');
            if (!name) {
                snprintf(buf, cap, "%s", w);
                return buf;
            }
            *name++ = '\0';
            char *dims = strchr(name, '['); /* C-style "float a[4]" */
            snprintf(buf, cap, "%s%s", w, dims ? dims : "");
            return buf;
        }
        if (*s == ',') s++;
    }
    return buf;
}

/* "float3x4" for a whole parameter (from the signature), else built from dtype and value shape. */
static const char *leaf_type(const nb_fn_info *in, const nb_fn_leaf *l, char *buf, size_t cap) {
    if (l->param >= 0 && !strchr(l->path, '.')) {
        param_type(in, l->param, buf, cap);
        if (buf[0]) return buf;
    }
    const char *sc = lang_scalar(l->scalar);
    if (l->kind == NB_LEAF_TENSOR)
        snprintf(buf, cap, "%sTensor<%s,%d>", l->diff_tensor ? "Diff" : "", sc, l->tensor_rank);
    else if (l->value_rank == 0)
        snprintf(buf, cap, "%s", sc);
    else if (l->value_rank == 1 && l->value_shape[0] >= 2 && l->value_shape[0] <= 4)
        snprintf(buf, cap, "%s%lld", sc, l->value_shape[0]);
    else {
        int n = snprintf(buf, cap, "%s", sc);
        for (int i = 0; i < l->value_rank && n > 0 && (size_t)n < cap; i++)
            n += snprintf(buf + n, cap - (size_t)n, "[%lld]", l->value_shape[i]);
    }
    return buf;
}

static const char *shape_s(int n, const int64_t *s, char *buf, size_t cap) {
    return nb_shape_str(n, s, buf, cap);
}

static const char *llshape_s(int n, const long long *s, char *buf, size_t cap) {
    int64_t t[NB_MAX_DIMS] = {0};
    if (n > NB_MAX_DIMS) n = NB_MAX_DIMS;
    for (int i = 0; i < n; i++) t[i] = s[i];
    return nb_shape_str(n, t, buf, cap);
}

static const char *gen_name(nb_generator_kind k);

/* The argument as the user gave it: "f32[4,3]" (tensor or host value). */
static const char *arg_desc(const nb_call_arg_rec *a, char *buf, size_t cap) {
    char sh[160];
    if (a->kind == NB_ARGK_TENSOR)
        snprintf(buf, cap, "%s%s", nb_dtype_name(nb_tensor_dtype(a->tensor)),
                 nb_tensor_ndim(a->tensor)
                     ? shape_s(nb_tensor_ndim(a->tensor), nb_tensor_shape(a->tensor), sh, sizeof sh)
                     : "");
    else if (a->kind == NB_ARGK_VALUE)
        snprintf(buf, cap, "%s%s", nb_dtype_name(a->dtype),
                 a->ndim ? shape_s(a->ndim, a->shape, sh, sizeof sh) : "");
    else if (a->kind == NB_ARGK_GEN)
        snprintf(buf, cap, "%s", gen_name(a->gen.kind));
    else
        snprintf(buf, cap, "(allocated)");
    return buf;
}

/* ---- per-leaf binding ------------------------------------------------------------------------ */

static int param_is_struct(const nb_fn_info *in, int p) {
    int a = in->param_first_leaf[p], b = in->param_first_leaf[p + 1];
    return b - a != 1 || strcmp(in->leaves[a].path, in->param_names[p]) != 0;
}

static void list_params(const nb_fn_info *in, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < in->nparams && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", in->param_names[i]);
    if (!in->nparams) snprintf(buf, cap, "none");
}

static void list_results(const nb_fn_info *in, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < in->nresults && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", k ? ", " : "", in->results[k].path);
}

static void list_fields(const nb_fn_info *in, int p, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int j = in->param_first_leaf[p]; j < in->param_first_leaf[p + 1] && n < cap; j++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", j > in->param_first_leaf[p] ? ", " : "",
                              in->leaves[j].path);
}

/* Which parameter / leaf range an argument record addresses. */
static nb_status resolve_target(const nb_call *c, const nb_fn_info *in, const nb_call_arg_rec *a,
                                int *first, int *last, int *param) {
    char lst[512];
    if (a->index >= 0) {
        if (a->index >= in->nparams) {
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: too many arguments: argument %d given but %s takes %d", in->name,
                            a->index, in->signature, in->nparams);
        }
        *param = a->index;
    } else {
        *param = -1;
        for (int p = 0; p < in->nparams; p++)
            if (!strcmp(in->param_names[p], a->name)) *param = p;
        if (*param < 0) {
            for (int j = 0; j < in->nleaves; j++)
                if (!strcmp(in->leaves[j].path, a->name)) {
                    *param = in->leaves[j].param;
                    *first = j;
                    *last = j + 1;
                    return NB_OK;
                }
            list_params(in, lst, sizeof lst);
            return nb_error(NB_ERR_NOT_FOUND, "%s: no parameter named '%s' in %s (parameters: %s)",
                            in->name, a->name, in->signature, lst);
        }
    }
    int p = *param;
    *first = in->param_first_leaf[p];
    *last = in->param_first_leaf[p + 1];
    if (param_is_struct(in, p) && a->kind != NB_ARGK_NONE) {
        list_fields(in, p, lst, sizeof lst);
        char ty[128];
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: parameter '%s' is a struct (%s): bind its fields one by one by name "
                        "(%s)",
                        in->name, in->param_names[p], param_type(in, p, ty, sizeof ty), lst);
    }
    (void)c;
    return NB_OK;
}

/* Formatting happens only on the error paths below (the hot path formats nothing). */
static nb_status check_dtype(const nb_fn_info *in, const nb_fn_leaf *l, nb_dtype have, int nd,
                             const int64_t *shape, int dir) {
    dcat want = cat_of(l->scalar), got = cat_of(have);
    int ok = dir == 0 ? (want == got || (want == CAT_FLOAT && got == CAT_INT)) : want == got;
    if (ok) return NB_OK;
    char ty[128], what[200], sh[160];
    snprintf(what, sizeof what, "%s%s", nb_dtype_name(have), nd ? shape_s(nd, shape, sh, sizeof sh) : "");
    return nb_error(NB_ERR_DTYPE,
                    "%s: argument '%s' is %s but parameter '%s' is %s: %s data cannot %s %s %s "
                    "parameter without losing meaning",
                    in->name, l->path, what, l->path, leaf_type(in, l, ty, sizeof ty),
                    cat_name(got), dir == 0 ? "feed" : "receive the values of", cat_article(want),
                    cat_name(want));
}

/* Checks that dims [nd - vr, nd) of shape equal the leaf's value shape. */
static nb_status check_value_dims(const nb_fn_info *in, const nb_fn_leaf *l, int nd,
                                  const int64_t *shape) {
    int vr = l->value_rank, ok = nd >= vr;
    for (int i = 0; ok && i < vr; i++) ok = shape[nd - vr + i] == l->value_shape[i];
    if (ok) return NB_OK;
    char ty[128], vs[160], what[160];
    shape_s(nd, shape, what, sizeof what);
    llshape_s(vr, l->value_shape, vs, sizeof vs);
    if (vr == 0) return NB_OK;
    return nb_error(NB_ERR_SHAPE,
                    "%s: argument '%s' has shape %s but parameter '%s' is %s which needs at least "
                    "%d dim%s ending in %s",
                    in->name, l->path, what, l->path, leaf_type(in, l, ty, sizeof ty), vr,
                    vr == 1 ? "" : "s", vs);
}

static const nb_call_map_rec *find_map(const nb_call *c, const nb_fn_info *in, int p) {
    for (int i = 0; i < c->nmaps; i++) {
        const nb_call_map_rec *m = &c->maps[i];
        if (m->index == p || (m->index < 0 && !strcmp(m->name, in->param_names[p]))) return m;
    }
    return NULL;
}

static nb_status bind_leaf(nb_call *c, const nb_fn_info *in, int j, int ai, int *score) {
    const nb_fn_leaf *l = &in->leaves[j];
    const nb_call_arg_rec *a = &c->args[ai];
    nb_leaf_bind *b = &c->leaves[j];
    nb_device *dev = c->f->m->dev;
    char what[200], sh[160], ty[128];
    memset(b, 0, sizeof *b);
    b->arg = ai;
    b->dir = l->dir;
    b->value_rank = l->value_rank;

    if (a->kind == NB_ARGK_TENSOR && nb_tensor_device(a->tensor) != dev)
        return nb_error(NB_ERR_DEVICE, "%s: argument '%s' is on %s but the module runs on %s",
                        in->name, l->path, nb_device_name(nb_tensor_device(a->tensor)),
                        nb_device_name(dev));
    if (a->kind == NB_ARGK_VALUE && l->dir != 0)
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: parameter '%s' is %s, so its argument must be a tensor to write to "
                        "(got a host value %s)",
                        in->name, l->path, l->dir == 1 ? "out" : "inout",
                        arg_desc(a, what, sizeof what));
    if (a->kind == NB_ARGK_ALLOC && l->dir != 1)
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: only out parameters can be allocated by the call; '%s' is %s",
                        in->name, l->path, l->dir == 0 ? "an input" : "inout");

    const nb_call_map_rec *map = find_map(c, in, l->param);

    if (l->kind == NB_LEAF_TENSOR) {
        if (map)
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: parameter '%s' is %s: a whole array, which cannot be mapped",
                            in->name, l->path, leaf_type(in, l, ty, sizeof ty));
        if (a->kind == NB_ARGK_ALLOC)
            return nb_error(NB_ERR_INVALID_ARG, "%s: parameter '%s' is %s and needs a tensor",
                            in->name, l->path, leaf_type(in, l, ty, sizeof ty));
        /* A whole array: its rank and dtype must be the tensor type's (a host value is uploaded
         * in that dtype when its data converts without losing meaning). */
        int nd = a->kind == NB_ARGK_TENSOR ? nb_tensor_ndim(a->tensor) : a->ndim;
        nb_dtype have = a->kind == NB_ARGK_TENSOR ? nb_tensor_dtype(a->tensor) : a->dtype;
        int dtype_ok = a->kind == NB_ARGK_TENSOR ? have == l->scalar
                                                 : (cat_of(have) == cat_of(l->scalar) ||
                                                    (cat_of(l->scalar) == CAT_FLOAT && cat_of(have) == CAT_INT));
        /* Elements of vector / matrix type (Tensor<float3, 1>, RWStructuredBuffer<float3>): the
         * array has the element's value shape as its last dims, stored contiguously. */
        int vr = l->value_rank, tr = l->tensor_rank, shape_ok = nd == tr + vr, contiguous = 1;
        const int64_t *ash = a->kind == NB_ARGK_TENSOR ? nb_tensor_shape(a->tensor) : a->shape;
        for (int k = 0; shape_ok && k < vr; k++) shape_ok = ash[tr + k] == l->value_shape[k];
        if (shape_ok && vr && a->kind == NB_ARGK_TENSOR) {
            const int64_t *ast = nb_tensor_strides(a->tensor);
            int64_t want = (int64_t)nb_dtype_size(have);
            for (int k = vr - 1; k >= 0; k--) {
                if (ast[tr + k] != want && l->value_shape[k] > 1) contiguous = 0;
                want *= l->value_shape[k];
            }
        }
        if (!shape_ok || !dtype_ok || (vr && l->diff_tensor)) {
            char vs[96] = "";
            for (int k = 0, o = 0; k < vr && o < (int)sizeof vs - 24; k++)
                o += snprintf(vs + o, sizeof vs - (size_t)o, "%s%lld", k ? ", " : " + value shape [", l->value_shape[k]);
            if (vr) strcat(vs, "]");
            return nb_error(vr && l->diff_tensor ? NB_ERR_UNSUPPORTED : !shape_ok ? NB_ERR_SHAPE : NB_ERR_DTYPE,
                            "%s: argument '%s' is %s but parameter '%s' is %s (needs %s with %d "
                            "dim%s%s%s)",
                            in->name, l->path, arg_desc(a, what, sizeof what), l->path,
                            leaf_type(in, l, ty, sizeof ty), nb_dtype_name(l->scalar),
                            tr, tr == 1 ? "" : "s", vs,
                            vr && l->diff_tensor ? "; DiffTensors of vectors cannot be bound yet" : "");
        }
        if (!contiguous)
            return nb_error(NB_ERR_LAYOUT, "%s: argument '%s' binds %s: its last %d dim%s (the element) must be "
                            "contiguous", in->name, l->path, leaf_type(in, l, ty, sizeof ty), vr, vr == 1 ? "" : "s");
        if (l->pointer && shape_ok && a->kind == NB_ARGK_TENSOR && nb_tensor_shape(a->tensor)[0] > 1) {
            /* a pointer parameter gets the data address: the whole array must be contiguous */
            int64_t el = (int64_t)nb_dtype_size(have);
            for (int k = 0; k < vr; k++) el *= l->value_shape[k];
            if (nb_tensor_strides(a->tensor)[0] != el)
                return nb_error(NB_ERR_LAYOUT, "%s: argument '%s' binds a pointer parameter and must be contiguous",
                                in->name, l->path);
        }
        b->bind = NB_BIND_TENSOR;
        b->storage = l->scalar;
        b->tensor_rank = l->tensor_rank;
        if (a->kind == NB_ARGK_TENSOR) {
            b->tensor = a->tensor;
            memcpy(b->tshape, nb_tensor_shape(a->tensor), sizeof(int64_t) * (size_t)nd);
            memcpy(b->tstrides, nb_tensor_strides(a->tensor), sizeof(int64_t) * (size_t)nd);
        } else {
            memcpy(b->tshape, a->shape, sizeof(int64_t) * (size_t)nd);
            nb_layout_contiguous_strides(nd, a->shape, (int64_t)nb_dtype_size(l->scalar), b->tstrides);
        }
        *score += have == l->scalar ? 3 : 2;
        return NB_OK;
    }

    int vr = l->value_rank;
    if (a->kind == NB_ARGK_ALLOC) {
        b->bind = NB_BIND_ARRAY;
        b->storage = l->scalar;
        b->call_rank = -1; /* takes the kernel shape */
        *score += 3;
        return NB_OK;
    }
    int nd;
    const int64_t *shape;
    nb_dtype have;
    if (a->kind == NB_ARGK_TENSOR) {
        nd = nb_tensor_ndim(a->tensor);
        shape = nb_tensor_shape(a->tensor);
        have = nb_tensor_dtype(a->tensor);
    } else {
        nd = a->ndim;
        shape = a->shape;
        have = a->dtype;
    }
    nb_status s = check_value_dims(in, l, nd, shape);
    if (s) return s;
    if ((s = check_dtype(in, l, have, nd, shape, l->dir))) return s;
    *score += have == l->scalar ? 3 : cat_of(have) == cat_of(l->scalar) ? 2 : 1;

    int cr = nd - vr;
    b->call_rank = cr;
    memcpy(b->call_shape, shape, sizeof(int64_t) * (size_t)cr);
    if (a->kind == NB_ARGK_TENSOR) {
        const int64_t *st = nb_tensor_strides(a->tensor);
        b->bind = NB_BIND_ARRAY;
        b->storage = have;
        b->tensor = a->tensor;
        memcpy(b->call_strides, st, sizeof(int64_t) * (size_t)cr);
        memcpy(b->inner, st + cr, sizeof(int64_t) * (size_t)vr);
    } else if (cr == 0) {
        b->bind = NB_BIND_UNIFORM; /* one value for every thread, inline */
        b->storage = l->scalar;
    } else {
        /* A host array: uploaded (converted to the parameter's dtype) when materialized. */
        int64_t st[NB_MAX_DIMS];
        nb_layout_contiguous_strides(nd, shape, (int64_t)nb_dtype_size(l->scalar), st);
        b->bind = NB_BIND_ARRAY;
        b->storage = l->scalar;
        memcpy(b->call_strides, st, sizeof(int64_t) * (size_t)cr);
        memcpy(b->inner, st + cr, sizeof(int64_t) * (size_t)vr);
    }
    if (map) {
        if (b->bind != NB_BIND_ARRAY)
            return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is a single value; only arrays "
                            "can be mapped", in->name, l->path);
        if (map->ndims != cr)
            return nb_error(NB_ERR_SHAPE,
                            "%s: the map of argument '%s' has %d dim%s but its call shape %s has %d "
                            "(shape %s, parameter %s)",
                            in->name, l->path, map->ndims, map->ndims == 1 ? "" : "s",
                            shape_s(cr, shape, what, sizeof what), cr,
                            shape_s(nd, shape, sh, sizeof sh), leaf_type(in, l, ty, sizeof ty));
        b->mapped = 1;
        memcpy(b->map_dims, map->dims, sizeof(int) * (size_t)cr);
    }
    return NB_OK;
}

/* ---- generators (module.h nb_generator) ----------------------------------------------------- */

static const char *gen_name(nb_generator_kind k) {
    switch (k) {
    case NB_GEN_CALL_ID: return "call_id()";
    case NB_GEN_THREAD_ID: return "thread_id()";
    case NB_GEN_GRID: return "grid()";
    case NB_GEN_WANG_HASH: return "wang_hash()";
    case NB_GEN_RAND_FLOAT: return "rand_float()";
    }
    return "a generator";
}

/* Components a generator fills in leaf l: 1 for a scalar, n for a vector / 1-d array; -1 when
 * the leaf is neither. */
static int gen_leaf_count(const nb_fn_leaf *l) {
    if (l->kind != NB_LEAF_VALUE) return -1;
    if (l->value_rank == 0) return 1;
    if (l->value_rank == 1) return (int)l->value_shape[0];
    return -1;
}

/* Binds a generator argument to leaf j: checks that the parameter's type is one the generator can
 * fill (SlangPy's rules, module.h); GRID also gets a call shape (its `shape`, -1 -> 1). */
static nb_status bind_gen(nb_call *c, const nb_fn_info *in, int j, const nb_call_arg_rec *a, int *score) {
    const nb_fn_leaf *l = &in->leaves[j];
    nb_leaf_bind *b = &c->leaves[j];
    const nb_generator *g = &a->gen;
    char ty[128];
    int n = gen_leaf_count(l);
    dcat cat = cat_of(l->scalar);
    const char *why = NULL;
    char buf[160];
    if (l->dir != 0) why = "it is written by the call (generators are inputs)";
    else if (n < 0 || l->scalar == NB_F16 || l->scalar == NB_BF16)
        why = "its type is not a scalar, vector or 1-d array of int, uint or float";
    else if (g->kind == NB_GEN_RAND_FLOAT ? cat != CAT_FLOAT : cat != CAT_INT)
        why = g->kind == NB_GEN_RAND_FLOAT ? "rand_float() fills float types only" : "it fills integer (int/uint) types only";
    else if (g->kind != NB_GEN_CALL_ID && g->kind != NB_GEN_GRID && l->value_rank == 1 && !l->is_vector)
        why = "it fills scalars and vectors, not arrays";
    else if (g->kind != NB_GEN_CALL_ID && g->kind != NB_GEN_GRID && n > 3) {
        snprintf(buf, sizeof buf, "it fills at most 3 components, the parameter has %d", n);
        why = buf;
    } else if (g->kind == NB_GEN_GRID && n != g->dims && !(n == 1 && l->value_rank == 0 && g->dims == 1)) {
        snprintf(buf, sizeof buf, "a grid of %d dim%s fills a vector or array of %d (or a scalar for 1 dim), "
                 "the parameter has %d", g->dims, g->dims == 1 ? "" : "s", g->dims, n);
        why = buf;
    } else if (g->kind != NB_GEN_GRID && g->dims >= 0 && g->dims != n) {
        snprintf(buf, sizeof buf, "the generator was given dims=%d, the parameter has %d component%s", g->dims,
                 n, n == 1 ? "" : "s");
        why = buf;
    }
    if (why)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s cannot fill parameter '%s' (%s): %s", in->name,
                        gen_name(g->kind), l->path, leaf_type(in, l, ty, sizeof ty), why);
    memset(b, 0, sizeof *b);
    b->arg = (int)(a - c->args);
    b->dir = 0;
    b->value_rank = l->value_rank;
    b->bind = NB_BIND_GEN;
    b->storage = l->scalar;
    b->gen = g->kind == NB_GEN_CALL_ID || g->kind == NB_GEN_GRID ? NB_GEN_SIG_INDEX
             : g->kind == NB_GEN_THREAD_ID                      ? NB_GEN_SIG_THREAD
             : g->kind == NB_GEN_WANG_HASH                      ? NB_GEN_SIG_HASH
                                                                : NB_GEN_SIG_RAND;
    if (g->kind == NB_GEN_GRID) {
        b->call_rank = g->dims;
        for (int i = 0; i < g->dims; i++) {
            b->call_shape[i] = g->shape[i] < 0 ? 1 : g->shape[i];
            b->call_strides[i] = 0;
        }
        const nb_call_map_rec *map = find_map(c, in, l->param);
        if (map) {
            if (map->ndims != g->dims)
                return nb_error(NB_ERR_SHAPE, "%s: the map of argument '%s' has %d dims but its grid has %d",
                                in->name, l->path, map->ndims, g->dims);
            b->mapped = 1;
            memcpy(b->map_dims, map->dims, sizeof(int) * (size_t)g->dims);
        }
    } else if (find_map(c, in, l->param)) {
        return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is %s, which has no call dims to map",
                        in->name, l->path, gen_name(g->kind));
    }
    *score += 3;
    return NB_OK;
}

/* Once the kernel shape is known: which kernel dim each component of an index generator reads
 * (gen_kdim), and call_id's check that the parameter matches the kernel's rank. */
static nb_status finish_gens(nb_call *c, const nb_fn_info *in) {
    for (int j = 0; j < c->nleaves; j++) {
        nb_leaf_bind *b = &c->leaves[j];
        if (b->bind != NB_BIND_GEN || b->gen != NB_GEN_SIG_INDEX) continue;
        const nb_fn_leaf *l = &in->leaves[j];
        const nb_generator *g = &c->args[b->arg].gen;
        int n = gen_leaf_count(l), K = c->kdim;
        if (g->kind == NB_GEN_GRID) {
            for (int i = 0; i < n; i++) b->gen_kdim[i] = b->mapped ? b->map_dims[i] : K - g->dims + i;
            continue;
        }
        /* call_id: intK / int[K] (int for K == 1); a vector of K+1 gets a zero last component */
        int ok = (l->value_rank == 0 && K == 1) || (l->value_rank == 1 && n == K) ||
                 (l->is_vector && n == K + 1);
        if (!ok) {
            char ty[128], ks[160];
            return nb_error(NB_ERR_SHAPE,
                            "%s: call_id() for parameter '%s' (%s) needs a call of rank %d%s, but the "
                            "kernel shape is %s (rank %d; call_id adds no dims: another argument or the "
                            "result array gives the shape)",
                            in->name, l->path, leaf_type(in, l, ty, sizeof ty), n,
                            l->is_vector && n > 1 ? " (or one less, the last component then 0)" : "",
                            shape_s(K, c->kshape, ks, sizeof ks), K);
        }
        for (int i = 0; i < n; i++) b->gen_kdim[i] = n == K + 1 ? i - 1 : i;
    }
    return NB_OK;
}

/* "argument 'a' (f32[3], call shape [3])" */
static const char *leaf_desc(const nb_call *c, const nb_fn_info *in, int j, char *buf, size_t cap) {
    const nb_leaf_bind *b = &c->leaves[j];
    char ad[200], cs[160];
    const char *path = j < in->nleaves ? in->leaves[j].path
                       : j - in->nleaves < in->nresults ? in->results[j - in->nleaves].path
                                                        : "_result";
    if (b->arg < 0 && b->tensor)
        snprintf(ad, sizeof ad, "%s%s", nb_dtype_name(nb_tensor_dtype(b->tensor)),
                 nb_tensor_ndim(b->tensor)
                     ? shape_s(nb_tensor_ndim(b->tensor), nb_tensor_shape(b->tensor), cs, sizeof cs)
                     : "");
    else if (b->arg < 0)
        snprintf(ad, sizeof ad, "default value");
    else
        arg_desc(&c->args[b->arg], ad, sizeof ad);
    shape_s(b->call_rank, b->call_shape, cs, sizeof cs);
    if (b->mapped) {
        char md[64];
        size_t n = 0;
        for (int i = 0; i < b->call_rank; i++)
            n += (size_t)snprintf(md + n, sizeof md - n, "%s%d", i ? "," : "", b->map_dims[i]);
        snprintf(buf, cap, "argument '%s' (%s, call shape %s mapped to kernel dims [%s])", path, ad,
                 cs, b->call_rank ? md : "");
    } else {
        snprintf(buf, cap, "argument '%s' (%s, call shape %s)", path, ad, cs);
    }
    return buf;
}

/* Places every participating ARRAY leaf's call dims into kernel dims and broadcasts. */
static nb_status kernel_shape(nb_call *c, const nb_fn_info *in, int nl) {
    int K = 0;
    for (int j = 0; j < nl; j++) {
        nb_leaf_bind *b = &c->leaves[j];
        if ((b->bind != NB_BIND_ARRAY && b->bind != NB_BIND_GEN) || b->call_rank < 0) continue;
        if (b->mapped) {
            for (int i = 0; i < b->call_rank; i++) {
                int d = b->map_dims[i];
                for (int k = 0; k < i; k++)
                    if (b->map_dims[k] == d)
                        return nb_error(NB_ERR_INVALID_ARG, "%s: the map of argument '%s' uses "
                                        "kernel dim %d twice", in->name,
                                        j < in->nleaves ? in->leaves[j].path : "_result", d);
                if (d + 1 > K) K = d + 1;
            }
        } else if (b->call_rank > K) {
            K = b->call_rank;
        }
    }
    /* K <= NB_MAX_DIMS: map dims are < NB_MAX_DIMS and call ranks <= NB_MAX_DIMS. */
    c->kdim = K;
    for (int k = 0; k < K; k++) c->kshape[k] = 1;
    int owner[NB_MAX_DIMS]; /* which leaf gave kernel dim k its extent (-1: none yet) */
    for (int k = 0; k < K; k++) owner[k] = -1;
    for (int j = 0; j < nl; j++) {
        nb_leaf_bind *b = &c->leaves[j];
        if ((b->bind != NB_BIND_ARRAY && b->bind != NB_BIND_GEN) || b->call_rank < 0) continue;
        int64_t ext[NB_MAX_DIMS], st[NB_MAX_DIMS];
        for (int k = 0; k < K; k++) ext[k] = 1, st[k] = 0;
        for (int i = 0; i < b->call_rank; i++) {
            int k = b->mapped ? b->map_dims[i] : K - b->call_rank + i;
            ext[k] = b->call_shape[i];
            st[k] = b->call_shape[i] == 1 ? 0 : b->call_strides[i];
        }
        for (int k = 0; k < K; k++) {
            b->kstrides[k] = st[k];
            if (ext[k] == 1) continue;
            if (c->kshape[k] == 1) {
                c->kshape[k] = ext[k];
                owner[k] = j;
            } else if (c->kshape[k] != ext[k]) {
                char d1[512], d2[512];
                leaf_desc(c, in, owner[k], d1, sizeof d1);
                leaf_desc(c, in, j, d2, sizeof d2);
                return nb_error(NB_ERR_SHAPE,
                                "%s: cannot broadcast %s with %s: kernel dim %d is %lld vs %lld",
                                in->name, d1, d2, k, (long long)c->kshape[k], (long long)ext[k]);
            }
        }
    }
    /* Outputs are written, never broadcast: their call shape must be the kernel's. */
    for (int j = 0; j < nl; j++) {
        nb_leaf_bind *b = &c->leaves[j];
        if (b->bind != NB_BIND_ARRAY || b->call_rank < 0 || (b->dir == 0 && b->arg >= 0)) continue;
        int full = 1;
        for (int i = 0; i < b->call_rank; i++) {
            int k = b->mapped ? b->map_dims[i] : K - b->call_rank + i;
            if (b->call_shape[i] != c->kshape[k]) full = 0;
        }
        int covered = 0;
        for (int k = 0; k < K; k++) covered += c->kshape[k] != 1;
        int have = 0;
        for (int i = 0; i < b->call_rank; i++) have += b->call_shape[i] != 1;
        char d1[512], ks[160];
        if (!full || have < covered) {
            leaf_desc(c, in, j, d1, sizeof d1);
            return nb_error(NB_ERR_SHAPE,
                            "%s: %s is written by the call, so its call shape must be the kernel "
                            "shape %s (outputs are not broadcast)",
                            in->name, d1, shape_s(K, c->kshape, ks, sizeof ks));
        }
        for (int i = 0; i < b->call_rank; i++)
            if (b->call_shape[i] > 1 && b->call_strides[i] == 0) {
                leaf_desc(c, in, j, d1, sizeof d1);
                return nb_error(NB_ERR_LAYOUT,
                                "%s: %s is written by the call but is a broadcast view (stride 0 "
                                "in dim %d); pass a real array",
                                in->name, d1, i);
            }
    }
    return NB_OK;
}

/* Binds every argument against overload `ov`; on success fills c->leaves, kernel shape, sig. */
static nb_status bind_overload(nb_call *c, int ov, int want_result, const int64_t *grid, int *score) {
    const nb_fn_info *in = &c->f->infos[ov];
    int leaf_arg[NB_CALL_MAX_LEAVES];
    nb_status s;
    *score = 0;
    c->overload = ov;
    if (in->nleaves > NB_CALL_MAX_LEAVES)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %d parameter leaves (at most %d)", in->name,
                        in->nleaves, NB_CALL_MAX_LEAVES);
    if (in->is_kernel != (grid != NULL))
        return nb_error(NB_ERR_INVALID_ARG,
                        in->is_kernel ? "%s: [Kernel] functions are launched over a grid "
                                        "(nb_call_run_grid), not called over arrays"
                                      : "%s: only [Kernel] functions are launched over a grid; "
                                        "call it over arrays (nb_call_run)",
                        in->name);
    for (int j = 0; j < in->nleaves; j++) leaf_arg[j] = -1;
    for (int ai = 0; ai < c->nargs; ai++) {
        int first = 0, last = 0, p = 0;
        if ((s = resolve_target(c, in, &c->args[ai], &first, &last, &p))) return s;
        for (int j = first; j < last; j++) {
            if (leaf_arg[j] >= 0)
                return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is given twice", in->name,
                                in->leaves[j].path);
            leaf_arg[j] = ai;
        }
    }
    for (int i = 0; i < c->nmaps; i++) {
        const nb_call_map_rec *m = &c->maps[i];
        int ok = m->index >= 0 ? m->index < in->nparams : 0;
        for (int p = 0; !ok && m->index < 0 && p < in->nparams; p++)
            ok = !strcmp(m->name, in->param_names[p]);
        if (!ok) {
            char lst[512];
            list_params(in, lst, sizeof lst);
            if (m->index >= 0)
                return nb_error(NB_ERR_INVALID_ARG, "%s: map for argument %d, but %s takes %d",
                                in->name, m->index, in->signature, in->nparams);
            return nb_error(NB_ERR_NOT_FOUND, "%s: map for unknown parameter '%s' (parameters: %s)",
                            in->name, m->name, lst);
        }
    }
    for (int j = 0; j < in->nleaves; j++) {
        if (leaf_arg[j] < 0 && in->leaves[j].has_default) {
            const nb_fn_leaf *l = &in->leaves[j];
            if (!l->default_value) {
                char ty[128];
                return nb_error(NB_ERR_UNSUPPORTED,
                                "%s: parameter '%s' (%s) has a default value the host cannot "
                                "evaluate (only constant scalars, vectors, matrices and arrays); "
                                "pass it (%s)",
                                in->name, in->param_names[l->param],
                                param_type(in, l->param, ty, sizeof ty), in->signature);
            }
            if (find_map(c, in, l->param))
                return nb_error(NB_ERR_INVALID_ARG, "%s: a map is given for '%s', which has no "
                                "argument (it takes its default value)", in->name, l->path);
            nb_leaf_bind *b = &c->leaves[j];
            memset(b, 0, sizeof *b);
            b->arg = NB_ARG_DEFAULT;
            b->dir = 0;
            b->value_rank = l->value_rank;
            b->bind = NB_BIND_UNIFORM;
            b->storage = l->scalar;
            continue;
        }
        if (leaf_arg[j] < 0) {
            const nb_fn_leaf *l = &in->leaves[j];
            int given = c->nargs;
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: missing argument for parameter '%s'%s (%s; %d argument%s given)",
                            in->name, l->path, l->dir == 1 ? " (an out parameter needs a tensor "
                                                             "or nb_call_arg_alloc)" : "",
                            in->signature, given, given == 1 ? "" : "s");
        }
        if (c->args[leaf_arg[j]].kind == NB_ARGK_GEN) {
            if (grid)
                return nb_error(NB_ERR_INVALID_ARG, "%s: [Kernel] functions take no generators ('%s' is %s); "
                                "they read their thread index with dispatch_id()", in->name,
                                in->leaves[j].path, gen_name(c->args[leaf_arg[j]].gen.kind));
            if ((s = bind_gen(c, in, j, &c->args[leaf_arg[j]], score))) return s;
            continue;
        }
        if ((s = bind_leaf(c, in, j, leaf_arg[j], score))) return s;
        if (grid && c->leaves[j].bind == NB_BIND_ARRAY)
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: [Kernel] arguments must be single values or whole arrays for "
                            "Tensor<> parameters; '%s' is an array for a %s parameter",
                            in->name, in->leaves[j].path, lang_scalar(in->leaves[j].scalar));
    }
    int nl = in->nleaves;
    c->nleaves = nl;
    c->nres = 0;
    /* The result's leaves: participating outputs when written into given arrays, else allocated
     * later. A struct result has one leaf per field. */
    int has_result = in->has_result && (want_result || c->into || c->ninto) && !grid;
    if ((c->into || c->ninto) && !in->has_result)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s returns nothing, so it has no result to write "
                        "into", in->name, in->signature);
    if ((c->into || c->ninto) && grid)
        return nb_error(NB_ERR_INVALID_ARG, "%s: [Kernel] functions have no result to write into",
                        in->name);
    if (has_result && in->nresults == 0)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s returns a struct with a field that cannot be "
                        "bound (an array of structs); return the fields through out parameters",
                        in->name, in->signature);
    if (has_result && nl + in->nresults > NB_CALL_MAX_LEAVES)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %d parameter and result leaves (at most %d)",
                        in->name, nl + in->nresults, NB_CALL_MAX_LEAVES);
    char flds[512];
    if (has_result && c->into && in->result.value_rank < 0) {
        list_results(in, flds, sizeof flds);
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s returns a struct, which one array cannot hold; "
                        "give an array per field with nb_call_result_named / _result.FIELD= (%s)",
                        in->name, in->signature, flds);
    }
    for (int i = 0; has_result && i < c->ninto; i++) {
        int found = 0;
        for (int k = 0; k < in->nresults; k++) found |= !strcmp(in->results[k].path, c->intos[i].path);
        for (int i2 = 0; i2 < i; i2++)
            if (!strcmp(c->intos[i2].path, c->intos[i].path))
                return nb_error(NB_ERR_INVALID_ARG, "%s: result field '%s' is given twice",
                                in->name, c->intos[i].path);
        if (!found) {
            list_results(in, flds, sizeof flds);
            return nb_error(NB_ERR_NOT_FOUND, "%s: '%s' is not a result field of %s (result "
                            "leaves: %s)", in->name, c->intos[i].path, in->signature, flds);
        }
    }
    for (int k = 0; has_result && k < in->nresults; k++) {
        nb_leaf_bind *b = &c->leaves[nl + k];
        const nb_fn_leaf *l = &in->results[k];
        memset(b, 0, sizeof *b);
        b->arg = -1;
        b->bind = NB_BIND_ARRAY;
        b->dir = 1;
        b->value_rank = l->value_rank;
        b->storage = l->scalar;
        b->call_rank = -1;
        nb_tensor *t = in->result.value_rank >= 0 ? c->into : NULL;
        for (int i = 0; !t && i < c->ninto; i++)
            if (!strcmp(c->intos[i].path, l->path)) t = c->intos[i].t;
        if (t) {
            if (nb_tensor_device(t) != c->f->m->dev)
                return nb_error(NB_ERR_DEVICE, "%s: the result array%s%s%s is on %s but the module "
                                "runs on %s", in->name, k || in->nresults > 1 ? " for '" : "",
                                k || in->nresults > 1 ? l->path : "",
                                k || in->nresults > 1 ? "'" : "",
                                nb_device_name(nb_tensor_device(t)), nb_device_name(c->f->m->dev));
            int nd = nb_tensor_ndim(t);
            const int64_t *shape = nb_tensor_shape(t);
            if ((s = check_value_dims(in, l, nd, shape))) return s;
            if ((s = check_dtype(in, l, nb_tensor_dtype(t), nd, shape, 1))) return s;
            const int64_t *st = nb_tensor_strides(t);
            b->storage = nb_tensor_dtype(t);
            b->tensor = t;
            b->call_rank = nd - l->value_rank;
            memcpy(b->call_shape, shape, sizeof(int64_t) * (size_t)b->call_rank);
            memcpy(b->call_strides, st, sizeof(int64_t) * (size_t)b->call_rank);
            memcpy(b->inner, st + b->call_rank, sizeof(int64_t) * (size_t)l->value_rank);
        }
    }
    int nres = has_result ? in->nresults : 0;
    c->nres = nres;
    if (grid && c->blocks) {
        /* explicit blocks: shape = {grid z, y, x, block z, y, x} (callsig.h); sizes checked by
         * nb_call_run_blocks */
        c->kdim = 6;
        for (int k = 0; k < 3; k++) {
            c->kshape[2 - k] = grid[k];
            c->kshape[5 - k] = c->bdim[k];
        }
        if (in->numthreads[0] > 0 && (c->bdim[0] != in->numthreads[0] || c->bdim[1] != in->numthreads[1] ||
                                      c->bdim[2] != in->numthreads[2]))
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: the block (%lld, %lld, %lld) must be its [numthreads(%d, %d, %d)] thread group",
                            in->name, (long long)c->bdim[0], (long long)c->bdim[1], (long long)c->bdim[2],
                            in->numthreads[0], in->numthreads[1], in->numthreads[2]);
    } else if (grid) {
        /* grid = {x, y, z}; x is the fastest (last) kernel dim, as dispatch_id.x. */
        c->kdim = 3;
        for (int k = 0; k < 3; k++) {
            if (grid[k] < 0)
                return nb_error(NB_ERR_INVALID_ARG, "%s: grid[%d] is negative (%lld)", in->name, k,
                                (long long)grid[k]);
            c->kshape[2 - k] = grid[k];
            if (in->numthreads[k] > 0 && grid[k] % in->numthreads[k])
                return nb_error(NB_ERR_INVALID_ARG,
                                "%s: the grid (%lld, %lld, %lld threads) must be a multiple of its "
                                "[numthreads(%d, %d, %d)] thread group",
                                in->name, (long long)grid[0], (long long)grid[1], (long long)grid[2],
                                in->numthreads[0], in->numthreads[1], in->numthreads[2]);
        }
    } else if ((s = kernel_shape(c, in, nl + nres)) || (s = finish_gens(c, in))) {
        return s;
    }

    nb_call_sig *sig = &c->sig;
    sig->func = in->name;
    sig->overload = ov;
    sig->target = nb_device_get_kind(c->f->m->dev) == NB_DEVICE_CUDA ? NB_TARGET_CUDA : NB_TARGET_C;
    sig->mode = NB_CALL_PRIMAL;
    sig->ndim = c->kdim;
    sig->blocks = grid && c->blocks;
    sig->nleaves = nl + nres;
    sig->has_result = has_result;
    for (int j = 0; j < nl + nres; j++) {
        sig->leaves[j].param = j < nl ? in->leaves[j].param : -1;
        sig->leaves[j].path = j < nl ? in->leaves[j].path : in->results[j - nl].path;
        sig->leaves[j].bind = c->leaves[j].bind;
        sig->leaves[j].storage = c->leaves[j].storage;
        sig->leaves[j].vec4 = 0; /* (decided once the data addresses are known: nb_call_vec4_rows) */
        sig->leaves[j].gen = c->leaves[j].bind == NB_BIND_GEN ? c->leaves[j].gen : 0;
    }
    return NB_OK;
}

/* ---- integer ranges -------------------------------------------------------------------------- */

/* An integer argument wider than its parameter (an i64 into an int, a negative int into a uint)
 * is checked value by value: nb_convert would saturate it and the kernel would wrap it, so an
 * out-of-range value is an error naming the argument, the value and the parameter's range rather
 * than silent garbage. Host values and CPU tensors are read in place; a tensor on another device
 * is copied to the host for the check (only when its dtype can hold out-of-range values). */
static int int_range(nb_dtype d, int64_t *lo, int64_t *hi) {
    switch (d) {
    case NB_I32: *lo = INT32_MIN, *hi = INT32_MAX; return 1;
    case NB_U32: *lo = 0, *hi = UINT32_MAX; return 1;
    case NB_I64: *lo = INT64_MIN, *hi = INT64_MAX; return 1;
    case NB_U8: *lo = 0, *hi = UINT8_MAX; return 1;
    default: return 0;
    }
}

int nb_call_int_narrowed(nb_dtype have, nb_dtype param) {
    int64_t lo, hi, slo, shi;
    return int_range(param, &lo, &hi) && int_range(have, &slo, &shi) && !(slo >= lo && shi <= hi);
}

static int64_t int_at(const unsigned char *p, nb_dtype d) {
    switch (d) {
    case NB_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case NB_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case NB_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    default: return *p;
    }
}

/* Finds the first element outside [lo, hi] of a strided array (C order); returns its flat index
 * or -1. */
static int64_t first_out_of_range(const unsigned char *p, nb_dtype d, int nd, const int64_t *shape,
                                  const int64_t *strides, int64_t lo, int64_t hi, int64_t *val,
                                  int64_t *flat) {
    if (nd == 0) {
        int64_t v = int_at(p, d);
        if (v < lo || v > hi) {
            *val = v;
            return *flat;
        }
        (*flat)++;
        return -1;
    }
    for (int64_t i = 0; i < shape[0]; i++) {
        int64_t r = first_out_of_range(p + i * strides[0], d, nd - 1, shape + 1, strides + 1, lo,
                                       hi, val, flat);
        if (r >= 0) return r;
    }
    return -1;
}

static nb_status check_int_ranges(nb_call *c) {
    const nb_fn_info *in = &c->f->infos[c->overload];
    for (int j = 0; j < c->nleaves; j++) {
        const nb_leaf_bind *b = &c->leaves[j];
        const nb_fn_leaf *l = &in->leaves[j];
        int64_t lo, hi, slo, shi;
        if (b->arg < 0 || l->dir == 1 || !int_range(l->scalar, &lo, &hi)) continue;
        const nb_call_arg_rec *a = &c->args[b->arg];
        if (a->kind != NB_ARGK_VALUE && a->kind != NB_ARGK_TENSOR) continue;
        nb_dtype have = a->kind == NB_ARGK_TENSOR ? nb_tensor_dtype(a->tensor) : a->dtype;
        if (!int_range(have, &slo, &shi) || (slo >= lo && shi <= hi)) continue;
        int nd;
        int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
        const unsigned char *p;
        void *copy = NULL;
        size_t bytes = 0;
        if (a->kind == NB_ARGK_VALUE) {
            nd = a->ndim;
            memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nd);
            nb_layout_contiguous_strides(nd, shape, (int64_t)nb_dtype_size(have), strides);
            p = a->data;
        } else {
            nd = nb_tensor_ndim(a->tensor);
            memcpy(shape, nb_tensor_shape(a->tensor), sizeof(int64_t) * (size_t)nd);
            if (nb_device_get_kind(nb_tensor_device(a->tensor)) == NB_DEVICE_CPU) {
                memcpy(strides, nb_tensor_strides(a->tensor), sizeof(int64_t) * (size_t)nd);
                p = nb_tensor_data(a->tensor);
            } else {
                bytes = nb_tensor_nbytes(a->tensor);
                copy = nb_alloc(bytes ? bytes : 1, 64);
                if (!copy)
                    return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory checking the "
                                    "range of argument '%s'", in->name, l->path);
                nb_status s = nb_tensor_to_host(a->tensor, copy, bytes);
                if (s) {
                    nb_free(copy, bytes ? bytes : 1);
                    return s;
                }
                nb_layout_contiguous_strides(nd, shape, (int64_t)nb_dtype_size(have), strides);
                p = copy;
            }
        }
        int64_t val = 0, flat = 0, bad = -1;
        if (p && nb_layout_numel(nd, shape) > 0)
            bad = first_out_of_range(p, have, nd, shape, strides, lo, hi, &val, &flat);
        if (copy) nb_free(copy, bytes ? bytes : 1);
        if (bad >= 0) {
            char ty[128], what[200], at[48] = "";
            if (nd) snprintf(at, sizeof at, " at flat index %lld", (long long)bad);
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: argument '%s' (%s) holds %lld%s, outside the range of parameter "
                            "'%s' (%s: %lld..%lld)",
                            in->name, l->path, arg_desc(a, what, sizeof what), (long long)val, at,
                            l->path, leaf_type(in, l, ty, sizeof ty), (long long)lo, (long long)hi);
        }
    }
    return NB_OK;
}

nb_status nb_call_bind(nb_call *c, int want_result, const int64_t *grid) {
    nb_func *f = c->f;
    if (!f->m->dev)
        return nb_error(NB_ERR_NO_DEVICE, "%s: the module was loaded without a device, so its "
                        "functions cannot be called", f->name);
    if (f->count == 1) {
        int score;
        nb_status s = bind_overload(c, 0, want_result, grid, &score);
        return s ? s : check_int_ranges(c);
    }
    /* Several overloads: the one whose arguments fit with the fewest conversions wins; on a tie
     * the one with the fewest call (vectorized) dims, so that [[1,2,3],[4,5,6]] for
     * f(float3) / f(float3 x[2]) calls f(float3[2]) once (SlangPy), then the first declared. The
     * chosen one is bound again to leave its state in c. */
    int best = -1;
    int64_t best_score = -1;
    char first_err[1024] = "";
    for (int ov = 0; ov < f->count; ov++) {
        int score = 0;
        if (bind_overload(c, ov, want_result, grid, &score) == NB_OK) {
            int64_t key = (int64_t)score * 16 + (15 - (c->kdim < 15 ? c->kdim : 15));
            if (key > best_score) best = ov, best_score = key;
        } else if (!first_err[0]) {
            snprintf(first_err, sizeof first_err, "%s", nb_last_error());
        }
    }
    if (best < 0) {
        char sigs[1024];
        size_t n = 0;
        for (int ov = 0; ov < f->count && n < sizeof sigs; ov++)
            n += (size_t)snprintf(sigs + n, sizeof sigs - n, "%s%s", ov ? "; " : "",
                                  f->infos[ov].signature);
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: no overload matches the arguments (candidates: %s); the first one "
                        "says: %s", f->name, sigs, first_err);
    }
    int score;
    nb_status s = bind_overload(c, best, want_result, grid, &score);
    return s ? s : check_int_ranges(c);
}

/* ---- materializing: uploads and allocations ------------------------------------------------- */

static nb_status upload_value(nb_call *c, nb_leaf_bind *b, const nb_call_arg_rec *a) {
    nb_device *dev = c->f->m->dev;
    int64_t numel = nb_layout_numel(a->ndim, a->shape);
    size_t es = nb_dtype_size(b->storage);
    if (numel < 0) return nb_error(NB_ERR_SHAPE, "%s: bad host value shape", nb_call_fname(c));
    const void *src = a->data;
    void *tmp = NULL;
    size_t bytes = (size_t)numel * es;
    if (a->dtype != b->storage) {
        tmp = nb_alloc(bytes ? bytes : 1, 64);
        if (!tmp) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", nb_call_fname(c));
        nb_convert(tmp, b->storage, a->data, a->dtype, (size_t)numel);
        src = tmp;
    }
    nb_status s = nb_tensor_from_host(dev, b->storage, a->ndim, a->shape, src, &b->tensor);
    if (tmp) nb_free(tmp, bytes ? bytes : 1);
    if (s) return s;
    b->owns_tensor = 1;
    return NB_OK;
}

static nb_status alloc_out(nb_call *c, nb_leaf_bind *b, const long long *vshape) {
    int64_t shape[NB_MAX_DIMS * 2];
    int nd = c->kdim + b->value_rank;
    if (nd > NB_MAX_DIMS)
        return nb_error(NB_ERR_SHAPE, "%s: the output would have %d dims (at most %d)",
                        nb_call_fname(c), nd, NB_MAX_DIMS);
    memcpy(shape, c->kshape, sizeof(int64_t) * (size_t)c->kdim);
    for (int i = 0; i < b->value_rank; i++) shape[c->kdim + i] = vshape[i];
    nb_status s = nb_tensor_empty(c->f->m->dev, b->storage, nd, shape, &b->tensor);
    if (s) return s;
    b->owns_tensor = 1;
    const int64_t *st = nb_tensor_strides(b->tensor);
    for (int k = 0; k < c->kdim; k++) b->kstrides[k] = c->kshape[k] == 1 ? 0 : st[k];
    memcpy(b->inner, st + c->kdim, sizeof(int64_t) * (size_t)b->value_rank);
    return NB_OK;
}

nb_status nb_call_materialize(nb_call *c, int want_result) {
    const nb_fn_info *in = &c->f->infos[c->overload];
    nb_status s;
    for (int j = 0; j < c->sig.nleaves; j++) {
        nb_leaf_bind *b = &c->leaves[j];
        if (b->bind == NB_BIND_UNIFORM || b->bind == NB_BIND_GEN) continue;
        const nb_call_arg_rec *a = b->arg >= 0 ? &c->args[b->arg] : NULL;
        if (a && a->kind == NB_ARGK_VALUE) {
            if ((s = upload_value(c, b, a))) return s;
        } else if ((a && a->kind == NB_ARGK_ALLOC) || (!a && !b->tensor)) {
            const long long *vs = a ? in->leaves[j].value_shape
                                    : in->results[j - c->nleaves].value_shape;
            if ((s = alloc_out(c, b, vs))) return s;
        }
        b->data = b->tensor ? (uint64_t)(uintptr_t)nb_tensor_data(b->tensor) : 0;
    }
    (void)want_result;
    return NB_OK;
}

/* CUDA: marks read float[N] leaves whose rows are contiguous and 16-byte aligned (and that differ
 * between threads) for 16-byte loads (nb_leaf_sig.vec4). Part of the kernel's signature: a call
 * whose arrays are laid out otherwise gets the plain kernel. */
void nb_call_vec4_rows(nb_call *c) {
    if (c->sig.target != NB_TARGET_CUDA) return;
    const nb_fn_info *in = &c->f->infos[c->overload];
    for (int j = 0; j < c->nleaves && j < c->sig.nleaves; j++) {
        const nb_leaf_bind *b = &c->leaves[j];
        const nb_fn_leaf *l = &in->leaves[j];
        c->sig.leaves[j].vec4 = 0;
        if (b->bind != NB_BIND_ARRAY || b->storage != NB_F32 || l->dir == 1 || l->kind != NB_LEAF_VALUE) continue;
        if (l->value_rank != 1 || l->value_shape[0] < 8 || l->value_shape[0] % 4 || b->inner[0] != 4) continue;
        if (b->data % 16) continue;
        int moves = 0, aligned = 1;
        for (int k = 0; k < c->kdim; k++) {
            if (b->kstrides[k] % 16) aligned = 0;
            if (b->kstrides[k]) moves = 1;
        }
        c->sig.leaves[j].vec4 = aligned && moves;
    }
}

int nb_call_strides_one_to_one(int n, const int64_t *shape, const int64_t *strides, int64_t elem_bytes) {
    int64_t ext[NB_MAX_DIMS], str[NB_MAX_DIMS];
    int m = 0;
    if (n < 0 || n > NB_MAX_DIMS || elem_bytes <= 0) return 0;
    for (int k = 0; k < n; k++) {
        if (shape[k] <= 0) return 0; /* (an empty kernel runs no index) */
        if (shape[k] == 1) continue;
        if (strides[k] == 0) return 0; /* broadcast: several indices on one element */
        int64_t s = strides[k] < 0 ? -strides[k] : strides[k];
        int at = m++; /* insertion sort by |stride| */
        while (at > 0 && str[at - 1] > s) str[at] = str[at - 1], ext[at] = ext[at - 1], at--;
        str[at] = s, ext[at] = shape[k];
    }
    int64_t span = elem_bytes; /* bytes covered by the dims below */
    for (int k = 0; k < m; k++) {
        if (str[k] < span) return 0;
        if (ext[k] > INT64_MAX / str[k]) return 0;
        span = str[k] * ext[k];
    }
    return 1;
}

int nb_call_contig4_ok(const nb_call *c) {
    const nb_fn_info *in = &c->f->infos[c->overload];
    if (c->kdim < 1 || c->kdim > 2 || c->sig.blocks || in->is_kernel) return 0;
    const int in_dim = c->kdim - 1; /* 2-D: rows of W = kshape[1] indices, W % 4 == 0 (a quad in one row) */
    if (c->kdim == 2 && (c->kshape[1] % 4 || c->kshape[1] > 0x7fffffff)) return 0;
    int arrays = 0;
    for (int j = 0; j < c->sig.nleaves; j++) {
        const nb_leaf_bind *b = &c->leaves[j];
        if (b->bind == NB_BIND_UNIFORM) continue;
        if (b->bind != NB_BIND_ARRAY) return 0; /* tensors, generators */
        const nb_fn_leaf *l = j < c->nleaves ? &in->leaves[j] : &in->results[j - c->nleaves];
        int64_t es = (int64_t)nb_dtype_size(b->storage);
        if (l->kind != NB_LEAF_VALUE || l->value_rank != 0) return 0;
        /* one element for all indices (1-D) or per row (2-D: a per-row operand): read in place */
        if (b->kstrides[in_dim] == 0 && j < c->nleaves && l->dir == 0) continue;
        if ((es != 2 && es != 4) || b->kstrides[in_dim] != es || b->data % (uint64_t)(4 * es)) return 0;
        if (c->kdim == 2 && c->kshape[0] > 1 && b->kstrides[0] != c->kshape[1] * es) return 0; /* rows back to back */
        arrays++;
    }
    return arrays > 0;
}

void nb_call_mark_contig4(nb_call *c, int cuda) {
    c->sig.contig4 = cuda && nb_call_contig4_ok(c);
    for (int j = 0; j < c->sig.nleaves; j++) /* (broadcast inputs of a contig4 call: read in place) */
        c->sig.leaves[j].bcast = c->sig.contig4 && c->leaves[j].bind == NB_BIND_ARRAY && c->leaves[j].kstrides[c->kdim - 1] == 0;
}

void nb_call_leaf_span(const nb_call *c, const nb_leaf_bind *b, uint64_t data, uint64_t *lo, uint64_t *hi) {
    int64_t neg = 0, pos = 0;
    for (int k = 0; k < c->kdim; k++) {
        int64_t e = (c->kshape[k] - 1) * b->kstrides[k];
        if (e < 0) neg += e;
        else pos += e;
    }
    *lo = data + (uint64_t)neg;
    *hi = data + (uint64_t)pos + (uint64_t)nb_dtype_size(b->storage);
}

/* Leaf j of a bwds call (its wrapper's reflection shows an accumulated gradient as an input with
 * a default, like _dout: lang/ad_call.c). */
static int is_grad_leaf(const nb_fn_info *in, int j) {
    const nb_fn_leaf *l = &in->leaves[j];
    return l->dir == 0 && l->has_default && l->param >= 0 && strcmp(l->path, "_dout") != 0;
}

void nb_call_owned_grads(nb_call *c) {
    const nb_fn_info *in = &c->f->infos[c->overload];
    size_t n = strlen(c->f->name);
    int bwd = n > 6 && (!strcmp(c->f->name + n - 6, "__bwds") || !strcmp(c->f->name + n - 6, "__bwdr"));
    for (int j = 0; j < c->sig.nleaves; j++) c->sig.leaves[j].shacc = 0; /* (nb_call_shared_grads decides it after) */
    for (int j = 0; j < c->nleaves && j < c->sig.nleaves; j++) {
        const nb_leaf_bind *b = &c->leaves[j];
        const nb_fn_leaf *l = &in->leaves[j];
        /* (the generator uses the flag on accumulated leaves only) */
        int owned = bwd && is_grad_leaf(in, j) && b->bind == NB_BIND_ARRAY && l->kind == NB_LEAF_VALUE &&
                    l->value_rank == 0 && (b->storage == NB_F32 || b->storage == NB_F64) &&
                    nb_call_strides_one_to_one(c->kdim, c->kshape, b->kstrides, (int64_t)nb_dtype_size(b->storage));
        /* another written array over the same bytes (a shifted view of the same buffer as a
         * second gradient, or the same array bound twice): the adds stay atomic. The same array
         * twice is NOT safe without atomics either: a CUDA contig4 kernel loads every gradient's
         * 4-vector before it stores any, so one of the two adds would be lost (seen on an H200) */
        uint64_t lo, hi, lo2, hi2;
        if (owned) nb_call_leaf_span(c, b, b->data, &lo, &hi);
        for (int i = 0; owned && i < c->sig.nleaves; i++) {
            const nb_leaf_bind *o = &c->leaves[i];
            if (i == j || o->bind != NB_BIND_ARRAY) continue;
            int written = i >= c->nleaves || in->leaves[i].dir != 0 || is_grad_leaf(in, i);
            if (!written) continue;
            nb_call_leaf_span(c, o, o->data, &lo2, &hi2);
            if (lo2 >= hi || lo >= hi2) continue; /* disjoint */
            owned = 0;
        }
        c->sig.leaves[j].owned = owned;
    }
}

void nb_call_shared_grads(nb_call *c, int cuda) {
    const nb_fn_info *in = &c->f->infos[c->overload];
    size_t n = strlen(c->f->name);
    int bwd = n > 6 && (!strcmp(c->f->name + n - 6, "__bwds") || !strcmp(c->f->name + n - 6, "__bwdr"));
    int count = 0;
    for (int j = 0; j < c->sig.nleaves; j++) c->sig.leaves[j].shacc = 0;
    if (!cuda || !bwd || c->sig.blocks || in->is_kernel || c->kdim < 1 || c->kdim > NB_MAX_DIMS) return;
    for (int j = 0; j < c->nleaves && j < c->sig.nleaves && count < NB_SHACC_LEAVES; j++) {
        const nb_leaf_bind *b = &c->leaves[j];
        const nb_fn_leaf *l = &in->leaves[j];
        if (!is_grad_leaf(in, j) || b->bind != NB_BIND_ARRAY || l->kind != NB_LEAF_VALUE || l->value_rank != 0 ||
            (b->storage != NB_F32 && b->storage != NB_F64) || c->sig.leaves[j].owned)
            continue;
        /* e.g. a [N, F] kernel, g [F] at strides {0, es}: broadcast over a dim, moving along the
         * last (a warp's lanes add into different elements: the warp sum cannot apply); strides
         * non-negative multiples of the element size, the span (first to last element) small */
        const int64_t es = (int64_t)nb_dtype_size(b->storage);
        int bcast = 0, ok = b->kstrides[c->kdim - 1] != 0;
        int64_t span = 0; /* in elements, the last one excluded */
        for (int k = 0; k < c->kdim && ok; k++) {
            if (c->kshape[k] <= 0 || b->kstrides[k] < 0 || b->kstrides[k] % es) ok = 0;
            else if (c->kshape[k] > 1 && b->kstrides[k] == 0) bcast = 1;
            else if (c->kshape[k] > 1 && (b->kstrides[k] / es > NB_SHACC_MAX || (c->kshape[k] - 1) > NB_SHACC_MAX)) ok = 0;
            else span += (c->kshape[k] - 1) * (b->kstrides[k] / es);
        }
        if (!ok || !bcast || span + 1 > NB_SHACC_MAX) continue;
        c->sig.leaves[j].shacc = 1;
        count++;
    }
}

void nb_call_release_temps(nb_call *c) {
    for (int j = 0; j < c->sig.nleaves && j <= NB_CALL_MAX_LEAVES; j++) {
        nb_leaf_bind *b = &c->leaves[j];
        if (b->owns_tensor && b->tensor) nb_tensor_free(b->tensor);
        b->owns_tensor = 0;
        b->tensor = NULL;
    }
}
