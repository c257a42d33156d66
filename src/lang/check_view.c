/* slang-torch's kernel style (issue #14): TensorView<T> / DiffTensorView<T> methods and
 * DiffTensorView's .primal / .diff.diff. The ranks of rankless views are inferred before a module
 * is checked (check_view_rank.c).
 *
 * Methods (ck_tensor_method, for Tensor, TensorView and structured buffers alike):
 *   t.load(i…) / t.loadOnce(i…)            t[i…]
 *   t.store(i…, v) / t.storeOnce(i…, v)    t[i…] = v
 *   t.size(d)                              the extent of dim d (uint; d constant)
 *   t.stride(d)                            dim d's stride in bytes (uint; Slang's TensorView)
 *   t.dims()                               the rank (a constant)
 *   t.InterlockedAdd(i, v [, out old])     atomicAdd(t[i], v)
 *   t.data_ptr()                           Ptr<T> to the (contiguous) data
 *   b.GetDimensions(out uint n)            n = the buffer's length (StructuredBuffer)
 *
 * [TorchEntryPoint] host functions (TorchTensor<T>, __dispatch_kernel) are check_host.c's.
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"

/* Before a module is checked: view ranks (check_view_rank.c). */
void ck_prepare_views(nb_checker *c, nb_module_ast *m) { ck_infer_view_ranks(c, m); }

/* ---- methods of tensors, views and buffers ---------------------------------------------------- */

