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
 * gradient all-reduce) with the median over ranks to name stragglers.
 *
 * --metrics FILE: rank 0 appends JSON lines (jsonl.h) with global numbers:
 * a "config" record when the loop starts ("resume" after it when the run
 * resumed from a checkpoint), a "step" record per progress line (the step
 * time split into data wait, forward, backward, exposed communication and
 * optimizer, from the phases of activity.h: means over the ranks of each
 * rank's mean over the window, and the minimum and maximum over ranks of
 * the step time; they travel in the progress line's all-gather), an "eval"
 * record per evaluation and a "summary" record at the end.  The keys are
 * listed in docs/outputs.md ("Metrics file").
 *
 * When rank 0's stderr is a terminal the progress shows there as one line
 * redrawn in place (log_status): the global loss and samples/s of the last
 * progress line, the step and an ETA from rank 0's clock; the plain lines
 * then go to stdout only if stdout is not that terminal too. */
#ifndef DDP_METRICS_H
#define DDP_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "activity.h"
#include "status.h"
#include "checkpoint.h"
#include "step.h"
#include "train_result.h"


/* One step's time split (seconds), as metrics_step_end measured it: the
 * parts data .. optim sum to at most step; compute is the step less its
 * data wait and every wait in a collective (what the straggler check
 * compares). */
typedef struct metrics_split {
    double step, data, forward, backward, comm, optim, compute;
} metrics_split_t;

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
    double step_start, step_wait, step_comm; /* step_comm: activity_wait_seconds() */
    /* per-step times of the first `cap` steps, for the medians */
    double *step_s, *wait_s, *compute_s;
    size_t nsteps, cap;
    /* all ranks: the gathered records, the progress line at which each rank
     * was last named a straggler (host names: control_host) */
    int nranks;
    void *gathered;
    int64_t *named_at;
    double *scratch; /* nranks values */
    double *busy;    /* nranks values: busy seconds per step of the window */
    int64_t nlines;  /* progress lines so far */
    /* the progress window's step-time split, this rank's sums */
    int64_t win_steps;
    double win_step_s, win_data_s, win_forward_s, win_backward_s, win_comm_s, win_optim_s;
    uint64_t window_bytes;          /* reducer bytes at the window's start */
    double step_phase[PHASE_COUNT]; /* activity_phase_seconds() at the step's start */
    double step_rwait;              /* reducer wait at the step's start */
    double grad_norm;               /* of the last step (NaN: not computed) */
    metrics_split_t last;           /* the last step timed (metrics_step_end) */
    /* the status line (log_status): the last global loss and samples/s,
     * when it was last drawn */
    double status_loss, status_sps, status_drawn;
    /* --metrics: rank 0's file (NULL: none, or not rank 0) */
    FILE *jsonl;
    int jsonl_failed; /* a write failed: warned once, no more records */
} metrics_t;

/* Start-up, before any data is read (local; agree on the result): rank 0
 * opens --metrics for appending.  A path that cannot be opened is
 * DDP_ERR_IO; one that is an input of the run, or not a regular file, is
 * DDP_ERR_USAGE.  metrics_init keeps the file. */
ddp_status_t metrics_open(metrics_t *mt, const trainer_t *t);
/* Local (agree on the result); rank 0 writes the "config" record, and
 * the "resume" record when resume is active (where the run goes on from). */
ddp_status_t metrics_init(metrics_t *mt, const trainer_t *t, const ckpt_resume_t *resume);
void metrics_free(metrics_t *mt);
void metrics_step_begin(metrics_t *mt, const trainer_t *t);
/* After the step `step` (1-based) of epoch `epoch` (0-based); on rank 0
 * with a status line (log.h) it is redrawn, at most 5 times a second. */
void metrics_step_end(metrics_t *mt, const trainer_t *t, int64_t epoch, int64_t step);
/* The progress line at `step` (collective): the global mean loss since the
 * last line (res->last_loss), lr, samples/s, data and comm wait; then a
 * warning naming the ranks whose busy time per step, over the last 10 or
 * more steps, exceeds cfg->straggler_factor times the median over ranks (and
 * the median by more than 1 ms), each rank at most once per 10 progress
 * lines.  A non-finite
 * loss is DDP_ERR_NUMERIC on every rank. */
ddp_status_t metrics_log(metrics_t *mt, trainer_t *t, int64_t epoch, int64_t step,
                         train_result_t *res);
/* The closing lines (collective): throughput over all ranks, rank 0's
 * medians, traffic, memory, and the minimum, median and maximum over ranks
 * of each rank's median step, compute and data-wait time, naming the ranks
 * of the minimum and the maximum. */
void metrics_summary(metrics_t *mt, trainer_t *t, int64_t steps, double elapsed);
/* Rank 0 with --metrics: one more record (diagnose.c's) to the file, as
 * the others (a failed write is warned about once); frees r. */
struct jsonl_rec;
void metrics_write(metrics_t *mt, const trainer_t *t, struct jsonl_rec *r);
/* An evaluation's global result (rank 0 writes the "eval" record; val_acc
 * NaN for regression). */
void metrics_eval(metrics_t *mt, const trainer_t *t, int64_t epoch, int64_t step,
                  double val_loss, double val_acc, int64_t samples);

/* The status line's text: "epoch E/N  step S/T  loss L  X samples/s  ETA
 * H:MM:SS" (epoch 1-based; loss and samples_per_s NaN: none yet, shown as
 * "-"; eta_s not finite or negative: "ETA -"). */
void metrics_status_format(char *buf, size_t n, int64_t epoch, int64_t epochs, int64_t step,
                           int64_t total, double loss, double samples_per_s, double eta_s);

/* Memory probes (MiB): peak resident set; proportional set size now (-1
 * where the system does not say). */
double metrics_peak_rss_mib(void);
double metrics_pss_mib(void);

#endif
