/* compute_cpu.c -- the CPU compute backend: every op of compute_ops_t on
 * host memory, GEMMs through CBLAS (row-major cblas_sgemm), the rest in
 * plain C loops written so that the compiler vectorises them at -O2.
 *
 * Semantics are PyTorch's (see compute.h and the comment of each op).  No op
 * starts threads; BLAS runs with the threads it was configured for.
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
 * Convolutions (bench/bench_cnn.c): im2col + GEMM in general; "same"
 * convolutions (stride 1, output the input's size) build im2col from shifted
 * planes, 1x1 ones use x in place, and 3x3 pad-1 ones with 16 or more
 * channels run as Winograd F(2x2, 3x3) in all three passes, its transforms
 * on vectors of tiles (SSE2: 4, AVX2 where the CPU has it: 8).  2x2
 * stride-2 max pooling has a branch-free SSE2 path.
 *
 * Conventions: parameter gradients follow `beta` (0 overwrites without
 * reading the old value, 1 accumulates, anything else scales first); input
 * gradients are overwritten, dx == NULL skips them; n == 0 does no work
 * except the beta update of parameter gradients.
 */
#include <cblas.h>
#include <stdio.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "ddp_build.h"
#include "backend_math.h"
#include "clock.h"
#include "compute.h"
#include "half.h"
#include "rng.h"

#define VB 16 /* elements per vectorised block */
/* Unrolls a loop over one block completely (GCC >= 8 and clang know the
 * pragma); the literal must equal VB. */
#define UNROLL_VB _Pragma("GCC unroll 16")
#define CB        256 /* channels per block of per-channel coefficients (BN, hw == 1) */

/* Software prefetch PF_DIST floats (4 KiB) ahead in the kernels that stream
 * several large arrays (optimizers): from L3 or memory the hardware
 * prefetchers alone leave one core at about half its bandwidth (sgd_step
 * over 1.9M parameters, caches cold: 1.45 ms without, 0.80 ms with). */
#if defined(__GNUC__)
#define PREFETCH(addr, rw) __builtin_prefetch((addr), (rw), 3)
#else
#define PREFETCH(addr, rw) ((void)0)
#endif
#define PF_DIST 1024

/* AVX2 copies of the loops that stream large activations through double
 * accumulators (BatchNorm statistics and backward, the convolution's bias
 * gradient), picked at load time on CPUs that have AVX2 (target_clones, an
 * ELF ifunc); the build itself targets baseline x86-64.  AVX2 without FMA:
 * the same IEEE operations in the same order as the baseline code (no
 * contraction), so the results are bit for bit the same, about 1.4x faster
 * (BatchNorm over [64, 32, 28, 28]: stats 0.51 -> 0.36 ms, backward stats
 * 0.52 -> 0.38 ms, backward data 0.43 -> 0.32 ms, best of 30).  Loops bound
 * by memory (ReLU, BatchNorm forward) gained nothing and are not cloned. */
#if !defined(WIDE_CLONES) && defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define WIDE_CLONES __attribute__((target_clones("avx2", "default")))
#define WINO_WIDE   1 /* and AVX2 versions of the Winograd transforms */
#endif
#endif
#ifndef WIDE_CLONES
#define WIDE_CLONES /* -DWIDE_CLONES= builds the baseline code only */
#endif
#ifdef WINO_WIDE
#include <immintrin.h>
#endif

/* Largest number of GEMM columns (samples x output pixels) one convolution
 * GEMM covers.  Planes of more than CONV_COLS / 2 pixels get one GEMM per
 * sample: it writes y and reads dy in place (no layout copies between
 * [n, oc, oh*ow] and [oc, n*oh*ow]) and its im2col buffer stays in L2
 * (bench/bench_cnn, the Fashion-MNIST CNN: 4096 columns -> 256 saved 0.8
 * of 22.4 ms per step); smaller planes are grouped so the GEMM stays wide. */
#define CONV_COLS 256

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* ======================================================================== */
/* memory                                                                   */
/* ======================================================================== */

static void *cpu_alloc(size_t bytes)
{
    void *p = NULL;
    /* 64-byte aligned (one cache line, one AVX-512 vector); never size 0 so
     * that NULL always means out of memory */
    size_t sz = bytes ? (bytes + 63) / 64 * 64 : 64;
    if (posix_memalign(&p, 64, sz) != 0) return NULL;
    memset(p, 0, sz);
    return p;
}

static void cpu_free(void *p)
{
    free(p);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_zero(void *p, size_t bytes)
{
    if (bytes) memset(p, 0, bytes);
}

static void cpu_sync(void) {}

/* Every op is done when it returns: an event has nothing to wait for, and
 * one object serves as every event. */
struct compute_event {
    int unused;
};

static compute_event_t cpu_event_;

static compute_event_t *cpu_event_create(void)
{
    return &cpu_event_;
}

static void cpu_event_destroy(compute_event_t *e)
{
    (void)e;
}

static void cpu_event_record(compute_event_t *e)
{
    (void)e;
}

static void cpu_event_wait(compute_event_t *e)
{
    (void)e;
}

/* ======================================================================== */
/* small helpers                                                            */
/* ======================================================================== */

/* g = beta g (beta = 0: zero without reading g). */
static void grad_scale_(size_t count, float *g, float beta)
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

/* ======================================================================== */
/* dense layers                                                             */
/* ======================================================================== */

/* y[n,out] = x[n,in] w[out,in]^T + b[out] */
static void cpu_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                           float *y)
{
    if (n <= 0 || out <= 0) return;
    /* the bias goes in first so the GEMM adds onto it (one pass over y) */
    if (b)
        for (int i = 0; i < n; i++) memcpy(y + (size_t)i * out, b, (size_t)out * sizeof *y);
    if (in <= 0) {
        if (!b) memset(y, 0, (size_t)n * out * sizeof *y);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in,
                b ? 1.0f : 0.0f, y, out);
}

/* dw = beta dw + dy^T x ; db = beta db + sum_n dy ; dx = dy w */
static void cpu_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                           float *dx, float *dw, float *db, float beta)
{
    if (n <= 0 || in <= 0) {
        if (dw && in > 0) grad_scale_((size_t)out * in, dw, beta);
        if (db && out > 0) grad_scale_((size_t)out, db, beta);
        if (db && out > 0 && n > 0) /* in == 0: the bias still has a gradient */
            for (int i = 0; i < n; i++) span_add_((size_t)out, dy + (size_t)i * out, db);
        return;
    }
    if (out <= 0) {
        if (dx) memset(dx, 0, (size_t)n * in * sizeof *dx);
        return;
    }
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, beta,
                    dw, in);
    if (db) {
        /* column sum of dy, row by row (unit stride, vectorised) */
        grad_scale_((size_t)out, db, beta);
        for (int i = 0; i < n; i++) span_add_((size_t)out, dy + (size_t)i * out, db);
    }
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                    0.0f, dx, in);
}

/* ======================================================================== */
/* convolution: im2col + GEMM over groups of samples; Winograd F(2x2, 3x3)  */
/* ======================================================================== */

compute_cpu_prof_t *compute_cpu_prof;

/* PROF_START(); phase; PROF_END(field): adds the phase's seconds to
 * compute_cpu_prof->field while profiling (compute.h) */
#define PROF_START() double prof_t0_ = compute_cpu_prof ? clock_seconds() : 0.0
#define PROF_END(field)                                                                            \
    do {                                                                                           \
        if (compute_cpu_prof) {                                                                    \
            double prof_t1_ = clock_seconds();                                                     \
            compute_cpu_prof->field += prof_t1_ - prof_t0_;                                        \
            prof_t0_ = prof_t1_;                                                                   \
        }                                                                                          \
    } while (0)

/* Samples per GEMM: enough that the GEMM has about CONV_COLS columns.  It
 * grows with n, so a workspace sized for n samples serves any smaller n. */
static int conv_group_(const conv_dims_t *d)
{
    long ohw = (long)d->oh * d->ow;
    long g = ohw > 0 ? CONV_COLS / ohw : 1;
    return (int)MAX(1, MIN(g, (long)MAX(d->n, 1)));
}

/* Workspace: col [c*k*k, g*oh*ow] and an output/gradient staging area
 * [oc, g*oh*ow] (in floats), or what the Winograd path needs when that is
 * more (wino_ws_floats_). */
static size_t wino_ws_floats_(const conv_dims_t *d);

static size_t cpu_conv_ws_bytes(const conv_dims_t *d)
{
    size_t ckk = (size_t)d->c * d->k * d->k;
    size_t cols = (size_t)conv_group_(d) * d->oh * d->ow;
    return MAX((ckk + (size_t)d->oc) * cols, wino_ws_floats_(d)) * sizeof(float);
}

/* Output columns [lo, hi) whose input column ox*s - p + kj lies in [0, w). */
static void conv_valid_(int ow, int w, int s, int p, int kj, int *lo, int *hi)
{
    int a = p - kj; /* need ox*s >= a */
    int l = a <= 0 ? 0 : (a + s - 1) / s;
    int b = w - 1 + p - kj; /* need ox*s <= b */
    int h = b < 0 ? 0 : b / s + 1;
    *lo = MIN(l, ow);
    *hi = MAX(*lo, MIN(h, ow));
}

/* "Same" convolutions (stride 1, output as large as the input: 3x3 pad 1,
 * 1x1 pad 0, 5x5 pad 2): the row of col for (ci, ki, kj) is the input plane
 * shifted by sh = (ki - p) w + (kj - p), so one long copy replaces a copy
 * per output row; the columns whose input falls off the left or right edge
 * ([0, lo) and [hi, ow) of each output row) and the rows whose input falls
 * off the top or bottom ([0, y0) and [y1, oh)) are then zero. */
static int conv_same_(const conv_dims_t *d)
{
    return d->stride == 1 && d->oh == d->h && d->ow == d->w;
}

/* The shifted span of row (ki, kj) of a "same" convolution: output rows
 * [y0, y1) read input rows; of those output positions, [j0, j1) have their
 * input inside the plane (the rest lie in edge columns). */
static void conv_same_span_(const conv_dims_t *d, int ki, int kj, int *y0, int *y1, ptrdiff_t *sh,
                            size_t *j0, size_t *j1)
{
    const int p = d->pad, h = d->h, w = d->w;
    const ptrdiff_t hw = (ptrdiff_t)h * w;
    *y0 = MIN(h, MAX(0, p - ki));
    *y1 = MAX(*y0, MIN(h, h + p - ki));
    *sh = (ptrdiff_t)(ki - p) * w + (kj - p);
    const ptrdiff_t lo = (ptrdiff_t)*y0 * w, hi = (ptrdiff_t)*y1 * w;
    ptrdiff_t a = MIN(hi, MAX(lo, -*sh)), b = MIN(hi, hw - *sh);
    *j0 = (size_t)a; /* lo <= j0 <= j1 <= hi <= h w */
    *j1 = (size_t)MAX(a, b);
}

/* row[oy*w + ox] = 0 for the edge columns ox < lo and ox >= hi of output
 * rows [y0, y1) */
static void same_zero_edges_(float *row, int w, int y0, int y1, int lo, int hi)
{
    if (lo == 0 && hi == w) return;
    for (int oy = y0; oy < y1; oy++) {
        float *r = row + (size_t)oy * w;
        for (int ox = 0; ox < lo; ox++) r[ox] = 0.0f;
        for (int ox = hi; ox < w; ox++) r[ox] = 0.0f;
    }
}

