/* Modules (a compiled nb_program bound to a device), function handles, reflection, dumps and the
 * per-function kernel cache. See include/nabla/module.h. */
#include <string.h>

#include "call/call_internal.h"
#include "core/hash.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/log.h"

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = nb_alloc(n, 16);
    if (d) memcpy(d, s, n);
    return d;
}

static void free_str(char *s) {
    if (s) nb_free(s, strlen(s) + 1);
}

/* ---- kernel cache ---------------------------------------------------------------------------- */

size_t nb_sig_key_bytes(const nb_sig_key *k) {
    return offsetof(nb_sig_key, leaves) + (size_t)k->nleaves * sizeof k->leaves[0];
}

uint64_t nb_sig_key_hash(const nb_sig_key *k, size_t bytes) { return nb_hash64(k, bytes, 0x6e62); }

nb_kentry *nb_kcache_find(nb_kcache *c, const nb_sig_key *k, size_t bytes, uint64_t hash) {
    for (int i = 0; i < c->count; i++) {
        nb_kentry *e = c->entries[i];
        if (e->hash == hash && e->key_bytes == bytes && !memcmp(&e->key, k, bytes)) {
            if (i > 0) { /* keep the most recent signature first */
                c->entries[i] = c->entries[0];
                c->entries[0] = e;
            }
            return e;
        }
    }
    return NULL;
}

nb_status nb_kcache_add(nb_kcache *c, nb_kentry *e) {
    if (c->count == c->cap) {
        int nc = c->cap ? c->cap * 2 : 4;
        nb_kentry **ne = nb_alloc(sizeof *ne * (size_t)nc, 16);
        if (!ne) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory (kernel cache)");
        if (c->count) memcpy(ne, c->entries, sizeof *ne * (size_t)c->count);
        if (c->entries) nb_free(c->entries, sizeof *ne * (size_t)c->cap);
        c->entries = ne;
        c->cap = nc;
    }
    c->entries[c->count++] = e;
    return NB_OK;
}

/* Kernels themselves belong to the jit (they live until nb_jit_forget_all). */
void nb_kcache_clear(nb_kcache *c) {
    for (int i = 0; i < c->count; i++) nb_free(c->entries[i], sizeof *c->entries[i]);
    if (c->entries) nb_free(c->entries, sizeof *c->entries * (size_t)c->cap);
    c->entries = NULL;
    c->count = c->cap = 0;
}

/* ---- modules --------------------------------------------------------------------------------- */

static nb_status module_new(nb_device *dev, const nb_module_options *opts, const char *name,
                            nb_module **out) {
    nb_module *m = nb_calloc(sizeof *m, 16);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_module_load: out of host memory");
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        nb_free(m, sizeof *m);
        return nb_error(NB_ERR_INTERNAL, "nb_module_load: cannot create a mutex");
    }
    m->name = dup_str(name);
    if (!m->name) {
        nb_module_free(m);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_module_load: out of host memory");
    }
    if (dev) {
        /* Our own reference, so the device outlives the module even if the caller closes it. */
        nb_status s = nb_device_open(nb_device_name(dev), &m->dev);
        if (s) {
            nb_module_free(m);
            return s;
        }
    }
    m->no_disk_cache = opts ? opts->no_disk_cache : 0;
    *out = m;
    return NB_OK;
}

static void fill_copts(const nb_module_options *opts, nb_compile_opts *co) {
    memset(co, 0, sizeof *co);
    if (!opts) return;
    co->search_paths = opts->include_dirs;
    co->nsearch = opts->ninclude_dirs;
    co->max_errors = opts->max_errors;
    co->unchecked = opts->unchecked;
    co->defines = opts->defines;
    co->ndefines = opts->ndefines;
    co->conformances = opts->conformances;
    co->nconformances = opts->nconformances;
}

