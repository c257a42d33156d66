/* Interfaces and constraints: `interface IFoo : IBase { requirements }`, conformance of structs
 * (`struct S : IFoo`: every requirement present, default implementations copied in), the
 * built-in interfaces of the scalar/vector types (IFloat, IArithmetic, …), the constraints of
 * type generic parameters (`T : IFoo`, `where T : IFoo`) checked on the concrete types before an
 * instantiation is made, and member types (`S.A` for `typealias A = …` inside S; an
 * interface's `associatedtype A` reached through a substituted `T.A`). */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"

/* ---- built-in interfaces ------------------------------------------------------------------ */

typedef enum bi_shape { BI_SCALAR, BI_SCALAR_VECTOR, BI_ANY } bi_shape;
typedef enum bi_elem { BI_FLOAT, BI_INT, BI_SIGNED, BI_NUMERIC, BI_INT_OR_BOOL, BI_ALL } bi_elem;

static const struct builtin_iface {
    const char *name;
    bi_shape shape;
    bi_elem elem;
} builtin_ifaces[] = {
    {"IFloat", BI_SCALAR_VECTOR, BI_FLOAT},
    {"IDFloat", BI_SCALAR_VECTOR, BI_FLOAT},
    {"__BuiltinFloatingPointType", BI_SCALAR, BI_FLOAT},
    {"__BuiltinRealType", BI_SCALAR, BI_FLOAT},
    {"IArithmetic", BI_ANY, BI_NUMERIC},
    {"__BuiltinArithmeticType", BI_SCALAR, BI_NUMERIC},
    {"__BuiltinSignedArithmeticType", BI_SCALAR, BI_SIGNED},
    {"IInteger", BI_SCALAR_VECTOR, BI_INT},
    {"__BuiltinIntegerType", BI_SCALAR, BI_INT},
    {"ILogical", BI_SCALAR_VECTOR, BI_INT_OR_BOOL},
    {"IComparable", BI_ANY, BI_NUMERIC},
    {"__BuiltinType", BI_SCALAR, BI_ALL},
};

static const struct builtin_iface *builtin_iface(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof builtin_ifaces / sizeof builtin_ifaces[0]; i++)
        if (strcmp(builtin_ifaces[i].name, name) == 0) return &builtin_ifaces[i];
    return NULL;
}

int ck_is_builtin_iface(const char *name) {
    return builtin_iface(name) != NULL ||
           (name && (strcmp(name, "IDifferentiable") == 0 || strcmp(name, "IDifferentiablePtrType") == 0));
}

static int builtin_conforms(const nb_type *t, const struct builtin_iface *b) {
    if (t->kind != NB_TY_SCALAR && t->kind != NB_TY_VECTOR && t->kind != NB_TY_MATRIX) return 0;
    if (b->shape == BI_SCALAR && t->kind != NB_TY_SCALAR) return 0;
    if (b->shape == BI_SCALAR_VECTOR && t->kind == NB_TY_MATRIX) return 0;
    nb_scalar_kind k = t->scalar;
    int is_f = k == NB_SC_HALF || k == NB_SC_FLOAT || k == NB_SC_DOUBLE;
    int is_i = ck_is_int_scalar_kind(k);
    switch (b->elem) {
    case BI_FLOAT: return is_f;
    case BI_INT: return is_i;
    case BI_SIGNED: return is_f || k == NB_SC_INT || k == NB_SC_INT64;
    case BI_NUMERIC: return is_f || is_i;
    case BI_INT_OR_BOOL: return is_i || k == NB_SC_BOOL;
    case BI_ALL: return 1;
    }
    return 0;
}

/* ---- user interfaces ---------------------------------------------------------------------- */

static nb_decl *find_iface(nb_checker *c, const char *name) {
    nb_decl *d[1];
    if (name && ck_lookup_global(c, name, NB_DECL_INTERFACE, d, 1) > 0) return d[0];
    return NULL;
}

