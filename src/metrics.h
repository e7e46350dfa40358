/* metrics.h -- what a run reports while it trains: per-step times (medians
 * in the summary), the periodic progress line with the global loss, the
 * closing summary, memory probes.  Rank 0 prints; sums over ranks travel on
 * the control plane. */
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
    /* the step being timed */
    double step_start, step_wait;
    /* per-step times of the first `cap` steps, for the medians */
    double *step_s, *wait_s;
    size_t nsteps, cap;
} metrics_t;

/* Local (agree on the result). */
ddp_status_t metrics_init(metrics_t *mt, const struct trainer *t);
void metrics_free(metrics_t *mt);
void metrics_step_begin(metrics_t *mt, const struct trainer *t);
void metrics_step_end(metrics_t *mt, const struct trainer *t);
/* The progress line at `step` (collective): the global mean loss since the
 * last line (res->last_loss), lr, samples/s, data and comm wait.  A
 * non-finite loss is DDP_ERR_NUMERIC on every rank. */
ddp_status_t metrics_log(metrics_t *mt, struct trainer *t, int64_t epoch, int64_t step,
                         train_result_t *res);
/* The closing lines (collective): throughput over all ranks, medians,
 * traffic, memory. */
void metrics_summary(metrics_t *mt, struct trainer *t, int64_t steps, double elapsed);

/* Memory probes (MiB): peak resident set; proportional set size now (-1
 * where the system does not say). */
double metrics_peak_rss_mib(void);
double metrics_pss_mib(void);

#endif
