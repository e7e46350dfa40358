/* nonfinite.h -- the non-finite guard of every training step
 * (--on-nonfinite abort|skip, --max-skips), and --inject nan, the fault that
 * proves it fires.
 *
 *   abort mode: a non-finite loss on this rank ends the job (DDP_ERR_NUMERIC,
 *     exit code 8) naming the step, the samples of the micro-batch, their
 *     file and row, and which of them holds a non-finite input value when
 *     the batch shows it;
 *   skip mode: a step whose all-reduced gradient is not finite is dropped on
 *     every rank with nothing of the model's state touched (weights,
 *     optimizer state, BN statistics and counters as at its start; its loss
 *     and samples stay out of the logged loss); rank 0 warns naming the
 *     step; --max-skips steps in a row are DDP_ERR_NUMERIC on every rank.
 *
 * The guard watches the step through the hooks nonfinite_watch hands to
 * trainer_step (step.h), and judges it after (nonfinite_step_end).  In
 * abort mode the judgement comes one step late: the step's losses are
 * copied back behind its work (download_async, compute.h) and read once the
 * next step's work is queued (nonfinite_settle), so the host never waits
 * for the device to finish the step it just queued; whatever reads the
 * model or the loss (a checkpoint, the logged loss, evaluation, the replica
 * check, the end) settles first.  Skip mode must know before the update and
 * judges at once. */
#ifndef DDP_NONFINITE_H
#define DDP_NONFINITE_H

#include <stddef.h>
#include <stdint.h>

#include "deck.h"
#include "status.h"
#include "step.h"

#define NONFINITE_LIST_MAX 8 /* samples or steps a message lists */

/* A step's micro-batches on this rank, as the guard noted them. */
typedef struct nonfinite_seen {
    int64_t step;     /* 1-based; 0: none */
    int nmicro;       /* micro-batches of the step (so far) */
    int64_t *idx;     /* host [accum * batch]: global sample indices, by micro-batch */
    int *count;       /* host [accum]: samples of each micro-batch */
    int cur;          /* the device batch of its last micro-batch (trainer.cur) */
    uint64_t uploads; /* ... and the uploads into it by then (trainer.batch_uploads) */
} nonfinite_seen_t;

typedef struct nonfinite {
    int skip;             /* --on-nonfinite skip */
    double *loss_at;      /* device [accum]: the running loss sum after each micro-batch */
    nonfinite_seen_t now; /* the step in progress */
    /* abort mode: the step before, its losses on their way back */
    nonfinite_seen_t late;
    double *late_host;          /* staging [accum]: loss_at of the step `late` */
    int late_staged;            /* late_host came from the backend's host_alloc */
    compute_event_t *late_done; /* recorded after the copy into late_host */
    int64_t *idx_buf[2]; /* host: the idx and count arrays now and late take in turn */
    int *count_buf[2];
    /* skip mode: what a skipped step must leave as it was, saved at its start */
    float *bufs;                        /* device [nbufs]: BN running statistics */
    int64_t *counters;                  /* host [nlayers]: BN num_batches_tracked */
    double *loss_sums;                  /* device [2]: trainer.loss_sums */
    double *loss_host;                  /* host [accum]: loss_at, read back at once */
    int64_t skipped;                    /* steps skipped in the run */
    int64_t in_a_row;                   /* ... the last of them in a row */
    int64_t listed[NONFINITE_LIST_MAX]; /* the first skipped steps (1-based) */
} nonfinite_t;

/* Allocate the guard for trainer t.  Local. */
ddp_status_t nonfinite_init(nonfinite_t *g, trainer_t *t);
void nonfinite_free(nonfinite_t *g, trainer_t *t);

/* The hooks trainer_step calls (step.h): the start of the step (skip mode
 * saves what a skipped step must not change), each micro-batch (noted for
 * the messages; --inject nan poisons the first input value of the first),
 * each loss (the running sum, read once per step by nonfinite_step_end),
 * and in skip mode whether the reduced gradients are finite. */
step_watch_t nonfinite_watch(nonfinite_t *g);
/* After trainer_step (step: 1-based, as logged): the verdict above (in
 * abort mode, the copy of the step's losses on its way).  In skip mode a
 * dropped step, or one whose loss was not finite on this rank, sets
 * res->samples to 0 (they stay out of the logged loss). */
ddp_status_t nonfinite_step_end(nonfinite_t *g, trainer_t *t, int64_t step, step_result_t *res);
/* Abort mode: the verdict on the step whose losses are on their way (none:
 * nothing to do).  A non-finite one ends the job as above. */
ddp_status_t nonfinite_settle(nonfinite_t *g, trainer_t *t);
/* The line after the summary (skip mode): how many steps were skipped. */
void nonfinite_summary(const nonfinite_t *g, trainer_t *t);

/* For messages about a non-finite value: "nan", "inf" or "-inf"; and global
 * sample idx of d as "412 (row 412 of d.h5)". */
const char *nonfinite_value_name(double x);
void nonfinite_sample_name(const deck_t *d, int64_t idx, char *buf, size_t cap);

#endif
