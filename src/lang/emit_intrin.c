/* C / CUDA C emitter: intrinsics (libm calls, scalar intrinsic text, and elementwise, geometry
 * and matrix helpers over vectors and matrices), split from emit_c.c. */
#include "lang/emit_c.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lang/intrinsics.h"
#include "nabla/alloc.h"

#define APPEND(sb, ...) nb_strbuf_printf((sb), __VA_ARGS__)

/* ---- intrinsics -------------------------------------------------------------------------- */

/* Direct libm function for a float elementwise intrinsic, or NULL. */
static const char *libm_name(nb_emitter *e, int id)
{
    switch (id) {
    case NB_INTR_EXP: return "exp";
    case NB_INTR_EXP2: return "exp2";
    case NB_INTR_LOG: return "log";
    case NB_INTR_LOG2: return "log2";
    case NB_INTR_LOG10: return "log10";
    case NB_INTR_SQRT: return "sqrt";
    case NB_INTR_RSQRT: return e->target == NB_TARGET_CUDA ? "rsqrt" : NULL;
    case NB_INTR_SIN: return "sin";
    case NB_INTR_COS: return "cos";
    case NB_INTR_TAN: return "tan";
    case NB_INTR_ASIN: return "asin";
    case NB_INTR_ACOS: return "acos";
    case NB_INTR_ATAN: return "atan";
    case NB_INTR_SINH: return "sinh";
    case NB_INTR_COSH: return "cosh";
    case NB_INTR_TANH: return "tanh";
    case NB_INTR_ASINH: return "asinh";
    case NB_INTR_ACOSH: return "acosh";
    case NB_INTR_ATANH: return "atanh";
    case NB_INTR_FLOOR: return "floor";
    case NB_INTR_CEIL: return "ceil";
    case NB_INTR_ROUND: return "round";
    case NB_INTR_TRUNC: return "trunc";
    case NB_INTR_POW: return "pow";
    case NB_INTR_ATAN2: return "atan2";
    case NB_INTR_FMOD: return "fmod";
    case NB_INTR_COPYSIGN: return "copysign";
    case NB_INTR_FMA: return "fma";
    default: return NULL;
    }
}

/* Scalar expression of an elementwise intrinsic over scalar operands a[] (each may be repeated:
 * the callers pass parameter names). */
