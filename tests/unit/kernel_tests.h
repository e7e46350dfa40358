/* kernel_tests.h -- what the compute-kernel tests share (check_kernels.c and
 * its rooms check_kernels_layers.c, check_kernels_vector.c,
 * check_kernels_models.c): the finite-difference step and tolerances (see
 * check_kernels.c), buffers and comparisons, the central-difference check,
 * the pooling and convolution shapes, the naive convolution in double (the
 * conv tests and the cuda backend's grouped conv test), and the functions
 * that add each room's tests. */
#ifndef DDP_KERNEL_TESTS_H
#define DDP_KERNEL_TESTS_H

#include <stdlib.h>

#include "compute.h"
#include "tests.h"

#define H         1e-2f
#define FD_TOL    2e-3
#define FD_TOL_BN 5e-3

/* Each adds its room's tests to t, in the suite's order, run on `backend`
 * (the CPU backend, or the mirror of "cuda" in check_kernels_cuda). */
void kernels_layer_tests(TCase *t, const compute_ops_t *backend);
void kernels_vector_tests(TCase *t, const compute_ops_t *backend);
void kernels_model_tests(TCase *t, const compute_ops_t *backend);

/* ---- helpers ---------------------------------------------------------- */

static inline float *fzero_(size_t n)
{
    float *a = calloc(n ? n : 1, sizeof *a);
    ck_assert_ptr_nonnull(a);
    return a;
}

static inline float *fconst_(size_t n, float v)
{
    float *a = fzero_(n);
    for (size_t i = 0; i < n; i++) a[i] = v;
    return a;
}

static inline double dot_(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static inline void assert_all_eq_(const float *a, float v, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == v, "%s[%zu] = %g, expected %g", what, i, a[i], v);
}

static inline void assert_close_v_(const float *a, const float *b, size_t n, double tol,
                                   const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)a[i] - b[i]) <= tol * fmax(1.0, fabs((double)b[i])),
                      "%s[%zu] = %.9g, expected %.9g (tol %g)", what, i, a[i], b[i], tol);
}

typedef double (*objective_fn)(void *ctx);

/* Central differences of f with respect to v[0..count) (every element when
 * there are few, an even spread of ~150 otherwise) against `analytic`. */
static inline void fd_check_(const char *what, objective_fn f, void *ctx, float *v, size_t count,
                             const float *analytic, double tol)
{
    size_t stride = count > 150 ? count / 150 : 1;
    for (size_t i = 0; i < count; i += stride) {
        const float save = v[i];
        const float up = save + H, dn = save - H;
        v[i] = up;
        double lp = f(ctx);
        v[i] = dn;
        double lm = f(ctx);
        v[i] = save;
        double num = (lp - lm) / ((double)up - (double)dn);
        ck_assert_msg(fabs(num - analytic[i]) <= tol * fmax(1.0, fabs(num)),
                      "%s[%zu]: analytic %.7g, finite difference %.7g", what, i, analytic[i], num);
    }
}

/* ---- pooling and convolution shapes, the naive convolution ------------ */

static inline pool_dims_t pool_dims_pad_(int n, int c, int h, int w, int k, int s, int p)
{
    pool_dims_t d = {.n = n, .c = c, .h = h, .w = w, .k = k, .stride = s, .pad = p};
    d.oh = (h + 2 * p - k) / s + 1;
    d.ow = (w + 2 * p - k) / s + 1;
    return d;
}

static inline pool_dims_t pool_dims_(int n, int c, int h, int w, int k, int s)
{
    return pool_dims_pad_(n, c, h, w, k, s, 0);
}

static inline conv_dims_t conv_dims_(int n, int c, int h, int w, int oc, int k, int s, int p)
{
    conv_dims_t d = {.n = n, .c = c, .h = h, .w = w, .oc = oc, .k = k, .stride = s, .pad = p};
    d.oh = (h + 2 * p - k) / s + 1;
    d.ow = (w + 2 * p - k) / s + 1;
    return d;
}

static inline size_t conv_xn_(const conv_dims_t *d)
{
    return (size_t)d->n * d->c * d->h * d->w;
}
static inline size_t conv_yn_(const conv_dims_t *d)
{
    return (size_t)d->n * d->oc * d->oh * d->ow;
}
static inline size_t conv_wn_(const conv_dims_t *d)
{
    return (size_t)d->oc * d->c * d->k * d->k;
}

/* Naive references in double: forward, and the three gradients for dy. */
static inline void conv_naive_(const conv_dims_t *d, const float *x, const float *w, const float *b,
                               const float *dy, float *y, float *dx, float *dw, float *db)
{
    size_t xn = conv_xn_(d), wn = conv_wn_(d);
    double *ddx = calloc(xn, sizeof *ddx), *ddw = calloc(wn, sizeof *ddw);
    double *ddb = calloc((size_t)d->oc, sizeof *ddb);
    for (int i = 0; i < d->n; i++)
        for (int o = 0; o < d->oc; o++)
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    size_t yi = (((size_t)i * d->oc + o) * d->oh + oy) * d->ow + ox;
                    double s = b ? b[o] : 0, g = dy ? dy[yi] : 0;
                    for (int ci = 0; ci < d->c; ci++)
                        for (int ki = 0; ki < d->k; ki++)
                            for (int kj = 0; kj < d->k; kj++) {
                                int iy = oy * d->stride - d->pad + ki;
                                int ix = ox * d->stride - d->pad + kj;
                                if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
                                size_t xi = (((size_t)i * d->c + ci) * d->h + iy) * d->w + ix;
                                size_t wi = (((size_t)o * d->c + ci) * d->k + ki) * d->k + kj;
                                s += (double)x[xi] * w[wi];
                                ddx[xi] += g * w[wi];
                                ddw[wi] += g * x[xi];
                            }
                    if (y) y[yi] = (float)s;
                    ddb[o] += g;
                }
    if (dx)
        for (size_t i = 0; i < xn; i++) dx[i] = (float)ddx[i];
    if (dw)
        for (size_t i = 0; i < wn; i++) dw[i] = (float)ddw[i];
    if (db)
        for (int i = 0; i < d->oc; i++) db[i] = (float)ddb[i];
    free(ddx), free(ddw), free(ddb);
}

#endif
