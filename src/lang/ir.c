/* IR data structures: builder, walker, printer and verifier (see ir.h). */
#include "lang/ir.h"
#include "core/strmap.h"

#include <stdio.h>
#include <string.h>

#include "lang/intrinsics.h"
#include "nabla/alloc.h"

static const char *const g_op_names[NB_IR_OP_COUNT] = {
#define NB_X_(id, name) name,
    NB_IR_OPS(NB_X_)
#undef NB_X_
};

const char *nb_ir_op_name(nb_ir_op op)
{
    return (op >= 0 && op < NB_IR_OP_COUNT) ? g_op_names[op] : "?";
}

/* ---- module ------------------------------------------------------------------------------ */

void nb_ir_module_init(nb_ir_module *m, nb_type_table *types)
{
    memset(m, 0, sizeof *m);
    nb_arena_init(&m->arena, 0);
    m->types = types;
}

void nb_ir_module_free(nb_ir_module *m)
{
    if (!m) return;
    nb_arena_destroy(&m->arena);
    memset(m, 0, sizeof *m);
}

/* Grows an arena-backed pointer array (old storage stays in the arena). */
static void **grow(nb_arena *a, void **items, int count, int *cap)
{
    if (count < *cap) return items;
    int ncap = *cap ? *cap * 2 : 8;
    void **n = nb_arena_alloc(a, sizeof(void *) * (size_t)ncap, sizeof(void *));
    if (!n) return NULL;
    if (count) memcpy(n, items, sizeof(void *) * (size_t)count);
    *cap = ncap;
    return n;
}

void nb_ir_unique_cname(const nb_ir_module *m, char *name, size_t cap)
{
    size_t len = strlen(name);
    for (int k = 1;; k++) {
        int clash = 0;
        for (int i = 0; i < m->nfuncs && !clash; i++) clash = m->funcs[i]->cname && !strcmp(m->funcs[i]->cname, name);
        if (!clash || len + 12 >= cap) return;
        snprintf(name + len, cap - len, "_%d", k);
    }
}

nb_ir_func *nb_ir_func_new(nb_ir_module *m, const char *name, const nb_type *ret)
{
    nb_ir_func *f = nb_arena_zalloc(&m->arena, sizeof *f, sizeof(void *));
    void **fs = grow(&m->arena, (void **)m->funcs, m->nfuncs, &m->cap_funcs);
    if (!f || !fs) return NULL;
    m->funcs = (nb_ir_func **)fs;
    f->name = nb_arena_strdup(&m->arena, name);
    f->cname = f->name;
    f->ret = ret ? ret : m->types->t_void;
    f->module = m;
    f->index = m->nfuncs;
    f->body = nb_ir_block_new(f, NULL);
    m->funcs[m->nfuncs++] = f;
    return f;
}

nb_ir_var *nb_ir_var_new(nb_ir_func *f, const char *name, const nb_type *type)
{
    nb_ir_module *m = f->module;
    nb_ir_var *v = nb_arena_zalloc(&m->arena, sizeof *v, sizeof(void *));
    void **vs = grow(&m->arena, (void **)f->vars, f->nvars, &f->cap_vars);
    if (!v || !vs) return NULL;
    f->vars = (nb_ir_var **)vs;
    v->name = nb_arena_strdup(&m->arena, name ? name : "tmp");
    v->type = type;
    v->param = -1;
    v->id = f->nvars;
    f->vars[f->nvars++] = v;
    return v;
}

nb_ir_var *nb_ir_param_new(nb_ir_func *f, const char *name, const nb_type *type, nb_param_dir dir)
{
    nb_ir_var *v = nb_ir_var_new(f, name, type);
    if (!v) return NULL;
    nb_ir_var **ps = nb_arena_alloc(&f->module->arena, sizeof *ps * (size_t)(f->nparams + 1),
                                    sizeof(void *));
    if (!ps) return NULL;
    if (f->nparams) memcpy(ps, f->params, sizeof *ps * (size_t)f->nparams);
    v->param = f->nparams;
    v->dir = dir;
    ps[f->nparams++] = v;
    f->params = ps;
    return v;
}

nb_ir_global *nb_ir_global_new(nb_ir_module *m, const char *name, const nb_type *type)
{
    nb_ir_global *g = nb_arena_zalloc(&m->arena, sizeof *g, sizeof(void *));
    void **gs = grow(&m->arena, (void **)m->globals, m->nglobals, &m->cap_globals);
    if (!g || !gs) return NULL;
    m->globals = (nb_ir_global **)gs;
    g->name = nb_arena_strdup(&m->arena, name);
    g->cname = g->name;
    g->type = type;
    g->index = m->nglobals;
    m->globals[m->nglobals++] = g;
    return g;
}

static nb_ir_func *find_func_scan(nb_ir_module *m, const nb_decl *decl)
{
    for (int i = 0; i < m->nfuncs; i++)
        if (m->funcs[i]->decl == decl && m->funcs[i]->role == NB_IR_PRIMAL) return m->funcs[i];
    return NULL;
}

/* The first primal function of decl. Functions are only appended, and a function's decl and
 * role are set as it is made, so an index extended with the new functions answers; a hit that
 * no longer matches (changed since) falls back to the scan. */
