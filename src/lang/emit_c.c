/* C / CUDA C emitter: types, on-demand helper functions, literals, intrinsics and storage
 * conversions (see emit_c.h). Function bodies are in emit_body.c, intrinsics in emit_intrin.c. */
#include "lang/emit_c.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lang/intrinsics.h"
#include "nabla/alloc.h"

#define APPEND(sb, ...) nb_strbuf_printf((sb), __VA_ARGS__)

void nb_emit_init(nb_emitter *e, nb_ir_module *m, nb_call_target target)
{
    memset(e, 0, sizeof *e);
    e->m = m;
    e->tt = m->types;
    e->target = target;
    e->ok = 1;
    nb_strbuf_init(&e->types);
    nb_strbuf_init(&e->helpers);
    nb_strbuf_init(&e->globals);
    nb_strbuf_init(&e->protos);
    nb_strbuf_init(&e->funcs);
    nb_strbuf_init(&e->tail);
    nb_strbuf_init(&e->preludes);
    nb_strbuf_init(&e->prelude_keys);
    int nt = m->types->count + 1024; /* helpers may intern a few more types */
    e->ntype_done = nt;
    e->type_done = nb_arena_zalloc(&m->arena, (size_t)nt, 1);
    e->type_names = nb_arena_zalloc(&m->arena, sizeof(char *) * (size_t)nt, sizeof(void *));
    e->func_done = nb_arena_zalloc(&m->arena, (size_t)(m->nfuncs + 1), 1);
    e->global_done = nb_arena_zalloc(&m->arena, (size_t)(m->nglobals + 1), 1);
    if (!e->type_done || !e->type_names || !e->func_done || !e->global_done) e->ok = 0;
}

void nb_emit_free(nb_emitter *e)
{
    nb_strbuf_free(&e->types);
    nb_strbuf_free(&e->helpers);
    nb_strbuf_free(&e->globals);
    nb_strbuf_free(&e->protos);
    nb_strbuf_free(&e->funcs);
    nb_strbuf_free(&e->tail);
    nb_strbuf_free(&e->preludes);
    nb_strbuf_free(&e->prelude_keys);
}

void nb_emit_fail(nb_emitter *e, const char *fmt, ...)
{
    if (!e->ok) return;
    e->ok = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
}

const char *nb_emit_inline_kw(const nb_emitter *e)
{
    return e->target == NB_TARGET_CUDA ? "static __device__ __forceinline__" : "static inline";
}

static char *dup(nb_emitter *e, const char *s) { return nb_arena_strdup(&e->m->arena, s); }

int nb_emit_need_helper(nb_emitter *e, const char *name)
{
    for (int i = 0; i < e->nhelpers; i++)
        if (strcmp(e->helper_names[i], name) == 0) return 0;
    if (e->nhelpers == e->cap_helpers) {
        int nc = e->cap_helpers ? e->cap_helpers * 2 : 64;
        char **n = nb_arena_alloc(&e->m->arena, sizeof(char *) * (size_t)nc, sizeof(void *));
        if (!n) { e->ok = 0; return 0; }
        if (e->nhelpers) memcpy(n, e->helper_names, sizeof(char *) * (size_t)e->nhelpers);
        e->helper_names = n;
        e->cap_helpers = nc;
    }
    e->helper_names[e->nhelpers++] = dup(e, name);
    return 1;
}

const char *nb_emit_registered(nb_emitter *e, const char *name)
{
    for (int i = e->nhelpers - 1; i >= 0; i--)
        if (strcmp(e->helper_names[i], name) == 0) return e->helper_names[i];
    return dup(e, name);
}

/* ---- names ------------------------------------------------------------------------------- */

static const char *const g_reserved[] = {
    /* C / C++ keywords */
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "bool", "true", "false", "class", "namespace", "template", "typename",
    "this", "new", "delete", "operator", "private", "public", "protected", "virtual", "friend",
    "try", "catch", "throw", "using", "asm", "export", "mutable", "explicit", "nullptr",
    "constexpr", "decltype", "noexcept", "static_assert", "thread_local", "alignas", "alignof",
    "and", "or", "not", "xor", "compl", "bitand", "bitor", "typeid", "wchar_t", "main",
    /* libc / libm / stdint */
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "exp", "exp2",
    "log", "log2", "log10", "sqrt", "pow", "fabs", "floor", "ceil", "round", "trunc", "fmod", "fmin",
    "fmax", "fma", "abs", "min", "max", "memcpy", "memset", "isnan", "isinf", "isfinite", "signbit",
    "sinf", "cosf", "tanf", "expf", "logf", "sqrtf", "powf", "fabsf", "floorf", "ceilf", "roundf",
    "truncf", "fmodf", "fminf", "fmaxf", "fmaf", "exp2f", "log2f", "log10f", "asinf", "acosf",
    "atanf", "atan2f", "sinhf", "coshf", "tanhf", "rsqrt", "rsqrtf", "lerp", "clamp", "saturate",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
    "size_t", "intptr_t", "uintptr_t", "NAN", "INFINITY", "errno", "printf", "malloc", "free",
    /* CUDA */
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "atomicAdd", "float2", "float3",
    "float4", "int2", "int3", "int4", "uint2", "uint3", "uint4", "double2", "double3", "double4",
    "half", "__half", "dim3", "signed", "select",
    /* CUDA device functions NVRTC declares without a prefix (device_functions / math API) */
    "dmul", "dadd", "dsub", "ddiv", "fmul", "fadd", "fsub", "fdiv", "frcp", "drcp", "fsqrt", "dsqrt",
    "mul24", "umul24", "mulhi", "umulhi", "mul64hi", "umul64hi", "brev", "brevll", "clz", "clzll",
    "ffs", "ffsll", "popc", "popcll", "byte_perm", "sad", "usad", "hadd", "rhadd", "uhadd", "urhadd",
    "float2int", "float2uint", "int2float", "uint2float", "double2int", "int2double", "float2ll",
    "int_as_float", "float_as_int", "uint_as_float", "float_as_uint", "double_as_longlong",
    "longlong_as_double", "sincos", "sincosf", "sincospi", "sincospif", "sinpi", "cospi", "sinpif",
    "cospif", "exp10", "exp10f", "expm1", "expm1f", "log1p", "log1pf", "cbrt", "cbrtf", "rcbrt",
    "rcbrtf", "hypot", "hypotf", "erf", "erff", "erfc", "erfcf", "erfinv", "erfinvf", "erfcinv",
    "erfcx", "normcdf", "normcdfinv", "lgamma", "tgamma", "j0", "j1", "jn", "y0", "y1", "yn", "ldexp",
    "frexp", "modf", "nextafter", "copysign", "fdim", "remainder", "remquo", "scalbn", "scalbln",
    "ilogb", "logb", "rint", "lrint", "llrint", "nearbyint", "lround", "llround", "norm", "rnorm",
    "norm3d", "norm4d", "rhypot", "isnormal", "umin", "umax", "llmin", "llmax", "ullmin", "ullmax",
    "llabs", "labs", "sqrtl", "exp2l", "fmodl", "rsqrtl", "cyl_bessel_i0", "cyl_bessel_i1",
};