const nb_type *ck_tensor_method(nb_checker *c, nb_expr **slot, const nb_type *bt) {
    nb_expr *call = *slot;
    nb_expr *callee = call->u.call.callee;
    nb_expr *base = callee->u.member.base;
    const char *m = callee->u.member.member;
    int n = call->u.call.nargs;
    nb_expr **args = call->u.call.args;
    if (!strcmp(m, "load") || !strcmp(m, "loadOnce") || !strcmp(m, "store") || !strcmp(m, "storeOnce")) {
        int store = m[0] == 's';
        int ni = store ? n - 1 : n;
        if (ni < 1) {
            ck_err(c, call->loc, "'%s' takes the element's indices%s", m, store ? " and the value" : "");
            return call->type = c->tt->t_error;
        }
        nb_expr *ix = ck_new_expr(c, NB_EX_INDEX, call->loc);
        if (!ix) return call->type = c->tt->t_error;
        ix->u.index.base = base;
        ix->u.index.indices = args;
        ix->u.index.nindices = ni;
        ix->tensor_once = strstr(m, "Once") != NULL; /* (reverse mode: storeOnce leaves the gradient) */
        if (!store) {
            *slot = ix;
            return ck_expr(c, slot);
        }
        nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, call->loc);
        if (!as) return call->type = c->tt->t_error;
        as->u.assign.op = NB_TOK_ASSIGN;
        as->u.assign.lhs = ix;
        as->u.assign.rhs = args[n - 1];
        *slot = as;
        return ck_expr(c, slot);
    }
    if (!strcmp(m, "InterlockedAdd") || !strcmp(m, "interlockedAdd")) {
        /* t.InterlockedAdd(index, v [, out old]) -> [old =] atomicAdd(t[index], v) */
        if (n < 2 || n > 3) {
            ck_err(c, call->loc, "'%s' takes an index, a value and optionally an 'out' old value", m);
            return call->type = c->tt->t_error;
        }
        nb_expr *ix = ck_new_expr(c, NB_EX_INDEX, call->loc);
        nb_expr *at = ck_new_expr(c, NB_EX_CALL, call->loc);
        nb_expr *nm = ck_new_expr(c, NB_EX_NAME, call->loc);
        nb_expr **a2 = ck_alloc(c, sizeof(nb_expr *) * 2);
        if (!ix || !at || !nm || !a2) return call->type = c->tt->t_error;
        ix->u.index.base = base;
        ix->u.index.indices = args;
        ix->u.index.nindices = 1;
        nm->u.name.name = "atomicAdd";
        a2[0] = ix;
        a2[1] = args[1];
        at->u.call.callee = nm;
        at->u.call.args = a2;
        at->u.call.nargs = 2;
        if (n == 2) {
            *slot = at;
            return ck_expr(c, slot);
        }
        nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, call->loc);
        if (!as) return call->type = c->tt->t_error;
        as->u.assign.op = NB_TOK_ASSIGN;
        as->u.assign.lhs = args[2];
        as->u.assign.rhs = at;
        *slot = as;
        return ck_expr(c, slot);
    }
    if (!strcmp(m, "data_ptr") && n == 0) { /* Ptr<T> to the data (check_ptr.c): __tensor_data_ptr(t) */
        nb_expr *nm = ck_new_expr(c, NB_EX_NAME, call->loc);
        nb_expr **a1 = ck_alloc(c, sizeof(nb_expr *));
        if (!nm || !a1) return call->type = c->tt->t_error;
        nm->u.name.name = "__tensor_data_ptr";
        a1[0] = base;
        call->u.call.callee = nm;
        call->u.call.args = a1;
        call->u.call.nargs = 1;
        return ck_expr(c, slot);
    }
    if (!strcmp(m, "dims") && !bt->buffer) { /* t.dims(): the rank (a constant here) */
        if (n) {
            ck_err(c, call->loc, "'dims' takes no arguments");
            return call->type = c->tt->t_error;
        }
        nb_expr *r = ck_new_expr(c, NB_EX_INT, call->loc);
        if (!r) return call->type = c->tt->t_error;
        r->u.ilit.value = (uint64_t)bt->rank;
        r->u.ilit.is_unsigned = 1;
        *slot = r;
        return ck_expr(c, slot);
    }
    if (!strcmp(m, "size") || !strcmp(m, "GetDimensions") || (!strcmp(m, "stride") && !bt->buffer)) {
        int gd = m[0] == 'G';
        for (int i = 0; i < n; i++) ck_expr(c, &args[i]);
        int64_t d = 0;
        if (!gd && (n != 1 || !ck_const_int(args[0], &d))) {
            ck_err(c, call->loc, "'%s' takes one constant dimension index", m);
            return call->type = c->tt->t_error;
        }
        if (gd && (n != 1 || bt->rank != 1)) {
            ck_err(c, call->loc, "'GetDimensions' takes one 'out uint' argument (the element count)%s",
                   n == 2 ? "; the stride form is not supported" : "");
            return call->type = c->tt->t_error;
        }
        if (d < 0 || d >= bt->rank) {
            ck_err(c, args[0]->loc, "dimension %lld is out of range for '%s' (rank %d)", (long long)d, bt->name, bt->rank);
            return call->type = c->tt->t_error;
        }
        /* __tensor_size(t, d) */
        nb_expr *sz = ck_new_expr(c, NB_EX_CALL, call->loc);
        nb_expr *nm = ck_new_expr(c, NB_EX_NAME, call->loc);
        nb_expr **a2 = ck_alloc(c, sizeof(nb_expr *) * 2);
        nb_expr *dl = ck_new_expr(c, NB_EX_INT, call->loc);
        if (!sz || !nm || !a2 || !dl) return call->type = c->tt->t_error;
        nm->u.name.name = m[1] == 't' ? "__tensor_stride" : "__tensor_size"; /* (t.stride(d): in bytes, as Slang's) */
        dl->u.ilit.value = (uint64_t)d;
        a2[0] = base;
        a2[1] = dl;
        sz->u.call.callee = nm;
        sz->u.call.args = a2;
        sz->u.call.nargs = 2;
        if (!gd) {
            *slot = sz;
            return ck_expr(c, slot);
        }
        nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, call->loc);
        if (!as) return call->type = c->tt->t_error;
        as->u.assign.op = NB_TOK_ASSIGN;
        as->u.assign.lhs = args[0];
        as->u.assign.rhs = sz;
        *slot = as;
        return ck_expr(c, slot);
    }
    for (int i = 0; i < n; i++) ck_expr(c, &args[i]);
    ck_err(c, callee->loc, "'%s' has no method '%s' (tensors have load, store, loadOnce, storeOnce, size, InterlockedAdd%s)", bt->name, m,
           bt->buffer ? ", GetDimensions" : ", stride, dims, data_ptr");
    return call->type = c->tt->t_error;
}

/* ---- DiffTensorView members: .primal, .diff.diff ---------------------------------------------- */

static nb_expr *part_call(nb_checker *c, const char *fname, nb_expr *a, nb_expr *b, nb_loc loc) {
    nb_expr *call = ck_new_expr(c, NB_EX_CALL, loc);
    nb_expr *nm = ck_new_expr(c, NB_EX_NAME, loc);
    nb_expr **args = ck_alloc(c, sizeof(nb_expr *) * 2);
    if (!call || !nm || !args) return NULL;
    nm->u.name.name = fname;
    args[0] = a;
    args[1] = b;
    call->u.call.callee = nm;
    call->u.call.args = args;
    call->u.call.nargs = b ? 2 : 1;
    return call;
}

static int is_diff_view(const nb_type *t) { return t && t->kind == NB_TY_TENSOR && t->diff_tensor && !t->buffer; }

