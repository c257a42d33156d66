/* Semantic analysis: scopes, types, declarations, statements, attributes, call graph (see
 * check.h). Expressions are in check_expr.c, calls in check_call.c, function attributes and
 * signatures in check_func.c, statements and function bodies in check_stmt.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/fold_value.h"

#include "lang/lexer.h"
#include "nabla/alloc.h"

/* ---- diagnostics and memory --------------------------------------------------------------- */

static void vdiag(nb_checker *c, nb_diag_level lvl, nb_loc loc, const char *fmt, va_list ap) {
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    nb_diag_add(c->src, lvl, loc, "%s", buf);
}

void ck_err(nb_checker *c, nb_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdiag(c, NB_DIAG_ERROR, loc, fmt, ap);
    va_end(ap);
}

void ck_note(nb_checker *c, nb_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdiag(c, NB_DIAG_NOTE, loc, fmt, ap);
    va_end(ap);
}

void ck_warn(nb_checker *c, nb_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdiag(c, NB_DIAG_WARNING, loc, fmt, ap);
    va_end(ap);
}

void *ck_alloc(nb_checker *c, size_t size) {
    return nb_arena_zalloc(c->arena, size ? size : 1, 16);
}

/* Grows a heap array of elem-sized items. */
int ck_grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int ncap = *cap ? *cap * 2 : 32;
    while (ncap < need) ncap *= 2;
    void *n = nb_alloc(elem * (size_t)ncap, 16);
    if (!n) return 0;
    if (*arr) memcpy(n, *arr, elem * (size_t)*cap);
    nb_free(*arr, elem * (size_t)*cap);
    *arr = n;
    *cap = ncap;
    return 1;
}

/* ---- decl state side table ---------------------------------------------------------------- */

static size_t ptr_hash(const void *p) {
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 7);
}

int ck_state(nb_checker *c, const void *key) {
    if (!c->cap_states) return CK_TODO;
    size_t m = (size_t)c->cap_states - 1;
    for (size_t i = ptr_hash(key) & m;; i = (i + 1) & m) {
        if (c->states[i].key == key) return c->states[i].state;
        if (!c->states[i].key) return CK_TODO;
    }
}

void ck_set_state(nb_checker *c, const void *key, int state) {
    if ((c->nstates + 1) * 2 > c->cap_states) {
        int ncap = c->cap_states ? c->cap_states * 2 : 256;
        ck_state_slot *n = nb_alloc(sizeof *n * (size_t)ncap, 16);
        if (!n) return;
        memset(n, 0, sizeof *n * (size_t)ncap);
        for (int i = 0; i < c->cap_states; i++) {
            if (!c->states[i].key) continue;
            size_t m = (size_t)ncap - 1;
            size_t j = ptr_hash(c->states[i].key) & m;
            while (n[j].key) j = (j + 1) & m;
            n[j] = c->states[i];
        }
        nb_free(c->states, sizeof *n * (size_t)c->cap_states);
        c->states = n;
        c->cap_states = ncap;
    }
    size_t m = (size_t)c->cap_states - 1;
    for (size_t i = ptr_hash(key) & m;; i = (i + 1) & m) {
        if (c->states[i].key == key) { c->states[i].state = state; return; }
        if (!c->states[i].key) {
            c->states[i].key = key;
            c->states[i].state = state;
            c->nstates++;
            return;
        }
    }
}

/* ---- scopes ------------------------------------------------------------------------------- */

static void push_scope(nb_checker *c) {
    if (!ck_grow((void **)&c->marks, &c->cap_marks, c->nmarks + 1, sizeof(int))) return;
    c->marks[c->nmarks++] = c->nsyms;
}

/* c->local_names maps a name to 1 + the index of its innermost sym; each sym links to the one
 * it shadows, so lookups and redefinition checks are O(1) and popping a scope restores them. */
static int innermost_sym(nb_checker *c, const char *name) {
    nb_strmap_slot *s = nb_strmap_find(&c->local_names, name);
    return s ? (int)(intptr_t)s->val - 1 : -1;
}

static void pop_scope(nb_checker *c) {
    if (c->nmarks <= 0) return;
    int mark = c->marks[--c->nmarks];
    for (int i = c->nsyms - 1; i >= mark; i--) {
        nb_strmap_slot *s = nb_strmap_find(&c->local_names, c->syms[i].name);
        if (s) s->val = (void *)(intptr_t)(c->syms[i].prev + 1);
    }
    c->nsyms = mark;
}

static int scope_floor(nb_checker *c);

nb_decl *ck_lookup_local(nb_checker *c, const char *name) {
    if (!name) return NULL;
    int i = innermost_sym(c, name);
    return i >= scope_floor(c) ? c->syms[i].decl : NULL;
}

static void declare(nb_checker *c, const char *name, nb_decl *d, nb_loc loc) {
    if (!name || !*name) return; /* unnamed parameter */
    int start = c->nmarks ? c->marks[c->nmarks - 1] : 0;
    int i = innermost_sym(c, name);
    if (i >= 0 && i >= start) {
        ck_err(c, loc, "redefinition of '%s'", name);
        ck_note(c, c->syms[i].decl->loc, "previous definition of '%s' is here", name);
        return;
    }
    if (!ck_grow((void **)&c->syms, &c->cap_syms, c->nsyms + 1, sizeof(ck_sym))) return;
    nb_strmap_slot *s = nb_strmap_get(&c->local_names, name, NULL);
    if (!s) return;
    c->syms[c->nsyms].name = name;
    c->syms[c->nsyms].decl = d;
    c->syms[c->nsyms].prev = i;
    s->val = (void *)(intptr_t)(c->nsyms + 1);
    c->nsyms++;
}

/* Signature checks run with the function body's locals hidden. */
static int scope_floor(nb_checker *c) {
    int d = c->nfloors < CK_MAX_FLOORS ? c->nfloors : CK_MAX_FLOORS;
    return d ? c->floors[d - 1] : 0;
}

typedef ck_ctx_save ctx_save;

ctx_save ck_enter_global_ctx(nb_checker *c, nb_module_ast *mod) {
    ctx_save s = {c->ns, c->fn, c->strct, c->loop_depth, c->break_depth, c->mod};
    c->ns = NULL;
    if (c->nfloors < CK_MAX_FLOORS) c->floors[c->nfloors] = c->nsyms;
    c->nfloors++;
    c->fn = NULL;
    c->strct = NULL;
    c->loop_depth = c->break_depth = 0;
    if (mod) c->mod = mod;
    return s;
}

void ck_leave_global_ctx(nb_checker *c, ctx_save s) {
    c->nfloors--;
    c->ns = s.ns;
    c->fn = s.fn;
    c->strct = s.strct;
    c->loop_depth = s.loop_depth;
    c->break_depth = s.break_depth;
    c->mod = s.mod;
}

/* ---- global lookup ------------------------------------------------------------------------ */

/* The index of module m, brought up to date with decls appended since (instantiations). */
/* Adds an imported module to x's imports, with what it re-exports (`__exported import`), each
 * module once. 0 on out of memory. */
static int add_import(ck_mod_index *x, nb_module_ast *t) {
    for (int j = 0; j < x->nimports; j++)
        if (x->imports[j] == t) return 1; /* the same module imported twice (or re-exported) */
    if (!ck_grow((void **)&x->imports, &x->cap_imports, x->nimports + 1, sizeof(nb_module_ast *))) return 0;
    x->imports[x->nimports++] = t;
    for (int k = 0; k < t->ndecls; k++) {
        nb_decl *e = t->decls[k];
        if (e && e->kind == NB_DECL_IMPORT && e->u.import.exported && e->u.import.target &&
            !add_import(x, e->u.import.target))
            return 0;
    }
    return 1;
}

