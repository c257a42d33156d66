/* Source files, line tables and diagnostics (see source.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nabla/file.h"
#include "lang/source.h"
#include "nabla/alloc.h"

#define NB_DEFAULT_MAX_ERRORS 50

static char *src_strndup(const char *s, size_t n) {
    char *p = nb_alloc(n + 1, 16);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static void src_strfree(char *s) {
    if (s) nb_free(s, strlen(s) + 1);
}

void nb_source_set_init(nb_source_set *s) {
    memset(s, 0, sizeof *s);
    s->max_errors = NB_DEFAULT_MAX_ERRORS;
}

void nb_source_set_free(nb_source_set *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) {
        nb_source_file *f = &s->files[i];
        src_strfree(f->path);
        src_strfree(f->name);
        nb_free(f->text, f->len + 1);
        nb_free(f->line_starts, sizeof(uint32_t) * (size_t)f->nlines);
    }
    nb_free(s->files, sizeof(nb_source_file) * (size_t)s->cap_files);
    for (int i = 0; i < s->ndiags; i++) src_strfree(s->diags[i].msg);
    nb_free(s->diags, sizeof(nb_diag) * (size_t)s->cap_diags);
    for (int i = 0; i < s->nsearch; i++) src_strfree((char *)s->search_paths[i]);
    nb_free((void *)s->search_paths, sizeof(char *) * (size_t)s->nsearch);
    nb_free(s->sites, sizeof(nb_macro_site) * (size_t)s->cap_sites);
    int max_errors = s->max_errors;
    nb_source_set_init(s);
    s->max_errors = max_errors;
}

/* Module name: the file name without directories and without its last extension. */
static char *module_name(const char *path) {
    const char *base = path;
    for (const char *c = path; *c; c++)
        if (*c == '/' || *c == '\\') base = c + 1;
    size_t n = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base) n = (size_t)(dot - base);
    return src_strndup(base, n);
}

int nb_source_add(nb_source_set *s, const char *path, const char *text, size_t len) {
    if (!s || (!text && len)) return -1;
    if (!path) path = "<input>";
    if (s->nfiles == s->cap_files) {
        int cap = s->cap_files ? s->cap_files * 2 : 4;
        nb_source_file *nf = nb_alloc(sizeof(nb_source_file) * (size_t)cap, 16);
        if (!nf) return -1;
        if (s->files) memcpy(nf, s->files, sizeof(nb_source_file) * (size_t)s->nfiles);
        nb_free(s->files, sizeof(nb_source_file) * (size_t)s->cap_files);
        s->files = nf;
        s->cap_files = cap;
    }
    if (len > 0xFFFFFFF0u) return -1; /* line table offsets are 32-bit */
    nb_source_file f;
    memset(&f, 0, sizeof f);
    f.len = len;
    f.included_from.file = -1;
    f.path = src_strndup(path, strlen(path));
    f.name = module_name(path);
    f.text = nb_alloc(len + 1, 16);
    int nlines = 1;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n') nlines++;
    f.line_starts = nb_alloc(sizeof(uint32_t) * (size_t)nlines, 16);
    if (!f.path || !f.name || !f.text || !f.line_starts) {
        src_strfree(f.path);
        src_strfree(f.name);
        nb_free(f.text, len + 1);
        nb_free(f.line_starts, sizeof(uint32_t) * (size_t)nlines);
        return -1;
    }
    if (len) memcpy(f.text, text, len);
    f.text[len] = '\0';
    f.nlines = nlines;
    int l = 0;
    f.line_starts[l++] = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n') f.line_starts[l++] = (uint32_t)(i + 1);
    s->files[s->nfiles] = f;
    return s->nfiles++;
}

nb_status nb_source_load(nb_source_set *s, const char *path, int *out_index) {
    if (!s || !path) return nb_error(NB_ERR_INVALID_ARG, "nb_source_load: NULL argument");
    /* Regular files only: a FIFO in place of a source file is refused without blocking. */
    char *text;
    size_t len;
    nb_status st = nb_file_read_all(path, "source file", 0xFFFFFFF0u, &text, &len);
    if (st == NB_ERR_NOT_FOUND) return nb_error(NB_ERR_IO, "cannot open '%s': %s", path, strerror(ENOENT));
    if (st) return st; /* a FIFO, a directory, too large: the message names the cause */
    int idx = nb_source_add(s, path, text, len);
    nb_free(text, len + 1);
    if (idx < 0) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory adding '%s'", path);
    if (out_index) *out_index = idx;
    return NB_OK;
}