/* Whether interface `have` is `want` or inherits from it (depth-limited against cycles). */
static int iface_extends(nb_checker *c, const char *have, const char *want, int depth) {
    if (!have || !want || depth > 32) return 0;
    if (strcmp(have, want) == 0) return 1;
    nb_decl *d = find_iface(c, have);
    if (!d) return 0;
    for (int i = 0; i < d->u.strct.nconforms; i++)
        if (iface_extends(c, d->u.strct.conforms[i], want, depth + 1)) return 1;
    return 0;
}

int ck_conforms(nb_checker *c, const nb_type *t, const char *iface) {
    if (!t || !iface || ck_is_error(t)) return 1;
    if (t->kind == NB_TY_STRUCT && t->decl) {
        const nb_decl *sd = t->decl;
        for (int i = 0; i < sd->u.strct.nconforms; i++)
            if (iface_extends(c, sd->u.strct.conforms[i], iface, 0)) return 1;
        if (strcmp(iface, "IDifferentiable") == 0) return nb_type_is_differentiable(t);
        return 0;
    }
    if (strcmp(iface, "IDifferentiable") == 0) return nb_type_is_differentiable(t);
    const struct builtin_iface *b = builtin_iface(iface);
    return b && builtin_conforms(t, b);
}

void ck_check_constraint_name(nb_checker *c, nb_type_expr *te) {
    if (!te || !te->name) return;
    if (ck_is_builtin_iface(te->name) || find_iface(c, te->name)) return;
    if (ck_name_as_type(c, te->name, te->loc))
        ck_err(c, te->loc, "'%s' is a type, not an interface (a constraint must name an interface)", te->name);
    else
        ck_err(c, te->loc, "unknown interface '%s'", te->name);
}

void ck_merge_wheres(nb_checker *c, nb_decl *d) {
    int is_f = d->kind == NB_DECL_FUNC;
    int nw = is_f ? d->u.func.nwheres : d->u.strct.nwheres;
    nb_decl **ws = is_f ? d->u.func.wheres : d->u.strct.wheres;
    int ng = is_f ? d->u.func.ngparams : d->u.strct.ngparams;
    nb_decl **gp = is_f ? d->u.func.gparams : d->u.strct.gparams;
    if (!nw) return;
    for (int i = 0; i < nw; i++) {
        nb_decl *w = ws[i];
        if (w->u.param.default_type) continue; /* `where T.Differential == T`: parsed, not enforced */
        nb_decl *g = NULL;
        for (int k = 0; k < ng && !g; k++)
            if (gp[k] && gp[k]->name && w->name && strcmp(gp[k]->name, w->name) == 0) g = gp[k];
        const char *dot = w->name ? strchr(w->name, '.') : NULL;
        for (int k = 0; k < ng && !g && dot && is_f; k++) /* `where T.Differential : IFoo` */
            if (gp[k] && gp[k]->name && gp[k]->u.param.is_type && strlen(gp[k]->name) == (size_t)(dot - w->name) &&
                strncmp(gp[k]->name, w->name, (size_t)(dot - w->name)) == 0 && !strchr(dot + 1, '.')) {
                nb_decl **aw = ck_alloc(c, sizeof(nb_decl *) * (size_t)(d->u.func.nassoc_wheres + 1));
                if (!aw) return;
                for (int j = 0; j < d->u.func.nassoc_wheres; j++) aw[j] = d->u.func.assoc_wheres[j];
                aw[d->u.func.nassoc_wheres] = w;
                d->u.func.assoc_wheres = aw;
                d->u.func.nassoc_wheres++;
                g = gp[k];
            }
        if (dot && g) continue;
        if (!g || !g->u.param.is_type) {
            ck_err(c, w->loc, "'%s' in a 'where' clause is not a type generic parameter of '%s'", w->name, d->name);
            continue;
        }
        int n = g->u.param.nconstraints + w->u.param.nconstraints;
        nb_type_expr **all = ck_alloc(c, sizeof(nb_type_expr *) * (size_t)(n ? n : 1));
        if (!all) return;
        for (int k = 0; k < g->u.param.nconstraints; k++) all[k] = g->u.param.constraints[k];
        for (int k = 0; k < w->u.param.nconstraints; k++) all[g->u.param.nconstraints + k] = w->u.param.constraints[k];
        g->u.param.constraints = all;
        g->u.param.nconstraints = n;
    }
    if (is_f) d->u.func.nwheres = 0;
    else d->u.strct.nwheres = 0;
}