static ck_mod_index *mod_index(nb_checker *c, nb_module_ast *m) {
    ck_mod_index *x = NULL;
    for (int i = 0; i < c->nmod_index && !x; i++)
        if (c->mod_index[i].mod == m) x = &c->mod_index[i];
    if (!x) {
        if (!ck_grow((void **)&c->mod_index, &c->cap_mod_index, c->nmod_index + 1, sizeof(ck_mod_index))) return NULL;
        x = &c->mod_index[c->nmod_index++];
        memset(x, 0, sizeof *x);
        x->mod = m;
        nb_strmap_init(&x->names, NULL);
    }
    if (x->ndone < m->ndecls && !ck_grow((void **)&x->next, &x->cap_next, m->ndecls, sizeof(int))) return NULL;
    for (; x->ndone < m->ndecls; x->ndone++) {
        int i = x->ndone;
        nb_decl *d = m->decls[i];
        x->next[i] = -1;
        if (!d) continue;
        if (d->kind == NB_DECL_IMPORT && d->u.import.target && !add_import(x, d->u.import.target)) return NULL;
        if (!d->name) continue;
        int isnew = 0;
        nb_strmap_slot *s = nb_strmap_get(&x->names, d->name, &isnew);
        if (!s) return NULL;
        if (isnew) {
            if (!ck_grow((void **)&x->chains, &x->cap_chains, x->nchains + 1, sizeof x->chains[0])) {
                s->val = NULL; /* (a name without a chain reads as absent) */
                return NULL;
            }
            x->chains[x->nchains][0] = x->chains[x->nchains][1] = i;
            s->val = (void *)(intptr_t)(++x->nchains);
        } else {
            int *ch = x->chains[(intptr_t)s->val - 1];
            x->next[ch[1]] = i;
            ch[1] = i;
        }
    }
    return x;
}

static void free_mod_indexes(nb_checker *c) {
    for (int i = 0; i < c->nmod_index; i++) {
        ck_mod_index *x = &c->mod_index[i];
        nb_strmap_free(&x->names);
        nb_free(x->chains, sizeof x->chains[0] * (size_t)x->cap_chains);
        nb_free(x->next, sizeof(int) * (size_t)x->cap_next);
        nb_free(x->imports, sizeof(nb_module_ast *) * (size_t)x->cap_imports);
    }
    nb_free(c->mod_index, sizeof(ck_mod_index) * (size_t)c->cap_mod_index);
}

static int lookup_in_module(nb_checker *c, nb_module_ast *m, const char *name, int kind, nb_decl **out, int max, int n) {
    if (!m) return n;
    ck_mod_index *x = mod_index(c, m);
    if (!x) return n;
    nb_strmap_slot *s = nb_strmap_find(&x->names, name);
    if (!s || !s->val) return n;
    for (int i = x->chains[(intptr_t)s->val - 1][0]; i >= 0; i = x->next[i]) {
        nb_decl *d = m->decls[i];
        if (d->kind == NB_DECL_IMPORT) continue;
        if (kind >= 0 && (int)d->kind != kind) continue;
        /* Slang's access control: another module sees only `public` declarations of a module
         * that uses it (a `module` declaration, `__include` or an access modifier); a "legacy"
         * module without any of those is all public. */
        if (m != c->mod && m->access_control && !(d->mods & NB_MOD_PUBLIC)) continue;
        if (n < max) out[n] = d;
        n++;
    }
    return n;
}

int ck_check_member_access(nb_checker *c, const nb_decl *sd, const nb_decl *member, nb_loc loc) {
    if (!sd || !member || sd->kind == NB_DECL_INTERFACE) return 1; /* requirements: the interface's */
    const nb_module_ast *mm = sd->module;
    const char *why = NULL;
    if (member->mods & NB_MOD_PRIVATE) {
        /* private: only inside the type itself (its methods) */
        if (!c->strct || c->strct->module != mm || !c->strct->name || !sd->name || strcmp(c->strct->name, sd->name) != 0)
            why = "private to";
    } else if (mm && mm != c->mod && mm->access_control && !(member->mods & NB_MOD_PUBLIC)) {
        why = (member->mods & NB_MOD_INTERNAL) ? "internal to the module of" : "internal (the default) to the module of";
    }
    if (!why) return 1;
    ck_err(c, loc, "member '%s' is %s '%s'; mark it 'public' to use it here", member->name ? member->name : "?", why,
           sd->name ? sd->name : "?");
    return 0;
}

void ck_note_hidden(nb_checker *c, const char *name) {
    if (!name || !c->mod) return;
    ck_mod_index *x = mod_index(c, c->mod);
    for (int i = 0; x && i < x->nimports; i++) {
        nb_module_ast *m = x->imports[i];
        if (!m->access_control) continue;
        for (int k = 0; k < m->ndecls; k++) {
            nb_decl *d = m->decls[k];
            if (!d || d->kind == NB_DECL_IMPORT || !d->name || strcmp(d->name, name) != 0) continue;
            ck_note(c, d->loc, "'%s' of module '%s' is %s; only 'public' declarations are visible to other modules",
                         name, m->declared ? m->declared : m->name,
                         (d->mods & NB_MOD_PRIVATE) ? "private" : (d->mods & NB_MOD_INTERNAL) ? "internal" : "internal (the default)");
            return;
        }
    }
}

static int lookup_global_plain(nb_checker *c, const char *name, int kind, nb_decl **out, int max);

/* Inside `namespace A.B`, `f` is A.B.f, else A.f, else f; then the module's `using` namespaces. */
int ck_lookup_global(nb_checker *c, const char *name, int kind, nb_decl **out, int max) {
    if (!name || !c->mod) return 0;
    char buf[512];
    if (c->ns && c->ns[0]) {
        size_t len = strlen(c->ns);
        for (;;) {
            snprintf(buf, sizeof buf, "%.*s.%s", (int)len, c->ns, name);
            int n = lookup_global_plain(c, buf, kind, out, max);
            if (n > 0) return n;
            while (len > 0 && c->ns[len - 1] != '.') len--;
            if (len == 0) break;
            len--; /* drop the '.' */
        }
    }
    int n = lookup_global_plain(c, name, kind, out, max);
    for (int i = 0; n == 0 && i < c->mod->nusings; i++) {
        snprintf(buf, sizeof buf, "%s.%s", c->mod->usings[i], name);
        n = lookup_global_plain(c, buf, kind, out, max);
    }
    return n;
}

static int lookup_global_plain(nb_checker *c, const char *name, int kind, nb_decl **out, int max) {
    int n = lookup_in_module(c, c->mod, name, kind, out, max, 0);
    /* local declarations shadow imported ones, except functions which overload */
    if (n > 0 && kind != NB_DECL_FUNC) return n;
    ck_mod_index *x = mod_index(c, c->mod);
    for (int i = 0; x && i < x->nimports; i++) {
        n = lookup_in_module(c, x->imports[i], name, kind, out, max, n);
        x = mod_index(c, c->mod); /* (the array may have moved) */
    }
    if (kind == NB_DECL_FUNC) {
        /* drop body-less declarations that have a definition with the same parameter types */
        int m = n < max ? n : max;
        int w = 0;
        for (int i = 0; i < m; i++) {
            nb_decl *d = out[i];
            int drop = 0;
            if (!d->u.func.body) {
                ck_check_func_sig(c, d);
                for (int j = 0; j < m && !drop; j++) {
                    nb_decl *e = out[j];
                    if (e == d || !e->u.func.body || e->u.func.nparams != d->u.func.nparams) continue;
                    ck_check_func_sig(c, e);
                    int same = 1;
                    for (int k = 0; k < d->u.func.nparams; k++)
                        if (d->u.func.params[k]->u.param.type != e->u.func.params[k]->u.param.type) same = 0;
                    drop = same;
                }
            }
            if (!drop) out[w++] = d;
        }
        n -= m - w;
    }
    return n;
}

/* ---- types -------------------------------------------------------------------------------- */