static void scalar_intrin_text(nb_emitter *e, int id, nb_scalar_kind s, const char *const *a, nb_strbuf *o)
{
    char fn[32], fn2[32];
    const char *m = libm_name(e, id);
    int fl = nb_emit_is_float_scalar(s);
    const char *one = s == NB_SC_DOUBLE ? "1.0" : "1.0f";
    const char *zero = s == NB_SC_DOUBLE ? "0.0" : "0.0f";
    if (m && fl) {
        const nb_intrinsic_info *info = nb_intrinsic_get(id);
        int n = info ? info->max_args : 1;
        APPEND(o, "%s(%s", nb_emit_math_fn(s, m, fn, sizeof fn), a[0]);
        for (int i = 1; i < n; i++) APPEND(o, ", %s", a[i]);
        nb_strbuf_append_char(o, ')');
        return;
    }
    switch (id) {
    case NB_INTR_RSQRT: APPEND(o, "%s / %s(%s)", one, nb_emit_math_fn(s, "sqrt", fn, sizeof fn), a[0]); return;
    case NB_INTR_RCP: APPEND(o, "%s / (%s)", one, a[0]); return;
    case NB_INTR_FRAC: APPEND(o, "%s - %s(%s)", a[0], nb_emit_math_fn(s, "floor", fn, sizeof fn), a[0]); return;
    case NB_INTR_SATURATE:
        APPEND(o, "%s(%s(%s, %s), %s)", nb_emit_math_fn(s, "fmin", fn, sizeof fn), nb_emit_math_fn(s, "fmax", fn2, sizeof fn2), a[0], zero, one);
        return;
    case NB_INTR_RADIANS: APPEND(o, "(%s) * (%s)", a[0], s == NB_SC_DOUBLE ? "0.017453292519943295" : "0.0174532925f"); return;
    case NB_INTR_DEGREES: APPEND(o, "(%s) * (%s)", a[0], s == NB_SC_DOUBLE ? "57.295779513082323" : "57.2957795f"); return;
    case NB_INTR_ABS:
        if (fl) APPEND(o, "%s(%s)", nb_emit_math_fn(s, "fabs", fn, sizeof fn), a[0]);
        else if (s == NB_SC_UINT || s == NB_SC_UINT64) APPEND(o, "%s", a[0]);
        else APPEND(o, "(%s < 0 ? -%s : %s)", a[0], a[0], a[0]);
        return;
    case NB_INTR_SIGN:
        if (fl) APPEND(o, "(%s > 0 ? %s : (%s < 0 ? -%s : %s))", a[0], one, a[0], one, zero);
        else APPEND(o, "(%s > 0 ? 1 : (%s < 0 ? -1 : 0))", a[0], a[0]);
        return;
    case NB_INTR_MIN:
        if (fl) APPEND(o, "%s(%s, %s)", nb_emit_math_fn(s, "fmin", fn, sizeof fn), a[0], a[1]);
        else APPEND(o, "(%s < %s ? %s : %s)", a[0], a[1], a[0], a[1]);
        return;
    case NB_INTR_MAX:
        if (fl) APPEND(o, "%s(%s, %s)", nb_emit_math_fn(s, "fmax", fn, sizeof fn), a[0], a[1]);
        else APPEND(o, "(%s > %s ? %s : %s)", a[0], a[1], a[0], a[1]);
        return;
    case NB_INTR_CLAMP:
        if (fl) APPEND(o, "%s(%s(%s, %s), %s)", nb_emit_math_fn(s, "fmin", fn, sizeof fn), nb_emit_math_fn(s, "fmax", fn2, sizeof fn2), a[0], a[1], a[2]);
        else APPEND(o, "(%s < %s ? %s : (%s > %s ? %s : %s))", a[0], a[1], a[1], a[0], a[2], a[2], a[0]);
        return;
    case NB_INTR_STEP: APPEND(o, "(%s >= %s ? %s : %s)", a[1], a[0], one, zero); return;
    case NB_INTR_LERP: APPEND(o, "%s + (%s - %s) * %s", a[0], a[1], a[0], a[2]); return;
    case NB_INTR_SMOOTHSTEP:
        APPEND(o, "nb_smoothstep_%s(%s, %s, %s)", s == NB_SC_DOUBLE ? "double" : "float", a[0], a[1], a[2]);
        return;
    case NB_INTR_MAD: APPEND(o, "%s * %s + %s", a[0], a[1], a[2]); return;
    case NB_INTR_ISNAN: APPEND(o, "(%s != %s)", a[0], a[0]); return;
    case NB_INTR_ISINF: APPEND(o, "(%s(%s) == (%s)INFINITY_)", nb_emit_math_fn(s, "fabs", fn, sizeof fn), a[0], nb_emit_scalar_ctype(s)); return;
    case NB_INTR_ISFINITE: APPEND(o, "(%s - %s == %s - %s)", a[0], a[0], a[0], a[0]); return;
    /* bit casts: between int and uint the value's bits are kept by the C conversion itself */
    case NB_INTR_ASFLOAT:
        if (s == NB_SC_FLOAT) { APPEND(o, "%s", a[0]); return; }
        nb_emit_need_bits(e);
        APPEND(o, "nb_bits_f32((unsigned)%s)", a[0]);
        return;
    case NB_INTR_ASINT:
        if (s != NB_SC_FLOAT) { APPEND(o, "(int)%s", a[0]); return; }
        nb_emit_need_bits(e);
        APPEND(o, "(int)nb_f32_bits(%s)", a[0]);
        return;
    case NB_INTR_ASUINT:
        if (s != NB_SC_FLOAT) { APPEND(o, "(unsigned)%s", a[0]); return; }
        nb_emit_need_bits(e);
        APPEND(o, "nb_f32_bits(%s)", a[0]);
        return;
    case NB_INTR_DETACH: APPEND(o, "%s", a[0]); return;
    default:
        nb_emit_fail(e, "intrinsic '%s' is not supported by the C emitter", nb_intrinsic_name(id));
        APPEND(o, "0");
        return;
    }
}

