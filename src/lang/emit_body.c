/* C / CUDA C emitter: function bodies (see emit_c.h).
 *
 * Readability comes from expression inlining: a pure value used once, later in the same region,
 * is printed inside its user's expression instead of as a temporary — unless it reads memory and
 * a write (store, call, control flow) comes between its definition and its use. Constants are
 * always printed as literals. Loops become `while`, `do … while` or `for (;;)` with a
 * `goto nb_continue_N` when `continue` must still run the step / condition code.
 */
#include <stdio.h>
#include <string.h>

#include "lang/emit_c.h"
#include "lang/intrinsics.h"
#include "core/strmap.h"

#define APPEND(sb, ...) nb_strbuf_printf((sb), __VA_ARGS__)

static void render(nb_emitter *e, nb_ir_inst *x, nb_strbuf *o);
static void emit_block(nb_emitter *e, nb_ir_block *bl, nb_strbuf *o);

static void ind(nb_emitter *e, nb_strbuf *o)
{
    for (int i = 0; i < e->indent; i++) nb_strbuf_append(o, "    ");
}

/* ---- names ------------------------------------------------------------------------------- */

/* e->names maps a name to (next suffix to try << 1) | (1 if this function uses it): a taken
 * base's suffixes 1 .. next-1 were all taken when the counter was stored, and names are never
 * released within a function, so the search resumes there (O(1) amortised per name). */
static nb_strmap *name_map(nb_emitter *e, nb_strmap **slot)
{
    if (!*slot) {
        *slot = nb_arena_alloc(&e->m->arena, sizeof(nb_strmap), sizeof(void *));
        if (!*slot) return NULL;
        nb_strmap_init(*slot, &e->m->arena);
    }
    return *slot;
}

static intptr_t name_info(nb_emitter *e, const char *s)
{
    nb_strmap_slot *sl = e->names ? nb_strmap_find(e->names, s) : NULL;
    return sl ? (intptr_t)sl->val : 0;
}

static int set_name_info(nb_emitter *e, const char *s, intptr_t v, const char **key)
{
    nb_strmap *m = name_map(e, &e->names);
    int isnew = 0;
    nb_strmap_slot *sl = m ? nb_strmap_get(m, s, &isnew) : NULL;
    if (!sl) return 0;
    if (isnew && !(sl->key = nb_arena_strdup(&e->m->arena, s))) return 0;
    sl->val = (void *)v;
    if (key) *key = sl->key;
    return 1;
}

static int func_cname_clash(nb_emitter *e, const char *s)
{
    nb_strmap *fm = name_map(e, &e->func_cnames);
    if (!fm) return 0;
    if (e->nfunc_cnames > e->m->nfuncs) { /* functions were dropped: start over */
        nb_strmap_init(fm, &e->m->arena);
        e->nfunc_cnames = 0;
    }
    for (; e->nfunc_cnames < e->m->nfuncs; e->nfunc_cnames++)
        if (e->m->funcs[e->nfunc_cnames]->cname) nb_strmap_get(fm, e->m->funcs[e->nfunc_cnames]->cname, NULL);
    return nb_strmap_find(fm, s) != NULL;
}

static int name_taken(nb_emitter *e, const char *s) { return (name_info(e, s) & 1) || func_cname_clash(e, s); }

static const char *unique_name(nb_emitter *e, const char *base)
{
    const char *safe = nb_emit_safe_name(e, base);
    char buf[300];
    snprintf(buf, sizeof buf, "%s", safe);
    if (name_taken(e, buf)) {
        intptr_t k = name_info(e, safe) >> 1;
        for (k = k < 1 ? 1 : k;; k++) {
            snprintf(buf, sizeof buf, "%s_%ld", safe, (long)k);
            if (!name_taken(e, buf)) break;
        }
        if (!set_name_info(e, safe, ((k + 1) << 1) | (name_info(e, safe) & 1), NULL)) { e->ok = 0; return "oom"; }
    }
    const char *d = NULL;
    if (!set_name_info(e, buf, name_info(e, buf) | 1, &d)) { e->ok = 0; return "oom"; }
    return d;
}

static const char *func_name(nb_emitter *e, const nb_ir_func *f) { return nb_emit_safe_name(e, f->cname); }

/* ---- inlining decisions ------------------------------------------------------------------ */

static int writes_memory(const nb_ir_inst *in)
{
    switch (in->op) {
    case NB_IR_STORE: case NB_IR_CALL: case NB_IR_TSTORE: case NB_IR_TATOMIC_ADD:
    case NB_IR_IF: case NB_IR_LOOP: case NB_IR_SWITCH: case NB_IR_PSTORE:
        return 1;
    case NB_IR_INTRIN: { /* barriers and wave operations: other threads' writes become visible */
        const nb_intrinsic_info *ii = nb_intrinsic_get(in->intrinsic);
        return ii && (ii->flags & (NB_IFLAG_WARP | NB_IFLAG_GROUP | NB_IFLAG_EFFECT));
    }
    default:
        return 0;
    }
}

typedef struct inline_ctx {
    nb_emitter *e;
    unsigned char *reads;
} inline_ctx;

static void note_users(nb_ir_inst *in, void *ud)
{
    nb_emitter *e = ud;
    for (int i = 0; i < in->nops; i++)
        if (in->ops[i]) e->user[in->ops[i]->id] = in;
}

