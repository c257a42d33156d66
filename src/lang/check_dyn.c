/* Dynamic dispatch: values of interface type (`IFoo obj = A(2); obj.calc(x)`, parameters
 * `float run(IFoo obj, float x)`).
 *
 * The whole program is known when it is checked, so an interface type is an ordinary struct
 * (its "existential", made on first use and appended to the module's decls like a generic
 * instantiation) holding a tag and one field per conforming struct of the program:
 *
 *     struct IFoo { int tag; A as_A; B as_B; }           (IDifferentiable when IFoo is)
 *
 * A conforming value converts implicitly to it (tag = the struct's index, its field = the value,
 * the others zero), and every method requirement becomes a method of the existential that
 * switches on the tag:
 *
 *     [Differentiable] float calc(float x) {
 *         if (this.tag == 0) return this.as_A.calc(x);
 *         return this.as_B.calc(x);
 *     }
 *
 * so lowering, the autodiff passes and both back ends see plain structs, branches and calls. The
 * layout is the sum of the conforming types (not a union): simple and correct on both back ends;
 * [anyValueSize] is accepted and ignored. */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"

#define DYN_MAX_CONFORMERS 64

static int extends(nb_checker *c, const char *have, const char *want, int depth) {
    if (!have || !want || depth > 32) return 0;
    if (strcmp(have, want) == 0) return 1;
    nb_decl *d[1];
    if (ck_lookup_global(c, have, NB_DECL_INTERFACE, d, 1) <= 0) return 0;
    for (int i = 0; i < d[0]->u.strct.nconforms; i++)
        if (extends(c, d[0]->u.strct.conforms[i], want, depth + 1)) return 1;
    return 0;
}

void ck_normalize_conforms(nb_checker *c, nb_decl *sd) {
    int has = 0, inherited = 0;
    for (int i = 0; i < sd->u.strct.nconforms; i++) {
        const char *n = sd->u.strct.conforms[i];
        if (n && strcmp(n, "IDifferentiable") == 0) has = 1;
        else if (n && extends(c, n, "IDifferentiable", 0)) inherited = 1;
    }
    if (has || !inherited) return;
    /* `struct A : IFoo` with `interface IFoo : IDifferentiable`: A is differentiable (types.c
     * looks for IDifferentiable among the conformances) */
    const char **n = ck_alloc(c, sizeof(char *) * (size_t)(sd->u.strct.nconforms + 1));
    if (!n) return;
    for (int i = 0; i < sd->u.strct.nconforms; i++) n[i] = sd->u.strct.conforms[i];
    n[sd->u.strct.nconforms] = "IDifferentiable";
    sd->u.strct.conforms = n;
    sd->u.strct.nconforms++;
}

/* ---- small AST builders (checked later as ordinary code) ------------------------------------ */

/* Tree builders for checker-synthesized code (also check_dyn_create.c); the checker types them. */
nb_expr *ck_syn_name(nb_checker *c, const char *name, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_NAME, loc);
    if (e) {
        e->u.name.name = name;
        e->type = NULL;
    }
    return e;
}

nb_expr *ck_syn_member(nb_checker *c, nb_expr *base, const char *m, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_MEMBER, loc);
    if (e) {
        e->u.member.base = base;
        e->u.member.member = m;
        e->type = NULL;
    }
    return e;
}

nb_stmt *ck_syn_stmt(nb_checker *c, nb_stmt_kind k, nb_loc loc) {
    nb_stmt *s = ck_alloc(c, sizeof *s);
    if (s) {
        s->kind = k;
        s->loc = loc;
        s->max_iters = -1;
    }
    return s;
}

nb_type_expr *ck_syn_type(nb_checker *c, const nb_type *t, nb_loc loc) {
    nb_type_expr *te = ck_alloc(c, sizeof *te);
    if (te) {
        te->loc = loc;
        te->name = t->name;
        te->subst = t;
    }
    return te;
}

/* ---- the existential struct ---------------------------------------------------------------- */

static nb_decl *find_method_n(nb_decl *sd, const char *name, int nparams) {
    for (int i = 0; i < sd->u.strct.nmethods; i++) {
        nb_decl *m = sd->u.strct.methods[i];
        if (m && m->name && strcmp(m->name, name) == 0 && m->u.func.nparams == nparams) return m;
    }
    return NULL;
}