/* The word for an operator's symbol after `operator` (`operator+` -> operator_add); 0 if none. */
static int operator_word(const char *p, const char **word)
{
    static const struct { const char *sym, *word; } ops[] = {
        {"()", "call"}, {"[]", "index"}, {"<<", "shl"}, {">>", "shr"}, {"<=", "le"}, {">=", "ge"},
        {"==", "eq"}, {"!=", "ne"}, {"&&", "land"}, {"||", "lor"}, {"+=", "add_assign"}, {"-=", "sub_assign"},
        {"*=", "mul_assign"}, {"/=", "div_assign"}, {"++", "inc"}, {"--", "dec"}, {"+", "add"}, {"-", "sub"},
        {"*", "mul"}, {"/", "div"}, {"%", "mod"}, {"<", "lt"}, {">", "gt"}, {"!", "not"}, {"~", "bnot"},
        {"&", "band"}, {"|", "bor"}, {"^", "xor"},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t n = strlen(ops[i].sym);
        if (strncmp(p, ops[i].sym, n) == 0) {
            *word = ops[i].word;
            return (int)n;
        }
    }
    return 0;
}

const char *nb_emit_safe_name(nb_emitter *e, const char *name)
{
    char buf[256];
    size_t n = 0;
    for (const char *p = name; *p && n < sizeof buf - 2; p++) {
        char ch = *p;
        const char *word;
        int len;
        if (n >= 8 && memcmp(buf + n - 8, "operator", 8) == 0 && (len = operator_word(p, &word)) > 0) {
            /* user operators: operator+ -> operator_add, S.operator() -> S_operator_call */
            for (const char *w = "_"; *w && n < sizeof buf - 2; w++) buf[n++] = *w;
            for (const char *w = word; *w && n < sizeof buf - 2; w++) buf[n++] = *w;
            p += len - 1;
            continue;
        }
        /* generic instantiations: MLP<16,3> -> MLP_16_3, f<-1> -> f_m1 */
        if (ch == '>' || ch == ' ') continue;
        if (ch == '<' || ch == ',') ch = '_';
        if (ch == '-' && n) ch = 'm';
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || (n && ch >= '0' && ch <= '9');
        buf[n++] = ok ? ch : '_';
    }
    buf[n] = 0;
    if (!n) return "unnamed";
    int clash = strncmp(buf, "nb_", 3) == 0 || strncmp(buf, "__", 2) == 0;
    for (size_t i = 0; !clash && i < sizeof g_reserved / sizeof g_reserved[0]; i++)
        clash = g_reserved[i][0] == buf[0] && strcmp(buf, g_reserved[i]) == 0; /* (first byte: cheap filter) */
    if (clash) {
        buf[n++] = '_';
        buf[n] = 0;
    }
    return strcmp(buf, name) == 0 ? name : dup(e, buf);
}

/* ---- types ------------------------------------------------------------------------------- */

const char *nb_emit_scalar_ctype(nb_scalar_kind s)
{
    switch (s) {
    case NB_SC_BOOL: return "bool";
    case NB_SC_INT: return "int";
    case NB_SC_UINT: return "unsigned";
    case NB_SC_INT64: return "long long";
    case NB_SC_UINT64: return "unsigned long long";
    case NB_SC_HALF: return "float";
    case NB_SC_FLOAT: return "float";
    case NB_SC_DOUBLE: return "double";
    }
    return "int";
}

static const char *scalar_token(nb_scalar_kind s)
{
    switch (s) {
    case NB_SC_BOOL: return "bool";
    case NB_SC_INT: return "int";
    case NB_SC_UINT: return "uint";
    case NB_SC_INT64: return "int64_";
    case NB_SC_UINT64: return "uint64_";
    case NB_SC_DOUBLE: return "double";
    case NB_SC_HALF: return "half"; /* (stored as float: its own names keep half3 and float3 apart) */
    default: return "float";
    }
}

/* Token naming a type inside helper names: float3, float3x4, arr_float_4, S, tensor_float_2. */
static void type_token(nb_emitter *e, const nb_type *t, nb_strbuf *o)
{
    const char *cn = nb_emit_ctype(e, t);
    if (t->kind == NB_TY_SCALAR) nb_strbuf_append(o, scalar_token(t->scalar));
    else if (strncmp(cn, "nb_", 3) == 0) nb_strbuf_append(o, cn + 3);
    else nb_strbuf_append(o, cn);
}

const char *const nb_emit_comp_name[4] = {"x", "y", "z", "w"};

void nb_emit_comp(const nb_type *t, int k, nb_strbuf *out)
{
    if (t->kind == NB_TY_VECTOR) APPEND(out, ".%s", nb_emit_comp_name[k & 3]);
    else if (t->kind == NB_TY_MATRIX) APPEND(out, ".r[%d].%s", k / t->cols, nb_emit_comp_name[(k % t->cols) & 3]);
}

static void set_type_name(nb_emitter *e, const nb_type *t, const char *name)
{
    if (t->id >= 0 && t->id < e->ntype_done) e->type_names[t->id] = dup(e, name);
}

static void tensor_typedef(nb_emitter *e, const nb_type *t, nb_strbuf *name)
{
    nb_strbuf_append(name, t->buffer == 2 ? "nb_robuffer_" : t->buffer ? "nb_buffer_" : t->diff_tensor ? "nb_difftensor_" : "nb_tensor_");
    type_token(e, t->elem, name);
    APPEND(name, "_%d", t->rank);
}