static void need_smoothstep(nb_emitter *e, nb_scalar_kind s)
{
    const char *t = s == NB_SC_DOUBLE ? "double" : "float";
    char nm[64];
    snprintf(nm, sizeof nm, "nb_smoothstep_%s", t);
    if (!nb_emit_need_helper(e, nm)) return;
    APPEND(&e->helpers,
           "%s %s %s(%s lo, %s hi, %s x) {\n    %s t = (x - lo) / (hi - lo);\n    t = t < 0 ? 0 : (t > 1 ? 1 : t);\n"
           "    return t * t * (3 - 2 * t);\n}\n",
           nb_emit_inline_kw(e), t, nm, t, t, t, t);
}

static void need_infinity(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "INFINITY_")) return;
    if (e->target == NB_TARGET_CUDA) APPEND(&e->types, "#define INFINITY_ __int_as_float(0x7f800000)\n");
    else APPEND(&e->types, "#define INFINITY_ INFINITY\n");
}

/* Does the scalar text repeat an operand (so a top-level use needs a helper)? */
static int text_is_direct(nb_emitter *e, int id, nb_scalar_kind s)
{
    if (libm_name(e, id) && nb_emit_is_float_scalar(s)) return 1;
    return id == NB_INTR_RCP || id == NB_INTR_RADIANS || id == NB_INTR_DEGREES || id == NB_INTR_DETACH ||
           id == NB_INTR_ASFLOAT || id == NB_INTR_ASINT || id == NB_INTR_ASUINT ||
           (id == NB_INTR_ABS && nb_emit_is_float_scalar(s)) || (id == NB_INTR_MIN && nb_emit_is_float_scalar(s)) ||
           (id == NB_INTR_MAX && nb_emit_is_float_scalar(s)) || (id == NB_INTR_SATURATE) ||
           (id == NB_INTR_CLAMP && nb_emit_is_float_scalar(s)) || id == NB_INTR_SMOOTHSTEP;
}

/* Elementwise intrinsic helper over vectors/matrices (or a scalar helper for non-direct forms). */
static const char *elementwise_helper(nb_emitter *e, int id, const nb_type *rt, const nb_type *const *at, int n)
{
    char nm[160];
    char pre[64];
    snprintf(pre, sizeof pre, "%s", nb_intrinsic_name(id));
    nb_emit_helper_name(e, pre, at[0], NULL, nm, sizeof nm);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    nb_scalar_kind s = nb_type_elem_scalar(at[0]);
    if (id == NB_INTR_SMOOTHSTEP) need_smoothstep(e, s);
    if (id == NB_INTR_ISINF) need_infinity(e);
    int comps = nb_type_components(rt);
    nb_strbuf params, body;
    nb_strbuf_init(&params);
    nb_strbuf_init(&body);
    static const char *const pn[3] = {"a", "b", "c"};
    for (int i = 0; i < n; i++) APPEND(&params, "%s%s %s", i ? ", " : "", nb_emit_ctype(e, at[i]), pn[i]);
    const char *rtn = nb_emit_ctype(e, rt);
    if (rt->kind == NB_TY_SCALAR) {
        nb_strbuf_append(&body, "    return ");
        scalar_intrin_text(e, id, s, pn, &body);
        nb_strbuf_append(&body, ";\n");
    } else {
        APPEND(&body, "    %s r;\n", rtn);
        for (int k = 0; k < comps; k++) {
            char bufs[3][32];
            const char *args[3];
            for (int i = 0; i < n; i++) {
                nb_strbuf cs;
                nb_strbuf_init(&cs);
                nb_strbuf_append(&cs, pn[i]);
                nb_emit_comp(at[i], k, &cs);
                snprintf(bufs[i], sizeof bufs[i], "%s", nb_strbuf_cstr(&cs));
                nb_strbuf_free(&cs);
                args[i] = bufs[i];
            }
            nb_strbuf_append(&body, "    r");
            nb_emit_comp(rt, k, &body);
            nb_strbuf_append(&body, " = ");
            scalar_intrin_text(e, id, s, args, &body);
            nb_strbuf_append(&body, ";\n");
        }
        nb_strbuf_append(&body, "    return r;\n");
    }
    APPEND(&e->helpers, "%s %s %s(%s) {\n%s}\n", nb_emit_inline_kw(e), rtn, nm, nb_strbuf_cstr(&params),
           nb_strbuf_cstr(&body));
    nb_strbuf_free(&params);
    nb_strbuf_free(&body);
    return nb_emit_registered(e, nm);
}

