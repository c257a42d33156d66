/* Programs: loading modules and imports, checking, link-time constants and reflection
 * (compiler.h; the emit functions are in callgen.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/strbuf.h"
#include "lang/ad.h"
#include "lang/check.h"
#include "lang/fold_value.h"
#include "lang/parser.h"
#include "lang/program.h"
#include "lang/stdlib.h"
#include "nabla/alloc.h"

struct nb_program_gen {
    nb_source_set src;
    nb_arena arena;
    nb_type_table types;
    nb_program_gen *next;
};

typedef struct reflect_entry {
    const char *name;
    nb_fn_info *infos;
    int count;
    struct reflect_entry *next;
} reflect_entry;

static char *heap_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *d = nb_alloc(n + 1, 16);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static void heap_strfree(char *s) {
    if (s) nb_free(s, strlen(s) + 1);
}

/* ---- module loading ----------------------------------------------------------------------- */

typedef struct load_mod {
    char *canon;          /* canonical path (heap) */
    int file;
    nb_module_ast *mod;
    int state;            /* 1 loading, 2 done */
} load_mod;

typedef struct loader {
    nb_program *p;
    const nb_source_set *prev; /* earlier generation's sources (rebuilds reuse their text) */
    load_mod *mods;
    int nmods, cap;
    nb_module_ast **order;
    int norder, cap_order;
    int stack[64];
    int depth;
} loader;

static char *canonical(const char *path) {
    char buf[PATH_MAX];
    if (realpath(path, buf)) return heap_strdup(buf);
    return heap_strdup(path);
}

static int file_exists(const loader *L, const char *path) {
    if (L->prev)
        for (int i = 0; i < L->prev->nfiles; i++)
            if (strcmp(L->prev->files[i].path, path) == 0) return 1;
    return access(path, R_OK) == 0;
}

/* Adds the file to the source set (from the previous generation when possible). */
static nb_status add_file(loader *L, const char *path, const char *text, int *index) {
    nb_source_set *src = &L->p->src;
    if (text) {
        *index = nb_source_add(src, path, text, strlen(text));
        return *index < 0 ? nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory adding '%s'", path) : NB_OK;
    }
    if (L->prev)
        for (int i = 0; i < L->prev->nfiles; i++)
            if (strcmp(L->prev->files[i].path, path) == 0) {
                *index = nb_source_add(src, path, L->prev->files[i].text, L->prev->files[i].len);
                return *index < 0 ? nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory adding '%s'", path) : NB_OK;
            }
    return nb_source_load(src, path, index);
}

static void dir_of(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, n, "%s", "");
        return;
    }
    size_t len = (size_t)(slash - path);
    if (len == 0) len = 1; /* "/x.nb" */
    if (len >= n) len = n - 1;
    memcpy(out, path, len);
    out[len] = 0;
}

/* ---- module and file names (Slang's rules) ------------------------------------------------- */

#define MAX_CANDS 4
typedef char cand_name[1024];

static int has_ext(const char *s, const char *ext) {
    size_t n = strlen(s), e = strlen(ext);
    return n > e && strcmp(s + n - e, ext) == 0;
}

/* The file names a module reference may name, in the order they are tried:
 *   `a.b_c`  -> a/b_c.nb, a/b_c.slang, a/b-c.slang, a/b-c.nb (Slang turns '_' into '-' for
 *               file names; nabla's own modules keep '_')
 *   "x.slang", "dir/x.nb" -> as written; "x" -> x.slang, x.nb, x */
static int module_candidates(const char *ref, int quoted, cand_name *out) {
    if (quoted) {
        if (has_ext(ref, ".slang") || has_ext(ref, ".nb")) {
            snprintf(out[0], sizeof out[0], "%s", ref);
            return 1;
        }
        snprintf(out[0], sizeof out[0], "%s.slang", ref);
        snprintf(out[1], sizeof out[1], "%s.nb", ref);
        snprintf(out[2], sizeof out[2], "%s", ref);
        return 3;
    }
    char base[1000], hyph[1000];
    size_t j = 0;
    for (size_t i = 0; ref[i] && j + 1 < sizeof base; i++) base[j++] = ref[i] == '.' ? '/' : ref[i];
    base[j] = 0;
    for (size_t i = 0; i <= j; i++) hyph[i] = base[i] == '_' ? '-' : base[i];
    snprintf(out[0], sizeof out[0], "%s.nb", base);
    snprintf(out[1], sizeof out[1], "%s.slang", base);
    if (!strcmp(base, hyph)) return 2;
    snprintf(out[2], sizeof out[2], "%s.slang", hyph);
    snprintf(out[3], sizeof out[3], "%s.nb", hyph);
    return 4;
}

/* Looks for a module reference in own_dir (NULL: none), then the search paths. 1 and the path in
 * *found when it exists. */
static int find_module_file(const loader *L, const char *ref, int quoted, const char *own_dir, char *found,
                            size_t n) {
    cand_name c[MAX_CANDS];
    int nc = module_candidates(ref, quoted, c);
    for (int k = 0; k < nc; k++)
        if (c[k][0] == '/') {
            snprintf(found, n, "%s", c[k]);
            if (file_exists(L, found)) return 1;
        }
    if (own_dir)
        for (int k = 0; k < nc; k++) {
            if (c[k][0] == '/') continue;
            if (*own_dir) snprintf(found, n, "%s/%s", own_dir, c[k]);
            else snprintf(found, n, "%s", c[k]);
            if (file_exists(L, found)) return 1;
        }
    for (int d = 0; d < L->p->nsearch; d++)
        for (int k = 0; k < nc; k++) {
            if (c[k][0] == '/') continue;
            snprintf(found, n, "%s/%s", L->p->search_paths[d], c[k]);
            if (file_exists(L, found)) return 1;
        }
    return 0;
}

/* "'x.nb', 'x.slang' in: dir, dir2" for messages. */
static void describe_search(const loader *L, const char *ref, int quoted, const char *own_dir, nb_strbuf *sb) {
    cand_name c[MAX_CANDS];
    int nc = module_candidates(ref, quoted, c);
    for (int k = 0; k < nc; k++) nb_strbuf_printf(sb, "%s'%s'", k ? ", " : "", c[k]);
    nb_strbuf_append(sb, " in: ");
    int any = 0;
    if (own_dir) {
        nb_strbuf_append(sb, *own_dir ? own_dir : ".");
        any = 1;
    }
    for (int k = 0; k < L->p->nsearch; k++) {
        nb_strbuf_printf(sb, "%s%s", any ? ", " : "", L->p->search_paths[k]);
        any = 1;
    }
    if (!any) nb_strbuf_append(sb, "no directories; add a search path");
}

/* A module name as `implementing` / `module` write it, compared to another: '_' and '-' match,
 * a ".slang" / ".nb" extension and directories are ignored. */
static int same_module_name(const char *a, const char *b) {
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    a = sa ? sa + 1 : a;
    b = sb ? sb + 1 : b;
    size_t na = strlen(a), nb = strlen(b);
    if (has_ext(a, ".slang")) na -= 6;
    else if (has_ext(a, ".nb")) na -= 3;
    if (has_ext(b, ".slang")) nb -= 6;
    else if (has_ext(b, ".nb")) nb -= 3;
    if (na != nb) return 0;
    for (size_t i = 0; i < na; i++) {
        char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
        if (x != y) return 0;
    }
    return 1;
}