static void im2col_same_(const conv_dims_t *d, const float *x, float *col, size_t ld)
{
    const int k = d->k, p = d->pad, h = d->h, w = d->w;
    const size_t hw = (size_t)h * w;
    for (int ci = 0; ci < d->c; ci++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                float *row = col + (size_t)((ci * k + ki) * k + kj) * ld;
                const float *xp = x + (size_t)ci * hw;
                int y0, y1, lo, hi;
                ptrdiff_t sh;
                size_t j0, j1;
                conv_same_span_(d, ki, kj, &y0, &y1, &sh, &j0, &j1);
                conv_valid_(w, w, 1, p, kj, &lo, &hi);
                memset(row, 0, j0 * sizeof *row);
                memcpy(row + j0, xp + (ptrdiff_t)j0 + sh, (j1 - j0) * sizeof *row);
                memset(row + j1, 0, (hw - j1) * sizeof *row);
                same_zero_edges_(row, w, y0, y1, lo, hi);
            }
}

/* col[r, off + oy*ow + ox] = x[ci, oy*s - p + ki, ox*s - p + kj] (zero outside),
 * r = (ci*k + ki)*k + kj, row stride ld */
static void im2col_(const conv_dims_t *d, const float *x, float *col, size_t ld)
{
    const int k = d->k, s = d->stride, p = d->pad, h = d->h, w = d->w, oh = d->oh, ow = d->ow;
    if (conv_same_(d)) {
        im2col_same_(d, x, col, ld);
        return;
    }
    for (int ci = 0; ci < d->c; ci++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                float *row = col + (size_t)((ci * k + ki) * k + kj) * ld;
                int lo, hi;
                conv_valid_(ow, w, s, p, kj, &lo, &hi);
                for (int oy = 0; oy < oh; oy++) {
                    float *dst = row + (size_t)oy * ow;
                    int iy = oy * s - p + ki;
                    if (iy < 0 || iy >= h) {
                        memset(dst, 0, (size_t)ow * sizeof *dst);
                        continue;
                    }
                    const float *xrow = x + ((size_t)ci * h + iy) * w;
                    const int off = kj - p; /* ix = ox*s + off, in [0, w) on [lo, hi) */
                    for (int ox = 0; ox < lo; ox++) dst[ox] = 0.0f;
                    if (s == 1)
                        memcpy(dst + lo, xrow + lo + off, (size_t)(hi - lo) * sizeof *dst);
                    else
                        for (int ox = lo; ox < hi; ox++) dst[ox] = xrow[ox * s + off];
                    for (int ox = hi; ox < ow; ox++) dst[ox] = 0.0f;
                }
            }
}

/* col2im_ of a "same" convolution: the edge columns of col are set to 0
 * (col is scratch), then each row adds onto the shifted plane in one span;
 * every element of dx receives the same terms in the same order as in the
 * generic loop, plus zeros. */
static void col2im_same_(const conv_dims_t *d, float *col, size_t ld, float *dx)
{
    const int k = d->k, p = d->pad, h = d->h, w = d->w;
    const size_t hw = (size_t)h * w;
    for (int ci = 0; ci < d->c; ci++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                float *row = col + (size_t)((ci * k + ki) * k + kj) * ld;
                float *dxp = dx + (size_t)ci * hw;
                int y0, y1, lo, hi;
                ptrdiff_t sh;
                size_t j0, j1;
                conv_same_span_(d, ki, kj, &y0, &y1, &sh, &j0, &j1);
                conv_valid_(w, w, 1, p, kj, &lo, &hi);
                same_zero_edges_(row, w, y0, y1, lo, hi); /* col's edges are no part of dx */
                span_add_(j1 - j0, row + j0, dxp + (ptrdiff_t)j0 + sh);
            }
}

/* The adjoint of im2col_: dx (zeroed here) accumulates the columns; col is
 * scratch and may be overwritten. */
static void col2im_(const conv_dims_t *d, float *col, size_t ld, float *dx)
{
    const int k = d->k, s = d->stride, p = d->pad, h = d->h, w = d->w, oh = d->oh, ow = d->ow;
    memset(dx, 0, (size_t)d->c * h * w * sizeof *dx);
    if (conv_same_(d)) {
        col2im_same_(d, col, ld, dx);
        return;
    }
    for (int ci = 0; ci < d->c; ci++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                const float *row = col + (size_t)((ci * k + ki) * k + kj) * ld;
                int lo, hi;
                conv_valid_(ow, w, s, p, kj, &lo, &hi);
                for (int oy = 0; oy < oh; oy++) {
                    int iy = oy * s - p + ki;
                    if (iy < 0 || iy >= h) continue;
                    const float *src = row + (size_t)oy * ow;
                    float *dxrow = dx + ((size_t)ci * h + iy) * w;
                    const int off = kj - p;
                    if (s == 1)
                        span_add_((size_t)(hi - lo), src + lo, dxrow + lo + off);
                    else
                        for (int ox = lo; ox < hi; ox++) dxrow[ox * s + off] += src[ox];
                }
            }
}

/* ---- Winograd F(2x2, 3x3) ------------------------------------------------
 * 3x3 convolutions with stride 1 and pad 1 (output the size of the input)
 * compute each 2x2 output tile from a 4x4 input tile with 16 products
 * instead of 36: Y = A^T [(G g G^T) .* (B^T d B)] A (Lavin and Gray 2016),
 * the 16 elementwise products over channels being 16 GEMMs
 *   M[e] [cout, tiles] = U[e] [cout, cin] V[e] [cin, tiles],
 * e the position in the 4x4 tile.  2.25x fewer multiplications; the
 * transforms only add, subtract and halve, so the results agree with the
 * exact convolution about as well as im2col + GEMM's (max error 4-9e-7 on
 * outputs up to about 2, channels 32-256, against a double reference).
 * Used for the
 * forward pass; with the kernels rotated by 180 degrees and in and out
 * channels swapped, for the input gradient (a "full" correlation of dy);
 * and, through the adjoint of the transforms, for the weight gradient (16
 * GEMMs with K = tiles: wino_dw_). */
#define WINO_TILES 256 /* tiles (GEMM columns) per group of samples */
#define WINO_MIN_C 16  /* fewest input and output channels */
/* The 16 planes of U, V and M lie WINO_SKEW floats (64 bytes) further apart
 * than their size: the transforms stream through all 16 at once, and planes
 * of a power-of-two size (64 channels x 256 tiles: 64 KiB) would put those
 * streams into the same cache sets (64->64 on 8x8, batch 64: backward 8.8 ms
 * instead of 6.1 with im2col). */
#define WINO_SKEW 16

static size_t wino_plane_(size_t rows, size_t ld)
{
    return rows * ld + WINO_SKEW;
}

static int wino_ok_(const conv_dims_t *d)
{
    /* the 16 GEMMs have K = c (forward) and K = oc (input gradient): with
     * few channels they run far below the sgemm rate (conv1 of bench_cnn,
     * c = 1: 0.5 -> 3.1 ms) */
    return d->k == 3 && d->stride == 1 && d->pad == 1 && d->oh == d->h && d->ow == d->w &&
           d->c >= WINO_MIN_C && d->oc >= WINO_MIN_C;
}

/* tiles per sample and samples per group */
static void wino_tiles_(const conv_dims_t *d, int *tw, int *t1, int *g)
{
    *tw = (d->ow + 1) / 2;
    *t1 = *tw * ((d->oh + 1) / 2);
    *g = MAX(1, MIN(WINO_TILES / *t1, MAX(d->n, 1)));
}

static size_t wino_pad_floats_(int h, int w);

/* U [16, oc, c], V [16, max(c, oc), tiles], M [16, max(c, oc), tiles], the
 * padded plane of the input transform */
static size_t wino_ws_floats_(const conv_dims_t *d)
{
    if (!wino_ok_(d)) return 0;
    int tw, t1, g;
    wino_tiles_(d, &tw, &t1, &g);
    size_t cmax = (size_t)MAX(d->c, d->oc), tiles = (size_t)g * t1;
    size_t pad = wino_pad_floats_(d->h, d->w);
    return 16 * (wino_plane_((size_t)d->oc, (size_t)d->c) + 2 * wino_plane_(cmax, tiles)) + pad;
}

/* U[e][o][i] = (G g G^T)[e] for the kernel g of (out o, in i), G = [1 0 0;
 * 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].  Forward: g = w[o, i]; for the input
 * gradient (transpose) the kernel of (out ci, in oc) is w[oc, ci] rotated by
 * 180 degrees. */
static void wino_weights_(const conv_dims_t *d, const float *w, int transpose, float *U)
{
    const int cout = transpose ? d->c : d->oc, cin = transpose ? d->oc : d->c;
    const size_t plane = wino_plane_((size_t)cout, (size_t)cin);
    for (int o = 0; o < cout; o++)
        for (int i = 0; i < cin; i++) {
            float g[3][3], t[4][3];
            const float *src =
                transpose ? w + ((size_t)i * d->c + o) * 9 : w + ((size_t)o * d->c + i) * 9;
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < 3; q++)
                    g[r][q] = transpose ? src[(2 - r) * 3 + 2 - q] : src[r * 3 + q];
            for (int q = 0; q < 3; q++) {
                t[0][q] = g[0][q];
                t[1][q] = 0.5f * (g[0][q] + g[1][q] + g[2][q]);
                t[2][q] = 0.5f * (g[0][q] - g[1][q] + g[2][q]);
                t[3][q] = g[2][q];
            }
            float *u = U + (size_t)o * cin + i;
            for (int r = 0; r < 4; r++) {
                u[(r * 4 + 0) * plane] = t[r][0];
                u[(r * 4 + 1) * plane] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
                u[(r * 4 + 2) * plane] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
                u[(r * 4 + 3) * plane] = t[r][2];
            }
        }
}

#ifdef __SSE2__
/* The transforms below on SSE2 vectors: WINO_VEC tiles of one tile row side
 * by side, the same operations in the same order as the scalar code of
 * builds without SSE2 (so the same results bit for bit).  A vector of the
 * last, partial block of a tile row is stored whole when its lanes past the
 * row land on tiles or pixels written later (the next tile row, plane or
 * sample), and lane by lane at the end of the buffer. */
#define WINO_VEC 4

/* the first n lanes of v into dst (n == WINO_VEC: the whole vector) */
static inline void wino_put_(float *dst, __m128 v, int n)
{
    if (n == WINO_VEC) {
        _mm_storeu_ps(dst, v);
        return;
    }
    float t[WINO_VEC];
    _mm_storeu_ps(t, v);
    for (int k = 0; k < n; k++) dst[k] = t[k];
}

/* four lanes of a mask: all ones where m[k] == -1 */
static inline __m128 wino_mask_(const int32_t *m)
{
    return _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)(const void *)m));
}

/* The row transform of one row r of column-transformed input tiles, their
 * columns 2k, 2k+1, 2k+2, 2k+3 in e0, o0, e1, o1: V[4r + q] at v + q plane */
