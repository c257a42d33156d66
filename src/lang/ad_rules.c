/* Derivative rules of the intrinsics (lang/intrinsics.h ids), shared by forward mode (JVP: result
 * tangent from operand tangents) and reverse mode (VJP: operand adjoints from the result adjoint).
 *
 * Elementwise intrinsics are described once by their partial derivatives ∂f/∂x_i (a value of the
 * result type, computed from the primal operands and result); JVP = Σ ∂f/∂x_i · dx_i and
 * VJP_i = ∂f/∂x_i · adj. Geometry and matrix intrinsics have explicit JVP/VJP pairs.
 * Intrinsics marked NB_IDIFF_ZERO (floor, sign, step, …) have zero derivatives.
 */
#include <math.h>
#include <string.h>

#include "lang/ad.h"
#include "lang/intrinsics.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#ifndef M_LN2
#define M_LN2 0.69314718055994530942
#endif
#ifndef M_LN10
#define M_LN10 2.30258509299404568402
#endif

/* ---- small builders ---------------------------------------------------------------------- */

nb_ir_inst *nb_ad_k(nb_ir_builder *b, const nb_type *t, double v) { return nb_ir_const_f(b, t, v); }

/* Brings a and c to one type: a scalar is splatted to the other's vector/matrix type. */
static void unify(nb_ir_builder *b, nb_ir_inst **a, nb_ir_inst **c)
{
    if ((*a)->type == (*c)->type) return;
    if ((*a)->type->kind == NB_TY_SCALAR) *a = nb_ir_convert(b, *a, (*c)->type);
    else if ((*c)->type->kind == NB_TY_SCALAR) *c = nb_ir_convert(b, *c, (*a)->type);
}

nb_ir_inst *nb_ad_add(nb_ir_builder *b, nb_ir_inst *a, nb_ir_inst *c)
{
    if (!a) return c;
    if (!c) return a;
    unify(b, &a, &c);
    return nb_ir_binary(b, NB_IR_ADD, a, c);
}

nb_ir_inst *nb_ad_sub(nb_ir_builder *b, nb_ir_inst *a, nb_ir_inst *c)
{
    if (!c) return a;
    if (!a) return nb_ir_unary(b, NB_IR_NEG, c);
    unify(b, &a, &c);
    return nb_ir_binary(b, NB_IR_SUB, a, c);
}

nb_ir_inst *nb_ad_mul(nb_ir_builder *b, nb_ir_inst *a, nb_ir_inst *c)
{
    if (!a || !c) return NULL;
    unify(b, &a, &c);
    return nb_ir_binary(b, NB_IR_MUL, a, c);
}

nb_ir_inst *nb_ad_neg(nb_ir_builder *b, nb_ir_inst *a) { return a ? nb_ir_unary(b, NB_IR_NEG, a) : NULL; }

static nb_ir_inst *divi(nb_ir_builder *b, nb_ir_inst *a, nb_ir_inst *c)
{
    unify(b, &a, &c);
    return nb_ir_binary(b, NB_IR_DIV, a, c);
}

static nb_ir_inst *in1(nb_ir_builder *b, int id, nb_ir_inst *x) { return nb_ir_intrin(b, id, x->type, &x, 1); }

static nb_ir_inst *in2(nb_ir_builder *b, int id, const nb_type *t, nb_ir_inst *x, nb_ir_inst *y)
{
    nb_ir_inst *o[2] = {x, y};
    return nb_ir_intrin(b, id, t, o, 2);
}

static nb_ir_inst *cmp(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *a, nb_ir_inst *c)
{
    unify(b, &a, &c);
    return nb_ir_binary(b, op, a, c);
}

/* select(cond, 1, 0) of type t */
static nb_ir_inst *ind(nb_ir_builder *b, nb_ir_inst *cond, const nb_type *t)
{
    return nb_ir_select(b, cond, nb_ad_k(b, t, 1.0), nb_ad_k(b, t, 0.0));
}

static nb_ir_inst *dot(nb_ir_builder *b, nb_ir_inst *x, nb_ir_inst *y)
{
    if (x->type->kind == NB_TY_SCALAR) return nb_ir_binary(b, NB_IR_MUL, x, y);
    const nb_type *st = nb_type_scalar(b->m->types, nb_type_elem_scalar(x->type));
    return in2(b, NB_INTR_DOT, st, x, y);
}