static int parse_scalar_prefix(const char *s, nb_scalar_kind *k, const char **rest) {
    static const struct { const char *name; nb_scalar_kind k; } tab[] = {
        {"bool", NB_SC_BOOL},       {"int64_t", NB_SC_INT64}, {"uint64_t", NB_SC_UINT64},
        /* Slang's sized spellings of the same scalars */
        {"int32_t", NB_SC_INT},     {"uint32_t", NB_SC_UINT}, {"float16_t", NB_SC_HALF},
        {"float32_t", NB_SC_FLOAT}, {"float64_t", NB_SC_DOUBLE},
        {"int", NB_SC_INT},         {"uint", NB_SC_UINT},     {"half", NB_SC_HALF},
        {"float", NB_SC_FLOAT},     {"double", NB_SC_DOUBLE},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        size_t n = strlen(tab[i].name);
        if (strncmp(s, tab[i].name, n) == 0) {
            /* "int" must not match "int64_t" etc.: take the longest (table order handles it) */
            *k = tab[i].k;
            *rest = s + n;
            return 1;
        }
    }
    return 0;
}

const nb_type *ck_builtin_type_name(nb_checker *c, const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "void") == 0) return c->tt->t_void;
    nb_scalar_kind k;
    const char *r;
    if (!parse_scalar_prefix(name, &k, &r)) return NULL;
    if (*r == 0) return nb_type_scalar(c->tt, k);
    if (r[0] >= '1' && r[0] <= '4' && r[1] == 0) return nb_type_vector(c->tt, k, r[0] - '0');
    if (r[0] >= '1' && r[0] <= '4' && r[1] == 'x' && r[2] >= '1' && r[2] <= '4' && r[3] == 0)
        return nb_type_matrix(c->tt, k, r[0] - '0', r[2] - '0');
    return NULL;
}

/* Integer generic argument i of te (a value, or a name the parser took for a type). */
int ck_generic_int(nb_checker *c, nb_type_expr *te, int i, int64_t *out) {
    nb_expr *v = te->vargs ? te->vargs[i] : NULL;
    if (!v && te->targs && te->targs[i] && te->targs[i]->ntargs == 0 && te->targs[i]->narray_dims == 0) {
        /* `Tensor<float, N>`: N parsed as a type name; reinterpret as a value */
        if (ck_builtin_type_name(c, te->targs[i]->name)) {
            ck_err(c, te->targs[i]->loc, "generic argument %d of '%s' must be an integer, not a type", i + 1,
                   te->name);
            return 0;
        }
        v = ck_new_expr(c, NB_EX_NAME, te->targs[i]->loc);
        if (!v) return 0;
        v->u.name.name = te->targs[i]->name;
        if (te->vargs) te->vargs[i] = v;
    }
    if (!v) {
        ck_err(c, te->loc, "generic argument %d of '%s' must be an integer", i + 1, te->name);
        return 0;
    }
    const nb_type *t = ck_expr(c, &v);
    if (ck_is_error(t)) return 0;
    if (!ck_const_int(v, out)) {
        ck_err(c, v->loc, "generic argument %d of '%s' must be a constant integer", i + 1, te->name);
        return 0;
    }
    return 1;
}

/* "unknown type 'X'"; a rankless view where its rank cannot be inferred (a return type, a generic
 * argument: check_view_rank.c) gets its own words. */
static void unknown_type(nb_checker *c, nb_type_expr *te, const char *name) {
    if (strcmp(name, "TensorView") == 0 || strcmp(name, "DiffTensorView") == 0) {
        ck_err(c, te->loc, "'%s' without a rank is a parameter, field or local (its rank is inferred from its "
               "uses); here write %s<T, N>", name, name);
        return;
    }
    ck_err(c, te->loc, "unknown type '%s'", name);
    ck_note_hidden(c, name);
}

static const nb_type *generic_type(nb_checker *c, nb_type_expr *te, int i) {
    nb_expr *v = te->vargs ? te->vargs[i] : NULL;
    if ((!te->targs || !te->targs[i]) && v && v->kind == NB_EX_NAME && v->u.name.name) {
        /* an imported type name the parser took for a value */
        const nb_type *t = ck_name_as_type(c, v->u.name.name, v->loc);
        if (t) return t;
        ck_err(c, v->loc, "unknown type '%s'", v->u.name.name);
        return c->tt->t_error;
    }
    if (!te->targs || !te->targs[i]) {
        ck_err(c, te->loc, "generic argument %d of '%s' must be a type", i + 1, te->name);
        return c->tt->t_error;
    }
    return ck_resolve_type(c, te->targs[i]);
}