/* slang-torch's DiffTensorView is { TensorView<T> primal; AtomicAdd diff; } with the gradient view
 * in diff.diff. Here a DiffTensor carries both: v.primal is __tensor_primal(v) and v.diff.diff
 * __tensor_grad(v), Tensors of v's element type and rank (so .primal.data_ptr(), .diff.diff.
 * InterlockedAdd(…) are tensor methods). The AtomicAdd wrapper itself (v.diff alone) is not a
 * value in nabla. Returns NULL when *slot is not such a member. */
const nb_type *ck_view_member(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    const char *m = e->u.member.member;
    nb_expr *base = e->u.member.base;
    if (!m || !base || e->u.member.is_static) return NULL;
    if (!strcmp(m, "diff") && base->kind == NB_EX_MEMBER && base->u.member.member &&
        !strcmp(base->u.member.member, "diff") && base->u.member.base) {
        const nb_type *vt = ck_checked(base->u.member.base) ? base->u.member.base->type : ck_expr(c, &base->u.member.base);
        if (!is_diff_view(vt)) return NULL;
        nb_expr *call = part_call(c, "__tensor_grad", base->u.member.base, NULL, e->loc);
        if (!call) return e->type = c->tt->t_error;
        *slot = call;
        return ck_expr(c, slot);
    }
    if (strcmp(m, "primal") && strcmp(m, "diff")) return NULL;
    const nb_type *vt = ck_checked(base) ? base->type : ck_expr(c, &e->u.member.base);
    if (!is_diff_view(vt)) return NULL;
    if (m[0] == 'd') {
        ck_err(c, e->loc, "'.diff' of '%s' is slang-torch's AtomicAdd wrapper, which nabla has only through its "
               "gradient view '.diff.diff'", vt->name);
        return e->type = c->tt->t_error;
    }
    nb_expr *call = part_call(c, "__tensor_primal", e->u.member.base, NULL, e->loc);
    if (!call) return e->type = c->tt->t_error;
    *slot = call;
    return ck_expr(c, slot);
}

/* `v.diff.diff = g` (or `v.diff = …`): a DiffTensor's gradient comes with it from the host (a
 * (tensor, grad) pair), so assigning it is a diagnostic. Returns NULL when *slot is not that. */
const nb_type *ck_view_grad_assign(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    nb_expr *lhs = e->u.assign.lhs;
    if (!lhs || lhs->kind != NB_EX_MEMBER || !lhs->u.member.member || strcmp(lhs->u.member.member, "diff")) return NULL;
    nb_expr **vs = &lhs->u.member.base; /* v in `v.diff`, or in `v.diff.diff` */
    if (*vs && (*vs)->kind == NB_EX_MEMBER && (*vs)->u.member.member && !strcmp((*vs)->u.member.member, "diff"))
        vs = &(*vs)->u.member.base;
    if (!*vs || ck_checked(*vs)) return NULL;
    const nb_type *vt = ck_expr(c, vs); /* (checked in place: the rest of the assignment sees it checked) */
    if (!is_diff_view(vt)) return NULL;
    ck_err(c, e->loc, "the gradient of '%s' ('.diff' / '.diff.diff') cannot be assigned: it is bound with the tensor "
           "(a (tensor, grad) pair from the host)", vt->name);
    return e->type = c->tt->t_error;
}

/* `v.primal = t` with v a DiffTensor: v = __tensor_with_primal(v, t) (its gradient stays). Returns
 * NULL when *slot is not such an assignment. */
const nb_type *ck_view_primal_assign(nb_checker *c, nb_expr **slot, const nb_type *bt) {
    nb_expr *e = *slot;
    nb_expr *lhs = e->u.assign.lhs;
    if (!is_diff_view(bt) || strcmp(lhs->u.member.member, "primal")) return NULL;
    if (e->u.assign.op != NB_TOK_ASSIGN) {
        ck_err(c, e->loc, "'.primal' of a DiffTensorView is assigned a whole view: use '='");
        return e->type = c->tt->t_error;
    }
    if (!lhs->u.member.base->is_lvalue) {
        ck_err(c, lhs->loc, "'.primal' of this DiffTensorView is not assignable");
        return e->type = c->tt->t_error;
    }
    nb_expr *call = part_call(c, "__tensor_with_primal", lhs->u.member.base, e->u.assign.rhs, e->loc);
    if (!call) return e->type = c->tt->t_error;
    e->u.assign.lhs = lhs->u.member.base;
    e->u.assign.rhs = call;
    return ck_expr(c, slot);
}
