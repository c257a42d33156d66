/* String-keyed hash map (see strmap.h). */
#include "core/strmap.h"

#include <string.h>

#include "core/hash.h"
#include "nabla/alloc.h"

void nb_strmap_init(nb_strmap *m, nb_arena *arena)
{
    memset(m, 0, sizeof *m);
    m->arena = arena;
}

void nb_strmap_free(nb_strmap *m)
{
    if (!m->arena && m->slots) nb_free(m->slots, sizeof *m->slots * (size_t)m->cap);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static uint64_t key_hash(const char *key) { return nb_hash64(key, strlen(key), 0x6e61626c61ull); }

static nb_strmap_slot *probe(const nb_strmap *m, const char *key, uint64_t h)
{
    size_t mask = (size_t)m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        nb_strmap_slot *s = &m->slots[i];
        if (!s->key || (s->hash == h && strcmp(s->key, key) == 0)) return s;
    }
}

nb_strmap_slot *nb_strmap_find(const nb_strmap *m, const char *key)
{
    if (!m->cap || !key) return NULL;
    nb_strmap_slot *s = probe(m, key, key_hash(key));
    return s->key ? s : NULL;
}

static int grow(nb_strmap *m)
{
    int ncap = m->cap ? m->cap * 2 : 64;
    size_t bytes = sizeof(nb_strmap_slot) * (size_t)ncap;
    nb_strmap_slot *n = m->arena ? nb_arena_alloc(m->arena, bytes, sizeof(void *)) : nb_alloc(bytes, 16);
    if (!n) return 0;
    memset(n, 0, bytes);
    nb_strmap old = *m;
    m->slots = n;
    m->cap = ncap;
    for (int i = 0; i < old.cap; i++)
        if (old.slots[i].key) *probe(m, old.slots[i].key, old.slots[i].hash) = old.slots[i];
    if (!m->arena && old.slots) nb_free(old.slots, sizeof *old.slots * (size_t)old.cap);
    return 1;
}

nb_strmap_slot *nb_strmap_get(nb_strmap *m, const char *key, int *isnew)
{
    if (isnew) *isnew = 0;
    if (!key) return NULL;
    if ((m->count + 1) * 2 > m->cap && !grow(m)) return NULL;
    uint64_t h = key_hash(key);
    nb_strmap_slot *s = probe(m, key, h);
    if (!s->key) {
        s->key = key;
        s->hash = h;
        s->val = NULL;
        m->count++;
        if (isnew) *isnew = 1;
    }
    return s;
}

/* ---- pointer keys ---------------------------------------------------------------------------- */

void nb_ptrmap_init(nb_ptrmap *m, nb_arena *arena)
{
    memset(m, 0, sizeof *m);
    m->arena = arena;
}

void nb_ptrmap_free(nb_ptrmap *m)
{
    if (!m->arena && m->slots) nb_free(m->slots, sizeof *m->slots * (size_t)m->cap);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

static nb_ptrmap_slot *pprobe(const nb_ptrmap *m, const void *key)
{
    size_t mask = (size_t)m->cap - 1;
    for (size_t i = ptr_hash(key) & mask;; i = (i + 1) & mask)
        if (!m->slots[i].key || m->slots[i].key == key) return &m->slots[i];
}

void *nb_ptrmap_get(const nb_ptrmap *m, const void *key)
{
    if (!m->cap || !key) return NULL;
    return pprobe(m, key)->val;
}

int nb_ptrmap_put(nb_ptrmap *m, const void *key, void *val)
{
    if (!key) return 1;
    if ((m->count + 1) * 2 > m->cap) {
        int ncap = m->cap ? m->cap * 2 : 64;
        size_t bytes = sizeof(nb_ptrmap_slot) * (size_t)ncap;
        nb_ptrmap_slot *n = m->arena ? nb_arena_alloc(m->arena, bytes, sizeof(void *)) : nb_alloc(bytes, 16);
        if (!n) return 0;
        memset(n, 0, bytes);
        nb_ptrmap old = *m;
        m->slots = n;
        m->cap = ncap;
        for (int i = 0; i < old.cap; i++)
            if (old.slots[i].key) *pprobe(m, old.slots[i].key) = old.slots[i];
        if (!m->arena && old.slots) nb_free(old.slots, sizeof *old.slots * (size_t)old.cap);
    }
    nb_ptrmap_slot *s = pprobe(m, key);
    if (!s->key) {
        s->key = key;
        m->count++;
    }
    s->val = val;
    return 1;
}
