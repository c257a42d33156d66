/* C / CUDA C emitter: target-specific code of Slang (see lower_target.h) and printf.
 *
 *   variants     a function with a __target_switch has one IR function per back end; calls and
 *                emission use the one of this emitter's target (same C name)
 *   missing case a variant whose __target_switch has no case for this target (and no default)
 *                cannot be emitted: a diagnostic names the function, at the __target_switch
 *   asm          an __intrinsic_asm function is never emitted; each call is its text with $0..$9
 *                replaced by the arguments, $T0..$T9 by their C types, $TR by the result type
 *                and $[i] by the i-th operand (a type's C name or a constant)
 *   preludes     __requirePrelude texts of every emitted (or expanded) function, once each, at
 *                the top of the generated source (emit_c.c nb_emit_finish). A prelude line
 *                `#include "file"` is replaced by the file (found beside the source that declares
 *                the function, then on the -I paths; its own quoted includes likewise), so the
 *                generated source stands alone for the C compiler and NVRTC and the kernel cache
 *                key changes with the header; `#include <…>` lines stay (nvrtc.c gives NVRTC the
 *                toolkit's headers)
 */
#include <stdio.h>
#include <string.h>

#include "lang/ad.h"
#include "lang/emit_c.h"
#include "lang/intrinsics.h"
#include "lang/source.h"
#include "nabla/alloc.h"
#include "nabla/file.h"

nb_ir_func *nb_emit_variant(const nb_emitter *e, nb_ir_func *f)
{
    if (!f || !f->target || !f->alt) return f;
    unsigned want = e->target == NB_TARGET_CUDA ? NB_TGT_CUDA : NB_TGT_C;
    return f->target == want ? f : f->alt;
}

/* "path:line:col: error: MESSAGE\n<source line>\n<caret>" (no location: "error: MESSAGE"). */
static void fail_at(nb_emitter *e, nb_loc loc, const char *msg)
{
    const nb_source_set *s = e->src;
    if (!s || loc.file < 0 || loc.file >= s->nfiles) {
        nb_emit_fail(e, "error: %s", msg);
        return;
    }
    size_t len = 0;
    const char *line = nb_source_line(s, loc.file, loc.line, &len);
    char caret[256];
    int k = 0;
    for (int i = 0; line && i + 1 < loc.col && (size_t)i < len && k < (int)sizeof caret - 2; i++)
        caret[k++] = line[i] == '\t' ? '\t' : ' ';
    caret[k++] = '^';
    caret[k] = '\0';
    nb_emit_fail(e, "%s:%d:%d: error: %s\n%.*s\n%s", s->files[loc.file].path, loc.line, loc.col, msg,
                 line ? (int)(len > 200 ? 200 : len) : 0, line ? line : "", caret);
}

/* Reads dir/name (dir may be NULL: name as is) into a fresh buffer; NULL when it cannot. */
static char *read_beside(const char *dir, size_t dirlen, const char *name, char *path, size_t cap, size_t *len)
{
    if (dir && dirlen) snprintf(path, cap, "%.*s/%s", (int)dirlen, dir, name);
    else snprintf(path, cap, "%s", name);
    char *data = NULL;
    if (nb_file_read_all(path, "prelude include", 16u << 20, &data, len) != NB_OK) return NULL;
    return data;
}