const char *nb_emit_ctype(nb_emitter *e, const nb_type *t)
{
    if (!t) return "void";
    switch (t->kind) {
    case NB_TY_VOID: return "void";
    case NB_TY_SCALAR: return nb_emit_scalar_ctype(t->scalar);
    case NB_TY_ERROR: case NB_TY_FUNC:
        nb_emit_fail(e, "cannot emit a value of type '%s'", t->name ? t->name : "?");
        return "int";
    default: break;
    }
    if (t->id < 0 || t->id >= e->ntype_done) {
        nb_emit_fail(e, "internal: type table grew past the emitter's registry");
        return "int";
    }
    if (e->type_names[t->id]) return e->type_names[t->id];
    nb_strbuf name, def;
    nb_strbuf_init(&name);
    nb_strbuf_init(&def);
    switch (t->kind) {
    case NB_TY_VECTOR: {
        APPEND(&name, "nb_%s%d", scalar_token(t->scalar), t->cols);
        APPEND(&def, "typedef struct %s { %s", nb_strbuf_cstr(&name), nb_emit_scalar_ctype(t->scalar));
        for (int k = 0; k < t->cols; k++) APPEND(&def, "%s %s", k ? "," : "", nb_emit_comp_name[k]);
        APPEND(&def, "; } %s;\n", nb_strbuf_cstr(&name));
        break;
    }
    case NB_TY_MATRIX: {
        const nb_type *row = nb_type_vector(e->tt, t->scalar, t->cols);
        const char *rn = nb_emit_ctype(e, row);
        APPEND(&name, "nb_%s%dx%d", scalar_token(t->scalar), t->rows, t->cols);
        APPEND(&def, "typedef struct %s { %s r[%d]; } %s; /* rows */\n", nb_strbuf_cstr(&name), rn, t->rows,
               nb_strbuf_cstr(&name));
        break;
    }
    case NB_TY_ARRAY: {
        const char *en = nb_emit_ctype(e, t->elem);
        nb_strbuf_append(&name, "nb_arr_");
        type_token(e, t->elem, &name);
        APPEND(&name, "_%d", t->length);
        APPEND(&def, "typedef struct %s { %s a[%d]; } %s;\n", nb_strbuf_cstr(&name), en, t->length > 0 ? t->length : 1,
               nb_strbuf_cstr(&name));
        break;
    }
    case NB_TY_STRUCT: {
        nb_decl *d = t->decl;
        const char *sn = nb_emit_safe_name(e, t->name ? t->name : (d ? d->name : "S"));
        nb_strbuf_append(&name, sn);
        /* field types first */
        int nf = d ? d->u.strct.nfields : 0;
        const char **fts = nb_arena_alloc(&e->m->arena, sizeof(char *) * (size_t)(nf ? nf : 1), sizeof(void *));
        if (!fts) { e->ok = 0; break; }
        for (int i = 0; i < nf; i++) fts[i] = nb_emit_ctype(e, d->u.strct.fields[i]->u.var.type);
        APPEND(&def, "typedef struct %s {\n", nb_strbuf_cstr(&name));
        for (int i = 0; i < nf; i++)
            APPEND(&def, "    %s %s;\n", fts[i], nb_emit_safe_name(e, d->u.strct.fields[i]->name));
        if (!nf) APPEND(&def, "    char unused_;\n");
        APPEND(&def, "} %s;\n", nb_strbuf_cstr(&name));
        break;
    }
    case NB_TY_TENSOR: {
        tensor_typedef(e, t, &name);
        const char *n = nb_strbuf_cstr(&name);
        if (e->host_views) { /* host code: handles of the call's tensors (emit_host.c) */
            APPEND(&def, "typedef struct %s { long long h, g; } %s; /* host handles */\n", n, n);
            break;
        }
        APPEND(&def, "typedef struct %s { char *data; long long shape[%d]; long long strides[%d];", n, t->rank, t->rank);
        if (t->diff_tensor) APPEND(&def, " char *grad; long long grad_strides[%d];", t->rank);
        /* where an out-of-range access is recorded (callsig.h), and which leaf this is (1 + index) */
        APPEND(&def, " struct nb_oob_rec *oob; int site; } %s; /* strides in bytes */\n", n);
        break;
    }
    case NB_TY_TORCH: /* TorchTensor<T>: a handle the host runtime gives out (emit_host.c) */
        nb_strbuf_append(&name, "nb_torch_"); /* nb_torch_float, nb_torch_float3 */
        type_token(e, t->elem, &name);
        APPEND(&def, "typedef struct %s { long long h; } %s;\n", nb_strbuf_cstr(&name), nb_strbuf_cstr(&name));
        break;
    case NB_TY_PTR: { /* Ptr<T>: a pointer typedef, so that every type has a one-word C name */
        const char *en = nb_emit_ctype(e, t->elem);
        nb_strbuf_append(&name, "nb_ptr_");
        type_token(e, t->elem, &name);
        APPEND(&def, "typedef %s *%s;\n", en, nb_strbuf_cstr(&name));
        break;
    }
    case NB_TY_DIFFPAIR: {
        const nb_type *dt = nb_type_differential(e->tt, t->elem);
        const char *pn = nb_emit_ctype(e, t->elem);
        const char *dn = nb_emit_ctype(e, dt ? dt : t->elem);
        nb_strbuf_append(&name, "nb_pair_");
        type_token(e, t->elem, &name);
        APPEND(&def, "typedef struct %s { %s p; %s d; } %s;\n", nb_strbuf_cstr(&name), pn, dn, nb_strbuf_cstr(&name));
        break;
    }
    default:
        break;
    }
    const char *res = "int";
    if (e->ok && name.len) {
        set_type_name(e, t, nb_strbuf_cstr(&name));
        nb_strbuf_append(&e->types, nb_strbuf_cstr(&def));
        res = e->type_names[t->id];
    }
    nb_strbuf_free(&name);
    nb_strbuf_free(&def);
    return res;
}

/* ---- literals ---------------------------------------------------------------------------- */

static void scalar_literal(nb_emitter *e, nb_scalar_kind s, nb_ir_cval v, nb_strbuf *o)
{
    switch (s) {
    case NB_SC_BOOL: nb_strbuf_append(o, v.i ? "1" : "0"); return;
    case NB_SC_INT:
        if (v.i == INT32_MIN) nb_strbuf_append(o, "(-2147483647 - 1)");
        else if (v.i < 0) APPEND(o, "(%lld)", (long long)v.i);
        else APPEND(o, "%lld", (long long)v.i);
        return;
    case NB_SC_UINT: APPEND(o, "%lluu", (unsigned long long)(uint32_t)v.i); return;
    case NB_SC_INT64:
        if (v.i == INT64_MIN) nb_strbuf_append(o, "(-9223372036854775807ll - 1)");
        else APPEND(o, v.i < 0 ? "(%lldll)" : "%lldll", (long long)v.i);
        return;
    case NB_SC_UINT64: APPEND(o, "%lluull", (unsigned long long)v.i); return;
    default: break;
    }
    double d = v.f;
    int dbl = s == NB_SC_DOUBLE;
    if (isnan(d) || isinf(d)) {
        const char *what = isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf");
        if (e->target == NB_TARGET_CUDA) {
            if (dbl) APPEND(o, "__longlong_as_double(%s)", isnan(d) ? "0x7ff8000000000000ll" : d > 0 ? "0x7ff0000000000000ll" : "(long long)0xfff0000000000000ull");
            else APPEND(o, "__int_as_float(%s)", isnan(d) ? "0x7fffffff" : d > 0 ? "0x7f800000" : "(int)0xff800000u");
        } else {
            if (!strcmp(what, "nan")) nb_strbuf_append(o, dbl ? "((double)NAN)" : "NAN");
            else APPEND(o, "%s%s", d > 0 ? "" : "-", dbl ? "((double)INFINITY)" : "INFINITY");
            if (d < 0) { /* wrap the negation */ }
        }
        return;
    }
    char buf[64];
    if (dbl) snprintf(buf, sizeof buf, "%.17g", d);
    else snprintf(buf, sizeof buf, "%.9g", (double)(float)d);
    int has_dot = strchr(buf, '.') || strchr(buf, 'e') || strchr(buf, 'n') || strchr(buf, 'i');
    if (d < 0) nb_strbuf_append_char(o, '(');
    nb_strbuf_append(o, buf);
    if (!has_dot) nb_strbuf_append(o, ".0");
    if (!dbl) nb_strbuf_append_char(o, 'f');
    if (d < 0) nb_strbuf_append_char(o, ')');
}

void nb_emit_literal(nb_emitter *e, const nb_type *t, const nb_ir_cval *cv, nb_strbuf *o)
{
    if (t->kind == NB_TY_SCALAR) {
        scalar_literal(e, t->scalar, cv[0], o);
        return;
    }
    const char *mk = nb_emit_make_helper(e, t);
    int n = nb_type_components(t);
    APPEND(o, "%s(", mk);
    for (int k = 0; k < n; k++) {
        if (k) nb_strbuf_append(o, ", ");
        scalar_literal(e, t->scalar, cv[k], o);
    }
    nb_strbuf_append_char(o, ')');
}

void nb_emit_zero(nb_emitter *e, const nb_type *t, nb_strbuf *o)
{
    if (t->kind == NB_TY_PTR) { /* nullptr */
        APPEND(o, "((%s)0)", nb_emit_ctype(e, t));
        return;
    }
    if (t->kind == NB_TY_SCALAR) {
        nb_ir_cval z;
        z.i = 0;
        if (t->scalar == NB_SC_FLOAT || t->scalar == NB_SC_HALF || t->scalar == NB_SC_DOUBLE) z.f = 0;
        scalar_literal(e, t->scalar, z, o);
        return;
    }
    nb_strbuf nm;
    nb_strbuf_init(&nm);
    nb_strbuf_append(&nm, "nb_zero_");
    type_token(e, t, &nm);
    const char *tn = nb_emit_ctype(e, t);
    if (nb_emit_need_helper(e, nb_strbuf_cstr(&nm))) {
        if (e->target == NB_TARGET_CUDA)
            APPEND(&e->helpers, "%s %s %s(void) { %s r = {}; return r; }\n", nb_emit_inline_kw(e), tn, nb_strbuf_cstr(&nm), tn);
        else
            APPEND(&e->helpers, "%s %s %s(void) { %s r; memset(&r, 0, sizeof r); return r; }\n", nb_emit_inline_kw(e), tn,
                   nb_strbuf_cstr(&nm), tn);
    }
    APPEND(o, "%s()", nb_strbuf_cstr(&nm));
    nb_strbuf_free(&nm);
}

