/* metrics.h -- what a run reports while it trains: per-step times (medians
 * in the summary), the periodic progress line with the global loss, the
 * straggler warning, the closing summary, memory probes.  Rank 0 prints.
 *
 * At every progress line each rank contributes one small record (its loss
 * sum and samples of the window, its compute and data-wait seconds since
 * the last straggler check) to one all-gather on the control plane; every
 * rank sums the gathered records in rank order, so all get bit-identical
 * global values, and rank 0 compares the ranks' busy time per step (compute
 * + data wait: the step less the time it waited for the other ranks in the
 * gradient all-reduce) with the median over ranks to name stragglers. */
#ifndef DDP_METRICS_H
#define DDP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "train.h"

struct trainer;

typedef struct metrics {
    double t_start;  /* start of the loop */
    int64_t samples; /* local samples trained on so far */
    /* the current progress window (since the last progress line) */
    double window_start;    /* clock */
    double window_wait;     /* loader wait at its start */
    double window_comm;     /* reducer wait at its start */
    int64_t window_samples; /* samples at its start */
    /* the steps since the last straggler check (at least 10 steps are
     * judged together, over one or more progress windows) */
    int64_t check_first;  /* the first of them (1-based) */
    int64_t check_steps;  /* how many */
    double check_compute; /* their compute seconds (step - data wait - comm wait) */
    double check_dwait;   /* their data-wait seconds */
    /* the step being timed: clock, loader wait, reducer wait at its start */
    double step_start, step_wait, step_comm; /* step_comm: progress_wait_seconds() */
    /* per-step times of the first `cap` steps, for the medians */
    double *step_s, *wait_s, *compute_s;
    size_t nsteps, cap;
    /* all ranks: the gathered records, the progress line at which each rank
     * was last named a straggler (host names: control_host) */
    int nranks;
    void *gathered;
    int64_t *named_at;
    double *scratch; /* nranks values */
    int64_t nlines;  /* progress lines so far */
} metrics_t;

/* Local (agree on the result). */
ddp_status_t metrics_init(metrics_t *mt, const struct trainer *t);
void metrics_free(metrics_t *mt);
void metrics_step_begin(metrics_t *mt, const struct trainer *t);
void metrics_step_end(metrics_t *mt, const struct trainer *t);
/* The progress line at `step` (collective): the global mean loss since the
 * last line (res->last_loss), lr, samples/s, data and comm wait; then a
 * warning naming the ranks whose busy time per step, over the last 10 or
 * more steps, exceeds cfg->straggler_factor times the median over ranks (and
 * the median by more than 1 ms), each rank at most once per 10 progress
 * lines.  A non-finite
 * loss is DDP_ERR_NUMERIC on every rank. */
ddp_status_t metrics_log(metrics_t *mt, struct trainer *t, int64_t epoch, int64_t step,
                         train_result_t *res);
/* The closing lines (collective): throughput over all ranks, rank 0's
 * medians, traffic, memory, and the minimum, median and maximum over ranks
 * of each rank's median step, compute and data-wait time, naming the ranks
 * of the minimum and the maximum. */
void metrics_summary(metrics_t *mt, struct trainer *t, int64_t steps, double elapsed);

/* Memory probes (MiB): peak resident set; proportional set size now (-1
 * where the system does not say). */
double metrics_peak_rss_mib(void);
double metrics_pss_mib(void);

#endif
