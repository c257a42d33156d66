/* Emission scope after partial lowering failures (lower_scope.h). */
#include <stdio.h>
#include <string.h>

#include "lang/lower_scope.h"
#include "nabla/alloc.h"

static char *dup_text(const char *s) {
    size_t n = strlen(s);
    char *d = nb_alloc(n + 1, 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static void free_text(char *s) {
    if (s) nb_free(s, strlen(s) + 1);
}

static int loc_le(nb_loc a, nb_loc b) { return a.line < b.line || (a.line == b.line && a.col <= b.col); }
static int loc_eq(nb_loc a, nb_loc b) { return a.file == b.file && a.line == b.line && a.col == b.col; }

typedef struct best {
    nb_loc at;
    const nb_decl *d;
} best;

static void consider(best *b, const nb_decl *d, nb_loc where) {
    if (!d || d->loc.file != where.file || !loc_le(d->loc, where)) return;
    if (!b->d || loc_le(b->at, d->loc)) {
        /* on equal locations prefer a function with a body */
        if (b->d && loc_eq(b->at, d->loc) && b->d->kind == NB_DECL_FUNC && b->d->u.func.body) return;
        b->at = d->loc;
        b->d = d;
    }
}

/* The function whose body holds `where`, or NULL (the nearest declaration before it is not a
 * function with a body). */
static const nb_decl *owner_of(const nb_program *p, nb_loc where) {
    best b = {{-1, 0, 0}, NULL};
    for (int mi = 0; mi < p->nmodules; mi++) {
        const nb_module_ast *m = p->modules[mi];
        for (int i = 0; i < m->ndecls; i++) {
            const nb_decl *d = m->decls[i];
            if (!d) continue;
            consider(&b, d, where);
            if (d->kind == NB_DECL_STRUCT) {
                for (int k = 0; k < d->u.strct.nfields; k++) consider(&b, d->u.strct.fields[k], where);
                for (int k = 0; k < d->u.strct.nstatics; k++) consider(&b, d->u.strct.statics[k], where);
                for (int k = 0; k < d->u.strct.nmethods; k++) consider(&b, d->u.strct.methods[k], where);
            }
        }
    }
    return b.d && b.d->kind == NB_DECL_FUNC && b.d->u.func.body ? b.d : NULL;
}

static void render_subset(const nb_source_set *src, const nb_diag *diags, int n, nb_strbuf *out) {
    nb_source_set tmp = *src;
    tmp.diags = (nb_diag *)diags;
    tmp.ndiags = n;
    tmp.nerrors = 0;
    for (int i = 0; i < n; i++) tmp.nerrors += diags[i].level == NB_DIAG_ERROR;
    nb_diag_render(&tmp, out);
}

nb_status nb_lower_faults_collect(nb_program *p, int ndiags0, int nerrors0, nb_lower_faults *out) {
    memset(out, 0, sizeof *out);
    nb_source_set *src = &p->src;
    int nd = src->ndiags - ndiags0;
    nb_status st = NB_OK;
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    render_subset(src, src->diags + ndiags0, nd, &sb);
    if (src->nerrors - nerrors0 > nd) out->global = 1; /* errors past the cap: unknown places */
    {
        /* as nb_diag_status: without the trailing newline */
        const char *t = nb_strbuf_cstr(&sb);
        size_t n = strlen(t);
        while (n && t[n - 1] == '\n') n--;
        out->all = nb_alloc(n + 1, 1);
        if (out->all) {
            memcpy(out->all, t, n);
            out->all[n] = '\0';
        }
    }
    nb_strbuf_clear(&sb);
    const nb_decl **own = nd > 0 ? nb_alloc(sizeof(*own) * (size_t)nd, 16) : NULL;
    out->locs = nd > 0 ? nb_alloc(sizeof(nb_loc) * (size_t)nd, 16) : NULL;
    out->texts = nd > 0 ? nb_alloc(sizeof(char *) * (size_t)nd, 16) : NULL;
    out->cap = nd;
    nb_diag *sub = nd > 0 ? nb_alloc(sizeof(nb_diag) * (size_t)nd, 16) : NULL;
    if (!out->all || (nd > 0 && (!own || !out->locs || !out->texts || !sub))) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        out->global = 1;
    }
    for (int i = 0; st == NB_OK && i < nd; i++) {
        const nb_diag *d = &src->diags[ndiags0 + i];
        own[i] = d->level == NB_DIAG_ERROR || i == 0 ? owner_of(p, d->loc) : own[i - 1];
        if (!own[i]) out->global = 1;
    }
    for (int i = 0; st == NB_OK && !out->global && i < nd; i++) {
        int seen = 0;
        for (int k = 0; k < out->n; k++) seen |= loc_eq(out->locs[k], own[i]->loc);
        if (seen) continue;
        int ns = 0;
        for (int j = i; j < nd; j++)
            if (own[j] == own[i]) sub[ns++] = src->diags[ndiags0 + j];
        nb_strbuf_clear(&sb);
        render_subset(src, sub, ns, &sb);
        char *t = dup_text(nb_strbuf_cstr(&sb));
        if (!t) {
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
            out->global = 1;
            break;
        }
        out->locs[out->n] = own[i]->loc;
        out->texts[out->n++] = t;
    }
    nb_strbuf_free(&sb);
    if (own) nb_free((void *)own, sizeof(*own) * (size_t)nd);
    if (sub) nb_free(sub, sizeof(nb_diag) * (size_t)nd);
    /* the program's diagnostics return to what they were before lowering */
    for (int i = ndiags0; i < src->ndiags; i++) free_text(src->diags[i].msg);
    src->ndiags = ndiags0;
    src->nerrors = nerrors0;
    return st;
}

void nb_lower_faults_free(nb_lower_faults *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free_text(f->texts[i]);
    if (f->locs) nb_free(f->locs, sizeof(nb_loc) * (size_t)f->cap);
    if (f->texts) nb_free(f->texts, sizeof(char *) * (size_t)f->cap);
    free_text(f->all);
    memset(f, 0, sizeof *f);
}

int nb_lower_faults_func_broken(const nb_lower_faults *f, const nb_ir_func *fn) {
    if (!f || !fn || !fn->decl) return 0;
    for (int i = 0; i < f->n; i++)
        if (loc_eq(f->locs[i], fn->decl->loc)) return 1;
    return 0;
}

/* ---- reachability ---------------------------------------------------------------------------- */

typedef struct reach {
    nb_ir_func **stack;
    int n, cap;
    unsigned char *seen; /* by nb_ir_func.index */
    int nfuncs;
} reach;

static void push(reach *r, nb_ir_func *f) {
    if (!f || f->index < 0 || f->index >= r->nfuncs || r->seen[f->index] || r->n >= r->cap) return;
    r->seen[f->index] = 1;
    r->stack[r->n++] = f;
}

static void visit(nb_ir_inst *in, void *ud) {
    reach *r = ud;
    if (in->op == NB_IR_CALL) push(r, in->callee);
    if (in->op == NB_IR_GLOBAL && in->global) push(r, in->global->init);
}

nb_status nb_lower_faults_check(const nb_lower_faults *f, nb_ir_module *m, nb_ir_func *fn) {
    if (!f || !f->n || !fn) return NB_OK;
    reach r;
    memset(&r, 0, sizeof r);
    r.nfuncs = m->nfuncs;
    r.cap = m->nfuncs;
    r.stack = nb_alloc(sizeof(nb_ir_func *) * (size_t)(r.cap ? r.cap : 1), 16);
    r.seen = nb_calloc((size_t)(r.nfuncs ? r.nfuncs : 1), 1);
    if (!r.stack || !r.seen) {
        if (r.stack) nb_free(r.stack, sizeof(nb_ir_func *) * (size_t)(r.cap ? r.cap : 1));
        if (r.seen) nb_free(r.seen, (size_t)(r.nfuncs ? r.nfuncs : 1));
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    }
    push(&r, fn);
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    for (int i = 0; i < r.n; i++) {
        nb_ir_func *g = r.stack[i];
        if (nb_lower_faults_func_broken(f, g)) {
            for (int k = 0; k < f->n; k++)
                if (loc_eq(f->locs[k], g->decl->loc)) nb_strbuf_append(&sb, f->texts[k]);
            continue;
        }
        nb_ir_walk(g->body, visit, &r);
    }
    nb_status st = NB_OK;
    if (sb.len) {
        /* drop the trailing newline: nb_error messages end without one */
        const char *t = nb_strbuf_cstr(&sb);
        size_t n = strlen(t);
        while (n && t[n - 1] == '\n') n--;
        st = nb_error(NB_ERR_COMPILE, "%.*s", (int)n, t);
    }
    nb_strbuf_free(&sb);
    nb_free(r.stack, sizeof(nb_ir_func *) * (size_t)(r.cap ? r.cap : 1));
    nb_free(r.seen, (size_t)(r.nfuncs ? r.nfuncs : 1));
    return st;
}