/* ---- helpers over component-wise types --------------------------------------------------- */

const char *nb_emit_helper_name(nb_emitter *e, const char *prefix, const nb_type *t, const nb_type *t2,
                                char *buf, size_t cap)
{
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    APPEND(&sb, "nb_%s_", prefix);
    type_token(e, t, &sb);
    if (t2) {
        nb_strbuf_append_char(&sb, '_');
        type_token(e, t2, &sb);
    }
    snprintf(buf, cap, "%s", nb_strbuf_cstr(&sb));
    nb_strbuf_free(&sb);
    return buf;
}

const char *nb_emit_make_helper(nb_emitter *e, const nb_type *t)
{
    char nm[160];
    nb_emit_helper_name(e, "make", t, NULL, nm, sizeof nm);
    const char *tn = nb_emit_ctype(e, t);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    nb_strbuf p, b;
    nb_strbuf_init(&p);
    nb_strbuf_init(&b);
    if (t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX) {
        int n = nb_type_components(t);
        for (int k = 0; k < n; k++) {
            APPEND(&p, "%s%s c%d", k ? ", " : "", nb_emit_scalar_ctype(t->scalar), k);
            APPEND(&b, " r");
            nb_emit_comp(t, k, &b);
            APPEND(&b, " = c%d;", k);
        }
    } else if (t->kind == NB_TY_ARRAY) {
        const char *en = nb_emit_ctype(e, t->elem);
        for (int k = 0; k < t->length; k++) {
            APPEND(&p, "%s%s e%d", k ? ", " : "", en, k);
            APPEND(&b, " r.a[%d] = e%d;", k, k);
        }
    } else if (t->kind == NB_TY_STRUCT && t->decl) {
        for (int k = 0; k < t->decl->u.strct.nfields; k++) {
            nb_decl *fd = t->decl->u.strct.fields[k];
            const char *fn = nb_emit_safe_name(e, fd->name);
            /* parameters f<k>: a field named `r` must not hide the result */
            APPEND(&p, "%s%s f%d", k ? ", " : "", nb_emit_ctype(e, fd->u.var.type), k);
            APPEND(&b, " r.%s = f%d;", fn, k);
        }
    } else if (t->kind == NB_TY_DIFFPAIR) {
        const nb_type *dt = nb_type_differential(e->tt, t->elem);
        const char *pt = nb_emit_ctype(e, t->elem), *dtn = nb_emit_ctype(e, dt ? dt : t->elem);
        if (e->target == NB_TARGET_CUDA) {
            /* A macro on CUDA: NVRTC 13.0 miscompiles the inline function form `T r; r.p = p;
             * r.d = d; return r;` when one kernel both passes such a pair by value and takes a
             * pair's address (the fwd and bwd derivatives of one method): it drops the result
             * (tests/lang/ad_cuda_pair_make.nb). The casts keep the conversions of the function
             * form (no narrowing errors of `T{...}`). */
            APPEND(&e->helpers, "#define %s(p_, d_) (%s{(%s)(p_), (%s)(d_)})\n", nm, tn, pt, dtn);
            nb_strbuf_free(&p);
            nb_strbuf_free(&b);
            return nb_emit_registered(e, nm);
        }
        APPEND(&p, "%s p, %s d", pt, dtn);
        APPEND(&b, " r.p = p; r.d = d;");
    }
    if (!p.len) nb_strbuf_append(&p, "void");
    APPEND(&e->helpers, "%s %s %s(%s) {\n    %s r;%s\n    return r;\n}\n", nb_emit_inline_kw(e), tn, nm,
           nb_strbuf_cstr(&p), tn, nb_strbuf_cstr(&b));
    nb_strbuf_free(&p);
    nb_strbuf_free(&b);
    return nb_emit_registered(e, nm);
}

int nb_emit_is_float_scalar(nb_scalar_kind s) { return s == NB_SC_FLOAT || s == NB_SC_HALF || s == NB_SC_DOUBLE; }

const char *nb_emit_math_fn(nb_scalar_kind s, const char *base, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", base, s == NB_SC_DOUBLE ? "" : "f");
    return buf;
}

/* Scalar expression of a binary/unary IR op over rendered operands. */
void nb_emit_scalar_op(nb_ir_op op, nb_scalar_kind s, nb_scalar_kind to, const char *a, const char *b, nb_strbuf *o)
{
    char fn[32];
    const char *sym = NULL;
    switch (op) {
    case NB_IR_NEG: APPEND(o, "-%s", a); return;
    case NB_IR_NOT: APPEND(o, "!%s", a); return;
    case NB_IR_BNOT: APPEND(o, "~%s", a); return;
    case NB_IR_ADD: sym = "+"; break;
    case NB_IR_SUB: sym = "-"; break;
    case NB_IR_MUL: sym = "*"; break;
    case NB_IR_DIV: sym = "/"; break;
    case NB_IR_MOD:
        if (nb_emit_is_float_scalar(s)) { APPEND(o, "%s(%s, %s)", nb_emit_math_fn(s, "fmod", fn, sizeof fn), a, b); return; }
        sym = "%";
        break;
    case NB_IR_BAND: sym = "&"; break;
    case NB_IR_BOR: sym = "|"; break;
    case NB_IR_BXOR: sym = "^"; break;
    case NB_IR_SHL: sym = "<<"; break;
    case NB_IR_SHR: sym = ">>"; break;
    case NB_IR_LAND: sym = "&&"; break;
    case NB_IR_LOR: sym = "||"; break;
    case NB_IR_EQ: sym = "=="; break;
    case NB_IR_NE: sym = "!="; break;
    case NB_IR_LT: sym = "<"; break;
    case NB_IR_LE: sym = "<="; break;
    case NB_IR_GT: sym = ">"; break;
    case NB_IR_GE: sym = ">="; break;
    case NB_IR_CONVERT: case NB_IR_SPLAT:
        if (to == NB_SC_BOOL) APPEND(o, "(%s != 0)", a);
        else if (nb_emit_scalar_ctype(to) == nb_emit_scalar_ctype(s) || !strcmp(nb_emit_scalar_ctype(to), nb_emit_scalar_ctype(s)))
            APPEND(o, "%s", a);
        else APPEND(o, "(%s)%s", nb_emit_scalar_ctype(to), a);
        return;
    default: APPEND(o, "/*?*/%s", a); return;
    }
    APPEND(o, "%s %s %s", a, sym, b);
}

/* Helper applying an IR op component-wise: result t; operands of type `from` (or t). */
/* a + b of arrays / structs / pairs, member by member (autodiff accumulates aggregate adjoints;
 * non-float members such as an int field of a differentiable struct keep a's value). */
