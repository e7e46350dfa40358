/* rng.h -- counter-based random numbers (Philox4x32-10) and keyed streams.
 *
 * Every random number ddptrain draws is a pure function of a key and a
 * counter, never of hidden state, so results do not depend on which rank or
 * thread draws them or in which order:
 *   - parameter init:  (seed, tensor index, element index)
 *   - dropout masks:   (seed, step, global sample index, layer, element)
 *   - augmentation:    (seed, epoch, global sample index)
 *   - the sampler's permutation: (seed, epoch), see sampler.c
 * Header-only so the CUDA kernels use the very same functions (DDP_HD).
 */
#ifndef DDP_RNG_H
#define DDP_RNG_H

#include <stdint.h>

#include "hostdev.h"

typedef struct ddp_u32x4 {
    uint32_t v[4];
} ddp_u32x4_t;

/* Philox4x32 with 10 rounds (Salmon et al., SC'11), as in cuRAND and Random123. */
DDP_HD ddp_u32x4_t ddp_philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                              uint32_t k1)
{
    for (int i = 0; i < 10; i++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    ddp_u32x4_t r = {{c0, c1, c2, c3}};
    return r;
}

/* SplitMix64 finaliser: mixes several ids into one 64-bit key. */
DDP_HD uint64_t ddp_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

DDP_HD uint64_t ddp_key(uint64_t seed, uint64_t stream, uint64_t id)
{
    return ddp_mix64(ddp_mix64(seed ^ ddp_mix64(stream)) ^ id);
}

/* Four uniform 32-bit words for (key, 64-bit a, 64-bit b). */
DDP_HD ddp_u32x4_t ddp_rand4(uint64_t key, uint64_t a, uint64_t b)
{
    return ddp_philox((uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b, (uint32_t)(b >> 32),
                      (uint32_t)key, (uint32_t)(key >> 32));
}

/* Uniform float in [0, 1) from 24 random bits. */
DDP_HD float ddp_u01(uint32_t x)
{
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* Streams (the `stream` argument of ddp_key): keep them distinct. */
enum {
    DDP_STREAM_INIT = 1,    /* parameter initialisation, id = tensor index */
    DDP_STREAM_DROPOUT = 2, /* id = (step << 16) | layer */
    DDP_STREAM_AUGMENT = 3, /* id = epoch */
    DDP_STREAM_SAMPLER = 4, /* id = epoch */
    DDP_STREAM_DATA = 5     /* synthetic data generation (ddptrain-prep) */
};

/* Dropout: the keep decision for element `elem` of global sample `sample`.
 * keep iff u01 >= p; the same on every backend and every world size. */
DDP_HD int ddp_dropout_keep(uint64_t seed, uint64_t step, uint32_t layer, int64_t sample,
                            uint64_t elem, float p)
{
    uint64_t key = ddp_key(seed, DDP_STREAM_DROPOUT, (step << 16) ^ layer);
    ddp_u32x4_t r = ddp_rand4(key, (uint64_t)sample, elem >> 2);
    return ddp_u01(r.v[elem & 3]) >= p;
}

#endif