static int load_module(loader *L, const char *path, const char *text, nb_loc from, int *out_idx);

static void resolve_imports(loader *L, int mi, const char *own_dir) {
    nb_module_ast *m = L->mods[mi].mod;
    nb_program *p = L->p;
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d || d->kind != NB_DECL_IMPORT || !d->u.import.path || d->u.import.include) continue;
        char cand[PATH_MAX + 2048];
        int found = find_module_file(L, d->u.import.path, d->u.import.quoted, own_dir, cand, sizeof cand);
        const char *std_text = NULL; /* a standard module (lib/NAME.nb, compiled in: stdlib.h) */
        if (!found && !d->u.import.quoted && (std_text = nb_stdlib_find(d->u.import.path)) != NULL) {
            snprintf(cand, sizeof cand, "<nabla>/%s.nb", d->u.import.path);
            found = 1;
        }
        if (!found) {
            nb_strbuf sb;
            nb_strbuf_init(&sb);
            describe_search(L, d->u.import.path, d->u.import.quoted, own_dir, &sb);
            nb_strbuf std;
            nb_strbuf_init(&std);
            for (const nb_stdlib_module *sm = nb_stdlib_modules; sm->name; sm++)
                nb_strbuf_printf(&std, "%s%s", std.len ? ", " : "", sm->name);
            nb_diag_error(&p->src, d->loc, "cannot find module '%s' (looked for %s; standard modules: %s)",
                          d->u.import.path, nb_strbuf_cstr(&sb), std.len ? nb_strbuf_cstr(&std) : "none");
            nb_strbuf_free(&std);
            nb_strbuf_free(&sb);
            continue;
        }
        int ti = -1;
        if (load_module(L, cand, std_text, d->loc, &ti) == 0 && ti >= 0) {
            if (L->mods[ti].state == 1) {
                /* cycle: report the chain */
                nb_strbuf sb;
                nb_strbuf_init(&sb);
                int start = 0;
                while (start < L->depth && L->stack[start] != ti) start++;
                for (int k = start; k < L->depth; k++)
                    nb_strbuf_printf(&sb, "'%s' imports ", L->mods[L->stack[k]].mod->name);
                nb_strbuf_printf(&sb, "'%s'", L->mods[ti].mod->name);
                nb_diag_error(&p->src, d->loc, "import cycle: %s", nb_strbuf_cstr(&sb));
                nb_strbuf_free(&sb);
                continue;
            }
            nb_module_ast *t = L->mods[ti].mod;
            if (t->implementing && !t->declared) { /* Slang: only a module's primary file is imported */
                nb_diag_error(&p->src, d->loc,
                              "'%s' is a file of module '%s' (it starts with 'implementing'); import '%s' instead",
                              d->u.import.path, t->implementing, t->implementing);
                continue;
            }
            d->u.import.target = t;
        }
    }
}

/* ---- module files (`__include`) ----------------------------------------------------------- */

typedef struct incl_state {
    char **seen; /* canonical paths of the module's files */
    int nseen, cap;
    nb_decl **decls; /* the module's declarations, every file's, in order */
    int ndecls, cap_decls;
    int depth;
} incl_state;

static int incl_push_decl(loader *L, incl_state *st, nb_decl *d) {
    if (st->ndecls == st->cap_decls) {
        int cap = st->cap_decls ? st->cap_decls * 2 : 32;
        nb_decl **n = nb_arena_alloc(&L->p->arena, sizeof *n * (size_t)cap, 16);
        if (!n) return 0;
        if (st->decls) memcpy(n, st->decls, sizeof *n * (size_t)st->ndecls);
        st->decls = n;
        st->cap_decls = cap;
    }
    st->decls[st->ndecls++] = d;
    return 1;
}

static int incl_seen(incl_state *st, char *canon) { /* takes canon; 1 if it was there already */
    for (int i = 0; i < st->nseen; i++)
        if (strcmp(st->seen[i], canon) == 0) {
            heap_strfree(canon);
            return 1;
        }
    if (st->nseen == st->cap) {
        int cap = st->cap ? st->cap * 2 : 8;
        char **n = nb_alloc(sizeof *n * (size_t)cap, 16);
        if (!n) {
            heap_strfree(canon);
            return 1;
        }
        if (st->seen) memcpy(n, st->seen, sizeof *n * (size_t)st->nseen);
        nb_free(st->seen, sizeof *n * (size_t)st->cap);
        st->seen = n;
        st->cap = cap;
    }
    st->seen[st->nseen++] = canon;
    return 0;
}

/* Appends decls (of a file in directory dir) to st, replacing each `__include` by the included
 * file's declarations (each file once; cycles and self-includes are fine, as Slang). */
static void incl_splice(loader *L, nb_module_ast *m, incl_state *st, nb_decl **decls, int n, const char *dir) {
    nb_program *p = L->p;
    for (int i = 0; i < n; i++) {
        nb_decl *d = decls[i];
        if (!d || d->kind != NB_DECL_IMPORT || !d->u.import.include) {
            if (!incl_push_decl(L, st, d)) return;
            continue;
        }
        if (!d->u.import.path) continue;
        char path[PATH_MAX + 2048];
        if (!find_module_file(L, d->u.import.path, d->u.import.quoted, dir, path, sizeof path)) {
            nb_strbuf sb;
            nb_strbuf_init(&sb);
            describe_search(L, d->u.import.path, d->u.import.quoted, dir, &sb);
            nb_diag_error(&p->src, d->loc, "cannot find '%s' to __include (looked for %s)", d->u.import.path,
                          nb_strbuf_cstr(&sb));
            nb_strbuf_free(&sb);
            continue;
        }
        char *canon = canonical(path);
        if (!canon || incl_seen(st, canon)) continue;
        if (st->depth >= 64) {
            nb_diag_error(&p->src, d->loc, "__include nested too deeply (more than 64 levels)");
            continue;
        }
        int file = -1;
        if (add_file(L, path, NULL, &file) != NB_OK) {
            nb_diag_error(&p->src, d->loc, "cannot read '%s': %s", path, nb_last_error());
            continue;
        }
        nb_module_ast *sub = NULL;
        nb_parse_module(&p->src, file, &p->arena, &sub);
        if (!sub) continue;
        const char *mname = m->declared ? m->declared : m->name;
        if (sub->declared)
            nb_diag_error(&p->src, d->loc, "'%s' has a 'module' declaration: it is a module of its own (import it)",
                          path);
        else if (!sub->implementing)
            nb_diag_error(&p->src, d->loc, "a file included into module '%s' must start with 'implementing %s;' ('%s' does not)",
                          mname, mname, path);
        else if (!same_module_name(sub->implementing, mname) && !same_module_name(sub->implementing, m->name))
            nb_diag_error(&p->src, d->loc, "'%s' implements module '%s', but it is included into module '%s'", path,
                          sub->implementing, mname);
        char sub_dir[PATH_MAX];
        dir_of(path, sub_dir, sizeof sub_dir);
        st->depth++;
        incl_splice(L, m, st, sub->decls, sub->ndecls, strchr(path, '/') ? sub_dir : "");
        st->depth--;
    }
}