static const nb_type *resolve_generic(nb_checker *c, nb_type_expr *te) {
    const char *n = te->name;
    int na = te->ntargs;
    int64_t a, b;
    if (strcmp(n, "vector") == 0 || strcmp(n, "matrix") == 0) {
        int is_m = n[0] == 'm';
        if (na != (is_m ? 3 : 2)) {
            ck_err(c, te->loc, "'%s' takes %d generic arguments, got %d", n, is_m ? 3 : 2, na);
            return c->tt->t_error;
        }
        const nb_type *s = generic_type(c, te, 0);
        if (ck_is_error(s)) return s;
        if (s->kind != NB_TY_SCALAR) {
            ck_err(c, te->loc, "'%s' element must be a scalar type, got '%s'", n, s->name);
            return c->tt->t_error;
        }
        if (!ck_generic_int(c, te, 1, &a)) return c->tt->t_error;
        if (is_m && !ck_generic_int(c, te, 2, &b)) return c->tt->t_error;
        if (!is_m && (a < 1 || a > 4)) {
            ck_err(c, te->loc, "'vector' size must be 1 to 4, got %lld", (long long)a);
            return c->tt->t_error;
        }
        if (is_m && (a < 1 || a > NB_MATRIX_MAX_ROWS || b < 1 || b > 4)) {
            /* Slang's CPU/CUDA matrices are arrays of row vectors: any row count, 1-4 columns */
            ck_err(c, te->loc, "'matrix' has 1 to %d rows of 1 to 4 columns, got %lldx%lld", NB_MATRIX_MAX_ROWS,
                   (long long)a, (long long)b);
            return c->tt->t_error;
        }
        return is_m ? nb_type_matrix(c->tt, s->scalar, (int)a, (int)b) : nb_type_vector(c->tt, s->scalar, (int)a);
    }
    if (strcmp(n, "CoopVec") == 0) {
        /* Slang's cooperative vector CoopVec<T, N>: a value vector of N float or integer
         * elements with element-wise arithmetic, math functions, subscripts and constructors
         * (one value: splat; N values). nabla represents it as vector<T, N>, so N is 1 to 4;
         * its load/store and matrix operations (coopVecMatMul…) are not supported. */
        if (na != 2) {
            ck_err(c, te->loc, "'CoopVec' takes 2 generic arguments (CoopVec<T, N>), got %d", na);
            return c->tt->t_error;
        }
        const nb_type *s = generic_type(c, te, 0);
        if (ck_is_error(s)) return s;
        if (s->kind != NB_TY_SCALAR || s->scalar == NB_SC_BOOL) {
            ck_err(c, te->loc, "'CoopVec' element must be a float or integer scalar type, got '%s'", s->name);
            return c->tt->t_error;
        }
        if (!ck_generic_int(c, te, 1, &a)) return c->tt->t_error;
        if (a < 1 || a > 4) {
            ck_err(c, te->loc, "CoopVec<%s, %lld>: nabla supports cooperative vectors of 1 to 4 elements", s->name,
                   (long long)a);
            return c->tt->t_error;
        }
        return nb_type_vector(c->tt, s->scalar, (int)a);
    }
    if (strcmp(n, "Array") == 0) { /* Slang's Array<T, N> is T[N] */
        if (na != 2) {
            ck_err(c, te->loc, "'Array' takes 2 generic arguments (Array<T, N>), got %d", na);
            return c->tt->t_error;
        }
        const nb_type *s = generic_type(c, te, 0);
        if (ck_is_error(s)) return s;
        if (!ck_generic_int(c, te, 1, &a)) return c->tt->t_error;
        if (a < 1) {
            ck_err(c, te->loc, "'Array' length must be at least 1, got %lld", (long long)a);
            return c->tt->t_error;
        }
        return nb_type_array(c->tt, s, (int)a);
    }
    if (strcmp(n, "Tensor") == 0 || strcmp(n, "DiffTensor") == 0 || strcmp(n, "RWTensor") == 0 ||
        strcmp(n, "NDBuffer") == 0 || strcmp(n, "RWNDBuffer") == 0 || /* (SlangPy's N-d buffers are Tensors) */
        (na == 2 && (strcmp(n, "TensorView") == 0 || strcmp(n, "DiffTensorView") == 0))) { /* (rank inferred: check_view.c) */
        int diff = n[0] == 'D';
        if (na != 2) {
            ck_err(c, te->loc, "'%s' takes 2 generic arguments (element type and rank), got %d", n, na);
            return c->tt->t_error;
        }
        const nb_type *e = generic_type(c, te, 0);
        if (ck_is_error(e)) return e;
        if (e->kind != NB_TY_SCALAR && e->kind != NB_TY_VECTOR && e->kind != NB_TY_MATRIX) {
            ck_err(c, te->loc, "'%s' element must be a scalar, vector or matrix type, got '%s'", n, e->name);
            return c->tt->t_error;
        }
        if (diff && !nb_type_is_float_based(e)) {
            ck_err(c, te->loc, "'DiffTensor' element must be float-based, got '%s'", e->name);
            return c->tt->t_error;
        }
        if (!ck_generic_int(c, te, 1, &a)) return c->tt->t_error;
        if (a < 1 || a > 8) {
            ck_err(c, te->loc, "'%s' rank must be 1 to 8, got %lld", n, (long long)a);
            return c->tt->t_error;
        }
        return nb_type_tensor(c->tt, e, (int)a, diff);
    }
    if (ck_is_buffer_type_name(n)) return ck_resolve_buffer_type(c, te);
    if (strcmp(n, "TorchTensor") == 0) { /* host code only (check_host.c) */
        if (na != 1) {
            ck_err(c, te->loc, "'TorchTensor' takes 1 generic argument (TorchTensor<T>), got %d", na);
            return c->tt->t_error;
        }
        const nb_type *e = generic_type(c, te, 0);
        if (ck_is_error(e)) return e;
        /* TorchTensor<float3>: a torch tensor whose last dimension is the vector (slang-torch) */
        if ((e->kind != NB_TY_SCALAR && e->kind != NB_TY_VECTOR) || e->scalar == NB_SC_BOOL) {
            ck_err(c, te->loc, "TorchTensor<%s>: nabla supports TorchTensor of number scalars and vectors (float, "
                   "float3, half, double, int2, uint, …)", e->name);
            return c->tt->t_error;
        }
        if (!ck_host_type_allowed(c, te->loc)) return c->tt->t_error;
        return nb_type_torch(c->tt, e);
    }
    if (strcmp(n, "TensorView") == 0 || strcmp(n, "DiffTensorView") == 0) {
        ck_err(c, te->loc, "'%s' without a rank is a parameter, field or local (its rank is inferred from its "
               "uses); here write %s<T, N>", n, n);
        return c->tt->t_error;
    }
    if (strcmp(n, "Ptr") == 0) return ck_resolve_ptr_type(c, te); /* check_ptr.c */
    if (strcmp(n, "DifferentialPtrPair") == 0) {
        if (na != 1) {
            ck_err(c, te->loc, "'DifferentialPtrPair' takes 1 generic argument, got %d", na);
            return c->tt->t_error;
        }
        const nb_type *e = generic_type(c, te, 0);
        if (ck_is_error(e)) return e;
        return ck_resolve_ptr_pair(c, te, e);
    }
    if (strcmp(n, "DifferentialPair") == 0) {
        if (na != 1) {
            ck_err(c, te->loc, "'DifferentialPair' takes 1 generic argument, got %d", na);
            return c->tt->t_error;
        }
        const nb_type *e = generic_type(c, te, 0);
        if (ck_is_error(e)) return e;
        if (!nb_type_is_differentiable(e)) { /* (pairs of pairs: higher order) */
            ck_err(c, te->loc, "'DifferentialPair' needs a differentiable type, got '%s'", e->name);
            return c->tt->t_error;
        }
        return nb_type_diffpair(c->tt, e);
    }
    return NULL;
}

/* A member type `Base.Name` (the parser joins `float.Differential`, `S::Differential` into one
 * dotted name): Base is resolved as a type (itself possibly dotted or an alias), then its member.
 * `Differential` is the tangent type (Slang's IDifferentiable associated type): the type itself
 * for float-based scalars, vectors and matrices, arrays of the element's, an IDifferentiable
 * struct itself (lang/types.h). */
const nb_type *ck_member_type(nb_checker *c, nb_type_expr *te, const char *name) {
    const char *dot = strrchr(name, '.');
    size_t bn = (size_t)(dot - name);
    char *bname = ck_alloc(c, bn + 1);
    if (!bname) return c->tt->t_error;
    memcpy(bname, name, bn);
    bname[bn] = 0;
    const char *member = dot + 1;
    nb_type_expr *bte = ck_alloc(c, sizeof *bte);
    if (!bte) return c->tt->t_error;
    bte->loc = te->loc;
    bte->name = bname;
    /* `T.A` in an instantiation: the base is the substituted type (check_generic.c) */
    const nb_type *bt = NULL;
    if (te->assoc_base && !memchr(name, '.', bn)) bt = te->assoc_base;
    else if (!memchr(bname, '.', bn)) { /* `mlp.Output` with mlp a local or parameter: a member type of its type (Slang) */
        nb_decl *v = ck_lookup_local(c, bname);
        if (v && v->kind == NB_DECL_VAR && v->u.var.type) bt = v->u.var.type;
        else if (v && v->kind == NB_DECL_PARAM && !v->u.param.is_type && v->u.param.type) bt = v->u.param.type;
    }
    if (!bt) bt = ck_resolve_type(c, bte);
    if (ck_is_error(bt)) return bt;
    if (bt->kind == NB_TY_STRUCT && bt->decl && strcmp(member, "Differential") != 0) {
        /* a member typealias / typedef (an interface's associated type) */
        const nb_type *mt = ck_struct_member_type(c, bt->decl, member, te);
        if (mt) return mt;
    }
    /* `RWStructuredBuffer<T>.Handle` (Slang: a DescriptorHandle, a bindless reference to the
     * buffer): a buffer value here already is a handle (data pointer + shape), so it is the buffer */
    if (bt->kind == NB_TY_TENSOR && bt->buffer && strcmp(member, "Handle") == 0) return bt;
    if (strcmp(member, "Differential") == 0) {
        const nb_type *d = nb_type_differential(c->tt, bt);
        if (!d || !nb_type_is_differentiable(bt)) {
            ck_err(c, te->loc, "'%s' is not differentiable, so it has no 'Differential' type", bt->name);
            return c->tt->t_error;
        }
        return d;
    }
    ck_err(c, te->loc, "unknown type '%s' (no member type '%s' in '%s')", name, member, bt->name);
    return c->tt->t_error;
}