static int has_field(nb_decl *sd, const char *name) {
    for (int i = 0; i < sd->u.strct.nfields; i++)
        if (sd->u.strct.fields[i] && sd->u.strct.fields[i]->name && strcmp(sd->u.strct.fields[i]->name, name) == 0)
            return 1;
    return 0;
}

/* The statement for conformer k of requirement r: `return this.as_K.r(params);` (or the call and
 * `return;` for void, or a field access for a property met by a field). NULL when conformer K
 * has nothing for r (its conformance error was reported). */
static nb_stmt *dispatch_one(nb_checker *c, nb_decl *m, nb_decl *conf, const char *field, int is_void) {
    nb_loc loc = m->loc;
    nb_expr *target = ck_syn_member(c, ck_syn_name(c, "this", loc), field, loc);
    nb_expr *val = NULL;
    const char *r = m->name;
    int np = m->u.func.nparams;
    if (find_method_n(conf, r, np)) {
        nb_expr *call = ck_new_expr(c, NB_EX_CALL, loc);
        nb_expr **args = ck_alloc(c, sizeof(nb_expr *) * (size_t)(np ? np : 1));
        if (!call || !args) return NULL;
        call->type = NULL;
        for (int i = 0; i < np; i++) args[i] = ck_syn_name(c, m->u.func.params[i]->name, loc);
        call->u.call.callee = ck_syn_member(c, target, r, loc);
        call->u.call.args = args;
        call->u.call.nargs = np;
        val = call;
    } else if (strncmp(r, "__get_", 6) == 0 && has_field(conf, r + 6)) {
        val = ck_syn_member(c, target, r + 6, loc);
    } else if (strncmp(r, "__set_", 6) == 0 && np == 1 && has_field(conf, r + 6)) {
        val = ck_new_expr(c, NB_EX_ASSIGN, loc);
        if (!val) return NULL;
        val->type = NULL;
        val->u.assign.op = NB_TOK_ASSIGN;
        val->u.assign.lhs = ck_syn_member(c, target, r + 6, loc);
        val->u.assign.rhs = ck_syn_name(c, m->u.func.params[0]->name, loc);
    } else {
        return NULL;
    }
    if (!is_void) {
        nb_stmt *ret = ck_syn_stmt(c, NB_ST_RETURN, loc);
        if (ret) ret->u.ret.value = val;
        return ret;
    }
    nb_stmt *blk = ck_syn_stmt(c, NB_ST_BLOCK, loc);
    nb_stmt *ex = ck_syn_stmt(c, NB_ST_EXPR, loc), *ret = ck_syn_stmt(c, NB_ST_RETURN, loc);
    nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * 2);
    if (!blk || !ex || !ret || !items) return NULL;
    ex->u.expr.expr = val;
    items[0] = ex;
    items[1] = ret;
    blk->u.block.items = items;
    blk->u.block.count = 2;
    return blk;
}

/* The dispatching body of method m (a copy of a requirement) over the conformers. */
static nb_stmt *dispatch_body(nb_checker *c, nb_decl *m, nb_decl **confs, int n) {
    nb_loc loc = m->loc;
    int is_void = !m->u.func.ret || (m->u.func.ret->name && strcmp(m->u.func.ret->name, "void") == 0 &&
                                     !m->u.func.ret->ntargs && !m->u.func.ret->narray_dims);
    nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * (size_t)(n + 1));
    nb_stmt *blk = ck_syn_stmt(c, NB_ST_BLOCK, loc);
    if (!items || !blk) return NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        char field[160];
        snprintf(field, sizeof field, "as_%s", confs[i]->name);
        nb_stmt *one = dispatch_one(c, m, confs[i], nb_arena_strdup(c->arena, field), is_void);
        if (!one) continue;
        if (i == n - 1) { /* the last one: unconditional */
            items[k++] = one;
            break;
        }
        nb_expr *tag = ck_syn_member(c, ck_syn_name(c, "this", loc), "tag", loc);
        nb_expr *lit = ck_new_expr(c, NB_EX_INT, loc);
        nb_expr *cmp = ck_new_expr(c, NB_EX_BINARY, loc);
        nb_stmt *iff = ck_syn_stmt(c, NB_ST_IF, loc);
        if (!tag || !lit || !cmp || !iff) return NULL;
        lit->type = NULL;
        lit->u.ilit.value = (uint64_t)i;
        cmp->type = NULL;
        cmp->u.binary.op = NB_TOK_EQ;
        cmp->u.binary.lhs = tag;
        cmp->u.binary.rhs = lit;
        iff->u.if_s.cond = cmp;
        iff->u.if_s.then_s = one;
        items[k++] = iff;
    }
    blk->u.block.items = items;
    blk->u.block.count = k;
    return blk;
}

