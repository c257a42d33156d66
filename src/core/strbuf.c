/* Growable string builder over nb_alloc. */
#include <stdio.h>
#include <string.h>

#include "core/strbuf.h"
#include "nabla/alloc.h"

void nb_strbuf_init(nb_strbuf *sb) {
    sb->data = NULL;
    sb->len = sb->cap = 0;
    sb->oom = 0;
}

void nb_strbuf_free(nb_strbuf *sb) {
    nb_free(sb->data, sb->cap);
    nb_strbuf_init(sb);
}

void nb_strbuf_clear(nb_strbuf *sb) {
    sb->len = 0;
    if (sb->data) sb->data[0] = '\0';
}

/* Makes room for `extra` more bytes plus the terminator. */
static int nb_strbuf_reserve(nb_strbuf *sb, size_t extra) {
    if (sb->oom) return 0;
    size_t need = sb->len + extra + 1;
    if (need < sb->len) { sb->oom = 1; return 0; }
    if (need <= sb->cap) return 1;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < need) {
        if (cap > ((size_t)-1) / 2) { sb->oom = 1; return 0; }
        cap *= 2;
    }
    char *p = nb_alloc(cap, 16);
    if (!p) { sb->oom = 1; return 0; }
    if (sb->data) memcpy(p, sb->data, sb->len + 1);
    else p[0] = '\0';
    nb_free(sb->data, sb->cap);
    sb->data = p;
    sb->cap = cap;
    return 1;
}

void nb_strbuf_append_n(nb_strbuf *sb, const char *s, size_t n) {
    if (!nb_strbuf_reserve(sb, n)) return;
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void nb_strbuf_append(nb_strbuf *sb, const char *s) { nb_strbuf_append_n(sb, s, strlen(s)); }

void nb_strbuf_append_char(nb_strbuf *sb, char c) { nb_strbuf_append_n(sb, &c, 1); }

void nb_strbuf_vprintf(nb_strbuf *sb, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) { sb->oom = 1; return; }
    if (!nb_strbuf_reserve(sb, (size_t)n)) return;
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
}

void nb_strbuf_printf(nb_strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    nb_strbuf_vprintf(sb, fmt, ap);
    va_end(ap);
}

int nb_strbuf_ok(const nb_strbuf *sb) { return !sb->oom; }

const char *nb_strbuf_cstr(const nb_strbuf *sb) { return sb->data ? sb->data : ""; }

char *nb_strbuf_take(nb_strbuf *sb, size_t *len) {
    if (!sb->data && !nb_strbuf_reserve(sb, 0)) return NULL;
    /* Shrink to the exact size so the caller can free with nb_free(p, len + 1). */
    char *p = nb_alloc(sb->len + 1, 16);
    if (!p) { sb->oom = 1; return NULL; }
    memcpy(p, sb->data, sb->len + 1);
    if (len) *len = sb->len;
    nb_strbuf_free(sb);
    return p;
}
