/* Growable NUL-terminated string builder. Never fails silently: on out-of-memory it sets
 * `oom` and further appends are ignored; check nb_strbuf_ok() before using the result. */
#ifndef NB_CORE_STRBUF_H
#define NB_CORE_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct nb_strbuf {
    char *data; /* always NUL-terminated once anything was appended; NULL when empty */
    size_t len;
    size_t cap;
    int oom;
} nb_strbuf;

void nb_strbuf_init(nb_strbuf *sb);
void nb_strbuf_free(nb_strbuf *sb);
void nb_strbuf_clear(nb_strbuf *sb);               /* length 0, keeps capacity */
void nb_strbuf_append(nb_strbuf *sb, const char *s);
void nb_strbuf_append_n(nb_strbuf *sb, const char *s, size_t n);
void nb_strbuf_append_char(nb_strbuf *sb, char c);
void nb_strbuf_printf(nb_strbuf *sb, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void nb_strbuf_vprintf(nb_strbuf *sb, const char *fmt, va_list ap);
int nb_strbuf_ok(const nb_strbuf *sb);
const char *nb_strbuf_cstr(const nb_strbuf *sb);   /* "" when empty */
/* Hands the string to the caller (free with nb_free(p, len + 1)); the builder becomes empty. */
char *nb_strbuf_take(nb_strbuf *sb, size_t *len);

#endif