static inline void wino_in_row_(__m128 e0, __m128 o0, __m128 e1, __m128 o1, float *v, size_t plane,
                                int n)
{
    wino_put_(v, _mm_sub_ps(e0, e1), n);
    wino_put_(v + plane, _mm_add_ps(o0, e1), n);
    wino_put_(v + 2 * plane, _mm_sub_ps(e1, o0), n);
    wino_put_(v + 3 * plane, _mm_sub_ps(o0, o1), n);
}

#ifdef WINO_WIDE
/* AVX2 versions of the transforms' block loops, 8 tiles per vector (one
 * block covers a tile row of up to 8 tiles: 14x14 planes), picked at run
 * time on CPUs that have AVX2; the same operations in the same order as the
 * SSE2 code (AVX2 without FMA: no contraction), the same results bit for
 * bit.  -DWIDE_CLONES= builds without them (the SSE2 code alone). */
#define WINO_AVX2 __attribute__((target("avx2")))

static int wino_wide_(void)
{
    static int wide = -1;
    if (wide < 0) {
        __builtin_cpu_init();
        wide = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return wide;
}

WINO_AVX2 static inline void wino_put8_(float *dst, __m256 v, int n)
{
    if (n == 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    for (int k = 0; k < n; k++) dst[k] = t[k];
}

/* the even (odd) elements of the 16 floats a, b */
WINO_AVX2 static inline __m256 wino_even8_(__m256 a, __m256 b)
{
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

WINO_AVX2 static inline __m256 wino_odd8_(__m256 a, __m256 b)
{
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

WINO_AVX2 static inline void wino_in_row8_(__m256 e0, __m256 o0, __m256 e1, __m256 o1, float *v,
                                           size_t plane, int n)
{
    wino_put8_(v, _mm256_sub_ps(e0, e1), n);
    wino_put8_(v + plane, _mm256_add_ps(o0, e1), n);
    wino_put8_(v + 2 * plane, _mm256_sub_ps(e1, o0), n);
    wino_put8_(v + 3 * plane, _mm256_sub_ps(o0, o1), n);
}

/* wino_input_'s blocks of one plane split into E and O (O = E + half):
 * vc = V's row of the channel */
WINO_AVX2 static void wino_input_blocks8_(int th, int tw, int ew, size_t half, const float *E,
                                          float *vc, size_t plane, size_t t0, size_t ld)
{
    for (int ty = 0; ty < th; ty++)
        for (int tx0 = 0; tx0 < tw; tx0 += 8) {
            const size_t tile = t0 + (size_t)ty * tw + tx0;
            const int n = tile + 8 <= ld ? 8 : tw - tx0;
            const float *pe = E + (size_t)2 * ty * ew + tx0, *po = pe + half;
            float *v = vc + tile;
#define WINO_LD_(p, row) _mm256_loadu_ps((p) + (size_t)(row)*ew)
#define WINO_COL_(op, ra, rb)                                                                      \
    op(WINO_LD_(pe, ra), WINO_LD_(pe, rb)), op(WINO_LD_(po, ra), WINO_LD_(po, rb)),                \
        op(WINO_LD_(pe + 1, ra), WINO_LD_(pe + 1, rb)),                                            \
        op(WINO_LD_(po + 1, ra), WINO_LD_(po + 1, rb))
            wino_in_row8_(WINO_COL_(_mm256_sub_ps, 0, 2), v, plane, n);
            wino_in_row8_(WINO_COL_(_mm256_add_ps, 1, 2), v + 4 * plane, plane, n);
            wino_in_row8_(WINO_COL_(_mm256_sub_ps, 2, 1), v + 8 * plane, plane, n);
            wino_in_row8_(WINO_COL_(_mm256_sub_ps, 1, 3), v + 12 * plane, plane, n);
#undef WINO_COL_
#undef WINO_LD_
        }
}

/* wino_output_ of one output channel: mo = M's row of the channel + t0, yp
 * its plane of y */
WINO_AVX2 static void wino_output_plane8_(int h, int w, const float *mo, size_t plane, float bias,
                                          float *yp, const float *y_end)
{
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    const __m256 b = _mm256_set1_ps(bias);
    for (int ty = 0; ty < th; ty++)
        for (int r = 0, rows = MIN(2, h - 2 * ty); r < rows; r++) {
            const float *mr = mo + (size_t)ty * tw + (size_t)(4 * r) * plane;
            float *yr = yp + (size_t)(2 * ty + r) * w;
            for (int tx0 = 0; tx0 < tw; tx0 += 8) {
                __m256 t[4];
                for (int q = 0; q < 4; q++) {
                    const float *m = mr + tx0 + (size_t)q * plane;
                    const __m256 m0 = _mm256_loadu_ps(m), m1 = _mm256_loadu_ps(m + 4 * plane);
                    const __m256 m2 = _mm256_loadu_ps(m + 8 * plane);
                    t[q] = r == 0 ? _mm256_add_ps(_mm256_add_ps(m0, m1), m2)
                                  : _mm256_sub_ps(_mm256_sub_ps(m0, m1), m2);
                }
                const __m256 c0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(t[0], t[1]), t[2]), b);
                const __m256 c1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(t[1], t[2]), t[3]), b);
                float *dst = yr + 2 * tx0;
                const int ncol = MIN(16, w - 2 * tx0);
                const __m256 lo = _mm256_unpacklo_ps(c0, c1), hi = _mm256_unpackhi_ps(c0, c1);
                const __m256 p0 = _mm256_permute2f128_ps(lo, hi, 0x20);
                const __m256 p1 = _mm256_permute2f128_ps(lo, hi, 0x31);
                if (ncol == 16 || y_end - dst >= 16) {
                    _mm256_storeu_ps(dst, p0);
                    _mm256_storeu_ps(dst + 8, p1);
                } else {
                    float t16[16];
                    _mm256_storeu_ps(t16, p0);
                    _mm256_storeu_ps(t16 + 8, p1);
                    for (int j = 0; j < ncol; j++) dst[j] = t16[j];
                }
            }
        }
}

/* wino_dy_ of one channel: gp its plane of dy, wo Wd's row of the channel */
WINO_AVX2 static void wino_dy_plane8_(int h, int w, const float *gp, float *wo, size_t plane,
                                      size_t t0, size_t ld, const float *dy_end)
{
    static const int32_t keep[32] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                     -1, -1, -1, -1, -1, -1, -1, -1};
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int ty = 0; ty < th; ty++)
        for (int tx0 = 0; tx0 < tw; tx0 += 8) {
            const size_t tile = t0 + (size_t)ty * tw + tx0;
            const int n = tile + 8 > ld ? tw - tx0 : 8;
            const int ncol = MIN(16, w - 2 * tx0);
            __m256 lc[2], rc[2];
            for (int r = 0; r < 2; r++) {
                __m256 a = _mm256_setzero_ps(), b = a;
                const float *row = gp + (size_t)MIN(2 * ty + r, h - 1) * w + 2 * tx0;
                if (2 * ty + r >= h) {
                    /* past an odd edge: zero */
                } else if (ncol == 16) {
                    a = _mm256_loadu_ps(row), b = _mm256_loadu_ps(row + 8);
                } else if (dy_end - row >= 16) {
                    const int32_t *mk = keep + 16 - ncol;
                    a = _mm256_and_ps(_mm256_loadu_ps(row),
                                      _mm256_castsi256_ps(_mm256_loadu_si256((const void *)mk)));
                    b = _mm256_and_ps(
                        _mm256_loadu_ps(row + 8),
                        _mm256_castsi256_ps(_mm256_loadu_si256((const void *)(mk + 8))));
                } else {
                    float t16[16] = {0};
                    for (int j = 0; j < ncol; j++) t16[j] = row[j];
                    a = _mm256_loadu_ps(t16), b = _mm256_loadu_ps(t16 + 8);
                }
                lc[r] = wino_even8_(a, b);
                rc[r] = wino_odd8_(a, b);
            }
            const __m256 a[4] = {lc[0], _mm256_add_ps(lc[0], lc[1]), _mm256_sub_ps(lc[0], lc[1]),
                                 _mm256_xor_ps(lc[1], sign)};
            const __m256 b[4] = {rc[0], _mm256_add_ps(rc[0], rc[1]), _mm256_sub_ps(rc[0], rc[1]),
                                 _mm256_xor_ps(rc[1], sign)};
            float *v = wo + tile;
            for (int r = 0; r < 4; r++) {
                float *vr = v + (size_t)(4 * r) * plane;
                wino_put8_(vr, a[r], n);
                wino_put8_(vr + plane, _mm256_add_ps(a[r], b[r]), n);
                wino_put8_(vr + 2 * plane, _mm256_sub_ps(a[r], b[r]), n);
                wino_put8_(vr + 3 * plane, _mm256_xor_ps(b[r], sign), n);
            }
        }
}
#endif

/* Floats of wino_input_'s zero-bordered plane: its even and odd columns
 * (E and O, rows of wino_pad_row_ floats) */
static int wino_pad_row_(int w)
{
    return ((w + 1) / 2 + 7) / 8 * 8 + 8; /* blocks of up to 8 tiles read 8 + 1 */
}

static size_t wino_pad_floats_(int h, int w)
{
    return 2 * (size_t)(2 * ((h + 1) / 2) + 2) * (size_t)wino_pad_row_(w);
}

/* V[e][ci][t0 + tile] = (B^T d B)[e] of the 4x4 input tile d at rows 2ty-1..
 * 2ty+2, columns 2tx-1..2tx+2 (zero outside) of one sample x [cin, h, w];
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].  ld: V's row length.
 * Each plane is first split into the even and odd columns of its
 * zero-bordered copy ([2 th + 2, 2 tw + 2]: pad column 2k is x column
 * 2k - 1), so that the tiles of a tile row read unit-stride vectors; per
 * block of WINO_VEC tiles: the column transform over four rows, then the
 * row transform. */
