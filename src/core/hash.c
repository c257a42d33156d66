/* 64-bit content hash following the xxHash64 algorithm (public specification), in streaming
 * and one-shot forms. Used for cache keys: stable across processes and runs. */
#include <string.h>

#include "core/hash.h"

static const uint64_t P1 = 11400714785074694791ULL;
static const uint64_t P2 = 14029467366897019727ULL;
static const uint64_t P3 = 1609587929392839161ULL;
static const uint64_t P4 = 9650029242287828579ULL;
static const uint64_t P5 = 2870177450012600261ULL;

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t read64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t read32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t round64(uint64_t acc, uint64_t input) {
    acc += input * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v) {
    acc ^= round64(0, v);
    return acc * P1 + P4;
}

void nb_hasher_init(nb_hasher *h, uint64_t seed) {
    h->seed = seed;
    h->v[0] = seed + P1 + P2;
    h->v[1] = seed + P2;
    h->v[2] = seed;
    h->v[3] = seed - P1;
    h->total = 0;
    h->buf_len = 0;
}

void nb_hasher_update(nb_hasher *h, const void *data, size_t len) {
    const unsigned char *p = data;
    h->total += len;
    if (h->buf_len + len < 32) {
        if (len) memcpy(h->buf + h->buf_len, p, len);
        h->buf_len += len;
        return;
    }
    if (h->buf_len) {
        size_t fill = 32 - h->buf_len;
        memcpy(h->buf + h->buf_len, p, fill);
        for (int i = 0; i < 4; i++) h->v[i] = round64(h->v[i], read64(h->buf + 8 * i));
        p += fill;
        len -= fill;
        h->buf_len = 0;
    }
    while (len >= 32) {
        for (int i = 0; i < 4; i++) h->v[i] = round64(h->v[i], read64(p + 8 * i));
        p += 32;
        len -= 32;
    }
    if (len) memcpy(h->buf, p, len);
    h->buf_len = len;
}

uint64_t nb_hasher_final(const nb_hasher *h) {
    uint64_t acc;
    if (h->total >= 32) {
        acc = rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) + rotl(h->v[3], 18);
        for (int i = 0; i < 4; i++) acc = merge(acc, h->v[i]);
    } else {
        acc = h->seed + P5;
    }
    acc += h->total;
    const unsigned char *p = h->buf;
    size_t len = h->buf_len;
    while (len >= 8) {
        acc ^= round64(0, read64(p));
        acc = rotl(acc, 27) * P1 + P4;
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        acc ^= (uint64_t)read32(p) * P1;
        acc = rotl(acc, 23) * P2 + P3;
        p += 4;
        len -= 4;
    }
    while (len) {
        acc ^= (*p) * P5;
        acc = rotl(acc, 11) * P1;
        p++;
        len--;
    }
    acc ^= acc >> 33;
    acc *= P2;
    acc ^= acc >> 29;
    acc *= P3;
    acc ^= acc >> 32;
    return acc;
}

uint64_t nb_hash64(const void *data, size_t len, uint64_t seed) {
    nb_hasher h;
    nb_hasher_init(&h, seed);
    nb_hasher_update(&h, data, len);
    return nb_hasher_final(&h);
}

void nb_hash_hex(uint64_t h, char out[17]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = digits[h & 15];
        h >>= 4;
    }
    out[16] = '\0';
}