int ck_satisfies(nb_checker *c, const nb_decl *tmpl, const int64_t *vals, char *why, size_t n) {
    int ng = tmpl->kind == NB_DECL_STRUCT ? tmpl->u.strct.ngparams : tmpl->u.func.ngparams;
    nb_decl **gp = tmpl->kind == NB_DECL_STRUCT ? tmpl->u.strct.gparams : tmpl->u.func.gparams;
    for (int k = 0; k < ng; k++) {
        const nb_decl *g = gp[k];
        if (!g || !g->u.param.is_type) continue;
        const nb_type *t = vals[k] >= 0 && vals[k] < c->tt->count ? c->tt->types[vals[k]] : NULL;
        for (int i = 0; t && i < g->u.param.nconstraints; i++) {
            const nb_type_expr *ce = g->u.param.constraints[i];
            if (!ce || !ce->name || ck_conforms(c, t, ce->name)) continue;
            snprintf(why, n, "type '%s' does not conform to interface '%s' (required by generic parameter '%s' of "
                     "'%s')", t->name, ce->name, g->name, tmpl->name);
            return 0;
        }
    }
    for (int i = 0; tmpl->kind == NB_DECL_FUNC && i < tmpl->u.func.nassoc_wheres; i++) {
        const nb_decl *w = tmpl->u.func.assoc_wheres[i]; /* `where T.A : IFoo` */
        const char *dot = strchr(w->name, '.');
        const nb_type *t = NULL;
        for (int k = 0; k < ng && !t; k++)
            if (gp[k] && gp[k]->name && strlen(gp[k]->name) == (size_t)(dot - w->name) &&
                strncmp(gp[k]->name, w->name, (size_t)(dot - w->name)) == 0 && vals[k] >= 0 && vals[k] < c->tt->count)
                t = c->tt->types[vals[k]];
        if (!t) continue;
        const nb_type *mt = NULL;
        if (!strcmp(dot + 1, "Differential"))
            mt = ck_is_ptr_type(c, t) ? ck_ptr_differential(c, t) : nb_type_differential(c->tt, t);
        else if (t->kind == NB_TY_STRUCT && t->decl) {
            nb_type_expr te;
            memset(&te, 0, sizeof te);
            te.loc = w->loc;
            te.name = dot + 1;
            mt = ck_struct_member_type(c, (nb_decl *)t->decl, dot + 1, &te);
        }
        for (int j = 0; j < w->u.param.nconstraints; j++) {
            const nb_type_expr *ce = w->u.param.constraints[j];
            if (!ce || !ce->name || (mt && ck_conforms(c, mt, ce->name))) continue;
            snprintf(why, n, "'%s' of type '%s' %s interface '%s' (required by a 'where' clause of '%s')", w->name,
                     t->name, mt ? "does not conform to" : "has no such member type, so it cannot conform to",
                     ce->name, tmpl->name);
            return 0;
        }
    }
    return 1;
}

/* ---- conformance of a struct -------------------------------------------------------------- */

static nb_decl *find_method(nb_decl *sd, const char *name, int nparams) {
    for (int i = 0; i < sd->u.strct.nmethods; i++) {
        nb_decl *m = sd->u.strct.methods[i];
        if (m && m->name && strcmp(m->name, name) == 0 && m->u.func.nparams == nparams) return m;
    }
    return NULL;
}