/* The requirements of interface id and its bases, as copies that become the existential's
 * methods (constructors are left out: they need a type, not a value). */
static void add_requirements(nb_checker *c, nb_decl *id, nb_decl *ex, nb_decl **confs, int n, nb_decl **out,
                             int *nout, int max, int depth) {
    if (depth > 32) return;
    for (int i = 0; i < id->u.strct.nconforms; i++) {
        nb_decl *b[1];
        if (ck_lookup_global(c, id->u.strct.conforms[i], NB_DECL_INTERFACE, b, 1) > 0)
            add_requirements(c, b[0], ex, confs, n, out, nout, max, depth + 1);
    }
    for (int i = 0; i < id->u.strct.nmethods && *nout < max; i++) {
        nb_decl *r = id->u.strct.methods[i];
        if (!r || !r->name || r->u.func.is_init) continue;
        nb_decl *m = ck_clone_method(c, r, ex);
        if (!m) continue;
        /* a static requirement called through a value (`obj.calc(x)`) dispatches on the value's
         * tag like a method; a generic one (`bar<let N : int>(vector<float, N>)`) stays generic
         * and is instantiated per use, its body calling each conformer's instantiation */
        m->mods &= ~NB_MOD_STATIC;
        for (int p = 0; p < m->u.func.nparams; p++) { /* forwarded by name */
            nb_decl *pd = m->u.func.params[p];
            if (pd && (!pd->name || !pd->name[0])) {
                char nm[32];
                snprintf(nm, sizeof nm, "_arg%d", p);
                pd->name = nb_arena_strdup(c->arena, nm);
            }
        }
        m->u.func.body = dispatch_body(c, m, confs, n);
        if (m->u.func.body) out[(*nout)++] = m;
    }
}

