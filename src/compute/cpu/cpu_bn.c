/* cpu_bn.c -- batch normalisation in the CPU backend (as cuda/bn.cu) over
 * x[n, c, hw] (hw = 1: BatchNorm1d): the per-channel sums in double
 * (statistics, and those of backward), finalize and eval parameters
 * (backend_math.h, shared with the GPU), the forward affine map and the
 * input gradient.  The loops that stream activations through double
 * accumulators have AVX2 clones (WIDE_CLONES, cpu_kernels.h), static
 * functions that the exported ops call.  A ReLU fused after the BatchNorm
 * (compute.h) is applied to the forward's output span while it is in cache,
 * and its mask recomputed from x in backward (relu_dy_). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "backend_math.h"
#include "cpu_kernels.h"

#define CB 256 /* channels per block of per-channel coefficients (hw == 1) */

/* y[k] = x[k] a[k] + b[k] (per-channel a, b), y may equal x */
static inline void span_axpb_v_(size_t len, const float *x, const float *a, const float *b,
                                float *y)
{
    size_t k = 0;
    for (; k + VB <= len; k += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) t[q] = x[k + q] * a[k + q] + b[k + q];
        UNROLL_VB
        for (int q = 0; q < VB; q++) y[k + q] = t[q];
    }
    for (; k < len; k++) y[k] = x[k] * a[k] + b[k];
}

/* x[n, c] (hw == 1): s1[j] = sum_i x[i, j], s2[j] = sum_i x[i, j]^2 in double,
 * row by row: x streams through once in memory order (faster in the step,
 * where x comes from L3, than blocks of channels held in registers). */
static void stats_rows_(int n, int c, const float *restrict x, double *restrict s1,
                        double *restrict s2)
{
    memset(s1, 0, (size_t)c * sizeof *s1);
    memset(s2, 0, (size_t)c * sizeof *s2);
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * c;
        int k = 0;
        for (; k + VB <= c; k += VB)
            for (int q = 0; q < VB; q++) {
                double v = xr[k + q];
                s1[k + q] += v;
                s2[k + q] += v * v;
            }
        for (; k < c; k++) {
            double v = xr[k];
            s1[k] += v;
            s2[k] += v * v;
        }
    }
}

WIDE_CLONES
static void bn_stats_(int n, int c, int hw, const float *x, double *stats)
{
    if (c <= 0) return;
    double *s1 = stats, *s2 = stats + c;
    memset(stats, 0, 2 * (size_t)c * sizeof *stats);
    if (n <= 0 || hw <= 0) return;
    if (hw == 1) {
        /* x[n, c]: add rows (unit stride over channels) */
        stats_rows_(n, c, x, s1, s2);
        return;
    }
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            const float *xp = x + ((size_t)i * c + ch) * hw;
            double a1[VB] = {0}, a2[VB] = {0}, t1 = 0, t2 = 0;
            int k = 0;
            for (; k + VB <= hw; k += VB)
                for (int q = 0; q < VB; q++) {
                    double v = xp[k + q];
                    a1[q] += v;
                    a2[q] += v * v;
                }
            for (; k < hw; k++) {
                double v = xp[k];
                t1 += v;
                t2 += v * v;
            }
            for (int q = 0; q < VB; q++) {
                t1 += a1[q];
                t2 += a2[q];
            }
            s1[ch] += t1;
            s2[ch] += t2;
        }
}

/* the op: bn_stats_, the clone for this CPU */
void cpu_bn_stats(int n, int c, int hw, const float *x, double *stats)
{
    bn_stats_(n, c, hw, x, stats);
}

/* Statistics are double (ddp_bn_finalize_ch, backend_math.h, shared with
 * cuda/bn.cu); count <= 0 (no sample anywhere) gives mean 0, invstd
 * 1/sqrt(eps) and leaves the running statistics alone.  The unbiased
 * variance needs count > 1; with count == 1 the biased one is used. */
