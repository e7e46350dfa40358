/* bench_common.h -- what the step benchmarks (bench_kernels, bench_cnn)
 * share: their command line, one BLAS thread, the median of a sample. */
#ifndef DDP_BENCH_COMMON_H
#define DDP_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cblas.h>

#include "compute.h"
#include "ddp_build.h"

/* -b BATCH -n STEPS -w WARMUP [-h] into *batch, *steps, *warmup (their
 * defaults on entry); one BLAS thread unless OPENBLAS_NUM_THREADS says
 * otherwise.  Returns -1 to go on, or the exit status (usage printed). */
static int bench_step_args(int argc, char **argv, const char *name, int *batch, int *steps,
                           int *warmup)
{
    int opt;
    while ((opt = getopt(argc, argv, "b:n:w:h")) != -1) {
        switch (opt) {
        case 'b': *batch = atoi(optarg); break;
        case 'n': *steps = atoi(optarg); break;
        case 'w': *warmup = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-b BATCH] [-n STEPS] [-w WARMUP]\n", argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (*batch < 2 || *steps < 1 || *warmup < 0) {
        fprintf(stderr, "%s: need -b >= 2, -n >= 1, -w >= 0\n", name);
        return 2;
    }
#ifdef HAVE_OPENBLAS_GET_CONFIG
    if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);
#endif
    return -1;
}

static int bench_cmp_double_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v). */
static double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double_);
    return v[n / 2];
}

/* A number in [-1, 1) from the generator state *s (a fixed LCG: the same
 * inputs in every run). */
static float bench_urand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

/* compute->alloc, or exit 2 naming the program when out of memory. */
static void *bench_alloc(const compute_ops_t *compute, const char *prog, size_t bytes)
{
    void *p = compute->alloc(bytes);
    if (!p) {
        fprintf(stderr, "%s: out of memory (%zu bytes)\n", prog, bytes);
        exit(2);
    }
    return p;
}

#endif
