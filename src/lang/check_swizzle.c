/* Slang's (HLSL's) matrix element swizzles: `m._11` / `m._12_21` (1-based row and column) and
 * `m._m00` / `m._m01_m10` (0-based). One element is the place m[r][c] (assignable when m is);
 * several make a vector floatN(m[r0][c0], …), read-only, whose base must be a variable or a
 * field of one (it is read once per element).
 */
#include <string.h>

#include "lang/check_internal.h"

/* Parses the swizzle text into (row, col) pairs; returns the count, 0 if malformed, -1 if an
 * element is out of range (reported). */
static int parse_elems(nb_checker *c, nb_expr *e, const nb_type *mt, int rc[4][2]) {
    const char *s = e->u.member.member;
    int n = 0;
    while (*s) {
        if (s[0] != '_' || n == 4) return 0;
        int zero = s[1] == 'm';
        const char *d = s + 1 + zero;
        if (d[0] < '0' || d[0] > '9' || d[1] < '0' || d[1] > '9') return 0;
        int r = d[0] - '0' - !zero, col = d[1] - '0' - !zero;
        if (r < 0 || col < 0 || r >= mt->rows || col >= mt->cols) {
            ck_err(c, e->loc, "matrix swizzle element '%.*s' is out of range for '%s'", (int)(d + 2 - s), s,
                   mt->name);
            return -1;
        }
        rc[n][0] = r;
        rc[n][1] = col;
        n++;
        s = d + 2;
    }
    return n;
}

static nb_expr *int_lit(nb_checker *c, nb_loc loc, int v) {
    nb_expr *k = ck_new_expr(c, NB_EX_INT, loc);
    if (!k) return NULL;
    k->u.ilit.value = (uint64_t)v;
    k->type = c->tt->t_int;
    return k;
}

/* An unchecked copy of a variable / field chain (NAME, MEMBER, constant INDEX), or NULL. */
static nb_expr *copy_place(nb_checker *c, const nb_expr *b) {
    nb_expr *r = ck_new_expr(c, b->kind, b->loc);
    if (!r) return NULL;
    switch (b->kind) {
    case NB_EX_NAME: r->u.name = b->u.name; return r;
    case NB_EX_MEMBER:
        if (b->ref != NB_REF_FIELD) return NULL;
        r->u.member.member = b->u.member.member;
        r->u.member.base = copy_place(c, b->u.member.base);
        return r->u.member.base ? r : NULL;
    default: return NULL;
    }
}

/* m[r][c] over an already checked base of matrix type mt, checked. */
static nb_expr *elem(nb_checker *c, nb_expr *base, const nb_type *mt, int r, int col, nb_loc loc) {
    nb_expr *row = ck_new_expr(c, NB_EX_INDEX, loc), *x = ck_new_expr(c, NB_EX_INDEX, loc);
    nb_expr **ri = ck_alloc(c, sizeof *ri), **xi = ck_alloc(c, sizeof *xi);
    if (!row || !x || !ri || !xi) return NULL;
    ri[0] = int_lit(c, loc, r);
    xi[0] = int_lit(c, loc, col);
    row->u.index.base = base;
    row->u.index.indices = ri;
    row->u.index.nindices = 1;
    row->type = nb_type_vector(c->tt, mt->scalar, mt->cols);
    row->is_lvalue = base->is_lvalue;
    x->u.index.base = row;
    x->u.index.indices = xi;
    x->u.index.nindices = 1;
    x->type = nb_type_scalar(c->tt, mt->scalar);
    x->is_lvalue = base->is_lvalue;
    return x;
}

const nb_type *ck_matrix_swizzle(nb_checker *c, nb_expr **slot, const nb_type *mt) {
    nb_expr *e = *slot;
    int rc[4][2];
    int n = parse_elems(c, e, mt, rc);
    if (n < 0) return e->type = c->tt->t_error;
    if (n == 0) {
        ck_err(c, e->loc, "no member named '%s' in '%s' (matrix swizzles are '_11' .. '_44' or '_m00' .. '_m33')",
               e->u.member.member, mt->name);
        return e->type = c->tt->t_error;
    }
    if (n == 1) {
        nb_expr *x = elem(c, e->u.member.base, mt, rc[0][0], rc[0][1], e->loc);
        if (!x) return e->type = c->tt->t_error;
        *slot = x;
        return x->type;
    }
    /* several: floatN(m[r0][c0], …) over fresh copies of the base */
    nb_expr *call = ck_new_expr(c, NB_EX_CALL, e->loc), *callee = ck_new_expr(c, NB_EX_TYPE, e->loc);
    nb_type_expr *te = ck_alloc(c, sizeof *te);
    nb_expr **args = ck_alloc(c, sizeof *args * (size_t)n);
    if (!call || !callee || !te || !args) return e->type = c->tt->t_error;
    const nb_type *vt = nb_type_vector(c->tt, mt->scalar, n);
    te->loc = e->loc;
    te->name = vt->name;
    callee->u.type.texpr = te;
    for (int i = 0; i < n; i++) {
        nb_expr *b = copy_place(c, e->u.member.base);
        if (!b) {
            ck_err(c, e->loc, "a swizzle of several matrix elements ('%s') needs a variable or a field as its base; "
                   "store the value in a variable first", e->u.member.member);
            return e->type = c->tt->t_error;
        }
        nb_expr *row = ck_new_expr(c, NB_EX_INDEX, e->loc), *x = ck_new_expr(c, NB_EX_INDEX, e->loc);
        nb_expr **ri = ck_alloc(c, sizeof *ri), **xi = ck_alloc(c, sizeof *xi);
        if (!row || !x || !ri || !xi) return e->type = c->tt->t_error;
        ri[0] = int_lit(c, e->loc, rc[i][0]);
        xi[0] = int_lit(c, e->loc, rc[i][1]);
        row->u.index.base = b;
        row->u.index.indices = ri;
        row->u.index.nindices = 1;
        x->u.index.base = row;
        x->u.index.indices = xi;
        x->u.index.nindices = 1;
        args[i] = x;
    }
    call->u.call.callee = callee;
    call->u.call.args = args;
    call->u.call.nargs = n;
    *slot = call;
    return ck_expr(c, slot);
}

int ck_matrix_truncate_args(nb_checker *c, nb_expr *call, const nb_type *t) {
    nb_expr *src = call->u.call.args[0];
    const nb_type *st = src->type;
    static const char *const comps[] = {"x", "xy", "xyz", "xyzw"};
    nb_expr **args = ck_alloc(c, sizeof *args * (size_t)t->rows);
    if (!args) return 0;
    for (int r = 0; r < t->rows; r++) {
        nb_expr *b = copy_place(c, src);
        if (!b) {
            ck_err(c, src->loc, "a '%s' made from a larger '%s' needs a variable or a field as its argument; "
                   "store the value in a variable first", t->name, st->name);
            return 0;
        }
        nb_expr *row = ck_new_expr(c, NB_EX_INDEX, src->loc), *sw = ck_new_expr(c, NB_EX_MEMBER, src->loc);
        nb_expr **ri = ck_alloc(c, sizeof *ri);
        if (!row || !sw || !ri) return 0;
        ri[0] = int_lit(c, src->loc, r);
        row->u.index.base = b;
        row->u.index.indices = ri;
        row->u.index.nindices = 1;
        sw->u.member.base = row;
        sw->u.member.member = comps[t->cols - 1];
        args[r] = sw;
    }
    call->u.call.args = args;
    call->u.call.nargs = t->rows;
    call->u.call.arg_names = NULL;
    return 1;
}