static const char *aggregate_add_helper(nb_emitter *e, const nb_type *t)
{
    char nm[160];
    nb_emit_helper_name(e, "add", t, NULL, nm, sizeof nm);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    const char *tn = nb_emit_ctype(e, t);
    nb_strbuf b;
    nb_strbuf_init(&b);
    const nb_type *mt[64];
    char acc[64][96];
    int n = 0;
    if (t->kind == NB_TY_ARRAY) {
        mt[n] = t->elem;
        snprintf(acc[n++], sizeof acc[0], ".a[i]");
    } else if (t->kind == NB_TY_DIFFPAIR) {
        mt[n] = t->elem;
        snprintf(acc[n++], sizeof acc[0], ".p");
        mt[n] = nb_type_differential(e->tt, t->elem);
        snprintf(acc[n++], sizeof acc[0], ".d");
    } else if (t->decl) {
        for (int k = 0; k < t->decl->u.strct.nfields && n < 64; k++) {
            mt[n] = t->decl->u.strct.fields[k]->u.var.type;
            snprintf(acc[n++], sizeof acc[0], ".%s", nb_emit_safe_name(e, t->decl->u.strct.fields[k]->name));
        }
    }
    if (t->kind == NB_TY_ARRAY) APPEND(&b, "    for (int i = 0; i < %d; i++) {\n", t->length);
    for (int k = 0; k < n; k++) {
        const nb_type *m = mt[k];
        if (!m) continue;
        int num = (m->kind == NB_TY_SCALAR || m->kind == NB_TY_VECTOR || m->kind == NB_TY_MATRIX) && m->scalar != NB_SC_BOOL;
        if (m->kind == NB_TY_SCALAR && num) APPEND(&b, "    r%s = a%s + b%s;\n", acc[k], acc[k], acc[k]);
        else if (num || m->kind == NB_TY_ARRAY || m->kind == NB_TY_STRUCT || m->kind == NB_TY_DIFFPAIR)
            APPEND(&b, "    r%s = %s(a%s, b%s);\n", acc[k], nb_emit_op_helper(e, NB_IR_ADD, m, NULL), acc[k], acc[k]);
        else APPEND(&b, "    r%s = a%s;\n", acc[k], acc[k]);
    }
    if (t->kind == NB_TY_ARRAY) nb_strbuf_append(&b, "    }\n");
    APPEND(&e->helpers, "%s %s %s(%s a, %s b) {\n    %s r = a;\n%s    return r;\n}\n", nb_emit_inline_kw(e), tn, nm, tn, tn, tn,
           nb_strbuf_cstr(&b));
    nb_strbuf_free(&b);
    return nb_emit_registered(e, nm);
}

const char *nb_emit_op_helper(nb_emitter *e, nb_ir_op op, const nb_type *t, const nb_type *from)
{
    if (op == NB_IR_ADD && !from && (t->kind == NB_TY_ARRAY || t->kind == NB_TY_STRUCT || t->kind == NB_TY_DIFFPAIR))
        return aggregate_add_helper(e, t);
    const char *opn = nb_ir_op_name(op);
    char nm[160];
    if (op == NB_IR_CONVERT) nb_emit_helper_name(e, "cvt", t, from, nm, sizeof nm);
    else nb_emit_helper_name(e, opn, from ? from : t, NULL, nm, sizeof nm);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    const nb_type *ot = from ? from : t;
    const char *tn = nb_emit_ctype(e, t), *on = nb_emit_ctype(e, ot);
    int n = nb_type_components(t);
    nb_strbuf b, ca, cb;
    nb_strbuf_init(&b);
    nb_strbuf_init(&ca);
    nb_strbuf_init(&cb);
    int unary = op == NB_IR_NEG || op == NB_IR_NOT || op == NB_IR_BNOT || op == NB_IR_CONVERT || op == NB_IR_SPLAT;
    int sel = op == NB_IR_SELECT;
    for (int k = 0; k < n; k++) {
        nb_strbuf_clear(&ca);
        nb_strbuf_clear(&cb);
        APPEND(&b, "    r");
        nb_emit_comp(t, k, &b);
        nb_strbuf_append(&b, " = ");
        if (sel) {
            APPEND(&b, "c");
            nb_emit_comp(nb_ir_bool_like(e->tt, t), k, &b);
            APPEND(&b, " ? a");
            nb_emit_comp(t, k, &b);
            APPEND(&b, " : b");
            nb_emit_comp(t, k, &b);
            nb_strbuf_append(&b, ";\n");
            continue;
        }
        nb_strbuf_append(&ca, "a");
        if (op != NB_IR_SPLAT) nb_emit_comp(ot, k, &ca);
        nb_strbuf_append(&cb, "b");
        nb_emit_comp(ot, k, &cb);
        nb_emit_scalar_op(op, nb_type_elem_scalar(ot), nb_type_elem_scalar(t), nb_strbuf_cstr(&ca), nb_strbuf_cstr(&cb), &b);
        nb_strbuf_append(&b, ";\n");
    }
    if (sel)
        APPEND(&e->helpers, "%s %s %s(%s c, %s a, %s b) {\n    %s r;\n%s    return r;\n}\n", nb_emit_inline_kw(e), tn, nm,
               nb_emit_ctype(e, nb_ir_bool_like(e->tt, t)), tn, tn, tn, nb_strbuf_cstr(&b));
    else if (op == NB_IR_SPLAT)
        APPEND(&e->helpers, "%s %s %s(%s a) {\n    %s r;\n%s    return r;\n}\n", nb_emit_inline_kw(e), tn, nm,
               nb_emit_scalar_ctype(t->scalar), tn, nb_strbuf_cstr(&b));
    else if (unary)
        APPEND(&e->helpers, "%s %s %s(%s a) {\n    %s r;\n%s    return r;\n}\n", nb_emit_inline_kw(e), tn, nm, on, tn,
               nb_strbuf_cstr(&b));
    else
        APPEND(&e->helpers, "%s %s %s(%s a, %s b) {\n    %s r;\n%s    return r;\n}\n", nb_emit_inline_kw(e), tn, nm, on,
               on, tn, nb_strbuf_cstr(&b));
    nb_strbuf_free(&b);
    nb_strbuf_free(&ca);
    nb_strbuf_free(&cb);
    return nb_emit_registered(e, nm);
}

const char *nb_emit_swizzle_helper(nb_emitter *e, const nb_type *from, const int *swz, int n)
{
    char nm[160], pat[8];
    for (int k = 0; k < n; k++) pat[k] = "xyzw"[swz[k] & 3];
    pat[n] = 0;
    nb_emit_helper_name(e, "swz", from, NULL, nm, sizeof nm);
    size_t l = strlen(nm);
    snprintf(nm + l, sizeof nm - l, "_%s", pat);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    const nb_type *rt = nb_type_vector(e->tt, from->scalar, n);
    const char *mk = nb_emit_make_helper(e, rt);
    nb_strbuf b;
    nb_strbuf_init(&b);
    for (int k = 0; k < n; k++) APPEND(&b, "%sv.%s", k ? ", " : "", nb_emit_comp_name[swz[k] & 3]);
    APPEND(&e->helpers, "%s %s %s(%s v) { return %s(%s); }\n", nb_emit_inline_kw(e), nb_emit_ctype(e, rt), nm,
           nb_emit_ctype(e, from), mk, nb_strbuf_cstr(&b));
    nb_strbuf_free(&b);
    return nb_emit_registered(e, nm);
}

const char *nb_emit_get_helper(nb_emitter *e, const nb_type *t)
{
    char nm[160];
    nb_emit_helper_name(e, "get", t, NULL, nm, sizeof nm);
    if (nb_emit_need_helper(e, nm))
        APPEND(&e->helpers, "%s %s %s(%s v, int i) { return (&v.x)[i]; }\n", nb_emit_inline_kw(e),
               nb_emit_scalar_ctype(t->scalar), nm, nb_emit_ctype(e, t));
    return nb_emit_registered(e, nm);
}

/* ---- bit casts and half conversion ------------------------------------------------------- */

