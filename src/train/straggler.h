/* straggler.h -- which ranks a straggler warning names (metrics.c checks
 * at every progress line, on rank 0).  A rank is due when its busy time per
 * step (compute + data wait) exceeds --straggler-factor times the lower
 * median over the ranks, and the median by a minimum excess (on an
 * oversubscribed node a rank descheduled for a moment must not be named),
 * unless it was named within the last name_every lines.  The slowest
 * STRAGGLER_NAME_MAX due ranks are named, slowest first (ties: the lower
 * rank); the others are counted.  No clock, no I/O: tests/unit/
 * check_metrics.c runs it on made-up times. */
#ifndef DDP_STRAGGLER_H
#define DDP_STRAGGLER_H

#include <stdint.h>

#define STRAGGLER_NAME_MAX 3

typedef struct straggler_rule {
    double factor;      /* --straggler-factor */
    double min_excess;  /* seconds per step above the median, at least */
    int64_t name_every; /* lines between two namings of one rank */
} straggler_rule_t;

typedef struct straggler_pick {
    double median;                /* the lower median of busy */
    int ndue;                     /* ranks due */
    int ntop;                     /* of them named, in top */
    int top[STRAGGLER_NAME_MAX];  /* slowest first */
} straggler_pick_t;

/* busy[n]: each rank's seconds per step; named_at[n]: the line each rank
 * was last named at (-1: never), set to `line` for the ranks due now;
 * scratch: n doubles. */
void straggler_pick(const double *busy, int n, const straggler_rule_t *rule, int64_t *named_at,
                    int64_t line, double *scratch, straggler_pick_t *out);

#endif