/* Appends text to out with its `#include "file"` lines replaced by the files (see the top). */
static int inline_includes(nb_emitter *e, const char *text, const char *from, nb_loc loc, int depth, nb_strbuf *out)
{
    const char *q = text;
    while (*q) {
        const char *eol = strchr(q, '\n');
        size_t n = eol ? (size_t)(eol - q) : strlen(q);
        const char *s = q;
        while (s < q + n && (*s == ' ' || *s == '\t')) s++;
        char name[512];
        int inc = 0;
        if (s < q + n && *s == '#') {
            const char *k = s + 1;
            while (k < q + n && (*k == ' ' || *k == '\t')) k++;
            if ((size_t)(q + n - k) > 8 && !strncmp(k, "include", 7)) {
                k += 7;
                while (k < q + n && (*k == ' ' || *k == '\t')) k++;
                const char *c = k < q + n && *k == '"' ? memchr(k + 1, '"', (size_t)(q + n - k - 1)) : NULL;
                if (c && (size_t)(c - k - 1) < sizeof name) {
                    memcpy(name, k + 1, (size_t)(c - k - 1));
                    name[c - k - 1] = '\0';
                    inc = 1;
                }
            }
        }
        if (!inc) {
            nb_strbuf_append_n(out, q, n);
            nb_strbuf_append_char(out, '\n');
        } else {
            char path[1024];
            size_t len = 0;
            const char *slash = from ? strrchr(from, '/') : NULL;
            char *data = name[0] == '/' ? read_beside(NULL, 0, name, path, sizeof path, &len)
                                        : read_beside(from, slash ? (size_t)(slash - from) : 0, name, path, sizeof path, &len);
            for (int i = 0; !data && e->src && name[0] != '/' && i < e->src->nsearch; i++)
                data = read_beside(e->src->search_paths[i], strlen(e->src->search_paths[i]), name, path, sizeof path, &len);
            if (!data) {
                char msg[700];
                snprintf(msg, sizeof msg, "cannot find '%s', included by a __requirePrelude (looked beside %s and on the "
                         "-I paths)", name, from ? from : "the source");
                fail_at(e, loc, msg);
                return 0;
            }
            if (depth >= 16) {
                nb_free(data, len + 1);
                fail_at(e, loc, "__requirePrelude includes nest deeper than 16 files (an include cycle?)");
                return 0;
            }
            nb_strbuf_printf(out, "/* begin %s (__requirePrelude) */\n", name);
            char *keep = nb_arena_strdup(&e->m->arena, path);
            int ok = inline_includes(e, data, keep ? keep : path, loc, depth + 1, out);
            nb_free(data, len + 1);
            if (!ok) return 0;
            nb_strbuf_printf(out, "/* end %s */\n", name);
        }
        q += n;
        if (*q) q++;
    }
    return 1;
}

int nb_emit_target_prepare(nb_emitter *e, nb_ir_func *f)
{
    if (f->missing) {
        char msg[320];
        const char *name = f->decl && f->decl->name ? f->decl->name : f->name;
        snprintf(msg, sizeof msg, "function '%s' has no __target_switch case for the %s back end (add %s or 'default:')",
                 name ? name : "?", e->target == NB_TARGET_CUDA ? "CUDA" : "CPU",
                 e->target == NB_TARGET_CUDA ? "'case cuda:'" : "'case cpp:'");
        fail_at(e, f->missing_loc, msg);
        return 1;
    }
    nb_loc floc = f->decl ? f->decl->loc : f->missing_loc;
    const char *from = e->src && floc.file >= 0 && floc.file < e->src->nfiles ? e->src->files[floc.file].path : NULL;
    for (int i = 0; i < f->npreludes && e->ok; i++) {
        const char *t = f->preludes[i];
        /* once per text: the texts seen so far, each followed by a \1 */
        const char *have = nb_strbuf_cstr(&e->prelude_keys);
        size_t tl = strlen(t);
        int dup = 0;
        for (const char *q = have; q && (q = strstr(q, t)) != NULL; q++)
            if ((q == have || q[-1] == '\1') && q[tl] == '\1') {
                dup = 1;
                break;
            }
        if (dup) continue;
        nb_strbuf_append(&e->prelude_keys, t);
        nb_strbuf_append_char(&e->prelude_keys, '\1');
        inline_includes(e, t, from, floc, 0, &e->preludes);
    }
    return f->asm_text != NULL;
}

