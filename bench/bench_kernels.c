/* bench_kernels.c -- training-step throughput of the CPU compute backend on
 * an MLP 784-1024-1024-10 with BatchNorm (linear, bn, relu, linear, bn, relu,
 * linear, cross-entropy, SGD with momentum), one thread, next to the raw
 * cblas_sgemm rate of the same GEMM shapes measured in the same run.
 *
 *   make -C bench bench && ./bench/bench_kernels [-b BATCH] [-n STEPS] [-w WARMUP]
 *
 * BLAS is set to one thread unless OPENBLAS_NUM_THREADS is set.  Prints a
 * per-op table (time per step, share, GFLOP/s where the op is a GEMM), the
 * step time against the GEMM-only time, and exits non-zero when the training
 * went wrong (non-finite weights or a loss that did not fall).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "clock.h"
#include "compute.h"
#include "bench_common.h"
#include "ddp_build.h"

enum {
    OP_LIN_FWD,
    OP_LIN_BWD,
    OP_BN_FWD,
    OP_BN_BWD,
    OP_RELU_FWD,
    OP_RELU_BWD,
    OP_XENT,
    OP_SGD,
    NOPS
};
static const char *op_names[NOPS] = {
    "linear_fwd", "linear_bwd", "bn_fwd (stats+fwd)", "bn_bwd (stats+data)", "relu_fwd", "relu_bwd",
    "xent",       "sgd_step"};
static double op_time[NOPS], op_flop[NOPS];
static int timing; /* accumulate into op_time */

#define TIMED(op, flop, call)                                                                      \
    do {                                                                                           \
        double t0_ = clock_seconds();                                                              \
        call;                                                                                      \
        if (timing) {                                                                              \
            op_time[op] += clock_seconds() - t0_;                                                  \
            op_flop[op] += (flop);                                                                 \
        }                                                                                          \
    } while (0)

#define NLIN 3
static const int dims[NLIN + 1] = {784, 1024, 1024, 10};

typedef struct net {
    const compute_ops_t *compute;
    int batch;
    float *params, *grads, *mom; /* flat */
    size_t nparams;
    float *W[NLIN], *b[NLIN], *gamma[2], *beta[2];     /* views into params */
    float *dW[NLIN], *db[NLIN], *dgamma[2], *dbeta[2]; /* views into grads */
    float *x, *h[NLIN], *bnout[2], *act[2];            /* activations */
    float *dbuf[2];                                    /* gradient ping-pong */
    float *mean[2], *invstd[2], *rm[2], *rv[2];
    double *stats[2], *gstats[2];
    int32_t *labels;
    float *dlogits;
} net_t;