const nb_type *ck_existential(nb_checker *c, nb_decl *iface, nb_loc loc) {
    if (iface->u.strct.existential) return ck_struct_type(c, iface->u.strct.existential);
    /* the conforming structs of the whole program, in declaration order (the tags) */
    nb_decl *confs[DYN_MAX_CONFORMERS];
    int n = 0;
    for (int mi = 0; mi < c->p->nmodules; mi++) {
        nb_module_ast *m = c->p->modules[mi];
        for (int i = 0; m && i < m->ndecls; i++) {
            nb_decl *d = m->decls[i];
            if (!d || d->kind != NB_DECL_STRUCT || d->u.strct.is_existential || ck_is_template(d)) continue;
            int yes = 0;
            for (int k = 0; k < d->u.strct.nconforms && !yes; k++) yes = extends(c, d->u.strct.conforms[k], iface->name, 0);
            if (!yes) continue;
            if (n == DYN_MAX_CONFORMERS) {
                ck_err(c, loc, "interface '%s' has more than %d conforming types (dynamic dispatch)", iface->name,
                       DYN_MAX_CONFORMERS);
                return c->tt->t_error;
            }
            confs[n++] = d;
        }
    }
    if (n == 0) {
        ck_err(c, loc, "no struct conforms to interface '%s', so it has no values", iface->name);
        return c->tt->t_error;
    }
    nb_decl *ex = ck_alloc(c, sizeof *ex);
    nb_decl **fields = ck_alloc(c, sizeof(nb_decl *) * (size_t)(n + 1));
    nb_decl **methods = ck_alloc(c, sizeof(nb_decl *) * 256);
    const char **conforms = ck_alloc(c, sizeof(char *) * 2);
    if (!ex || !fields || !methods || !conforms) return c->tt->t_error;
    ex->kind = NB_DECL_STRUCT;
    ex->loc = iface->loc;
    ex->name = iface->name;
    ex->module = iface->module;
    ex->u.strct.is_existential = 1;
    conforms[0] = iface->name;
    int nconf = 1;
    if (extends(c, iface->name, "IDifferentiable", 0)) conforms[nconf++] = "IDifferentiable";
    ex->u.strct.conforms = conforms;
    ex->u.strct.nconforms = nconf;
    for (int i = 0; i <= n; i++) {
        nb_decl *f = ck_alloc(c, sizeof *f);
        if (!f) return c->tt->t_error;
        f->kind = NB_DECL_VAR;
        f->loc = iface->loc;
        f->module = iface->module;
        if (i == 0) {
            f->name = "tag";
            f->mods = NB_MOD_NO_DIFF;
            f->u.var.texpr = ck_syn_type(c, c->tt->t_int, iface->loc);
        } else {
            char nm[160];
            snprintf(nm, sizeof nm, "as_%s", confs[i - 1]->name);
            f->name = nb_arena_strdup(c->arena, nm);
            f->u.var.texpr = ck_syn_type(c, ck_struct_type(c, confs[i - 1]), iface->loc);
        }
        fields[i] = f;
    }
    ex->u.strct.fields = fields;
    ex->u.strct.nfields = n + 1;
    iface->u.strct.existential = ex; /* before the methods: their signatures may name the interface */
    int nm = 0;
    add_requirements(c, iface, ex, confs, n, methods, &nm, 256, 0);
    ex->u.strct.methods = methods;
    ex->u.strct.nmethods = nm;
    if (!ck_append_decl(c, ex)) {
        ck_err(c, loc, "out of memory making the dynamic type of '%s'", iface->name);
        return c->tt->t_error;
    }
    ck_check_struct_decl(c, ex);
    return ck_struct_type(c, ex);
}

/* ---- conversions --------------------------------------------------------------------------- */

int ck_existential_index(const nb_type *from, const nb_type *to) {
    if (!from || !to || from->kind != NB_TY_STRUCT || to->kind != NB_TY_STRUCT || !to->decl ||
        !to->decl->u.strct.is_existential)
        return -1;
    const nb_decl *ex = to->decl;
    for (int i = 1; i < ex->u.strct.nfields; i++)
        if (ex->u.strct.fields[i] && ex->u.strct.fields[i]->u.var.type == from) return i - 1;
    return -1;
}

int ck_box(nb_checker *c, nb_expr **slot, const nb_type *to) {
    nb_expr *e = *slot;
    int k = ck_existential_index(e->type, to);
    if (k < 0) return 0;
    const nb_decl *ex = to->decl;
    int nf = ex->u.strct.nfields;
    nb_expr *call = ck_new_expr(c, NB_EX_CALL, e->loc);
    nb_expr *callee = ck_new_expr(c, NB_EX_TYPE, e->loc);
    nb_expr **args = ck_alloc(c, sizeof(nb_expr *) * (size_t)nf);
    nb_expr *tag = ck_new_expr(c, NB_EX_INT, e->loc);
    if (!call || !callee || !args || !tag) return 0;
    tag->u.ilit.value = (uint64_t)k;
    tag->type = c->tt->t_int;
    args[0] = tag;
    for (int i = 1; i < nf; i++) {
        if (i - 1 == k) {
            args[i] = e;
            continue;
        }
        nb_expr *z = ck_new_expr(c, NB_EX_INIT_LIST, e->loc); /* {}: zero */
        if (!z) return 0;
        z->type = ex->u.strct.fields[i]->u.var.type;
        args[i] = z;
    }
    callee->u.type.texpr = ck_syn_type(c, to, e->loc);
    callee->ref = NB_REF_TYPE;
    callee->type = to;
    call->u.call.callee = callee;
    call->u.call.args = args;
    call->u.call.nargs = nf;
    call->ref = NB_REF_TYPE;
    call->type = to;
    *slot = call;
    return 1;
}
