/* bench_common.c -- the benchmarks' one timing loop, the statistics of its
 * samples, and the step benchmarks' shared helpers (see bench_common.h). */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#include <mpi.h>

#include "clock.h"
#include "ddp_build.h"

/* ---- the timing loop ------------------------------------------------------ */

static int case_samples_(const bench_loop_t *loop, const bench_case_t *c)
{
    return c->samples > 0 && c->samples < loop->samples ? c->samples : loop->samples;
}

/* Warm-up call w of case c (untimed). */
static void warm_call_(const bench_case_t *c, int w)
{
    if (c->prepare) c->prepare(c->arg);
    c->run(c->arg, (long)(w - c->warmup));
    if (c->finish) c->finish(c->arg);
}

/* One sample of case c: the mean seconds of its `iters` calls. */
static double sample_(const bench_loop_t *loop, const bench_case_t *c, int s)
{
    int iters = c->iters > 0 ? c->iters : 1;
    if (loop->warm_every)
        for (int w = 0; w < c->warmup; w++) warm_call_(c, w);
    if (c->prepare) c->prepare(c->arg);
    if (loop->before) loop->before(loop->arg);
    double t0 = clock_seconds();
    for (int i = 0; i < iters; i++) c->run(c->arg, (long)s * iters + i);
    if (loop->after) loop->after(loop->arg);
    double t = (clock_seconds() - t0) / iters;
    if (c->finish) c->finish(c->arg);
    return t;
}

void bench_loop_run(const bench_loop_t *loop, bench_case_t *cases, int ncases)
{
    int block = loop->block > 0 ? loop->block : 1;
    if (!loop->warm_every) {
        /* one call of each case in turn, so the warm-up interleaves as the
         * samples do */
        int most = 0;
        for (int c = 0; c < ncases; c++) most = cases[c].warmup > most ? cases[c].warmup : most;
        for (int w = 0; w < most; w++)
            for (int c = 0; c < ncases; c++)
                if (w < cases[c].warmup) warm_call_(&cases[c], w);
    }
    for (int s0 = 0; s0 < loop->samples; s0 += block)
        for (int c = 0; c < ncases; c++) {
            int n = case_samples_(loop, &cases[c]);
            for (int s = s0; s < s0 + block && s < n; s++)
                cases[c].t[s] = sample_(loop, &cases[c], s);
        }
    if (loop->combine)
        for (int c = 0; c < ncases; c++)
            loop->combine(cases[c].t, case_samples_(loop, &cases[c]), loop->arg);
}

void bench_mpi_barrier(void *arg)
{
    (void)arg;
    MPI_Barrier(MPI_COMM_WORLD);
}

void bench_mpi_slowest(double *t, int n, void *arg)
{
    (void)arg;
    MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

/* ---- statistics of samples ------------------------------------------------ */

static int cmp_double_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double_);
    return v[n / 2];
}

double bench_quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double_);
    int i = (int)(q * (n - 1) + 0.5);
    return v[i];
}

double bench_min(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

void bench_summary(const double *v, int n, double out[3])
{
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) {
        fprintf(stderr, "bench: out of memory\n");
        exit(2);
    }
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double_);
    out[0] = s[0], out[1] = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2, out[2] = s[n - 1];
    free(s);
}

/* ---- the step benchmarks -------------------------------------------------- */

int bench_step_args(int argc, char **argv, const char *name, int *batch, int *steps, int *warmup)
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

float bench_urand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

void *bench_alloc(const compute_ops_t *compute, const char *prog, size_t bytes)
{
    void *p = compute->alloc(bytes);
    if (!p) {
        fprintf(stderr, "%s: out of memory (%zu bytes)\n", prog, bytes);
        exit(2);
    }
    return p;
}