static const char *geometry_helper(nb_emitter *e, int id, const nb_type *rt, const nb_type *const *at, int n)
{
    char nm[160];
    nb_emit_helper_name(e, nb_intrinsic_name(id), at[0], NULL, nm, sizeof nm);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    const nb_type *vt = at[0];
    nb_scalar_kind s = vt->scalar;
    const char *st = nb_emit_scalar_ctype(s);
    const char *vn = nb_emit_ctype(e, vt);
    const char *kw = nb_emit_inline_kw(e);
    char fn[32];
    nb_strbuf b;
    nb_strbuf_init(&b);
    int N = vt->cols;
    switch (id) {
    case NB_INTR_DOT:
        for (int k = 0; k < N; k++) APPEND(&b, "%sa.%s * b.%s", k ? " + " : "", nb_emit_comp_name[k], nb_emit_comp_name[k]);
        APPEND(&e->helpers, "%s %s %s(%s a, %s b) { return %s; }\n", kw, st, nm, vn, vn, nb_strbuf_cstr(&b));
        break;
    case NB_INTR_CROSS:
        APPEND(&e->helpers,
               "%s %s %s(%s a, %s b) {\n    %s r;\n    r.x = a.y * b.z - a.z * b.y;\n    r.y = a.z * b.x - a.x * b.z;\n"
               "    r.z = a.x * b.y - a.y * b.x;\n    return r;\n}\n",
               kw, vn, nm, vn, vn, vn);
        break;
    case NB_INTR_LENGTH: {
        const nb_type *ts[2] = {vt, vt};
        const char *dot = geometry_helper(e, NB_INTR_DOT, rt, ts, 2);
        APPEND(&e->helpers, "%s %s %s(%s a) { return %s(%s(a, a)); }\n", kw, st, nm, vn, nb_emit_math_fn(s, "sqrt", fn, sizeof fn), dot);
        break;
    }
    case NB_INTR_DISTANCE: {
        const nb_type *ts[2] = {vt, vt};
        const char *len = geometry_helper(e, NB_INTR_LENGTH, rt, ts, 1);
        const char *sub = nb_emit_op_helper(e, NB_IR_SUB, vt, NULL);
        APPEND(&e->helpers, "%s %s %s(%s a, %s b) { return %s(%s(a, b)); }\n", kw, st, nm, vn, vn, len, sub);
        break;
    }
    case NB_INTR_NORMALIZE: {
        const nb_type *ts[2] = {vt, vt};
        const char *len = geometry_helper(e, NB_INTR_LENGTH, nb_type_scalar(e->tt, s), ts, 1);
        APPEND(&b, "    %s l = %s(a);\n    %s r;\n", st, len, vn);
        for (int k = 0; k < N; k++) APPEND(&b, "    r.%s = a.%s / l;\n", nb_emit_comp_name[k], nb_emit_comp_name[k]);
        APPEND(&e->helpers, "%s %s %s(%s a) {\n%s    return r;\n}\n", kw, vn, nm, vn, nb_strbuf_cstr(&b));
        break;
    }
    case NB_INTR_REFLECT: {
        const nb_type *ts[2] = {vt, vt};
        const char *dot = geometry_helper(e, NB_INTR_DOT, nb_type_scalar(e->tt, s), ts, 2);
        APPEND(&b, "    %s d = 2 * %s(n, i);\n    %s r;\n", st, dot, vn);
        for (int k = 0; k < N; k++) APPEND(&b, "    r.%s = i.%s - d * n.%s;\n", nb_emit_comp_name[k], nb_emit_comp_name[k], nb_emit_comp_name[k]);
        APPEND(&e->helpers, "%s %s %s(%s i, %s n) {\n%s    return r;\n}\n", kw, vn, nm, vn, vn, nb_strbuf_cstr(&b));
        break;
    }
    case NB_INTR_ANY: case NB_INTR_ALL:
        for (int k = 0; k < N; k++)
            APPEND(&b, "%s(a.%s != 0)", k ? (id == NB_INTR_ANY ? " || " : " && ") : "", nb_emit_comp_name[k]);
        APPEND(&e->helpers, "%s bool %s(%s a) { return %s; }\n", kw, nm, vn, nb_strbuf_cstr(&b));
        break;
    default: break;
    }
    (void)n;
    nb_strbuf_free(&b);
    return nb_emit_registered(e, nm);
}

