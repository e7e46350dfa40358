/* diagnose.h -- --diagnose: instead of training, a short measured sequence
 * that says what limits the job, with the user's own options, data and
 * ranks (docs/diagnostics.md, "Diagnose mode").
 *
 * Three training modes, --diagnose-steps measured steps each of the
 * trainer's own step (trainer_step) timed with the phase clocks of
 * metrics.h, in DIAGNOSE_ROUNDS rounds in which the modes take turns (a load
 * that comes and goes on the node falls on every mode alike), every turn
 * DIAGNOSE_WARMUP_STEPS unmeasured steps first (the loader's queue fills);
 * then communication alone:
 *   normal      real training steps
 *   no-comm     the same with the gradient all-reduce off (--no-sync's
 *               path: reducer_begin with sync 0); SyncBatchNorm's
 *               all-reduces still run
 *   in-memory   the same as normal with the loader fed from batches read
 *               once and cycled (loader_opts_t.replay): no I/O
 *   comm alone  the reducer's buckets all-reduced on their own
 *               (reducer_allreduce_buckets), warm-up first, timed like
 *               nccl-tests: time = the slowest rank's mean, algbw = bytes /
 *               time, busbw = algbw * 2(n-1)/n
 * Rank 0 then prints a fixed-width table (per rank and mode: step, data
 * wait, forward, backward, exposed communication, optimizer and compute
 * time, ms per step, means over the measured steps), the all-reduce-alone
 * line, the overlap, input and compute fractions, a verdict and the next
 * step, and with --metrics writes a "diagnose" record.  Weights do change
 * (the steps train) but nothing is written: no checkpoint, no --save.
 *
 * The verdict (diagnose_judge) is made from the table's numbers (means
 * over the measured steps: what sets the job's throughput; a job whose
 * reads stall every few steps is input-bound although most steps do not
 * wait), in this priority order:
 *   straggler            some rank's compute per step (normal mode) exceeds
 *                        --straggler-factor x the lower median over ranks,
 *                        and the median by DIAGNOSE_STRAGGLER_MIN_MS and by
 *                        DIAGNOSE_STRAGGLER_MIN_FRACTION of the step (a few
 *                        ms more in a step of 300 ms do not limit the job)
 *   input-bound          data wait > DIAGNOSE_INPUT_FRACTION of the step in
 *                        normal mode, and the normal step > DIAGNOSE_INPUT_GAIN
 *                        x the in-memory step; or, whatever the data wait,
 *                        the normal step > DIAGNOSE_INPUT_GAIN_ALONE x the
 *                        in-memory step (the loader's reads and
 *                        decompression take the CPU from the ranks: the
 *                        cost shows as slower compute or communication)
 *   communication-bound  (more than one rank) exposed communication >
 *                        DIAGNOSE_COMM_FRACTION of the step in normal mode,
 *                        or the normal step > DIAGNOSE_COMM_RATIO x the
 *                        no-comm step
 *   compute-bound        otherwise (healthy)
 */
#ifndef DDP_DIAGNOSE_H
#define DDP_DIAGNOSE_H

#include <stddef.h>

#include "config.h"
#include "status.h"

struct run;

#define DIAGNOSE_ROUNDS                 3 /* turns of each mode (fewer with fewer measured steps) */
#define DIAGNOSE_WARMUP_STEPS           3 /* unmeasured steps at the start of every turn */
#define DIAGNOSE_REPLAY_BATCHES         3 /* batches the in-memory mode reads once, then cycles */
#define DIAGNOSE_STRAGGLER_MIN_MS       1.0  /* a straggler's excess over the median, at least, */
#define DIAGNOSE_STRAGGLER_MIN_FRACTION 0.10 /* ... and this fraction of the step */
#define DIAGNOSE_INPUT_FRACTION         0.10 /* data wait / step (normal mode), more than ... */
#define DIAGNOSE_INPUT_GAIN             1.10 /* ... and normal step / in-memory step, more than */
#define DIAGNOSE_INPUT_GAIN_ALONE       1.5  /* normal step / in-memory step, more than (alone) */
#define DIAGNOSE_COMM_FRACTION          0.10 /* exposed communication / step (normal mode), or */
#define DIAGNOSE_COMM_RATIO             1.15 /* normal step / no-comm step, more than */

typedef enum diagnose_kind {
    DIAGNOSE_COMPUTE_BOUND,
    DIAGNOSE_STRAGGLER,
    DIAGNOSE_INPUT_BOUND,
    DIAGNOSE_COMM_BOUND,
} diagnose_kind_t;

/* What the verdict is made from: ms per step, means over the measured
 * steps. */
typedef struct diagnose_numbers {
    int nranks;
    const double *compute_ms; /* [nranks] each rank's compute time, normal mode */
    double straggler_factor;  /* --straggler-factor */
    double step_ms;           /* normal mode, the step (the slowest rank's) */
    double data_wait_ms;      /* normal mode, the data wait (the most of any rank) */
    double comm_exposed_ms;   /* normal mode, the exposed communication (the least of any rank) */
    double nocomm_step_ms;    /* no-comm mode's step, the slowest rank's (NaN: one rank) */
    double memory_step_ms;    /* in-memory mode's step, the slowest rank's */
} diagnose_numbers_t;

typedef struct diagnose_verdict {
    diagnose_kind_t kind;
    int straggler;            /* the slowest rank over the threshold; -1: none */
    double straggler_times;   /* its compute time / the median */
    double median_compute_ms; /* the lower median over ranks of compute_ms */
    double input_fraction;    /* data_wait_ms / step_ms */
    double memory_gain;       /* step_ms / memory_step_ms */
    double comm_fraction;     /* comm_exposed_ms / step_ms */
    double compute_ratio;     /* step_ms / nocomm_step_ms (NaN with one rank) */
} diagnose_verdict_t;

/* nccl-tests' all-reduce bandwidths (GB/s, 1e9 bytes/s) of `bytes` in
 * `ms` milliseconds over nranks ranks: algbw = bytes / time, busbw = algbw
 * x 2(n-1)/n (what each rank's link carries in a ring; comparable across
 * rank counts). */
void diagnose_bandwidth(double bytes, double ms, int nranks, double *algbw, double *busbw);
/* The verdict on n (thresholds and order above); scratch: n->nranks
 * doubles. */
void diagnose_judge(const diagnose_numbers_t *n, double *scratch, diagnose_verdict_t *v);
/* "input-bound", "straggler", "communication-bound", "compute-bound
 * (healthy)". */
const char *diagnose_kind_name(diagnose_kind_t k);
/* What the user should do next, one line; host: the straggler's host. */
void diagnose_next(const diagnose_verdict_t *v, const diagnose_numbers_t *n, const char *host,
                   char *buf, size_t len);

/* The configuration of a diagnosis: cfg without --save, checkpoints and
 * --resume (rank 0 warns about each one given: a diagnosis writes and
 * resumes nothing). */
void diagnose_config(const ddp_config_t *cfg, ddp_config_t *out, int rank);
/* The measured sequence and the report (collective), after startup_run. */
ddp_status_t diagnose_run(struct run *r);

#endif