nb_status nb_source_add_search_path(nb_source_set *s, const char *dir) {
    if (!s || !dir) return nb_error(NB_ERR_INVALID_ARG, "nb_source_add_search_path: NULL argument");
    const char **np = nb_alloc(sizeof(char *) * (size_t)(s->nsearch + 1), 16);
    char *copy = src_strndup(dir, strlen(dir));
    if (!np || !copy) {
        nb_free((void *)np, sizeof(char *) * (size_t)(s->nsearch + 1));
        src_strfree(copy);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory adding search path '%s'", dir);
    }
    if (s->nsearch) memcpy((void *)np, (const void *)s->search_paths, sizeof(char *) * (size_t)s->nsearch);
    nb_free((void *)s->search_paths, sizeof(char *) * (size_t)s->nsearch);
    np[s->nsearch++] = copy;
    s->search_paths = np;
    return NB_OK;
}

void nb_source_add_macro_site(nb_source_set *s, nb_loc at, nb_loc def, const char *name, int nlen) {
    if (!s) return;
    if (s->nsites > 0) { /* the same macro at the same place (a loop of uses in one expansion) */
        const nb_macro_site *l = &s->sites[s->nsites - 1];
        if (l->at.file == at.file && l->at.line == at.line && l->at.col == at.col && l->def.file == def.file &&
            l->def.line == def.line && l->def.col == def.col)
            return;
    }
    if (s->nsites == s->cap_sites) {
        int cap = s->cap_sites ? s->cap_sites * 2 : 16;
        nb_macro_site *n = nb_alloc(sizeof *n * (size_t)cap, 16);
        if (!n) return;
        if (s->sites) memcpy(n, s->sites, sizeof *n * (size_t)s->nsites);
        nb_free(s->sites, sizeof *n * (size_t)s->cap_sites);
        s->sites = n;
        s->cap_sites = cap;
    }
    nb_macro_site *m = &s->sites[s->nsites++];
    m->at = at;
    m->def = def;
    m->name = name;
    m->nlen = nlen;
}

static int errors_capped(const nb_source_set *s) {
    return s->max_errors > 0 && s->nerrors > s->max_errors;
}

nb_status nb_diag_add(nb_source_set *s, nb_diag_level level, nb_loc loc, const char *fmt, ...) {
    nb_status ret = level == NB_DIAG_ERROR ? NB_ERR_COMPILE : NB_OK;
    if (!s) return ret;
    if (level == NB_DIAG_ERROR) s->nerrors++;
    if (errors_capped(s)) return ret; /* past the cap: counted, not kept */
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    nb_strbuf_vprintf(&sb, fmt, ap);
    va_end(ap);
    if (!nb_strbuf_ok(&sb)) {
        nb_strbuf_free(&sb);
        return ret;
    }
    if (s->ndiags == s->cap_diags) {
        int cap = s->cap_diags ? s->cap_diags * 2 : 16;
        nb_diag *nd = nb_alloc(sizeof(nb_diag) * (size_t)cap, 16);
        if (!nd) {
            nb_strbuf_free(&sb);
            return ret;
        }
        if (s->diags) memcpy(nd, s->diags, sizeof(nb_diag) * (size_t)s->ndiags);
        nb_free(s->diags, sizeof(nb_diag) * (size_t)s->cap_diags);
        s->diags = nd;
        s->cap_diags = cap;
    }
    /* Take the builder's string and re-own it with its exact length, so freeing is simple. */
    char *msg = src_strndup(nb_strbuf_cstr(&sb), sb.len);
    nb_strbuf_free(&sb);
    if (!msg) return ret;
    nb_diag *d = &s->diags[s->ndiags++];
    d->level = level;
    d->loc = loc;
    d->msg = msg;
    if (level == NB_DIAG_NOTE || loc.file < 0 || loc.file >= s->nfiles) return ret;
    /* A diagnostic on tokens a macro produced: say which macro(s), at their definitions. */
    for (int i = 0; i < s->nsites; i++) {
        const nb_macro_site *m = &s->sites[i];
        if (m->at.file == loc.file && m->at.line == loc.line && m->at.col == loc.col)
            nb_diag_add(s, NB_DIAG_NOTE, m->def, "in expansion of macro '%.*s'", m->nlen, m->name);
    }
    /* In an #included file: the chain of #includes that read it. */
    nb_loc inc = s->files[loc.file].included_from;
    for (int depth = 0; inc.file >= 0 && inc.file < s->nfiles && depth < 70; depth++) {
        nb_diag_add(s, NB_DIAG_NOTE, inc, "in the file included from here");
        inc = s->files[inc.file].included_from;
    }
    return ret;
}

