/* hash.h -- FNV-1a, 64 bit: the fingerprints ranks compare (start-up
 * consistency check, replica check). */
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

#endif