/* mul / transpose / determinant by shapes. */
static const char *matrix_helper(nb_emitter *e, int id, const nb_type *rt, const nb_type *const *at, int n)
{
    char nm[160];
    nb_emit_helper_name(e, nb_intrinsic_name(id), at[0], n > 1 ? at[1] : NULL, nm, sizeof nm);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    const char *kw = nb_emit_inline_kw(e);
    const char *rn = nb_emit_ctype(e, rt);
    nb_strbuf b;
    nb_strbuf_init(&b);
    const nb_type *A = at[0], *B = n > 1 ? at[1] : NULL;
    if (id == NB_INTR_TRANSPOSE) {
        for (int i = 0; i < A->rows; i++)
            for (int j = 0; j < A->cols; j++) APPEND(&b, "    r.r[%d].%s = a.r[%d].%s;\n", j, nb_emit_comp_name[i], i, nb_emit_comp_name[j]);
        APPEND(&e->helpers, "%s %s %s(%s a) {\n    %s r;\n%s    return r;\n}\n", kw, rn, nm, nb_emit_ctype(e, A), rn,
               nb_strbuf_cstr(&b));
    } else if (id == NB_INTR_DETERMINANT) {
        int N = A->rows;
        if (N == 2) nb_strbuf_append(&b, "a.r[0].x * a.r[1].y - a.r[0].y * a.r[1].x");
        else if (N == 3)
            nb_strbuf_append(&b, "a.r[0].x * (a.r[1].y * a.r[2].z - a.r[1].z * a.r[2].y) - a.r[0].y * (a.r[1].x * a.r[2].z - "
                                 "a.r[1].z * a.r[2].x) + a.r[0].z * (a.r[1].x * a.r[2].y - a.r[1].y * a.r[2].x)");
        else {
            /* Laplace expansion along the first row over 3x3 minors */
            for (int c = 0; c < 4; c++) {
                int cs[3], k = 0;
                for (int j = 0; j < 4; j++)
                    if (j != c) cs[k++] = j;
                APPEND(&b, " %s a.r[0].%s * (a.r[1].%s * (a.r[2].%s * a.r[3].%s - a.r[2].%s * a.r[3].%s) - a.r[1].%s * (a.r[2].%s * a.r[3].%s - a.r[2].%s * a.r[3].%s) + a.r[1].%s * (a.r[2].%s * a.r[3].%s - a.r[2].%s * a.r[3].%s))",
                       c % 2 ? "-" : (c ? "+" : ""), nb_emit_comp_name[c], nb_emit_comp_name[cs[0]], nb_emit_comp_name[cs[1]], nb_emit_comp_name[cs[2]], nb_emit_comp_name[cs[2]],
                       nb_emit_comp_name[cs[1]], nb_emit_comp_name[cs[1]], nb_emit_comp_name[cs[0]], nb_emit_comp_name[cs[2]], nb_emit_comp_name[cs[2]], nb_emit_comp_name[cs[0]],
                       nb_emit_comp_name[cs[2]], nb_emit_comp_name[cs[0]], nb_emit_comp_name[cs[1]], nb_emit_comp_name[cs[1]], nb_emit_comp_name[cs[0]]);
            }
        }
        APPEND(&e->helpers, "%s %s %s(%s a) { return %s; }\n", kw, rn, nm, nb_emit_ctype(e, A), nb_strbuf_cstr(&b));
    } else { /* MUL */
        const char *an = nb_emit_ctype(e, A), *bn = nb_emit_ctype(e, B);
        if (A->kind == NB_TY_SCALAR || B->kind == NB_TY_SCALAR) {
            const nb_type *X = A->kind == NB_TY_SCALAR ? B : A;
            int cn = nb_type_components(X);
            for (int k = 0; k < cn; k++) {
                APPEND(&b, "    r");
                nb_emit_comp(rt, k, &b);
                nb_strbuf_append(&b, A->kind == NB_TY_SCALAR ? " = a * b" : " = a");
                nb_emit_comp(X, k, &b);
                nb_strbuf_append(&b, A->kind == NB_TY_SCALAR ? ";\n" : " * b;\n");
            }
            if (rt->kind == NB_TY_SCALAR) {
                nb_strbuf_clear(&b);
                nb_strbuf_append(&b, "    r = a * b;\n");
            }
        } else if (A->kind == NB_TY_VECTOR && B->kind == NB_TY_VECTOR) {
            nb_strbuf_append(&b, "    r = ");
            for (int k = 0; k < A->cols; k++) APPEND(&b, "%sa.%s * b.%s", k ? " + " : "", nb_emit_comp_name[k], nb_emit_comp_name[k]);
            nb_strbuf_append(&b, ";\n");
        } else if (A->kind == NB_TY_VECTOR) { /* vecK * matKxN -> vecN */
            for (int j = 0; j < B->cols; j++) {
                APPEND(&b, "    r.%s = ", nb_emit_comp_name[j]);
                for (int k = 0; k < B->rows; k++) APPEND(&b, "%sa.%s * b.r[%d].%s", k ? " + " : "", nb_emit_comp_name[k], k, nb_emit_comp_name[j]);
                nb_strbuf_append(&b, ";\n");
            }
        } else if (B->kind == NB_TY_VECTOR) { /* matMxK * vecK -> vecM */
            for (int i = 0; i < A->rows; i++) {
                APPEND(&b, "    r.%s = ", nb_emit_comp_name[i]);
                for (int k = 0; k < A->cols; k++) APPEND(&b, "%sa.r[%d].%s * b.%s", k ? " + " : "", i, nb_emit_comp_name[k], nb_emit_comp_name[k]);
                nb_strbuf_append(&b, ";\n");
            }
        } else { /* matMxK * matKxN */
            for (int i = 0; i < A->rows; i++)
                for (int j = 0; j < B->cols; j++) {
                    APPEND(&b, "    r.r[%d].%s = ", i, nb_emit_comp_name[j]);
                    for (int k = 0; k < A->cols; k++)
                        APPEND(&b, "%sa.r[%d].%s * b.r[%d].%s", k ? " + " : "", i, nb_emit_comp_name[k], k, nb_emit_comp_name[j]);
                    nb_strbuf_append(&b, ";\n");
                }
        }
        APPEND(&e->helpers, "%s %s %s(%s a, %s b) {\n    %s r;\n%s    return r;\n}\n", kw, rn, nm, an, bn, rn,
               nb_strbuf_cstr(&b));
    }
    nb_strbuf_free(&b);
    return nb_emit_registered(e, nm);
}

