/* The loader of hand-written CUDA kernel files (see cuda_files.h): include resolution over the
 * embedded table, defines as -D options, NVRTC logs rewritten to name files, and the load through
 * the JIT's caches. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"

static const nb_cuda_file *nb_table_find(const nb_cuda_file *table, const char *path) {
    for (const nb_cuda_file *f = table; f->path; f++)
        if (!strcmp(f->path, path)) return f;
    return NULL;
}

const char *nb_cuda_file_text(const char *path) {
    const nb_cuda_file *f = path ? nb_table_find(nb_cuda_files, path) : NULL;
    return f ? f->text : NULL;
}

/* Joins dir and name into out, folding "." and ".." components. 0 if it does not fit or climbs
 * above the root. */
static int nb_path_join(char *out, size_t cap, const char *dir, size_t dirlen, const char *name) {
    char tmp[512];
    int n = snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)dirlen, dir, dirlen ? "/" : "", name);
    if (n < 0 || (size_t)n >= sizeof tmp) return 0;
    size_t len = 0;
    const char *p = tmp;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == 0 || (l == 1 && p[0] == '.')) {
            /* empty or "." component: skip */
        } else if (l == 2 && p[0] == '.' && p[1] == '.') {
            if (len == 0) return 0;
            while (len > 0 && out[len - 1] != '/') len--;
            if (len > 0) len--; /* the slash */
        } else {
            if (len + (len ? 1 : 0) + l + 1 > cap) return 0;
            if (len) out[len++] = '/';
            memcpy(out + len, p, l);
            len += l;
        }
        if (!e) break;
        p = e + 1;
    }
    if (len == 0 || len >= cap) return 0;
    out[len] = '\0';
    return 1;
}

/* The file `name` names when `includer` writes #include "name": beside the includer first, then
 * under src/. NULL if neither is embedded. */
static const nb_cuda_file *nb_resolve(const nb_cuda_file *table, const char *includer, const char *name) {
    char cand[512];
    const char *slash = strrchr(includer, '/');
    size_t dirlen = slash ? (size_t)(slash - includer) : 0;
    const nb_cuda_file *f = NULL;
    if (nb_path_join(cand, sizeof cand, includer, dirlen, name)) f = nb_table_find(table, cand);
    if (!f && nb_path_join(cand, sizeof cand, "src", 3, name)) f = nb_table_find(table, cand);
    return f;
}

/* Adds every file that `file` includes (and, through the work list, what those include). */
static nb_status nb_scan_includes(const nb_cuda_file *table, const nb_cuda_file *file,
                                  nb_cuda_program *p) {
    int line = 1;
    for (const char *s = file->text; *s; line++) {
        const char *eol = strchr(s, '\n');
        const char *end = eol ? eol : s + strlen(s);
        const char *c = s;
        while (c < end && (*c == ' ' || *c == '\t')) c++;
        if (c < end && *c == '#') {
            c++;
            while (c < end && (*c == ' ' || *c == '\t')) c++;
            if ((size_t)(end - c) > 7 && !strncmp(c, "include", 7)) {
                c += 7;
                while (c < end && (*c == ' ' || *c == '\t')) c++;
                const char *q = c < end && *c == '"' ? memchr(c + 1, '"', (size_t)(end - c - 1)) : NULL;
                if (q) {
                    size_t n = (size_t)(q - c - 1);
                    char name[128];
                    if (n == 0 || n >= sizeof name)
                        return nb_error(NB_ERR_COMPILE, "%s:%d: error: include name of %zu characters (1..%zu)",
                                        file->path, line, n, sizeof name - 1);
                    memcpy(name, c + 1, n);
                    name[n] = '\0';
                    const nb_cuda_file *f = nb_resolve(table, file->path, name);
                    if (!f)
                        return nb_error(NB_ERR_COMPILE,
                                        "%s:%d: error: cannot include \"%s\": no embedded kernel file by that name "
                                        "beside %s or under src/ (kernel files live in kernels/ folders; "
                                        "rerun python3 tools/embed_cu.py after adding one)",
                                        file->path, line, name, file->path);
                    int seen = 0;
                    for (int i = 0; i < p->n_headers && !seen; i++) {
                        if (strcmp(p->names[i], name)) continue;
                        if (strcmp(p->paths[i], f->path))
                            return nb_error(NB_ERR_COMPILE,
                                            "%s:%d: error: \"%s\" means %s here but %s elsewhere in the program "
                                            "of %s: include it by its path under src/",
                                            file->path, line, name, f->path, p->paths[i], p->path);
                        seen = 1;
                    }
                    if (!seen) {
                        if (p->n_headers >= NB_CUDA_MAX_INCLUDES)
                            return nb_error(NB_ERR_COMPILE, "%s:%d: error: more than %d included files",
                                            file->path, line, NB_CUDA_MAX_INCLUDES);
                        int i = p->n_headers++;
                        memcpy(p->name_buf[i], name, n + 1);
                        p->names[i] = p->name_buf[i];
                        p->texts[i] = f->text;
                        p->paths[i] = f->path;
                    }
                }
            }
        }
        if (!eol) break;
        s = eol + 1;
    }
    return NB_OK;
}

