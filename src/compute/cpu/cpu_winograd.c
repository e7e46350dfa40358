/* cpu_winograd.c -- the Winograd F(2x2, 3x3) path of the CPU convolution
 * (cpu_winograd.h; cpu_conv.c picks it).
 *
 * 3x3 convolutions with stride 1 and pad 1 (output the size of the input)
 * compute each 2x2 output tile from a 4x4 input tile with 16 products
 * instead of 36: Y = A^T [(G g G^T) .* (B^T d B)] A (Lavin and Gray 2016),
 * the 16 elementwise products over channels being 16 GEMMs
 *   M[e] [cout, tiles] = U[e] [cout, cin] V[e] [cin, tiles],
 * e the position in the 4x4 tile.  2.25x fewer multiplications; the
 * transforms only add, subtract and halve, so the results agree with the
 * exact convolution about as well as im2col + GEMM's (max error 4-9e-7 on
 * outputs up to about 2, channels 32-256, against a double reference).
 * Used for the forward pass; with the kernels rotated by 180 degrees and in
 * and out channels swapped, for the input gradient (a "full" correlation of
 * dy); and, through the adjoint of the transforms, for the weight gradient
 * (16 GEMMs with K = tiles: wino_dw_).
 *
 * The transforms of the input, the output and the output gradient run on
 * vectors of tiles.  Their one body, cpu_winograd_body.h, is included below
 * once per vector width, each time under that width's vector type and
 * operations (WV): SSE2, 4 tiles per vector (x86-64's baseline); AVX2, 8
 * tiles, compiled with the target("avx2") attribute and picked at run time
 * on CPUs that have it (WINO_WIDE, cpu_kernels.h; -DWIDE_CLONES= builds
 * without); and portable C, 4 tiles in a GNU C vector, in builds without
 * SSE2.  All three do the same operations in the same order, so they give
 * the same results bit for bit. */
#include <cblas.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "compute_cpu.h"
#include "cpu_kernels.h"
#include "cpu_winograd.h"

#ifdef WINO_WIDE
#include <immintrin.h>
#endif

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

int cpu_winograd_ok(const conv_dims_t *d)
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

/* U [16, oc, c], V [16, max(c, oc), tiles], M [16, max(c, oc), tiles], the
 * padded planes of the input transform */
size_t cpu_winograd_ws_floats(const conv_dims_t *d)
{
    if (!cpu_winograd_ok(d)) return 0;
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

/* ---- the transforms, one body per vector width -------------------------- */

/* One plane of each transform (cpu_winograd_body.h), of one vector width. */
typedef struct wino_kernels {
    void (*input_plane)(int h, int w, const float *xp, float *pad, float *vc, size_t plane,
                        size_t t0, size_t ld);
    void (*output_plane)(int h, int w, const float *mo, size_t plane, float bias, float *yp,
                         const float *y_end);
    void (*dy_plane)(int h, int w, const float *gp, float *wo, size_t plane, size_t t0, size_t ld,
                     const float *dy_end);
} wino_kernels_t;

/* wino_keep_ + 16 - n: n lanes of -1 (kept), then zeros; for vectors of up
 * to 8 lanes (a pair of them reads up to 16 - n more) */
static const int32_t wino_keep_[32] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1, -1, -1, -1, -1};

#ifdef __SSE2__
/* SSE2: 4 tiles per __m128 */
typedef __m128 wv_sse2_t;
static inline __m128 wv_sse2_load(const float *p)
{
    return _mm_loadu_ps(p);
}
static inline void wv_sse2_store(float *p, __m128 v)
{
    _mm_storeu_ps(p, v);
}
static inline __m128 wv_sse2_add(__m128 a, __m128 b)
{
    return _mm_add_ps(a, b);
}
static inline __m128 wv_sse2_sub(__m128 a, __m128 b)
{
    return _mm_sub_ps(a, b);
}
static inline __m128 wv_sse2_neg(__m128 a)
{
    return _mm_xor_ps(a, _mm_set1_ps(-0.0f));
}
static inline __m128 wv_sse2_set1(float x)
{
    return _mm_set1_ps(x);
}
static inline __m128 wv_sse2_zero(void)
{
    return _mm_setzero_ps();
}
static inline __m128 wv_sse2_keep(__m128 v, const int32_t *m)
{
    return _mm_and_ps(v, _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)(const void *)m)));
}
static inline __m128 wv_sse2_even(__m128 a, __m128 b)
{
    return _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
}
static inline __m128 wv_sse2_odd(__m128 a, __m128 b)
{
    return _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}