void cpu_bn_finalize(int c, const double *stats, double count, float eps, float momentum,
                     int update_running, float *mean, float *invstd, float *running_mean,
                     float *running_var)
{
    for (int ch = 0; ch < c; ch++)
        ddp_bn_finalize_ch(ch, c, stats, count, eps, momentum, update_running, mean, invstd,
                           running_mean, running_var);
}

void cpu_bn_eval_params(int c, const float *running_mean, const float *running_var, float eps,
                        float *mean, float *invstd)
{
    for (int ch = 0; ch < c; ch++) {
        mean[ch] = running_mean[ch];
        invstd[ch] = (float)(1.0 / sqrt((double)running_var[ch] + (double)eps));
    }
}

/* The end of a span of bn_fwd's output: + res, then relu (as cpu_add and
 * cpu_relu_fwd alone would). */
static inline void bn_fwd_tail_(size_t len, const float *res, int relu, float *y)
{
    if (res)
        cpu_add(len, y, res, y, relu);
    else if (relu)
        cpu_relu_fwd(len, y, y);
}

/* y = x a + b with a = invstd gamma, b = beta_ - mean a (ddp_bn_ab); res:
 * then y + res; relu: then relu(y); over the span while it is in cache */
void cpu_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                const float *gamma, const float *beta_, float *y, int relu, const float *res)
{
    if (n <= 0 || c <= 0 || hw <= 0) return;
    if (hw == 1) {
        float a[CB], b[CB];
        for (int j0 = 0; j0 < c; j0 += CB) {
            int len = MIN(CB, c - j0);
            for (int j = 0; j < len; j++)
                ddp_bn_ab(mean[j0 + j], invstd[j0 + j], gamma[j0 + j], beta_[j0 + j], &a[j], &b[j]);
            for (int i = 0; i < n; i++) {
                size_t off = (size_t)i * c + j0;
                span_axpb_v_((size_t)len, x + off, a, b, y + off);
                bn_fwd_tail_((size_t)len, res ? res + off : NULL, relu, y + off);
            }
        }
        return;
    }
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            float a, b;
            ddp_bn_ab(mean[ch], invstd[ch], gamma[ch], beta_[ch], &a, &b);
            size_t off = ((size_t)i * c + ch) * hw;
            span_axpb_s_((size_t)hw, x + off, a, b, y + off);
            bn_fwd_tail_((size_t)hw, res ? res + off : NULL, relu, y + off);
        }
}

/* The gradient a fused ReLU passes back at x (dy where the BatchNorm's output
 * x a + b is kept, ddp_relu_keep); relu 0: dy.  Inlined with a constant relu,
 * so the loops without a ReLU are the plain ones. */
static inline float relu_dy_(int relu, float x, float a, float b, float dy)
{
    return !relu || ddp_relu_keep(x * a + b) ? dy : 0.0f;
}

/* x, dy [n, c] (hw == 1): g1[j] = sum_i dy[i, j], g2[j] = sum_i dy[i, j] (x[i, j] -
 * mean[j]) in double, row by row as stats_rows_ */
static inline void gstats_rows_(int relu, int n, int c, const float *restrict x,
                                const float *restrict dy, const float *restrict mean,
                                const float *invstd, const float *gamma, const float *beta_,
                                double *restrict g1, double *restrict g2)
{
    memset(g1, 0, (size_t)c * sizeof *g1);
    memset(g2, 0, (size_t)c * sizeof *g2);
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * c, *gr = dy + (size_t)i * c;
        int k = 0;
        for (; k + VB <= c; k += VB)
            for (int q = 0; q < VB; q++) {
                float a = 0, b = 0;
                if (relu) ddp_bn_ab(mean[k + q], invstd[k + q], gamma[k + q], beta_[k + q], &a, &b);
                float g = relu_dy_(relu, xr[k + q], a, b, gr[k + q]);
                g1[k + q] += (double)g;
                g2[k + q] += (double)(g * (xr[k + q] - mean[k + q]));
            }
        for (; k < c; k++) {
            float a = 0, b = 0;
            if (relu) ddp_bn_ab(mean[k], invstd[k], gamma[k], beta_[k], &a, &b);
            float g = relu_dy_(relu, xr[k], a, b, gr[k]);
            g1[k] += (double)g;
            g2[k] += (double)(g * (xr[k] - mean[k]));
        }
    }
}

