/* cpu_bn.c -- batch normalisation in the CPU backend (as cuda/bn.cu) over
 * x[n, c, hw] (hw = 1: BatchNorm1d): the per-channel sums in double
 * (statistics, and those of backward), finalize and eval parameters
 * (backend_math.h, shared with the GPU), the forward affine map and the
 * input gradient.  The loops that stream activations through double
 * accumulators have AVX2 clones (WIDE_CLONES, cpu_kernels.h), static
 * functions that the exported ops call. */
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

/* y = x a + b with a = invstd gamma, b = beta_ - mean a (PyTorch's CPU form) */
void cpu_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                const float *gamma, const float *beta_, float *y)
{
    if (n <= 0 || c <= 0 || hw <= 0) return;
    if (hw == 1) {
        float a[CB], b[CB];
        for (int j0 = 0; j0 < c; j0 += CB) {
            int len = MIN(CB, c - j0);
            for (int j = 0; j < len; j++) {
                a[j] = invstd[j0 + j] * gamma[j0 + j];
                b[j] = beta_[j0 + j] - mean[j0 + j] * a[j];
            }
            for (int i = 0; i < n; i++) {
                size_t off = (size_t)i * c + j0;
                span_axpb_v_((size_t)len, x + off, a, b, y + off);
            }
        }
        return;
    }
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            float a = invstd[ch] * gamma[ch], b = beta_[ch] - mean[ch] * a;
            size_t off = ((size_t)i * c + ch) * hw;
            span_axpb_s_((size_t)hw, x + off, a, b, y + off);
        }
}

/* x, dy [n, c] (hw == 1): g1[j] = sum_i dy[i, j], g2[j] = sum_i dy[i, j] (x[i, j] -
 * mean[j]) in double, row by row as stats_rows_ */
static void gstats_rows_(int n, int c, const float *restrict x, const float *restrict dy,
                         const float *restrict mean, double *restrict g1, double *restrict g2)
{
    memset(g1, 0, (size_t)c * sizeof *g1);
    memset(g2, 0, (size_t)c * sizeof *g2);
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * c, *gr = dy + (size_t)i * c;
        int k = 0;
        for (; k + VB <= c; k += VB)
            for (int q = 0; q < VB; q++) {
                float g = gr[k + q];
                g1[k + q] += (double)g;
                g2[k + q] += (double)(g * (xr[k + q] - mean[k + q]));
            }
        for (; k < c; k++) {
            float g = gr[k];
            g1[k] += (double)g;
            g2[k] += (double)(g * (xr[k] - mean[k]));
        }
    }
}

WIDE_CLONES
static void bn_bwd_stats_(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                          const float *invstd, double *gstats, float *dgamma, float *dbeta,
                          float beta)
{
    if (c <= 0) return;
    double *g1 = gstats, *g2 = gstats + c;
    memset(gstats, 0, 2 * (size_t)c * sizeof *gstats);
    if (n > 0 && hw == 1) {
        gstats_rows_(n, c, x, dy, mean, g1, g2);
    } else if (n > 0 && hw > 1) {
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++) {
                size_t off = ((size_t)i * c + ch) * hw;
                const float *xp = x + off, *gp = dy + off;
                const float m = mean[ch];
                double a1[VB] = {0}, a2[VB] = {0}, t1 = 0, t2 = 0;
                int k = 0;
                for (; k + VB <= hw; k += VB)
                    for (int q = 0; q < VB; q++) {
                        float g = gp[k + q];
                        a1[q] += (double)g;
                        a2[q] += (double)(g * (xp[k + q] - m));
                    }
                for (; k < hw; k++) {
                    float g = gp[k];
                    t1 += (double)g;
                    t2 += (double)(g * (xp[k] - m));
                }
                for (int q = 0; q < VB; q++) {
                    t1 += a1[q];
                    t2 += a2[q];
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
                      const float *invstd, double *gstats, float *dgamma, float *dbeta, float beta)
{
    bn_bwd_stats_(n, c, hw, x, dy, mean, invstd, gstats, dgamma, dbeta, beta);
}

/* dx = gamma invstd (dy - mdy - xhat mdyx) = A dy + B (x - mean) + C per
 * channel with A = gamma invstd, B = -A invstd mdyx, C = -A mdy (x - mean
 * rather than folding mean into C: no cancellation when |mean| >> std). */
static inline void span_bn_dx_(size_t len, const float *x, const float *dy, const float *A,
                               const float *B, const float *C, const float *mean, float *dx)
{
    size_t k = 0;
    for (; k + VB <= len; k += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++)
            t[q] = A[k + q] * dy[k + q] + B[k + q] * (x[k + q] - mean[k + q]) + C[k + q];
        UNROLL_VB
        for (int q = 0; q < VB; q++) dx[k + q] = t[q];
    }
    for (; k < len; k++) dx[k] = A[k] * dy[k] + B[k] * (x[k] - mean[k]) + C[k];
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
                         double count, float *dx)
{
    if (n <= 0 || c <= 0 || hw <= 0 || !dx) return;
    if (hw == 1) {
        float A[CB], B[CB], C[CB];
        for (int j0 = 0; j0 < c; j0 += CB) {
            int len = MIN(CB, c - j0);
            for (int j = 0; j < len; j++)
                bn_dx_coef_(j0 + j, invstd, gamma, gstats, c, count, &A[j], &B[j], &C[j]);
            for (int i = 0; i < n; i++) {
                size_t off = (size_t)i * c + j0;
                span_bn_dx_((size_t)len, x + off, dy + off, A, B, C, mean + j0, dx + off);
            }
        }
        return;
    }
    for (int ch = 0; ch < c; ch++) {
        float A, B, C;
        const float m = mean[ch];
        bn_dx_coef_(ch, invstd, gamma, gstats, c, count, &A, &B, &C);
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * c + ch) * hw;
            const float *xp = x + off, *gp = dy + off;
            float *dp = dx + off;
            int k = 0;
            for (; k + VB <= hw; k += VB) {
                float t[VB];
                UNROLL_VB
                for (int q = 0; q < VB; q++) t[q] = A * gp[k + q] + B * (xp[k + q] - m) + C;
                UNROLL_VB
                for (int q = 0; q < VB; q++) dp[k + q] = t[q];
            }
            for (; k < hw; k++) dp[k] = A * gp[k] + B * (xp[k] - m) + C;
        }
    }
}

/* the op: bn_bwd_data_, the clone for this CPU */
void cpu_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                     const float *invstd, const float *gamma, const double *gstats, double count,
                     float *dx)
{
    bn_bwd_data_(n, c, hw, x, dy, mean, invstd, gamma, gstats, count, dx);
}