nb_ir_func *nb_ir_find_func(nb_ir_module *m, const nb_decl *decl)
{
    if (!decl) return find_func_scan(m, decl);
    if (!m->func_index || m->nfunc_indexed > m->nfuncs) {
        m->func_index = nb_arena_alloc(&m->arena, sizeof(nb_ptrmap), sizeof(void *));
        if (!m->func_index) return find_func_scan(m, decl);
        nb_ptrmap_init(m->func_index, &m->arena);
        m->nfunc_indexed = 0;
    }
    for (; m->nfunc_indexed < m->nfuncs; m->nfunc_indexed++) {
        nb_ir_func *f = m->funcs[m->nfunc_indexed];
        if (f->decl && f->role == NB_IR_PRIMAL && !nb_ptrmap_get(m->func_index, f->decl) &&
            !nb_ptrmap_put(m->func_index, f->decl, f)) {
            m->func_index = NULL; /* out of memory: scan */
            return find_func_scan(m, decl);
        }
    }
    nb_ir_func *f = nb_ptrmap_get(m->func_index, decl);
    if (f && f->decl == decl && f->role == NB_IR_PRIMAL) return f;
    return f ? find_func_scan(m, decl) : NULL;
}

/* ---- blocks and instructions ------------------------------------------------------------- */

nb_ir_block *nb_ir_block_new(nb_ir_func *f, nb_ir_inst *owner)
{
    nb_ir_block *b = nb_arena_zalloc(&f->module->arena, sizeof *b, sizeof(void *));
    if (!b) return NULL;
    b->owner = owner;
    b->func = f;
    return b;
}

void nb_ir_append(nb_ir_block *bl, nb_ir_inst *in)
{
    in->parent = bl;
    in->next = NULL;
    in->prev = bl->last;
    if (bl->last) bl->last->next = in;
    else bl->first = in;
    bl->last = in;
}

void nb_ir_insert_before(nb_ir_inst *pos, nb_ir_inst *in)
{
    nb_ir_block *bl = pos->parent;
    in->parent = bl;
    in->next = pos;
    in->prev = pos->prev;
    if (pos->prev) pos->prev->next = in;
    else bl->first = in;
    pos->prev = in;
}

void nb_ir_remove(nb_ir_inst *in)
{
    nb_ir_block *bl = in->parent;
    if (!bl) return;
    if (in->prev) in->prev->next = in->next;
    else bl->first = in->next;
    if (in->next) in->next->prev = in->prev;
    else bl->last = in->prev;
    in->prev = in->next = NULL;
    in->parent = NULL;
}

int nb_ir_block_terminated(const nb_ir_block *bl)
{
    if (!bl || !bl->last) return 0;
    nb_ir_op op = bl->last->op;
    return op == NB_IR_BREAK || op == NB_IR_CONTINUE || op == NB_IR_RETURN;
}

nb_ir_inst *nb_ir_new(nb_ir_builder *b, nb_ir_op op, const nb_type *type, int nops)
{
    nb_arena *a = &b->m->arena;
    nb_ir_inst *in = nb_arena_zalloc(a, sizeof *in, sizeof(void *));
    if (!in) return NULL;
    in->op = op;
    in->type = type ? type : b->m->types->t_void;
    in->loc = b->loc;
    in->flags = b->flags;
    in->field = -1;
    in->max_iters = -1;
    in->id = b->f ? b->f->next_id++ : 0;
    if (nops > 0) {
        in->ops = nb_arena_zalloc(a, sizeof(nb_ir_inst *) * (size_t)nops, sizeof(void *));
        if (!in->ops) return NULL;
    }
    in->nops = nops;
    if (b->block) nb_ir_append(b->block, in);
    return in;
}

const nb_type *nb_ir_bool_like(nb_type_table *tt, const nb_type *t)
{
    if (t->kind == NB_TY_VECTOR) return nb_type_vector(tt, NB_SC_BOOL, t->cols);
    if (t->kind == NB_TY_MATRIX) return nb_type_matrix(tt, NB_SC_BOOL, t->rows, t->cols);
    return tt->t_bool;
}

static nb_ir_inst *make_const(nb_ir_builder *b, const nb_type *t, int is_f, double f, int64_t i)
{
    nb_ir_inst *in = nb_ir_new(b, NB_IR_CONST, t, 0);
    if (!in) return NULL;
    int n = nb_type_components(t);
    if (n < 1) n = 1;
    in->cv = nb_arena_zalloc(&b->m->arena, sizeof(nb_ir_cval) * (size_t)n, 8);
    if (!in->cv) return NULL;
    nb_scalar_kind s = nb_type_elem_scalar(t);
    int fl = s == NB_SC_FLOAT || s == NB_SC_DOUBLE || s == NB_SC_HALF;
    for (int k = 0; k < n; k++) {
        if (fl) in->cv[k].f = is_f ? f : (double)i;
        else if (s == NB_SC_BOOL) in->cv[k].i = is_f ? (f != 0) : (i != 0);
        else in->cv[k].i = is_f ? (int64_t)f : i;
    }
    return in;
}

nb_ir_inst *nb_ir_const_f(nb_ir_builder *b, const nb_type *t, double v) { return make_const(b, t, 1, v, 0); }
nb_ir_inst *nb_ir_const_i(nb_ir_builder *b, const nb_type *t, int64_t v) { return make_const(b, t, 0, 0, v); }
nb_ir_inst *nb_ir_zero(nb_ir_builder *b, const nb_type *t) { return nb_ir_new(b, NB_IR_ZERO, t, 0); }

nb_ir_inst *nb_ir_unary(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *a)
{
    nb_ir_inst *in = nb_ir_new(b, op, a->type, 1);
    if (in) in->ops[0] = a;
    return in;
}

static int is_compare(nb_ir_op op) { return op >= NB_IR_EQ && op <= NB_IR_GE; }

nb_ir_inst *nb_ir_binary(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *a, nb_ir_inst *c)
{
    const nb_type *t = is_compare(op) ? nb_ir_bool_like(b->m->types, a->type) : a->type;
    nb_ir_inst *in = nb_ir_new(b, op, t, 2);
    if (in) {
        in->ops[0] = a;
        in->ops[1] = c;
    }
    return in;
}