static nb_decl *find_member_type(const nb_decl *sd, const char *name) {
    for (int i = 0; i < sd->u.strct.ntypes; i++) {
        nb_decl *t = sd->u.strct.types[i];
        if (t && t->name && strcmp(t->name, name) == 0) return t;
    }
    return NULL;
}

static int add_method(nb_checker *c, nb_decl *sd, nb_decl *m) {
    nb_decl **n = ck_alloc(c, sizeof(nb_decl *) * (size_t)(sd->u.strct.nmethods + 1));
    if (!n) return 0;
    if (sd->u.strct.nmethods) memcpy(n, sd->u.strct.methods, sizeof(nb_decl *) * (size_t)sd->u.strct.nmethods);
    n[sd->u.strct.nmethods] = m;
    sd->u.strct.methods = n;
    sd->u.strct.nmethods++;
    return 1;
}

/* A property requirement's accessor (__get_p / __set_p) that a field p of sd satisfies. */
static int is_field_accessor(const nb_decl *sd, const char *name) {
    const char *f = strncmp(name, "__get_", 6) == 0 || strncmp(name, "__set_", 6) == 0 ? name + 6 : NULL;
    for (int i = 0; f && i < sd->u.strct.nfields; i++)
        if (sd->u.strct.fields[i] && sd->u.strct.fields[i]->name && strcmp(sd->u.strct.fields[i]->name, f) == 0)
            return 1;
    return 0;
}

/* The requirements of interface `id` (and of its bases) against struct sd. */
static void check_requirements(nb_checker *c, nb_decl *sd, nb_decl *id, nb_loc at, int depth) {
    if (depth > 32) return;
    for (int i = 0; i < id->u.strct.nconforms; i++) {
        nb_decl *base = find_iface(c, id->u.strct.conforms[i]);
        if (base) check_requirements(c, sd, base, at, depth + 1);
    }
    for (int i = 0; i < id->u.strct.nmethods; i++) {
        nb_decl *r = id->u.strct.methods[i];
        if (!r || !r->name) continue;
        nb_decl *m = find_method(sd, r->name, r->u.func.nparams);
        if (!m && is_field_accessor(sd, r->name)) continue; /* `property float p { get; }` met by a field p */
        if (!m && r->u.func.body) { /* the interface's default implementation */
            nb_decl *copy = ck_clone_method(c, r, sd);
            if (copy && add_method(c, sd, copy)) continue;
        }
        if (!m && (strncmp(r->name, "__get_", 6) == 0 || strncmp(r->name, "__set_", 6) == 0)) {
            ck_err(c, at, "'%s' does not implement property '%s' of interface '%s' (a field or a property with a "
                   "'%s' accessor)", sd->name, r->name + 6, id->name, r->name[2] == 'g' ? "get" : "set");
            ck_note(c, r->loc, "'%s' is declared here", r->name + 6);
            continue;
        }
        if (!m) {
            ck_err(c, at, "'%s' does not implement '%s' of interface '%s' (a method with %d parameter%s)", sd->name,
                   r->name, id->name, r->u.func.nparams, r->u.func.nparams == 1 ? "" : "s");
            ck_note(c, r->loc, "'%s' is declared here", r->name);
            continue;
        }
        if (((m->mods ^ r->mods) & NB_MOD_STATIC) != 0) {
            ck_err(c, m->loc, "'%s.%s' must %sbe static, as in interface '%s'", sd->name, r->name,
                   (r->mods & NB_MOD_STATIC) ? "" : "not ", id->name);
            ck_note(c, r->loc, "'%s' is declared here", r->name);
        }
    }
    for (int i = 0; i < id->u.strct.ntypes; i++) {
        nb_decl *a = id->u.strct.types[i];
        if (!a || !a->name || find_member_type(sd, a->name)) continue;
        ck_err(c, at, "'%s' does not define associated type '%s' of interface '%s' (write 'typealias %s = …;' in "
               "'%s')", sd->name, a->name, id->name, a->name, sd->name);
        ck_note(c, a->loc, "'%s' is declared here", a->name);
    }
    for (int i = 0; i < id->u.strct.nstatics; i++) {
        nb_decl *k = id->u.strct.statics[i];
        int found = 0;
        for (int j = 0; k && k->name && j < sd->u.strct.nstatics && !found; j++)
            found = sd->u.strct.statics[j] && sd->u.strct.statics[j]->name &&
                    strcmp(sd->u.strct.statics[j]->name, k->name) == 0;
        if (k && k->name && !found) {
            ck_err(c, at, "'%s' does not define static constant '%s' of interface '%s'", sd->name, k->name, id->name);
            ck_note(c, k->loc, "'%s' is declared here", k->name);
        }
    }
}