const nb_type *ck_resolve_type(nb_checker *c, nb_type_expr *te) {
    if (!te) return c->tt->t_error;
    if (te->resolved) return te->resolved;
    const nb_type *t = NULL;
    const char *name = te->name ? te->name : "";
    if (te->ntargs > 0) {
        nb_decl *own[1];
        /* NDBuffer / RWNDBuffer are SlangPy's names, not Slang's: a module's own generic struct
         * of that name is that struct (Slang code declares its own NDBuffer<T, N>). */
        if ((strcmp(name, "NDBuffer") == 0 || strcmp(name, "RWNDBuffer") == 0 || strcmp(name, "CoopVec") == 0) &&
            ck_lookup_global(c, name, NB_DECL_STRUCT, own, 1) > 0 && ck_is_template(own[0]))
            t = ck_instantiate_struct(c, own[0], te);
        else
            t = resolve_generic(c, te);
        if (!t) {
            const nb_type *plain = ck_builtin_type_name(c, name);
            nb_decl *d[1];
            if (!plain && ck_lookup_global(c, name, NB_DECL_STRUCT, d, 1) > 0 && ck_is_template(d[0]))
                t = ck_instantiate_struct(c, d[0], te);
            else if (plain || ck_lookup_global(c, name, NB_DECL_STRUCT, d, 1) > 0 ||
                     ck_lookup_global(c, name, NB_DECL_TYPEDEF, d, 1) > 0)
                ck_err(c, te->loc, "'%s' is not a generic type", name);
            else if (ck_lookup_global(c, name, NB_DECL_FUNC, d, 1) > 0)
                ck_err(c, te->loc, "'%s' is a function, not a type", name);
            else
                unknown_type(c, te, name);
            if (!t) t = c->tt->t_error;
        }
    } else if (strcmp(name, "vector") == 0 || strcmp(name, "matrix") == 0 || strcmp(name, "Tensor") == 0 ||
               strcmp(name, "DiffTensor") == 0 || strcmp(name, "DifferentialPair") == 0 || strcmp(name, "Ptr") == 0 ||
               strcmp(name, "DifferentialPtrPair") == 0) {
        ck_err(c, te->loc, "'%s' needs generic arguments", name);
        t = c->tt->t_error;
    } else if (te->member_of) { /* `S<float>.Differential` */
        const nb_type *bt = ck_resolve_type(c, te->member_of);
        if (ck_is_error(bt)) {
            t = bt;
        } else {
            size_t n1 = strlen(bt->name), n2 = strlen(name);
            char *full = ck_alloc(c, n1 + n2 + 2);
            nb_type_expr *m = ck_alloc(c, sizeof *m);
            if (!full || !m) return c->tt->t_error;
            memcpy(full, bt->name, n1);
            full[n1] = '.';
            memcpy(full + n1 + 1, name, n2 + 1);
            m->loc = te->loc;
            m->name = full;
            m->assoc_base = bt;
            t = ck_member_type(c, m, full);
        }
    } else if (te->subst) {
        t = te->subst; /* a substituted type generic parameter */
    } else {
        t = ck_builtin_type_name(c, name);
        if (!t && strcmp(name, "This") == 0 && c->strct) t = ck_struct_type(c, c->strct);
        if (!t && c->strct && !strchr(name, '.'))
            t = ck_struct_member_type(c, c->strct, name, te); /* `Value` inside S */
        if (!t) {
            nb_decl *d[2];
            if (ck_lookup_global(c, name, NB_DECL_STRUCT, d, 2) > 0) {
                if (ck_is_template(d[0])) {
                    t = ck_instantiate_struct(c, d[0], te); /* all parameters defaulted, or an error */
                } else {
                    t = ck_struct_type(c, d[0]);
                }
            } else if (ck_lookup_global(c, name, NB_DECL_TYPEDEF, d, 2) > 0) {
                nb_decl *td = d[0];
                int st = ck_state(c, td);
                if (st == CK_BUSY) {
                    ck_err(c, te->loc, "type alias '%s' refers to itself", name);
                    t = c->tt->t_error;
                } else {
                    ck_set_state(c, td, CK_BUSY);
                    ctx_save s = ck_enter_global_ctx(c, td->module);
                    c->ns = td->ns;
                    t = ck_resolve_type(c, td->u.tdef.texpr);
                    ck_leave_global_ctx(c, s);
                    ck_set_state(c, td, CK_DONE);
                }
            } else if (strrchr(name, '.')) {
                t = ck_member_type(c, te, name);
            } else if (c->strct && strcmp(name, "Differential") == 0) {
                t = ck_member_type(c, te, "This.Differential"); /* inside S: S.Differential */
            } else if (ck_lookup_global(c, name, NB_DECL_INTERFACE, d, 2) > 0) {
                t = ck_existential(c, d[0], te->loc); /* a value of interface type (check_dyn.c) */
            } else {
                unknown_type(c, te, name);
                t = c->tt->t_error;
            }
        }
    }
    for (int i = te->narray_dims - 1; i >= 0 && !ck_is_error(t); i--) {
        nb_expr *dim = te->array_dims ? te->array_dims[i] : NULL;
        if (!dim) {
            ck_err(c, te->loc, "array size is missing (unsized arrays are not supported: give the length, let an initializer list give it, or make it a generic parameter: f<let N : int>(T b[N]))");
            t = c->tt->t_error;
            break;
        }
        const nb_type *dt = ck_expr(c, &te->array_dims[i]);
        int64_t n;
        if (ck_is_error(dt)) { t = dt; break; }
        if (!ck_const_int(te->array_dims[i], &n)) {
            ck_err(c, dim->loc, "array size must be a constant integer expression");
            t = c->tt->t_error;
            break;
        }
        if (n <= 0 || n > (1 << 24)) {
            ck_err(c, dim->loc, "array size must be positive, got %lld", (long long)n);
            t = c->tt->t_error;
            break;
        }
        if (t->kind == NB_TY_VOID) { /* (arrays of tensors: slang-torch's `DiffTensorView weights[N]`) */
            ck_err(c, te->loc, "cannot make an array of '%s'", t->name);
            t = c->tt->t_error;
            break;
        }
        t = nb_type_array(c->tt, t, (int)n);
    }
    te->resolved = t;
    return t;
}

/* ---- structs ------------------------------------------------------------------------------ */

static const nb_type *innermost(const nb_type *t) {
    while (t && t->kind == NB_TY_ARRAY) t = t->elem;
    return t;
}

/* An IDifferentiable struct without `typealias Differential` that has a non-differentiable field
 * (int, bool, `no_diff`) or a differentiable field whose Differential is another type gets Slang's
 * synthesized Differential: a struct "S.Differential" with one field per differentiable field,
 * of that field's Differential type, same names (so the tangents map by name, nb_ad_field_map);
 * the other fields have no tangent. (Structs whose fields are all their own Differentials keep S
 * itself.) */
static void synthesize_differential(nb_checker *c, nb_decl *sd, const nb_type *t) {
    if (!nb_type_is_differentiable(t) || nb_type_differential(c->tt, t) != t) return;
    int need = 0, n = 0;
    for (int i = 0; i < sd->u.strct.nfields; i++) {
        nb_decl *f = sd->u.strct.fields[i];
        const nb_type *ft = f ? f->u.var.type : NULL;
        if (!ft || ck_is_error(ft)) continue;
        if ((f->mods & NB_MOD_NO_DIFF) || !nb_type_is_differentiable(ft)) { need = 1; continue; }
        n++;
        if (nb_type_differential(c->tt, ft) != ft) need = 1;
    }
    if (!need || n == 0) return; /* no differentiable field: S stays its own (all-zero) Differential */
    nb_decl *dd = ck_alloc(c, sizeof *dd);
    nb_decl **fields = ck_alloc(c, sizeof(nb_decl *) * (size_t)n);
    const char **conf = ck_alloc(c, sizeof(char *));
    nb_decl *td = ck_alloc(c, sizeof *td);
    nb_decl **types = ck_alloc(c, sizeof(nb_decl *) * (size_t)(sd->u.strct.ntypes + 1));
    nb_type_expr *te = ck_alloc(c, sizeof *te);
    size_t ln = strlen(sd->name ? sd->name : "S");
    char *name = ck_alloc(c, ln + 14);
    if (!dd || !fields || !conf || !td || !types || !te || !name) return;
    memcpy(name, sd->name ? sd->name : "S", ln);
    memcpy(name + ln, ".Differential", 14);
    int k = 0;
    for (int i = 0; i < sd->u.strct.nfields; i++) {
        nb_decl *f = sd->u.strct.fields[i];
        const nb_type *ft = f ? f->u.var.type : NULL;
        if (!ft || ck_is_error(ft) || (f->mods & NB_MOD_NO_DIFF) || !nb_type_is_differentiable(ft)) continue;
        nb_decl *g = ck_alloc(c, sizeof *g);
        nb_type_expr *gt = ck_alloc(c, sizeof *gt);
        if (!g || !gt) return;
        g->kind = NB_DECL_VAR;
        g->loc = f->loc;
        g->name = f->name;
        g->module = sd->module;
        gt->loc = f->loc;
        gt->resolved = nb_type_differential(c->tt, ft);
        gt->name = gt->resolved->name;
        g->u.var.texpr = gt;
        g->u.var.type = gt->resolved;
        fields[k++] = g;
    }
    conf[0] = "IDifferentiable";
    dd->kind = NB_DECL_STRUCT;
    dd->loc = sd->loc;
    dd->name = name;
    dd->module = sd->module;
    dd->ns = sd->ns;
    dd->u.strct.fields = fields;
    dd->u.strct.nfields = k;
    dd->u.strct.conforms = conf;
    dd->u.strct.nconforms = 1;
    const nb_type *dt = ck_struct_type(c, dd);
    te->loc = sd->loc;
    te->name = name;
    te->resolved = dt;
    td->kind = NB_DECL_TYPEDEF;
    td->loc = sd->loc;
    td->name = "Differential";
    td->module = sd->module;
    td->u.tdef.texpr = te;
    for (int i = 0; i < sd->u.strct.ntypes; i++) types[i] = sd->u.strct.types[i];
    types[sd->u.strct.ntypes] = td;
    sd->u.strct.types = types;
    sd->u.strct.ntypes++;
}