static void wino_input_(int cin, int h, int w, const float *x, float *V, size_t ld, size_t t0,
                        float *pad)
{
    const int th = (h + 1) / 2, tw = (w + 1) / 2, ew = wino_pad_row_(w);
    const size_t plane = wino_plane_((size_t)cin, ld), half = (size_t)(2 * th + 2) * ew;
    float *E = pad, *O = pad + half;
#ifdef WINO_WIDE
    const int wide = wino_wide_();
#endif
    memset(pad, 0, 2 * half * sizeof *pad);
    for (int ci = 0; ci < cin; ci++) {
        const float *xp = x + (size_t)ci * h * w;
        for (int iy = 0; iy < h; iy++) {
            /* x column 2k -> O[k], 2k + 1 -> E[k + 1] */
            const float *xr = xp + (size_t)iy * w;
            float *er = E + (size_t)(iy + 1) * ew + 1, *od = O + (size_t)(iy + 1) * ew;
            int k = 0;
            for (; 2 * k + 8 <= w; k += 4) {
                __m128 a = _mm_loadu_ps(xr + 2 * k), b = _mm_loadu_ps(xr + 2 * k + 4);
                _mm_storeu_ps(od + k, _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
                _mm_storeu_ps(er + k, _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
            }
            for (; 2 * k + 1 < w; k++) od[k] = xr[2 * k], er[k] = xr[2 * k + 1];
            if (2 * k < w) od[k] = xr[2 * k];
        }
        /* the border stays zero: only the interior is overwritten next time;
         * an odd h or w leaves a zero row/column inside the border too */
#ifdef WINO_WIDE
        if (wide) {
            wino_input_blocks8_(th, tw, ew, half, E, V + (size_t)ci * ld, plane, t0, ld);
            continue;
        }
#endif
        for (int ty = 0; ty < th; ty++)
            for (int tx0 = 0; tx0 < tw; tx0 += WINO_VEC) {
                const size_t tile = t0 + (size_t)ty * tw + tx0;
                const int n = tile + WINO_VEC <= ld ? WINO_VEC : tw - tx0;
                const float *pe = E + (size_t)2 * ty * ew + tx0, *po = pe + half;
                float *v = V + (size_t)ci * ld + tile;
#define WINO_LD_(p, row) _mm_loadu_ps((p) + (size_t)(row)*ew)
#define WINO_COL_(op, ra, rb)                                                                      \
    op(WINO_LD_(pe, ra), WINO_LD_(pe, rb)), op(WINO_LD_(po, ra), WINO_LD_(po, rb)),                \
        op(WINO_LD_(pe + 1, ra), WINO_LD_(pe + 1, rb)),                                            \
        op(WINO_LD_(po + 1, ra), WINO_LD_(po + 1, rb))
                wino_in_row_(WINO_COL_(_mm_sub_ps, 0, 2), v, plane, n);
                wino_in_row_(WINO_COL_(_mm_add_ps, 1, 2), v + 4 * plane, plane, n);
                wino_in_row_(WINO_COL_(_mm_sub_ps, 2, 1), v + 8 * plane, plane, n);
                wino_in_row_(WINO_COL_(_mm_sub_ps, 1, 3), v + 12 * plane, plane, n);
#undef WINO_COL_
#undef WINO_LD_
            }
    }
}

/* y[o, 2ty + r, 2tx + q] = (A^T m A)[r][q] + bias[o] for the tiles of one
 * sample, m[e] = M[e][o][t0 + tile], A^T = [1 1 1 0; 0 1 -1 -1]; the row and
 * column past an odd edge are dropped.  bias may be NULL; y_end: the end of
 * the output tensor (nothing at or past it is written).  Per output row r
 * of a tile row, per block of WINO_VEC tiles: the column transform, the row
 * transform, the two columns interleaved into the row.  M is read up to
 * WINO_VEC - 1 floats past a tile row (within M's planes). */
static void wino_output_(int cout, int h, int w, const float *M, size_t ld, size_t t0,
                         const float *bias, float *y, const float *y_end)
{
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    const size_t plane = wino_plane_((size_t)cout, ld);
#ifdef WINO_WIDE
    const int wide = wino_wide_();
#endif
    for (int o = 0; o < cout; o++) {
        float *yp = y + (size_t)o * h * w;
#ifdef WINO_WIDE
        if (wide) {
            wino_output_plane8_(h, w, M + (size_t)o * ld + t0, plane, bias ? bias[o] : 0.0f, yp,
                                y_end);
            continue;
        }
#endif
        const __m128 b = _mm_set1_ps(bias ? bias[o] : 0.0f);
        for (int ty = 0; ty < th; ty++)
            for (int r = 0; r < MIN(2, h - 2 * ty); r++) {
                const float *mr =
                    M + (size_t)o * ld + t0 + (size_t)ty * tw + (size_t)(4 * r) * plane;
                float *yr = yp + (size_t)(2 * ty + r) * w;
                /* blocks left to right: a partial one spills onto the next
                 * row, written after this one */
                for (int tx0 = 0; tx0 < tw; tx0 += WINO_VEC) {
                    __m128 t[4];
                    for (int q = 0; q < 4; q++) {
                        const float *m = mr + tx0 + (size_t)q * plane;
                        const __m128 m0 = _mm_loadu_ps(m), m1 = _mm_loadu_ps(m + 4 * plane);
                        const __m128 m2 = _mm_loadu_ps(m + 8 * plane);
                        /* r = 0: m0 + m1 + m2 of rows 0-2; r = 1: m1 - m2 - m3 of rows 1-3 */
                        t[q] = r == 0 ? _mm_add_ps(_mm_add_ps(m0, m1), m2)
                                      : _mm_sub_ps(_mm_sub_ps(m0, m1), m2);
                    }
                    const __m128 c0 = _mm_add_ps(_mm_add_ps(_mm_add_ps(t[0], t[1]), t[2]), b);
                    const __m128 c1 = _mm_add_ps(_mm_sub_ps(_mm_sub_ps(t[1], t[2]), t[3]), b);
                    float *dst = yr + 2 * tx0;
                    const int ncol = MIN(2 * WINO_VEC, w - 2 * tx0);
                    const int whole = ncol == 2 * WINO_VEC || y_end - dst >= 2 * WINO_VEC;
                    const __m128 lo = _mm_unpacklo_ps(c0, c1), hi = _mm_unpackhi_ps(c0, c1);
                    if (whole) {
                        _mm_storeu_ps(dst, lo);
                        _mm_storeu_ps(dst + 4, hi);
                    } else {
                        float t8[2 * WINO_VEC];
                        _mm_storeu_ps(t8, lo);
                        _mm_storeu_ps(t8 + 4, hi);
                        for (int j = 0; j < ncol; j++) dst[j] = t8[j];
                    }
                }
            }
    }
}

/* Wd[e][o][t0 + tile] = (A g A^T)[e] for the 2x2 tiles g of one sample's
 * output gradient dy [cout, h, w] (zero past an odd edge), A = (A^T)^T: the
 * adjoint of wino_output_.  dy_end: the end of the gradient tensor (nothing
 * at or past it is read).  Per block of WINO_VEC tiles of a tile row: the
 * two rows' 2 WINO_VEC pixels split into left and right columns. */
static void wino_dy_(int cout, int h, int w, const float *dy, float *Wd, size_t ld, size_t t0,
                     const float *dy_end)
{
    static const int32_t keep[4 * WINO_VEC] = {-1, -1, -1, -1, -1, -1, -1, -1};
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    const size_t plane = wino_plane_((size_t)cout, ld);
    const __m128 sign = _mm_set1_ps(-0.0f);
#ifdef WINO_WIDE
    const int wide = wino_wide_();
#endif
    for (int o = 0; o < cout; o++) {
        const float *gp = dy + (size_t)o * h * w;
#ifdef WINO_WIDE
        if (wide) {
            wino_dy_plane8_(h, w, gp, Wd + (size_t)o * ld, plane, t0, ld, dy_end);
            continue;
        }
#endif
        for (int ty = 0; ty < th; ty++)
            for (int tx0 = 0; tx0 < tw; tx0 += WINO_VEC) {
                const size_t tile = t0 + (size_t)ty * tw + tx0;
                const int n = tile + WINO_VEC > ld ? tw - tx0 : WINO_VEC; /* as in wino_input_ */
                const int ncol = MIN(2 * WINO_VEC, w - 2 * tx0);          /* pixels of dy's row */
                __m128 lc[2], rc[2]; /* [row]: left, right columns */
                for (int r = 0; r < 2; r++) {
                    __m128 a = _mm_setzero_ps(), b = a;
                    const float *row = gp + (size_t)MIN(2 * ty + r, h - 1) * w + 2 * tx0;
                    if (2 * ty + r >= h) {
                        /* past an odd edge: zero */
                    } else if (ncol == 2 * WINO_VEC) {
                        a = _mm_loadu_ps(row), b = _mm_loadu_ps(row + 4);
                    } else if (dy_end - row >= 2 * WINO_VEC) {
                        /* the pixels past the row masked off */
                        const int32_t *mk = keep + 2 * WINO_VEC - ncol;
                        a = _mm_and_ps(_mm_loadu_ps(row), wino_mask_(mk));
                        b = _mm_and_ps(_mm_loadu_ps(row + 4), wino_mask_(mk + 4));
                    } else {
                        float t8[2 * WINO_VEC] = {0};
                        for (int j = 0; j < ncol; j++) t8[j] = row[j];
                        a = _mm_loadu_ps(t8), b = _mm_loadu_ps(t8 + 4);
                    }
                    lc[r] = _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
                    rc[r] = _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
                }
                /* A g: rows g0, g0 + g1, g0 - g1, -g1; then times A^T from
                 * the right: (a, b) -> a, a + b, a - b, -b */
                const __m128 a[4] = {lc[0], _mm_add_ps(lc[0], lc[1]), _mm_sub_ps(lc[0], lc[1]),
                                     _mm_xor_ps(lc[1], sign)};
                const __m128 b[4] = {rc[0], _mm_add_ps(rc[0], rc[1]), _mm_sub_ps(rc[0], rc[1]),
                                     _mm_xor_ps(rc[1], sign)};
                float *v = Wd + (size_t)o * ld + tile;
                for (int r = 0; r < 4; r++) {
                    float *vr = v + (size_t)(4 * r) * plane;
                    wino_put_(vr, a[r], n);
                    wino_put_(vr + plane, _mm_add_ps(a[r], b[r]), n);
                    wino_put_(vr + 2 * plane, _mm_sub_ps(a[r], b[r]), n);
                    wino_put_(vr + 3 * plane, _mm_xor_ps(b[r], sign), n);
                }
            }
    }
}
#else
/* Tiles of one tile row handled together by the transforms below (their
 * loops run over the tiles of a row: unit stride, vectorised). */
#define WINO_ROW 64

/* Floats of wino_input_'s zero-bordered plane */
static size_t wino_pad_floats_(int h, int w)
{
    return (size_t)(2 * ((w + 1) / 2) + 2) * (size_t)(2 * ((h + 1) / 2) + 2);
}

/* V[e][ci][t0 + tile] = (B^T d B)[e] of the 4x4 input tile d at rows 2ty-1..
 * 2ty+2, columns 2tx-1..2tx+2 (zero outside) of one sample x [cin, h, w];
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].  ld: V's row length.
 * Each plane is first copied into pad, zero-bordered ([2 th + 2, 2 tw + 2]);
 * per tile row: the column transform over four rows of pad, then the row
 * transform on their even and odd columns. */
static void wino_input_(int cin, int h, int w, const float *x, float *V, size_t ld, size_t t0,
                        float *pad)
{
    const int th = (h + 1) / 2, tw = (w + 1) / 2, pw = 2 * tw + 2, ph = 2 * th + 2;
    const size_t plane = wino_plane_((size_t)cin, ld);
    memset(pad, 0, (size_t)pw * ph * sizeof *pad);
    for (int ci = 0; ci < cin; ci++) {
        const float *xp = x + (size_t)ci * h * w;
        for (int iy = 0; iy < h; iy++)
            memcpy(pad + (size_t)(iy + 1) * pw + 1, xp + (size_t)iy * w, (size_t)w * sizeof *pad);
        for (int ty = 0; ty < th; ty++)
            for (int tx0 = 0; tx0 < tw; tx0 += WINO_ROW) {
                const int nt = MIN(WINO_ROW, tw - tx0), nj = 2 * nt + 2;
                const float *p0 = pad + (size_t)2 * ty * pw + 2 * tx0, *p1 = p0 + pw;
                const float *p2 = p1 + pw, *p3 = p2 + pw;
                float t[4][2 * WINO_ROW + 2];
                for (int j = 0; j < nj; j++) {
                    t[0][j] = p0[j] - p2[j];
                    t[1][j] = p1[j] + p2[j];
                    t[2][j] = p2[j] - p1[j];
                    t[3][j] = p1[j] - p3[j];
                }
                float *v = V + (size_t)ci * ld + t0 + (size_t)ty * tw + tx0;
                for (int r = 0; r < 4; r++) {
                    float ev[WINO_ROW + 1], od[WINO_ROW + 1]; /* columns 2k and 2k+1 */
                    for (int k = 0; k <= nt; k++) ev[k] = t[r][2 * k], od[k] = t[r][2 * k + 1];
                    float *v0 = v + (size_t)(r * 4) * plane, *v1 = v0 + plane;
                    float *v2 = v1 + plane, *v3 = v2 + plane;
                    for (int k = 0; k < nt; k++) {
                        v0[k] = ev[k] - ev[k + 1];
                        v1[k] = od[k] + ev[k + 1];
                        v2[k] = ev[k + 1] - od[k];
                        v3[k] = od[k] - od[k + 1];
                    }
                }
            }
        /* the border stays zero: only the interior is overwritten next time;
         * an odd h or w leaves a zero row/column inside the border too */
    }
}

/* y[o, 2ty + r, 2tx + q] = (A^T m A)[r][q] + bias[o] for the tiles of one
 * sample, m[e] = M[e][o][t0 + tile], A^T = [1 1 1 0; 0 1 -1 -1]; the row and
 * column past an odd edge are dropped.  bias may be NULL.  Per tile row:
 * the 2x2 outputs of all its tiles, then interleaved into the two rows. */
static void wino_output_(int cout, int h, int w, const float *M, size_t ld, size_t t0,
                         const float *bias, float *y, const float *y_end)
{
    (void)y_end;
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    const size_t plane = wino_plane_((size_t)cout, ld);
    for (int o = 0; o < cout; o++) {
        float *yp = y + (size_t)o * h * w;
        const float b = bias ? bias[o] : 0.0f;
        for (int ty = 0; ty < th; ty++)
            for (int tx0 = 0; tx0 < tw; tx0 += WINO_ROW) {
                const int nt = MIN(WINO_ROW, tw - tx0);
                const float *m = M + (size_t)o * ld + t0 + (size_t)ty * tw + tx0;
                float t[2][4][WINO_ROW], out[2][2][WINO_ROW];
                for (int q = 0; q < 4; q++) {
                    const float *m0 = m + (size_t)q * plane, *m1 = m0 + 4 * plane;
                    const float *m2 = m1 + 4 * plane, *m3 = m2 + 4 * plane;
                    for (int k = 0; k < nt; k++) {
                        t[0][q][k] = m0[k] + m1[k] + m2[k];
                        t[1][q][k] = m1[k] - m2[k] - m3[k];
                    }
                }
                for (int r = 0; r < 2; r++)
                    for (int k = 0; k < nt; k++) {
                        out[r][0][k] = t[r][0][k] + t[r][1][k] + t[r][2][k] + b;
                        out[r][1][k] = t[r][1][k] - t[r][2][k] - t[r][3][k] + b;
                    }
                for (int r = 0; r < 2 && 2 * ty + r < h; r++) {
                    float *yr = yp + (size_t)(2 * ty + r) * w + 2 * tx0;
                    const int full = MIN(nt, (w - 2 * tx0) / 2); /* tiles with both columns */
                    for (int k = 0; k < full; k++) {
                        yr[2 * k] = out[r][0][k];
                        yr[2 * k + 1] = out[r][1][k];
                    }
                    if (full < nt) yr[2 * full] = out[r][0][full]; /* odd w: the last column */
                }
            }
    }
}

/* Wd[e][o][t0 + tile] = (A g A^T)[e] for the 2x2 tiles g of one sample's
 * output gradient dy [cout, h, w] (zero past an odd edge), A = (A^T)^T: the
 * adjoint of wino_output_.  Per tile row over its tiles. */
static void wino_dy_(int cout, int h, int w, const float *dy, float *Wd, size_t ld, size_t t0,
                     const float *dy_end)
{
    (void)dy_end;
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    const size_t plane = wino_plane_((size_t)cout, ld);
    for (int o = 0; o < cout; o++) {
        const float *gp = dy + (size_t)o * h * w;
        for (int ty = 0; ty < th; ty++)
            for (int tx0 = 0; tx0 < tw; tx0 += WINO_ROW) {
                const int nt = MIN(WINO_ROW, tw - tx0);
                const int full = MIN(nt, (w - 2 * tx0) / 2); /* tiles with both columns */
                float g[2][2][WINO_ROW];                     /* [row][left/right][tile] */
                for (int r = 0; r < 2; r++) {
                    const float *row = gp + (size_t)(2 * ty + r) * w + 2 * tx0;
                    if (2 * ty + r >= h) row = NULL;
                    for (int k = 0; k < full; k++) {
                        g[r][0][k] = row ? row[2 * k] : 0.0f;
                        g[r][1][k] = row ? row[2 * k + 1] : 0.0f;
                    }
                    if (full < nt) { /* odd w: the last tile has its left column only */
                        g[r][0][full] = row ? row[2 * full] : 0.0f;
                        g[r][1][full] = 0.0f;
                    }
                }
                float *v = Wd + (size_t)o * ld + t0 + (size_t)ty * tw + tx0;
                for (int k = 0; k < nt; k++) {
                    const float l0 = g[0][0][k], r0 = g[0][1][k], l1 = g[1][0][k], r1 = g[1][1][k];
                    /* A g: rows g0, g0 + g1, g0 - g1, -g1; then times A^T from
                     * the right: (a, b) -> a, a + b, a - b, -b */
                    const float a[4] = {l0, l0 + l1, l0 - l1, -l1};
                    const float b[4] = {r0, r0 + r1, r0 - r1, -r1};
                    for (int r = 0; r < 4; r++) {
                        v[(size_t)(r * 4 + 0) * plane + k] = a[r];
                        v[(size_t)(r * 4 + 1) * plane + k] = a[r] + b[r];
                        v[(size_t)(r * 4 + 2) * plane + k] = a[r] - b[r];
                        v[(size_t)(r * 4 + 3) * plane + k] = -b[r];
                    }
                }
            }
    }
}
#endif

/* out [n, cout, h, w] = the 3x3 pad-1 correlation of in [n, cin, h, w] with
 * the transformed kernels U (wino_weights_), + bias (may be NULL) */
static void wino_conv_(const conv_dims_t *d, int cin, int cout, const float *in, const float *U,
                       const float *bias, float *out, float *ws)
{
    int tw, t1, g;
    wino_tiles_(d, &tw, &t1, &g);
    const size_t cmax = (size_t)MAX(d->c, d->oc), hw = (size_t)d->h * d->w;
    const size_t vm = 16 * wino_plane_(cmax, (size_t)g * t1);
    float *V = ws, *M = V + vm, *pad = M + vm;
    const float *out_end = out + (size_t)d->n * cout * hw;
    PROF_START();
    for (int i0 = 0; i0 < d->n; i0 += g) {
        const int gn = MIN(g, d->n - i0);
        const size_t ld = (size_t)gn * t1;
        for (int gi = 0; gi < gn; gi++)
            wino_input_(cin, d->h, d->w, in + (size_t)(i0 + gi) * cin * hw, V, ld, (size_t)gi * t1,
                        pad);
        PROF_END(im2col);
        for (int e = 0; e < 16; e++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cout, (int)ld, cin, 1.0f,
                        U + e * wino_plane_((size_t)cout, (size_t)cin), cin,
                        V + e * wino_plane_((size_t)cin, ld), (int)ld, 0.0f,
                        M + e * wino_plane_((size_t)cout, ld), (int)ld);
        PROF_END(gemm);
        for (int gi = 0; gi < gn; gi++)
            wino_output_(cout, d->h, d->w, M, ld, (size_t)gi * t1, bias,
                         out + (size_t)(i0 + gi) * cout * hw, out_end);
        PROF_END(col2im);
    }
}

/* dw [oc, c, 3, 3] = beta dw + the weight gradient of a Winograd
 * convolution: M[e] [oc, c] = sum over tiles of Wd[e] [oc, tiles] V[e]^T
 * (16 GEMMs with K = tiles, summed over the groups by beta), then
 * dw[o, i] = G^T M[., o, i] G, the adjoint of wino_weights_. */
static void wino_dw_(const conv_dims_t *d, const float *x, const float *dy, float *dw, float beta,
                     float *ws)
{
    int tw, t1, g;
    wino_tiles_(d, &tw, &t1, &g);
    const int c = d->c, oc = d->oc;
    const size_t cmax = (size_t)MAX(c, oc), hw = (size_t)d->h * d->w, pl = (size_t)oc * c;
    const size_t mp = wino_plane_((size_t)oc, (size_t)c),
                 vm = 16 * wino_plane_(cmax, (size_t)g * t1);
    float *Macc = ws, *V = Macc + 16 * mp, *Wd = V + vm, *pad = Wd + vm;
    const float *dy_end = dy + (size_t)d->n * oc * hw;
    PROF_START();
    for (int i0 = 0; i0 < d->n; i0 += g) {
        const int gn = MIN(g, d->n - i0);
        const size_t ld = (size_t)gn * t1;
        for (int gi = 0; gi < gn; gi++) {
            wino_input_(c, d->h, d->w, x + (size_t)(i0 + gi) * c * hw, V, ld, (size_t)gi * t1, pad);
            wino_dy_(oc, d->h, d->w, dy + (size_t)(i0 + gi) * oc * hw, Wd, ld, (size_t)gi * t1,
                     dy_end);
        }
        PROF_END(im2col);
        for (int e = 0; e < 16; e++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, oc, c, (int)ld, 1.0f,
                        Wd + e * wino_plane_((size_t)oc, ld), (int)ld,
                        V + e * wino_plane_((size_t)c, ld), (int)ld, i0 == 0 ? 0.0f : 1.0f,
                        Macc + e * mp, c);
        PROF_END(gemm);
    }
    /* G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1] on both sides */
    for (size_t oi = 0; oi < pl; oi++) {
        float m[4][4], t[3][4], r3[3][3];
        for (int e = 0; e < 16; e++) m[e / 4][e % 4] = Macc[(size_t)e * mp + oi];
        for (int q = 0; q < 4; q++) {
            t[0][q] = m[0][q] + 0.5f * (m[1][q] + m[2][q]);
            t[1][q] = 0.5f * (m[1][q] - m[2][q]);
            t[2][q] = 0.5f * (m[1][q] + m[2][q]) + m[3][q];
        }
        for (int r = 0; r < 3; r++) {
            r3[r][0] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
            r3[r][1] = 0.5f * (t[r][1] - t[r][2]);
            r3[r][2] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
        }
        float *dst = dw + oi * 9;
        for (int k = 0; k < 9; k++)
            dst[k] = beta == 0.0f ? r3[k / 3][k % 3] : beta * dst[k] + r3[k / 3][k % 3];
    }
    PROF_END(col2im);
}

/* A 1x1 convolution, stride 1, pad 0, one sample per GEMM: the input
 * [c, h*w] is its own im2col and the GEMM reads it in place; backward, the
 * input-gradient GEMM writes dx in place (no col2im). */
static int conv_direct_(const conv_dims_t *d, int g)
{
    return d->k == 1 && d->stride == 1 && d->pad == 0 && g == 1;
}

static void cpu_conv_fwd(const conv_dims_t *d, const float *x, const float *w, const float *b,
                         float *y, void *ws)
{
    if (d->n <= 0 || d->oc <= 0) return;
    if (wino_ok_(d)) {
        float *U = ws;
        wino_weights_(d, w, 0, U);
        wino_conv_(d, d->c, d->oc, x, U, b, y, U + 16 * wino_plane_((size_t)d->oc, (size_t)d->c));
        return;
    }
    const size_t ohw = (size_t)d->oh * d->ow, chw = (size_t)d->c * d->h * d->w;
    const int ckk = d->c * d->k * d->k, g = conv_group_(d), direct = conv_direct_(d, g);
    float *stage = (float *)ws + (size_t)ckk * g * ohw;
    PROF_START();
    for (int i0 = 0; i0 < d->n; i0 += g) {
        int gn = MIN(g, d->n - i0);
        size_t ld = (size_t)gn * ohw;
        const float *col = x + (size_t)i0 * chw; /* direct: [c, ohw] */
        if (!direct) {
            for (int gi = 0; gi < gn; gi++)
                im2col_(d, x + (size_t)(i0 + gi) * chw, (float *)ws + (size_t)gi * ohw, ld);
            col = ws;
            PROF_END(im2col);
        }
        if (gn == 1) {
            /* one sample: the GEMM writes y directly, the bias is added in
             * place while y is in L2 (faster than a bias prefill under a
             * beta = 1 GEMM: conv1 of bench_cnn 0.73 -> 0.52 ms; the same sums) */
            float *yi = y + (size_t)i0 * d->oc * ohw;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->oc, (int)ohw, ckk, 1.0f, w,
                        ckk, col, (int)ld, 0.0f, yi, (int)ohw);
            PROF_END(gemm);
            for (int o = 0; o < d->oc; o++)
                span_axpb_s_(ohw, yi + o * ohw, 1.0f, b ? b[o] : 0.0f, yi + o * ohw);
            PROF_END(bias);
            continue;
        }
        /* stage[oc, gn*ohw] = w[oc, ckk] col[ckk, gn*ohw], then scatter + bias */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->oc, (int)ld, ckk, 1.0f, w, ckk,
                    col, (int)ld, 0.0f, stage, (int)ld);
        PROF_END(gemm);
        for (int gi = 0; gi < gn; gi++)
            for (int o = 0; o < d->oc; o++)
                span_axpb_s_(ohw, stage + o * ld + gi * ohw, 1.0f, b ? b[o] : 0.0f,
                             y + ((size_t)(i0 + gi) * d->oc + o) * ohw);
        PROF_END(copy);
    }
}