void ck_check_conformance(nb_checker *c, nb_decl *sd) {
    if (sd->u.strct.is_existential) return; /* an interface's value type dispatches what it can */
    for (int i = 0; i < sd->u.strct.nconforms; i++) {
        const char *name = sd->u.strct.conforms[i];
        if (ck_is_builtin_iface(name)) continue;
        nb_decl *id = find_iface(c, name);
        if (!id) {
            if (name && ck_name_as_type(c, name, sd->loc))
                ck_err(c, sd->loc, "'%s' is a type, not an interface ('%s' can only conform to interfaces)", name,
                       sd->name);
            else
                ck_err(c, sd->loc, "unknown interface '%s' in the conformances of '%s'", name ? name : "?", sd->name);
            continue;
        }
        check_requirements(c, sd, id, sd->loc, 0);
    }
}

void ck_check_interface(nb_checker *c, nb_decl *d) {
    for (int i = 0; i < d->u.strct.nconforms; i++) {
        const char *name = d->u.strct.conforms[i];
        if (ck_is_builtin_iface(name) || find_iface(c, name)) continue;
        ck_err(c, d->loc, "unknown interface '%s' in the bases of '%s'", name ? name : "?", d->name);
    }
    if (d->u.strct.nfields)
        ck_err(c, d->u.strct.fields[0]->loc, "interface '%s' cannot have fields (only method, 'associatedtype' "
               "and 'static const' requirements)", d->name);
}

/* ---- member types ------------------------------------------------------------------------- */

const nb_type *ck_struct_member_type(nb_checker *c, nb_decl *sd, const char *member, nb_type_expr *te) {
    const char *name = te->name;
    nb_decl *td = find_member_type(sd, member);
    if (!td || !td->u.tdef.texpr) return NULL;
    const nb_type *base = ck_struct_type(c, sd);
    int st = ck_state(c, td);
    if (st == CK_BUSY) {
        ck_err(c, te->loc, "type alias '%s' refers to itself", name);
        return c->tt->t_error;
    }
    ck_set_state(c, td, CK_BUSY);
    ck_ctx_save s = ck_enter_global_ctx(c, base->decl->module);
    c->strct = base->decl;
    c->ns = base->decl->ns;
    const nb_type *t = ck_resolve_type(c, td->u.tdef.texpr);
    ck_leave_global_ctx(c, s);
    ck_set_state(c, td, CK_DONE);
    return t;
}

int ck_iface_extends(nb_checker *c, const char *have, const char *want) { return iface_extends(c, have, want, 0); }

/* ---- extensions ---------------------------------------------------------------------------- */

/* Appends n items of src to *arr (count *na), arena-allocated. */
static int append_items(nb_checker *c, nb_decl ***arr, int *na, nb_decl **src, int n) {
    if (n <= 0) return 1;
    nb_decl **a = ck_alloc(c, sizeof(nb_decl *) * (size_t)(*na + n));
    if (!a) return 0;
    if (*na) memcpy(a, *arr, sizeof(nb_decl *) * (size_t)*na);
    memcpy(a + *na, src, sizeof(nb_decl *) * (size_t)n);
    *arr = a;
    *na += n;
    return 1;
}