void nb_emit_intrinsic(nb_emitter *e, int id, const nb_type *rt, const nb_type *const *at, const char *const *args,
                       int n, nb_strbuf *o)
{
    const nb_intrinsic_info *info = nb_intrinsic_get(id);
    if (!info) {
        nb_emit_fail(e, "unknown intrinsic %d", id);
        return;
    }
    const char *h = NULL;
    switch (info->sig) {
    case NB_ISIG_FLOAT_UNARY: case NB_ISIG_FLOAT_BINARY: case NB_ISIG_FLOAT_TERNARY:
    case NB_ISIG_NUM_UNARY: case NB_ISIG_NUM_BINARY: case NB_ISIG_NUM_TERNARY:
    case NB_ISIG_FLOAT_TEST: case NB_ISIG_BITCAST: case NB_ISIG_DETACH:
        if (n < 1) break;
        if (id == NB_INTR_DETACH) { /* the value itself, of any type (structs: no_diff(A(x))) */
            APPEND(o, "%s", args[0]);
            return;
        }
        if (at[0]->kind == NB_TY_SCALAR) {
            nb_scalar_kind s = at[0]->scalar;
            if (id == NB_INTR_SMOOTHSTEP) need_smoothstep(e, s);
            if (text_is_direct(e, id, s)) {
                if (id == NB_INTR_DETACH) { APPEND(o, "%s", args[0]); return; }
                nb_strbuf_append_char(o, '(');
                scalar_intrin_text(e, id, s, args, o);
                nb_strbuf_append_char(o, ')');
                return;
            }
        }
        h = elementwise_helper(e, id, rt, at, n);
        break;
    case NB_ISIG_DOT: case NB_ISIG_CROSS: case NB_ISIG_VEC_UNARY: case NB_ISIG_VEC_BINARY:
    case NB_ISIG_LENGTH: case NB_ISIG_DISTANCE: case NB_ISIG_ANY_ALL:
        if (n < 1) break;
        if (at[0]->kind == NB_TY_SCALAR) {
            char fn[32];
            if (id == NB_INTR_LENGTH) { APPEND(o, "%s(%s)", nb_emit_math_fn(at[0]->scalar, "fabs", fn, sizeof fn), args[0]); return; }
            if (id == NB_INTR_DISTANCE) { APPEND(o, "%s(%s - %s)", nb_emit_math_fn(at[0]->scalar, "fabs", fn, sizeof fn), args[0], args[1]); return; }
            if (id == NB_INTR_DOT) { APPEND(o, "(%s * %s)", args[0], args[1]); return; }
            if (id == NB_INTR_ANY || id == NB_INTR_ALL) { APPEND(o, "(%s != 0)", args[0]); return; }
            if (id == NB_INTR_NORMALIZE) { APPEND(o, "(%s > 0 ? 1.0f : -1.0f)", args[0]); return; }
        }
        h = geometry_helper(e, id, rt, at, n);
        break;
    case NB_ISIG_SELECT:
        if (n < 3) break;
        if (at[0]->kind == NB_TY_SCALAR) { APPEND(o, "(%s ? %s : %s)", args[0], args[1], args[2]); return; }
        h = nb_emit_op_helper(e, NB_IR_SELECT, rt, NULL);
        break;
    case NB_ISIG_MUL:
        if (n == 2 && at[0]->kind == NB_TY_SCALAR && at[1]->kind == NB_TY_SCALAR) {
            APPEND(o, "(%s * %s)", args[0], args[1]);
            return;
        }
        /* fallthrough */
    case NB_ISIG_TRANSPOSE: case NB_ISIG_DETERMINANT:
        if (n < 1) break;
        h = matrix_helper(e, id, rt, at, n);
        break;
    case NB_ISIG_NN_MATVEC: case NB_ISIG_NN_OUTER: /* emit_nn.c */
        nb_emit_nn_intrinsic(e, id, at, args, n, o);
        return;
    case NB_ISIG_BARRIER: case NB_ISIG_WAVE:
        nb_emit_group_intrinsic(e, id, rt, at, args, n, o);
        return;
    case NB_ISIG_TENSOR_SIZE: /* args[1] is a constant */
        APPEND(o, "(unsigned)(%s).%s[%s]", args[0], id == NB_INTR_TENSOR_STRIDE ? "strides" : "shape", args[1]);
        return;
    case NB_ISIG_TENSOR_PART:
        APPEND(o, "%s(%s%s%s)", nb_emit_tensor_part(e, id == NB_INTR_TENSOR_PRIMAL ? 0 : id == NB_INTR_TENSOR_GRAD ? 1 : 2,
                                                   at[0], rt), args[0], n > 1 ? ", " : "", n > 1 ? args[1] : "");
        return;
    case NB_ISIG_TENSOR_DATA_PTR: /* the element storage's address (contiguous data assumed, as slang-torch) */
        APPEND(o, "((%s)(%s).data)", nb_emit_ctype(e, rt), args[0]);
        return;
    case NB_ISIG_THREAD_ID: {
        const char *f = id == NB_INTR_DISPATCH_ID ? "dispatch_id" : id == NB_INTR_THREAD_IDX ? "thread_idx"
                        : id == NB_INTR_BLOCK_IDX ? "block_idx" : id == NB_INTR_GRID_DIM ? "grid_dim" : "block_dim";
        APPEND(o, "nb_tid->%s", f);
        return;
    }
    default:
        nb_emit_fail(e, "intrinsic '%s' is not supported in this context", info->name);
        nb_strbuf_append(o, "0");
        return;
    }
    if (!h) {
        nb_emit_fail(e, "bad use of intrinsic '%s'", info->name);
        return;
    }
    APPEND(o, "%s(", h);
    for (int i = 0; i < n; i++) APPEND(o, "%s%s", i ? ", " : "", args[i]);
    nb_strbuf_append_char(o, ')');
}

