/* hash.h -- FNV-1a, 64 bit: the fingerprints ranks compare (start-up
 * consistency check, replica check); and a faster checksum for large
 * arrays (checkpoint contents). */
#ifndef DDP_HASH_H
#define DDP_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_SEED 0xcbf29ce484222325ull

/* Continue hash h over n bytes (start with HASH_SEED). */
static inline uint64_t hash_bytes(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Continue checksum h over n bytes, 32 bytes at a time in four independent
 * lanes (several GB/s; the checksum of a checkpoint's arrays). */
static inline uint64_t hash_words(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t lane[4] = {h, h ^ 0x9e3779b97f4a7c15ull, h ^ 0xc2b2ae3d27d4eb4full,
                        h ^ 0x165667b19e3779f9ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            __builtin_memcpy(&w, p + i + 8 * k, 8);
            lane[k] = (lane[k] ^ w) * 0x100000001b3ull;
            lane[k] ^= lane[k] >> 29;
        }
    uint64_t out = HASH_SEED;
    out = hash_bytes(out, lane, sizeof lane);
    out = hash_bytes(out, &n, sizeof n);
    return hash_bytes(out, p + i, n - i);
}

#endif
