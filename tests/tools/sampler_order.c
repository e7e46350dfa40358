/* sampler_order.c -- prints ddptrain's sample order (src/data/sampler.c), for
 * the end-to-end scripts that check it against PyTorch's DistributedSampler
 * (tests/e2e/test_torch_epochs.sh).
 *
 *   sampler_order N W B SEED EPOCHS [no-drop-last]
 *
 * N samples, W ranks, per-rank batch B, --seed SEED, shuffled, drop_last
 * unless told otherwise: the sampler_init arguments of the trainer
 * (src/train/startup.c: the deck's sample count, the world size, the rank,
 * --batch, (uint64_t)--seed, shuffle, drop_last; the loader thread works on a
 * copy of it and calls sampler_set_epoch(e) for every epoch e).  Prints, for
 * every epoch e in [0, EPOCHS):
 *
 *   perm E i_0 ... i_{N-1}           the epoch's permutation (sampler_perm)
 *   batch E R T i_0 ... i_{k-1}      rank R's samples of batch T, in order
 *                                    (sampler_batch; k = B, or fewer
 *                                    without drop_last)
 *
 * one line each, numbers separated by single spaces. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

static int arg_(const char *s, long long lo, long long *v)
{
    char *end;
    *v = strtoll(s, &end, 10);
    return *s && !*end && *v >= lo;
}

int main(int argc, char **argv)
{
    long long n, w, b, seed, epochs;
    int drop_last = 1;
    if (argc == 7 && strcmp(argv[6], "no-drop-last") == 0) drop_last = 0;
    if ((argc != 6 && !(argc == 7 && !drop_last)) || !arg_(argv[1], 1, &n) ||
        !arg_(argv[2], 1, &w) || !arg_(argv[3], 1, &b) || !arg_(argv[4], 0, &seed) ||
        !arg_(argv[5], 1, &epochs)) {
        fprintf(stderr, "usage: sampler_order N W B SEED EPOCHS [no-drop-last]\n");
        return 2;
    }
    int64_t *idx = malloc((size_t)b * sizeof *idx);
    sampler_t *s = malloc((size_t)w * sizeof *s);
    if (!idx || !s) {
        fprintf(stderr, "sampler_order: out of memory\n");
        return 1;
    }
    for (int r = 0; r < (int)w; r++)
        sampler_init(&s[r], (int64_t)n, (int)w, r, (int)b, (uint64_t)seed, 1, drop_last);
    for (int64_t e = 0; e < (int64_t)epochs; e++) {
        for (int r = 0; r < (int)w; r++) sampler_set_epoch(&s[r], e);
        printf("perm %" PRId64, e);
        for (int64_t p = 0; p < (int64_t)n; p++) printf(" %" PRId64, sampler_perm(&s[0], p));
        putchar('\n');
        for (int r = 0; r < (int)w; r++)
            for (int64_t t = 0; t < s[r].steps; t++) {
                int k = sampler_batch(&s[r], t, idx);
                printf("batch %" PRId64 " %d %" PRId64, e, r, t);
                for (int i = 0; i < k; i++) printf(" %" PRId64, idx[i]);
                putchar('\n');
            }
    }
    free(idx);
    free(s);
    return fflush(stdout) == 0 ? 0 : 1;
}
