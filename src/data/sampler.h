/* sampler.h -- which global samples each rank trains on, step by step.
 *
 * PyTorch DistributedSampler semantics, made world-size invariant: each
 * epoch a permutation perm of [0, N) that depends only on (seed, epoch)
 * (the identity with --no-shuffle); rank r takes positions r, r+W, r+2W, ...
 * so rank r's batch t holds perm[r + W*j] for j in [t*B, (t+1)*B), and the
 * union of all ranks' batch t is exactly perm[t*B*W, (t+1)*B*W): what one
 * rank with batch B*W sees at step t.
 *
 * drop_last: steps = floor(N / (B*W)), every rank full at every step.
 * Otherwise steps = ceil(N / (B*W)); positions >= N are absent, so ranks can
 * run short or empty in the last step (Join semantics: they still take part
 * in every collective, with zero samples).
 *
 * The permutation is computed, not stored (a keyed bijection on [0, N)), so
 * memory does not grow with N.
 */
#ifndef DDP_SAMPLER_H
#define DDP_SAMPLER_H

#include <stdint.h>

typedef struct sampler {
    int64_t n; /* samples in the dataset */
    int world, rank;
    int batch; /* per-rank batch */
    uint64_t seed;
    int shuffle, drop_last;
    int64_t steps; /* steps per epoch, the same on every rank */
    int64_t limit; /* positions >= limit are not used */
    int64_t epoch;
    /* permutation parameters for the current epoch (sampler.c) */
    uint64_t perm_keys[4];
    int perm_bits;
} sampler_t;

void sampler_init(sampler_t *s, int64_t n, int world, int rank, int batch, uint64_t seed,
                  int shuffle, int drop_last);
void sampler_set_epoch(sampler_t *s, int64_t epoch);
/* Global sample index at position pos of this epoch's permutation. */
int64_t sampler_perm(const sampler_t *s, int64_t pos);
/* This rank's global indices of batch `step` of the epoch; returns how many
 * (B, fewer, or 0). */
int sampler_batch(const sampler_t *s, int64_t step, int64_t *idx);
/* Samples in batch `step` summed over all ranks. */
int64_t sampler_global_count(const sampler_t *s, int64_t step);

#endif