static void splice_includes(loader *L, nb_module_ast *m, const char *path, const char *dir) {
    int any = 0;
    for (int i = 0; i < m->ndecls && !any; i++)
        any = m->decls[i] && m->decls[i]->kind == NB_DECL_IMPORT && m->decls[i]->u.import.include;
    if (!any) return;
    incl_state st;
    memset(&st, 0, sizeof st);
    char *canon = canonical(path);
    if (canon) incl_seen(&st, canon);
    incl_splice(L, m, &st, m->decls, m->ndecls, dir);
    m->decls = st.decls;
    m->ndecls = st.ndecls;
    for (int i = 0; i < st.nseen; i++) heap_strfree(st.seen[i]);
    nb_free(st.seen, sizeof(char *) * (size_t)st.cap);
}

/* Loads (or finds) a module; returns 0 and its index, -1 on a failure already reported. */
static int load_module(loader *L, const char *path, const char *text, nb_loc from, int *out_idx) {
    nb_program *p = L->p;
    char *canon = text ? heap_strdup(path) : canonical(path);
    if (!canon) return -1;
    for (int i = 0; i < L->nmods; i++) {
        if (strcmp(L->mods[i].canon, canon) == 0) {
            heap_strfree(canon);
            *out_idx = i;
            return 0;
        }
    }
    int file = -1;
    nb_status st = add_file(L, path, text, &file);
    if (st != NB_OK) {
        if (from.file >= 0) nb_diag_error(&p->src, from, "cannot read module '%s': %s", path, nb_last_error());
        heap_strfree(canon);
        return -1;
    }
    nb_module_ast *m = NULL;
    nb_parse_module(&p->src, file, &p->arena, &m);
    if (!m) {
        heap_strfree(canon);
        return -1;
    }
    if (!m->name) m->name = p->src.files[file].name;
    m->file = file;
    {
        char mdir[PATH_MAX];
        dir_of(path, mdir, sizeof mdir);
        splice_includes(L, m, path, !text || strchr(path, '/') ? mdir : NULL);
    }
    if (L->nmods == L->cap) {
        int ncap = L->cap ? L->cap * 2 : 8;
        load_mod *n = nb_alloc(sizeof *n * (size_t)ncap, 16);
        if (!n) { heap_strfree(canon); return -1; }
        if (L->mods) memcpy(n, L->mods, sizeof *n * (size_t)L->nmods);
        nb_free(L->mods, sizeof *n * (size_t)L->cap);
        L->mods = n;
        L->cap = ncap;
    }
    int mi = L->nmods++;
    L->mods[mi].canon = canon;
    L->mods[mi].file = file;
    L->mods[mi].mod = m;
    L->mods[mi].state = 1;
    *out_idx = mi;
    if (L->depth >= 64) {
        nb_diag_error(&p->src, from, "imports nested too deeply (more than 64 levels)");
        L->mods[mi].state = 2;
        return 0;
    }
    L->stack[L->depth++] = mi;
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    int has_dir = !text || strchr(path, '/') != NULL;
    resolve_imports(L, mi, has_dir ? dir : NULL);
    L->depth--;
    L->mods[mi].state = 2;
    /* post-order: imports first */
    if (L->norder == L->cap_order) {
        int ncap = L->cap_order ? L->cap_order * 2 : 8;
        nb_module_ast **n = nb_arena_alloc(&p->arena, sizeof *n * (size_t)ncap, 16);
        if (!n) return 0;
        if (L->order) memcpy(n, L->order, sizeof *n * (size_t)L->norder);
        L->order = n;
        L->cap_order = ncap;
    }
    L->order[L->norder++] = m;
    return 0;
}

/* ---- building a generation ---------------------------------------------------------------- */

static void free_reflect(nb_program *p) {
    p->reflect = NULL; /* entries live in the arena */
}

static void drop_ir(nb_program *p) {
    if (p->ir && p->ir_free) p->ir_free(p->ir);
    p->ir = NULL;
}

static nb_status collect_constants(nb_program *p) {
    int n = 0;
    for (int i = 0; i < p->nmodules; i++)
        for (int k = 0; k < p->modules[i]->ndecls; k++) {
            nb_decl *d = p->modules[i]->decls[k];
            if (d && d->kind == NB_DECL_VAR && (d->mods & NB_MOD_EXTERN)) n++;
        }
    nb_constant *arr = n ? nb_alloc(sizeof *arr * (size_t)n, 16) : NULL;
    if (n && !arr) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    int j = 0;
    for (int i = 0; i < p->nmodules; i++)
        for (int k = 0; k < p->modules[i]->ndecls; k++) {
            nb_decl *d = p->modules[i]->decls[k];
            if (!d || d->kind != NB_DECL_VAR || !(d->mods & NB_MOD_EXTERN)) continue;
            nb_constant *c = &arr[j++];
            memset(c, 0, sizeof *c);
            c->name = d->name;
            c->decl = d;
            c->module = p->modules[i];
            for (int q = 0; q < p->nconstants; q++)
                if (p->constants[q].is_set && p->constants[q].name && d->name &&
                    strcmp(p->constants[q].name, d->name) == 0) {
                    c->is_set = 1;
                    c->value = p->constants[q].value;
                }
        }
    nb_free(p->constants, sizeof(nb_constant) * (size_t)p->nconstants);
    p->constants = arr;
    p->nconstants = n;
    return NB_OK;
}

/* Parses and checks everything into p's (fresh) src/arena/types. prev: sources to reuse. */
static nb_status build(nb_program *p, const nb_source_set *prev) {
    nb_source_set_init(&p->src);
    if (p->max_errors > 0) p->src.max_errors = p->max_errors;
    /* the preprocessor's inputs: -I directories, -D defines, the earlier generation's texts */
    for (int i = 0; i < p->nsearch; i++)
        if (nb_source_add_search_path(&p->src, p->search_paths[i]) != NB_OK) return NB_ERR_OUT_OF_MEMORY;
    p->src.defines = (const char *const *)p->defines;
    p->src.ndefines = p->ndefines;
    p->src.prev = prev;
    nb_arena_init(&p->arena, 0);
    nb_types_init(&p->types, &p->arena);
    p->modules = NULL;
    p->nmodules = 0;
    p->main = NULL;
    loader L;
    memset(&L, 0, sizeof L);
    L.p = p;
    L.prev = prev;
    nb_loc noloc = {-1, 0, 0};
    int mi = -1;
    int rc = load_module(&L, p->main_path, p->main_text, noloc, &mi);
    nb_status st = NB_OK;
    if (rc != 0 || mi < 0) {
        if (p->src.nerrors == 0) st = nb_last_error()[0] ? NB_ERR_IO : NB_ERR_INTERNAL;
        if (st == NB_ERR_IO) {
            /* keep the loader's message */
            for (int i = 0; i < L.nmods; i++) heap_strfree(L.mods[i].canon);
            nb_free(L.mods, sizeof(load_mod) * (size_t)L.cap);
            return NB_ERR_IO;
        }
    } else {
        p->modules = L.order;
        p->nmodules = L.norder;
        p->main = L.mods[mi].mod;
    }
    for (int i = 0; i < L.nmods; i++) heap_strfree(L.mods[i].canon);
    nb_free(L.mods, sizeof(load_mod) * (size_t)L.cap);
    if (p->src.nerrors == 0 && p->main) nb_check_program(p);
    if (p->src.nerrors > 0) return nb_diag_status(&p->src);
    if (!p->main) return nb_error(NB_ERR_INTERNAL, "no module was loaded");
    return collect_constants(p);
}