nb_ir_inst *nb_ir_convert(nb_ir_builder *b, nb_ir_inst *a, const nb_type *to)
{
    if (a->type == to) return a;
    nb_ir_op op = (a->type->kind == NB_TY_SCALAR && to->kind != NB_TY_SCALAR) ? NB_IR_SPLAT : NB_IR_CONVERT;
    if (op == NB_IR_SPLAT && nb_type_elem_scalar(to) != a->type->scalar)
        a = nb_ir_convert(b, a, nb_type_scalar(b->m->types, nb_type_elem_scalar(to)));
    nb_ir_inst *in = nb_ir_new(b, op, to, 1);
    if (in) in->ops[0] = a;
    return in;
}

nb_ir_inst *nb_ir_select(nb_ir_builder *b, nb_ir_inst *c, nb_ir_inst *x, nb_ir_inst *y)
{
    nb_ir_inst *in = nb_ir_new(b, NB_IR_SELECT, x->type, 3);
    if (in) {
        in->ops[0] = c;
        in->ops[1] = x;
        in->ops[2] = y;
    }
    return in;
}

nb_ir_inst *nb_ir_construct(nb_ir_builder *b, const nb_type *t, nb_ir_inst **ops, int n)
{
    nb_ir_inst *in = nb_ir_new(b, NB_IR_CONSTRUCT, t, n);
    if (in) memcpy(in->ops, ops, sizeof *ops * (size_t)n);
    return in;
}

static const nb_type *elem_type(nb_type_table *tt, const nb_type *t, int field)
{
    switch (t->kind) {
    case NB_TY_VECTOR: return nb_type_scalar(tt, t->scalar);
    case NB_TY_MATRIX: return nb_type_vector(tt, t->scalar, t->cols);
    case NB_TY_ARRAY: return t->elem;
    case NB_TY_STRUCT:
        if (field < 0 || !t->decl || field >= t->decl->u.strct.nfields) return NULL;
        return t->decl->u.strct.fields[field]->u.var.type;
    case NB_TY_DIFFPAIR: {
        if (field == 0) return t->elem;
        return nb_type_differential(tt, t->elem);
    }
    default: return NULL;
    }
}

nb_ir_inst *nb_ir_extract(nb_ir_builder *b, nb_ir_inst *base, int field)
{
    const nb_type *t = elem_type(b->m->types, base->type, field);
    nb_ir_inst *in = nb_ir_new(b, NB_IR_EXTRACT, t ? t : b->m->types->t_error, 1);
    if (in) {
        in->ops[0] = base;
        in->field = field;
    }
    return in;
}

nb_ir_inst *nb_ir_extract_dyn(nb_ir_builder *b, nb_ir_inst *base, nb_ir_inst *index)
{
    const nb_type *t = elem_type(b->m->types, base->type, 0);
    nb_ir_inst *in = nb_ir_new(b, NB_IR_EXTRACT, t ? t : b->m->types->t_error, 2);
    if (in) {
        in->ops[0] = base;
        in->ops[1] = index;
        in->field = -1;
    }
    return in;
}

nb_ir_inst *nb_ir_swizzle(nb_ir_builder *b, nb_ir_inst *v, const int *swz, int n)
{
    const nb_type *t = nb_type_vector(b->m->types, nb_type_elem_scalar(v->type), n);
    nb_ir_inst *in = nb_ir_new(b, NB_IR_SWIZZLE, t, 1);
    if (in) {
        in->ops[0] = v;
        memcpy(in->swz, swz, sizeof(int) * (size_t)n);
        in->nswz = n;
    }
    return in;
}

nb_ir_inst *nb_ir_intrin(nb_ir_builder *b, int id, const nb_type *t, nb_ir_inst **ops, int n)
{
    nb_ir_inst *in = nb_ir_new(b, NB_IR_INTRIN, t, n);
    if (in) {
        if (n) memcpy(in->ops, ops, sizeof *ops * (size_t)n);
        in->intrinsic = id;
    }
    return in;
}

nb_ir_inst *nb_ir_call(nb_ir_builder *b, nb_ir_func *callee, nb_ir_inst **args, nb_ir_var **refs)
{
    int n = callee->nparams;
    nb_ir_inst *in = nb_ir_new(b, NB_IR_CALL, callee->ret, n);
    if (!in) return NULL;
    in->callee = callee;
    in->refs = nb_arena_zalloc(&b->m->arena, sizeof(nb_ir_var *) * (size_t)(n ? n : 1), sizeof(void *));
    if (!in->refs) return NULL;
    for (int i = 0; i < n; i++) {
        in->ops[i] = args ? args[i] : NULL;
        in->refs[i] = refs ? refs[i] : NULL;
    }
    return in;
}

const nb_type *nb_ir_step_type(nb_type_table *tt, const nb_type *t, const nb_ir_step *s)
{
    switch (s->kind) {
    case NB_IR_STEP_FIELD: return elem_type(tt, t, s->index);
    case NB_IR_STEP_INDEX:
        if (t->kind == NB_TY_STRUCT || t->kind == NB_TY_DIFFPAIR) return NULL;
        return elem_type(tt, t, 0);
    case NB_IR_STEP_SWIZZLE:
        if (t->kind != NB_TY_VECTOR) return NULL;
        return nb_type_vector(tt, t->scalar, s->nswz);
    }
    return NULL;
}