static void net_init_(net_t *m, const compute_ops_t *compute, int batch)
{
    memset(m, 0, sizeof *m);
    m->compute = compute, m->batch = batch;
    size_t n = 0;
    for (int l = 0; l < NLIN; l++) n += (size_t)dims[l] * dims[l + 1] + dims[l + 1];
    for (int l = 0; l < 2; l++) n += 2 * (size_t)dims[l + 1];
    m->nparams = n;
    m->params = bench_alloc(compute, "bench_kernels", n * sizeof(float));
    m->grads = bench_alloc(compute, "bench_kernels", n * sizeof(float));
    m->mom = bench_alloc(compute, "bench_kernels", n * sizeof(float));
    size_t off = 0;
    unsigned s = 12345;
    for (int l = 0; l < NLIN; l++) {
        size_t wn = (size_t)dims[l] * dims[l + 1];
        m->W[l] = m->params + off, m->dW[l] = m->grads + off, off += wn;
        m->b[l] = m->params + off, m->db[l] = m->grads + off, off += (size_t)dims[l + 1];
        float bound = 1.0f / sqrtf((float)dims[l]);
        for (size_t i = 0; i < wn; i++) m->W[l][i] = bound * bench_urand(&s);
        for (int i = 0; i < dims[l + 1]; i++) m->b[l][i] = bound * bench_urand(&s);
    }
    for (int l = 0; l < 2; l++) {
        int c = dims[l + 1];
        m->gamma[l] = m->params + off, m->dgamma[l] = m->grads + off, off += (size_t)c;
        m->beta[l] = m->params + off, m->dbeta[l] = m->grads + off, off += (size_t)c;
        for (int i = 0; i < c; i++) m->gamma[l][i] = 1.0f;
        m->mean[l] = bench_alloc(compute, "bench_kernels", (size_t)c * sizeof(float));
        m->invstd[l] = bench_alloc(compute, "bench_kernels", (size_t)c * sizeof(float));
        m->rm[l] = bench_alloc(compute, "bench_kernels", (size_t)c * sizeof(float));
        m->rv[l] = bench_alloc(compute, "bench_kernels", (size_t)c * sizeof(float));
        for (int i = 0; i < c; i++) m->rv[l][i] = 1.0f;
        m->stats[l] = bench_alloc(compute, "bench_kernels", 2 * (size_t)c * sizeof(double));
        m->gstats[l] = bench_alloc(compute, "bench_kernels", 2 * (size_t)c * sizeof(double));
        m->bnout[l] = bench_alloc(compute, "bench_kernels", (size_t)batch * c * sizeof(float));
        m->act[l] = bench_alloc(compute, "bench_kernels", (size_t)batch * c * sizeof(float));
    }
    for (int l = 0; l < NLIN; l++)
        m->h[l] =
            bench_alloc(compute, "bench_kernels", (size_t)batch * dims[l + 1] * sizeof(float));
    m->x = bench_alloc(compute, "bench_kernels", (size_t)batch * dims[0] * sizeof(float));
    for (size_t i = 0; i < (size_t)batch * dims[0]; i++) m->x[i] = bench_urand(&s);
    m->labels = bench_alloc(compute, "bench_kernels", (size_t)batch * sizeof(int32_t));
    for (int i = 0; i < batch; i++) m->labels[i] = (int32_t)((bench_urand(&s) + 1.0f) * 5.0f) % 10;
    m->dlogits = bench_alloc(compute, "bench_kernels", (size_t)batch * dims[NLIN] * sizeof(float));
    for (int k = 0; k < 2; k++)
        m->dbuf[k] = bench_alloc(compute, "bench_kernels", (size_t)batch * 1024 * sizeof(float));
}

static void net_free_(net_t *m)
{
    const compute_ops_t *compute = m->compute;
    compute->free(m->params), compute->free(m->grads), compute->free(m->mom), compute->free(m->x);
    compute->free(m->labels), compute->free(m->dlogits);
    for (int l = 0; l < 2; l++) {
        compute->free(m->mean[l]), compute->free(m->invstd[l]), compute->free(m->rm[l]),
            compute->free(m->rv[l]);
        compute->free(m->stats[l]), compute->free(m->gstats[l]), compute->free(m->bnout[l]);
        compute->free(m->act[l]), compute->free(m->dbuf[l]);
    }
    for (int l = 0; l < NLIN; l++) compute->free(m->h[l]);
}

/* one training step; returns the mean loss */
static double net_step_(net_t *m, int first)
{
    const compute_ops_t *compute = m->compute;
    const int n = m->batch;
    const float *in = m->x;
    for (int l = 0; l < NLIN; l++) {
        int fi = dims[l], fo = dims[l + 1];
        TIMED(OP_LIN_FWD, 2.0 * n * fi * fo,
              compute->linear_fwd(n, fi, fo, in, m->W[l], m->b[l], m->h[l], 0));
        if (l == NLIN - 1) break;
        TIMED(OP_BN_FWD, 0, {
            compute->bn_stats(n, fo, 1, m->h[l], m->stats[l]);
            compute->bn_finalize(fo, m->stats[l], n, 1e-5f, 0.1f, 1, m->mean[l], m->invstd[l],
                                 m->rm[l], m->rv[l]);
            compute->bn_fwd(n, fo, 1, m->h[l], m->mean[l], m->invstd[l], m->gamma[l], m->beta[l],
                            m->bnout[l], 0, NULL);
        });
        TIMED(OP_RELU_FWD, 0, compute->relu_fwd((size_t)n * fo, m->bnout[l], m->act[l]));
        in = m->act[l];
    }
    double acc[2] = {0, 0};
    TIMED(OP_XENT, 0,
          compute->xent(n, dims[NLIN], m->h[NLIN - 1], m->labels, 0.0f, 1.0f / n, m->dlogits, acc));
    const float *dy = m->dlogits;
    for (int l = NLIN - 1; l >= 0; l--) {
        int fi = dims[l], fo = dims[l + 1];
        const float *xin = l ? m->act[l - 1] : m->x;
        float *dx = l ? m->dbuf[l & 1] : NULL;
        TIMED(OP_LIN_BWD, 2.0 * n * fi * fo * (dx ? 2 : 1),
              compute->linear_bwd(n, fi, fo, xin, m->W[l], dy, dx, m->dW[l], m->db[l], 0.0f, NULL, NULL));
        if (!l) break;
        int c = fi, k = l - 1;
        TIMED(OP_RELU_BWD, 0, compute->relu_bwd((size_t)n * c, m->act[k], dx, dx, NULL));
        TIMED(OP_BN_BWD, 0, {
            compute->bn_bwd_stats(n, c, 1, m->h[k], dx, m->mean[k], m->invstd[k], m->gstats[k],
                                  m->dgamma[k], m->dbeta[k], 0.0f, NULL, NULL);
            compute->bn_bwd_data(n, c, 1, m->h[k], dx, m->mean[k], m->invstd[k], m->gamma[k],
                                 m->gstats[k], n, dx, NULL);
        });
        dy = dx;
    }
    TIMED(OP_SGD, 0,
          compute->sgd_step(m->nparams, m->params, m->grads, m->mom, 0.01f, 0.9f, 0, 5e-4f, first));
    return acc[0] / n;
}