static void release_current(nb_program *p) {
    nb_source_set_free(&p->src);
    nb_types_free(&p->types);
    nb_arena_destroy(&p->arena);
}

static nb_status compile(const char *path, const char *text, const nb_compile_opts *opts, nb_program **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_program_compile: out is NULL");
    *out = NULL;
    if (!path) return nb_error(NB_ERR_INVALID_ARG, "nb_program_compile: path is NULL");
    nb_program *p = nb_alloc(sizeof *p, 16);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    memset(p, 0, sizeof *p);
    p->main_path = heap_strdup(path);
    p->main_text = text ? heap_strdup(text) : NULL;
    p->max_errors = opts ? opts->max_errors : 0;
    p->unchecked = opts ? opts->unchecked : 0;
    int ns = opts && opts->search_paths ? opts->nsearch : 0;
    if (ns > 0) {
        p->search_paths = nb_alloc(sizeof(char *) * (size_t)ns, 16);
        if (p->search_paths) {
            for (int i = 0; i < ns; i++) p->search_paths[i] = heap_strdup(opts->search_paths[i] ? opts->search_paths[i] : ".");
            p->nsearch = ns;
        }
    }
    int nd = opts && opts->defines && opts->ndefines > 0 ? opts->ndefines : 0, oom = 0;
    if (nd > 0) {
        p->defines = nb_alloc(sizeof(char *) * (size_t)nd, 16);
        oom = !p->defines;
        if (p->defines) {
            memset(p->defines, 0, sizeof(char *) * (size_t)nd);
            p->ndefines = nd;
            for (int i = 0; i < nd; i++) {
                p->defines[i] = heap_strdup(opts->defines[i] ? opts->defines[i] : "");
                if (!p->defines[i]) oom = 1;
            }
        }
    }
    int nc = opts && opts->conformances && opts->nconformances > 0 ? opts->nconformances : 0;
    if (nc > 0) { /* type conformance ids (check_dyn.c) */
        p->conformances = nb_alloc(sizeof(char *) * (size_t)nc, 16);
        oom |= !p->conformances;
        if (p->conformances) {
            memset(p->conformances, 0, sizeof(char *) * (size_t)nc);
            p->nconformances = nc;
            for (int i = 0; i < nc; i++) {
                p->conformances[i] = heap_strdup(opts->conformances[i] ? opts->conformances[i] : "");
                if (!p->conformances[i]) oom = 1;
            }
        }
    }
    if (!p->main_path || (text && !p->main_text) || oom) {
        nb_program_free(p);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    }
    nb_status st = build(p, NULL);
    if (st != NB_OK) {
        nb_program_free(p);
        return st;
    }
    *out = p;
    return NB_OK;
}

nb_status nb_program_compile_file(const char *path, const nb_compile_opts *opts, nb_program **out) {
    return compile(path, NULL, opts, out);
}

nb_status nb_program_compile_source(const char *name, const char *source, const nb_compile_opts *opts,
                                    nb_program **out) {
    if (!source) {
        if (out) *out = NULL;
        return nb_error(NB_ERR_INVALID_ARG, "nb_program_compile_source: source is NULL");
    }
    return compile(name ? name : "<source>", source, opts, out);
}

void nb_program_free(nb_program *p) {
    if (!p) return;
    drop_ir(p);
    free_reflect(p);
    release_current(p);
    nb_program_gen *g = p->old;
    while (g) {
        nb_program_gen *n = g->next;
        nb_source_set_free(&g->src);
        nb_types_free(&g->types);
        nb_arena_destroy(&g->arena);
        nb_free(g, sizeof *g);
        g = n;
    }
    nb_free(p->constants, sizeof(nb_constant) * (size_t)p->nconstants);
    heap_strfree(p->main_path);
    heap_strfree(p->main_text);
    for (int i = 0; i < p->nsearch; i++) heap_strfree(p->search_paths[i]);
    nb_free(p->search_paths, sizeof(char *) * (size_t)p->nsearch);
    for (int i = 0; i < p->ndefines; i++) heap_strfree(p->defines[i]);
    nb_free(p->defines, sizeof(char *) * (size_t)p->ndefines);
    for (int i = 0; i < p->nconformances; i++) heap_strfree(p->conformances[i]);
    nb_free(p->conformances, sizeof(char *) * (size_t)p->nconformances);
    nb_free(p, sizeof *p);
}

/* ---- link-time constants ------------------------------------------------------------------ */

static double convert_value(const nb_type *t, double v) {
    switch (t->scalar) {
    case NB_SC_BOOL: return v != 0 ? 1 : 0;
    case NB_SC_INT: {
        if (v != v) return 0;
        if (v >= 2147483647.0) return 2147483647.0;
        if (v <= -2147483648.0) return -2147483648.0;
        return (double)(int32_t)v;
    }
    case NB_SC_UINT:
        if (v != v || v <= 0) return 0;
        if (v >= 4294967295.0) return 4294967295.0;
        return (double)(uint32_t)v;
    case NB_SC_INT64:
    case NB_SC_UINT64:
        return (double)nb_fold_d2i(v);
    case NB_SC_HALF:
    case NB_SC_FLOAT: return nb_fold_f32(v);
    case NB_SC_DOUBLE: return v;
    }
    return v;
}

