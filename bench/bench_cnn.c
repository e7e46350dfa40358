/* bench_cnn.c -- where the time of a CNN training step goes in the CPU
 * compute backend: the Fashion-MNIST CNN conv 32 3x3 pad 1, bn, relu,
 * maxpool 2, conv 64 3x3 pad 1, bn, relu, maxpool 2, linear 3136-128, relu,
 * linear 128-10, cross-entropy, SGD with momentum, on 1x28x28 inputs, one
 * thread; every op timed per step, the convolutions split into their phases
 * (compute_cpu_prof: im2col, GEMM, col2im, bias, layout copies), next to
 * cblas_sgemm alone on the GEMM shapes of each convolution and linear op,
 * measured in the same run.
 *
 *   make -C bench bench && ./bench/bench_cnn [-b BATCH] [-n STEPS] [-w WARMUP]
 *
 * BLAS is set to one thread unless OPENBLAS_NUM_THREADS is set.  The "% of
 * sgemm" column is (sgemm alone on the op's GEMM shapes) / (the op's time):
 * 100% means the op costs no more than its GEMMs.  Exits non-zero when the
 * training went wrong (non-finite weights or a loss that did not fall).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "clock.h"
#include "compute.h"
#include "compute_cpu.h"
#include "bench_common.h"
#include "ddp_build.h"

enum {
    OP_CONV1_FWD,
    OP_CONV1_BWD,
    OP_CONV2_FWD,
    OP_CONV2_BWD,
    OP_BN1_FWD,
    OP_BN1_BWD,
    OP_BN2_FWD,
    OP_BN2_BWD,
    OP_RELU_FWD,
    OP_RELU_BWD,
    OP_POOL1_FWD,
    OP_POOL1_BWD,
    OP_POOL2_FWD,
    OP_POOL2_BWD,
    OP_LIN_FWD,
    OP_LIN_BWD,
    OP_XENT,
    OP_SGD,
    NOPS
};
static const char *op_names[NOPS] = {"conv1_fwd (1->32, 28x28)",
                                     "conv1_bwd (dw, db)",
                                     "conv2_fwd (32->64, 14x14)",
                                     "conv2_bwd (dw, db, dx)",
                                     "bn1 fwd (stats+fwd)",
                                     "bn1 bwd (stats+data)",
                                     "bn2 fwd (stats+fwd)",
                                     "bn2 bwd (stats+data)",
                                     "relu fwd (all)",
                                     "relu bwd (all)",
                                     "maxpool1 fwd",
                                     "maxpool1 bwd",
                                     "maxpool2 fwd",
                                     "maxpool2 bwd",
                                     "linear fwd (both)",
                                     "linear bwd (both)",
                                     "xent",
                                     "sgd_step"};
static double op_time[NOPS], op_flop[NOPS], op_gemm[NOPS]; /* seconds, FLOP, sgemm-alone s */
static compute_cpu_prof_t op_prof[NOPS];
static int timing;

#define TIMED(op, flop, call)                                                                      \
    do {                                                                                           \
        compute_cpu_prof_t prof_ = {0};                                                            \
        if (timing) compute_cpu_prof = &prof_;                                                     \
        double t0_ = clock_seconds();                                                              \
        call;                                                                                      \
        if (timing) {                                                                              \
            op_time[op] += clock_seconds() - t0_;                                                  \
            op_flop[op] += (flop);                                                                 \
            compute_cpu_prof = NULL;                                                               \
            op_prof[op].im2col += prof_.im2col, op_prof[op].gemm += prof_.gemm;                    \
            op_prof[op].col2im += prof_.col2im, op_prof[op].bias += prof_.bias;                    \
            op_prof[op].copy += prof_.copy;                                                        \
        }                                                                                          \
    } while (0)

#define H0   28
#define C1   32
#define C2   64
#define FC   128
#define NCLS 10

typedef struct bn {
    float *gamma, *beta, *dgamma, *dbeta, *mean, *invstd, *rm, *rv;
    double *stats;
} bn_t;