static nb_ir_inst *access(nb_ir_builder *b, nb_ir_op op, nb_ir_var *v, const nb_ir_step *path,
                          int npath, nb_ir_inst **idx, nb_ir_inst *value)
{
    int nidx = 0;
    for (int i = 0; i < npath; i++) nidx += path[i].kind == NB_IR_STEP_INDEX;
    int base = op == NB_IR_STORE ? 1 : 0;
    const nb_type *t = v->type;
    nb_ir_step *p = NULL;
    if (npath) {
        p = nb_arena_alloc(&b->m->arena, sizeof *p * (size_t)npath, sizeof(void *));
        if (!p) return NULL;
    }
    int k = 0;
    for (int i = 0; i < npath; i++) {
        p[i] = path[i];
        if (p[i].kind == NB_IR_STEP_INDEX) p[i].index = base + k++;
        const nb_type *nt = nb_ir_step_type(b->m->types, t, &p[i]);
        t = nt ? nt : b->m->types->t_error;
        p[i].type = t;
    }
    nb_ir_inst *in = nb_ir_new(b, op, op == NB_IR_LOAD ? t : NULL, base + nidx);
    if (!in) return NULL;
    in->var = v;
    in->path = p;
    in->npath = npath;
    if (value) in->ops[0] = value;
    for (int i = 0; i < nidx; i++) in->ops[base + i] = idx[i];
    return in;
}

nb_ir_inst *nb_ir_load(nb_ir_builder *b, nb_ir_var *v, const nb_ir_step *path, int npath,
                       nb_ir_inst **idx)
{
    nb_ir_inst *in = access(b, NB_IR_LOAD, v, path, npath, idx, NULL);
    if (in && !npath) in->name = v->name;
    return in;
}

nb_ir_inst *nb_ir_store(nb_ir_builder *b, nb_ir_var *v, const nb_ir_step *path, int npath,
                        nb_ir_inst **idx, nb_ir_inst *value)
{
    return access(b, NB_IR_STORE, v, path, npath, idx, value);
}

nb_ir_inst *nb_ir_if(nb_ir_builder *b, nb_ir_inst *cond)
{
    nb_ir_inst *in = nb_ir_new(b, NB_IR_IF, NULL, 1);
    if (!in) return NULL;
    in->ops[0] = cond;
    in->blocks = nb_arena_zalloc(&b->m->arena, sizeof(nb_ir_block *) * 2, sizeof(void *));
    if (!in->blocks) return NULL;
    in->nblocks = 2;
    in->blocks[0] = nb_ir_block_new(b->f, in);
    in->blocks[1] = nb_ir_block_new(b->f, in);
    return in;
}

nb_ir_inst *nb_ir_loop(nb_ir_builder *b)
{
    nb_ir_inst *in = nb_ir_new(b, NB_IR_LOOP, NULL, 1);
    if (!in) return NULL;
    in->blocks = nb_arena_zalloc(&b->m->arena, sizeof(nb_ir_block *) * 3, sizeof(void *));
    if (!in->blocks) return NULL;
    in->nblocks = 3;
    for (int i = 0; i < 3; i++) in->blocks[i] = nb_ir_block_new(b->f, in);
    return in;
}

nb_ir_inst *nb_ir_jump(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *value)
{
    nb_ir_inst *in = nb_ir_new(b, op, NULL, value ? 1 : 0);
    if (in && value) in->ops[0] = value;
    return in;
}

/* ---- analysis ---------------------------------------------------------------------------- */

void nb_ir_walk(nb_ir_block *bl, void (*fn)(nb_ir_inst *in, void *ud), void *ud)
{
    if (!bl) return;
    for (nb_ir_inst *in = bl->first, *next; in; in = next) {
        next = in->next;
        fn(in, ud);
        for (int i = 0; i < in->nblocks; i++) nb_ir_walk(in->blocks[i], fn, ud);
    }
}

static void zero_uses(nb_ir_inst *in, void *ud) { (void)ud; in->uses = 0; }
static void add_uses(nb_ir_inst *in, void *ud)
{
    (void)ud;
    for (int i = 0; i < in->nops; i++)
        if (in->ops[i]) in->ops[i]->uses++;
}

void nb_ir_count_uses(nb_ir_func *f)
{
    nb_ir_walk(f->body, zero_uses, NULL);
    nb_ir_walk(f->body, add_uses, NULL);
}

int nb_ir_is_pure(const nb_ir_inst *in)
{
    switch (in->op) {
    case NB_IR_CALL: case NB_IR_STORE: case NB_IR_TSTORE: case NB_IR_TATOMIC_ADD:
    case NB_IR_IF: case NB_IR_LOOP: case NB_IR_SWITCH: case NB_IR_BREAK: case NB_IR_CONTINUE:
    case NB_IR_RETURN: case NB_IR_PRINTF: case NB_IR_PSTORE:
        return 0;
    case NB_IR_INTRIN: { /* warp-cooperative intrinsics stay where they are (intrinsics.h) */
        const nb_intrinsic_info *ii = nb_intrinsic_get(in->intrinsic);
        return !(ii && (ii->flags & (NB_IFLAG_WARP | NB_IFLAG_GROUP | NB_IFLAG_EFFECT)));
    }
    default:
        return 1;
    }
}

/* ---- printer ----------------------------------------------------------------------------- */

static void print_type(const nb_type *t, nb_strbuf *o)
{
    if (!t) nb_strbuf_append(o, "<null>");
    else nb_type_print(t, o);
}