/* the step's GEMMs alone, same shapes and buffers, cblas_sgemm directly;
 * returns their FLOPs */
static double gemm_step_(net_t *m)
{
    const int n = m->batch;
    double f = 0;
    const float *in = m->x;
    for (int l = 0; l < NLIN; l++) {
        int fi = dims[l], fo = dims[l + 1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, fo, fi, 1.0f, in, fi, m->W[l], fi,
                    1.0f, m->h[l], fo);
        f += 2.0 * n * fi * fo;
        in = l < NLIN - 1 ? m->act[l] : NULL;
    }
    for (int l = NLIN - 1; l >= 0; l--) {
        int fi = dims[l], fo = dims[l + 1];
        const float *xin = l ? m->act[l - 1] : m->x;
        const float *dy = l == NLIN - 1 ? m->dlogits : m->dbuf[(l + 1) & 1];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, fo, fi, n, 1.0f, dy, fo, xin, fi, 0.0f,
                    m->dW[l], fi);
        f += 2.0 * n * fi * fo;
        if (l) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, fi, fo, 1.0f, dy, fo, m->W[l],
                        fi, 0.0f, m->dbuf[l & 1], fi);
            f += 2.0 * n * fi * fo;
        }
    }
    return f;
}

/* The timed cases (bench_common.h): the training step, and its GEMMs alone
 * as the reference. */
typedef struct run {
    net_t *m;
    int warmup;
    double loss0, loss, gflop; /* the first warm-up step's loss, the last step's */
} run_t;

static void step_case_(void *arg, long it)
{
    run_t *r = arg;
    timing = it >= 0; /* the per-op table counts the timed steps only */
    double l = net_step_(r->m, it == -r->warmup);
    timing = 0;
    if (it < 0 && it == -r->warmup) r->loss0 = l;
    if (it >= 0) r->loss = l;
}

static void gemm_case_(void *arg, long it)
{
    run_t *r = arg;
    r->gflop = gemm_step_(r->m);
}

static void copy_case_(void *arg, long it)
{
    net_t *m = arg;
    memcpy(m->grads, m->params, m->nparams * sizeof(float));
}

