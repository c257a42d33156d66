/* `nabla call FILE FUNC ARG... --bwd [--dout JSON] [--dout OUT=JSON]...` and
 * `... --fwd [--tangent NAME=JSON]...`: derivative calls over arrays (docs/AUTODIFF.md), through
 * the public C API (nb_call_set_mode, nb_call_grad, nb_call_tangent, nb_call_dout).
 *
 *   --bwd   prints {"result": R, "grad": {"param": dL/dparam, ...}} for every differentiable
 *           input (a struct parameter's as an object of its fields, a DiffTensor's as its
 *           gradient array); the result's gradient is --dout JSON and an out parameter's
 *           --dout NAME=JSON (default 1 everywhere); each gradient has the shape of its argument
 *           (a scalar given for every element gets the summed gradient). One fused call computes
 *           the result and the gradients.
 *   --fwd   prints {"result": R, "tangent": dR}; --tangent NAME=JSON gives parameter NAME's
 *           tangent (default 0).
 * ARGs are JSON numbers / nested lists, or objects for struct parameters ({"a": 1, "b": [2, 3]}),
 * positional (the parameters that are not `out`) or NAME=JSON.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "nabla/nabla.h"

#define AD_MAX 32

typedef struct host {
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    void *data;
    size_t count;
} host;

/* The dtype of DiffTensor parameter i (NB_F32 for DiffTensor<float>), or -1 for other parameters. */
static int tensor_dtype(nb_func *f, int i)
{
    for (int l = 0; l < nb_func_leaf_count(f, 0); l++) {
        nb_leaf_info li;
        if (nb_func_leaf(f, 0, l, &li) == NB_OK && li.param == i && li.is_diff_tensor) return (int)li.dtype;
    }
    return -1;
}

/* The parameter whose name is text[0 .. eq) ("x" of "x=[1,2]"), or -1. */
static int param_named(nb_func *f, const char *text, const char *eq)
{
    for (int i = 0; i < nb_func_param_count(f, 0); i++)
        if (strlen(nb_func_param_name(f, 0, i)) == (size_t)(eq - text) && !strncmp(nb_func_param_name(f, 0, i), text, (size_t)(eq - text)))
            return i;
    return -1;
}

/* Is parameter i a struct (bound leaf by leaf: "p.a", "p.b")? */
static int is_struct_param(nb_func *f, int i)
{
    for (int l = 0; l < nb_func_leaf_count(f, 0); l++) {
        nb_leaf_info li;
        if (nb_func_leaf(f, 0, l, &li) == NB_OK && li.param == i) return strcmp(li.path, nb_func_param_name(f, 0, i)) != 0;
    }
    return 0;
}

/* Converts parsed values (f64 or i64) to f32 in place (the buffer is at least as large). */
/* Whether the generated backward function fb ("f__bwdr") has a parameter leaf `path`: a struct
 * argument's gradient `p_grad` has the fields of p's Differential, which leaves out p's int,
 * bool and no_diff fields (Slang's synthesized Differential). */
static int has_leaf(nb_func *fb, const char *path)
{
    if (!fb) return 1; /* unknown: let the binding decide */
    for (int l = 0; l < nb_func_leaf_count(fb, 0); l++) {
        nb_leaf_info li;
        if (nb_func_leaf(fb, 0, l, &li) == NB_OK && li.path && !strcmp(li.path, path)) return 1;
    }
    return 0;
}

static int to_f32(host *h)
{
    float *o = (float *)h->data;
    for (size_t k = 0; k < h->count; k++) {
        double v = h->dtype == NB_F64 ? ((double *)h->data)[k] : (double)((int64_t *)h->data)[k];
        o[k] = (float)v;
    }
    h->dtype = NB_F32;
    return 1;
}

/* The strings "NaN", "Infinity", "-Infinity": the output's spelling of non-finite numbers (valid
 * JSON), read back as numbers. */
static int nonfinite_string(const nb_json *v)
{
    return v->kind == NB_JSON_STRING && (!strcmp(v->string, "NaN") || !strcmp(v->string, "Infinity") ||
                                         !strcmp(v->string, "-Infinity"));
}