/* Sum of all components of x (scalar, vector or matrix). */
static nb_ir_inst *sum_all(nb_ir_builder *b, nb_ir_inst *x)
{
    const nb_type *t = x->type;
    if (t->kind == NB_TY_SCALAR) return x;
    if (t->kind == NB_TY_VECTOR) return dot(b, x, nb_ad_k(b, t, 1.0));
    nb_ir_inst *s = NULL;
    for (int r = 0; r < t->rows; r++) s = nb_ad_add(b, s, sum_all(b, nb_ir_extract(b, x, r)));
    return s;
}

nb_ir_inst *nb_ad_sum_all(nb_ir_builder *b, nb_ir_inst *x) { return sum_all(b, x); }

/* outer(u, v): matrix rows u[i] * v */
static nb_ir_inst *outer(nb_ir_builder *b, nb_ir_inst *u, nb_ir_inst *v, const nb_type *mt)
{
    nb_ir_inst *comps[16];
    int n = 0;
    for (int i = 0; i < mt->rows; i++) {
        nb_ir_inst *ui = u->type->kind == NB_TY_SCALAR ? u : nb_ir_extract(b, u, i);
        for (int j = 0; j < mt->cols; j++) {
            nb_ir_inst *vj = v->type->kind == NB_TY_SCALAR ? v : nb_ir_extract(b, v, j);
            comps[n++] = nb_ir_binary(b, NB_IR_MUL, ui, vj);
        }
    }
    return nb_ir_construct(b, mt, comps, n);
}

static nb_ir_inst *mulm(nb_ir_builder *b, nb_ir_inst *x, nb_ir_inst *y, const nb_type *rt)
{
    return in2(b, NB_INTR_MUL, rt, x, y);
}

static nb_ir_inst *transp(nb_ir_builder *b, nb_ir_inst *x)
{
    const nb_type *t = nb_type_matrix(b->m->types, x->type->scalar, x->type->cols, x->type->rows);
    return nb_ir_intrin(b, NB_INTR_TRANSPOSE, t, &x, 1);
}

/* Cofactor matrix of a square matrix (∂det/∂A). */
static nb_ir_inst *cofactor(nb_ir_builder *b, nb_ir_inst *A)
{
    const nb_type *t = A->type;
    int n = t->rows;
    nb_ir_inst *c[16], *el[4][4];
    for (int i = 0; i < n; i++) {
        nb_ir_inst *row = nb_ir_extract(b, A, i);
        for (int j = 0; j < n; j++) el[i][j] = nb_ir_extract(b, row, j);
    }
    const nb_type *st = nb_type_scalar(b->m->types, t->scalar);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            nb_ir_inst *minor;
            if (n == 2) minor = el[1 - i][1 - j];
            else {
                nb_ir_inst *mc[9];
                int k = 0;
                for (int r = 0; r < n; r++)
                    for (int q = 0; q < n; q++)
                        if (r != i && q != j) mc[k++] = el[r][q];
                const nb_type *mt = nb_type_matrix(b->m->types, t->scalar, n - 1, n - 1);
                nb_ir_inst *M = nb_ir_construct(b, mt, mc, k);
                minor = nb_ir_intrin(b, NB_INTR_DETERMINANT, st, &M, 1);
            }
            c[i * n + j] = ((i + j) & 1) ? nb_ir_unary(b, NB_IR_NEG, minor) : minor;
        }
    return nb_ir_construct(b, t, c, n * n);
}

/* ---- elementwise partials ---------------------------------------------------------------- */

static int is_elementwise(int id)
{
    const nb_intrinsic_info *in = nb_intrinsic_get(id);
    if (!in) return 0;
    switch (in->sig) {
    case NB_ISIG_FLOAT_UNARY: case NB_ISIG_FLOAT_BINARY: case NB_ISIG_FLOAT_TERNARY:
    case NB_ISIG_NUM_UNARY: case NB_ISIG_NUM_BINARY: case NB_ISIG_NUM_TERNARY:
        return 1;
    default:
        return 0;
    }
}

