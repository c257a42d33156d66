/* Lookup of the embedded standard modules (stdlib.h). */
#include "lang/stdlib.h"

#include <string.h>

const char *nb_stdlib_find(const char *name)
{
    if (!name) return NULL;
    for (const nb_stdlib_module *m = nb_stdlib_modules; m->name; m++)
        if (strcmp(m->name, name) == 0) return m->text;
    return NULL;
}