/* db = beta db + the sum of dy [n, oc, ohw] over n and ohw */
WIDE_CLONES
static void conv_bias_grad_(int n, int oc, size_t ohw, const float *dy, float *db, float beta)
{
    grad_scale_((size_t)oc, db, beta);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < oc; o++)
            db[o] += (float)span_sum_(ohw, dy + ((size_t)i * oc + o) * ohw);
}

static void cpu_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                         float *dx, float *dw, float *db, float beta, void *ws)
{
    const int ckk = d->c * d->k * d->k;
    if (d->n <= 0 || d->oc <= 0) {
        if (dw) grad_scale_((size_t)d->oc * ckk, dw, beta);
        if (db) grad_scale_((size_t)d->oc, db, beta);
        if (d->n > 0 && dx) memset(dx, 0, (size_t)d->n * d->c * d->h * d->w * sizeof *dx);
        return;
    }
    if (wino_ok_(d)) {
        PROF_START();
        if (db) conv_bias_grad_(d->n, d->oc, (size_t)d->oh * d->ow, dy, db, beta);
        PROF_END(bias);
        if (dw) wino_dw_(d, x, dy, dw, beta, ws);
        if (dx) {
            float *U = ws;
            wino_weights_(d, w, 1, U);
            wino_conv_(d, d->oc, d->c, dy, U, NULL, dx,
                       U + 16 * wino_plane_((size_t)d->oc, (size_t)d->c));
        }
        return;
    }
    const size_t ohw = (size_t)d->oh * d->ow, chw = (size_t)d->c * d->h * d->w;
    const int g = conv_group_(d), direct = conv_direct_(d, g);
    float *col = ws;
    float *stage = col + (size_t)ckk * g * ohw;
    PROF_START();
    if (db) {
        conv_bias_grad_(d->n, d->oc, ohw, dy, db, beta);
        PROF_END(bias);
    }
    float wbeta = beta;
    for (int i0 = 0; i0 < d->n; i0 += g) {
        int gn = MIN(g, d->n - i0);
        size_t ld = (size_t)gn * ohw;
        /* dyg [oc, gn*ohw]: dy of the group, channel-major */
        const float *dyg = dy + (size_t)i0 * d->oc * ohw;
        if (gn > 1) {
            for (int gi = 0; gi < gn; gi++)
                for (int o = 0; o < d->oc; o++)
                    memcpy(stage + o * ld + gi * ohw, dy + ((size_t)(i0 + gi) * d->oc + o) * ohw,
                           ohw * sizeof *stage);
            dyg = stage;
            PROF_END(copy);
        }
        if (dw) {
            const float *xcol = x + (size_t)i0 * chw; /* direct: [c, ohw] */
            if (!direct) {
                for (int gi = 0; gi < gn; gi++)
                    im2col_(d, x + (size_t)(i0 + gi) * chw, col + (size_t)gi * ohw, ld);
                xcol = col;
                PROF_END(im2col);
            }
            /* dw[oc, ckk] (+)= dyg[oc, gn*ohw] col[ckk, gn*ohw]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->oc, ckk, (int)ld, 1.0f, dyg,
                        (int)ld, xcol, (int)ld, wbeta, dw, ckk);
            PROF_END(gemm);
            wbeta = 1.0f;
        }
        if (dx) {
            /* dcol[ckk, gn*ohw] = w[oc, ckk]^T dyg, into col, then col2im
             * (direct: into dx) */
            float *dcol = direct ? dx + (size_t)i0 * chw : col;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, (int)ld, d->oc, 1.0f, w, ckk,
                        dyg, (int)ld, 0.0f, dcol, (int)ld);
            PROF_END(gemm);
            if (!direct) {
                for (int gi = 0; gi < gn; gi++)
                    col2im_(d, col + (size_t)gi * ohw, ld, dx + (size_t)(i0 + gi) * chw);
                PROF_END(col2im);
            }
        }
    }
}