nb_status nb_program_set_constant(nb_program *p, const char *name, double value) {
    if (!p || !name) return nb_error(NB_ERR_INVALID_ARG, "nb_program_set_constant: NULL argument");
    int found = 0;
    for (int i = 0; i < p->nconstants; i++) {
        nb_constant *c = &p->constants[i];
        if (!c->name || strcmp(c->name, name) != 0) continue;
        const nb_type *t = c->decl ? c->decl->u.var.type : NULL;
        if (!t || t->kind != NB_TY_SCALAR)
            return nb_error(NB_ERR_DTYPE, "link-time constant '%s' has type '%s'; only scalar constants can be set",
                            name, t ? t->name : "?");
        found = 1;
    }
    if (!found) {
        nb_strbuf sb;
        nb_strbuf_init(&sb);
        for (int i = 0; i < p->nconstants; i++) {
            if (i) nb_strbuf_append(&sb, ", ");
            nb_strbuf_append(&sb, p->constants[i].name ? p->constants[i].name : "?");
        }
        nb_status st = nb_error(NB_ERR_NOT_FOUND, "no link-time constant '%s' (extern static const) in '%s'%s%s",
                                name, p->main_path, sb.len ? "; constants: " : "; it declares none",
                                nb_strbuf_cstr(&sb));
        nb_strbuf_free(&sb);
        return st;
    }
    /* new values; remember old ones to restore on failure */
    int n = p->nconstants;
    nb_constant *saved = nb_alloc(sizeof *saved * (size_t)n, 16);
    if (!saved) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(saved, p->constants, sizeof *saved * (size_t)n);
    int changed = 0;
    for (int i = 0; i < n; i++) {
        nb_constant *c = &p->constants[i];
        if (!c->name || strcmp(c->name, name) != 0) continue;
        double v = convert_value(c->decl->u.var.type, value);
        if (!c->decl->u.var.has_const || c->decl->u.var.const_f != v) changed = 1;
        c->is_set = 1;
        c->value = v;
    }
    if (!changed) {
        nb_free(saved, sizeof *saved * (size_t)n);
        return NB_OK;
    }
    /* rebuild into a new generation */
    nb_program_gen *g = nb_alloc(sizeof *g, 16);
    if (!g) {
        memcpy(p->constants, saved, sizeof *saved * (size_t)n);
        nb_free(saved, sizeof *saved * (size_t)n);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    }
    g->src = p->src;
    g->arena = p->arena;
    g->types = p->types;
    g->next = NULL;
    nb_module_ast **old_modules = p->modules;
    int old_n = p->nmodules;
    nb_module_ast *old_main = p->main;
    void *old_reflect = p->reflect;
    p->reflect = NULL;
    nb_status st = build(p, &g->src);
    if (st != NB_OK) {
        /* keep the failed build's memory out of the way, restore the previous tree */
        release_current(p);
        p->src = g->src;
        p->arena = g->arena;
        p->types = g->types;
        p->modules = old_modules;
        p->nmodules = old_n;
        p->main = old_main;
        p->reflect = old_reflect;
        nb_free(g, sizeof *g);
        /* build() may have replaced constants only on success, so restore the values */
        if (p->nconstants == n) memcpy(p->constants, saved, sizeof *saved * (size_t)n);
        nb_free(saved, sizeof *saved * (size_t)n);
        return st;
    }
    nb_free(saved, sizeof *saved * (size_t)n);
    drop_ir(p);
    g->next = p->old;
    p->old = g;
    return NB_OK;
}

/* ---- reflection --------------------------------------------------------------------------- */

/* Methods of a (non-generic) struct by "Struct.method" (and "A.B.Struct.method"): found when no
 * function has that name. Both the host's reflection and the call kernel's emitter look them up
 * here; a method that is not static takes `this` as its first parameter (reflect_one). */
static int find_methods(nb_program *p, const char *name, nb_decl **out, int max) {
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name || !dot[1]) return 0;
    size_t sl = (size_t)(dot - name);
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < p->nmodules; i++) {
            nb_module_ast *m = p->modules[i];
            if ((pass == 0) != (m == p->main)) continue;
            for (int k = 0; k < m->ndecls; k++) {
                nb_decl *sd = m->decls[k];
                if (!sd || sd->kind != NB_DECL_STRUCT || !sd->name || strlen(sd->name) != sl ||
                    strncmp(sd->name, name, sl) != 0 || sd->u.strct.ngparams || !sd->u.strct.type)
                    continue;
                for (int j = 0; j < sd->u.strct.nmethods; j++) {
                    nb_decl *d = sd->u.strct.methods[j];
                    if (!d || d->kind != NB_DECL_FUNC || !d->u.func.body || !d->name || strcmp(d->name, dot + 1) != 0 ||
                        d->u.func.ngparams || d->u.func.generic_of)
                        continue;
                    if (n < max) out[n] = d;
                    n++;
                }
            }
        }
    return n;
}

/* 1 when fn is a method with a `this` (not static): reflected as its first parameter. */
static int has_this(const nb_decl *fn) { return fn->u.func.parent && !(fn->mods & NB_MOD_STATIC); }

int nb_program_find_functions(nb_program *p, const char *name, nb_decl **out, int max) {
    if (!p || !name || !p->main) return 0;
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < p->nmodules; i++) {
            nb_module_ast *m = p->modules[i];
            if ((pass == 0) != (m == p->main)) continue;
            for (int k = 0; k < m->ndecls; k++) {
                nb_decl *d = m->decls[k];
                if (!d || d->kind != NB_DECL_FUNC || !d->u.func.body || !d->name || strcmp(d->name, name) != 0 ||
                    d->u.func.ngparams || d->u.func.generic_of) /* generic templates and instantiations */
                    continue;
                if (n < max) out[n] = d;
                n++;
            }
        }
    return n ? n : find_methods(p, name, out, max);
}

static nb_dtype scalar_dtype(nb_scalar_kind s) {
    switch (s) {
    case NB_SC_BOOL: return NB_BOOL;
    case NB_SC_INT: return NB_I32;
    case NB_SC_UINT: return NB_U32;
    case NB_SC_INT64:
    case NB_SC_UINT64: return NB_I64;
    case NB_SC_HALF: return NB_F16;
    case NB_SC_FLOAT: return NB_F32;
    case NB_SC_DOUBLE: return NB_F64;
    }
    return NB_F32;
}

#define NB_MAX_STRUCT_NODES 64
typedef struct leaf_builder {
    nb_program *p;
    int host; /* leaves of a host function: TorchTensor, scalars, structs of those */
    nb_fn_leaf leaves[NB_CALL_MAX_LEAVES];
    int n;
    nb_status st;
    const char *spaths[NB_MAX_STRUCT_NODES], *stypes[NB_MAX_STRUCT_NODES]; /* struct-valued nodes */
    int ns;
} leaf_builder;

/* Records a struct-valued node (a struct parameter or field, an array of structs, an element of
 * one) with its type's name, for hosts that build struct values (nb_func_struct_node). */
static void add_struct_node(leaf_builder *b, const nb_type *t, const char *path) {
    if (b->ns >= NB_MAX_STRUCT_NODES) return;
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_type_print(t, &sb);
    b->stypes[b->ns] = nb_arena_strdup(&b->p->arena, nb_strbuf_cstr(&sb));
    nb_strbuf_free(&sb);
    b->spaths[b->ns] = path;
    if (b->stypes[b->ns]) b->ns++;
}

