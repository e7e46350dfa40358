/* sampler.c -- the world-size invariant distributed sampler (see sampler.h).
 *
 * The epoch's permutation is a keyed bijection on [0, N), computed per
 * position and never stored: a 4-round Feistel network on the smallest
 * domain 4^k >= N (two k-bit halves) whose round functions are Philox
 * keyed by (seed, epoch, round), with cycle walking (re-encrypt while the
 * value is >= N).  The domain is below 4N, so a position takes fewer than
 * 4 encryptions on average.
 */
#include "sampler.h"

#include "rng.h"

void sampler_init(sampler_t *s, int64_t n, int world, int rank, int batch, uint64_t seed,
                  int shuffle, int drop_last)
{
    s->n = n < 0 ? 0 : n;
    s->world = world < 1 ? 1 : world;
    s->rank = rank;
    s->batch = batch < 1 ? 1 : batch;
    s->seed = seed;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    int64_t global = (int64_t)s->batch * s->world;
    if (drop_last) {
        s->steps = s->n / global;
        s->limit = s->steps * global;
    } else {
        s->steps = (s->n + global - 1) / global;
        s->limit = s->n;
    }
    int bits = 1;
    while (bits < 31 && ((int64_t)1 << (2 * bits)) < s->n) bits++;
    s->perm_bits = bits;
    sampler_set_epoch(s, 0);
}

void sampler_set_epoch(sampler_t *s, int64_t epoch)
{
    s->epoch = epoch;
    uint64_t key = ddp_key(s->seed, DDP_STREAM_SAMPLER, (uint64_t)epoch);
    for (int r = 0; r < 4; r++) s->perm_keys[r] = ddp_mix64(key + (uint64_t)r);
}

/* One encryption of v (2 * perm_bits bits wide). */
static uint64_t feistel_(const sampler_t *s, uint64_t v)
{
    int h = s->perm_bits;
    uint64_t mask = ((uint64_t)1 << h) - 1;
    uint64_t left = v >> h, right = v & mask;
    for (int r = 0; r < 4; r++) {
        uint64_t k = s->perm_keys[r];
        ddp_u32x4_t f = ddp_rand4(k, right, (uint64_t)r);
        uint64_t fr = (((uint64_t)f.v[1] << 32) | f.v[0]) & mask;
        uint64_t next = left ^ fr;
        left = right;
        right = next;
    }
    return (left << h) | right;
}

int64_t sampler_perm(const sampler_t *s, int64_t pos)
{
    if (!s->shuffle || s->n <= 1) return pos;
    uint64_t v = (uint64_t)pos;
    do {
        v = feistel_(s, v);
    } while (v >= (uint64_t)s->n);
    return (int64_t)v;
}

int sampler_batch(const sampler_t *s, int64_t step, int64_t *idx)
{
    if (step < 0 || step >= s->steps) return 0;
    int count = 0;
    int64_t base = step * (int64_t)s->batch;
    for (int j = 0; j < s->batch; j++) {
        int64_t pos = (base + j) * s->world + s->rank;
        if (pos >= s->limit) break;
        idx[count++] = sampler_perm(s, pos);
    }
    return count;
}

int64_t sampler_global_count(const sampler_t *s, int64_t step)
{
    if (step < 0 || step >= s->steps) return 0;
    int64_t global = (int64_t)s->batch * s->world;
    int64_t lo = step * global, hi = lo + global;
    if (hi > s->limit) hi = s->limit;
    return hi > lo ? hi - lo : 0;
}