const char *nb_source_line(const nb_source_set *s, int file, int line, size_t *len) {
    if (len) *len = 0;
    if (!s || file < 0 || file >= s->nfiles) return NULL;
    const nb_source_file *f = &s->files[file];
    if (line < 1 || line > f->nlines) return NULL;
    size_t start = f->line_starts[line - 1];
    size_t end = line < f->nlines ? f->line_starts[line] - 1 : f->len; /* at the '\n' or EOF */
    if (end > start && f->text[end - 1] == '\r') end--;
    if (len) *len = end - start;
    return f->text + start;
}

long nb_source_offset(const nb_source_set *s, nb_loc loc) {
    size_t n;
    const char *line = nb_source_line(s, loc.file, loc.line, &n);
    if (!line || loc.col < 1 || (size_t)(loc.col - 1) > n) return -1;
    return (long)(line - s->files[loc.file].text) + loc.col - 1;
}

static const char *level_name(nb_diag_level l) {
    switch (l) {
    case NB_DIAG_NOTE: return "note";
    case NB_DIAG_WARNING: return "warning";
    case NB_DIAG_ERROR: return "error";
    }
    return "error";
}

void nb_diag_render(const nb_source_set *s, nb_strbuf *out) {
    if (!s || !out) return;
    for (int i = 0; i < s->ndiags; i++) {
        const nb_diag *d = &s->diags[i];
        int has_file = d->loc.file >= 0 && d->loc.file < s->nfiles;
        if (has_file)
            nb_strbuf_printf(out, "%s:%d:%d: ", s->files[d->loc.file].path, d->loc.line, d->loc.col);
        nb_strbuf_printf(out, "%s: %s\n", level_name(d->level), d->msg);
        size_t n;
        const char *line = has_file ? nb_source_line(s, d->loc.file, d->loc.line, &n) : NULL;
        if (!line) continue;
        /* The source line, with control characters (NUL included) shown as spaces. */
        for (size_t k = 0; k < n; k++) {
            unsigned char c = (unsigned char)line[k];
            nb_strbuf_append_char(out, (c < 0x20 && c != '\t') || c == 0x7f ? ' ' : (char)c);
        }
        nb_strbuf_append_char(out, '\n');
        /* The caret under column col (bytes), keeping tabs so it lines up. */
        size_t col = d->loc.col < 1 ? 1 : (size_t)d->loc.col;
        if (col > n + 1) col = n + 1;
        for (size_t k = 0; k + 1 < col; k++) nb_strbuf_append_char(out, line[k] == '\t' ? '\t' : ' ');
        nb_strbuf_append(out, "^\n");
    }
    if (errors_capped(s)) {
        int more = s->nerrors - s->max_errors;
        nb_strbuf_printf(out, "note: %d more error%s not shown (limit %d)\n", more, more == 1 ? "" : "s",
                         s->max_errors);
    }
}

nb_status nb_diag_status(const nb_source_set *s) {
    if (!s || s->nerrors == 0) return NB_OK;
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_diag_render(s, &sb);
    size_t len = sb.len;
    const char *text = nb_strbuf_cstr(&sb);
    while (len > 0 && text[len - 1] == '\n') len--;
    nb_status st;
    if (len == 0)
        st = nb_error(NB_ERR_COMPILE, "%d error%s (out of memory rendering diagnostics)", s->nerrors,
                      s->nerrors == 1 ? "" : "s");
    else
        st = nb_error(NB_ERR_COMPILE, "%.*s", (int)len, text);
    nb_strbuf_free(&sb);
    return st;
}