void nb_emit_need_bits(nb_emitter *e)
{
    if (!nb_emit_need_helper(e, "nb_f32_bits")) return;
    const char *kw = nb_emit_inline_kw(e);
    if (e->target == NB_TARGET_CUDA) {
        APPEND(&e->helpers, "%s unsigned nb_f32_bits(float f) { return __float_as_uint(f); }\n", kw);
        APPEND(&e->helpers, "%s float nb_bits_f32(unsigned u) { return __uint_as_float(u); }\n", kw);
    } else {
        APPEND(&e->helpers, "%s unsigned nb_f32_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }\n", kw);
        APPEND(&e->helpers, "%s float nb_bits_f32(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n", kw);
    }
}

static void need_half(nb_emitter *e)
{
    nb_emit_need_bits(e);
    if (!nb_emit_need_helper(e, "nb_h2f")) return;
    const char *kw = nb_emit_inline_kw(e);
    APPEND(&e->helpers,
           "/* IEEE binary16 <-> float, round to nearest even */\n"
           "%s float nb_h2f(unsigned short h) {\n"
           "    unsigned sign = (unsigned)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
           "    if (ex == 0) { float f = (float)m * 5.9604644775390625e-8f; return sign ? -f : f; }\n"
           "    if (ex == 31) return nb_bits_f32(sign | 0x7f800000u | (m << 13));\n"
           "    return nb_bits_f32(sign | ((ex + 112u) << 23) | (m << 13));\n"
           "}\n"
           "%s unsigned short nb_f2h(float f) {\n"
           "    unsigned x = nb_f32_bits(f), sign = x & 0x80000000u, o;\n"
           "    x ^= sign;\n"
           "    if (x >= 0x47800000u) o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;\n"
           "    else if (x < 0x38800000u) o = nb_f32_bits(nb_bits_f32(x) + 0.5f) - 0x3f000000u;\n"
           "    else { unsigned odd = (x >> 13) & 1u; x += 0xc8000fffu + odd; o = x >> 13; }\n"
           "    return (unsigned short)(o | (sign >> 16));\n"
           "}\n"
           "%s float nb_bf2f(unsigned short b) { return nb_bits_f32((unsigned)b << 16); }\n"
           "%s unsigned short nb_f2bf(float f) {\n"
           "    unsigned x = nb_f32_bits(f);\n"
           "    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);\n"
           "    x += 0x7fffu + ((x >> 16) & 1u);\n"
           "    return (unsigned short)(x >> 16);\n"
           "}\n",
           kw, kw, kw, kw);
}

nb_dtype nb_emit_natural_dtype(nb_scalar_kind s)
{
    switch (s) {
    case NB_SC_BOOL: return NB_BOOL;
    case NB_SC_INT: return NB_I32;
    case NB_SC_UINT: return NB_U32;
    case NB_SC_INT64: return NB_I64;
    case NB_SC_UINT64: return NB_I64;
    case NB_SC_HALF: return NB_F16;
    case NB_SC_DOUBLE: return NB_F64;
    default: return NB_F32;
    }
}

void nb_emit_load_scalar(nb_emitter *e, nb_dtype st, nb_scalar_kind s, const char *addr, nb_strbuf *o)
{
    nb_strbuf raw;
    nb_strbuf_init(&raw);
    int is_f = 0;
    switch (st) {
    case NB_F32: APPEND(&raw, "*(const float *)(%s)", addr); is_f = 1; break;
    case NB_F64: APPEND(&raw, "*(const double *)(%s)", addr); is_f = 1; break;
    case NB_F16: need_half(e); APPEND(&raw, "nb_h2f(*(const unsigned short *)(%s))", addr); is_f = 1; break;
    case NB_BF16: need_half(e); APPEND(&raw, "nb_bf2f(*(const unsigned short *)(%s))", addr); is_f = 1; break;
    case NB_I32: APPEND(&raw, "*(const int *)(%s)", addr); break;
    case NB_U32: APPEND(&raw, "*(const unsigned *)(%s)", addr); break;
    case NB_I64: APPEND(&raw, "*(const long long *)(%s)", addr); break;
    case NB_U8: APPEND(&raw, "*(const unsigned char *)(%s)", addr); break;
    case NB_BOOL: APPEND(&raw, "*(const unsigned char *)(%s)", addr); break;
    default: nb_emit_fail(e, "unsupported storage dtype %d", (int)st); break;
    }
    (void)is_f;
    if (s == NB_SC_BOOL) APPEND(o, "(%s != 0)", nb_strbuf_cstr(&raw));
    else APPEND(o, "(%s)%s", nb_emit_scalar_ctype(s), nb_strbuf_cstr(&raw));
    nb_strbuf_free(&raw);
}

void nb_emit_store_scalar(nb_emitter *e, nb_dtype st, nb_scalar_kind s, const char *addr, const char *v,
                          nb_strbuf *o)
{
    (void)s;
    switch (st) {
    case NB_F32: APPEND(o, "*(float *)(%s) = (float)(%s);", addr, v); break;
    case NB_F64: APPEND(o, "*(double *)(%s) = (double)(%s);", addr, v); break;
    case NB_F16: need_half(e); APPEND(o, "*(unsigned short *)(%s) = nb_f2h((float)(%s));", addr, v); break;
    case NB_BF16: need_half(e); APPEND(o, "*(unsigned short *)(%s) = nb_f2bf((float)(%s));", addr, v); break;
    case NB_I32: APPEND(o, "*(int *)(%s) = (int)(%s);", addr, v); break;
    case NB_U32: APPEND(o, "*(unsigned *)(%s) = (unsigned)(%s);", addr, v); break;
    case NB_I64: APPEND(o, "*(long long *)(%s) = (long long)(%s);", addr, v); break;
    case NB_U8: APPEND(o, "*(unsigned char *)(%s) = (unsigned char)(%s);", addr, v); break;
    case NB_BOOL: APPEND(o, "*(unsigned char *)(%s) = (unsigned char)((%s) != 0);", addr, v); break;
    default: nb_emit_fail(e, "unsupported storage dtype %d", (int)st); break;
    }
}

/* ---- tensors ----------------------------------------------------------------------------- */

static void need_atomics(nb_emitter *e)
{
    if (e->target == NB_TARGET_CUDA || !nb_emit_need_helper(e, "nb_atomic_add_f32")) return;
    const char *kw = nb_emit_inline_kw(e);
    APPEND(&e->helpers,
           "%s float nb_atomic_add_f32(float *p, float v) {\n"
           "    unsigned old = __atomic_load_n((unsigned *)p, __ATOMIC_RELAXED), nw;\n"
           "    float o, n;\n"
           "    do { memcpy(&o, &old, 4); n = o + v; memcpy(&nw, &n, 4); }\n"
           "    while (!__atomic_compare_exchange_n((unsigned *)p, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));\n"
           "    return o;\n"
           "}\n"
           "%s double nb_atomic_add_f64(double *p, double v) {\n"
           "    unsigned long long old = __atomic_load_n((unsigned long long *)p, __ATOMIC_RELAXED), nw;\n"
           "    double o, n;\n"
           "    do { memcpy(&o, &old, 8); n = o + v; memcpy(&nw, &n, 8); }\n"
           "    while (!__atomic_compare_exchange_n((unsigned long long *)p, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));\n"
           "    return o;\n"
           "}\n",
           kw, kw);
}

/* The record of the first out-of-range access (callsig.h's nb_oob_rec) and nb_oob_report,
 * which fills it (first one wins). Kept out of line and given its indices and extents as scalars:
 * the checks cost a compare and a branch. (Passing addresses — of an index array or of a tensor
 * parameter's shape — made CUDA copy the whole tensor struct to local memory before every
 * access, a 20x slowdown of a 3x3 stencil on an H200.) */
#define OOB_ARGS "long long i0, long long i1, long long i2, long long i3, long long i4, long long i5, " \
                 "long long i6, long long i7, long long s0, long long s1, long long s2, long long s3, " \
                 "long long s4, long long s5, long long s6, long long s7"
