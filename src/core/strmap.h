/* String-keyed hash map (open addressing, linear probing): the compiler's name tables (the
 * checker's scopes and module indexes, the emitter's name uniquing, lowering's function names)
 * and the safetensors reader's tensor and metadata names.
 * Keys are not copied: the caller keeps them alive as long as the map. With an arena the table
 * lives in it (nb_strmap_free is then a no-op); without one it comes from nb_alloc. Entries are
 * never removed; store a "none" value instead. */
#ifndef NB_CORE_STRMAP_H
#define NB_CORE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"

typedef struct nb_strmap_slot {
    const char *key;  /* NULL: empty */
    uint64_t hash;
    void *val;
} nb_strmap_slot;

typedef struct nb_strmap {
    nb_strmap_slot *slots;
    int cap, count;
    nb_arena *arena;  /* NULL: nb_alloc / nb_free */
} nb_strmap;

void nb_strmap_init(nb_strmap *m, nb_arena *arena);
void nb_strmap_free(nb_strmap *m);
/* The slot holding key, or NULL. */
nb_strmap_slot *nb_strmap_find(const nb_strmap *m, const char *key);
/* The slot for key, inserted with val NULL when new (*isnew = 1); NULL when out of memory. */
nb_strmap_slot *nb_strmap_get(nb_strmap *m, const char *key, int *isnew);

/* Pointer-keyed map (same conventions; a NULL key is never stored: get returns NULL for it). */
typedef struct nb_ptrmap_slot {
    const void *key;  /* NULL: empty */
    void *val;
} nb_ptrmap_slot;

typedef struct nb_ptrmap {
    nb_ptrmap_slot *slots;
    int cap, count;
    nb_arena *arena;
} nb_ptrmap;

void nb_ptrmap_init(nb_ptrmap *m, nb_arena *arena);
void nb_ptrmap_free(nb_ptrmap *m);
void *nb_ptrmap_get(const nb_ptrmap *m, const void *key);
/* Sets key's value (replacing an earlier one); 0 when out of memory. */
int nb_ptrmap_put(nb_ptrmap *m, const void *key, void *val);

#endif