nb_status nb_cuda_program_prepare(const nb_cuda_file *table, const char *path,
                                  const char *const *defines, nb_cuda_program *out) {
    NB_CHECK_ARG(path);
    NB_CHECK_ARG(out);
    memset(out, 0, sizeof *out);
    if (!table) table = nb_cuda_files;
    const nb_cuda_file *main_file = nb_table_find(table, path);
    if (!main_file)
        return nb_error(NB_ERR_NOT_FOUND,
                        "no embedded CUDA kernel file '%s' (kernel files are src/.../kernels/*.cu, "
                        "embedded by python3 tools/embed_cu.py)", path);
    out->path = main_file->path;
    out->source = main_file->text;
    NB_TRY(nb_scan_includes(table, main_file, out));
    /* Headers found so far are scanned in turn; each appends what it includes (once). Files
     * reached under two names are scanned twice, which only repeats the same additions. */
    for (int i = 0; i < out->n_headers; i++) {
        nb_cuda_file hf = {out->paths[i], out->texts[i]};
        NB_TRY(nb_scan_includes(table, &hf, out));
    }
    out->headers.n = out->n_headers;
    out->headers.names = out->names;
    out->headers.texts = out->texts;

    int nd = 0;
    size_t used = 0; /* of opt_buf */
    for (int i = 0; defines && defines[i]; i++) {
        const char *d = defines[i];
        if (nd >= NB_CUDA_MAX_DEFINES)
            return nb_error(NB_ERR_INVALID_ARG, "%s: more than %d defines", path, NB_CUDA_MAX_DEFINES);
        size_t id = 0;
        while (d[id] && (isalnum((unsigned char)d[id]) || d[id] == '_')) id++;
        int ok = id > 0 && !isdigit((unsigned char)d[0]) && (d[id] == '\0' || d[id] == '=') &&
                 !strpbrk(d, "\n\r");
        if (!ok)
            return nb_error(NB_ERR_INVALID_ARG, "%s: bad define '%.64s' (want NAME or NAME=VALUE on one line)",
                            path, d);
        int n = snprintf(out->opt_buf + used, sizeof out->opt_buf - used, "-D%s", d);
        if (n < 0 || (size_t)n >= sizeof out->opt_buf - used)
            return nb_error(NB_ERR_INVALID_ARG, "%s: the defines exceed %d characters in all (at '%.32s...')",
                            path, NB_CUDA_DEFINE_CHARS, d);
        out->opts[nd] = out->opt_buf + used;
        used += (size_t)n + 1;
        nd++;
    }
    out->opts[nd] = NULL;
    return NB_OK;
}

/* Writes `path:line: ` for a line that starts with `name(digits): `; returns the characters of
 * the line consumed, or 0 when the line does not start so. */
static size_t nb_rewrite_prefix(const char *line, const char *name, const char *path, nb_strbuf *out) {
    size_t n = strlen(name);
    if (strncmp(line, name, n) || line[n] != '(') return 0;
    const char *d = line + n + 1, *e = d;
    while (isdigit((unsigned char)*e)) e++;
    if (e == d || e[0] != ')' || e[1] != ':') return 0;
    nb_strbuf_printf(out, "%s:%.*s:", path, (int)(e - d), d);
    return (size_t)(e + 2 - line);
}

void nb_cuda_log_rewrite(const nb_cuda_program *p, const char *log, nb_strbuf *out) {
    for (const char *s = log; s && *s;) {
        const char *eol = strchr(s, '\n');
        size_t used = nb_rewrite_prefix(s, p->path, p->path, out);
        for (int i = 0; !used && i < p->n_headers; i++) used = nb_rewrite_prefix(s, p->names[i], p->paths[i], out);
        s += used;
        size_t rest = eol ? (size_t)(eol - s) + 1 : strlen(s);
        nb_strbuf_append_n(out, s, rest);
        s += rest;
    }
}

nb_status nb_jit_cuda_kernel(nb_device *dev, const char *path, const char *const *defines,
                             const char *entry, nb_jit_kernel **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    NB_CHECK_ARG(entry);
    if (nb_device_get_kind(dev) != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "%s: kernel '%s' needs a CUDA device, not %s", path ? path : "(null)",
                        entry, nb_device_name(dev));
    nb_cuda_program p;
    NB_TRY(nb_cuda_program_prepare(NULL, path, defines, &p));
    nb_jit_options o = {0};
    o.name = p.path; /* NVRTC's program name: its messages name the file */
    o.nvrtc_opts = p.opts;
    o.headers = &p.headers;
    nb_status st = nb_jit_load(dev, p.source, entry, &o, out);
    if (st == NB_ERR_COMPILE) {
        nb_strbuf sb;
        nb_strbuf_init(&sb);
        nb_cuda_log_rewrite(&p, nb_last_error(), &sb);
        if (nb_strbuf_ok(&sb)) st = nb_error(NB_ERR_COMPILE, "%s", nb_strbuf_cstr(&sb));
        nb_strbuf_free(&sb);
    }
    return st;
}