static void need_oob(nb_emitter *e)
{
    e->oob_used = 1;
    if (!nb_emit_need_helper(e, "nb_oob_report")) return;
    APPEND(&e->types, "/* the first out-of-range index of a launch (bounds checks) */\n"
                      "typedef struct nb_oob_rec { unsigned int flag; int kind, site, rank; long long idx[8], shape[8];\n"
                      "    unsigned long long note; } nb_oob_rec;\n");
    /* note: the address of a word set once the record is filled (deferred checks, call.c), 0 none */
    const char *claim, *note;
    if (e->target == NB_TARGET_CUDA) {
        APPEND(&e->helpers, "static __device__ __noinline__ void nb_oob_report(nb_oob_rec *r, int kind, int site, int rank,\n"
                            "    " OOB_ARGS ") {\n");
        claim = "    if (!r || atomicCAS(&r->flag, 0u, 1u) != 0u) return;\n";
        /* (a plain store: the note is host memory; the fence orders the record before it) */
        note = "    if (r->note) { __threadfence_system(); *(volatile unsigned int *)r->note = 1u; }\n";
    } else {
        APPEND(&e->helpers, "static __attribute__((noinline, cold)) void nb_oob_report(nb_oob_rec *r, int kind, int site, int rank,\n"
                            "    " OOB_ARGS ") {\n"
                            "    unsigned nb_z = 0;\n");
        claim = "    if (!r || !__atomic_compare_exchange_n(&r->flag, &nb_z, 1u, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;\n";
        note = "    if (r->note) __atomic_store_n((unsigned int *)r->note, 1u, __ATOMIC_RELEASE);\n";
    }
    APPEND(&e->helpers, "%s"
                        "    const long long ix[8] = {i0, i1, i2, i3, i4, i5, i6, i7}, sh[8] = {s0, s1, s2, s3, s4, s5, s6, s7};\n"
                        "    r->kind = kind; r->site = site; r->rank = rank;\n"
                        "    for (int k = 0; k < rank && k < 8; k++) { r->idx[k] = ix[k]; r->shape[k] = sh[k]; }\n"
                        "%s"
                        "}\n", claim, note);
}

void nb_emit_checked_index(nb_emitter *e, const char *index, int length, const char *what, nb_strbuf *o)
{
    if (e->unchecked) {
        APPEND(o, "(int)(%s)", index);
        return;
    }
    need_oob(e);
    if (nb_emit_need_helper(e, "nb_aidx")) {
        /* local arrays have no record of their own: the entry puts the launch's in nb_oob_cur */
        if (e->target == NB_TARGET_CUDA) APPEND(&e->types, "static __device__ nb_oob_rec *nb_oob_cur;\n");
        else APPEND(&e->types, "static __thread nb_oob_rec *nb_oob_cur;\n");
        APPEND(&e->helpers,
               "%s int nb_aidx(long long i, int n, int site) {\n"
               "    if ((unsigned long long)i >= (unsigned long long)n) {\n"
               "        nb_oob_report(nb_oob_cur, %d, site, 1, i, 0, 0, 0, 0, 0, 0, 0, n, 0, 0, 0, 0, 0, 0, 0);\n"
               "        return 0;\n"
               "    }\n"
               "    return (int)i;\n"
               "}\n",
               nb_emit_inline_kw(e), NB_OOB_ARRAY);
    }
    e->oob_cur_used = 1;
    int site = -1;
    for (int k = 0; k < e->noob_sites; k++)
        if (strcmp(e->oob_sites[k], what) == 0) site = k;
    if (site < 0 && e->noob_sites < NB_OOB_MAX_SITES) {
        site = e->noob_sites++;
        snprintf(e->oob_sites[site], sizeof e->oob_sites[site], "%s", what);
    }
    APPEND(o, "nb_aidx((long long)(%s), %d, %d)", index, length, site);
}

const char *nb_emit_tensor_part(nb_emitter *e, int which, const nb_type *dt, const nb_type *rt)
{
    char nm[160];
    nb_emit_helper_name(e, which == 0 ? "tprimal" : which == 1 ? "tgrad" : "twith_primal", dt, NULL, nm, sizeof nm);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    const char *dn = nb_emit_ctype(e, dt);
    const char *tn = nb_emit_ctype(e, nb_type_tensor(e->tt, dt->elem, dt->rank, 0));
    const char *kw = nb_emit_inline_kw(e);
    if (which == 2) {
        APPEND(&e->helpers, "%s %s %s(%s v, %s t) {\n    v.data = t.data;\n", kw, dn, nm, dn, tn);
        for (int d = 0; d < dt->rank; d++) APPEND(&e->helpers, "    v.shape[%d] = t.shape[%d]; v.strides[%d] = t.strides[%d];\n", d, d, d, d);
        APPEND(&e->helpers, "    v.oob = t.oob; v.site = t.site;\n    return v;\n}\n");
    } else {
        /* (no gradient bound: an empty view, so that an access is a reported out-of-range index, not a
         * write through a null pointer) */
        APPEND(&e->helpers, "%s %s %s(%s v) {\n    %s r;\n    r.data = v.%s;\n", kw, tn, nm, dn, tn, which ? "grad" : "data");
        for (int d = 0; d < dt->rank; d++)
            APPEND(&e->helpers, "    r.shape[%d] = %sv.shape[%d]; r.strides[%d] = v.%s[%d];\n", d, which ? "!v.grad ? 0 : " : "", d, d,
                   which ? "grad_strides" : "strides", d);
        APPEND(&e->helpers, "    r.oob = v.oob; r.site = v.site;\n    return r;\n}\n");
    }
    (void)rt;
    return nb_emit_registered(e, nm);
}