/* One (sample, channel) span of hw > 1: t1 += sum dy, t2 += sum dy (x - m),
 * in VB lanes then the tail, as every build sums it. */
static inline void gstats_span_(int relu, int hw, const float *xp, const float *gp, float m,
                                float a, float b, double *t1, double *t2)
{
    double a1[VB] = {0}, a2[VB] = {0}, s1 = 0, s2 = 0;
    int k = 0;
    for (; k + VB <= hw; k += VB)
        for (int q = 0; q < VB; q++) {
            float g = relu_dy_(relu, xp[k + q], a, b, gp[k + q]);
            a1[q] += (double)g;
            a2[q] += (double)(g * (xp[k + q] - m));
        }
    for (; k < hw; k++) {
        float g = relu_dy_(relu, xp[k], a, b, gp[k]);
        s1 += (double)g;
        s2 += (double)(g * (xp[k] - m));
    }
    for (int q = 0; q < VB; q++) {
        s1 += a1[q];
        s2 += a2[q];
    }
    *t1 = s1;
    *t2 = s2;
}

WIDE_CLONES
static void bn_bwd_stats_(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                          const float *invstd, double *gstats, float *dgamma, float *dbeta,
                          float beta, const float *relu_gamma, const float *relu_beta)
{
    if (c <= 0) return;
    double *g1 = gstats, *g2 = gstats + c;
    memset(gstats, 0, 2 * (size_t)c * sizeof *gstats);
    const int relu = relu_beta != NULL;
    if (n > 0 && hw == 1) {
        if (relu)
            gstats_rows_(1, n, c, x, dy, mean, invstd, relu_gamma, relu_beta, g1, g2);
        else
            gstats_rows_(0, n, c, x, dy, mean, NULL, NULL, NULL, g1, g2);
    } else if (n > 0 && hw > 1) {
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++) {
                size_t off = ((size_t)i * c + ch) * hw;
                double t1, t2;
                if (relu) {
                    float a, b;
                    ddp_bn_ab(mean[ch], invstd[ch], relu_gamma[ch], relu_beta[ch], &a, &b);
                    gstats_span_(1, hw, x + off, dy + off, mean[ch], a, b, &t1, &t2);
                } else {
                    gstats_span_(0, hw, x + off, dy + off, mean[ch], 0, 0, &t1, &t2);
                }
                g1[ch] += t1;
                g2[ch] += t2;
            }
    }
    /* sum dy xhat = invstd sum dy (x - mean) */
    for (int ch = 0; ch < c; ch++) {
        g2[ch] *= (double)invstd[ch];
        if (dgamma) dgamma[ch] = (float)(beta == 0.0f ? g2[ch] : beta * dgamma[ch] + g2[ch]);
        if (dbeta) dbeta[ch] = (float)(beta == 0.0f ? g1[ch] : beta * dbeta[ch] + g1[ch]);
    }
}

/* the op: bn_bwd_stats_, the clone for this CPU */
void cpu_bn_bwd_stats(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                      const float *invstd, double *gstats, float *dgamma, float *dbeta, float beta,
                      const float *relu_gamma, const float *relu_beta)
{
    bn_bwd_stats_(n, c, hw, x, dy, mean, invstd, gstats, dgamma, dbeta, beta, relu_gamma,
                  relu_beta);
}

/* dx = gamma invstd (dy - mdy - xhat mdyx) = A dy + B (x - mean) + C per
 * channel with A = gamma invstd, B = -A invstd mdyx, C = -A mdy (x - mean
 * rather than folding mean into C: no cancellation when |mean| >> std). */