static void decide_block(nb_emitter *e, nb_ir_block *bl, unsigned char *reads)
{
    for (nb_ir_inst *x = bl->first; x; x = x->next) {
        for (int i = 0; i < x->nblocks; i++) decide_block(e, x->blocks[i], reads);
        int id = x->id;
        int r = x->op == NB_IR_LOAD || x->op == NB_IR_TLOAD || x->op == NB_IR_PLOAD;
        for (int i = 0; i < x->nops; i++)
            if (x->ops[i] && e->inlined[x->ops[i]->id] && reads[x->ops[i]->id]) r = 1;
        reads[id] = (unsigned char)r;
        if (!x->type || x->type->kind == NB_TY_VOID) continue;
        if (x->op == NB_IR_CONST || x->op == NB_IR_ZERO || x->op == NB_IR_GLOBAL) {
            e->inlined[id] = 1;
            continue;
        }
        nb_ir_inst *u = e->user[id];
        if (x->op == NB_IR_CALL && x->uses == 1 && u && x->next == u &&
            ((u->op == NB_IR_STORE && u->nops == 1) || u->op == NB_IR_RETURN)) {
            e->inlined[id] = 1; /* `v = f(…);` / `return f(…);` */
            reads[id] = 1;
            continue;
        }
        if (x->uses != 1 || !nb_ir_is_pure(x)) continue;
        if (!u) continue;
        nb_ir_inst *stop = NULL;
        if (u->parent == bl) stop = u;
        else if (u->op == NB_IR_LOOP && u->ops[0] == x && bl == u->blocks[0]) stop = NULL; /* to the end */
        else continue;
        if (r) {
            int blocked = 0;
            for (nb_ir_inst *y = x->next; y && y != stop; y = y->next)
                if (writes_memory(y)) { blocked = 1; break; }
            if (blocked) continue;
        }
        e->inlined[id] = 1;
    }
}

/* ---- expressions ------------------------------------------------------------------------- */

static int is_infix(const nb_ir_inst *x)
{
    if (x->type->kind != NB_TY_SCALAR) return 0;
    return (x->op >= NB_IR_NEG && x->op <= NB_IR_GE) || x->op == NB_IR_CONVERT || x->op == NB_IR_SELECT;
}

static void render_operand(nb_emitter *e, nb_ir_inst *x, nb_strbuf *o)
{
    int paren = e->inlined[x->id] && is_infix(x);
    if (paren) nb_strbuf_append_char(o, '(');
    render(e, x, o);
    if (paren) nb_strbuf_append_char(o, ')');
}

static void render_str(nb_emitter *e, nb_ir_inst *x, nb_strbuf *tmp, int operand)
{
    nb_strbuf_clear(tmp);
    if (operand) render_operand(e, x, tmp);
    else render(e, x, tmp);
}

static void render_var(nb_emitter *e, nb_ir_var *v, nb_strbuf *o)
{
    const char *n = e->var_names[v->id];
    if (v->param >= 0 && v->dir != NB_DIR_IN) APPEND(o, "(*%s)", n);
    else nb_strbuf_append(o, n);
}

/* The index ix into a local array / matrix / vector of type t, bounds-checked unless it is a
 * constant in range (callsig.h); `name` is the variable's, or NULL. */
static void render_index(nb_emitter *e, nb_ir_inst *ix, const nb_type *t, const char *name, nb_strbuf *o)
{
    int len = t->kind == NB_TY_ARRAY ? t->length : t->kind == NB_TY_MATRIX ? t->rows : t->cols;
    if (ix->op == NB_IR_CONST && ix->cv[0].i >= 0 && ix->cv[0].i < len) {
        render(e, ix, o);
        return;
    }
    nb_strbuf is;
    nb_strbuf_init(&is);
    render(e, ix, &is);
    char what[96];
    const char *kind = t->kind == NB_TY_ARRAY ? "array" : t->kind == NB_TY_MATRIX ? "matrix" : "vector";
    const char *fn = e->f && e->f->name ? e->f->name : "?";
    if (name)
        snprintf(what, sizeof what, "%s '%s' of %s %d in function '%s'", kind, name,
                 t->kind == NB_TY_MATRIX ? "rows" : "length", len, fn);
    else snprintf(what, sizeof what, "a local %s of %s %d in function '%s'", kind, t->kind == NB_TY_MATRIX ? "rows" : "length", len, fn);
    nb_emit_checked_index(e, nb_strbuf_cstr(&is), len, what, o);
    nb_strbuf_free(&is);
}

/* var + path up to `upto` steps as a C lvalue. */
static void render_lvalue(nb_emitter *e, nb_ir_inst *in, int upto, nb_strbuf *o)
{
    nb_strbuf base;
    nb_strbuf_init(&base);
    const nb_type *t;
    char dname[64]; /* the source spelling, for bounds-check messages */
    if (!in->var) { /* through a pointer (ops[0]; ir_ptr.c) */
        nb_strbuf p;
        nb_strbuf_init(&p);
        render(e, in->ops[0], &p);
        APPEND(&base, "(*%s)", nb_strbuf_cstr(&p));
        nb_strbuf_free(&p);
        t = in->ops[0]->type->elem;
        snprintf(dname, sizeof dname, "*pointer");
    } else {
        render_var(e, in->var, &base);
        t = in->var->type;
        snprintf(dname, sizeof dname, "%s", in->var->name ? in->var->name : "?");
    }
    for (int i = 0; i < upto; i++) {
        const nb_ir_step *s = &in->path[i];
        if (s->kind == NB_IR_STEP_FIELD) {
            size_t dn = strlen(dname);
            if (t->kind == NB_TY_DIFFPAIR) nb_strbuf_append(&base, s->index ? ".d" : ".p");
            else if (t->kind == NB_TY_STRUCT && t->decl && s->index < t->decl->u.strct.nfields) {
                APPEND(&base, ".%s", nb_emit_safe_name(e, t->decl->u.strct.fields[s->index]->name));
                snprintf(dname + dn, sizeof dname - dn, ".%s", t->decl->u.strct.fields[s->index]->name);
            }
        } else if (s->kind == NB_IR_STEP_INDEX) {
            nb_ir_inst *ix = in->ops[s->index];
            nb_strbuf is;
            nb_strbuf_init(&is);
            if (t->kind == NB_TY_ARRAY || t->kind == NB_TY_MATRIX || t->kind == NB_TY_VECTOR)
                render_index(e, ix, t, dname, &is);
            else render(e, ix, &is);
            if (t->kind == NB_TY_ARRAY) APPEND(&base, ".a[%s]", nb_strbuf_cstr(&is));
            else if (t->kind == NB_TY_MATRIX) APPEND(&base, ".r[%s]", nb_strbuf_cstr(&is));
            else if (t->kind == NB_TY_VECTOR) {
                if (ix->op == NB_IR_CONST && ix->cv[0].i >= 0 && ix->cv[0].i < 4)
                    APPEND(&base, ".%c", "xyzw"[ix->cv[0].i]);
                else {
                    char *b = nb_arena_strdup(&e->m->arena, nb_strbuf_cstr(&base));
                    nb_strbuf_clear(&base);
                    APPEND(&base, "(&%s.x)[%s]", b ? b : "", nb_strbuf_cstr(&is));
                }
            }
            nb_strbuf_free(&is);
        }
        t = s->type;
    }
    nb_strbuf_append(o, nb_strbuf_cstr(&base));
    nb_strbuf_free(&base);
}