const char *nb_emit_tensor_helper(nb_emitter *e, nb_ir_op op, const nb_type *t, int grad)
{
    if (grad && !t->diff_tensor) grad = 0; /* (only DiffTensors carry a gradient buffer) */
    const char *pre = op == NB_IR_TLOAD ? (grad ? "tgload" : "tload") : op == NB_IR_TSTORE ? (grad ? "tgstore" : "tstore")
                                                                                           : (grad ? "tgatomic_add" : "tatomic_add");
    char nm[160];
    nb_emit_helper_name(e, pre, t, NULL, nm, sizeof nm);
    if (!nb_emit_need_helper(e, nm)) return nb_emit_registered(e, nm);
    const nb_type *el = t->elem;
    const char *tn = nb_emit_ctype(e, t), *en = nb_emit_ctype(e, el);
    nb_scalar_kind s = nb_type_elem_scalar(el);
    nb_dtype dt = nb_emit_natural_dtype(s);
    int comps = nb_type_components(el);
    if (comps < 1 || (el->kind != NB_TY_SCALAR && el->kind != NB_TY_VECTOR && el->kind != NB_TY_MATRIX)) {
        nb_emit_fail(e, "tensors of '%s' are not supported", el->name ? el->name : "?");
        return nb_emit_registered(e, nm);
    }
    size_t esz = nb_dtype_size(dt);
    nb_strbuf p, b;
    nb_strbuf_init(&p);
    nb_strbuf_init(&b);
    APPEND(&p, "%s t", tn);
    nb_strbuf z;
    nb_strbuf_init(&z);
    if (op != NB_IR_TSTORE) nb_emit_zero(e, el, &z);
    const char *ret0 = op == NB_IR_TSTORE ? "return;" : NULL;
    char retbuf[200];
    if (!ret0) {
        snprintf(retbuf, sizeof retbuf, "return %s;", nb_strbuf_cstr(&z));
        ret0 = retbuf;
    }
    if (t->buffer) /* structured buffers: robust access (out of range reads 0, drops a store), no error */
        APPEND(&b, "    if ((unsigned long long)(long long)i0 >= (unsigned long long)t.shape[0]) %s\n", ret0);
    else if (t->rank > 0 && !e->unchecked) { /* bounds check (callsig.h): out of range touches nothing and is recorded */
        need_oob(e);
        nb_strbuf_append(&b, "    if (");
        for (int d = 0; d < t->rank; d++)
            APPEND(&b, "%s(unsigned long long)(long long)i%d >= (unsigned long long)t.shape[%d]", d ? " || " : "", d, d);
        APPEND(&b, ") {\n        nb_oob_report(t.oob, %d, t.site, %d", grad ? NB_OOB_TENSOR_GRAD : NB_OOB_TENSOR, t->rank);
        for (int d = 0; d < 8; d++) {
            if (d < t->rank) APPEND(&b, ", i%d", d);
            else nb_strbuf_append(&b, ", 0");
        }
        for (int d = 0; d < 8; d++) {
            if (d < t->rank) APPEND(&b, ", t.shape[%d]", d);
            else nb_strbuf_append(&b, ", 0");
        }
        APPEND(&b, ");\n        %s\n    }\n", ret0);
    }
    if (grad) /* no gradient buffer: reads are 0, writes go nowhere */
        APPEND(&b, "    if (!t.grad) %s\n", ret0);
    nb_strbuf_free(&z);
    APPEND(&b, "    char *p = t.%s", grad ? "grad" : "data");
    for (int d = 0; d < t->rank; d++) {
        APPEND(&p, ", int i%d", d);
        APPEND(&b, " + (long long)i%d * t.%s[%d]", d, grad ? "grad_strides" : "strides", d);
    }
    nb_strbuf_append(&b, ";\n");
    const char *kw = nb_emit_inline_kw(e);
    if (op == NB_IR_TLOAD) {
        APPEND(&b, "    %s r;\n", en);
        for (int k = 0; k < comps; k++) {
            char addr[64];
            snprintf(addr, sizeof addr, "p + %zu", (size_t)k * esz);
            nb_strbuf_append(&b, "    r");
            nb_emit_comp(el, k, &b);
            nb_strbuf_append(&b, " = ");
            nb_emit_load_scalar(e, dt, s, addr, &b);
            nb_strbuf_append(&b, ";\n");
        }
        APPEND(&e->helpers, "%s %s %s(%s) {\n%s    return r;\n}\n", kw, en, nm, nb_strbuf_cstr(&p), nb_strbuf_cstr(&b));
    } else if (op == NB_IR_TSTORE) {
        for (int k = 0; k < comps; k++) {
            char addr[64];
            nb_strbuf v;
            nb_strbuf_init(&v);
            nb_strbuf_append(&v, "v");
            nb_emit_comp(el, k, &v);
            snprintf(addr, sizeof addr, "p + %zu", (size_t)k * esz);
            nb_strbuf_append(&b, "    ");
            nb_emit_store_scalar(e, dt, s, addr, nb_strbuf_cstr(&v), &b);
            nb_strbuf_append(&b, "\n");
            nb_strbuf_free(&v);
        }
        APPEND(&e->helpers, "%s void %s(%s, %s v) {\n%s}\n", kw, nm, nb_strbuf_cstr(&p), en, nb_strbuf_cstr(&b));
    } else {
        if (el->kind != NB_TY_SCALAR || (s != NB_SC_FLOAT && s != NB_SC_DOUBLE && s != NB_SC_INT && s != NB_SC_UINT)) {
            nb_emit_fail(e, "atomicAdd on tensors of '%s' is not supported", el->name ? el->name : "?");
        } else if (e->target == NB_TARGET_CUDA && grad && e->warp_kernel && s == NB_SC_FLOAT) {
            /* (a gradient add of the reverse sweep: its value is never used) */
            APPEND(&b, "    %s((float *)p, v);\n    return 0.0f;\n", nb_emit_nn_warp_red_helper(e));
        } else if (e->target == NB_TARGET_CUDA) {
            APPEND(&b, "    return atomicAdd((%s *)p, v);\n", nb_emit_scalar_ctype(s));
        } else if (s == NB_SC_FLOAT || s == NB_SC_DOUBLE) {
            need_atomics(e);
            APPEND(&b, "    return nb_atomic_add_%s((%s *)p, v);\n", s == NB_SC_FLOAT ? "f32" : "f64", nb_emit_scalar_ctype(s));
        } else {
            APPEND(&b, "    return __atomic_fetch_add((%s *)p, v, __ATOMIC_RELAXED);\n", nb_emit_scalar_ctype(s));
        }
        APPEND(&e->helpers, "%s %s %s(%s, %s v) {\n%s}\n", kw, en, nm, nb_strbuf_cstr(&p), en, nb_strbuf_cstr(&b));
    }
    nb_strbuf_free(&p);
    nb_strbuf_free(&b);
    return nb_emit_registered(e, nm);
}

const char *nb_emit_thread_ids_type(nb_emitter *e)
{
    if (nb_emit_need_helper(e, "nb_thread_ids")) {
        const char *u3 = nb_emit_ctype(e, nb_type_vector(e->tt, NB_SC_UINT, 3));
        APPEND(&e->types,
               "/* thread indices of a [Kernel] function: dispatch_id = global thread index (x fastest);\n"
               "   grid_dim = blocks in the launch (callgen.c) */\n"
               "typedef struct nb_thread_ids { %s dispatch_id, thread_idx, block_idx, block_dim, grid_dim; } nb_thread_ids;\n", u3);
    }
    return "nb_thread_ids";
}

/* ---- output ------------------------------------------------------------------------------ */

void nb_emit_finish(nb_emitter *e, nb_strbuf *out)
{
    if (e->target == NB_TARGET_CUDA) {
        nb_strbuf_append(out, "/* generated by nabla: CUDA C (NVRTC, no includes) */\n");
    } else {
        if (e->need_fibers) nb_strbuf_append(out, "#define _GNU_SOURCE /* (ucontext: the group runtime) */\n");
        nb_strbuf_append(out,
                         "/* generated by nabla: C99 */\n#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
                         "#if !defined(__cplusplus) && (!defined(__STDC_VERSION__) || __STDC_VERSION__ < 202311L)\n"
                         "typedef _Bool bool;\n#endif\n");
        if (e->need_stdio) nb_strbuf_append(out, "#include <stdio.h>\n");
        if (e->need_fibers) nb_strbuf_append(out, "#include <stdlib.h>\n#include <ucontext.h>\n");
    }
    if (e->preludes.len) { /* __requirePrelude (emit_target.c) */
        nb_strbuf_append(out, "\n");
        nb_strbuf_append(out, nb_strbuf_cstr(&e->preludes));
    }
    if (e->types.len) { nb_strbuf_append(out, "\n"); nb_strbuf_append(out, nb_strbuf_cstr(&e->types)); }
    if (e->helpers.len) { nb_strbuf_append(out, "\n"); nb_strbuf_append(out, nb_strbuf_cstr(&e->helpers)); }
    if (e->globals.len) { nb_strbuf_append(out, "\n"); nb_strbuf_append(out, nb_strbuf_cstr(&e->globals)); }
    if (e->protos.len) { nb_strbuf_append(out, "\n"); nb_strbuf_append(out, nb_strbuf_cstr(&e->protos)); }
    if (e->funcs.len) nb_strbuf_append(out, nb_strbuf_cstr(&e->funcs));
    if (e->tail.len) { nb_strbuf_append(out, "\n"); nb_strbuf_append(out, nb_strbuf_cstr(&e->tail)); }
}
