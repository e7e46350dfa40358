/* cpu_kernels.h -- what the rooms of the CPU compute backend share (private
 * to src/compute/cpu/): the vector block size and the AVX2 clones, the
 * convolution's phase-timer macros, the small span helpers, and the
 * functions each room gives the ops table (compute_cpu.c).
 *
 * Vectorisation: GCC 12 at -O2 only vectorises loops whose trip count is a
 * known multiple of the vector length and that need no run-time alias
 * checks.  Hot loops are therefore written over blocks of VB elements: a
 * fully unrolled (UNROLL_VB) loop computing the block into a local array `t`,
 * a copy-out loop, then a scalar tail; the SLP vectoriser turns each block
 * into straight-line vector code with `t` in registers.  Reading every input
 * of a block before writing its output also makes the elementwise ops safe
 * in place (y == x, dx == dy; other overlaps are not supported).  Sums that
 * must be double accumulate in VB independent lanes (plain loops the loop
 * vectoriser takes).  The GEMMs and sgd_step/adamw_step are bound by BLAS
 * and by memory bandwidth respectively (bench/bench_kernels.c).
 *
 * Conventions: parameter gradients follow `beta` (0 overwrites without
 * reading the old value, 1 accumulates, anything else scales first); input
 * gradients are overwritten, dx == NULL skips them; n == 0 does no work
 * except the beta update of parameter gradients. */
#ifndef DDP_CPU_KERNELS_H
#define DDP_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "clock.h"
#include "compute.h"

#define VB 16 /* elements per vectorised block */
/* Unrolls a loop over one block completely (GCC >= 8 and clang know the
 * pragma); the literal must equal VB. */
#define UNROLL_VB _Pragma("GCC unroll 16")

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* AVX2 copies of the loops that stream large activations through double
 * accumulators (BatchNorm statistics and backward, the convolution's bias
 * gradient), picked at load time on CPUs that have AVX2 (target_clones, an
 * ELF ifunc); the build itself targets baseline x86-64.  AVX2 without FMA:
 * the same IEEE operations in the same order as the baseline code (no
 * contraction), so the results are bit for bit the same, about 1.4x faster
 * (BatchNorm over [64, 32, 28, 28]: stats 0.51 -> 0.36 ms, backward stats
 * 0.52 -> 0.38 ms, backward data 0.43 -> 0.32 ms, best of 30).  Loops bound
 * by memory (ReLU, BatchNorm forward) gained nothing and are not cloned.
 * A cloned function is static and called from its own file: an ifunc that
 * another file names links with GCC but not with clang 14. */
#if !defined(WIDE_CLONES) && defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define WIDE_CLONES __attribute__((target_clones("avx2", "default")))
#define WINO_WIDE   1 /* and AVX2 versions of the Winograd transforms (cpu_winograd.c) */
#endif
#endif
#ifndef WIDE_CLONES
#define WIDE_CLONES /* -DWIDE_CLONES= builds the baseline code only */
#endif

/* PROF_START(); phase; PROF_END(field): adds the phase's seconds to
 * compute_cpu_prof->field while profiling.  The hook is compute_cpu.h's:
 * the files that time phases include it. */
#define PROF_START() double prof_t0_ = compute_cpu_prof ? clock_seconds() : 0.0
#define PROF_END(field)                                                                            \
    do {                                                                                           \
        if (compute_cpu_prof) {                                                                    \
            double prof_t1_ = clock_seconds();                                                     \
            compute_cpu_prof->field += prof_t1_ - prof_t0_;                                        \
            prof_t0_ = prof_t1_;                                                                   \
        }                                                                                          \
    } while (0)

/* ---- span helpers ------------------------------------------------------- */

/* g = beta g (beta = 0: zero without reading g). */
static inline void grad_scale_(size_t count, float *g, float beta)
{
    if (count == 0 || beta == 1.0f) return;
    if (beta == 0.0f) {
        memset(g, 0, count * sizeof *g);
        return;
    }
    for (size_t i = 0; i < count; i++) g[i] *= beta;
}

/* acc[k] += a[k], k < len */
static inline void span_add_(size_t len, const float *restrict a, float *restrict acc)
{
    size_t k = 0;
    for (; k + VB <= len; k += VB) {
        UNROLL_VB
        for (int q = 0; q < VB; q++) acc[k + q] += a[k + q];
    }
    for (; k < len; k++) acc[k] += a[k];
}

/* sum of x[k], k < len, in double */
static inline double span_sum_(size_t len, const float *restrict x)
{
    double acc[VB] = {0};
    size_t k = 0;
    for (; k + VB <= len; k += VB)
        for (int q = 0; q < VB; q++) acc[q] += (double)x[k + q];
    double s = 0;
    for (; k < len; k++) s += (double)x[k];
    for (int q = 0; q < VB; q++) s += acc[q];
    return s;
}