typedef struct net {
    const compute_ops_t *compute;
    int batch;
    float *params, *grads, *mom;
    size_t nparams;
    float *w1, *b1, *w2, *b2, *w3, *b3, *w4, *b4;         /* views into params */
    float *dw1, *db1, *dw2, *db2, *dw3, *db3, *dw4, *db4; /* views into grads */
    bn_t bn[2];
    conv_dims_t cd[2];
    pool_dims_t pd[2];
    void *ws;
    /* activations: conv out, bn out, relu out, pool out per block; fc */
    float *x, *h[2], *bo[2], *r[2], *p[2], *f1, *fr, *logits;
    int32_t *am[2], *labels;
    float *dbig[2]; /* gradient ping-pong, [batch, 32, 28, 28] */
} net_t;

static float *view_(net_t *m, size_t *off, size_t count, float **grad, float bound, unsigned *s)
{
    float *p = m->params + *off;
    *grad = m->grads + *off;
    *off += count;
    for (size_t i = 0; i < count; i++) p[i] = bound * bench_urand(s);
    return p;
}

static void net_init_(net_t *m, const compute_ops_t *compute, int batch)
{
    memset(m, 0, sizeof *m);
    m->compute = compute, m->batch = batch;
    const int n = batch, h1 = H0 / 2, h2 = H0 / 4, flat = C2 * h2 * h2;
    m->cd[0] = (conv_dims_t){n, 1, H0, H0, C1, 3, 1, 1, H0, H0};
    m->cd[1] = (conv_dims_t){n, C1, h1, h1, C2, 3, 1, 1, h1, h1};
    m->pd[0] = (pool_dims_t){n, C1, H0, H0, 2, 2, 0, h1, h1};
    m->pd[1] = (pool_dims_t){n, C2, h1, h1, 2, 2, 0, h2, h2};
    size_t np = (size_t)C1 * 9 + C1 + (size_t)C2 * C1 * 9 + C2 + (size_t)FC * flat + FC +
                (size_t)NCLS * FC + NCLS + 2 * (C1 + C2);
    m->nparams = np;
    m->params = bench_alloc(compute, "bench_cnn", np * sizeof(float));
    m->grads = bench_alloc(compute, "bench_cnn", np * sizeof(float));
    m->mom = bench_alloc(compute, "bench_cnn", np * sizeof(float));
    size_t off = 0;
    unsigned s = 12345;
    m->w1 = view_(m, &off, (size_t)C1 * 9, &m->dw1, 1.0f / 3.0f, &s);
    m->b1 = view_(m, &off, C1, &m->db1, 1.0f / 3.0f, &s);
    m->w2 = view_(m, &off, (size_t)C2 * C1 * 9, &m->dw2, 1.0f / sqrtf(C1 * 9.0f), &s);
    m->b2 = view_(m, &off, C2, &m->db2, 1.0f / sqrtf(C1 * 9.0f), &s);
    m->w3 = view_(m, &off, (size_t)FC * flat, &m->dw3, 1.0f / sqrtf((float)flat), &s);
    m->b3 = view_(m, &off, FC, &m->db3, 1.0f / sqrtf((float)flat), &s);
    m->w4 = view_(m, &off, (size_t)NCLS * FC, &m->dw4, 1.0f / sqrtf((float)FC), &s);
    m->b4 = view_(m, &off, NCLS, &m->db4, 1.0f / sqrtf((float)FC), &s);
    for (int l = 0; l < 2; l++) {
        int c = l ? C2 : C1;
        bn_t *b = &m->bn[l];
        b->gamma = view_(m, &off, (size_t)c, &b->dgamma, 0.0f, &s);
        b->beta = view_(m, &off, (size_t)c, &b->dbeta, 0.0f, &s);
        for (int i = 0; i < c; i++) b->gamma[i] = 1.0f;
        b->mean = bench_alloc(compute, "bench_cnn", (size_t)c * sizeof(float));
        b->invstd = bench_alloc(compute, "bench_cnn", (size_t)c * sizeof(float));
        b->rm = bench_alloc(compute, "bench_cnn", (size_t)c * sizeof(float));
        b->rv = bench_alloc(compute, "bench_cnn", (size_t)c * sizeof(float));
        for (int i = 0; i < c; i++) b->rv[i] = 1.0f;
        b->stats = bench_alloc(compute, "bench_cnn", 2 * (size_t)c * sizeof(double));
    }
    size_t ws = compute->conv_ws_bytes(&m->cd[0]), ws2 = compute->conv_ws_bytes(&m->cd[1]);
    m->ws = bench_alloc(compute, "bench_cnn", ws > ws2 ? ws : ws2);
    m->x = bench_alloc(compute, "bench_cnn", (size_t)n * H0 * H0 * sizeof(float));
    for (size_t i = 0; i < (size_t)n * H0 * H0; i++) m->x[i] = 0.5f * (bench_urand(&s) + 1.0f);
    for (int l = 0; l < 2; l++) {
        size_t cn = (size_t)n * m->cd[l].oc * m->cd[l].oh * m->cd[l].ow;
        m->h[l] = bench_alloc(compute, "bench_cnn", cn * sizeof(float));
        m->bo[l] = bench_alloc(compute, "bench_cnn", cn * sizeof(float));
        m->r[l] = bench_alloc(compute, "bench_cnn", cn * sizeof(float));
        m->p[l] = bench_alloc(compute, "bench_cnn", cn / 4 * sizeof(float));
        m->am[l] = bench_alloc(compute, "bench_cnn", cn / 4 * sizeof(int32_t));
    }
    m->f1 = bench_alloc(compute, "bench_cnn", (size_t)n * FC * sizeof(float));
    m->fr = bench_alloc(compute, "bench_cnn", (size_t)n * FC * sizeof(float));
    m->logits = bench_alloc(compute, "bench_cnn", (size_t)n * NCLS * sizeof(float));
    m->labels = bench_alloc(compute, "bench_cnn", (size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) m->labels[i] = (int32_t)((bench_urand(&s) + 1.0f) * 5.0f) % NCLS;
    for (int k = 0; k < 2; k++)
        m->dbig[k] = bench_alloc(compute, "bench_cnn", (size_t)n * C1 * H0 * H0 * sizeof(float));
}

static void net_free_(net_t *m)
{
    const compute_ops_t *c = m->compute;
    c->free(m->params), c->free(m->grads), c->free(m->mom), c->free(m->ws), c->free(m->x);
    for (int l = 0; l < 2; l++) {
        bn_t *b = &m->bn[l];
        c->free(b->mean), c->free(b->invstd), c->free(b->rm), c->free(b->rv), c->free(b->stats);
        c->free(m->h[l]), c->free(m->bo[l]), c->free(m->r[l]), c->free(m->p[l]);
        c->free(m->am[l]), c->free(m->dbig[l]);
    }
    c->free(m->f1), c->free(m->fr), c->free(m->logits), c->free(m->labels);
}

static double conv_flop_(const conv_dims_t *d)
{
    return 2.0 * d->n * d->oc * d->oh * d->ow * d->c * d->k * d->k;
}

/* one training step; returns the mean loss */
static double net_step_(net_t *m, int first)
{
    const compute_ops_t *c = m->compute;
    const int n = m->batch, flat = C2 * (H0 / 4) * (H0 / 4);
    const float *in = m->x;
    const float *cw[2] = {m->w1, m->w2}, *cb[2] = {m->b1, m->b2};
    for (int l = 0; l < 2; l++) {
        const conv_dims_t *d = &m->cd[l];
        const int hw = d->oh * d->ow;
        const size_t cnt = (size_t)n * d->oc * hw;
        bn_t *b = &m->bn[l];
        TIMED(l ? OP_CONV2_FWD : OP_CONV1_FWD, conv_flop_(d),
              c->conv_fwd(d, in, cw[l], cb[l], m->h[l], m->ws));
        TIMED(l ? OP_BN2_FWD : OP_BN1_FWD, 0, {
            c->bn_stats(n, d->oc, hw, m->h[l], b->stats);
            c->bn_finalize(d->oc, b->stats, (double)n * hw, 1e-5f, 0.1f, 1, b->mean, b->invstd,
                           b->rm, b->rv);
            c->bn_fwd(n, d->oc, hw, m->h[l], b->mean, b->invstd, b->gamma, b->beta, m->bo[l], 0, NULL);
        });
        TIMED(OP_RELU_FWD, 0, c->relu_fwd(cnt, m->bo[l], m->r[l]));
        TIMED(l ? OP_POOL2_FWD : OP_POOL1_FWD, 0,
              c->maxpool_fwd(&m->pd[l], m->r[l], m->p[l], m->am[l]));
        in = m->p[l];
    }
    TIMED(OP_LIN_FWD, 2.0 * n * flat * FC, c->linear_fwd(n, flat, FC, in, m->w3, m->b3, m->f1, 0));
    TIMED(OP_RELU_FWD, 0, c->relu_fwd((size_t)n * FC, m->f1, m->fr));
    TIMED(OP_LIN_FWD, 2.0 * n * FC * NCLS,
          c->linear_fwd(n, FC, NCLS, m->fr, m->w4, m->b4, m->logits, 0));
    double acc[2] = {0, 0};
    float *g = m->dbig[0], *h = m->dbig[1], *t;
    TIMED(OP_XENT, 0, c->xent(n, NCLS, m->logits, m->labels, 0.0f, 1.0f / n, g, acc));
    TIMED(OP_LIN_BWD, 4.0 * n * FC * NCLS,
          c->linear_bwd(n, FC, NCLS, m->fr, m->w4, g, h, m->dw4, m->db4, 0.0f, NULL, NULL));
    t = g, g = h, h = t;
    TIMED(OP_RELU_BWD, 0, c->relu_bwd((size_t)n * FC, m->f1, g, g, NULL));
    TIMED(OP_LIN_BWD, 4.0 * n * flat * FC,
          c->linear_bwd(n, flat, FC, m->p[1], m->w3, g, h, m->dw3, m->db3, 0.0f, NULL, NULL));
    t = g, g = h, h = t;
    float *cdw[2] = {m->dw1, m->dw2}, *cdb[2] = {m->db1, m->db2};
    for (int l = 1; l >= 0; l--) {
        const conv_dims_t *d = &m->cd[l];
        const int hw = d->oh * d->ow;
        const size_t cnt = (size_t)n * d->oc * hw;
        bn_t *b = &m->bn[l];
        TIMED(l ? OP_POOL2_BWD : OP_POOL1_BWD, 0, c->maxpool_bwd(&m->pd[l], g, m->am[l], h));
        t = g, g = h, h = t;
        TIMED(OP_RELU_BWD, 0, c->relu_bwd(cnt, m->bo[l], g, g, NULL));
        TIMED(l ? OP_BN2_BWD : OP_BN1_BWD, 0, {
            c->bn_bwd_stats(n, d->oc, hw, m->h[l], g, b->mean, b->invstd, b->stats, b->dgamma,
                            b->dbeta, 0.0f, NULL, NULL);
            c->bn_bwd_data(n, d->oc, hw, m->h[l], g, b->mean, b->invstd, b->gamma, b->stats,
                           (double)n * hw, g, NULL);
        });
        TIMED(l ? OP_CONV2_BWD : OP_CONV1_BWD, conv_flop_(d) * (l ? 2 : 1),
              c->conv_bwd(d, l ? m->p[0] : m->x, cw[l], g, l ? h : NULL, cdw[l], cdb[l], 0.0f,
                          m->ws));
        t = g, g = h, h = t;
    }
    TIMED(OP_SGD, 0,
          c->sgd_step(m->nparams, m->params, m->grads, m->mom, 0.01f, 0.9f, 0, 0.0f, first));
    return acc[0] / n;
}

/* Samples per convolution GEMM of the CPU backend (cpu/cpu_conv.c's
 * conv_group_: GEMMs of up to CONV_COLS columns; -DBENCH_CONV_COLS=N to time
 * a backend built with another CONV_COLS). */
#ifndef BENCH_CONV_COLS
#define BENCH_CONV_COLS 256
#endif
static int conv_group_(const conv_dims_t *d)
{
    int g = BENCH_CONV_COLS / (d->oh * d->ow);
    return g < 1 ? 1 : g > d->n ? d->n : g;
}

/* cblas_sgemm alone on the GEMM shapes of each op, same sizes of buffers
 * (scratch contents); adds seconds to op_gemm */
static void gemm_pass_(net_t *m, float *A, float *Bm, float *C)
{
    const int n = m->batch, flat = C2 * (H0 / 4) * (H0 / 4);
    for (int l = 0; l < 2; l++) {
        const conv_dims_t *d = &m->cd[l];
        const int ckk = d->c * d->k * d->k, g = conv_group_(d), ohw = d->oh * d->ow;
        double t0 = clock_seconds();
        for (int i0 = 0; i0 < n; i0 += g) {
            int cols = (n - i0 < g ? n - i0 : g) * ohw;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->oc, cols, ckk, 1.0f, A, ckk,
                        Bm, cols, 0.0f, C, cols);
        }
        double t1 = clock_seconds();
        for (int i0 = 0; i0 < n; i0 += g) {
            int cols = (n - i0 < g ? n - i0 : g) * ohw;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->oc, ckk, cols, 1.0f, C, cols,
                        Bm, cols, 1.0f, A, ckk);
            if (l)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, cols, d->oc, 1.0f, A, ckk,
                            C, cols, 0.0f, Bm, cols);
        }
        double t2 = clock_seconds();
        op_gemm[l ? OP_CONV2_FWD : OP_CONV1_FWD] += t1 - t0;
        op_gemm[l ? OP_CONV2_BWD : OP_CONV1_BWD] += t2 - t1;
    }
    double t0 = clock_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, FC, flat, 1.0f, A, flat, Bm, flat, 0.0f,
                C, FC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, NCLS, FC, 1.0f, A, FC, Bm, FC, 0.0f, C,
                NCLS);
    double t1 = clock_seconds();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, NCLS, FC, n, 1.0f, A, NCLS, Bm, FC, 0.0f,
                C, FC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, FC, NCLS, 1.0f, A, NCLS, Bm, FC, 0.0f,
                C, FC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, FC, flat, n, 1.0f, A, FC, Bm, flat, 0.0f,
                C, flat);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, flat, FC, 1.0f, A, FC, Bm, flat, 0.0f,
                C, flat);
    double t2 = clock_seconds();
    op_gemm[OP_LIN_FWD] += t1 - t0;
    op_gemm[OP_LIN_BWD] += t2 - t1;
}