static void print_cval(const nb_ir_inst *in, nb_strbuf *o)
{
    int n = nb_type_components(in->type);
    if (n < 1) n = 1;
    nb_scalar_kind s = nb_type_elem_scalar(in->type);
    if (n > 1) nb_strbuf_append_char(o, '(');
    for (int k = 0; k < n; k++) {
        if (k) nb_strbuf_append(o, ", ");
        if (s == NB_SC_FLOAT || s == NB_SC_DOUBLE || s == NB_SC_HALF) nb_strbuf_printf(o, "%.9g", in->cv[k].f);
        else if (s == NB_SC_BOOL) nb_strbuf_append(o, in->cv[k].i ? "true" : "false");
        else if (s == NB_SC_UINT || s == NB_SC_UINT64) nb_strbuf_printf(o, "%llu", (unsigned long long)in->cv[k].i);
        else nb_strbuf_printf(o, "%lld", (long long)in->cv[k].i);
    }
    if (n > 1) nb_strbuf_append_char(o, ')');
}

static void print_val(const nb_ir_inst *v, nb_strbuf *o)
{
    if (!v) nb_strbuf_append(o, "<null>");
    else nb_strbuf_printf(o, "%%%d", v->id);
}

static void print_path(const nb_ir_inst *in, nb_strbuf *o)
{
    nb_strbuf_printf(o, "$%s", in->var->name);
    for (int i = 0; i < in->npath; i++) {
        const nb_ir_step *s = &in->path[i];
        if (s->kind == NB_IR_STEP_FIELD) nb_strbuf_printf(o, ".%d", s->index);
        else if (s->kind == NB_IR_STEP_INDEX) {
            nb_strbuf_append_char(o, '[');
            print_val(s->index < in->nops ? in->ops[s->index] : NULL, o);
            nb_strbuf_append_char(o, ']');
        } else {
            nb_strbuf_append(o, ".<");
            for (int k = 0; k < s->nswz; k++) nb_strbuf_printf(o, "%s%d", k ? "," : "", s->swz[k]);
            nb_strbuf_append_char(o, '>');
        }
    }
}

static void indent(nb_strbuf *o, int depth)
{
    for (int i = 0; i < depth; i++) nb_strbuf_append(o, "  ");
}

static void print_block(const nb_ir_block *bl, nb_strbuf *o, int depth);