static inline void wv_sse2_zip(__m128 a, __m128 b, __m128 *lo, __m128 *hi)
{
    *lo = _mm_unpacklo_ps(a, b);
    *hi = _mm_unpackhi_ps(a, b);
}
#define WV_N          4
#define WV(op)        wv_sse2_##op
#define WINO_FN(name) wino_##name##_sse2_
#define WV_ATTR
#include "cpu_winograd_body.h"

#ifdef WINO_WIDE
/* AVX2: 8 tiles per __m256 (one block covers a tile row of up to 8 tiles:
 * 14x14 planes), without FMA (no contraction) */
#define WINO_AVX2 __attribute__((target("avx2")))
typedef __m256 wv_avx2_t;
WINO_AVX2 static inline __m256 wv_avx2_load(const float *p)
{
    return _mm256_loadu_ps(p);
}
WINO_AVX2 static inline void wv_avx2_store(float *p, __m256 v)
{
    _mm256_storeu_ps(p, v);
}
WINO_AVX2 static inline __m256 wv_avx2_add(__m256 a, __m256 b)
{
    return _mm256_add_ps(a, b);
}
WINO_AVX2 static inline __m256 wv_avx2_sub(__m256 a, __m256 b)
{
    return _mm256_sub_ps(a, b);
}
WINO_AVX2 static inline __m256 wv_avx2_neg(__m256 a)
{
    return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f));
}
WINO_AVX2 static inline __m256 wv_avx2_set1(float x)
{
    return _mm256_set1_ps(x);
}
WINO_AVX2 static inline __m256 wv_avx2_zero(void)
{
    return _mm256_setzero_ps();
}
WINO_AVX2 static inline __m256 wv_avx2_keep(__m256 v, const int32_t *m)
{
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_loadu_si256((const void *)m)));
}
/* the even (odd) elements of the 16 floats a, b */
WINO_AVX2 static inline __m256 wv_avx2_even(__m256 a, __m256 b)
{
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
WINO_AVX2 static inline __m256 wv_avx2_odd(__m256 a, __m256 b)
{
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
WINO_AVX2 static inline void wv_avx2_zip(__m256 a, __m256 b, __m256 *lo, __m256 *hi)
{
    const __m256 l = _mm256_unpacklo_ps(a, b), h = _mm256_unpackhi_ps(a, b); /* per 128 bits */
    *lo = _mm256_permute2f128_ps(l, h, 0x20);
    *hi = _mm256_permute2f128_ps(l, h, 0x31);
}
#define WV_N          8
#define WV(op)        wv_avx2_##op
#define WINO_FN(name) wino_##name##_avx2_
#define WV_ATTR       WINO_AVX2
#include "cpu_winograd_body.h"

/* whether this CPU has AVX2 (asked once) */
static int wino_wide_(void)
{
    static int wide = -1;
    if (wide < 0) {
        __builtin_cpu_init();
        wide = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return wide;
}
#endif /* WINO_WIDE */

#else /* no SSE2 */
/* portable C: 4 tiles per GNU C vector (element i of a vector operation is
 * the scalar operation on elements i) */
typedef float wv_c_t __attribute__((vector_size(16)));
static inline wv_c_t wv_c_load(const float *p)
{
    wv_c_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void wv_c_store(float *p, wv_c_t v)
{
    memcpy(p, &v, sizeof v);
}
static inline wv_c_t wv_c_add(wv_c_t a, wv_c_t b)
{
    return a + b;
}
static inline wv_c_t wv_c_sub(wv_c_t a, wv_c_t b)
{
    return a - b;
}
static inline wv_c_t wv_c_neg(wv_c_t a)
{
    return -a;
}
static inline wv_c_t wv_c_set1(float x)
{
    return (wv_c_t){x, x, x, x};
}
static inline wv_c_t wv_c_zero(void)
{
    return (wv_c_t){0.0f, 0.0f, 0.0f, 0.0f};
}
static inline wv_c_t wv_c_keep(wv_c_t v, const int32_t *m)
{
    return (wv_c_t){m[0] ? v[0] : 0.0f, m[1] ? v[1] : 0.0f, m[2] ? v[2] : 0.0f, m[3] ? v[3] : 0.0f};
}
static inline wv_c_t wv_c_even(wv_c_t a, wv_c_t b)
{
    return (wv_c_t){a[0], a[2], b[0], b[2]};
}
static inline wv_c_t wv_c_odd(wv_c_t a, wv_c_t b)
{
    return (wv_c_t){a[1], a[3], b[1], b[3]};
}
static inline void wv_c_zip(wv_c_t a, wv_c_t b, wv_c_t *lo, wv_c_t *hi)
{
    *lo = (wv_c_t){a[0], b[0], a[1], b[1]};
    *hi = (wv_c_t){a[2], b[2], a[3], b[3]};
}
#define WV_N          4
#define WV(op)        wv_c_##op
#define WINO_FN(name) wino_##name##_c_
#define WV_ATTR
#include "cpu_winograd_body.h"
#endif /* __SSE2__ */

/* The transforms of this build and CPU: AVX2 where the CPU has it (asked
 * once), else SSE2, else portable C. */
static const wino_kernels_t *wino_kernels_(void)
{
#ifdef WINO_WIDE
    if (wino_wide_()) return &wino_kernels_avx2_;
#endif
#ifdef __SSE2__
    return &wino_kernels_sse2_;
#else
    return &wino_kernels_c_;
#endif
}

/* V[e][ci][t0 + tile] = (B^T d B)[e] of the 4x4 input tile d at rows 2ty-1..
 * 2ty+2, columns 2tx-1..2tx+2 (zero outside) of one sample x [cin, h, w];
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].  ld: V's row length; pad:
 * wino_pad_floats_(h, w) floats of scratch.  Plane by plane (input_plane of
 * cpu_winograd_body.h). */
static void wino_input_(int cin, int h, int w, const float *x, float *V, size_t ld, size_t t0,
                        float *pad)
{
    const wino_kernels_t *k = wino_kernels_();
    const size_t plane = wino_plane_((size_t)cin, ld);
    memset(pad, 0, wino_pad_floats_(h, w) * sizeof *pad);
    for (int ci = 0; ci < cin; ci++)
        k->input_plane(h, w, x + (size_t)ci * h * w, pad, V + (size_t)ci * ld, plane, t0, ld);
}

/* y[o, 2ty + r, 2tx + q] = (A^T m A)[r][q] + bias[o] for the tiles of one
 * sample, m[e] = M[e][o][t0 + tile], A^T = [1 1 1 0; 0 1 -1 -1]; the row and
 * column past an odd edge are dropped.  bias may be NULL; y_end: the end of
 * the output tensor (nothing at or past it is written).  Plane by plane
 * (output_plane of cpu_winograd_body.h). */
static void wino_output_(int cout, int h, int w, const float *M, size_t ld, size_t t0,
                         const float *bias, float *y, const float *y_end)
{
    const wino_kernels_t *k = wino_kernels_();
    const size_t plane = wino_plane_((size_t)cout, ld);
    for (int o = 0; o < cout; o++)
        k->output_plane(h, w, M + (size_t)o * ld + t0, plane, bias ? bias[o] : 0.0f,
                        y + (size_t)o * h * w, y_end);
}

/* Wd[e][o][t0 + tile] = (A g A^T)[e] for the 2x2 tiles g of one sample's
 * output gradient dy [cout, h, w] (zero past an odd edge), A = (A^T)^T: the
 * adjoint of wino_output_.  dy_end: the end of the gradient tensor (nothing
 * at or past it is read).  Plane by plane (dy_plane of
 * cpu_winograd_body.h). */
static void wino_dy_(int cout, int h, int w, const float *dy, float *Wd, size_t ld, size_t t0,
                     const float *dy_end)
{
    const wino_kernels_t *k = wino_kernels_();
    const size_t plane = wino_plane_((size_t)cout, ld);
    for (int o = 0; o < cout; o++)
        k->dy_plane(h, w, dy + (size_t)o * h * w, Wd + (size_t)o * ld, plane, t0, ld, dy_end);
}

/* ---- the three passes --------------------------------------------------- */

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

void cpu_winograd_fwd(const conv_dims_t *d, const float *x, const float *w, const float *b,
                      float *y, void *ws)
{
    float *U = ws;
    wino_weights_(d, w, 0, U);
    wino_conv_(d, d->c, d->oc, x, U, b, y, U + 16 * wino_plane_((size_t)d->oc, (size_t)d->c));
}

void cpu_winograd_bwd_weights(const conv_dims_t *d, const float *x, const float *dy, float *dw,
                              float beta, void *ws)
{
    wino_dw_(d, x, dy, dw, beta, ws);
}

void cpu_winograd_bwd_data(const conv_dims_t *d, const float *w, const float *dy, float *dx,
                           void *ws)
{
    float *U = ws;
    wino_weights_(d, w, 1, U);
    wino_conv_(d, d->oc, d->c, dy, U, NULL, dx, U + 16 * wino_plane_((size_t)d->oc, (size_t)d->c));
}