/* The timed cases (bench_common.h): the training step, and sgemm alone on
 * its GEMM shapes as the reference. */
typedef struct run {
    net_t *m;
    int warmup;
    float *A, *Bm, *C;  /* scratch of the sgemm-alone pass */
    double loss0, loss; /* the first warm-up step's loss, the last step's */
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
    gemm_pass_(r->m, r->A, r->Bm, r->C);
}

int main(int argc, char **argv)
{
    int batch = 64, steps = 100, warmup = 5;
    int rc = bench_step_args(argc, argv, "bench_cnn", &batch, &steps, &warmup);
    if (rc >= 0) return rc;
    const compute_ops_t *compute = compute_find("cpu");
    net_t m;
    net_init_(&m, compute, batch);
    /* scratch for the sgemm-alone pass: big enough for every shape */
    size_t big = (size_t)batch * C1 * H0 * H0;
    float *A = bench_alloc(compute, "bench_cnn", big * sizeof(float)), *Bm = bench_alloc(compute, "bench_cnn", big * sizeof(float));
    float *C = bench_alloc(compute, "bench_cnn", big * sizeof(float));
    for (size_t i = 0; i < big; i++) A[i] = Bm[i] = C[i] = 1e-3f;

    /* steps and sgemm-alone passes alternate in blocks of 10 (the machine is
     * shared: both see the same load); the passes add their time per op to
     * op_gemm themselves */
    run_t r = {.m = &m, .warmup = warmup, .A = A, .Bm = Bm, .C = C};
    double *tstep = malloc((size_t)steps * sizeof *tstep);
    double *tgemm = malloc((size_t)steps * sizeof *tgemm);
    bench_case_t cases[2] = {{.run = step_case_, .arg = &r, .warmup = warmup, .t = tstep},
                             {.run = gemm_case_, .arg = &r, .t = tgemm}};
    bench_loop_run(&(bench_loop_t){.samples = steps, .block = 10}, cases, 2);
    double loss0 = r.loss0, loss = r.loss;
    int gemm_passes = steps;
    double step_med = bench_median(tstep, steps), total = 0, gemm_total = 0, flop = 0;
    for (int k = 0; k < NOPS; k++) {
        total += op_time[k];
        gemm_total += op_gemm[k];
        flop += op_flop[k];
    }

    printf("# bench_cnn: conv32-bn-relu-pool-conv64-bn-relu-pool-fc128-fc10 on 1x28x28, batch %d, "
           "SGD momentum, backend %s\n",
           batch, compute->name);
    printf("# %d timed steps after %d warm-up, BLAS threads: %s\n", steps, warmup,
           getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "1");
    printf("#\n# %-26s %10s %7s %9s %8s\n", "op", "time/step", "share", "rate", "of sgemm");
    printf("# %-26s %10s %7s %9s %8s\n", "", "(ms, mean)", "(%)", "(GFLOP/s)", "(%)");
    for (int k = 0; k < NOPS; k++) {
        char rate[32] = "-", ofg[32] = "-";
        if (op_flop[k] > 0) snprintf(rate, sizeof rate, "%.1f", op_flop[k] / op_time[k] * 1e-9);
        if (op_gemm[k] > 0)
            snprintf(ofg, sizeof ofg, "%.0f",
                     100 * (op_gemm[k] / gemm_passes) / (op_time[k] / steps));
        printf("  %-26s %10.3f %7.1f %9s %8s\n", op_names[k], op_time[k] / steps * 1e3,
               100 * op_time[k] / total, rate, ofg);
        const compute_cpu_prof_t *p = &op_prof[k];
        double ph[5] = {p->im2col, p->gemm, p->col2im, p->bias, p->copy};
        static const char *phn[5] = {"im2col", "GEMM", "col2im", "bias", "layout copy"};
        if (ph[1] > 0)
            for (int q = 0; q < 5; q++)
                if (ph[q] > 0) {
                    char r2[32] = "-";
                    if (q == 1) snprintf(r2, sizeof r2, "%.1f", op_flop[k] / ph[q] * 1e-9);
                    printf("    %-24s %10.3f %7.1f %9s\n", phn[q], ph[q] / steps * 1e3,
                           100 * ph[q] / total, r2);
                }
    }
    printf("#\n# %-34s %12s %10s %10s\n", "", "time", "samples/s", "GFLOP/s");
    printf("# %-34s %12s %10s %10s\n", "", "(ms)", "", "");
    printf("  %-34s %12.3f %10.0f %10.1f\n", "training step (median)", step_med * 1e3,
           batch / step_med, flop / steps / step_med * 1e-9);
    printf("  %-34s %12.3f %10s %10s\n", "sum of the ops (mean)", total / steps * 1e3, "-", "-");
    printf("  %-34s %12.3f %10.0f %10.1f\n", "cblas_sgemm alone (same shapes)",
           gemm_total / gemm_passes * 1e3, batch / (gemm_total / gemm_passes),
           flop / steps / (gemm_total / gemm_passes) * 1e-9);
    int ok = compute->all_finite(m.nparams, m.params) && loss < loss0;
    printf("# check: loss %.4f -> %.4f, weights finite: %s -> %s\n", loss0, loss,
           compute->all_finite(m.nparams, m.params) ? "yes" : "NO", ok ? "OK" : "WRONG");
    free(tstep), free(tgemm);
    compute->free(A), compute->free(Bm), compute->free(C);
    net_free_(&m);
    return ok ? 0 : 1;
}