static void render_global(nb_emitter *e, nb_ir_global *g, nb_strbuf *o)
{
    if (e->global_done[g->index] == 2) APPEND(o, "%s()", func_name(e, g->init));
    else nb_strbuf_append(o, nb_emit_safe_name(e, g->cname));
}

/* In the host unit a view is a pair of tensor handles (emit_host.c): only assigned and passed to
 * __dispatch_kernel; reading, writing or asking it anything is device code. 1 after failing. */
static int host_view_op(nb_emitter *e, const nb_ir_inst *x)
{
    if (!e->host_views) return 0;
    int bad = x->op == NB_IR_TLOAD || x->op == NB_IR_TSTORE || x->op == NB_IR_TATOMIC_ADD;
    if (x->op == NB_IR_INTRIN) {
        const nb_intrinsic_info *ii = nb_intrinsic_get(x->intrinsic);
        for (int i = 0; !bad && ii && ii->sig != NB_ISIG_TORCH && i < x->nops; i++)
            bad = x->ops[i] && x->ops[i]->type && x->ops[i]->type->kind == NB_TY_TENSOR;
    }
    if (bad)
        nb_emit_fail(e, "a TensorView in host code can only be assigned from a TorchTensor and passed to "
                     "__dispatch_kernel (its elements and sizes are device code: use the TorchTensor)");
    return bad;
}