/* [DerivativeMember(Differential.x)] on a field of struct t: x must be a field of t's own
 * Differential type (the tangent of the field lives there; lang/ad.h nb_ad_field_map). */
static void check_derivative_members(nb_checker *c, nb_decl *sd, const nb_type *t) {
    for (int i = 0; i < sd->u.strct.nfields; i++) {
        nb_decl *f = sd->u.strct.fields[i];
        for (int k = 0; f && k < f->attrs.count; k++) {
            const nb_attr *a = &f->attrs.items[k];
            if (!a->name || strcmp(a->name, "DerivativeMember") != 0) continue;
            const nb_expr *e = a->nargs == 1 ? a->args[0] : NULL;
            const char *m = e && e->kind == NB_EX_MEMBER ? e->u.member.member : NULL;
            if (!m) {
                ck_err(c, a->loc, "[DerivativeMember] takes one member of the Differential type: "
                       "[DerivativeMember(Differential.x)]");
                continue;
            }
            const nb_type *d = nb_type_differential(c->tt, t);
            if (!d || d->kind != NB_TY_STRUCT || !d->decl) {
                ck_err(c, a->loc, "[DerivativeMember] needs a struct Differential type in '%s'", sd->name);
                continue;
            }
            int found = 0;
            for (int j = 0; j < d->decl->u.strct.nfields; j++)
                if (d->decl->u.strct.fields[j] && d->decl->u.strct.fields[j]->name &&
                    !strcmp(d->decl->u.strct.fields[j]->name, m))
                    found = 1;
            if (!found)
                ck_err(c, e->loc, "no member named '%s' in the Differential type '%s' of '%s'", m, d->name, sd->name);
        }
    }
}

const nb_type *ck_struct_type(nb_checker *c, nb_decl *sd) {
    if (ck_is_template(sd)) return c->tt->t_error; /* only its instantiations are types */
    const nb_type *t = nb_type_struct(c->tt, sd);
    sd->u.strct.type = t;
    if (ck_state(c, sd) != CK_TODO) return t;
    ck_set_state(c, sd, CK_BUSY);
    ctx_save s = ck_enter_global_ctx(c, sd->module);
    c->ns = sd->ns;
    for (int i = 0; i < sd->u.strct.ntypes; i++) { /* `typealias Differential = D;`: D now (lang/types.c) */
        nb_decl *td = sd->u.strct.types[i];
        if (!td || !td->name || strcmp(td->name, "Differential") != 0 || !td->u.tdef.texpr) continue;
        const nb_type *dt = ck_struct_member_type(c, sd, "Differential", td->u.tdef.texpr);
        if (dt && !ck_is_error(dt) && dt != t && !nb_type_is_differentiable(dt)) {
            ck_err(c, td->u.tdef.texpr->loc, "the Differential type '%s' of '%s' is not differentiable (make it "
                   "conform to IDifferentiable)", dt->name, sd->name);
            td->u.tdef.texpr->resolved = c->tt->t_error;
        }
    }
    for (int i = 0; i < sd->u.strct.nconforms && !sd->u.strct.idiff; i++) /* `S : IFoo` with IFoo : IDifferentiable */
        if (sd->u.strct.conforms[i] && strcmp(sd->u.strct.conforms[i], "IDifferentiable") != 0 &&
            ck_iface_extends(c, sd->u.strct.conforms[i], "IDifferentiable"))
            sd->u.strct.idiff = 1;
    for (int i = 0; i < sd->u.strct.nfields; i++) {
        nb_decl *f = sd->u.strct.fields[i];
        if (!f) continue;
        f->module = sd->module;
        const nb_type *ft = ck_resolve_type(c, f->u.var.texpr);
        const nb_type *in = innermost(ft);
        if (in && in->kind == NB_TY_STRUCT && ck_state(c, in->decl) == CK_BUSY) {
            ck_err(c, f->loc, "field '%s' makes struct '%s' contain itself", f->name ? f->name : "?",
                   in->decl->name ? in->decl->name : "?");
            ft = c->tt->t_error;
        }
        if (ft->kind == NB_TY_VOID) {
            ck_err(c, f->loc, "field '%s' has type void", f->name ? f->name : "?");
            ft = c->tt->t_error;
        }
        f->u.var.type = ft;
        /* duplicate names */
        for (int j = 0; j < i; j++) {
            nb_decl *g = sd->u.strct.fields[j];
            if (g && g->name && f->name && strcmp(g->name, f->name) == 0) {
                ck_err(c, f->loc, "duplicate member '%s' in '%s'", f->name, sd->name);
                ck_note(c, g->loc, "previous declaration is here");
            }
        }
    }
    ck_set_state(c, sd, CK_DONE);
    synthesize_differential(c, sd, t);
    check_derivative_members(c, sd, t);
    if (ck_is_ptr_type(c, t)) /* its DifferentialPtrPair now: derivative signatures use it (lang/ad.h) */
        (void)ck_resolve_ptr_pair(c, sd->u.strct.fields && sd->u.strct.nfields ? sd->u.strct.fields[0]->u.var.texpr
                                                                                 : NULL, t);
    ck_leave_global_ctx(c, s);
    /* field initializers (defaults) after the type is complete */
    s = ck_enter_global_ctx(c, sd->module);
    c->ns = sd->ns;
    c->strct = NULL;
    for (int i = 0; i < sd->u.strct.nfields; i++) {
        nb_decl *f = sd->u.strct.fields[i];
        if (f && f->u.var.init) {
            char what[128];
            snprintf(what, sizeof what, "initializer of field '%s'", f->name ? f->name : "?");
            ck_expr_to(c, &f->u.var.init, f->u.var.type, what);
        }
    }
    ck_leave_global_ctx(c, s);
    return t;
}

/* ---- global variables --------------------------------------------------------------------- */

static const nb_constant *find_override(nb_checker *c, nb_decl *d) {
    for (int i = 0; i < c->p->nconstants; i++) {
        const nb_constant *k = &c->p->constants[i];
        if (k->is_set && k->name && d->name && strcmp(k->name, d->name) == 0) return k;
    }
    return NULL;
}

static nb_expr *make_literal(nb_checker *c, const nb_type *t, double v, nb_loc loc) {
    nb_expr *e;
    if (t->scalar == NB_SC_BOOL) {
        e = ck_new_expr(c, NB_EX_BOOL, loc);
        if (e) e->u.blit = v != 0;
    } else if (ck_is_int_scalar_kind(t->scalar)) {
        e = ck_new_expr(c, NB_EX_INT, loc);
        if (e) {
            int64_t iv = nb_fold_d2i(v);
            e->u.ilit.value = (uint64_t)iv;
            e->u.ilit.is_unsigned = t->scalar == NB_SC_UINT || t->scalar == NB_SC_UINT64;
        }
    } else {
        e = ck_new_expr(c, NB_EX_FLOAT, loc);
        if (e) {
            e->u.flit.value = v;
            e->u.flit.kind = t->scalar;
        }
    }
    if (e) e->type = t;
    return e;
}