/* ∂f/∂x[i] (type of the result), or NULL for zero. */
static nb_ir_inst *partial(nb_ir_builder *b, int id, nb_ir_inst *r, nb_ir_inst **x, int i)
{
    const nb_type *t = r->type;
#define K(v) nb_ad_k(b, t, (v))
    switch (id) {
    case NB_INTR_EXP: return r;
    case NB_INTR_EXP2: return nb_ad_mul(b, r, K(M_LN2));
    case NB_INTR_LOG: return divi(b, K(1.0), x[0]);
    case NB_INTR_LOG2: return divi(b, K(1.0 / M_LN2), x[0]);
    case NB_INTR_LOG10: return divi(b, K(1.0 / M_LN10), x[0]);
    case NB_INTR_SQRT: /* Slang: 0.5 / sqrt(max(1e-7, x)), finite at 0 */
        return divi(b, K(0.5), in1(b, NB_INTR_SQRT, in2(b, NB_INTR_MAX, t, x[0], K(1e-7))));
    case NB_INTR_RSQRT: return nb_ad_mul(b, K(-0.5), divi(b, r, x[0]));
    case NB_INTR_RCP: return nb_ir_unary(b, NB_IR_NEG, nb_ad_mul(b, r, r));
    case NB_INTR_SIN: return in1(b, NB_INTR_COS, x[0]);
    case NB_INTR_COS: return nb_ir_unary(b, NB_IR_NEG, in1(b, NB_INTR_SIN, x[0]));
    case NB_INTR_TAN: return nb_ad_add(b, K(1.0), nb_ad_mul(b, r, r));
    case NB_INTR_ASIN: return in1(b, NB_INTR_RSQRT, nb_ad_sub(b, K(1.0), nb_ad_mul(b, x[0], x[0])));
    case NB_INTR_ACOS:
        return nb_ir_unary(b, NB_IR_NEG, in1(b, NB_INTR_RSQRT, nb_ad_sub(b, K(1.0), nb_ad_mul(b, x[0], x[0]))));
    case NB_INTR_ATAN: return divi(b, K(1.0), nb_ad_add(b, K(1.0), nb_ad_mul(b, x[0], x[0])));
    case NB_INTR_SINH: return in1(b, NB_INTR_COSH, x[0]);
    case NB_INTR_COSH: return in1(b, NB_INTR_SINH, x[0]);
    case NB_INTR_TANH: return nb_ad_sub(b, K(1.0), nb_ad_mul(b, r, r));
    case NB_INTR_ASINH: return in1(b, NB_INTR_RSQRT, nb_ad_add(b, nb_ad_mul(b, x[0], x[0]), K(1.0)));
    case NB_INTR_ACOSH: return in1(b, NB_INTR_RSQRT, nb_ad_sub(b, nb_ad_mul(b, x[0], x[0]), K(1.0)));
    case NB_INTR_ATANH: return divi(b, K(1.0), nb_ad_sub(b, K(1.0), nb_ad_mul(b, x[0], x[0])));
    case NB_INTR_FRAC: return K(1.0);
    case NB_INTR_SATURATE: return ind(b, cmp(b, NB_IR_EQ, r, x[0]), t); /* 1 inside [0, 1] */
    case NB_INTR_RADIANS: return K(M_PI / 180.0);
    case NB_INTR_DEGREES: return K(180.0 / M_PI);
    case NB_INTR_ABS: return in1(b, NB_INTR_SIGN, x[0]);
    case NB_INTR_MIN: /* x < y ? dx : x > y ? dy : (dx + dy) / 2 (Slang: a tie splits the gradient) */
    case NB_INTR_MAX: {
        nb_ir_op win = id == NB_INTR_MIN ? NB_IR_LT : NB_IR_GT, lose = id == NB_INTR_MIN ? NB_IR_GT : NB_IR_LT;
        nb_ir_inst *me = x[i], *other = x[1 - i];
        return nb_ir_select(b, cmp(b, win, me, other), K(1.0),
                            nb_ir_select(b, cmp(b, lose, me, other), K(0.0), K(0.5)));
    }
    case NB_INTR_CLAMP: { /* x < lo ? dlo : x > hi ? dhi : dx */
        nb_ir_inst *lo = cmp(b, NB_IR_LT, x[0], x[1]);
        nb_ir_inst *hi = cmp(b, NB_IR_GT, x[0], x[2]);
        if (i == 1) return ind(b, lo, t);
        nb_ir_inst *nlo = nb_ir_unary(b, NB_IR_NOT, lo);
        if (i == 2) return nb_ir_select(b, nlo, ind(b, hi, t), K(0.0));
        return nb_ir_select(b, nlo, ind(b, nb_ir_unary(b, NB_IR_NOT, hi), t), K(0.0));
    }
    case NB_INTR_POW: { /* d/da = b a^(b-1); d/db = r log a; both 0 where a < 1e-6 (Slang's rule) */
        nb_ir_inst *pos = cmp(b, NB_IR_GE, x[0], K(1e-6));
        nb_ir_inst *safe = nb_ir_select(b, pos, x[0], K(1.0));
        if (i == 0) {
            nb_ir_inst *o[2] = {safe, nb_ad_sub(b, x[1], K(1.0))};
            return nb_ir_select(b, pos, nb_ad_mul(b, x[1], nb_ir_intrin(b, NB_INTR_POW, t, o, 2)), K(0.0));
        }
        return nb_ir_select(b, pos, nb_ad_mul(b, r, in1(b, NB_INTR_LOG, safe)), K(0.0));
    }
    case NB_INTR_ATAN2: { /* atan2(y, x): dy * x/(x²+y²) - dx * y/(x²+y²) */
        nb_ir_inst *den = nb_ad_add(b, nb_ad_mul(b, x[0], x[0]), nb_ad_mul(b, x[1], x[1]));
        return i == 0 ? divi(b, x[1], den) : divi(b, nb_ir_unary(b, NB_IR_NEG, x[0]), den);
    }
    case NB_INTR_COPYSIGN: /* |x| with y's sign: d/dx = sign(x) sign(y) (0 at x = 0, as Slang), d/dy = 0 */
        if (i == 1) return NULL;
        return nb_ad_mul(b, in1(b, NB_INTR_SIGN, x[0]), in1(b, NB_INTR_SIGN, x[1]));
    case NB_INTR_FMOD: /* a - trunc(a/b) b */
        if (i == 0) return K(1.0);
        return nb_ir_unary(b, NB_IR_NEG, in1(b, NB_INTR_TRUNC, divi(b, x[0], x[1])));
    case NB_INTR_LERP: /* a + (b - a) t */
        if (i == 0) return nb_ad_sub(b, K(1.0), x[2]);
        if (i == 1) return x[2];
        return nb_ad_sub(b, x[1], x[0]);
    case NB_INTR_SMOOTHSTEP: { /* t = saturate((x-e0)/(e1-e0)); r = t²(3-2t); dr/dt = 6t(1-t) */
        nb_ir_inst *w = nb_ad_sub(b, x[1], x[0]);
        nb_ir_inst *tt = in1(b, NB_INTR_SATURATE, divi(b, nb_ad_sub(b, x[2], x[0]), w));
        nb_ir_inst *g = nb_ad_mul(b, nb_ad_mul(b, K(6.0), tt), nb_ad_sub(b, K(1.0), tt));
        if (i == 2) return divi(b, g, w);
        if (i == 0) return nb_ad_mul(b, g, divi(b, nb_ad_sub(b, x[2], x[1]), nb_ad_mul(b, w, w)));
        return nb_ad_mul(b, g, divi(b, nb_ad_neg(b, nb_ad_sub(b, x[2], x[0])), nb_ad_mul(b, w, w)));
    }
    case NB_INTR_MAD: case NB_INTR_FMA:
        if (i == 0) return x[1];
        if (i == 1) return x[0];
        return K(1.0);
    default:
        return NULL;
    }
#undef K
}