static inline void span_bn_dx_(int relu, size_t len, const float *x, const float *dy,
                               const float *A, const float *B, const float *C, const float *mean,
                               const float *ra, const float *rb, float *dx)
{
    size_t k = 0;
    for (; k + VB <= len; k += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) {
            float g =
                relu_dy_(relu, x[k + q], relu ? ra[k + q] : 0, relu ? rb[k + q] : 0, dy[k + q]);
            t[q] = A[k + q] * g + B[k + q] * (x[k + q] - mean[k + q]) + C[k + q];
        }
        UNROLL_VB
        for (int q = 0; q < VB; q++) dx[k + q] = t[q];
    }
    for (; k < len; k++) {
        float g = relu_dy_(relu, x[k], relu ? ra[k] : 0, relu ? rb[k] : 0, dy[k]);
        dx[k] = A[k] * g + B[k] * (x[k] - mean[k]) + C[k];
    }
}

/* One (sample, channel) span of hw > 1 (per-channel A, B, C, m, a, b). */
static inline void span_bn_dx_s_(int relu, int hw, const float *xp, const float *gp, float A,
                                 float B, float C, float m, float a, float b, float *dp)
{
    int k = 0;
    for (; k + VB <= hw; k += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++)
            t[q] = A * relu_dy_(relu, xp[k + q], a, b, gp[k + q]) + B * (xp[k + q] - m) + C;
        UNROLL_VB
        for (int q = 0; q < VB; q++) dp[k + q] = t[q];
    }
    for (; k < hw; k++) dp[k] = A * relu_dy_(relu, xp[k], a, b, gp[k]) + B * (xp[k] - m) + C;
}

static void bn_dx_coef_(int ch, const float *invstd, const float *gamma, const double *gstats,
                        int c, double count, float *A, float *B, float *C)
{
    double a = (double)gamma[ch] * invstd[ch];
    double mdy = count > 0 ? gstats[ch] / count : 0;
    double mdyx = count > 0 ? gstats[c + ch] / count : 0;
    *A = (float)a;
    *B = (float)(-a * invstd[ch] * mdyx);
    *C = (float)(-a * mdy);
}

WIDE_CLONES
static void bn_bwd_data_(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                         const float *invstd, const float *gamma, const double *gstats,
                         double count, float *dx, const float *relu_beta)
{
    if (n <= 0 || c <= 0 || hw <= 0 || !dx) return;
    const int relu = relu_beta != NULL;
    if (hw == 1) {
        float A[CB], B[CB], C[CB], ra[CB], rb[CB];
        for (int j0 = 0; j0 < c; j0 += CB) {
            int len = MIN(CB, c - j0);
            for (int j = 0; j < len; j++) {
                bn_dx_coef_(j0 + j, invstd, gamma, gstats, c, count, &A[j], &B[j], &C[j]);
                if (relu)
                    ddp_bn_ab(mean[j0 + j], invstd[j0 + j], gamma[j0 + j], relu_beta[j0 + j],
                              &ra[j], &rb[j]);
            }
            for (int i = 0; i < n; i++) {
                size_t off = (size_t)i * c + j0;
                if (relu)
                    span_bn_dx_(1, (size_t)len, x + off, dy + off, A, B, C, mean + j0, ra, rb,
                                dx + off);
                else
                    span_bn_dx_(0, (size_t)len, x + off, dy + off, A, B, C, mean + j0, NULL, NULL,
                                dx + off);
            }
        }
        return;
    }
    for (int ch = 0; ch < c; ch++) {
        float A, B, C, a = 0, b = 0;
        const float m = mean[ch];
        bn_dx_coef_(ch, invstd, gamma, gstats, c, count, &A, &B, &C);
        if (relu) ddp_bn_ab(m, invstd[ch], gamma[ch], relu_beta[ch], &a, &b);
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * c + ch) * hw;
            if (relu)
                span_bn_dx_s_(1, hw, x + off, dy + off, A, B, C, m, a, b, dx + off);
            else
                span_bn_dx_s_(0, hw, x + off, dy + off, A, B, C, m, 0, 0, dx + off);
        }
    }
}

/* the op: bn_bwd_data_, the clone for this CPU */
void cpu_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                     const float *invstd, const float *gamma, const double *gstats, double count,
                     float *dx, const float *relu_beta)
{
    bn_bwd_data_(n, c, hw, x, dy, mean, invstd, gamma, gstats, count, dx, relu_beta);
}
