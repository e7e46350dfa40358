/* cpu_pool.c -- pooling in the CPU backend (as cuda/pool.cu): max pooling
 * with its argmax and -inf padding (2x2 stride-2 windows without padding,
 * the common case, on a branch-free SSE2 path, four windows at a time),
 * average pooling (square windows, no padding, floor mode) and the global
 * average pool, forward and backward. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "cpu_kernels.h"

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
        float *yr = yp + (size_t)oy * ow;
        int32_t *ar = ap + (size_t)oy * ow;
        const int32_t i0 = 2 * oy * w;
        int ox = 0;
#ifdef __SSE2__
        if (ow >= 4) {
            const float *r0 = xp + (size_t)2 * oy * w, *r1 = r0 + w;
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
 * of several NaNs the last).  Padding is -inf (PyTorch): the scan covers
 * the window's cells inside the plane, starting from -inf at the first of
 * them, so a padded cell never wins and a window of -infs has its first
 * cell as argmax.  A window with no cell inside (pad >= k; compute.h):
 * -inf and argmax -1. */
void cpu_maxpool_fwd(const pool_dims_t *d, const float *x, float *y, int32_t *argmax)
{
    const size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    const size_t ohw = (size_t)d->oh * d->ow;
    if (d->k == 2 && d->stride == 2 && d->pad == 0) {
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
                /* the window's top-left corner, maybe in the padding, and
                 * its cells inside the plane: ky in [ky0, ky1), kx in [kx0, kx1) */
                const int y0 = oy * d->stride - d->pad, x0 = ox * d->stride - d->pad;
                const int ky0 = MAX(-y0, 0), ky1 = MIN(d->k, d->h - y0);
                const int kx0 = MAX(-x0, 0), kx1 = MIN(d->k, d->w - x0);
                int best = ky0 < ky1 && kx0 < kx1 ? (y0 + ky0) * d->w + x0 + kx0 : -1;
                float bv = -INFINITY;
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++) {
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

/* dx = the sum of dy onto zero at each window's argmax, in window order
 * (argmax indexes the unpadded plane: padding needs nothing here). */
void cpu_maxpool_bwd(const pool_dims_t *d, const float *dy, const int32_t *argmax, float *dx)
{
    const size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    const size_t ohw = (size_t)d->oh * d->ow;
    if (d->k == 2 && d->stride == 2 && d->pad == 0) {
        for (size_t pl = 0; pl < planes; pl++)
            maxpool2_bwd_plane_(d, dy + pl * ohw, argmax + pl * ohw, dx + pl * hw);
        return;
    }
    if (planes) memset(dx, 0, planes * hw * sizeof *dx);
    for (size_t pl = 0; pl < planes; pl++) {
        float *dxp = dx + pl * hw;
        const float *dyp = dy + pl * ohw;
        const int32_t *ap = argmax + pl * ohw;
        for (size_t o = 0; o < ohw; o++)
            if (ap[o] >= 0) dxp[ap[o]] += dyp[o]; /* -1: a window of padding only */
    }
}

/* Average pooling has no padding (pool_dims_t: d->pad is 0). */
void cpu_avgpool_fwd(const pool_dims_t *d, const float *x, float *y)
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

void cpu_avgpool_bwd(const pool_dims_t *d, const float *dy, float *dx)
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

void cpu_gap_fwd(int n, int c, int hw, const float *x, float *y)
{
    const size_t planes = (size_t)MAX(n, 0) * MAX(c, 0);
    const double inv = hw > 0 ? 1.0 / hw : 0.0;
    for (size_t pl = 0; pl < planes; pl++)
        y[pl] = (float)(span_sum_((size_t)hw, x + pl * hw) * inv);
}

void cpu_gap_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    const size_t planes = (size_t)MAX(n, 0) * MAX(c, 0);
    const float inv = hw > 0 ? 1.0f / (float)hw : 0.0f;
    for (size_t pl = 0; pl < planes; pl++) {
        float g = dy[pl] * inv;
        float *dxp = dx + pl * hw;
        for (int k = 0; k < hw; k++) dxp[k] = g;
    }
}