/* ======================================================================== */
/* pooling                                                                  */
/* ======================================================================== */

/* One step of the max scan: v (at index idx) replaces the best so far when
 * it is larger or NaN, as the generic loop below does. */
static inline void max_take_(float v, int32_t idx, float *bv, int32_t *best)
{
    if (v > *bv || isnan(v)) {
        *bv = v;
        *best = idx;
    }
}

#ifdef __SSE2__
/* the same step on four lanes, without branches */
static inline void max_take4_(__m128 v, __m128i idx, __m128 *bv, __m128i *best)
{
    __m128 take = _mm_or_ps(_mm_cmpgt_ps(v, *bv), _mm_cmpunord_ps(v, v));
    __m128i ti = _mm_castps_si128(take);
    *bv = _mm_or_ps(_mm_and_ps(take, v), _mm_andnot_ps(take, *bv));
    *best = _mm_or_si128(_mm_and_si128(ti, idx), _mm_andnot_si128(ti, *best));
}

/* Four 2x2 windows side by side: r0, r1 point at 8 floats of the window's
 * two input rows, i0 is the plane index of r0[0], w the row length. */
static inline void max2x2x4_(const float *r0, const float *r1, int32_t i0, int32_t w, float *y,
                             int32_t *am)
{
    __m128 a0 = _mm_loadu_ps(r0), a1 = _mm_loadu_ps(r0 + 4);
    __m128 b0 = _mm_loadu_ps(r1), b1 = _mm_loadu_ps(r1 + 4);
    /* even and odd columns: top-left, top-right, bottom-left, bottom-right */
    __m128 tl = _mm_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0));
    __m128 tr = _mm_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1));
    __m128 bl = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
    __m128 br = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128i one = _mm_set1_epi32(1);
    __m128i itl = _mm_add_epi32(_mm_set1_epi32(i0), _mm_set_epi32(6, 4, 2, 0));
    __m128i ibl = _mm_add_epi32(itl, _mm_set1_epi32(w));
    __m128 bv = tl;
    __m128i best = itl;
    max_take4_(tr, _mm_add_epi32(itl, one), &bv, &best);
    max_take4_(bl, ibl, &bv, &best);
    max_take4_(br, _mm_add_epi32(ibl, one), &bv, &best);
    _mm_storeu_ps(y, bv);
    _mm_storeu_si128((__m128i *)(void *)am, best);
}
#endif

/* 2x2 windows, stride 2 (the common case): the generic loop's result bit for
 * bit (same scan order and NaN rule), four windows at a time; rows of fewer
 * than 4 windows (and builds without SSE2) take the scalar loop. */
static void maxpool2_plane_(const pool_dims_t *d, const float *xp, float *yp, int32_t *ap)
{
    const int w = d->w, ow = d->ow;
    for (int oy = 0; oy < d->oh; oy++) {
        const float *r0 = xp + (size_t)2 * oy * w, *r1 = r0 + w;
        float *yr = yp + (size_t)oy * ow;
        int32_t *ar = ap + (size_t)oy * ow;
        const int32_t i0 = 2 * oy * w;
        int ox = 0;
#ifdef __SSE2__
        if (ow >= 4) {
            /* the last block overlaps the one before when ow % 4 != 0 (it
             * recomputes the same outputs) */
            for (;; ox += 4) {
                if (ox + 4 > ow) ox = ow - 4;
                max2x2x4_(r0 + 2 * ox, r1 + 2 * ox, i0 + 2 * ox, w, yr + ox, ar + ox);
                if (ox + 4 == ow) break;
            }
            ox = ow;
        }
#endif
        for (; ox < ow; ox++) {
            int32_t t = i0 + 2 * ox;
            float bv = xp[t];
            int32_t best = t;
            max_take_(xp[t + 1], t + 1, &bv, &best);
            max_take_(xp[t + w], t + w, &bv, &best);
            max_take_(xp[t + w + 1], t + w + 1, &bv, &best);
            yr[ox] = bv;
            ar[ox] = best;
        }
    }
}

/* Max over each window; argmax is the index in the input plane (iy*w + ix)
 * of the first maximum in row-major window order; a NaN wins (PyTorch CPU;
 * of several NaNs the last). */
static void cpu_maxpool_fwd(const pool_dims_t *d, const float *x, float *y, int32_t *argmax)
{
    const size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    const size_t ohw = (size_t)d->oh * d->ow;
    if (d->k == 2 && d->stride == 2) {
        for (size_t pl = 0; pl < planes; pl++)
            maxpool2_plane_(d, x + pl * hw, y + pl * ohw, argmax + pl * ohw);
        return;
    }
    for (size_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * hw;
        float *yp = y + pl * ohw;
        int32_t *ap = argmax + pl * ohw;
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                int y0 = oy * d->stride, x0 = ox * d->stride;
                int best = y0 * d->w + x0;
                float bv = xp[best];
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) {
                        int idx = (y0 + ky) * d->w + x0 + kx;
                        float v = xp[idx];
                        if (v > bv || isnan(v)) {
                            bv = v;
                            best = idx;
                        }
                    }
                yp[oy * d->ow + ox] = bv;
                ap[oy * d->ow + ox] = best;
            }
    }
}