static int shape_of(const nb_json *v, host *h, int depth, int *is_float, char *err, size_t cap)
{
    if (v->kind == NB_JSON_NUMBER && v->integer_overflow)
        return snprintf(err, cap, "column %d: the integer %.17g is outside the range of 64-bit integers", v->col,
                        v->number), 0;
    if (v->kind == NB_JSON_NUMBER || nonfinite_string(v)) {
        if (depth != h->ndim) return snprintf(err, cap, "column %d: ragged list", v->col), 0;
        if (v->kind != NB_JSON_NUMBER || !v->is_integer) *is_float = 1;
        return 1;
    }
    if (v->kind != NB_JSON_ARRAY) return snprintf(err, cap, "column %d: expected a number or a list", v->col), 0;
    if (depth >= NB_MAX_DIMS) return snprintf(err, cap, "too many nested lists"), 0;
    if (depth == h->ndim) {
        h->shape[h->ndim++] = v->count;
    } else if (h->shape[depth] != v->count) {
        return snprintf(err, cap, "column %d: ragged list", v->col), 0;
    }
    for (int i = 0; i < v->count; i++)
        if (!shape_of(&v->items[i], h, depth + 1, is_float, err, cap)) return 0;
    if (v->count == 0 && depth + 1 > h->ndim) return 1;
    return 1;
}

static void fill(const nb_json *v, host *h, size_t *k)
{
    if (v->kind == NB_JSON_NUMBER) {
        if (h->dtype == NB_F64) ((double *)h->data)[(*k)++] = v->number;
        else ((int64_t *)h->data)[(*k)++] = v->integer;
        return;
    }
    if (nonfinite_string(v)) {
        ((double *)h->data)[(*k)++] = !strcmp(v->string, "NaN") ? NAN : v->string[0] == '-' ? -INFINITY : INFINITY;
        return;
    }
    for (int i = 0; i < v->count; i++) fill(&v->items[i], h, k);
}

static int host_from_json(const nb_json *v, host *h, char *err, size_t cap)
{
    memset(h, 0, sizeof *h);
    int is_float = 0;
    /* first pass: the shape along the first element of every level */
    const nb_json *w = v;
    while (w->kind == NB_JSON_ARRAY && h->ndim < NB_MAX_DIMS) {
        h->shape[h->ndim++] = w->count;
        if (!w->count) break;
        w = &w->items[0];
    }
    int nd = h->ndim;
    h->ndim = 0;
    int ok = shape_of(v, h, 0, &is_float, err, cap) && h->ndim == nd;
    if (ok) {
        h->dtype = is_float ? NB_F64 : NB_I64;
        h->count = 1;
        for (int i = 0; i < h->ndim; i++) h->count *= (size_t)h->shape[i];
        h->data = calloc(h->count ? h->count : 1, 8);
        size_t k = 0;
        if (h->data) fill(v, h, &k);
        else {
            snprintf(err, cap, "out of memory");
            ok = 0;
        }
    } else if (!err[0]) {
        snprintf(err, cap, "ragged nested list");
    }
    return ok;
}

static int parse_host(const char *text, host *h, char *err, size_t cap)
{
    memset(h, 0, sizeof *h);
    nb_json *v = nb_json_parse(text, err, cap);
    if (!v) return 0;
    int ok = host_from_json(v, h, err, cap);
    nb_json_free(v);
    return ok;
}

/* The value of leaf `path` ("p" or "p.pos.x") inside parameter `name`'s JSON argument. */
static const nb_json *leaf_json(const nb_json *root, const char *name, const char *path, char *err, size_t cap)
{
    const char *rest = path + strlen(name);
    const nb_json *v = root;
    while (*rest == '.') {
        rest++;
        size_t n = strcspn(rest, ".");
        if (v->kind != NB_JSON_OBJECT) {
            snprintf(err, cap, "argument '%s' is a struct: give an object with field '%.*s'", name, (int)n, rest);
            return NULL;
        }
        const nb_json *f = NULL;
        for (int i = 0; i < v->count; i++)
            if (strlen(v->keys[i]) == n && !strncmp(v->keys[i], rest, n)) f = &v->items[i];
        if (!f) {
            snprintf(err, cap, "argument '%s' has no field '%.*s'", name, (int)n, rest);
            return NULL;
        }
        v = f;
        rest += n;
    }
    return v;
}

/* Prints "key": value pairs of leaf paths as nested objects ("p.a", "p.b" -> "p": {"a": …, "b": …}). */
typedef struct jpath {
    int open;            /* objects opened below the top */
    char comp[8][64];    /* their keys */
    int count[9];        /* pairs printed at each depth */
} jpath;

