/* bench_common.h -- what the benchmarks share (bench_common.c): the one
 * timing loop every benchmark runs its cases through (warm-up, timed
 * samples that alternate between the measured thing and its reference,
 * the clock fenced by a barrier or a device sync, the slowest rank's time),
 * the statistics of the samples (median, min, quantiles), and what the step
 * benchmarks (bench_kernels, bench_cnn) share besides: their command line,
 * one BLAS thread, fixed inputs, allocation. */
#ifndef DDP_BENCH_COMMON_H
#define DDP_BENCH_COMMON_H

#include <stddef.h>

#include "compute.h"

/* ---- the timing loop -------------------------------------------------------
 *
 * A case is one thing measured: `run` makes one call of it.  A sample of a
 * case is the mean time of `iters` consecutive calls, the clock read after
 * the loop's `before` hook (a barrier: the ranks start together; a device
 * sync) and after its `after` hook (a device sync: the queued work is done).
 *
 * The cases take turns: case 0 takes `block` samples, then case 1 `block`
 * samples, ..., then case 0 again, until each has its samples; so the
 * measured thing and its reference see the same machine (it is shared and
 * noisy).  Before its first sample each case makes `warmup` untimed calls
 * (the cases' warm-up calls interleaved, one call of each in turn), or
 * before every sample with `warm_every`.  A case's own `prepare` and
 * `finish` (when set) run before and after each sample and each warm-up
 * call, outside the clock: what the calls need but should not be charged
 * for (a new epoch's permutation, a progress thread switched on and off).
 * At the end, `combine` (when set) rewrites each case's samples, e.g. with
 * the slowest rank's (bench_mpi_slowest).
 *
 * `run` gets the call's index: -warmup .. -1 for warm-up calls, then
 * sample * iters + call for timed ones (0, 1, ... with iters = 1). */
typedef struct bench_case {
    void (*run)(void *arg, long it);
    void *arg;
    int warmup;  /* untimed calls before the first sample (every sample: warm_every) */
    int iters;   /* calls per sample (0: 1) */
    int samples; /* this case's samples, taken in the first turns (0: the loop's) */
    double *t;   /* [samples] out: seconds per call, one entry per sample */
    void (*prepare)(void *arg); /* before a sample or a warm-up call; NULL: none */
    void (*finish)(void *arg);  /* after one; NULL: none */
} bench_case_t;

typedef struct bench_loop {
    int samples;               /* samples of every case (unless the case says fewer) */
    int block;                 /* consecutive samples of one case per turn (0: 1) */
    int warm_every;            /* warm-up calls before every sample, not only the first */
    void (*before)(void *arg); /* before the clock starts; NULL: none */
    void (*after)(void *arg);  /* before the clock stops; NULL: none */
    void (*combine)(double *t, int n, void *arg); /* each case's samples at the end */
    void *arg;                                    /* of before, after and combine */
} bench_loop_t;

/* Run the cases as described above; their samples land in case[c].t. */
void bench_loop_run(const bench_loop_t *loop, bench_case_t *cases, int ncases);

/* Hooks for MPI benchmarks (MPI_COMM_WORLD; arg unused): a barrier before
 * the clock starts, and every sample replaced by the slowest rank's. */
void bench_mpi_barrier(void *arg);
void bench_mpi_slowest(double *t, int n, void *arg);

/* ---- statistics of samples ------------------------------------------------ */

/* The median of v[0..n): v[n/2] after sorting v (in place). */
double bench_median(double *v, int n);
/* The q-quantile of v[0..n) (0 <= q <= 1): v[round(q (n - 1))] after
 * sorting v (in place). */
double bench_quantile(double *v, int n, double q);
/* The smallest of v[0..n) (the best of repeated runs). */
double bench_min(const double *v, int n);
/* min, median, max of v[0..n) (v unchanged), the median of an even count
 * the mean of the middle two, as bench/lib.sh's for results.csv. */
void bench_summary(const double *v, int n, double out[3]);

/* ---- the step benchmarks -------------------------------------------------- */

/* -b BATCH -n STEPS -w WARMUP [-h] into *batch, *steps, *warmup (their
 * defaults on entry); one BLAS thread unless OPENBLAS_NUM_THREADS says
 * otherwise.  Returns -1 to go on, or the exit status (usage printed). */
int bench_step_args(int argc, char **argv, const char *name, int *batch, int *steps, int *warmup);

/* A number in [-1, 1) from the generator state *s (a fixed LCG: the same
 * inputs in every run). */
float bench_urand(unsigned *s);

/* compute->alloc, or exit 2 naming the program when out of memory. */
void *bench_alloc(const compute_ops_t *compute, const char *prog, size_t bytes);

#endif
