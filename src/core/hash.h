/* Fast non-cryptographic content hash (64-bit, xxHash64-style mixing), used for cache keys and
 * hash tables. Stable across runs and machines of the same endianness. */
#ifndef NB_CORE_HASH_H
#define NB_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t nb_hash64(const void *data, size_t len, uint64_t seed);
/* Streaming form: equal to nb_hash64 over the concatenation of everything fed. */
typedef struct nb_hasher {
    uint64_t v[4];
    uint64_t total;
    uint64_t seed;
    unsigned char buf[32];
    size_t buf_len;
} nb_hasher;
void nb_hasher_init(nb_hasher *h, uint64_t seed);
void nb_hasher_update(nb_hasher *h, const void *data, size_t len);
uint64_t nb_hasher_final(const nb_hasher *h);
/* 16 lowercase hex digits + NUL into out[17]. */
void nb_hash_hex(uint64_t h, char out[17]);

#endif