/* ---- public ------------------------------------------------------------------------------ */

int nb_ad_has_rule(int id)
{
    const nb_intrinsic_info *in = nb_intrinsic_get(id);
    if (!in) return 0;
    if (in->diff == NB_IDIFF_ZERO) return 1;
    if (in->diff != NB_IDIFF_RULE) return 0;
    return id != NB_INTR_ATOMIC_ADD;
}

int nb_ad_jvp(nb_ir_builder *b, int id, nb_ir_inst *res, nb_ir_inst **x, int n, nb_ir_inst **dx, nb_ir_inst **out)
{
    *out = NULL;
    if (!nb_ad_has_rule(id)) return -1;
    const nb_intrinsic_info *info = nb_intrinsic_get(id);
    if (info->diff == NB_IDIFF_ZERO || !nb_type_is_float_based(res->type)) return 0;
    if (is_elementwise(id)) {
        nb_ir_inst *acc = NULL;
        for (int i = 0; i < n; i++) {
            if (!dx[i]) continue;
            nb_ir_inst *p = partial(b, id, res, x, i);
            if (p) acc = nb_ad_add(b, acc, nb_ad_mul(b, p, dx[i]));
        }
        *out = acc;
        return 0;
    }
    const nb_type *rt = res->type;
    switch (id) {
    case NB_INTR_DOT:
        *out = nb_ad_add(b, dx[0] ? dot(b, dx[0], x[1]) : NULL, dx[1] ? dot(b, x[0], dx[1]) : NULL);
        return 0;
    case NB_INTR_CROSS:
        *out = nb_ad_add(b, dx[0] ? in2(b, NB_INTR_CROSS, rt, dx[0], x[1]) : NULL,
                         dx[1] ? in2(b, NB_INTR_CROSS, rt, x[0], dx[1]) : NULL);
        return 0;
    case NB_INTR_LENGTH:
        if (dx[0]) *out = divi(b, dot(b, x[0], dx[0]), res);
        return 0;
    case NB_INTR_DISTANCE: {
        nb_ir_inst *dd = nb_ad_sub(b, dx[0], dx[1]);
        if (dd) *out = divi(b, dot(b, nb_ad_sub(b, x[0], x[1]), dd), res);
        return 0;
    }
    case NB_INTR_NORMALIZE: {
        if (!dx[0] || rt->kind == NB_TY_SCALAR) return 0;
        nb_ir_inst *len = nb_ir_intrin(b, NB_INTR_LENGTH, nb_type_scalar(b->m->types, rt->scalar), &x[0], 1);
        *out = divi(b, nb_ad_sub(b, dx[0], nb_ad_mul(b, res, dot(b, res, dx[0]))), len);
        return 0;
    }
    case NB_INTR_REFLECT: { /* i - 2 dot(n,i) n */
        nb_ir_inst *s = dot(b, x[1], x[0]);
        nb_ir_inst *ds = nb_ad_add(b, dx[1] ? dot(b, dx[1], x[0]) : NULL, dx[0] ? dot(b, x[1], dx[0]) : NULL);
        nb_ir_inst *t = dx[0];
        if (ds) t = nb_ad_sub(b, t, nb_ad_mul(b, nb_ad_mul(b, nb_ad_k(b, ds->type, 2.0), ds), x[1]));
        if (dx[1]) t = nb_ad_sub(b, t, nb_ad_mul(b, nb_ad_mul(b, nb_ad_k(b, s->type, 2.0), s), dx[1]));
        *out = t;
        return 0;
    }
    case NB_INTR_SELECT:
        if (!dx[1] && !dx[2]) return 0;
        *out = nb_ir_select(b, x[0], dx[1] ? dx[1] : nb_ir_zero(b, rt), dx[2] ? dx[2] : nb_ir_zero(b, rt));
        return 0;
    case NB_INTR_MUL: {
        nb_ir_inst *a = NULL, *c = NULL;
        if (x[0]->type->kind == NB_TY_SCALAR || x[1]->type->kind == NB_TY_SCALAR) {
            if (dx[0]) a = nb_ad_mul(b, dx[0], x[1]);
            if (dx[1]) c = nb_ad_mul(b, x[0], dx[1]);
        } else {
            if (dx[0]) a = mulm(b, dx[0], x[1], rt);
            if (dx[1]) c = mulm(b, x[0], dx[1], rt);
        }
        *out = nb_ad_add(b, a, c);
        return 0;
    }
    case NB_INTR_TRANSPOSE:
        if (dx[0]) *out = transp(b, dx[0]);
        return 0;
    case NB_INTR_DETERMINANT:
        if (dx[0]) *out = sum_all(b, nb_ad_mul(b, cofactor(b, x[0]), dx[0]));
        return 0;
    default:
        return -1;
    }
}