static void jpath_key(jpath *j, const char *path)
{
    char comps[8][64];
    int n = 0;
    for (const char *p = path; *p && n < 8; n++) {
        size_t k = strcspn(p, ".");
        snprintf(comps[n], sizeof comps[n], "%.*s", (int)(k < 63 ? k : 63), p);
        p += k;
        if (*p == '.') p++;
    }
    int common = 0;
    while (common < j->open && common < n - 1 && !strcmp(j->comp[common], comps[common])) common++;
    while (j->open > common) {
        fputs("}", stdout);
        j->open--;
    }
    for (int d = common; d < n; d++) {
        if (j->count[d]++) fputs(", ", stdout);
        nb_json_print_string(stdout, comps[d]);
        fputs(": ", stdout);
        if (d + 1 < n) {
            fputs("{", stdout);
            snprintf(j->comp[d], sizeof j->comp[d], "%s", comps[d]);
            j->open = d + 1;
            j->count[d + 1] = 0;
        }
    }
}

static void jpath_end(jpath *j)
{
    while (j->open > 0) {
        fputs("}", stdout);
        j->open--;
    }
}

static void print_rec(const double *d, int ndim, const int64_t *shape, size_t *k, int single)
{
    char buf[64];
    if (ndim == 0) {
        fputs(nb_json_format_double(d[(*k)++], single, buf, sizeof buf), stdout);
        return;
    }
    putchar('[');
    for (int64_t i = 0; i < shape[0]; i++) {
        if (i) fputs(", ", stdout);
        print_rec(d, ndim - 1, shape + 1, k, single);
    }
    putchar(']');
}

/* prints t (f32, f64, i32, i64) as JSON */
static int print_t(nb_tensor *t)
{
    if (!t) {
        fputs("null", stdout);
        return 1;
    }
    nb_dtype dt = nb_tensor_dtype(t);
    size_t n = (size_t)nb_tensor_numel(t), es = nb_dtype_size(dt);
    unsigned char *raw = malloc(es * (n ? n : 1));
    double *d = malloc(sizeof(double) * (n ? n : 1));
    int ok = raw && d && (dt == NB_F32 || dt == NB_F64 || dt == NB_I32 || dt == NB_I64) &&
             nb_tensor_to_host(t, raw, es * n) == NB_OK;
    for (size_t i = 0; ok && i < n; i++) {
        if (dt == NB_F32) d[i] = ((float *)raw)[i];
        else if (dt == NB_F64) d[i] = ((double *)raw)[i];
        else if (dt == NB_I32) d[i] = ((int32_t *)raw)[i];
        else d[i] = (double)((int64_t *)raw)[i];
    }
    if (ok) {
        size_t k = 0;
        print_rec(d, nb_tensor_ndim(t), nb_tensor_shape(t), &k, dt == NB_F32);
    }
    free(raw);
    free(d);
    return ok;
}

static int fail_st(const char *what)
{
    fprintf(stderr, "nabla: call: %s%s%s\n", what ? what : "", what ? ": " : "", nb_last_error());
    return 1;
}