void nb_emit_asm_call(nb_emitter *e, nb_ir_func *c, const char *const *args, const nb_type *const *at, int n,
                      nb_strbuf *out)
{
    const char *t = c->asm_text;
    for (const char *q = t; *q; q++) {
        if (*q != '$') {
            nb_strbuf_append_char(out, *q);
            continue;
        }
        const char *d = q + 1;
        if (*d >= '0' && *d <= '9') {
            int i = *d - '0';
            if (i < n) nb_strbuf_append(out, args[i]);
            else nb_emit_fail(e, "internal: __intrinsic_asm of '%s' refers to argument %d of %d", c->name, i, n);
            q = d;
        } else if (*d == 'T' && d[1] == 'R') {
            nb_strbuf_append(out, nb_emit_ctype(e, c->ret));
            q = d + 1;
        } else if (*d == 'P' && d[1] == '_') { /* `$P_exp`: expf / exp by $0's type (checked) */
            const char *nm = d + 2;
            size_t len = 0;
            while ((nm[len] >= 'a' && nm[len] <= 'z') || (nm[len] >= '0' && nm[len] <= '9')) len++;
            int dbl = n > 0 && at[0] && at[0]->kind == NB_TY_SCALAR && at[0]->scalar == NB_SC_DOUBLE;
            const char *fnm = nb_asm_prefixed_math(nm, len, dbl);
            if (fnm) nb_strbuf_append(out, fnm);
            else
                nb_emit_fail(e, "__intrinsic_asm of '%s': '$P_%.*s' has no %s function in nabla (mapped: exp, exp2, "
                             "log, log2, log10, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, sqrt, ceil, floor, "
                             "round, trunc, abs, pow, fmod, atan2, min, max, fma)", c->name, (int)len, nm,
                             e->target == NB_TARGET_CUDA ? "CUDA" : "C");
            q = nm + len - 1;
        } else if (*d == 'T' && d[1] >= '0' && d[1] <= '9') {
            int i = d[1] - '0';
            if (i < n) nb_strbuf_append(out, nb_emit_ctype(e, at[i]));
            q = d + 1;
        } else if (*d == '[') {
            int i = 0;
            const char *x = d + 1;
            while (*x >= '0' && *x <= '9') {
                if (i < 100000) i = i * 10 + (*x - '0');
                x++;
            }
            if (i < c->nasm) {
                if (c->asm_types[i]) nb_strbuf_append(out, nb_emit_ctype(e, c->asm_types[i]));
                else nb_strbuf_append(out, c->asm_vals[i] ? c->asm_vals[i] : "0");
            }
            q = *x == ']' ? x : x - 1;
        } else {
            nb_strbuf_append_char(out, '$'); /* (the checker rejects the others) */
        }
    }
}

void nb_emit_printf(nb_emitter *e, const char *format, const char *const *args, const nb_type *const *at, int n,
                    nb_strbuf *out)
{
    e->need_stdio = 1;
    nb_strbuf_printf(out, "printf(%s", format);
    /* the conversions, in order (the checker matched their number to the arguments) */
    int k = 0;
    for (const char *q = format; *q && k < n; q++) {
        if (*q != '%') continue;
        q++;
        if (*q == '%') continue;
        while (*q && strchr("-+ #0123456789.", *q)) q++;
        const char *cast = strchr("fFeEgGaA", *q) ? "double" : strchr("uxXo", *q) ? "unsigned" : "int";
        (void)at;
        nb_strbuf_printf(out, ", (%s)(%s)", cast, args[k]);
        k++;
    }
    nb_strbuf_append_char(out, ')');
}

int nb_ad_target_specific(nb_source_set *src, const nb_ir_func *f, nb_loc loc)
{
    if (!f->target && !f->asm_text) return 0;
    nb_ad_error(src, loc, "cannot differentiate '%s': it is target-specific code (%s); give it a custom derivative "
                "([ForwardDerivative(…)] / [BackwardDerivative(…)])", f->decl && f->decl->name ? f->decl->name : f->name,
                f->asm_text ? "__intrinsic_asm" : "__target_switch");
    return 1;
}