static void render_expr(nb_emitter *e, nb_ir_inst *x, nb_strbuf *o)
{
    if (host_view_op(e, x)) {
        nb_strbuf_append(o, "0");
        return;
    }
    nb_strbuf a, b;
    nb_strbuf_init(&a);
    nb_strbuf_init(&b);
    const nb_type *t = x->type;
    switch (x->op) {
    case NB_IR_CONST: nb_emit_literal(e, t, x->cv, o); break;
    case NB_IR_ZERO: nb_emit_zero(e, t, o); break;
    case NB_IR_GLOBAL: render_global(e, x->global, o); break;
    case NB_IR_NEG: case NB_IR_NOT: case NB_IR_BNOT:
        if (t->kind == NB_TY_SCALAR) {
            render_str(e, x->ops[0], &a, 1);
            nb_emit_scalar_op(x->op, t->scalar, t->scalar, nb_strbuf_cstr(&a), NULL, o);
        } else {
            render_str(e, x->ops[0], &a, 0);
            APPEND(o, "%s(%s)", nb_emit_op_helper(e, x->op, t, NULL), nb_strbuf_cstr(&a));
        }
        break;
    case NB_IR_ADD: case NB_IR_SUB: case NB_IR_MUL: case NB_IR_DIV: case NB_IR_MOD:
    case NB_IR_BAND: case NB_IR_BOR: case NB_IR_BXOR: case NB_IR_SHL: case NB_IR_SHR:
    case NB_IR_LAND: case NB_IR_LOR:
    case NB_IR_EQ: case NB_IR_NE: case NB_IR_LT: case NB_IR_LE: case NB_IR_GT: case NB_IR_GE: {
        const nb_type *ot = x->ops[0]->type;
        if (ot->kind == NB_TY_PTR) { /* p == q */
            render_str(e, x->ops[0], &a, 1);
            render_str(e, x->ops[1], &b, 1);
            APPEND(o, "(%s %s %s)", nb_strbuf_cstr(&a), x->op == NB_IR_EQ ? "==" : "!=", nb_strbuf_cstr(&b));
            break;
        }
        if (ot->kind == NB_TY_SCALAR) {
            render_str(e, x->ops[0], &a, 1);
            render_str(e, x->ops[1], &b, 1);
            nb_emit_scalar_op(x->op, ot->scalar, t->scalar, nb_strbuf_cstr(&a), nb_strbuf_cstr(&b), o);
        } else {
            render_str(e, x->ops[0], &a, 0);
            render_str(e, x->ops[1], &b, 0);
            int cmp = x->op >= NB_IR_EQ && x->op <= NB_IR_GE;
            APPEND(o, "%s(%s, %s)", nb_emit_op_helper(e, x->op, t, cmp ? ot : NULL), nb_strbuf_cstr(&a), nb_strbuf_cstr(&b));
        }
        break;
    }
    case NB_IR_CONVERT: {
        const nb_type *ft = x->ops[0]->type;
        if (!strcmp(nb_emit_ctype(e, ft), nb_emit_ctype(e, t))) { render(e, x->ops[0], o); break; }
        if (t->kind == NB_TY_PTR) { /* (T*)p */
            render_str(e, x->ops[0], &a, 1);
            APPEND(o, "((%s)%s)", nb_emit_ctype(e, t), nb_strbuf_cstr(&a));
            break;
        }
        if (t->kind == NB_TY_SCALAR) {
            render_str(e, x->ops[0], &a, 1);
            nb_emit_scalar_op(NB_IR_CONVERT, ft->scalar, t->scalar, nb_strbuf_cstr(&a), NULL, o);
        } else {
            render_str(e, x->ops[0], &a, 0);
            APPEND(o, "%s(%s)", nb_emit_op_helper(e, NB_IR_CONVERT, t, ft), nb_strbuf_cstr(&a));
        }
        break;
    }
    case NB_IR_SPLAT:
        render_str(e, x->ops[0], &a, 0);
        APPEND(o, "%s(%s)", nb_emit_op_helper(e, NB_IR_SPLAT, t, NULL), nb_strbuf_cstr(&a));
        break;
    case NB_IR_SELECT: {
        nb_strbuf c;
        nb_strbuf_init(&c);
        int scalar_cond = x->ops[0]->type->kind == NB_TY_SCALAR;
        render_str(e, x->ops[0], &c, scalar_cond);
        render_str(e, x->ops[1], &a, scalar_cond);
        render_str(e, x->ops[2], &b, scalar_cond);
        if (scalar_cond) APPEND(o, "%s ? %s : %s", nb_strbuf_cstr(&c), nb_strbuf_cstr(&a), nb_strbuf_cstr(&b));
        else
            APPEND(o, "%s(%s, %s, %s)", nb_emit_op_helper(e, NB_IR_SELECT, t, NULL), nb_strbuf_cstr(&c), nb_strbuf_cstr(&a),
                   nb_strbuf_cstr(&b));
        nb_strbuf_free(&c);
        break;
    }
    case NB_IR_CONSTRUCT:
        APPEND(o, "%s(", nb_emit_make_helper(e, t));
        for (int i = 0; i < x->nops; i++) {
            if (i) nb_strbuf_append(o, ", ");
            render(e, x->ops[i], o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_IR_EXTRACT: {
        const nb_type *bt = x->ops[0]->type;
        render_str(e, x->ops[0], &a, 1);
        if (x->field >= 0) {
            if (bt->kind == NB_TY_VECTOR) APPEND(o, "%s.%c", nb_strbuf_cstr(&a), "xyzw"[x->field & 3]);
            else if (bt->kind == NB_TY_MATRIX) APPEND(o, "%s.r[%d]", nb_strbuf_cstr(&a), x->field);
            else if (bt->kind == NB_TY_ARRAY) APPEND(o, "%s.a[%d]", nb_strbuf_cstr(&a), x->field);
            else if (bt->kind == NB_TY_DIFFPAIR) APPEND(o, "%s.%s", nb_strbuf_cstr(&a), x->field ? "d" : "p");
            else if (bt->kind == NB_TY_STRUCT && bt->decl && x->field < bt->decl->u.strct.nfields)
                APPEND(o, "%s.%s", nb_strbuf_cstr(&a), nb_emit_safe_name(e, bt->decl->u.strct.fields[x->field]->name));
            else nb_emit_fail(e, "internal: bad extract");
        } else {
            nb_strbuf_clear(&b);
            if (bt->kind == NB_TY_ARRAY || bt->kind == NB_TY_MATRIX || bt->kind == NB_TY_VECTOR)
                render_index(e, x->ops[1], bt, x->ops[0]->op == NB_IR_LOAD && x->ops[0]->var && !x->ops[0]->npath ? x->ops[0]->var->name : NULL, &b);
            else render(e, x->ops[1], &b);
            if (bt->kind == NB_TY_ARRAY) APPEND(o, "%s.a[%s]", nb_strbuf_cstr(&a), nb_strbuf_cstr(&b));
            else if (bt->kind == NB_TY_MATRIX) APPEND(o, "%s.r[%s]", nb_strbuf_cstr(&a), nb_strbuf_cstr(&b));
            else if (bt->kind == NB_TY_VECTOR)
                APPEND(o, "%s(%s, %s)", nb_emit_get_helper(e, bt), nb_strbuf_cstr(&a), nb_strbuf_cstr(&b));
            else nb_emit_fail(e, "internal: bad dynamic extract");
        }
        break;
    }
    case NB_IR_SWIZZLE:
        render_str(e, x->ops[0], &a, 0);
        APPEND(o, "%s(%s)", nb_emit_swizzle_helper(e, x->ops[0]->type, x->swz, x->nswz), nb_strbuf_cstr(&a));
        break;
    case NB_IR_INTRIN: {
        const nb_type *at8[8], **at = at8;
        const char *args8[8], **args = args8;
        const nb_intrinsic_info *ii = nb_intrinsic_get(x->intrinsic);
        int host = ii && ii->sig == NB_ISIG_TORCH; /* host code: all operands (emit_host.c) */
        int n = x->nops < 8 || host ? x->nops : 8;
        if (n > 8) {
            at = nb_arena_alloc(&e->m->arena, sizeof *at * (size_t)n, sizeof(void *));
            args = nb_arena_alloc(&e->m->arena, sizeof *args * (size_t)n, sizeof(void *));
            if (!at || !args) { e->ok = 0; break; }
        }
        for (int i = 0; i < n; i++) {
            render_str(e, x->ops[i], &a, 0);
            char *st = nb_arena_strdup(&e->m->arena, nb_strbuf_cstr(&a));
            args[i] = st ? st : "";
            at[i] = x->ops[i]->type;
        }
        if (host) nb_emit_host_intrinsic(e, x, t, at, args, n, o);
        else nb_emit_intrinsic(e, x->intrinsic, t, at, args, n, o);
        break;
    }
    case NB_IR_CALL: {
        nb_ir_func *c = nb_emit_variant(e, x->callee);
        if (c->asm_text) { /* __intrinsic_asm: the call is the expansion (emit_target.c) */
            const nb_type *at[16];
            const char *args[16];
            int n = x->nops < 16 ? x->nops : 16;
            for (int i = 0; i < n; i++) {
                nb_strbuf_clear(&a);
                if (x->refs && x->refs[i]) {
                    nb_ir_var *v = x->refs[i];
                    if (v->param >= 0 && v->dir != NB_DIR_IN) APPEND(&a, "(*%s)", e->var_names[v->id]);
                    else nb_strbuf_append(&a, e->var_names[v->id]);
                    at[i] = v->type;
                } else {
                    render(e, x->ops[i], &a);
                    at[i] = x->ops[i]->type;
                }
                args[i] = nb_arena_strdup(&e->m->arena, nb_strbuf_cstr(&a));
                if (!args[i]) args[i] = "";
            }
            int value = c->ret && c->ret->kind != NB_TY_VOID;
            if (value) nb_strbuf_append_char(o, '(');
            nb_emit_asm_call(e, c, args, at, n, o);
            if (value) nb_strbuf_append_char(o, ')');
            break;
        }
        APPEND(o, "%s(", func_name(e, c));
        int first = 1;
        if (c->has_tid) {
            nb_strbuf_append(o, "nb_tid");
            first = 0;
        }
        for (int i = 0; i < x->nops; i++) {
            if (!first) nb_strbuf_append(o, ", ");
            first = 0;
            if (x->refs && x->refs[i]) {
                nb_ir_var *v = x->refs[i];
                if (v->param >= 0 && v->dir != NB_DIR_IN) nb_strbuf_append(o, e->var_names[v->id]);
                else APPEND(o, "&%s", e->var_names[v->id]);
            } else render(e, x->ops[i], o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    }
    case NB_IR_LOAD: {
        int n = x->npath;
        if (n && x->path[n - 1].kind == NB_IR_STEP_SWIZZLE) {
            const nb_ir_step *s = &x->path[n - 1];
            const nb_type *vt = n > 1 ? x->path[n - 2].type : x->var->type;
            render_lvalue(e, x, n - 1, &a);
            APPEND(o, "%s(%s)", nb_emit_swizzle_helper(e, vt, s->swz, s->nswz), nb_strbuf_cstr(&a));
        } else render_lvalue(e, x, n, o);
        break;
    }
    case NB_IR_PLOAD: {
        int n = x->npath;
        if (n && x->path[n - 1].kind == NB_IR_STEP_SWIZZLE) {
            const nb_ir_step *s = &x->path[n - 1];
            const nb_type *vt = n > 1 ? x->path[n - 2].type : x->ops[0]->type->elem;
            render_lvalue(e, x, n - 1, &a);
            APPEND(o, "%s(%s)", nb_emit_swizzle_helper(e, vt, s->swz, s->nswz), nb_strbuf_cstr(&a));
        } else render_lvalue(e, x, n, o);
        break;
    }
    case NB_IR_ADDR:
        render_lvalue(e, x, x->npath, &a);
        APPEND(o, "(&%s)", nb_strbuf_cstr(&a));
        break;
    case NB_IR_PADD:
        render_str(e, x->ops[0], &a, 1);
        render_str(e, x->ops[1], &b, 1);
        APPEND(o, "(%s + %s)", nb_strbuf_cstr(&a), nb_strbuf_cstr(&b));
        break;
    case NB_IR_PRINTF: {
        const nb_type *at[32];
        const char *args[32];
        int n = x->nops < 32 ? x->nops : 32;
        for (int i = 0; i < n; i++) {
            nb_strbuf_clear(&a);
            render(e, x->ops[i], &a);
            args[i] = nb_arena_strdup(&e->m->arena, nb_strbuf_cstr(&a));
            if (!args[i]) args[i] = "0";
            at[i] = x->ops[i]->type;
        }
        nb_emit_printf(e, x->text ? x->text : "\"\"", args, at, n, o);
        break;
    }
    case NB_IR_TLOAD: case NB_IR_TATOMIC_ADD:
        APPEND(o, "%s(", nb_emit_tensor_helper(e, x->op, x->ops[0]->type, (x->flags & NB_IRF_TGRAD) != 0));
        for (int i = 0; i < x->nops; i++) {
            if (i) nb_strbuf_append(o, ", ");
            render(e, x->ops[i], o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    default:
        nb_emit_fail(e, "internal: cannot render '%s' as an expression", nb_ir_op_name(x->op));
        break;
    }
    nb_strbuf_free(&a);
    nb_strbuf_free(&b);
}

static void render(nb_emitter *e, nb_ir_inst *x, nb_strbuf *o)
{
    if (!x) {
        nb_emit_fail(e, "internal: missing operand");
        return;
    }
    if (!e->inlined[x->id] && e->val_names[x->id]) {
        nb_strbuf_append(o, e->val_names[x->id]);
        return;
    }
    render_expr(e, x, o);
}

/* ---- statements -------------------------------------------------------------------------- */

static int has_continue(const nb_ir_block *bl)
{
    for (const nb_ir_inst *x = bl->first; x; x = x->next) {
        if (x->op == NB_IR_CONTINUE) return 1;
        if (x->op == NB_IR_LOOP) continue; /* its continues are its own */
        for (int i = 0; i < x->nblocks; i++)
            if (has_continue(x->blocks[i])) return 1;
    }
    return 0;
}

static void emit_store(nb_emitter *e, nb_ir_inst *in, nb_strbuf *o)
{
    nb_strbuf v, lv;
    nb_strbuf_init(&v);
    nb_strbuf_init(&lv);
    int n = in->npath;
    render(e, in->ops[0], &v);
    if (n && in->path[n - 1].kind == NB_IR_STEP_SWIZZLE) {
        const nb_ir_step *s = &in->path[n - 1];
        render_lvalue(e, in, n - 1, &lv);
        ind(e, o);
        APPEND(o, "{ %s nb_v = %s;", nb_emit_ctype(e, in->ops[0]->type), nb_strbuf_cstr(&v));
        for (int k = 0; k < s->nswz; k++)
            APPEND(o, " %s.%c = nb_v.%c;", nb_strbuf_cstr(&lv), "xyzw"[s->swz[k] & 3], "xyzw"[k]);
        nb_strbuf_append(o, " }\n");
    } else {
        render_lvalue(e, in, n, &lv);
        ind(e, o);
        APPEND(o, "%s = %s;\n", nb_strbuf_cstr(&lv), nb_strbuf_cstr(&v));
    }
    nb_strbuf_free(&v);
    nb_strbuf_free(&lv);
}

/* A loop body. With use_goto, `continue` jumps to the label after it, so the step block that
 * follows still runs. */
static void emit_loop_body(nb_emitter *e, nb_ir_block *body, int use_goto, int label, nb_strbuf *o)
{
    if (!use_goto) {
        emit_block(e, body, o);
        return;
    }
    ind(e, o);
    nb_strbuf_append(o, "{\n");
    e->indent++;
    emit_block(e, body, o);
    e->indent--;
    ind(e, o);
    nb_strbuf_append(o, "}\n");
    ind(e, o);
    APPEND(o, "nb_continue_%d:;\n", label);
}

static void emit_loop(nb_emitter *e, nb_ir_inst *in, nb_strbuf *o)
{
    nb_ir_block *cb = in->blocks[0], *body = in->blocks[1], *step = in->blocks[2];
    int test_last = (in->flags & NB_IRF_TEST_LAST) != 0;
    int saved = e->indent;
    /* condition statements and expression, step statements: rendered one level deeper */
    nb_strbuf cs, cexpr, ss;
    nb_strbuf_init(&cs);
    nb_strbuf_init(&cexpr);
    nb_strbuf_init(&ss);
    e->indent = saved + 1;
    emit_block(e, cb, &cs);
    emit_block(e, step, &ss);
    e->indent = saved;
    if (in->ops[0]) render(e, in->ops[0], &cexpr);
    else nb_strbuf_append(&cexpr, "1");
    int cont = has_continue(body);
    int simple_cond = cs.len == 0;
    int use_goto = cont && (ss.len || (test_last && !simple_cond));
    int label = use_goto ? ++e->label_counter : -1;
    if ((in->flags & NB_IRF_UNROLL) && e->target == NB_TARGET_CUDA) {
        ind(e, o);
        nb_strbuf_append(o, "#pragma unroll\n");
    }
    if (in->max_iters >= 0) {
        ind(e, o);
        APPEND(o, "/* at most %lld iterations */\n", (long long)in->max_iters);
    }
    e->loop_labels[e->nloops++] = label;
    ind(e, o);
    if (!test_last && simple_cond) {
        APPEND(o, "while (%s) {\n", nb_strbuf_cstr(&cexpr));
        e->indent = saved + 1;
        emit_loop_body(e, body, use_goto, label, o);
        nb_strbuf_append(o, nb_strbuf_cstr(&ss));
    } else if (test_last && simple_cond && !ss.len) {
        nb_strbuf_append(o, "do {\n");
        e->indent = saved + 1;
        emit_block(e, body, o);
        e->indent = saved;
        ind(e, o);
        APPEND(o, "} while (%s);\n", nb_strbuf_cstr(&cexpr));
        goto done;
    } else {
        nb_strbuf_append(o, "for (;;) {\n");
        e->indent = saved + 1;
        if (!test_last) {
            nb_strbuf_append(o, nb_strbuf_cstr(&cs));
            ind(e, o);
            APPEND(o, "if (!(%s)) break;\n", nb_strbuf_cstr(&cexpr));
        }
        emit_loop_body(e, body, use_goto, label, o);
        nb_strbuf_append(o, nb_strbuf_cstr(&ss));
        if (test_last) {
            nb_strbuf_append(o, nb_strbuf_cstr(&cs));
            ind(e, o);
            APPEND(o, "if (!(%s)) break;\n", nb_strbuf_cstr(&cexpr));
        }
    }
    e->indent = saved;
    ind(e, o);
    nb_strbuf_append(o, "}\n");
done:
    e->indent = saved;
    e->nloops--;
    nb_strbuf_free(&cs);
    nb_strbuf_free(&cexpr);
    nb_strbuf_free(&ss);
}

static void emit_inst(nb_emitter *e, nb_ir_inst *in, nb_strbuf *o)
{
    if (host_view_op(e, in)) return;
    nb_strbuf a;
    nb_strbuf_init(&a);
    switch (in->op) {
    case NB_IR_STORE:
        emit_store(e, in, o);
        break;
    case NB_IR_PSTORE: { /* *p + path = value (ir_ptr.c) */
        nb_strbuf lv;
        nb_strbuf_init(&lv);
        render(e, in->ops[1], &a);
        render_lvalue(e, in, in->npath, &lv);
        ind(e, o);
        APPEND(o, "%s = %s;\n", nb_strbuf_cstr(&lv), nb_strbuf_cstr(&a));
        nb_strbuf_free(&lv);
        break;
    }
    case NB_IR_TSTORE:
        ind(e, o);
        APPEND(o, "%s(", nb_emit_tensor_helper(e, NB_IR_TSTORE, in->ops[0]->type, (in->flags & NB_IRF_TGRAD) != 0));
        for (int i = 0; i < in->nops; i++) {
            if (i) nb_strbuf_append(o, ", ");
            render(e, in->ops[i], o);
        }
        nb_strbuf_append(o, ");\n");
        break;
    case NB_IR_IF: {
        int then_empty = !in->blocks[0]->first, else_empty = !in->blocks[1]->first;
        render(e, in->ops[0], &a);
        ind(e, o);
        if (then_empty && !else_empty) APPEND(o, "if (!(%s)) {\n", nb_strbuf_cstr(&a));
        else APPEND(o, "if (%s) {\n", nb_strbuf_cstr(&a));
        e->indent++;
        emit_block(e, then_empty ? in->blocks[1] : in->blocks[0], o);
        e->indent--;
        if (!then_empty && !else_empty) {
            ind(e, o);
            nb_strbuf_append(o, "} else {\n");
            e->indent++;
            emit_block(e, in->blocks[1], o);
            e->indent--;
        }
        ind(e, o);
        nb_strbuf_append(o, "}\n");
        break;
    }
    case NB_IR_LOOP:
        emit_loop(e, in, o);
        break;
    case NB_IR_SWITCH:
        render(e, in->ops[0], &a);
        ind(e, o);
        APPEND(o, "switch (%s) {\n", nb_strbuf_cstr(&a));
        for (int i = 0; i < in->nblocks; i++) {
            const nb_ir_case *c = &in->cases[i];
            ind(e, o);
            for (int k = 0; k < c->nvalues; k++) APPEND(o, "%scase %lld:", k ? " " : "", (long long)c->values[k]);
            if (c->is_default) APPEND(o, "%sdefault:", c->nvalues ? " " : "");
            nb_strbuf_append(o, " {\n");
            e->indent++;
            emit_block(e, in->blocks[i], o);
            e->indent--;
            ind(e, o);
            nb_strbuf_append(o, "}\n");
        }
        ind(e, o);
        nb_strbuf_append(o, "}\n");
        break;
    case NB_IR_BREAK:
        ind(e, o);
        nb_strbuf_append(o, "break;\n");
        break;
    case NB_IR_CONTINUE:
        ind(e, o);
        if (e->nloops > 0 && e->loop_labels[e->nloops - 1] >= 0)
            APPEND(o, "goto nb_continue_%d;\n", e->loop_labels[e->nloops - 1]);
        else nb_strbuf_append(o, "continue;\n");
        break;
    case NB_IR_RETURN:
        ind(e, o);
        if (in->nops) {
            render(e, in->ops[0], &a);
            APPEND(o, "return %s;\n", nb_strbuf_cstr(&a));
        } else nb_strbuf_append(o, "return;\n");
        break;
    default:
        if (!in->type || in->type->kind == NB_TY_VOID || (in->op == NB_IR_CALL && in->uses == 0) ||
            (in->op == NB_IR_TATOMIC_ADD && in->uses == 0)) {
            render_expr(e, in, &a);
            ind(e, o);
            APPEND(o, "%s;\n", nb_strbuf_cstr(&a));
        } else if (in->uses == 0 && nb_ir_is_pure(in)) {
            /* dead value */
        } else {
            render_expr(e, in, &a);
            const char *base = in->name ? in->name : "t";
            char nm[64];
            if (!in->name) snprintf(nm, sizeof nm, "t%d", in->id);
            const char *n = unique_name(e, in->name ? base : nm);
            e->val_names[in->id] = (char *)n;
            ind(e, o);
            APPEND(o, "%s %s = %s;\n", nb_emit_ctype(e, in->type), n, nb_strbuf_cstr(&a));
        }
        break;
    }
    nb_strbuf_free(&a);
}

static void emit_block(nb_emitter *e, nb_ir_block *bl, nb_strbuf *o)
{
    for (nb_ir_inst *in = bl->first; in && e->ok; in = in->next) {
        if (e->inlined[in->id]) continue;
        emit_inst(e, in, o);
    }
}

/* ---- globals and functions --------------------------------------------------------------- */

static int const_tree(const nb_ir_inst *x)
{
    if (x->op == NB_IR_CONST || x->op == NB_IR_ZERO) return 1;
    if (x->op != NB_IR_CONSTRUCT) return 0;
    for (int i = 0; i < x->nops; i++)
        if (!const_tree(x->ops[i])) return 0;
    return 1;
}

static void render_init(nb_emitter *e, const nb_ir_inst *x, nb_strbuf *o)
{
    const nb_type *t = x->type;
    if (x->op == NB_IR_ZERO) {
        if (t->kind == NB_TY_SCALAR) nb_strbuf_append(o, "0");
        else nb_strbuf_append(o, "{0}");
        return;
    }
    if (x->op == NB_IR_CONST) {
        if (t->kind == NB_TY_SCALAR) {
            nb_emit_literal(e, t, x->cv, o);
            return;
        }
        nb_strbuf_append_char(o, '{');
        int n = nb_type_components(t);
        for (int k = 0; k < n; k++) {
            if (t->kind == NB_TY_MATRIX && k % t->cols == 0) nb_strbuf_append(o, k ? "}, {" : "{{");
            else if (k) nb_strbuf_append(o, ", ");
            nb_emit_literal(e, nb_type_scalar(e->tt, t->scalar), &x->cv[k], o);
        }
        nb_strbuf_append(o, t->kind == NB_TY_MATRIX ? "}}}" : "}");
        return;
    }
    /* CONSTRUCT */
    int mat = t->kind == NB_TY_MATRIX;
    nb_strbuf_append(o, t->kind == NB_TY_ARRAY ? "{{" : "{");
    for (int i = 0; i < x->nops; i++) {
        if (mat && i % t->cols == 0) nb_strbuf_append(o, i ? "}, {" : "{{");
        else if (i) nb_strbuf_append(o, ", ");
        render_init(e, x->ops[i], o);
    }
    nb_strbuf_append(o, t->kind == NB_TY_ARRAY ? "}}" : mat ? "}}}" : "}");
}

static void emit_global(nb_emitter *e, nb_ir_global *g)
{
    if (e->global_done[g->index]) return;
    nb_ir_func *f = g->init;
    nb_ir_inst *ret = f && f->body->last && f->body->last->op == NB_IR_RETURN ? f->body->last : NULL;
    nb_ir_inst *v = ret && ret->nops ? ret->ops[0] : NULL;
    if (v && const_tree(v)) {
        e->global_done[g->index] = 1;
        const char *tn = nb_emit_ctype(e, g->type);
        nb_strbuf init;
        nb_strbuf_init(&init);
        render_init(e, v, &init);
        APPEND(&e->globals, "%s const %s %s = %s;\n", e->target == NB_TARGET_CUDA ? "static __device__" : "static", tn,
               nb_emit_safe_name(e, g->cname), nb_strbuf_cstr(&init));
        nb_strbuf_free(&init);
    } else {
        e->global_done[g->index] = 2; /* read through its init function */
        if (f) nb_emit_function(e, f);
    }
}

static void collect_deps(nb_ir_inst *in, void *ud)
{
    nb_emitter *e = ud;
    if (in->op == NB_IR_CALL && in->callee) nb_emit_function(e, in->callee);
    if (in->op == NB_IR_GLOBAL && in->global) emit_global(e, in->global);
}

static void signature(nb_emitter *e, nb_ir_func *f, nb_strbuf *o)
{
    APPEND(o, "%s %s %s(", e->target == NB_TARGET_CUDA ? "static __device__" : "static", nb_emit_ctype(e, f->ret),
           func_name(e, f));
    int first = 1;
    if (f->has_tid) {
        APPEND(o, "const %s *nb_tid", nb_emit_thread_ids_type(e));
        first = 0;
    }
    for (int i = 0; i < f->nparams; i++) {
        nb_ir_var *v = f->params[i];
        APPEND(o, "%s%s %s%s", first ? "" : ", ", nb_emit_ctype(e, v->type), v->dir != NB_DIR_IN ? "*" : "",
               e->var_names[v->id]);
        first = 0;
    }
    if (first) nb_strbuf_append(o, "void");
    nb_strbuf_append_char(o, ')');
}

void nb_emit_function(nb_emitter *e, nb_ir_func *f)
{
    f = nb_emit_variant(e, f); /* this target's variant (emit_target.c) */
    if (!e->ok || e->func_done[f->index]) return;
    e->func_done[f->index] = 1;
    if (nb_emit_target_prepare(e, f)) return; /* __intrinsic_asm (calls expand it) or no case */
    /* dependencies first (recursion is forbidden by the checker) */
    nb_ir_walk(f->body, collect_deps, e);
    if (!e->ok) return;

    nb_arena *ar = &e->m->arena;
    int nid = f->next_id > 0 ? f->next_id : 1;
    e->f = f;
    e->var_names = nb_arena_zalloc(ar, sizeof(char *) * (size_t)(f->nvars + 1), sizeof(void *));
    e->val_names = nb_arena_zalloc(ar, sizeof(char *) * (size_t)nid, sizeof(void *));
    e->inlined = nb_arena_zalloc(ar, (size_t)nid, 1);
    e->user = nb_arena_zalloc(ar, sizeof(nb_ir_inst *) * (size_t)nid, sizeof(void *));
    unsigned char *reads = nb_arena_zalloc(ar, (size_t)nid, 1);
    e->loop_labels = nb_arena_zalloc(ar, sizeof(int) * 256, sizeof(int));
    e->nloops = 0;
    e->names = NULL; /* a fresh name table per function */
    e->indent = 1;
    if (!e->var_names || !e->val_names || !e->inlined || !e->user || !reads || !e->loop_labels) {
        e->ok = 0;
        return;
    }
    unique_name(e, "nb_tid");
    unique_name(e, "nb_v");
    for (int i = 0; i < f->nvars; i++) e->var_names[i] = (char *)unique_name(e, f->vars[i]->name);
    nb_ir_count_uses(f);
    nb_ir_walk(f->body, note_users, e);
    decide_block(e, f->body, reads);

    nb_strbuf sig, body;
    nb_strbuf_init(&sig);
    nb_strbuf_init(&body);
    signature(e, f, &sig);
    for (int i = 0; i < f->nvars; i++) {
        nb_ir_var *v = f->vars[i];
        if (v->param >= 0) continue;
        if (v->flags & NB_IRF_SHARED) /* groupshared: one per block (CUDA) / per worker thread running a group (C) */
            APPEND(&body, "    %s %s %s;\n", e->target == NB_TARGET_CUDA ? "__shared__" : "static __thread",
                   nb_emit_ctype(e, v->type), e->var_names[i]);
        else
        APPEND(&body, "    %s %s;\n", nb_emit_ctype(e, v->type), e->var_names[i]);
    }
    emit_block(e, f->body, &body);
    APPEND(&e->protos, "%s;\n", nb_strbuf_cstr(&sig));
    APPEND(&e->funcs, "\n%s {\n%s}\n", nb_strbuf_cstr(&sig), nb_strbuf_cstr(&body));
    nb_strbuf_free(&sig);
    nb_strbuf_free(&body);
}

void nb_emit_all(nb_emitter *e)
{
    for (int i = 0; i < e->m->nglobals; i++) emit_global(e, e->m->globals[i]);
    for (int i = 0; i < e->m->nfuncs; i++) {
        nb_ir_func *f = e->m->funcs[i];
        int is_init = 0;
        for (int g = 0; g < e->m->nglobals; g++) is_init |= e->m->globals[g]->init == f;
        if (!is_init && !f->is_host) nb_emit_function(e, f); /* (host code: emit_host.c) */
    }
}