#ifdef __SSE2__
/* Four 2x2 windows side by side (as max2x2x4_): r0, r1 receive 8 floats of
 * the two input rows, 0 + dy at each window's argmax and 0 elsewhere. */
static inline void unpool2x2x4_(const float *dy, const int32_t *am, int32_t i0, int32_t w,
                                float *r0, float *r1)
{
    const __m128i one = _mm_set1_epi32(1);
    __m128 g = _mm_add_ps(_mm_setzero_ps(), _mm_loadu_ps(dy));
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)am);
    __m128i itl = _mm_add_epi32(_mm_set1_epi32(i0), _mm_set_epi32(6, 4, 2, 0));
    __m128i ibl = _mm_add_epi32(itl, _mm_set1_epi32(w));
    __m128 tl = _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(a, itl)), g);
    __m128 tr = _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(a, _mm_add_epi32(itl, one))), g);
    __m128 bl = _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(a, ibl)), g);
    __m128 br = _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(a, _mm_add_epi32(ibl, one))), g);
    _mm_storeu_ps(r0, _mm_unpacklo_ps(tl, tr));
    _mm_storeu_ps(r0 + 4, _mm_unpackhi_ps(tl, tr));
    _mm_storeu_ps(r1, _mm_unpacklo_ps(bl, br));
    _mm_storeu_ps(r1 + 4, _mm_unpackhi_ps(bl, br));
}
#endif

/* 2x2 windows, stride 2: the windows do not overlap, so every input of a
 * window is written once, 0 + dy at the argmax (the generic loop's sum onto
 * zero: -0 becomes +0) and 0 elsewhere; the row and column that floor mode
 * leaves out get 0.  Four windows at a time as in maxpool2_plane_. */
static void maxpool2_bwd_plane_(const pool_dims_t *d, const float *dyp, const int32_t *ap,
                                float *dxp)
{
    const int w = d->w, ow = d->ow;
    for (int oy = 0; oy < d->oh; oy++) {
        float *r0 = dxp + (size_t)2 * oy * w, *r1 = r0 + w;
        const float *gr = dyp + (size_t)oy * ow;
        const int32_t *ar = ap + (size_t)oy * ow;
        const int32_t i0 = 2 * oy * w;
        int ox = 0;
#ifdef __SSE2__
        if (ow >= 4) {
            /* the last block overlaps as in maxpool2_plane_ (same values) */
            for (;; ox += 4) {
                ox = MIN(ox, ow - 4);
                unpool2x2x4_(gr + ox, ar + ox, i0 + 2 * ox, w, r0 + 2 * ox, r1 + 2 * ox);
                if (ox + 4 == ow) break;
            }
            ox = ow;
        }
#endif
        for (; ox < ow; ox++) {
            int32_t t = i0 + 2 * ox;
            float g = 0.0f + gr[ox];
            r0[2 * ox] = ar[ox] == t ? g : 0.0f;
            r0[2 * ox + 1] = ar[ox] == t + 1 ? g : 0.0f;
            r1[2 * ox] = ar[ox] == t + w ? g : 0.0f;
            r1[2 * ox + 1] = ar[ox] == t + w + 1 ? g : 0.0f;
        }
        if (w > 2 * ow) r0[w - 1] = r1[w - 1] = 0.0f; /* odd width: the last column */
    }
    if (d->h > 2 * d->oh) memset(dxp + (size_t)(d->h - 1) * w, 0, (size_t)w * sizeof *dxp);
}

static void cpu_maxpool_bwd(const pool_dims_t *d, const float *dy, const int32_t *argmax, float *dx)
{
    const size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    const size_t ohw = (size_t)d->oh * d->ow;
    if (d->k == 2 && d->stride == 2) {
        for (size_t pl = 0; pl < planes; pl++)
            maxpool2_bwd_plane_(d, dy + pl * ohw, argmax + pl * ohw, dx + pl * hw);
        return;
    }
    if (planes) memset(dx, 0, planes * hw * sizeof *dx);
    for (size_t pl = 0; pl < planes; pl++) {
        float *dxp = dx + pl * hw;
        const float *dyp = dy + pl * ohw;
        const int32_t *ap = argmax + pl * ohw;
        for (size_t o = 0; o < ohw; o++) dxp[ap[o]] += dyp[o];
    }
}

static void cpu_avgpool_fwd(const pool_dims_t *d, const float *x, float *y)
{
    const size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    const size_t ohw = (size_t)d->oh * d->ow;
    const float inv = 1.0f / (float)(d->k * d->k);
    for (size_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * hw;
        float *yp = y + pl * ohw;
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                const float *win = xp + (size_t)oy * d->stride * d->w + (size_t)ox * d->stride;
                float s = 0;
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) s += win[ky * d->w + kx];
                yp[oy * d->ow + ox] = s * inv;
            }
    }
}

static void cpu_avgpool_bwd(const pool_dims_t *d, const float *dy, float *dx)
{
    const size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    const size_t ohw = (size_t)d->oh * d->ow;
    const float inv = 1.0f / (float)(d->k * d->k);
    if (planes) memset(dx, 0, planes * hw * sizeof *dx);
    for (size_t pl = 0; pl < planes; pl++) {
        float *dxp = dx + pl * hw;
        const float *dyp = dy + pl * ohw;
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                float *win = dxp + (size_t)oy * d->stride * d->w + (size_t)ox * d->stride;
                float g = dyp[oy * d->ow + ox] * inv;
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) win[ky * d->w + kx] += g;
            }
    }
}

static void cpu_gap_fwd(int n, int c, int hw, const float *x, float *y)
{
    const size_t planes = (size_t)MAX(n, 0) * MAX(c, 0);
    const double inv = hw > 0 ? 1.0 / hw : 0.0;
    for (size_t pl = 0; pl < planes; pl++)
        y[pl] = (float)(span_sum_((size_t)hw, x + pl * hw) * inv);
}

static void cpu_gap_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    const size_t planes = (size_t)MAX(n, 0) * MAX(c, 0);
    const float inv = hw > 0 ? 1.0f / (float)hw : 0.0f;
    for (size_t pl = 0; pl < planes; pl++) {
        float g = dy[pl] * inv;
        float *dxp = dx + pl * hw;
        for (int k = 0; k < hw; k++) dxp[k] = g;
    }
}

/* ======================================================================== */
/* batch normalisation                                                      */
/* ======================================================================== */

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
static void cpu_bn_stats(int n, int c, int hw, const float *x, double *stats)
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

/* Statistics are double (ddp_bn_finalize_ch, backend_math.h, shared with
 * cuda/bn.cu); count <= 0 (no sample anywhere) gives mean 0, invstd
 * 1/sqrt(eps) and leaves the running statistics alone.  The unbiased
 * variance needs count > 1; with count == 1 the biased one is used. */
static void cpu_bn_finalize(int c, const double *stats, double count, float eps, float momentum,
                            int update_running, float *mean, float *invstd, float *running_mean,
                            float *running_var)
{
    for (int ch = 0; ch < c; ch++)
        ddp_bn_finalize_ch(ch, c, stats, count, eps, momentum, update_running, mean, invstd,
                           running_mean, running_var);
}

static void cpu_bn_eval_params(int c, const float *running_mean, const float *running_var,
                               float eps, float *mean, float *invstd)
{
    for (int ch = 0; ch < c; ch++) {
        mean[ch] = running_mean[ch];
        invstd[ch] = (float)(1.0 / sqrt((double)running_var[ch] + (double)eps));
    }
}

/* y = x a + b with a = invstd gamma, b = beta_ - mean a (PyTorch's CPU form) */
static void cpu_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
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
static void cpu_bn_bwd_stats(int n, int c, int hw, const float *x, const float *dy,
                             const float *mean, const float *invstd, double *gstats, float *dgamma,
                             float *dbeta, float beta)
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
static void cpu_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy,
                            const float *mean, const float *invstd, const float *gamma,
                            const double *gstats, double count, float *dx)
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

/* ======================================================================== */
/* elementwise                                                              */
/* ======================================================================== */

/* NaN passes through (PyTorch); in place is fine */
static void cpu_relu_fwd(size_t count, const float *x, float *y)
{
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) t[q] = x[i + q] < 0.0f ? 0.0f : x[i + q];
        UNROLL_VB
        for (int q = 0; q < VB; q++) y[i + q] = t[q];
    }
    for (; i < count; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* dx = x > 0 ? dy : 0 (x the input or the output: same mask) */
static void cpu_relu_bwd(size_t count, const float *x, const float *dy, float *dx)
{
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        float t[VB];
        float g[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) g[q] = dy[i + q]; /* unconditional loads vectorise */
        UNROLL_VB
        for (int q = 0; q < VB; q++) t[q] = x[i + q] <= 0.0f ? 0.0f : g[q];
        UNROLL_VB
        for (int q = 0; q < VB; q++) dx[i + q] = t[q];
    }
    for (; i < count; i++) dx[i] = x[i] <= 0.0f ? 0.0f : dy[i];
}

static void cpu_gelu_fwd(size_t count, const float *x, float *y)
{
    for (size_t i = 0; i < count; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
    }
}

/* d/dx [x Phi(x)] = Phi(x) + x phi(x) */
static void cpu_gelu_bwd(size_t count, const float *x, const float *dy, float *dx)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = 0; i < count; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * (float)M_SQRT1_2));
        float pdf = expf(-0.5f * v * v) * inv_sqrt_2pi;
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

/* out[i, j] = keep(i, j) ? in[i, j] / (1 - p) : 0, the keep decision being
 * exactly ddp_dropout_keep(seed, step, layer, sample_idx[i], j, p), computed
 * four elements per Philox call as that function does. */
static void dropout_apply_(int n, size_t features, const float *in, float *out, float p,
                           uint64_t seed, uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    if (n <= 0 || features == 0) return;
    if (p <= 0.0f) { /* u01 >= 0 always: everything kept, scale 1 */
        cpu_copy(out, in, (size_t)n * features * sizeof *out);
        return;
    }
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    const uint64_t key = ddp_key(seed, DDP_STREAM_DROPOUT, (step << 16) ^ layer);
    for (int i = 0; i < n; i++) {
        const float *a = in + (size_t)i * features;
        float *b = out + (size_t)i * features;
        const uint64_t sample = (uint64_t)sample_idx[i];
        for (size_t j = 0; j < features; j += 4) {
            ddp_u32x4_t r = ddp_rand4(key, sample, j >> 2);
            size_t m = MIN((size_t)4, features - j);
            for (size_t q = 0; q < m; q++)
                b[j + q] = ddp_u01(r.v[q]) >= p ? a[j + q] * scale : 0.0f;
        }
    }
}

static void cpu_dropout_fwd(int n, size_t features, const float *x, float *y, float p,
                            uint64_t seed, uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    dropout_apply_(n, features, x, y, p, seed, step, layer, sample_idx);
}

static void cpu_dropout_bwd(int n, size_t features, const float *dy, float *dx, float p,
                            uint64_t seed, uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    dropout_apply_(n, features, dy, dx, p, seed, step, layer, sample_idx);
}

/* ======================================================================== */
/* losses                                                                   */
/* ======================================================================== */