int nb_ad_vjp(nb_ir_builder *b, int id, nb_ir_inst *res, nb_ir_inst **x, int n, nb_ir_inst *adj, nb_ir_inst **g)
{
    for (int i = 0; i < n; i++) g[i] = NULL;
    if (!nb_ad_has_rule(id)) return -1;
    const nb_intrinsic_info *info = nb_intrinsic_get(id);
    if (info->diff == NB_IDIFF_ZERO || !nb_type_is_float_based(res->type)) return 0;
    if (is_elementwise(id)) {
        for (int i = 0; i < n; i++) {
            if (!nb_type_is_float_based(x[i]->type)) continue;
            nb_ir_inst *p = partial(b, id, res, x, i);
            if (p) g[i] = nb_ad_mul(b, p, adj);
        }
        return 0;
    }
    const nb_type *rt = res->type;
    switch (id) {
    case NB_INTR_DOT:
        if (!nb_type_is_float_based(x[0]->type)) return 0;
        g[0] = nb_ad_mul(b, adj, x[1]);
        g[1] = nb_ad_mul(b, adj, x[0]);
        return 0;
    case NB_INTR_CROSS:
        g[0] = in2(b, NB_INTR_CROSS, rt, x[1], adj);
        g[1] = in2(b, NB_INTR_CROSS, rt, adj, x[0]);
        return 0;
    case NB_INTR_LENGTH:
        g[0] = nb_ad_mul(b, divi(b, adj, res), x[0]);
        return 0;
    case NB_INTR_DISTANCE:
        g[0] = nb_ad_mul(b, divi(b, adj, res), nb_ad_sub(b, x[0], x[1]));
        g[1] = nb_ad_neg(b, g[0]);
        return 0;
    case NB_INTR_NORMALIZE: {
        if (rt->kind == NB_TY_SCALAR) return 0;
        nb_ir_inst *len = nb_ir_intrin(b, NB_INTR_LENGTH, nb_type_scalar(b->m->types, rt->scalar), &x[0], 1);
        g[0] = divi(b, nb_ad_sub(b, adj, nb_ad_mul(b, res, dot(b, res, adj))), len);
        return 0;
    }
    case NB_INTR_REFLECT: { /* f = i - 2 s n, s = n·i */
        nb_ir_inst *s = dot(b, x[1], x[0]);
        nb_ir_inst *na = dot(b, x[1], adj);
        nb_ir_inst *two = nb_ad_k(b, s->type, 2.0);
        g[0] = nb_ad_sub(b, adj, nb_ad_mul(b, nb_ad_mul(b, two, na), x[1]));
        g[1] = nb_ad_neg(b, nb_ad_mul(b, two, nb_ad_add(b, nb_ad_mul(b, x[0], na), nb_ad_mul(b, adj, s))));
        return 0;
    }
    case NB_INTR_SELECT:
        g[1] = nb_ir_select(b, x[0], adj, nb_ir_zero(b, rt));
        g[2] = nb_ir_select(b, x[0], nb_ir_zero(b, rt), adj);
        return 0;
    case NB_INTR_MUL: {
        const nb_type *at = x[0]->type, *bt = x[1]->type;
        if (at->kind == NB_TY_SCALAR && bt->kind == NB_TY_SCALAR) {
            g[0] = nb_ad_mul(b, adj, x[1]);
            g[1] = nb_ad_mul(b, adj, x[0]);
        } else if (at->kind == NB_TY_SCALAR) {
            g[0] = sum_all(b, nb_ad_mul(b, adj, x[1]));
            g[1] = nb_ad_mul(b, adj, x[0]);
        } else if (bt->kind == NB_TY_SCALAR) {
            g[0] = nb_ad_mul(b, adj, x[1]);
            g[1] = sum_all(b, nb_ad_mul(b, adj, x[0]));
        } else if (at->kind == NB_TY_VECTOR && bt->kind == NB_TY_VECTOR) {
            g[0] = nb_ad_mul(b, adj, x[1]);
            g[1] = nb_ad_mul(b, adj, x[0]);
        } else if (at->kind == NB_TY_VECTOR) { /* a[K] * B[KxN] -> [N] */
            g[0] = mulm(b, x[1], adj, at);
            g[1] = outer(b, x[0], adj, bt);
        } else if (bt->kind == NB_TY_VECTOR) { /* A[MxK] * b[K] -> [M] */
            g[0] = outer(b, adj, x[1], at);
            g[1] = mulm(b, adj, x[0], bt);
        } else { /* A[MxK] B[KxN] */
            g[0] = mulm(b, adj, transp(b, x[1]), at);
            if (at->rows <= 4) g[1] = mulm(b, transp(b, x[0]), adj, bt);
            else /* A^T (KxM) would need M-component rows: sum the rows' outer products instead */
                for (int i = 0; i < at->rows; i++)
                    g[1] = nb_ad_add(b, g[1], outer(b, nb_ir_extract(b, x[0], i), nb_ir_extract(b, adj, i), bt));
        }
        return 0;
    }
    case NB_INTR_TRANSPOSE:
        g[0] = transp(b, adj);
        return 0;
    case NB_INTR_DETERMINANT:
        g[0] = nb_ad_mul(b, adj, cofactor(b, x[0]));
        return 0;
    default:
        return -1;
    }
}
