/* straggler.c -- the ranks a straggler warning names (see straggler.h). */
#include "straggler.h"

#include <stdlib.h>

static int cmp_double_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void straggler_pick(const double *busy, int n, const straggler_rule_t *rule, int64_t *named_at,
                    int64_t line, double *scratch, straggler_pick_t *out)
{
    *out = (straggler_pick_t){.median = 0};
    if (n <= 0) return;
    for (int r = 0; r < n; r++) scratch[r] = busy[r];
    /* the lower median: with 2 ranks (or half the ranks slow) the typical
     * rank, not the mean of a slow and a fast one */
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_double_);
    double med = scratch[(n - 1) / 2];
    out->median = med;
    for (int r = 0; r < n; r++) {
        double b = busy[r];
        if (!(b > rule->factor * med && b - med > rule->min_excess)) continue;
        if (named_at[r] >= 0 && line - named_at[r] < rule->name_every) continue;
        named_at[r] = line;
        out->ndue++;
        /* keep the slowest STRAGGLER_NAME_MAX, slowest first (ties: lower rank) */
        int at = out->ntop < STRAGGLER_NAME_MAX ? out->ntop++ : STRAGGLER_NAME_MAX;
        while (at > 0) {
            if (b <= busy[out->top[at - 1]]) break;
            if (at < STRAGGLER_NAME_MAX) out->top[at] = out->top[at - 1];
            at--;
        }
        if (at < STRAGGLER_NAME_MAX) out->top[at] = r;
    }
}