int main(int argc, char **argv)
{
    int batch = 64, steps = 200, warmup = 10;
    int rc = bench_step_args(argc, argv, "bench_kernels", &batch, &steps, &warmup);
    if (rc >= 0) return rc;
    const compute_ops_t *compute = compute_find("cpu");
    net_t m;
    net_init_(&m, compute, batch);

    /* full steps and GEMM-only steps alternate in blocks of 10, so both see
     * the same machine (it is shared) without the GEMM-only pass evicting the
     * training state before every step; the GEMM-only pass overwrites
     * activations and gradients, the next step recomputes all of them from
     * the weights */
    run_t r = {.m = &m, .warmup = warmup};
    double *tstep = malloc((size_t)steps * sizeof *tstep);
    double *tgemm = malloc((size_t)steps * sizeof *tgemm);
    bench_case_t cases[2] = {{.run = step_case_, .arg = &r, .warmup = warmup, .t = tstep},
                             {.run = gemm_case_, .arg = &r, .t = tgemm}};
    bench_loop_run(&(bench_loop_t){.samples = steps, .block = 10}, cases, 2);
    double loss0 = r.loss0, loss = r.loss, gflop = r.gflop;
    /* memory reference for sgd_step: a copy of the parameter buffer, the
     * best of 20 */
    double tcopies[20];
    bench_case_t copy = {.run = copy_case_, .arg = &m, .t = tcopies};
    bench_loop_run(&(bench_loop_t){.samples = 20}, &copy, 1);
    double tcopy = bench_min(tcopies, 20);
    double step_med = bench_median(tstep, steps), gemm_med = bench_median(tgemm, steps);
    double step_flop = op_flop[OP_LIN_FWD] / steps + op_flop[OP_LIN_BWD] / steps;

    printf("# bench_kernels: MLP 784-1024-1024-10 + BN, batch %d, SGD momentum, backend %s\n",
           batch, compute->name);
    printf("# %d timed steps after %d warm-up, BLAS threads: %s\n", steps, warmup,
           getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "1");
    printf("#\n# %-22s %12s %8s %10s\n", "op", "time/step", "share", "rate");
    printf("# %-22s %12s %8s %10s\n", "", "(us, mean)", "(%)", "(GFLOP/s)");
    double total = 0;
    for (int k = 0; k < NOPS; k++) total += op_time[k];
    for (int k = 0; k < NOPS; k++) {
        char rate[32] = "-";
        if (op_flop[k] > 0) snprintf(rate, sizeof rate, "%.1f", op_flop[k] / op_time[k] * 1e-9);
        printf("  %-22s %12.1f %8.1f %10s\n", op_names[k], op_time[k] / steps * 1e6,
               100 * op_time[k] / total, rate);
    }
    double gemm_ops = (op_time[OP_LIN_FWD] + op_time[OP_LIN_BWD]) / steps;
    printf("#\n# %-34s %10s %12s %10s\n", "", "time", "samples/s", "GFLOP/s");
    printf("# %-34s %10s %12s %10s\n", "", "(ms, median)", "", "");
    printf("  %-34s %10.3f %12.0f %10.1f\n", "training step (all ops)", step_med * 1e3,
           batch / step_med, step_flop / step_med * 1e-9);
    printf("  %-34s %10.3f %12.0f %10.1f\n", "cblas_sgemm alone (same shapes)", gemm_med * 1e3,
           batch / gemm_med, gflop / gemm_med * 1e-9);
    printf("  %-34s %10.3f %11.1f%%\n", "non-GEMM overhead (step - GEMMs)",
           (step_med - gemm_med) * 1e3, 100 * (step_med - gemm_med) / step_med);
    printf("  %-34s %10.3f %11.1f%%\n", "  of which outside linear_*",
           (total / steps - gemm_ops) * 1e3, 100 * (total / steps - gemm_ops) / (total / steps));
    double sgd_s = op_time[OP_SGD] / steps, sgd_bytes = 20.0 * (double)m.nparams;
    printf("  %-34s %10.3f %11.1f%%\n", "  of which sgd_step", sgd_s * 1e3,
           100 * sgd_s / (total / steps));
    printf("#\n# sgd_step moves 20 B/parameter (p, buf read+write, g read): %.1f GB/s;\n",
           sgd_bytes / sgd_s * 1e-9);
    printf("# memcpy of the %.1f MB parameter buffer (read+write): %.1f GB/s\n", m.nparams * 4e-6,
           8.0 * (double)m.nparams / tcopy * 1e-9);
    int ok = compute->all_finite(m.nparams, m.params) && loss < loss0;
    printf("# check: loss %.4f -> %.4f, weights finite: %s -> %s\n", loss0, loss,
           compute->all_finite(m.nparams, m.params) ? "yes" : "NO", ok ? "OK" : "WRONG");
    free(tstep), free(tgemm);
    net_free_(&m);
    return ok ? 0 : 1;
}