void ck_fold_var(nb_decl *d) {
    int ii; int64_t i; double f;
    if (d->u.var.init && d->u.var.init->kind != NB_EX_INIT_LIST &&
        nb_check_const_eval(d->u.var.init, &ii, &i, &f)) {
        d->u.var.has_const = 1;
        d->u.var.const_i = i;
        d->u.var.const_f = f;
    }
}

void ck_check_global_var(nb_checker *c, nb_decl *d) {
    int st = ck_state(c, d);
    if (st == CK_DONE) return;
    if (st == CK_BUSY) {
        ck_err(c, d->loc, "the value of '%s' depends on itself", d->name ? d->name : "?");
        d->u.var.type = c->tt->t_error;
        return;
    }
    if (d->u.var.enum_of && ck_state(c, &d->u.var.enum_of->u.tdef.cases) == CK_TODO) {
        ck_check_enum(c, d->u.var.enum_of); /* gives the case its value first */
        return;
    }
    ck_set_state(c, d, CK_BUSY);
    ctx_save s = ck_enter_global_ctx(c, d->module);
    c->ns = ck_decl_ns(d);
    d->u.var.is_global = 1;
    ck_infer_array_size(c, d->u.var.texpr, d->u.var.init); /* static const int k[] = { … } */
    const nb_type *t = d->u.var.texpr ? ck_resolve_type(c, d->u.var.texpr) : NULL;
    int is_extern = (d->mods & NB_MOD_EXTERN) != 0;
    if (t && ck_kernel_global(c, d, t)) { /* `RWStructuredBuffer<float> out;` (check_kernel.c) */
        ck_leave_global_ctx(c, s);
        ck_set_state(c, d, CK_DONE);
        return;
    }
    if (!(d->mods & NB_MOD_CONST) && !(d->mods & NB_MOD_STATIC) && !is_extern) {
        ck_err(c, d->loc, "global variable '%s' must be 'static const' (or 'extern static const' for a "
               "link-time constant)", d->name ? d->name : "?");
    }
    /* `static float g;` / `static S s = …;`: a thread-private global (Slang, HLSL): one copy per
     * thread, a local of the entry point passed inout to the functions using it (check_kernel.c) */
    int mutable_static = (d->mods & NB_MOD_STATIC) && !(d->mods & NB_MOD_CONST) && !is_extern;
    if (!t) {
        if (d->u.var.init && d->u.var.init->kind != NB_EX_INIT_LIST) t = ck_expr(c, &d->u.var.init);
        else {
            ck_err(c, d->loc, "cannot infer the type of '%s'", d->name ? d->name : "?");
            t = c->tt->t_error;
        }
    }
    if (t->kind == NB_TY_VOID || t->kind == NB_TY_TENSOR) {
        ck_err(c, d->loc, "global '%s' cannot have type '%s'", d->name ? d->name : "?", t->name);
        t = c->tt->t_error;
    }
    d->u.var.type = t;
    const nb_constant *ov = is_extern ? find_override(c, d) : NULL;
    if (ov && t->kind == NB_TY_SCALAR) {
        nb_expr *lit = make_literal(c, t, ov->value, d->loc);
        if (lit) d->u.var.init = lit;
    } else if (d->u.var.init) {
        char what[128];
        snprintf(what, sizeof what, "initialization of '%s'", d->name ? d->name : "?");
        if (d->u.var.init->kind == NB_EX_INIT_LIST || !d->u.var.init->type || d->u.var.init->type != t)
            ck_expr_to(c, &d->u.var.init, t, what);
    } else if (!is_extern && !mutable_static) {
        ck_err(c, d->loc, "constant '%s' needs an initializer", d->name ? d->name : "?");
    }
    if (is_extern && t->kind != NB_TY_SCALAR && !ck_is_error(t))
        ck_err(c, d->loc, "link-time constant '%s' must be a scalar, got '%s'", d->name ? d->name : "?", t->name);
    if (mutable_static) d->u.var.shader_param = 3; /* (never folded: its value changes) */
    else ck_fold_var(d);
    ck_leave_global_ctx(c, s);
    ck_set_state(c, d, CK_DONE);
}

void ck_push_scope(nb_checker *c) { push_scope(c); }
void ck_declare(nb_checker *c, const char *name, nb_decl *d, nb_loc loc) { declare(c, name, d, loc); }
void ck_pop_scope(nb_checker *c) { pop_scope(c); }

/* ---- recursion ---------------------------------------------------------------------------- */

static void find_recursion(nb_checker *c) {
    int n = c->nedges;
    if (!n) return;
    /* nodes: distinct 'from' decls; DFS over edges with colors kept in the state table under
     * a key offset (decl pointer + 1 byte) */
    const nb_decl **stack = nb_alloc(sizeof(nb_decl *) * (size_t)(n + 1), 16);
    const ck_edge **via = nb_alloc(sizeof(ck_edge *) * (size_t)(n + 1), 16);
    int *iter = nb_alloc(sizeof(int) * (size_t)(n + 1), 16);
    int *next_out = nb_alloc(sizeof(int) * (size_t)(n + 1), 16); /* the next edge with the same 'from' */
    if (!stack || !via || !iter || !next_out) goto out;
    /* first out-edge of a node: in the state table under decl pointer + 3 (1 + edge index) */
    for (int k = n - 1; k >= 0; k--) {
        const char *fk = (const char *)c->edges[k].from + 3;
        next_out[k] = ck_state(c, fk) - 1;
        ck_set_state(c, fk, k + 1);
    }
    for (int e0 = 0; e0 < n; e0++) {
        const nb_decl *root = c->edges[e0].from;
        const char *rk = (const char *)root + 1;
        if (ck_state(c, rk) != 0) continue;
        int sp = 0;
        stack[sp] = root;
        iter[sp] = e0; /* root's first out-edge (the first edge naming it as 'from') */
        ck_set_state(c, rk, 1); /* on stack */
        while (sp >= 0) {
            const nb_decl *cur = stack[sp];
            int advanced = 0;
            for (; iter[sp] >= 0; iter[sp] = next_out[iter[sp]]) {
                const ck_edge *e = &c->edges[iter[sp]];
                const char *tk = (const char *)e->to + 1;
                int st = ck_state(c, tk);
                if (st == 1) {
                    /* cycle: e->to ... cur -> e->to */
                    int start = sp;
                    while (start > 0 && stack[start] != e->to) start--;
                    const char *fname = e->to->name ? e->to->name : "?";
                    const ck_edge *first = start < sp ? via[start + 1] : e;
                    if (start == sp) {
                        ck_err(c, e->loc, "recursion is not supported: '%s' calls itself", fname);
                    } else {
                        nb_strbuf sb;
                        nb_strbuf_init(&sb);
                        for (int k = start + 1; k <= sp; k++) {
                            if (k > start + 1) nb_strbuf_append(&sb, ", ");
                            nb_strbuf_printf(&sb, "'%s'", stack[k]->name ? stack[k]->name : "?");
                        }
                        ck_err(c, first->loc, "recursion is not supported: '%s' calls itself via %s", fname,
                               nb_strbuf_cstr(&sb));
                        nb_strbuf_free(&sb);
                    }
                    continue;
                }
                if (st == 0 && sp + 1 <= n) {
                    iter[sp] = next_out[iter[sp]];
                    sp++;
                    stack[sp] = e->to;
                    via[sp] = e;
                    iter[sp] = ck_state(c, (const char *)e->to + 3) - 1;
                    ck_set_state(c, tk, 1);
                    advanced = 1;
                    break;
                }
            }
            if (!advanced) {
                ck_set_state(c, (const char *)cur + 1, 2);
                sp--;
            }
        }
    }
out:
    nb_free((void *)stack, sizeof(nb_decl *) * (size_t)(n + 1));
    nb_free((void *)via, sizeof(ck_edge *) * (size_t)(n + 1));
    nb_free(iter, sizeof(int) * (size_t)(n + 1));
    nb_free(next_out, sizeof(int) * (size_t)(n + 1));
}