/* Per row (ddp_xent_row, backend_math.h, shared with cuda/loss.cu): max
 * and the first argmax, then sum exp(z - max) and log in double; loss =
 * lse - (1-eps) z_y - eps mean_j z_j (equal to the PyTorch form, agreeing
 * with it to float rounding of the logits, ~1e-6 relative).  dlogits =
 * grad_scale (softmax - (1-eps) onehot - eps/C); it may alias logits.
 * Labels outside [0, classes) contribute nothing. */
static void cpu_xent(int n, int classes, const float *logits, const int32_t *labels,
                     float smoothing, float grad_scale, float *dlogits, double *acc)
{
    if (n <= 0 || classes <= 0) return;
    const double eps = smoothing;
    double loss = 0, hits = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float *dl = dlogits ? dlogits + (size_t)i * classes : NULL;
        ddp_xent_row(classes, z, labels[i], eps, grad_scale, dl, &loss, &hits);
    }
    acc[0] += loss;
    acc[1] += hits;
}

static void cpu_mse(int n, int k, const float *pred, const float *target, float grad_scale,
                    float *dpred, double *acc)
{
    if (n <= 0 || k <= 0) return;
    const size_t count = (size_t)n * k;
    const float two = 2.0f * grad_scale;
    double s[VB] = {0}, tail = 0;
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        float t[VB];
        for (int q = 0; q < VB; q++) {
            t[q] = pred[i + q] - target[i + q];
            s[q] += (double)t[q] * t[q];
        }
        if (dpred)
            for (int q = 0; q < VB; q++) dpred[i + q] = two * t[q];
    }
    for (; i < count; i++) {
        float t = pred[i] - target[i];
        tail += (double)t * t;
        if (dpred) dpred[i] = two * t;
    }
    for (int q = 0; q < VB; q++) tail += s[q];
    acc[0] += tail;
}

/* ======================================================================== */
/* optimizers (p, g, buf, m, v are distinct arrays)                         */
/* ======================================================================== */

/* p -= lr (g + wd p) */
static inline void sgd_plain_(size_t len, float *restrict p, const float *restrict g, float lr,
                              float wd)
{
    for (size_t k = 0; k < len; k++) p[k] -= lr * (g[k] + wd * p[k]);
}

/* buf = m buf + d; p -= lr (nesterov ? d + m buf : buf), d = g + wd p */
static inline void sgd_mom_(size_t len, float *restrict p, const float *restrict g,
                            float *restrict buf, float lr, float m, float wd, int nesterov)
{
    if (nesterov) {
        for (size_t k = 0; k < len; k++) {
            float d = g[k] + wd * p[k];
            float b = m * buf[k] + d;
            buf[k] = b;
            p[k] -= lr * (d + m * b);
        }
    } else {
        for (size_t k = 0; k < len; k++) {
            float b = m * buf[k] + (g[k] + wd * p[k]);
            buf[k] = b;
            p[k] -= lr * b;
        }
    }
}

static void cpu_sgd_step(size_t count, float *p, const float *g, float *buf, float lr,
                         float momentum, int nesterov, float wd, int first)
{
    if (count == 0) return;
    size_t i = 0;
    if (momentum == 0.0f || !buf) {
        for (; i + VB <= count; i += VB) {
            if (i + PF_DIST < count) {
                PREFETCH(p + i + PF_DIST, 1);
                PREFETCH(g + i + PF_DIST, 0);
            }
            sgd_plain_(VB, p + i, g + i, lr, wd);
        }
        sgd_plain_(count - i, p + i, g + i, lr, wd);
        return;
    }
    /* first step: buf = d exactly (m * 0 + d) */
    if (first) memset(buf, 0, count * sizeof *buf);
    for (; i + VB <= count; i += VB) {
        if (i + PF_DIST < count) {
            PREFETCH(p + i + PF_DIST, 1);
            PREFETCH(g + i + PF_DIST, 0);
            PREFETCH(buf + i + PF_DIST, 1);
        }
        sgd_mom_(VB, p + i, g + i, buf + i, lr, momentum, wd, nesterov);
    }
    sgd_mom_(count - i, p + i, g + i, buf + i, lr, momentum, wd, nesterov);
}

static inline void adamw_span_(size_t len, float *restrict p, const float *restrict g,
                               float *restrict m, float *restrict v, float decay, float b1,
                               float c1, float b2, float c2, float step_size, float bc2_sqrt,
                               float eps)
{
    size_t k = 0;
#ifdef __SSE2__
    /* sqrtf keeps GCC from vectorising (errno): the same operations, in the
     * same order, four at a time (sqrtps rounds exactly as sqrtss) */
    const __m128 vb1 = _mm_set1_ps(b1), vc1 = _mm_set1_ps(c1), vb2 = _mm_set1_ps(b2);
    const __m128 vc2 = _mm_set1_ps(c2), vdecay = _mm_set1_ps(decay);
    const __m128 vstep = _mm_set1_ps(step_size), vbc2 = _mm_set1_ps(bc2_sqrt);
    const __m128 veps = _mm_set1_ps(eps);
    for (const size_t n4 = len / 4 * 4; k < n4; k += 4) {
        __m128 gk = _mm_loadu_ps(g + k);
        __m128 mk = _mm_add_ps(_mm_mul_ps(vb1, _mm_loadu_ps(m + k)), _mm_mul_ps(vc1, gk));
        __m128 vk =
            _mm_add_ps(_mm_mul_ps(vb2, _mm_loadu_ps(v + k)), _mm_mul_ps(vc2, _mm_mul_ps(gk, gk)));
        __m128 den = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vk), vbc2), veps);
        __m128 pk = _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(p + k), vdecay),
                               _mm_mul_ps(vstep, _mm_div_ps(mk, den)));
        _mm_storeu_ps(m + k, mk);
        _mm_storeu_ps(v + k, vk);
        _mm_storeu_ps(p + k, pk);
    }
#endif
    for (; k < len; k++)
        ddp_adamw_elem(p + k, m + k, v + k, g[k], decay, b1, c1, b2, c2, step_size, bc2_sqrt, eps);
}

/* PyTorch 1.13 AdamW: p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr/bc1 m / (sqrt(v)/sqrt(bc2) + eps), bc_i = 1 - beta_i^t (in double).
 * The constants and the scalar element update are backend_math.h's
 * (ddp_adamw_consts, ddp_adamw_elem), shared with cuda/optim.cu. */
static void cpu_adamw_step(size_t count, float *p, const float *g, float *m, float *v, float lr,
                           float beta1, float beta2, float eps, float wd, int64_t t)
{
    if (count == 0) return;
    const ddp_adamw_consts_t a = ddp_adamw_consts(lr, beta1, beta2, wd, t);
    const float decay = a.decay, step_size = a.step_size, bc2_sqrt = a.bc2_sqrt, c1 = a.c1,
                c2 = a.c2;
    size_t i = 0;
    for (; count - i >= VB; i += VB) {
        if (i + PF_DIST < count) {
            PREFETCH(p + i + PF_DIST, 1);
            PREFETCH(g + i + PF_DIST, 0);
            PREFETCH(m + i + PF_DIST, 1);
            PREFETCH(v + i + PF_DIST, 1);
        }
        adamw_span_(VB, p + i, g + i, m + i, v + i, decay, beta1, c1, beta2, c2, step_size,
                    bc2_sqrt, eps);
    }
    adamw_span_(count - i, p + i, g + i, m + i, v + i, decay, beta1, c1, beta2, c2, step_size,
                bc2_sqrt, eps);
}

/* ======================================================================== */
/* reductions and helpers                                                   */
/* ======================================================================== */

static void cpu_scale(size_t count, float *x, float alpha)
{
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        UNROLL_VB
        for (int q = 0; q < VB; q++) x[i + q] *= alpha;
    }
    for (; i < count; i++) x[i] *= alpha;
}

static double cpu_sumsq(size_t count, const float *x)
{
    double acc[VB] = {0}, s = 0;
    size_t i = 0;
    for (; i + VB <= count; i += VB)
        for (int q = 0; q < VB; q++) acc[q] += (double)x[i + q] * x[i + q];
    for (; i < count; i++) s += (double)x[i] * x[i];
    for (int q = 0; q < VB; q++) s += acc[q];
    return s;
}

/* x * 0 is 0 for finite x and NaN for Inf or NaN: one NaN poisons the sum */
static int cpu_all_finite(size_t count, const float *x)
{
    const size_t chunk = 4096; /* stop early on a bad chunk */
    for (size_t c0 = 0; c0 < count; c0 += chunk) {
        size_t end = MIN(count, c0 + chunk), i = c0;
        float acc[VB] = {0}, s = 0;
        for (; i + VB <= end; i += VB)
            for (int q = 0; q < VB; q++) acc[q] += x[i + q] * 0.0f;
        for (; i < end; i++) s += x[i] * 0.0f;
        for (int q = 0; q < VB; q++) s += acc[q];
        if (s != 0.0f) return 0;
    }
    return 1;
}

static void cpu_to_half(size_t count, const float *x, uint16_t *h, int bf16)
{
    if (bf16)
        for (size_t i = 0; i < count; i++) h[i] = ddp_f32_to_bf16(x[i]);
    else
        for (size_t i = 0; i < count; i++) h[i] = ddp_f32_to_f16(x[i]);
}

static void cpu_from_half(size_t count, const uint16_t *h, float *x, int bf16)
{
    if (bf16)
        for (size_t i = 0; i < count; i++) x[i] = ddp_bf16_to_f32(h[i]);
    else
        for (size_t i = 0; i < count; i++) x[i] = ddp_f16_to_f32(h[i]);
}

/* ======================================================================== */

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int n);
int openblas_get_num_threads(void);
#endif

static ddp_status_t cpu_init(int local_rank, int local_size, char *describe, size_t n)
{
    (void)local_rank;
    (void)local_size;
    int threads = 1;
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS")) openblas_set_num_threads(1);
    threads = openblas_get_num_threads();
#endif
    snprintf(describe, n, "cpu (%d BLAS thread%s per rank)", threads, threads > 1 ? "s" : "");
    return DDP_OK;
}

/* The copy is made at once: nothing to wait for, nothing to record. */
static void cpu_upload_async(void *dst, const void *host_src, size_t bytes,
                             const compute_event_t *reuse, compute_event_t *done)
{
    (void)reuse;
    (void)done;
    cpu_copy(dst, host_src, bytes);
}

const compute_ops_t compute_cpu_ops = {
    .name = "cpu",
    .mem_kind = DDP_MEM_HOST,
    .init = cpu_init,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .upload_async = cpu_upload_async,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .conv_ws_bytes = cpu_conv_ws_bytes,
    .conv_fwd = cpu_conv_fwd,
    .conv_bwd = cpu_conv_bwd,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .gap_fwd = cpu_gap_fwd,
    .gap_bwd = cpu_gap_bwd,
    .bn_stats = cpu_bn_stats,
    .bn_finalize = cpu_bn_finalize,
    .bn_eval_params = cpu_bn_eval_params,
    .bn_fwd = cpu_bn_fwd,
    .bn_bwd_stats = cpu_bn_bwd_stats,
    .bn_bwd_data = cpu_bn_bwd_data,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .xent = cpu_xent,
    .mse = cpu_mse,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,
    .all_finite = cpu_all_finite,
    .to_half = cpu_to_half,
    .from_half = cpu_from_half,
};