static void print_inst(const nb_ir_inst *in, nb_strbuf *o, int depth)
{
    indent(o, depth);
    int has_value = in->type && in->type->kind != NB_TY_VOID;
    if (has_value && in->op != NB_IR_IF && in->op != NB_IR_LOOP && in->op != NB_IR_SWITCH) {
        print_val(in, o);
        nb_strbuf_append(o, " = ");
    }
    nb_strbuf_append(o, nb_ir_op_name(in->op));
    switch (in->op) {
    case NB_IR_CONST: nb_strbuf_append_char(o, ' '); print_cval(in, o); break;
    case NB_IR_GLOBAL: nb_strbuf_printf(o, " @%s", in->global ? in->global->name : "?"); break;
    case NB_IR_LOAD: nb_strbuf_append_char(o, ' '); print_path(in, o); break;
    case NB_IR_STORE:
        nb_strbuf_append_char(o, ' ');
        print_path(in, o);
        nb_strbuf_append(o, ", ");
        print_val(in->ops[0], o);
        break;
    case NB_IR_INTRIN:
        nb_strbuf_printf(o, " %s", nb_intrinsic_name(in->intrinsic));
        for (int i = 0; i < in->nops; i++) {
            nb_strbuf_append(o, i ? ", " : " ");
            print_val(in->ops[i], o);
        }
        break;
    case NB_IR_CALL:
        nb_strbuf_printf(o, " %s(", in->callee ? in->callee->cname : "?");
        for (int i = 0; i < in->nops; i++) {
            if (i) nb_strbuf_append(o, ", ");
            if (in->refs && in->refs[i]) nb_strbuf_printf(o, "&$%s", in->refs[i]->name);
            else print_val(in->ops[i], o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_IR_PRINTF:
        nb_strbuf_printf(o, " %s", in->text ? in->text : "\"\"");
        for (int i = 0; i < in->nops; i++) {
            nb_strbuf_append(o, ", ");
            print_val(in->ops[i], o);
        }
        break;
    case NB_IR_EXTRACT:
        nb_strbuf_append_char(o, ' ');
        print_val(in->ops[0], o);
        if (in->field >= 0) nb_strbuf_printf(o, ", %d", in->field);
        else {
            nb_strbuf_append(o, ", [");
            print_val(in->nops > 1 ? in->ops[1] : NULL, o);
            nb_strbuf_append_char(o, ']');
        }
        break;
    case NB_IR_SWIZZLE:
        nb_strbuf_append_char(o, ' ');
        print_val(in->ops[0], o);
        nb_strbuf_append(o, ", <");
        for (int k = 0; k < in->nswz; k++) nb_strbuf_printf(o, "%s%d", k ? "," : "", in->swz[k]);
        nb_strbuf_append_char(o, '>');
        break;
    case NB_IR_LOOP:
        if (in->max_iters >= 0) nb_strbuf_printf(o, " max_iters=%lld", (long long)in->max_iters);
        if (in->flags & NB_IRF_UNROLL) nb_strbuf_append(o, " unroll");
        if (in->flags & NB_IRF_TGRAD) nb_strbuf_append(o, " grad");
        if (in->flags & NB_IRF_TEST_LAST) nb_strbuf_append(o, " test_last");
        nb_strbuf_append(o, " {\n");
        {
            static const char *const names[3] = {"cond", "body", "step"};
            for (int i = 0; i < in->nblocks; i++) {
                indent(o, depth);
                nb_strbuf_printf(o, "%s:\n", names[i < 3 ? i : 2]);
                print_block(in->blocks[i], o, depth + 1);
                if (i == 0) {
                    indent(o, depth + 1);
                    nb_strbuf_append(o, "-> ");
                    if (in->ops[0]) print_val(in->ops[0], o);
                    else nb_strbuf_append(o, "true");
                    nb_strbuf_append_char(o, '\n');
                }
            }
        }
        indent(o, depth);
        nb_strbuf_append(o, "}\n");
        return;
    case NB_IR_IF:
        nb_strbuf_append_char(o, ' ');
        print_val(in->ops[0], o);
        nb_strbuf_append(o, " {\n");
        print_block(in->blocks[0], o, depth + 1);
        indent(o, depth);
        if (in->blocks[1]->first) {
            nb_strbuf_append(o, "} else {\n");
            print_block(in->blocks[1], o, depth + 1);
            indent(o, depth);
        }
        nb_strbuf_append(o, "}\n");
        return;
    case NB_IR_SWITCH:
        nb_strbuf_append_char(o, ' ');
        print_val(in->ops[0], o);
        nb_strbuf_append(o, " {\n");
        for (int i = 0; i < in->nblocks; i++) {
            indent(o, depth);
            const nb_ir_case *c = &in->cases[i];
            for (int k = 0; k < c->nvalues; k++) nb_strbuf_printf(o, "case %lld: ", (long long)c->values[k]);
            if (c->is_default) nb_strbuf_append(o, "default: ");
            nb_strbuf_append_char(o, '\n');
            print_block(in->blocks[i], o, depth + 1);
        }
        indent(o, depth);
        nb_strbuf_append(o, "}\n");
        return;
    default:
        for (int i = 0; i < in->nops; i++) {
            nb_strbuf_append(o, i ? ", " : " ");
            print_val(in->ops[i], o);
        }
        break;
    }
    if (has_value) {
        nb_strbuf_append(o, " : ");
        print_type(in->type, o);
    }
    if (in->name && in->op != NB_IR_LOAD) nb_strbuf_printf(o, "  ; %s", in->name);
    if (in->flags & NB_IRF_DERIV) nb_strbuf_append(o, "  ; deriv");
    nb_strbuf_append_char(o, '\n');
}

static void print_block(const nb_ir_block *bl, nb_strbuf *o, int depth)
{
    for (const nb_ir_inst *in = bl->first; in; in = in->next) print_inst(in, o, depth);
}

static const char *dir_name(nb_param_dir d) { return d == NB_DIR_OUT ? "out" : d == NB_DIR_INOUT ? "inout" : "in"; }

void nb_ir_print_func(const nb_ir_func *f, nb_strbuf *o)
{
    nb_strbuf_printf(o, "func %s(", f->cname);
    for (int i = 0; i < f->nparams; i++) {
        const nb_ir_var *v = f->params[i];
        nb_strbuf_printf(o, "%s%s $%s: ", i ? ", " : "", dir_name(v->dir), v->name);
        print_type(v->type, o);
    }
    nb_strbuf_append(o, ") -> ");
    print_type(f->ret, o);
    if (f->is_kernel) nb_strbuf_append(o, " [kernel]");
    if (f->differentiable) nb_strbuf_append(o, " [differentiable]");
    nb_strbuf_append(o, " {\n");
    for (int i = 0; i < f->nvars; i++) {
        const nb_ir_var *v = f->vars[i];
        if (v->param >= 0) continue;
        nb_strbuf_printf(o, "  var $%s: ", v->name);
        print_type(v->type, o);
        nb_strbuf_append_char(o, '\n');
    }
    print_block(f->body, o, 1);
    nb_strbuf_append(o, "}\n");
}

void nb_ir_print_module(const nb_ir_module *m, nb_strbuf *o)
{
    for (int i = 0; i < m->nglobals; i++) {
        nb_strbuf_printf(o, "global @%s: ", m->globals[i]->name);
        print_type(m->globals[i]->type, o);
        nb_strbuf_printf(o, " = %s()\n", m->globals[i]->init ? m->globals[i]->init->cname : "?");
    }
    for (int i = 0; i < m->nfuncs; i++) {
        if (i || m->nglobals) nb_strbuf_append_char(o, '\n');
        nb_ir_print_func(m->funcs[i], o);
    }
}

/* ---- verifier ---------------------------------------------------------------------------- */

typedef struct verifier {
    nb_ir_func *f;
    nb_strbuf *errs;
    int nerr;
    nb_type_table *tt;
    unsigned char *defined; /* by value id: 1 while in scope */
    int ndefined;
    int loop_depth, breakable_depth;
} verifier;

static void verr(verifier *v, const nb_ir_inst *in, const char *fmt, const char *a)
{
    v->nerr++;
    if (!v->errs) return;
    nb_strbuf_printf(v->errs, "%s: %%%d (%s): ", v->f->cname, in ? in->id : -1, in ? nb_ir_op_name(in->op) : "-");
    nb_strbuf_printf(v->errs, fmt, a ? a : "");
    nb_strbuf_append_char(v->errs, '\n');
}

static int in_scope(verifier *v, const nb_ir_inst *x)
{
    return x && x->id >= 0 && x->id < v->ndefined && v->defined[x->id] == 1;
}

static int is_int_scalar(const nb_type *t)
{
    return t && t->kind == NB_TY_SCALAR && t->scalar != NB_SC_BOOL && t->scalar != NB_SC_FLOAT &&
           t->scalar != NB_SC_DOUBLE && t->scalar != NB_SC_HALF;
}

static void verify_block(verifier *v, nb_ir_block *bl);

static void verify_inst(verifier *v, nb_ir_inst *in)
{
    const nb_type *t = in->type;
    for (int i = 0; i < in->nops; i++) {
        if (!in->ops[i]) {
            if (in->op == NB_IR_CALL && in->refs && in->refs[i]) continue;
            if (in->op == NB_IR_LOOP && i == 0) continue;
            verr(v, in, "operand %s is missing", "");
            continue;
        }
        if (in->op == NB_IR_LOOP) continue; /* checked after the cond region */
        if (!in_scope(v, in->ops[i])) verr(v, in, "operand does not dominate its use%s", "");
    }
    if (v->nerr && v->errs == NULL) return;
    nb_ir_inst *a = in->nops > 0 ? in->ops[0] : NULL;
    nb_ir_inst *b = in->nops > 1 ? in->ops[1] : NULL;
    switch (in->op) {
    case NB_IR_ADD: case NB_IR_SUB: case NB_IR_MUL: case NB_IR_DIV: case NB_IR_MOD:
    case NB_IR_BAND: case NB_IR_BOR: case NB_IR_BXOR: case NB_IR_SHL: case NB_IR_SHR:
    case NB_IR_LAND: case NB_IR_LOR:
        if (a && b && (a->type != t || b->type != t)) verr(v, in, "operand types differ from the result type%s", "");
        break;
    case NB_IR_EQ: case NB_IR_NE: case NB_IR_LT: case NB_IR_LE: case NB_IR_GT: case NB_IR_GE:
        if (a && b && a->type != b->type) verr(v, in, "comparison of different types%s", "");
        else if (a && t != nb_ir_bool_like(v->tt, a->type)) verr(v, in, "comparison result is not bool-shaped%s", "");
        break;
    case NB_IR_NEG: case NB_IR_NOT: case NB_IR_BNOT:
        if (a && a->type != t) verr(v, in, "operand type differs from the result type%s", "");
        break;
    case NB_IR_CONVERT:
        if (a && nb_type_components(a->type) != nb_type_components(t)) verr(v, in, "convert changes the shape%s", "");
        break;
    case NB_IR_SPLAT:
        if (a && (a->type->kind != NB_TY_SCALAR || a->type->scalar != nb_type_elem_scalar(t)))
            verr(v, in, "splat of a non-scalar or of another scalar kind%s", "");
        break;
    case NB_IR_SELECT:
        if (a && in->nops == 3) {
            if (in->ops[1]->type != t || in->ops[2]->type != t) verr(v, in, "select arms differ from the result type%s", "");
            if (a->type != v->tt->t_bool && a->type != nb_ir_bool_like(v->tt, t))
                verr(v, in, "select condition is not bool%s", "");
        } else verr(v, in, "select needs 3 operands%s", "");
        break;
    case NB_IR_CONSTRUCT:
        if (t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX) {
            if (in->nops != nb_type_components(t)) verr(v, in, "wrong number of components%s", "");
            for (int i = 0; i < in->nops; i++)
                if (in->ops[i] && (in->ops[i]->type->kind != NB_TY_SCALAR || in->ops[i]->type->scalar != t->scalar))
                    verr(v, in, "component is not the element scalar%s", "");
        } else if (t->kind == NB_TY_ARRAY) {
            if (in->nops != t->length) verr(v, in, "wrong number of array elements%s", "");
            for (int i = 0; i < in->nops; i++)
                if (in->ops[i] && in->ops[i]->type != t->elem) verr(v, in, "array element of the wrong type%s", "");
        } else if (t->kind == NB_TY_STRUCT) {
            if (!t->decl || in->nops != t->decl->u.strct.nfields) verr(v, in, "wrong number of fields%s", "");
            else
                for (int i = 0; i < in->nops; i++)
                    if (in->ops[i] && in->ops[i]->type != t->decl->u.strct.fields[i]->u.var.type)
                        verr(v, in, "field of the wrong type%s", t->decl->u.strct.fields[i]->name);
        } else if (t->kind != NB_TY_DIFFPAIR) verr(v, in, "construct of a non-composite type%s", "");
        break;
    case NB_IR_EXTRACT: {
        if (!a) break;
        const nb_type *et = elem_type(v->tt, a->type, in->field >= 0 ? in->field : 0);
        if (!et || et != t) verr(v, in, "extract result type is wrong%s", "");
        if (in->field < 0 && (!b || !is_int_scalar(b->type))) verr(v, in, "dynamic index is not an integer%s", "");
        if (in->field < 0 && a->type->kind == NB_TY_STRUCT) verr(v, in, "dynamic index into a struct%s", "");
        break;
    }
    case NB_IR_SWIZZLE:
        if (a && a->type->kind != NB_TY_VECTOR) verr(v, in, "swizzle of a non-vector%s", "");
        for (int k = 0; k < in->nswz; k++)
            if (a && (in->swz[k] < 0 || in->swz[k] >= a->type->cols)) verr(v, in, "swizzle component out of range%s", "");
        break;
    case NB_IR_LOAD: case NB_IR_STORE: {
        if (!in->var) { verr(v, in, "no variable%s", ""); break; }
        const nb_type *ct = in->var->type;
        for (int i = 0; i < in->npath; i++) {
            const nb_ir_step *s = &in->path[i];
            if (s->kind == NB_IR_STEP_INDEX) {
                if (s->index < 0 || s->index >= in->nops || !in->ops[s->index] || !is_int_scalar(in->ops[s->index]->type))
                    verr(v, in, "path index is not an integer operand%s", "");
            }
            if (s->kind == NB_IR_STEP_SWIZZLE && i != in->npath - 1) verr(v, in, "swizzle step is not last%s", "");
            ct = nb_ir_step_type(v->tt, ct, s);
            if (!ct) { verr(v, in, "invalid access path%s", ""); return; }
        }
        if (in->op == NB_IR_LOAD && ct != t) verr(v, in, "load type differs from the path's type%s", "");
        if (in->op == NB_IR_STORE && a && a->type != ct) verr(v, in, "stored value has the wrong type%s", "");
        break;
    }
    case NB_IR_CALL: {
        nb_ir_func *c = in->callee;
        if (!c) { verr(v, in, "call without callee%s", ""); break; }
        if (in->nops != c->nparams) { verr(v, in, "wrong number of arguments to %s", c->cname); break; }
        if (t != c->ret) verr(v, in, "call result type differs from %s's return type", c->cname);
        for (int i = 0; i < in->nops; i++) {
            const nb_ir_var *p = c->params[i];
            if (p->dir == NB_DIR_IN) {
                if (!in->ops[i] || in->ops[i]->type != p->type) verr(v, in, "argument type mismatch calling %s", c->cname);
            } else if (!in->refs[i] || in->refs[i]->type != p->type) {
                verr(v, in, "by-reference argument mismatch calling %s", c->cname);
            }
        }
        break;
    }
    case NB_IR_IF:
        if (!a || a->type != v->tt->t_bool) verr(v, in, "if condition is not bool%s", "");
        break;
    case NB_IR_SWITCH:
        if (!a || !is_int_scalar(a->type)) verr(v, in, "switch selector is not an integer%s", "");
        if (!in->cases) verr(v, in, "switch without cases%s", "");
        break;
    case NB_IR_BREAK:
        if (!v->breakable_depth) verr(v, in, "break outside a loop or switch%s", "");
        break;
    case NB_IR_CONTINUE:
        if (!v->loop_depth) verr(v, in, "continue outside a loop%s", "");
        break;
    case NB_IR_RETURN:
        if (v->f->ret->kind == NB_TY_VOID ? in->nops != 0 : (!a || a->type != v->f->ret))
            verr(v, in, "return value does not match the function's type%s", "");
        break;
    case NB_IR_TLOAD: case NB_IR_TSTORE: case NB_IR_TATOMIC_ADD:
        if (!a || a->type->kind != NB_TY_TENSOR) verr(v, in, "tensor access of a non-tensor%s", "");
        else if (in->op == NB_IR_TLOAD ? in->nops != 1 + a->type->rank : in->nops != 2 + a->type->rank)
            verr(v, in, "wrong number of tensor indices%s", "");
        break;
    default:
        break;
    }

    /* child regions */
    if (in->op == NB_IR_IF) {
        verify_block(v, in->blocks[0]);
        verify_block(v, in->blocks[1]);
    } else if (in->op == NB_IR_LOOP) {
        v->loop_depth++;
        v->breakable_depth++;
        if (in->nblocks != 3) verr(v, in, "loop needs 3 regions%s", "");
        else {
            /* the condition value lives in the cond region: check it while that is in scope */
            nb_ir_block *cb = in->blocks[0];
            verify_block(v, cb);
            int ok = !in->ops[0] || in->ops[0]->parent == cb;
            if (!ok) verr(v, in, "loop condition is not defined in the cond region%s", "");
            else if (in->ops[0] && in->ops[0]->type != v->tt->t_bool) verr(v, in, "loop condition is not bool%s", "");
            for (nb_ir_inst *x = cb->first; x; x = x->next)
                if (x->op == NB_IR_BREAK || x->op == NB_IR_CONTINUE || x->op == NB_IR_RETURN)
                    verr(v, x, "jump inside a loop condition%s", "");
            verify_block(v, in->blocks[1]);
            verify_block(v, in->blocks[2]);
        }
        v->loop_depth--;
        v->breakable_depth--;
    } else if (in->op == NB_IR_SWITCH) {
        v->breakable_depth++;
        for (int i = 0; i < in->nblocks; i++) verify_block(v, in->blocks[i]);
        v->breakable_depth--;
    } else if (in->nblocks) {
        verr(v, in, "regions on a non-control instruction%s", "");
    }
}

static void verify_block(verifier *v, nb_ir_block *bl)
{
    if (!bl) return;
    for (nb_ir_inst *in = bl->first; in; in = in->next) {
        if (in->parent != bl) verr(v, in, "instruction's parent link is wrong%s", "");
        if (in->prev && in->prev->next != in) verr(v, in, "broken instruction list%s", "");
        if (in != bl->first && in->prev &&
            (in->prev->op == NB_IR_BREAK || in->prev->op == NB_IR_CONTINUE || in->prev->op == NB_IR_RETURN))
            verr(v, in, "unreachable instruction after a terminator%s", "");
        if (in->id < 0 || in->id >= v->ndefined) {
            verr(v, in, "value id out of range%s", "");
            continue;
        }
        if (v->defined[in->id] == 2) verr(v, in, "instruction appears twice%s", "");
        verify_inst(v, in);
        v->defined[in->id] = 1;
    }
    /* leaving the region: its values go out of scope */
    for (nb_ir_inst *in = bl->first; in; in = in->next)
        if (in->id >= 0 && in->id < v->ndefined) v->defined[in->id] = 2;
}

int nb_ir_verify_func(nb_ir_func *f, nb_strbuf *errs)
{
    verifier v;
    memset(&v, 0, sizeof v);
    v.f = f;
    v.errs = errs;
    v.tt = f->module->types;
    v.ndefined = f->next_id;
    v.defined = nb_calloc((size_t)(v.ndefined ? v.ndefined : 1), 1);
    if (!v.defined) return 1;
    verify_block(&v, f->body);
    nb_free(v.defined, (size_t)(v.ndefined ? v.ndefined : 1));
    return v.nerr;
}

int nb_ir_verify_module(nb_ir_module *m, nb_strbuf *errs)
{
    int n = 0;
    for (int i = 0; i < m->nfuncs; i++) n += nb_ir_verify_func(m->funcs[i], errs);
    return n;
}