void ck_merge_extension(nb_checker *c, nb_decl *ext) {
    const char *name = ext->name;
    nb_decl *d[2];
    nb_decl *target = NULL;
    nb_decl_kind want = ext->u.strct.ext_of_iface ? NB_DECL_INTERFACE : NB_DECL_STRUCT;
    for (int i = 0; i < c->mod->ndecls && !target; i++) {
        nb_decl *x = c->mod->decls[i];
        if (x && x->kind == want && x->name && strcmp(x->name, name) == 0) target = x;
    }
    if (!target && ext->u.strct.ext_of_iface) {
        ck_err(c, ext->loc, ck_lookup_global(c, name, NB_DECL_INTERFACE, d, 2) > 0
                                ? "'extension<T : %s> T': the interface is declared in another module (extend it there)"
                                : "unknown interface '%s' in 'extension<T : %s> T'", name, name);
        return;
    }
    if (!target) {
        if (ck_builtin_type_name(c, name))
            ck_err(c, ext->loc, "extensions of built-in types ('extension %s') are not supported", name);
        else if (ck_lookup_global(c, name, NB_DECL_STRUCT, d, 2) > 0)
            ck_err(c, ext->loc, "'extension %s': the struct is declared in another module (extend it there)", name);
        else
            ck_err(c, ext->loc, "unknown struct '%s' in 'extension'", name);
        return;
    }
    if (ck_is_template(target) != ext->u.strct.ext_of_generic) {
        ck_err(c, ext->loc, ext->u.strct.ext_of_generic ? "'%s' is not a generic struct"
                                                        : "an extension of generic struct '%s' needs its parameters: "
                                                          "'extension<T : I> %s<T>'", name, name);
        return;
    }
    if (ext->u.strct.ext_of_generic) { /* the same parameters: names, kinds and constraints */
        int ok = ext->u.strct.ngparams == target->u.strct.ngparams;
        for (int i = 0; ok && i < ext->u.strct.ngparams; i++) {
            const nb_decl *a = ext->u.strct.gparams[i], *b = target->u.strct.gparams[i];
            ok = a->name && b->name && !strcmp(a->name, b->name) && a->u.param.is_type == b->u.param.is_type &&
                 a->u.param.nconstraints == b->u.param.nconstraints;
            for (int k = 0; ok && k < a->u.param.nconstraints; k++)
                ok = a->u.param.constraints[k]->name && b->u.param.constraints[k]->name &&
                     !strcmp(a->u.param.constraints[k]->name, b->u.param.constraints[k]->name);
        }
        if (!ok) {
            ck_err(c, ext->loc, "the parameters of 'extension<…> %s<…>' must be those of struct '%s' (names, kinds "
                   "and constraints, in order)", name, name);
            ck_note(c, target->loc, "'%s' is declared here", name);
            return;
        }
    }
    if (ext->u.strct.nfields) {
        ck_err(c, ext->u.strct.fields[0]->loc, "an extension cannot add fields to '%s'", name);
        return;
    }
    append_items(c, &target->u.strct.methods, &target->u.strct.nmethods, ext->u.strct.methods, ext->u.strct.nmethods);
    append_items(c, &target->u.strct.statics, &target->u.strct.nstatics, ext->u.strct.statics, ext->u.strct.nstatics);
    append_items(c, &target->u.strct.types, &target->u.strct.ntypes, ext->u.strct.types, ext->u.strct.ntypes);
    if (ext->u.strct.nconforms) {
        int n = target->u.strct.nconforms + ext->u.strct.nconforms;
        const char **cs = ck_alloc(c, sizeof(char *) * (size_t)n);
        if (!cs) return;
        for (int i = 0; i < target->u.strct.nconforms; i++) cs[i] = target->u.strct.conforms[i];
        for (int i = 0; i < ext->u.strct.nconforms; i++) cs[target->u.strct.nconforms + i] = ext->u.strct.conforms[i];
        target->u.strct.conforms = cs;
        target->u.strct.nconforms = n;
    }
    ext->u.strct.nmethods = ext->u.strct.nstatics = ext->u.strct.ntypes = 0;
}