static void add_leaves(leaf_builder *b, const nb_type *t, const char *path, int param, int dir, int nodiff,
                       const char *fname) {
    if (b->st != NB_OK) return;
    nb_arena *A = &b->p->arena;
    if (t->kind == NB_TY_STRUCT) {
        nb_decl *sd = t->decl;
        add_struct_node(b, t, path);
        for (int i = 0; i < sd->u.strct.nfields; i++) {
            nb_decl *f = sd->u.strct.fields[i];
            nb_strbuf sb;
            nb_strbuf_init(&sb);
            nb_strbuf_printf(&sb, "%s.%s", path, f->name ? f->name : "?");
            const char *sub = nb_arena_strdup(A, nb_strbuf_cstr(&sb));
            nb_strbuf_free(&sb);
            add_leaves(b, f->u.var.type, sub ? sub : path, param, dir, nodiff, fname);
        }
        return;
    }
    if (t->kind == NB_TY_DIFFPAIR) {
        const nb_type *d = nb_type_differential(&b->p->types, t->elem);
        char *sp = nb_arena_alloc(A, strlen(path) + 3, 1);
        char *sd = nb_arena_alloc(A, strlen(path) + 3, 1);
        if (!sp || !sd) { b->st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory"); return; }
        sprintf(sp, "%s.p", path);
        sprintf(sd, "%s.d", path);
        add_leaves(b, t->elem, sp, param, dir, nodiff, fname);
        if (d) add_leaves(b, d, sd, param, dir, nodiff, fname);
        return;
    }
    const nb_type *in = t;
    while (in->kind == NB_TY_ARRAY) in = in->elem;
    /* element by element: "m.layers[1].weights", arrays of views ("ws[1]": a tensor each); a host
     * function's TorchTensor<T> arrays too ("a[1]") */
    if (t->kind == NB_TY_ARRAY && (in->kind == NB_TY_STRUCT || (in->kind == NB_TY_TENSOR && !in->buffer) ||
                                   (in->kind == NB_TY_TORCH && b->host))) {
        if (in->kind == NB_TY_STRUCT) add_struct_node(b, t, path);
        for (int i = 0; i < t->length && b->st == NB_OK; i++) {
            nb_strbuf sb;
            nb_strbuf_init(&sb);
            nb_strbuf_printf(&sb, "%s[%d]", path, i);
            const char *sub = nb_arena_strdup(A, nb_strbuf_cstr(&sb));
            nb_strbuf_free(&sb);
            if (!sub) { b->st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory"); return; }
            add_leaves(b, t->elem, sub, param, dir, nodiff, fname);
        }
        return;
    }
    if (in->kind == NB_TY_PTR) { /* (check_ptr.c) */
        const nb_type *el = t->kind == NB_TY_PTR ? t->elem : NULL;
        if (!el || (el->kind != NB_TY_SCALAR && el->kind != NB_TY_VECTOR && el->kind != NB_TY_MATRIX)) {
            b->st = nb_error(NB_ERR_UNSUPPORTED, "'%s': parameter '%s' has type '%s' (from the host, a pointer "
                             "parameter to a scalar, vector or matrix binds a whole contiguous array; other "
                             "pointers cannot be bound)", fname, path, t->name);
            return;
        }
        if (b->n >= NB_CALL_MAX_LEAVES) {
            b->st = nb_error(NB_ERR_UNSUPPORTED, "'%s' has more than %d parameter leaves", fname, NB_CALL_MAX_LEAVES);
            return;
        }
        nb_fn_leaf *l = &b->leaves[b->n++]; /* a whole array, like Tensor<T, 1> */
        memset(l, 0, sizeof *l);
        l->path = path;
        l->param = param;
        l->dir = dir;
        l->kind = NB_LEAF_TENSOR;
        l->pointer = 1;
        l->scalar = scalar_dtype(el->scalar);
        int r = nb_type_value_shape(el, l->value_shape);
        l->value_rank = r < 0 ? 0 : r;
        l->tensor_rank = 1;
        return;
    }
    if (in->kind == NB_TY_STRUCT || in->kind == NB_TY_DIFFPAIR) {
        b->st = nb_error(NB_ERR_UNSUPPORTED, "'%s': parameter '%s' has type '%s' (arrays of structs cannot be "
                         "bound yet)", fname, path, t->name);
        return;
    }
    if (b->n >= NB_CALL_MAX_LEAVES) {
        b->st = nb_error(NB_ERR_UNSUPPORTED, "'%s' has more than %d parameter leaves", fname, NB_CALL_MAX_LEAVES);
        return;
    }
    nb_fn_leaf *l = &b->leaves[b->n++];
    memset(l, 0, sizeof *l);
    l->path = path;
    l->param = param;
    l->dir = dir;
    if (t->kind == NB_TY_TORCH) { /* host code: a whole tensor of any rank (check_host.c) */
        l->kind = NB_LEAF_TENSOR;
        l->torch = 1;
        l->scalar = scalar_dtype(t->scalar);
        /* TorchTensor<float3>: value_shape [3], the tensor's last dimension (slang-torch's layout) */
        int r = nb_type_value_shape(t->elem, l->value_shape);
        l->value_rank = r < 0 ? 0 : r;
        return;
    }
    if (in->kind == NB_TY_TORCH ||
        (b->host && t->kind != NB_TY_SCALAR && t->kind != NB_TY_VECTOR && t->kind != NB_TY_MATRIX && t->kind != NB_TY_ARRAY)) {
        b->st = nb_error(NB_ERR_UNSUPPORTED, "'%s': parameter '%s' has type '%s' (host functions take and return "
                         "TorchTensor<T>, scalars, vectors, matrices and arrays and structs of those)", fname, path, t->name);
        return;
    }
    if (t->kind == NB_TY_TENSOR) {
        l->kind = NB_LEAF_TENSOR;
        l->scalar = scalar_dtype(t->elem->scalar);
        int r = nb_type_value_shape(t->elem, l->value_shape);
        l->value_rank = r < 0 ? 0 : r;
        l->tensor_rank = t->rank;
        l->diff_tensor = t->diff_tensor;
        l->differentiable = t->diff_tensor && !nodiff;
        return;
    }
    l->kind = NB_LEAF_VALUE;
    l->scalar = scalar_dtype(in->scalar);
    l->is_vector = t->kind == NB_TY_VECTOR;
    int r = nb_type_value_shape(t, l->value_shape);
    l->value_rank = r < 0 ? 0 : r;
    l->differentiable = !nodiff && nb_type_is_float_based(in);
}

/* A parameter's default value folded on the host (fold_value.h) into each of its leaves, in the
 * leaf's dtype; leaves of struct parameters, and defaults that are not host constants, get
 * has_default without a value. */
static void reflect_default(nb_program *p, const nb_expr *def, nb_fn_leaf *leaves, int n) {
    for (int j = 0; j < n; j++) leaves[j].has_default = 1;
    if (n != 1 || leaves[0].kind != NB_LEAF_VALUE || !def->type || def->type->kind == NB_TY_STRUCT) return;
    double v[256];
    int k = nb_fold_components(def, v, 256);
    long long want = 1;
    for (int d = 0; d < leaves[0].value_rank; d++) want *= leaves[0].value_shape[d];
    if (k < 0 || k != want) return;
    void *bytes = nb_arena_alloc(&p->arena, (size_t)k * nb_dtype_size(leaves[0].scalar) + 1, 16);
    if (!bytes) return;
    nb_convert(bytes, leaves[0].scalar, v, NB_F64, (size_t)k);
    leaves[0].default_value = bytes;
}

/* The fields of a struct result as leaves "_result.pos" (none when a field cannot be bound). */
static void reflect_struct_result(nb_program *p, const nb_type *r, const char *fname, nb_fn_info *info) {
    if (r->kind != NB_TY_STRUCT && !(r->kind == NB_TY_ARRAY && info->is_host)) return;
    leaf_builder *rb = nb_alloc(sizeof *rb, 16);
    if (!rb) return;
    memset(rb, 0, sizeof *rb);
    rb->p = p;
    rb->host = info->is_host;
    add_leaves(rb, r, "_result", -1, 1, 0, fname);
    nb_fn_leaf *res = rb->st == NB_OK && rb->n ? nb_arena_zalloc(&p->arena, sizeof(nb_fn_leaf) * (size_t)rb->n, 16) : NULL;
    if (res) {
        memcpy(res, rb->leaves, sizeof(nb_fn_leaf) * (size_t)rb->n);
        info->results = res;
        info->nresults = rb->n;
    }
    nb_free(rb, sizeof *rb);
}

static const char *sig_string(nb_program *p, nb_decl *fn) {
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    const nb_type *r = fn->u.func.ret && fn->u.func.ret->resolved ? fn->u.func.ret->resolved : p->types.t_void;
    const nb_decl *st = fn->u.func.parent;
    if (st) nb_strbuf_printf(&sb, "%s%s %s.%s(", fn->mods & NB_MOD_STATIC ? "static " : "", r->name, st->name, fn->name);
    else nb_strbuf_printf(&sb, "%s %s(", r->name, fn->name);
    if (has_this(fn))
        nb_strbuf_printf(&sb, "%s%s this%s", fn->u.func.is_mutating ? "inout " : "", st->name, fn->u.func.nparams ? ", " : "");
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *q = fn->u.func.params[i];
        if (i) nb_strbuf_append(&sb, ", ");
        if (q->mods & NB_MOD_NO_DIFF) nb_strbuf_append(&sb, "no_diff ");
        if (q->u.param.dir == NB_DIR_OUT) nb_strbuf_append(&sb, "out ");
        if (q->u.param.dir == NB_DIR_INOUT) nb_strbuf_append(&sb, "inout ");
        nb_strbuf_printf(&sb, "%s %s", q->u.param.type ? q->u.param.type->name : "?", q->name ? q->name : "");
    }
    nb_strbuf_append(&sb, ")");
    const char *s = nb_arena_strdup(&p->arena, nb_strbuf_cstr(&sb));
    nb_strbuf_free(&sb);
    return s ? s : "?";
}

static nb_status reflect_one(nb_program *p, nb_decl *fn, int overload, nb_fn_info *info) {
    nb_arena *A = &p->arena;
    memset(info, 0, sizeof *info);
    int self = has_this(fn); /* a method's `this`: parameter 0 (inout when [mutating]) */
    int np = fn->u.func.nparams + self;
    leaf_builder *b = nb_alloc(sizeof *b, 16);
    if (!b) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    memset(b, 0, sizeof *b);
    b->p = p;
    b->host = info->is_host = fn->u.func.is_host;
    if (fn->u.func.is_host && !nb_attr_find(&fn->attrs, "TorchEntryPoint")) {
        nb_free(b, sizeof *b);
        return nb_error(NB_ERR_UNSUPPORTED, "'%s' is host code (it takes or returns a TorchTensor) for [TorchEntryPoint] "
                        "functions to call; mark it [TorchEntryPoint] to call it from the host", fn->name);
    }
    const char **names = nb_arena_zalloc(A, sizeof(char *) * (size_t)(np + 1), 16);
    int *dirs = nb_arena_zalloc(A, sizeof(int) * (size_t)(np + 1), 16);
    int *first = nb_arena_zalloc(A, sizeof(int) * (size_t)(np + 1), 16);
    if (!names || !dirs || !first) {
        nb_free(b, sizeof *b);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    }
    int *has_def = nb_arena_zalloc(A, sizeof(int) * (size_t)(np + 1), 16);
    if (!has_def) {
        nb_free(b, sizeof *b);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (self) {
        names[0] = "this";
        dirs[0] = fn->u.func.is_mutating ? (int)NB_DIR_INOUT : (int)NB_DIR_IN;
        first[0] = 0;
        add_leaves(b, fn->u.func.parent->u.strct.type, "this", 0, dirs[0], 0, fn->name);
    }
    for (int i = self; i < np; i++) {
        nb_decl *q = fn->u.func.params[i - self];
        names[i] = q->name ? q->name : "";
        dirs[i] = (int)q->u.param.dir;
        first[i] = b->n;
        const char *path = *names[i] ? names[i] : "_arg";
        add_leaves(b, q->u.param.type, path, i, dirs[i], (q->mods & NB_MOD_NO_DIFF) != 0, fn->name);
        if (q->u.param.default_value && b->st == NB_OK) {
            has_def[i] = 1;
            reflect_default(p, q->u.param.default_value, b->leaves + first[i], b->n - first[i]);
        }
    }
    first[np] = b->n;
    nb_status st = b->st;
    if (st == NB_OK && b->ns) {
        const char **sp = nb_arena_zalloc(A, sizeof(char *) * (size_t)b->ns, 16);
        const char **stn = nb_arena_zalloc(A, sizeof(char *) * (size_t)b->ns, 16);
        if (!sp || !stn) st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        else {
            memcpy(sp, b->spaths, sizeof(char *) * (size_t)b->ns);
            memcpy(stn, b->stypes, sizeof(char *) * (size_t)b->ns);
            info->struct_paths = sp;
            info->struct_types = stn;
            info->nstructs = b->ns;
        }
    }
    if (st == NB_OK) {
        nb_fn_leaf *leaves = nb_arena_zalloc(A, sizeof(nb_fn_leaf) * (size_t)(b->n ? b->n : 1), 16);
        if (!leaves) st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        else {
            memcpy(leaves, b->leaves, sizeof(nb_fn_leaf) * (size_t)b->n);
            info->leaves = leaves;
            info->nleaves = b->n;
        }
    }
    const nb_type *r = fn->u.func.ret && fn->u.func.ret->resolved ? fn->u.func.ret->resolved : p->types.t_void;
    if (st == NB_OK && r->kind != NB_TY_VOID) {
        info->has_result = 1;
        nb_fn_leaf *l = &info->result;
        l->path = "_result";
        l->param = -1;
        l->dir = 1;
        l->kind = r->kind == NB_TY_TORCH ? NB_LEAF_TENSOR : NB_LEAF_VALUE;
        l->torch = r->kind == NB_TY_TORCH;
        const nb_type *in = r;
        while (in->kind == NB_TY_ARRAY) in = in->elem;
        l->scalar = scalar_dtype(in->scalar);
        int rank = l->torch ? 0 : nb_type_value_shape(r, l->value_shape);
        if (l->torch) { /* TorchTensor<float3>: value_shape [3] (add_leaves) */
            int vr = nb_type_value_shape(r->elem, l->value_shape);
            l->value_rank = vr < 0 ? 0 : vr;
        } else l->value_rank = rank; /* -1 for struct results: their fields are `results` */
        l->differentiable = nb_type_is_float_based(in);
        /* a host function's array of TorchTensors (or of structs) is returned element by element,
         * like a struct ("_result[1]") */
        if (info->is_host && r->kind == NB_TY_ARRAY && (in->kind == NB_TY_TORCH || in->kind == NB_TY_STRUCT))
            rank = -1, l->value_rank = -1;
        if (rank >= 0) {
            info->nresults = 1;
            info->results = l;
        } else {
            reflect_struct_result(p, r, fn->name, info);
        }
    }
    nb_free(b, sizeof *b);
    if (st != NB_OK) return st;
    info->name = fn->name;
    if (fn->u.func.parent) { /* "Particle.update": the name it is found and called by */
        nb_strbuf nm;
        nb_strbuf_init(&nm);
        nb_strbuf_printf(&nm, "%s.%s", fn->u.func.parent->name, fn->name);
        info->name = nb_arena_strdup(A, nb_strbuf_cstr(&nm));
        nb_strbuf_free(&nm);
        if (!info->name) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    }
    info->overload = overload;
    info->nparams = np;
    info->param_names = names;
    info->param_dirs = dirs;
    info->param_first_leaf = first;
    info->param_has_default = has_def;
    info->is_kernel = fn->u.func.is_kernel;
    memcpy(info->numthreads, fn->u.func.numthreads, sizeof info->numthreads);
    info->differentiable = fn->u.func.differentiable;
    info->signature = sig_string(p, fn);
    return NB_OK;
}

int nb_program_function_names(nb_program *p, const char **out, int max) {
    int n = 0;
    nb_module_ast *m = p ? p->main : NULL;
    for (int k = 0; m && k < m->ndecls; k++) {
        nb_decl *d = m->decls[k];
        if (!d || d->kind != NB_DECL_FUNC || !d->u.func.body || !d->name || d->u.func.ngparams || d->u.func.generic_of)
            continue;
        int dup = 0;
        for (int j = 0; j < k && !dup; j++)
            dup = m->decls[j] && m->decls[j]->kind == NB_DECL_FUNC && m->decls[j]->name && !strcmp(m->decls[j]->name, d->name);
        if (dup) continue;
        if (n < max && out) out[n] = d->name;
        n++;
    }
    return n;
}

nb_status nb_program_functions(nb_program *p, const char *name, const nb_fn_info **infos, int *count) {
    if (!p || !name || !infos || !count)
        return nb_error(NB_ERR_INVALID_ARG, "nb_program_functions: NULL argument");
    *infos = NULL;
    *count = 0;
    for (reflect_entry *e = p->reflect; e; e = e->next)
        if (strcmp(e->name, name) == 0) {
            *infos = e->infos;
            *count = e->count;
            return NB_OK;
        }
    int n = nb_program_find_functions(p, name, NULL, 0);
    char ad_base[256];
    if (n == 0 && nb_ad_wrapper_name(name, ad_base, sizeof ad_base)) /* f__fwds / f__bwds (lang/ad.h) */
        return nb_ad_reflect_wrappers(p, name, infos, count);
    if (n == 0) {
        nb_strbuf sb;
        nb_strbuf_init(&sb);
        nb_module_ast *m = p->main;
        for (int k = 0; m && k < m->ndecls; k++) {
            nb_decl *d = m->decls[k];
            if (!d || d->kind != NB_DECL_FUNC || !d->u.func.body || !d->name || d->u.func.ngparams ||
                d->u.func.generic_of)
                continue;
            int dup = 0;
            for (int j = 0; j < k; j++)
                if (m->decls[j] && m->decls[j]->kind == NB_DECL_FUNC && m->decls[j]->name &&
                    strcmp(m->decls[j]->name, d->name) == 0)
                    dup = 1;
            if (dup) continue;
            if (sb.len) nb_strbuf_append(&sb, ", ");
            nb_strbuf_append(&sb, d->name);
        }
        nb_status st = nb_error(NB_ERR_NOT_FOUND, "no function '%s' in module '%s'; callable functions: %s", name,
                                m && m->name ? m->name : "?", sb.len ? nb_strbuf_cstr(&sb) : "(none)");
        nb_strbuf_free(&sb);
        return st;
    }
    nb_decl **fns = nb_arena_alloc(&p->arena, sizeof(nb_decl *) * (size_t)n, 16);
    nb_fn_info *arr = nb_arena_zalloc(&p->arena, sizeof(nb_fn_info) * (size_t)n, 16);
    reflect_entry *e = nb_arena_zalloc(&p->arena, sizeof *e, 16);
    if (!fns || !arr || !e) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    nb_program_find_functions(p, name, fns, n);
    for (int i = 0; i < n; i++) {
        nb_status st = reflect_one(p, fns[i], i, &arr[i]);
        if (st != NB_OK) return st;
    }
    e->name = nb_arena_strdup(&p->arena, name);
    if (!e->name) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    e->infos = arr;
    e->count = n;
    e->next = p->reflect;
    p->reflect = e;
    *infos = arr;
    *count = n;
    return NB_OK;
}

char *nb_program_warnings(const nb_program *p) {
    if (!p || p->src.ndiags == 0) return NULL;
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_diag_render(&p->src, &sb);
    if (!nb_strbuf_ok(&sb) || sb.len == 0) {
        nb_strbuf_free(&sb);
        return NULL;
    }
    return nb_strbuf_take(&sb, NULL);
}

/* ---- struct types by name (SlangPy's module.MyStruct as a dtype) ------------------------- */

static nb_decl *find_struct(nb_program *p, const char *name) {
    for (int pass = 0; pass < 2; pass++) /* the main module first, then the imports */
        for (int mi = p->nmodules - 1; mi >= 0; mi--) {
            nb_module_ast *m = p->modules[mi];
            if ((pass == 0) != (m == p->main)) continue;
            for (int k = 0; k < m->ndecls; k++) {
                nb_decl *d = m->decls[k];
                if (d && d->kind == NB_DECL_STRUCT && d->name && d->u.strct.type && !strcmp(d->name, name))
                    return d;
            }
        }
    return NULL;
}

nb_status nb_program_type_leaves(nb_program *p, const char *name, const nb_fn_leaf **leaves, int *count) {
    if (!p || !name || !leaves || !count) return nb_error(NB_ERR_INVALID_ARG, "nb_program_type_leaves: NULL argument");
    *leaves = NULL;
    *count = 0;
    nb_decl *d = find_struct(p, name);
    if (!d) {
        nb_strbuf sb;
        nb_strbuf_init(&sb);
        for (int mi = 0; mi < p->nmodules; mi++)
            for (int k = 0; k < p->modules[mi]->ndecls; k++) {
                nb_decl *e = p->modules[mi]->decls[k];
                if (!e || e->kind != NB_DECL_STRUCT || !e->name || !e->u.strct.type) continue;
                if (sb.len) nb_strbuf_append(&sb, ", ");
                nb_strbuf_append(&sb, e->name);
            }
        nb_status st = nb_error(NB_ERR_NOT_FOUND, "no struct type '%s' in the module (structs: %s)", name,
                                sb.len ? nb_strbuf_cstr(&sb) : "none");
        nb_strbuf_free(&sb);
        return st;
    }
    leaf_builder *b = nb_alloc(sizeof *b, 16);
    if (!b) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    memset(b, 0, sizeof *b);
    b->p = p;
    const nb_decl *sd = d;
    for (int i = 0; i < sd->u.strct.nfields && b->st == NB_OK; i++) {
        nb_decl *f = sd->u.strct.fields[i];
        add_leaves(b, f->u.var.type, f->name ? f->name : "?", 0, 0, 0, name);
    }
    nb_status st = b->st;
    if (st == NB_OK) {
        nb_fn_leaf *out = nb_arena_zalloc(&p->arena, sizeof(nb_fn_leaf) * (size_t)(b->n ? b->n : 1), 16);
        if (!out) st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        else {
            memcpy(out, b->leaves, sizeof(nb_fn_leaf) * (size_t)b->n);
            *leaves = out;
            *count = b->n;
        }
    }
    nb_free(b, sizeof *b);
    return st;
}