nb_status nb_module_load(nb_device *dev, const char *path, const nb_module_options *opts,
                         nb_module **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(path);
    if (opts && (opts->ninclude_dirs < 0 || (opts->ninclude_dirs > 0 && !opts->include_dirs)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_load: bad include_dirs/ninclude_dirs");
    if (opts && (opts->ndefines < 0 || (opts->ndefines > 0 && !opts->defines)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_load: bad defines/ndefines");
    if (opts && (opts->nconformances < 0 || (opts->nconformances > 0 && !opts->conformances)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_load: bad conformances/nconformances");
    nb_module *m = NULL;
    NB_TRY(module_new(dev, opts, path, &m));
    nb_compile_opts co;
    fill_copts(opts, &co);
    nb_status s = nb_program_compile_file(path, &co, &m->prog);
    if (s) {
        nb_module_free(m);
        return s;
    }
    *out = m;
    return NB_OK;
}

nb_status nb_module_load_source(nb_device *dev, const char *name, const char *source,
                                const nb_module_options *opts, nb_module **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(source);
    if (!name) name = "<source>.nb";
    if (opts && (opts->ninclude_dirs < 0 || (opts->ninclude_dirs > 0 && !opts->include_dirs)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_load_source: bad include_dirs/ninclude_dirs");
    if (opts && (opts->ndefines < 0 || (opts->ndefines > 0 && !opts->defines)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_load_source: bad defines/ndefines");
    if (opts && (opts->nconformances < 0 || (opts->nconformances > 0 && !opts->conformances)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_load_source: bad conformances/nconformances");
    nb_module *m = NULL;
    NB_TRY(module_new(dev, opts, name, &m));
    m->source = dup_str(source);
    if (!m->source) {
        nb_module_free(m);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_module_load_source: out of host memory");
    }
    nb_compile_opts co;
    fill_copts(opts, &co);
    nb_status s = nb_program_compile_source(name, source, &co, &m->prog);
    if (s) {
        nb_module_free(m);
        return s;
    }
    *out = m;
    return NB_OK;
}

static void func_free(nb_func *f) {
    nb_kcache_clear(&f->kcache);
    if (f->spare) nb_free(f->spare, sizeof *f->spare);
    free_str(f->name);
    nb_free(f, sizeof *f);
}

void nb_module_free(nb_module *m) {
    if (!m) return;
    nb_defer_free(m); /* (waits for deferred launches: they write host memory freed here) */
    for (int i = 0; i < m->nfuncs; i++) func_free(m->funcs[i]);
    if (m->funcs) nb_free(m->funcs, sizeof *m->funcs * (size_t)m->cap_funcs);
    if (m->prog) nb_program_free(m->prog);
    if (m->oob_dev) nb_buffer_release(m->oob_dev);
    if (m->dev) nb_device_close(m->dev);
    free_str(m->name);
    free_str(m->source);
    pthread_mutex_destroy(&m->lock);
    nb_free(m, sizeof *m);
}

nb_device *nb_module_device(const nb_module *m) { return m ? m->dev : NULL; }

nb_status nb_module_set_constant(nb_module *m, const char *name, double value) {
    NB_CHECK_ARG(m);
    NB_CHECK_ARG(name);
    pthread_mutex_lock(&m->lock);
    nb_defer_settle(m); /* (a deferred launch's error names the reflection and kernels freed here) */
    nb_status s = nb_program_set_constant(m->prog, name, value);
    if (s == NB_OK) {
        /* Every reflection pointer and kernel may be stale now. */
        m->gen++;
        for (int i = 0; i < m->nfuncs; i++) nb_kcache_clear(&m->funcs[i]->kcache);
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

nb_status nb_module_dump(nb_module *m, nb_dump_format format, const char *entry, nb_diff_mode mode,
                         char **text) {
    NB_CHECK_ARG(text);
    *text = NULL;
    NB_CHECK_ARG(m);
    if ((int)format < 0 || format > NB_DUMP_HOST)
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_dump: bad format %d", (int)format);
    if ((int)mode < 0 || mode > NB_MODE_BWD)
        return nb_error(NB_ERR_INVALID_ARG, "nb_module_dump: bad mode %d", (int)mode);
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    pthread_mutex_lock(&m->lock);
    nb_status s;
    if (format == NB_DUMP_IR)
        s = nb_program_dump_ir(m->prog, entry, &sb);
    else if (format == NB_DUMP_HOST)
        s = nb_program_emit_host(m->prog, &sb, NULL);
    else
        s = nb_program_emit(m->prog, format == NB_DUMP_CUDA ? NB_TARGET_CUDA : NB_TARGET_C, entry,
                            (nb_call_mode)mode, &sb);
    pthread_mutex_unlock(&m->lock);
    if (s == NB_OK && !nb_strbuf_ok(&sb))
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_module_dump: out of host memory");
    if (s == NB_OK) {
        if (sb.len == 0) nb_strbuf_append(&sb, "");
        size_t len = 0;
        *text = nb_strbuf_take(&sb, &len);
        if (!*text) s = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_module_dump: out of host memory");
    }
    nb_strbuf_free(&sb);
    return s;
}

void nb_module_free_text(char *text) {
    if (text) nb_free(text, strlen(text) + 1);
}

char *nb_module_warnings(const nb_module *m) { return m ? nb_program_warnings(m->prog) : NULL; }

/* ---- functions ------------------------------------------------------------------------------- */

nb_status nb_func_refresh(nb_func *f) {
    if (f->infos && f->gen == f->m->gen) return NB_OK;
    const nb_fn_info *infos = NULL;
    int count = 0;
    nb_status s = nb_program_functions(f->m->prog, f->name, &infos, &count);
    if (s) return s;
    if (count <= 0) return nb_error(NB_ERR_NOT_FOUND, "function '%s' not found", f->name);
    f->infos = infos;
    f->count = count;
    f->gen = f->m->gen;
    return NB_OK;
}

nb_status nb_module_func(nb_module *m, const char *name, nb_func **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(m);
    NB_CHECK_ARG(name);
    pthread_mutex_lock(&m->lock);
    nb_status s = NB_OK;
    for (int i = 0; i < m->nfuncs; i++)
        if (!strcmp(m->funcs[i]->name, name)) {
            *out = m->funcs[i];
            goto done;
        }
    nb_func *f = nb_calloc(sizeof *f, 16);
    if (!f || !(f->name = dup_str(name))) {
        if (f) nb_free(f, sizeof *f);
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_module_func: out of host memory");
        goto done;
    }
    f->m = m;
    if ((s = nb_func_refresh(f))) {
        func_free(f);
        goto done;
    }
    if (m->nfuncs == m->cap_funcs) {
        int nc = m->cap_funcs ? m->cap_funcs * 2 : 8;
        nb_func **nf = nb_alloc(sizeof *nf * (size_t)nc, 16);
        if (!nf) {
            func_free(f);
            s = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_module_func: out of host memory");
            goto done;
        }
        if (m->nfuncs) memcpy(nf, m->funcs, sizeof *nf * (size_t)m->nfuncs);
        if (m->funcs) nb_free(m->funcs, sizeof *nf * (size_t)m->cap_funcs);
        m->funcs = nf;
        m->cap_funcs = nc;
    }
    m->funcs[m->nfuncs++] = f;
    *out = f;
done:
    pthread_mutex_unlock(&m->lock);
    return s;
}

/* ---- reflection ------------------------------------------------------------------------------ */

static const nb_fn_info *info_of(const nb_func *cf, int overload) {
    nb_func *f = (nb_func *)cf;
    if (!f) return NULL;
    pthread_mutex_lock(&f->m->lock);
    nb_status s = nb_func_refresh(f);
    const nb_fn_info *in = (s == NB_OK && overload >= 0 && overload < f->count) ? &f->infos[overload]
                                                                               : NULL;
    pthread_mutex_unlock(&f->m->lock);
    return in;
}

int nb_func_overload_count(const nb_func *f) {
    return info_of(f, 0) ? f->count : 0;
}

const char *nb_func_name(const nb_func *f) { return f ? f->name : NULL; }

const char *nb_func_signature(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in ? in->signature : NULL;
}

int nb_func_param_count(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in ? in->nparams : 0;
}

const char *nb_func_param_name(const nb_func *f, int overload, int param) {
    const nb_fn_info *in = info_of(f, overload);
    return in && param >= 0 && param < in->nparams ? in->param_names[param] : NULL;
}

nb_arg_dir nb_func_param_dir(const nb_func *f, int overload, int param) {
    const nb_fn_info *in = info_of(f, overload);
    return in && param >= 0 && param < in->nparams ? (nb_arg_dir)in->param_dirs[param] : NB_ARG_IN;
}

int nb_func_param_has_default(const nb_func *f, int overload, int param) {
    const nb_fn_info *in = info_of(f, overload);
    return in && param >= 0 && param < in->nparams && in->param_has_default ? in->param_has_default[param]
                                                                            : 0;
}

int nb_func_is_kernel(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in ? in->is_kernel : 0;
}

int nb_func_is_differentiable(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in ? in->differentiable : 0;
}

nb_module *nb_func_module(const nb_func *f) { return f ? f->m : NULL; }

const char *nb_module_path(const nb_module *m) { return m ? m->name : NULL; }
const char *nb_module_source(const nb_module *m) { return m ? m->source : NULL; }

int nb_func_is_host(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in ? in->is_host : 0;
}

int nb_func_numthreads(const nb_func *f, int overload, int out[3]) {
    const nb_fn_info *in = info_of(f, overload);
    if (!in || in->numthreads[0] <= 0) return 0;
    if (out) memcpy(out, in->numthreads, sizeof in->numthreads);
    return 1;
}

int nb_func_struct_count(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in ? in->nstructs : 0;
}

nb_status nb_func_struct_node(const nb_func *f, int overload, int i, const char **path, const char **type_name) {
    const nb_fn_info *in = info_of(f, overload);
    if (!in || i < 0 || i >= in->nstructs)
        return nb_error(NB_ERR_INVALID_ARG, "nb_func_struct_node: no struct node %d (overload %d)", i, overload);
    if (path) *path = in->struct_paths[i];
    if (type_name) *type_name = in->struct_types[i];
    return NB_OK;
}

int nb_module_function_names(nb_module *m, const char **names, int max) {
    if (!m) return 0;
    pthread_mutex_lock(&m->lock);
    int n = nb_program_function_names(m->prog, names, max);
    pthread_mutex_unlock(&m->lock);
    return n;
}

int nb_func_leaf_count(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in ? in->nleaves : 0;
}

static void leaf_info(const nb_fn_leaf *l, nb_leaf_info *out) {
    memset(out, 0, sizeof *out);
    out->path = l->path;
    out->param = l->param;
    out->dir = (nb_arg_dir)l->dir;
    out->is_tensor = l->kind == NB_LEAF_TENSOR;
    out->is_diff_tensor = l->kind == NB_LEAF_TENSOR && l->diff_tensor;
    out->tensor_rank = l->torch ? 0 : l->tensor_rank; /* a TorchTensor: any rank */
    out->dtype = l->scalar;
    out->value_rank = l->value_rank;
    for (int i = 0; i < l->value_rank && i < 8; i++) out->value_shape[i] = l->value_shape[i];
    out->differentiable = l->differentiable;
}

nb_status nb_func_leaf(const nb_func *f, int overload, int leaf, nb_leaf_info *out) {
    NB_CHECK_ARG(out);
    const nb_fn_info *in = info_of(f, overload);
    if (!in) return nb_error(NB_ERR_INVALID_ARG, "nb_func_leaf: no overload %d", overload);
    if (leaf < 0 || leaf >= in->nleaves)
        return nb_error(NB_ERR_INVALID_ARG, "nb_func_leaf: leaf %d out of range (%s has %d)", leaf,
                        in->name, in->nleaves);
    leaf_info(&in->leaves[leaf], out);
    return NB_OK;
}

int nb_func_result(const nb_func *f, int overload, nb_leaf_info *out) {
    const nb_fn_info *in = info_of(f, overload);
    if (!in || !in->has_result) return 0;
    if (out) {
        leaf_info(&in->result, out);
        out->path = "_result";
    }
    return 1;
}

int nb_func_result_count(const nb_func *f, int overload) {
    const nb_fn_info *in = info_of(f, overload);
    return in && in->has_result ? in->nresults : 0;
}

nb_status nb_func_result_leaf(const nb_func *f, int overload, int leaf, nb_leaf_info *out) {
    NB_CHECK_ARG(out);
    const nb_fn_info *in = info_of(f, overload);
    if (!in) return nb_error(NB_ERR_INVALID_ARG, "nb_func_result_leaf: no overload %d", overload);
    if (leaf < 0 || leaf >= (in->has_result ? in->nresults : 0))
        return nb_error(NB_ERR_INVALID_ARG, "nb_func_result_leaf: leaf %d out of range (%s has %d)",
                        leaf, in->name, in->has_result ? in->nresults : 0);
    leaf_info(&in->results[leaf], out);
    return NB_OK;
}

nb_status nb_module_type_leaves(nb_module *m, const char *type_name, nb_leaf_info *out, int max, int *count) {
    NB_CHECK_ARG(m);
    NB_CHECK_ARG(type_name);
    NB_CHECK_ARG(count);
    *count = 0;
    const nb_fn_leaf *leaves = NULL;
    int n = 0;
    pthread_mutex_lock(&m->lock);
    nb_status st = nb_program_type_leaves(m->prog, type_name, &leaves, &n);
    pthread_mutex_unlock(&m->lock);
    if (st != NB_OK) return st;
    for (int i = 0; i < n && i < max && out; i++) leaf_info(&leaves[i], &out[i]);
    *count = n;
    return NB_OK;
}
