/* cpu_conv.c -- convolution in the CPU backend (conv_ws_bytes, conv_fwd,
 * conv_bwd; as cuda/conv.cu): im2col + GEMM over groups of samples, the
 * bias and its gradient, and the choice of path (bench/bench_cnn.c):
 * "same" convolutions (stride 1, output the input's size) build im2col
 * from shifted planes, 1x1 ones use x in place, and 3x3 pad-1 ones with 16
 * or more channels run as Winograd F(2x2, 3x3) in all three passes
 * (cpu_winograd.c).  The phases are timed into compute_cpu_prof
 * (compute_cpu.h) while a benchmark asks. */
#include <cblas.h>
#include <stddef.h>
#include <string.h>

#include "compute_cpu.h"
#include "cpu_dnnl.h"
#include "cpu_kernels.h"
#include "cpu_winograd.h"

/* Largest number of GEMM columns (samples x output pixels) one convolution
 * GEMM covers.  Planes of more than CONV_COLS / 2 pixels get one GEMM per
 * sample: it writes y and reads dy in place (no layout copies between
 * [n, oc, oh*ow] and [oc, n*oh*ow]) and its im2col buffer stays in L2
 * (bench/bench_cnn, the Fashion-MNIST CNN: 4096 columns -> 256 saved 0.8
 * of 22.4 ms per step); smaller planes are grouped so the GEMM stays wide. */
#define CONV_COLS 256

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
 * more (cpu_winograd_ws_floats). */
size_t cpu_conv_ws_bytes(const conv_dims_t *d)
{
    size_t ckk = (size_t)d->c * d->k * d->k;
    size_t cols = (size_t)conv_group_(d) * d->oh * d->ow;
    return MAX((ckk + (size_t)d->oc) * cols, cpu_winograd_ws_floats(d)) * sizeof(float);
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

/* A 1x1 convolution, stride 1, pad 0, one sample per GEMM: the input
 * [c, h*w] is its own im2col and the GEMM reads it in place; backward, the
 * input-gradient GEMM writes dx in place (no col2im). */
static int conv_direct_(const conv_dims_t *d, int g)
{
    return d->k == 1 && d->stride == 1 && d->pad == 0 && g == 1;
}

/* oneDNN's convolution (cpu_dnnl.c), then the bias as the one-sample path
 * adds it; 0, or -1: not done. */
static int dnnl_fwd_(const conv_dims_t *d, const float *x, const float *w, const float *b, float *y)
{
    if (!cpu_dnnl_conv_usable(d) || cpu_dnnl_conv_fwd(d, x, w, y) != 0) return -1;
    const size_t ohw = (size_t)d->oh * d->ow;
    if (b)
        for (int i = 0; i < d->n; i++)
            for (int o = 0; o < d->oc; o++) {
                float *yo = y + ((size_t)i * d->oc + o) * ohw;
                span_axpb_s_(ohw, yo, 1.0f, b[o], yo);
            }
    return 0;
}

void cpu_conv_fwd(const conv_dims_t *d, const float *x, const float *w, const float *b, float *y,
                  void *ws)
{
    if (d->n <= 0 || d->oc <= 0) return;
    if (dnnl_fwd_(d, x, w, b, y) == 0) return;
    if (cpu_winograd_ok(d)) {
        cpu_winograd_fwd(d, x, w, b, y, ws);
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

void cpu_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy, float *dx,
                  float *dw, float *db, float beta, void *ws)
{
    const int ckk = d->c * d->k * d->k;
    if (d->n <= 0 || d->oc <= 0) {
        if (dw) grad_scale_((size_t)d->oc * ckk, dw, beta);
        if (db) grad_scale_((size_t)d->oc, db, beta);
        if (d->n > 0 && dx) memset(dx, 0, (size_t)d->n * d->c * d->h * d->w * sizeof *dx);
        return;
    }
    if (cpu_dnnl_conv_usable(d) && cpu_dnnl_conv_bwd(d, x, w, dy, dx, dw, beta) == 0) {
        if (db) conv_bias_grad_(d->n, d->oc, (size_t)d->oh * d->ow, dy, db, beta);
        return;
    }
    if (cpu_winograd_ok(d)) {
        PROF_START();
        if (db) conv_bias_grad_(d->n, d->oc, (size_t)d->oh * d->ow, dy, db, beta);
        PROF_END(bias);
        if (dw) cpu_winograd_bwd_weights(d, x, dy, dw, beta, ws);
        if (dx) cpu_winograd_bwd_data(d, w, dy, dx, ws);
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