/* ---- modules ------------------------------------------------------------------------------ */

static int same_params(nb_decl *a, nb_decl *b) {
    if (a->u.func.nparams != b->u.func.nparams) return 0;
    for (int i = 0; i < a->u.func.nparams; i++)
        if (a->u.func.params[i]->u.param.type != b->u.func.params[i]->u.param.type) return 0;
    return 1;
}

static void check_duplicates(nb_checker *c, nb_module_ast *m) {
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d || !d->name || d->kind == NB_DECL_IMPORT) continue;
        if (d->kind == NB_DECL_STRUCT && d->u.strct.is_existential) continue; /* named as its interface */
        if (d->kind == NB_DECL_EXTENSION) continue;                             /* named as its struct */
        /* the earlier decls of the same name, in order (module index) */
        ck_mod_index *x = mod_index(c, m);
        nb_strmap_slot *sl = x ? nb_strmap_find(&x->names, d->name) : NULL;
        if (!sl || !sl->val) continue;
        for (int j = x->chains[(intptr_t)sl->val - 1][0]; j >= 0 && j < i; j = x->next[j]) {
            nb_decl *e = m->decls[j];
            if (!e || !e->name || e->kind == NB_DECL_IMPORT || strcmp(d->name, e->name) != 0) continue;
            if (d->kind == NB_DECL_FUNC && e->kind == NB_DECL_FUNC) {
                if (ck_is_template(d) || ck_is_template(e)) continue; /* overloads of generics */
                if (!same_params(d, e)) continue;
                if (!d->u.func.body || !e->u.func.body) continue; /* declaration + definition */
                ck_err(c, d->loc, "redefinition of function '%s' with the same parameter types", d->name);
            } else {
                ck_err(c, d->loc, "redefinition of '%s'", d->name);
            }
            ck_note(c, e->loc, "previous definition is here");
            break;
        }
    }
}

static void check_module(nb_checker *c, nb_module_ast *m) {
    c->mod = m;
    c->inst_mod = m;
    c->inst_cap = 0;
    ck_prepare_views(c, m); /* TensorView ranks, [TorchEntryPoint] host functions (check_view.c) */
    for (int i = 0; i < m->ndecls; i++) /* `extension S { … }`: its members become S's */
        if (m->decls[i] && m->decls[i]->kind == NB_DECL_EXTENSION) ck_merge_extension(c, m->decls[i]);
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d) continue;
        d->module = m;
        if (d->kind == NB_DECL_STRUCT) ck_normalize_conforms(c, d);
        if (d->kind == NB_DECL_STRUCT || d->kind == NB_DECL_INTERFACE) {
            for (int k = 0; k < d->u.strct.ntypes; k++)
                if (d->u.strct.types[k]) d->u.strct.types[k]->module = m;
            for (int k = 0; k < d->u.strct.nmethods; k++)
                if (d->u.strct.methods[k]) {
                    d->u.strct.methods[k]->module = m;
                    d->u.strct.methods[k]->u.func.parent = d;
                }
            for (int k = 0; k < d->u.strct.nstatics; k++)
                if (d->u.strct.statics[k]) d->u.strct.statics[k]->module = m;
            for (int k = 0; k < d->u.strct.nfields; k++)
                if (d->u.strct.fields[k]) d->u.strct.fields[k]->module = m;
        }
    }
    /* pass 1: types, signatures, constants */
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d) continue;
        c->ns = d->ns; /* `namespace A { … }`: names of its declarations are looked up in A first */
        switch (d->kind) {
        case NB_DECL_STRUCT:
            if (ck_is_template(d)) ck_check_template(c, d);
            else ck_check_struct_decl(c, d);
            break;
        case NB_DECL_TYPEDEF: {
            if (d->u.tdef.is_enum) {
                ck_check_enum(c, d);
                break;
            }
            nb_type_expr te;
            memset(&te, 0, sizeof te);
            te.loc = d->loc;
            te.name = d->name;
            ck_resolve_type(c, &te);
            break;
        }
        case NB_DECL_FUNC:
            if (ck_is_template(d)) ck_check_template(c, d);
            else if (d->u.func.nwheres)
                ck_err(c, d->u.func.wheres[0]->loc, "'where' clause on '%s', which has no generic parameters",
                       d->name);
            else ck_check_func_sig(c, d);
            break;
        case NB_DECL_VAR: ck_check_global_var(c, d); break;
        case NB_DECL_INTERFACE: ck_check_interface(c, d); break;
        default: break;
        }
        c->ns = NULL;
    }
    check_duplicates(c, m);
    /* pass 2: bodies (instantiations requested meanwhile are appended to m->decls and checked
     * here too, in the module of their template) */
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d || ck_is_template(d)) continue;
        c->mod = d->module ? d->module : m;
        c->inst_depth = ck_inst_depth(c, d);
        int errors0 = c->src->nerrors;
        if (d->kind == NB_DECL_FUNC) ck_check_func_body(c, d);
        if (d->kind == NB_DECL_STRUCT)
            for (int k = 0; k < d->u.strct.nmethods; k++)
                if (d->u.strct.methods[k] && !ck_is_template(d->u.strct.methods[k]))
                    ck_check_func_body(c, d->u.strct.methods[k]);
        ck_inst_note(c, d, errors0);
        c->inst_depth = 0;
        c->mod = m;
    }
}

void ck_check_struct_decl(nb_checker *c, nb_decl *d) {
    const char *key = (const char *)d + 2; /* members checked (the struct's own key is its type) */
    if (ck_state(c, key) != CK_TODO) return;
    ck_set_state(c, key, CK_DONE);
    ck_check_conformance(c, d); /* first: default implementations become methods */
    ck_struct_type(c, d);
    for (int k = 0; k < d->u.strct.nstatics; k++)
        if (d->u.strct.statics[k]) ck_check_global_var(c, d->u.strct.statics[k]);
    for (int k = 0; k < d->u.strct.nmethods; k++) {
        nb_decl *md = d->u.strct.methods[k];
        if (!md) continue;
        if (ck_is_template(md)) ck_check_template(c, md);
        else ck_check_func_sig(c, md);
    }
    /* duplicate member names across fields/statics/methods */
    for (int k = 0; k < d->u.strct.nstatics; k++) {
        nb_decl *sv = d->u.strct.statics[k];
        for (int f = 0; sv && sv->name && f < d->u.strct.nfields; f++)
            if (d->u.strct.fields[f] && d->u.strct.fields[f]->name &&
                strcmp(d->u.strct.fields[f]->name, sv->name) == 0)
                ck_err(c, sv->loc, "duplicate member '%s' in '%s'", sv->name, d->name);
    }
}

nb_status nb_check_program(nb_program *p) {
    nb_checker c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.src = &p->src;
    c.tt = &p->types;
    c.arena = &p->arena;
    int errors0 = p->src.nerrors;
    for (int i = 0; i < p->nmodules; i++)
        if (p->modules[i]) check_module(&c, p->modules[i]);
    find_recursion(&c);
    if (p->nconformances) {
        c.mod = p->main;
        ck_check_conformance_ids(&c); /* --conformance TYPE:INTERFACE=ID (check_dyn_create.c) */
    }
    if (p->src.nerrors == errors0) ck_bind_shader_params(&c); /* module-scope buffers (check_kernel.c) */
    ck_free_generics(&c);
    nb_free(c.syms, sizeof(ck_sym) * (size_t)c.cap_syms);
    nb_free(c.marks, sizeof(int) * (size_t)c.cap_marks);
    nb_strmap_free(&c.local_names);
    free_mod_indexes(&c);
    nb_free(c.edges, sizeof(ck_edge) * (size_t)c.cap_edges);
    nb_free(c.states, sizeof(ck_state_slot) * (size_t)c.cap_states);
    return p->src.nerrors > errors0 ? NB_ERR_COMPILE : NB_OK;
}
