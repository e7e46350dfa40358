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
 * trainer_step (step.h), and judges it after (nonfinite_step_end). */
#ifndef DDP_NONFINITE_H
#define DDP_NONFINITE_H

#include <stddef.h>
#include <stdint.h>

#include "deck.h"
#include "status.h"
#include "step.h"

#define NONFINITE_LIST_MAX 8 /* samples or steps a message lists */

typedef struct nonfinite {
    int skip; /* --on-nonfinite skip */
    /* this rank's part of the step in progress */
    double *loss_at; /* device [accum]: the running loss sum after each micro-batch */
    int64_t *idx;    /* host [accum * batch]: global sample indices, by micro-batch */
    int *count;      /* host [accum]: samples of each micro-batch */
    int nmicro;      /* micro-batches of the step so far */
    /* skip mode: what a skipped step must leave as it was, saved at its start */
    float *bufs;                        /* device [nbufs]: BN running statistics */
    int64_t *counters;                  /* host [nlayers]: BN num_batches_tracked */
    double *loss_sums;                  /* device [2]: trainer.loss_sums */
    double *loss_host;                  /* host [accum]: loss_at, read back */
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
/* After trainer_step (step: 1-based, as logged): the verdict above.  In
 * skip mode a dropped step, or one whose loss was not finite on this rank,
 * sets res->samples to 0 (they stay out of the logged loss). */
ddp_status_t nonfinite_step_end(nonfinite_t *g, trainer_t *t, int64_t step, step_result_t *res);
/* The line after the summary (skip mode): how many steps were skipped. */
void nonfinite_summary(const nonfinite_t *g, trainer_t *t);

/* For messages about a non-finite value: "nan", "inf" or "-inf"; and global
 * sample idx of d as "412 (row 412 of d.h5)". */
const char *nonfinite_value_name(double x);
void nonfinite_sample_name(const deck_t *d, int64_t idx, char *buf, size_t cap);

#endif
