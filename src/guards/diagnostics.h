/* diagnostics.h -- checks that say loudly when an invariant breaks, and the
 * fault injection (inject.h) that proves they fire:
 *
 *   - the non-finite guard of every step (--on-nonfinite abort|skip,
 *     --max-skips): a NaN or Inf loss or gradient named with its step and
 *     the samples of the batch (global index, file and row), or the step
 *     dropped on every rank with nothing of the model's state touched;
 *   - the replica check (--check-replicas N): parameters, BN statistics and
 *     optimizer state hashed per tensor, one all-gather of one hash per rank
 *     in the common case, the first differing tensor and its ranks named
 *     when they differ;
 *   - --inject nan (a poisoned input value) and bitflip (one flipped bit in
 *     a parameter or optimizer state tensor); skipgrad lives in reducer.c.
 *
 * The tensors the replica check compares, in this order, and the names it
 * (and --inject bitflip:RANK:STEP:NAME) uses for them:
 *   layers.<i>.weight ...             parameters, BN num_batches_tracked
 *                                     and, with SyncBatchNorm, BN running
 *                                     statistics (state_dict order)
 *   <state>:layers.<i>.weight ...     optimizer state of each trainable
 *                                     parameter: momentum_buffer (SGD with
 *                                     momentum), exp_avg, exp_avg_sq (AdamW)
 */
#ifndef DDP_DIAGNOSTICS_H
#define DDP_DIAGNOSTICS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

struct trainer;
struct deck;

#define DIAG_LIST_MAX 8 /* samples or steps a message lists */

/* The non-finite guard of one training run (train.c's loop). */
typedef struct diagnostics {
    int skip; /* --on-nonfinite skip */
    /* this rank's part of the step in progress */
    double *loss_at; /* device [accum]: the running loss sum after each micro-batch */
    int64_t *idx;    /* host [accum * batch]: global sample indices, by micro-batch */
    int *count;      /* host [accum]: samples of each micro-batch */
    int nmicro;      /* micro-batches of the step so far */
    /* skip mode: what a skipped step must leave as it was, saved at its start */
    float *bufs;                   /* device [nbufs]: BN running statistics */
    int64_t *counters;             /* host [nlayers]: BN num_batches_tracked */
    double *loss_sums;             /* device [2]: trainer.loss_sums */
    int64_t samples;               /* trainer.metrics.samples */
    double *loss_host;             /* host [accum]: loss_at, read back */
    int64_t skipped;               /* steps skipped in the run */
    int64_t in_a_row;              /* ... the last of them in a row */
    int64_t listed[DIAG_LIST_MAX]; /* the first skipped steps (1-based) */
} diagnostics_t;

/* Allocate the guard for trainer t and check that every --inject bitflip or
 * skipgrad names a tensor of the model (DDP_ERR_USAGE otherwise; the same
 * on every rank).  Local. */
ddp_status_t diagnostics_init(diagnostics_t *g, struct trainer *t);
void diagnostics_free(diagnostics_t *g, struct trainer *t);

/* The step's hooks, in the order train.c calls them (step: 1-based, as
 * logged).
 * step_begin: skip mode saves what a skipped step must not change. */
void diagnostics_step_begin(diagnostics_t *g, struct trainer *t);
/* Micro-batch j of the step (n samples, global indices idx) is in the
 * device batch: noted for the messages; --inject nan poisons its first
 * input value (j == 0). */
void diagnostics_batch(diagnostics_t *g, struct trainer *t, int64_t step, int j, int n,
                       const int64_t *idx);
/* Its loss was added to trainer.loss_sums: note the running sum (a device
 * copy, read once per step by step_end). */
void diagnostics_loss(diagnostics_t *g, struct trainer *t, int j);
/* The all-reduced gradients [0, ntrainable) are all finite.  They are
 * bit-identical on every rank (a NaN on one rank is a NaN in the sum), so
 * every rank reaches the same answer without a collective. */
int diagnostics_grads_finite(struct trainer *t);
/* After the step (skipped: its update was dropped because the gradient was
 * not finite, skip mode only).
 *   abort mode: a non-finite loss on this rank ends the job from here
 *     (DDP_ERR_NUMERIC, exit code 8) naming the step, the samples of the
 *     micro-batch, their file and row, and which of them holds a non-finite
 *     input value when the batch shows it;
 *   skip mode: a skipped step gets back the BN statistics, counters and loss
 *     sums of its start (its loss and samples stay out of the logged loss);
 *     rank 0 warns naming the step; --max-skips steps in a row are
 *     DDP_ERR_NUMERIC on every rank. */
ddp_status_t diagnostics_step_end(diagnostics_t *g, struct trainer *t, int64_t step, int skipped);
/* The line after the summary (skip mode): how many steps were skipped. */
void diagnostics_summary(const diagnostics_t *g, struct trainer *t);

/* Every rank's tensors (the list above; BN statistics only with SyncBN)
 * hash to the same values: else DDP_ERR_MISMATCH, the same on every rank,
 * naming the first tensor that differs, the rank(s) that hold another value
 * than most ranks, and how many tensors differ.  step 0: right after the
 * start-up broadcast.  One all-gather of 8 bytes per rank; a second one of
 * the per-tensor hashes only when they differ. */
ddp_status_t diagnostics_check_replicas(struct trainer *t, int64_t step);
/* For messages about a non-finite value: "nan", "inf" or "-inf"; and global
 * sample idx of d as "412 (row 412 of d.h5)". */
const char *diagnostics_nonfinite_name(double x);
void diagnostics_sample_name(const struct deck *d, int64_t idx, char *buf, size_t cap);
/* --inject bitflip due after `step` (1-based) on this rank: flip the lowest
 * bit of the first element of its tensor. */
void diagnostics_inject_bitflip(struct trainer *t, int64_t step);

#endif