/* y[k] = x[k] a + b (scalars a, b), y may equal x */
static inline void span_axpb_s_(size_t len, const float *x, float a, float b, float *y)
{
    size_t k = 0;
    for (; k + VB <= len; k += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) t[q] = x[k + q] * a + b;
        UNROLL_VB
        for (int q = 0; q < VB; q++) y[k + q] = t[q];
    }
    for (; k < len; k++) y[k] = x[k] * a + b;
}

/* ---- the ops of each room (semantics: compute.h) ------------------------ */

/* memory (compute_cpu.c): memmove unless bytes == 0 or dst == src */
void cpu_copy(void *dst, const void *src, size_t bytes);

/* dense layers (cpu_linear.c) */
void cpu_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                    float *y, int relu);
void cpu_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float *db, float beta, const float *relu_y, void *ws);
size_t cpu_linear_ws_bytes(int n, int out);

/* convolution (cpu_conv.c; its Winograd path: cpu_winograd.c) */
size_t cpu_conv_ws_bytes(const conv_dims_t *d);
void cpu_conv_fwd(const conv_dims_t *d, const float *x, const float *w, const float *b, float *y,
                  void *ws);
void cpu_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy, float *dx,
                  float *dw, float *db, float beta, void *ws);

/* pooling (cpu_pool.c) */
void cpu_maxpool_fwd(const pool_dims_t *d, const float *x, float *y, int32_t *argmax);
void cpu_maxpool_bwd(const pool_dims_t *d, const float *dy, const int32_t *argmax, float *dx);
void cpu_avgpool_fwd(const pool_dims_t *d, const float *x, float *y);
void cpu_avgpool_bwd(const pool_dims_t *d, const float *dy, float *dx);
void cpu_gap_fwd(int n, int c, int hw, const float *x, float *y);
void cpu_gap_bwd(int n, int c, int hw, const float *dy, float *dx);

/* batch normalisation (cpu_bn.c) */
void cpu_bn_stats(int n, int c, int hw, const float *x, double *stats);
void cpu_bn_finalize(int c, const double *stats, double count, float eps, float momentum,
                     int update_running, float *mean, float *invstd, float *running_mean,
                     float *running_var);
void cpu_bn_eval_params(int c, const float *running_mean, const float *running_var, float eps,
                        float *mean, float *invstd);
void cpu_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                const float *gamma, const float *beta_, float *y, int relu, const float *res);
void cpu_bn_bwd_stats(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                      const float *invstd, double *gstats, float *dgamma, float *dbeta, float beta,
                      const float *relu_gamma, const float *relu_beta);
void cpu_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                     const float *invstd, const float *gamma, const double *gstats, double count,
                     float *dx, const float *relu_beta);

/* elementwise (cpu_elementwise.c) */
void cpu_add(size_t count, const float *a, const float *b, float *y, int relu);
void cpu_relu_fwd(size_t count, const float *x, float *y);
void cpu_relu_bwd(size_t count, const float *x, const float *dy, float *dx, const float *dy2);
void cpu_gelu_fwd(size_t count, const float *x, float *y);
void cpu_gelu_bwd(size_t count, const float *x, const float *dy, float *dx);
void cpu_dropout_fwd(int n, size_t features, const float *x, float *y, float p, uint64_t seed,
                     uint64_t step, uint32_t layer, const int64_t *sample_idx);
void cpu_dropout_bwd(int n, size_t features, const float *dy, float *dx, float p, uint64_t seed,
                     uint64_t step, uint32_t layer, const int64_t *sample_idx);
void cpu_scale(size_t count, float *x, float alpha);
void cpu_to_half(size_t count, const float *x, uint16_t *h, int bf16);
void cpu_from_half(size_t count, const uint16_t *h, float *x, int bf16);

/* losses (cpu_loss.c) */
void cpu_xent(int n, int classes, const float *logits, const int32_t *labels, float smoothing,
              float grad_scale, float *dlogits, double *acc);
void cpu_mse(int n, int k, const float *pred, const float *target, float grad_scale, float *dpred,
             double *acc);

/* optimizers (cpu_optim.c) */
void cpu_sgd_step(size_t count, float *p, const float *g, float *buf, float lr, float momentum,
                  int nesterov, float wd, int first);
void cpu_adamw_step(size_t count, float *p, const float *g, float *m, float *v, float lr,
                    float beta1, float beta2, float eps, float wd, int64_t t);

/* reductions (cpu_reduce.c) */
double cpu_sumsq(size_t count, const float *x);
int cpu_all_finite(size_t count, const float *x);

#endif