int nb_cmd_call_ad(int argc, char **argv)
{
    const char *file = NULL, *func = NULL, *device = "auto", *dout = NULL;
    const char *douts[AD_MAX]; /* --dout NAME=JSON: gradients of out parameters */
    int ndout = 0;
    const char *pos[AD_MAX], *named[AD_MAX], *tangents[AD_MAX], *incs[AD_MAX], *defs[AD_MAX];
    const char *confs[AD_MAX];
    int nconf = 0;
    int npos = 0, nnamed = 0, ntan = 0, ninc = 0, ndef = 0, bwd = -1, unchecked = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL, *def;
        int dk = nb_cli_define_arg(argc, argv, &i, &def);
        if (dk < 0) return nb_cli_bad_usage("call: -D needs NAME or NAME=VALUE%s", "");
        if (dk > 0) {
            if (ndef == AD_MAX) return nb_cli_bad_usage("call: too many -D%s", "");
            defs[ndef++] = def;
            continue;
        }
        int ck = nb_cli_conformance_arg(argc, argv, &i, &def);
        if (ck < 0) return nb_cli_bad_usage("call: --conformance needs TYPE:INTERFACE=ID%s", "");
        if (ck > 0) {
            if (nconf == AD_MAX) return nb_cli_bad_usage("call: too many --conformance%s", "");
            confs[nconf++] = def;
            continue;
        }
        if (!strcmp(a, "--unchecked")) {
            unchecked = 1;
        } else if (!strcmp(a, "--bwd") || !strcmp(a, "--fwd")) {
            if (bwd >= 0) return nb_cli_bad_usage("call: give one of --fwd and --bwd%s", "");
            bwd = !strcmp(a, "--bwd");
        } else if (!strcmp(a, "--device") || !strcmp(a, "--dout") || !strcmp(a, "--tangent") || !strcmp(a, "-I")) {
            if (!next) return nb_cli_bad_usage("call: %s needs a value", a);
            i++;
            if (!strcmp(a, "--device")) device = next;
            else if (!strcmp(a, "--dout")) {
                if (next[0] != '[' && next[0] != '{' && next[0] != '-' && (next[0] < '0' || next[0] > '9') && strchr(next, '=')) {
                    if (ndout < AD_MAX) douts[ndout++] = next;
                } else dout = next;
            }
            else if (!strcmp(a, "-I") && ninc < AD_MAX) incs[ninc++] = next;
            else if (!strcmp(a, "--tangent")) {
                if (!strchr(next, '=')) return nb_cli_bad_usage("call: --tangent needs NAME=JSON, got '%s'", next);
                if (ntan < AD_MAX) tangents[ntan++] = next;
            }
        } else if (a[0] == '-' && a[1] == '-') {
            return nb_cli_bad_usage("call: '%s' is not supported with --fwd / --bwd", a);
        } else if (!file) file = a;
        else if (!func) func = a;
        else if (strchr(a, '=') && a[0] != '[' && a[0] != '-' && (a[0] < '0' || a[0] > '9')) {
            if (nnamed < AD_MAX) named[nnamed++] = a;
        } else if (npos < AD_MAX) pos[npos++] = a;
    }
    if (!file || !func) return nb_cli_bad_usage("call: usage: nabla call FILE FUNC ARG... --fwd|--bwd%s", "");
    if (bwd && ntan) return nb_cli_bad_usage("call: --tangent goes with --fwd%s", "");
    if (!bwd && (dout || ndout)) return nb_cli_bad_usage("call: --dout goes with --bwd%s", "");
    int rc = 1;
    nb_device *dev = NULL;
    nb_module *m = NULL;
    nb_tensor *owned[4 * AD_MAX];
    int nown = 0;
    host hosts[3 * AD_MAX];
    int nhost = 0;
    const char *grad_path[AD_MAX];
    int ngrad = 0;
    static char gpaths[AD_MAX][300];
    int ngp = 0;
    nb_tensor *grads[AD_MAX];
    nb_tensor *result = NULL, *rtan = NULL;
    nb_func *f = NULL;
    nb_call *c = NULL;
    char err[512] = "";
    if (nb_device_open(device, &dev) != NB_OK) {
        fail_st("device");
        goto done;
    }
    nb_module_options mo;
    memset(&mo, 0, sizeof mo);
    mo.include_dirs = incs;
    mo.ninclude_dirs = ninc;
    mo.unchecked = unchecked;
    mo.defines = defs;
    mo.ndefines = ndef;
    mo.conformances = confs;
    mo.nconformances = nconf;
    if (nb_module_load(dev, file, &mo, &m) != NB_OK || nb_module_func(m, func, &f) != NB_OK) {
        fprintf(stderr, "nabla: %s\n", nb_last_error());
        goto done;
    }
    nb_func *fbwd = NULL; /* f__bwdr, once a struct argument needs it: its gradient leaves (has_leaf) */
    int np = nb_func_param_count(f, 0);
    /* which parameter each positional argument fills (not out) */
    const char *param_text[AD_MAX];
    for (int i = 0; i < AD_MAX; i++) param_text[i] = NULL;
    int pi = 0;
    for (int k = 0; k < npos; k++) {
        while (pi < np && nb_func_param_dir(f, 0, pi) == NB_ARG_OUT) pi++;
        if (pi >= np) {
            fprintf(stderr, "nabla: call: too many arguments for %s\n", nb_func_signature(f, 0));
            goto done;
        }
        param_text[pi++] = pos[k];
    }
    for (int k = 0; k < nnamed; k++) {
        const char *eq = strchr(named[k], '=');
        int found = param_named(f, named[k], eq);
        if (found < 0) {
            fprintf(stderr, "nabla: call: %s has no parameter '%.*s'\n", nb_func_signature(f, 0), (int)(eq - named[k]), named[k]);
            goto done;
        }
        param_text[found] = eq + 1;
    }
    /* One call gives the primal result too: --fwd's wrapper returns it, and a --bwd call whose result
     * is asked for runs the fused forward + backward kernel (f__bwdr). */
    if (nb_call_begin(f, &c) != NB_OK || nb_call_set_mode(c, bwd ? NB_MODE_BWD : NB_MODE_FWD) != NB_OK) goto fail;
    /* arguments leaf by leaf (a struct argument is an object of its fields) */
    nb_json *pj[AD_MAX] = {0};
    for (int i = 0; i < np && i < AD_MAX; i++) {
        if (!param_text[i] || (bwd && nb_func_param_dir(f, 0, i) == NB_ARG_OUT)) continue;
        if (!(pj[i] = nb_json_parse(param_text[i], err, sizeof err))) goto bad_json_free;
    }
    for (int l = 0; l < nb_func_leaf_count(f, 0); l++) {
        nb_leaf_info li;
        if (nb_func_leaf(f, 0, l, &li) != NB_OK || li.param < 0 || li.param >= AD_MAX || !pj[li.param]) continue;
        int i = li.param;
        const char *pname = nb_func_param_name(f, 0, i);
        const nb_json *v = leaf_json(pj[i], pname, li.path, err, sizeof err);
        if (!v || nhost >= 3 * AD_MAX) goto bad_json_free;
        host *h = &hosts[nhost++];
        if (!host_from_json(v, h, err, sizeof err)) goto bad_json_free;
        if (nb_call_arg_value_named(c, li.path, h->dtype, h->ndim, h->shape, h->data) != NB_OK) goto fail_free;
        if (!bwd || (li.dtype != NB_F32 && li.dtype != NB_F64) || ngrad >= AD_MAX) continue;
        /* a differentiable leaf gets a gradient array of its argument's shape (zeroed) */
        nb_tensor *g = NULL;
        if (nb_tensor_zeros(dev, li.dtype, h->ndim, h->shape, &g) != NB_OK) goto fail_free;
        owned[nown++] = g;
        nb_status s;
        if (!strcmp(li.path, pname)) s = nb_call_grad(c, i, g);
        else { /* a struct field: the wrapper's gradient parameter is `p_grad`, with the same fields */
            char *gp = gpaths[ngp++]; /* (names given to setters are borrowed: kept until the run) */
            snprintf(gp, sizeof gpaths[0], "%s_grad%s", pname, li.path + strlen(pname));
            if (!fbwd) {
                char bname[300];
                snprintf(bname, sizeof bname, "%s__bwdr", func);
                if (nb_module_func(m, bname, &fbwd) != NB_OK) goto fail_free; /* (its diagnostic) */
            }
            s = has_leaf(fbwd, gp) ? nb_call_arg_named(c, gp, g) : NB_ERR_INVALID_ARG;
            if (s == NB_ERR_INVALID_ARG || s == NB_ERR_NOT_FOUND) s = NB_ERR_INVALID_ARG;
        }
        if (s == NB_ERR_INVALID_ARG && (strstr(nb_last_error(), "not differentiable") || strcmp(li.path, pname))) {
            nb_clear_error();
            continue; /* (an int, no_diff or non-differentiable field) */
        }
        if (s != NB_OK) goto fail_free;
        grad_path[ngrad] = li.path;
        grads[ngrad++] = g;
    }
    for (int i = 0; i < AD_MAX; i++) nb_json_free(pj[i]);
    for (int k = 0; k < ndout; k++) { /* --dout OUT=JSON */
        const char *eq = strchr(douts[k], '=');
        int found = param_named(f, douts[k], eq);
        if (found < 0 || nb_func_param_dir(f, 0, found) != NB_ARG_OUT) {
            fprintf(stderr, "nabla: call: --dout %.*s=…: %s has no out parameter '%.*s'\n", (int)(eq - douts[k]), douts[k],
                    nb_func_signature(f, 0), (int)(eq - douts[k]), douts[k]);
            goto done;
        }
        host *h = &hosts[nhost++];
        if (!parse_host(eq + 1, h, err, sizeof err)) goto bad_json;
        nb_tensor *t = NULL;
        if (nb_tensor_from_host(dev, h->dtype == NB_F64 ? NB_F64 : NB_I64, h->ndim, h->shape, h->data, &t) != NB_OK) goto fail;
        owned[nown++] = t;
        if (nb_call_grad(c, found, t) != NB_OK) goto fail;
    }
    if (bwd && dout) {
        host *h = &hosts[nhost++];
        if (!parse_host(dout, h, err, sizeof err)) goto bad_json;
        nb_tensor *t = NULL;
        if (nb_tensor_from_host(dev, h->dtype == NB_F64 ? NB_F64 : NB_I64, h->ndim, h->shape, h->data, &t) != NB_OK) goto fail;
        owned[nown++] = t;
        if (nb_call_dout(c, t) != NB_OK) goto fail;
    }
    for (int k = 0; k < ntan; k++) {
        const char *eq = strchr(tangents[k], '=');
        int found = param_named(f, tangents[k], eq);
        if (found < 0) {
            fprintf(stderr, "nabla: call: %s has no parameter '%.*s'\n", nb_func_signature(f, 0), (int)(eq - tangents[k]),
                    tangents[k]);
            goto done;
        }
        const char *pname = nb_func_param_name(f, 0, found);
        if (is_struct_param(f, found)) {
            /* a struct: its tangent is an object of its fields, bound as "d_p.field" */
            nb_json *tj = nb_json_parse(eq + 1, err, sizeof err);
            if (!tj) goto bad_json;
            int ok = 1;
            for (int l = 0; ok && l < nb_func_leaf_count(f, 0); l++) {
                nb_leaf_info li;
                if (nb_func_leaf(f, 0, l, &li) != NB_OK || li.param != found) continue;
                const nb_json *v = leaf_json(tj, pname, li.path, err, sizeof err);
                host *h = &hosts[nhost++];
                char *tp = gpaths[ngp++];
                snprintf(tp, sizeof gpaths[0], "d_%s", li.path);
                ok = v && nhost < 3 * AD_MAX && ngp < AD_MAX && host_from_json(v, h, err, sizeof err);
                if (ok && nb_call_arg_value_named(c, tp, h->dtype, h->ndim, h->shape, h->data) != NB_OK) {
                    nb_json_free(tj);
                    goto fail;
                }
            }
            nb_json_free(tj);
            if (!ok) goto bad_json;
            continue;
        }
        host *h = &hosts[nhost++];
        if (!parse_host(eq + 1, h, err, sizeof err)) goto bad_json;
        nb_tensor *t = NULL;
        if (tensor_dtype(f, found) == NB_F32) { /* a DiffTensor<float>: its tangent array is f32 too */
            if (!to_f32(h)) goto fail;
            if (nb_tensor_from_host(dev, NB_F32, h->ndim, h->shape, h->data, &t) != NB_OK) goto fail;
        } else if (nb_tensor_from_host(dev, h->dtype == NB_F64 ? NB_F64 : NB_I64, h->ndim, h->shape, h->data, &t) != NB_OK)
            goto fail;
        owned[nown++] = t;
        if (nb_call_tangent(c, found, t) != NB_OK) goto fail;
    }
    if (!bwd) {
        nb_leaf_info rl;
        if (nb_func_result_leaf(f, 0, 0, &rl) != NB_OK) {
            fprintf(stderr, "nabla: call: --fwd needs a function with a result\n");
            goto done;
        }
        if (nb_call_tangent_alloc(c, &rtan) != NB_OK) goto fail;
    }
    {
        nb_leaf_info rl;
        int has_result = nb_func_result_leaf(f, 0, 0, &rl) == NB_OK;
        nb_status s = nb_call_run(c, has_result ? &result : NULL);
        c = NULL;
        if (s != NB_OK) goto fail;
    }
    fputs("{\"result\": ", stdout);
    if (!print_t(result)) goto fail;
    if (bwd) {
        fputs(", \"grad\": {", stdout);
        jpath jp;
        memset(&jp, 0, sizeof jp);
        for (int k = 0; k < ngrad; k++) {
            jpath_key(&jp, grad_path[k]);
            if (!print_t(grads[k])) goto fail;
        }
        jpath_end(&jp);
        fputs("}}\n", stdout);
    } else {
        fputs(", \"tangent\": ", stdout);
        if (!print_t(rtan)) goto fail;
        fputs("}\n", stdout);
    }
    rc = 0;
    goto done;
bad_json_free:
    for (int i = 0; i < AD_MAX; i++) nb_json_free(pj[i]);
bad_json:
    fprintf(stderr, "nabla: call: bad argument: %s\n", err);
    goto done;
fail_free:
    for (int i = 0; i < AD_MAX; i++) nb_json_free(pj[i]);
fail:
    fail_st(NULL);
done:
    if (c) nb_call_free(c);
    nb_tensor_free(result);
    nb_tensor_free(rtan);
    for (int i = 0; i < nown; i++) nb_tensor_free(owned[i]);
    for (int i = 0; i < nhost; i++) free(hosts[i].data);
    nb_module_free(m);
    nb_device_close(dev);
    return rc;
}
