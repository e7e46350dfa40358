/* check_kernels_layers.c -- the compute backend's layer ops against outside
 * references (see check_kernels.c): linear (finite differences, naive loops,
 * the beta and n == 0 contracts, a fused ReLU against the layers alone),
 * convolution (finite differences, the naive loops over every GEMM path, an
 * empty batch), average, max and global
 * average pooling (finite differences; max pooling bit for bit against its
 * definition, with ties, NaNs and -0, and with -inf padding on planes of
 * negative values) and batch normalisation (finite differences, running
 * statistics and eval mode, data far from zero, a ReLU or a block's add
 * fused into it against the layers alone). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "test_rand.h"
#include "tests.h"
#include "kernel_tests.h"

/* the backend under test (set by kernels_layer_tests) */
static const compute_ops_t *B;

/* ---- linear ----------------------------------------------------------- */

typedef struct lin_ctx {
    int n, in, out;
    float *x, *w, *b, *y, *wo;
} lin_ctx_t;

static double lin_obj_(void *p)
{
    lin_ctx_t *c = p;
    B->linear_fwd(c->n, c->in, c->out, c->x, c->w, c->b, c->y, 0);
    return dot_(c->y, c->wo, (size_t)c->n * c->out);
}

START_TEST(linear_gradients)
{
    test_seed(1);
    lin_ctx_t c = {.n = 5, .in = 7, .out = 4};
    c.x = test_fvec(35, 1), c.w = test_fvec(28, 1), c.b = test_fvec(4, 1), c.y = fzero_(20);
    c.wo = test_fvec(20, 1);
    float *dx = fzero_(35), *dw = fzero_(28), *db = fzero_(4);
    B->linear_bwd(c.n, c.in, c.out, c.x, c.w, c.wo, dx, dw, db, 0.0f, NULL, NULL);
    fd_check_("linear dx", lin_obj_, &c, c.x, 35, dx, FD_TOL);
    fd_check_("linear dw", lin_obj_, &c, c.w, 28, dw, FD_TOL);
    fd_check_("linear db", lin_obj_, &c, c.b, 4, db, FD_TOL);
    /* dx == NULL: the parameter gradients are unchanged */
    float *dw2 = fzero_(28), *db2 = fzero_(4);
    B->linear_bwd(c.n, c.in, c.out, c.x, c.w, c.wo, NULL, dw2, db2, 0.0f, NULL, NULL);
    ck_assert_mem_eq(dw, dw2, 28 * sizeof *dw);
    ck_assert_mem_eq(db, db2, 4 * sizeof *db);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.wo), free(dx), free(dw), free(db);
    free(dw2), free(db2);
}
END_TEST

START_TEST(linear_forward_naive)
{
    /* sizes off the vector width; with and without bias */
    test_seed(2);
    const int n = 33, in = 70, out = 19;
    float *x = test_fvec((size_t)n * in, 2), *w = test_fvec((size_t)out * in, 1),
          *b = test_fvec(out, 1);
    float *y = fzero_((size_t)n * out), *ref = fzero_((size_t)n * out);
    for (int nb = 0; nb < 2; nb++) {
        const float *bias = nb ? NULL : b;
        for (int i = 0; i < n; i++)
            for (int o = 0; o < out; o++) {
                double s = bias ? bias[o] : 0;
                for (int k = 0; k < in; k++) s += (double)x[i * in + k] * w[o * in + k];
                ref[i * out + o] = (float)s;
            }
        for (int i = 0; i < n * out; i++) y[i] = NAN; /* must be overwritten */
        B->linear_fwd(n, in, out, x, w, bias, y, 0);
        /* float GEMM over 70 products of O(1) values: < 1e-5 relative to O(1) */
        assert_close_v_(y, ref, (size_t)n * out, 1e-5, nb ? "linear y (no bias)" : "linear y");
    }
    free(x), free(w), free(b), free(y), free(ref);
}
END_TEST

START_TEST(linear_beta_and_empty)
{
    test_seed(3);
    const int n = 6, in = 9, out = 17;
    float *x = test_fvec(n * in, 1), *w = test_fvec(out * in, 1), *dy = test_fvec(n * out, 1);
    float *g1 = fzero_(out * in), *b1 = fzero_(out);
    float *g2 = fconst_(out * in, NAN), *b2 = fconst_(out, NAN);
    B->linear_bwd(n, in, out, x, w, dy, NULL, g1, b1, 0.0f, NULL, NULL);
    /* beta = 0 ignores what was there (even NaN) */
    B->linear_bwd(n, in, out, x, w, dy, NULL, g2, b2, 0.0f, NULL, NULL);
    ck_assert_mem_eq(g1, g2, sizeof(float) * out * in);
    ck_assert_mem_eq(b1, b2, sizeof(float) * out);
    /* beta = 1 twice from zero == 2x */
    memset(g2, 0, sizeof(float) * out * in), memset(b2, 0, sizeof(float) * out);
    B->linear_bwd(n, in, out, x, w, dy, NULL, g2, b2, 1.0f, NULL, NULL);
    B->linear_bwd(n, in, out, x, w, dy, NULL, g2, b2, 1.0f, NULL, NULL);
    for (int i = 0; i < out * in; i++) ck_assert_float_eq_tol(g2[i], 2 * g1[i], 1e-6f);
    for (int i = 0; i < out; i++) ck_assert_float_eq_tol(b2[i], 2 * b1[i], 1e-6f);
    /* n == 0: beta 0 zeroes, beta 1 leaves alone, outputs untouched */
    float *y = fconst_(4, 7.0f);
    B->linear_fwd(0, in, out, x, w, b1, y, 0);
    assert_all_eq_(y, 7.0f, 4, "y after n=0");
    B->linear_bwd(0, in, out, x, w, dy, y, g2, b2, 1.0f, NULL, NULL);
    for (int i = 0; i < out * in; i++) ck_assert_float_eq_tol(g2[i], 2 * g1[i], 1e-6f);
    assert_all_eq_(y, 7.0f, 4, "dx after n=0");
    B->linear_bwd(0, in, out, x, w, dy, y, g2, b2, 0.0f, NULL, NULL);
    assert_all_eq_(g2, 0.0f, (size_t)out * in, "dw after n=0, beta=0");
    assert_all_eq_(b2, 0.0f, (size_t)out, "db after n=0, beta=0");
    free(x), free(w), free(dy), free(g1), free(b1), free(g2), free(b2), free(y);
}
END_TEST

/* A ReLU fused into the dense layer before it (linear_fwd's relu,
 * linear_bwd's relu_y and ws) against the two layers alone: the same bits
 * forward and backward, with and without a bias and dx, beta 0 and 1, an
 * output width off the cuda backend's 32-column tiles, and in == 0. */
static const int lin_relu_cases_[][5] = {
    /* n, in, out, bias, beta */
    {7, 5, 33, 1, 0}, {40, 24, 64, 1, 1}, {9, 6, 10, 0, 0}, {3, 0, 5, 1, 1}, {1, 1, 1, 1, 0}};

START_TEST(linear_relu_fused)
{
    const int *k = lin_relu_cases_[_i];
    const int n = k[0], in = k[1], out = k[2];
    const float beta = (float)k[4];
    test_seed(80 + (uint64_t)_i);
    size_t xn = (size_t)n * in, wn = (size_t)out * in, yn = (size_t)n * out;
    float *x = test_fvec(xn + 1, 1), *w = test_fvec(wn + 1, 1);
    float *b = k[3] ? test_fvec((size_t)out, 1) : NULL, *dz = test_fvec(yn, 1);
    float *y = fzero_(yn), *z = fzero_(yn), *zf = fconst_(yn, NAN), *dy = fzero_(yn);
    float *ws = fconst_(yn, NAN), *dx = fconst_(xn + 1, NAN), *dxf = fconst_(xn + 1, NAN);
    float *dw = test_fvec(wn + 1, 1), *dwf = malloc((wn + 1) * sizeof *dwf);
    float *db = test_fvec((size_t)out, 1), *dbf = malloc((size_t)out * sizeof *dbf);
    memcpy(dwf, dw, (wn + 1) * sizeof *dw), memcpy(dbf, db, (size_t)out * sizeof *db);
    for (size_t i = 0; i < yn; i++) dz[i] += dz[i] < 0 ? -0.25f : 0.25f; /* never 0 */
    /* alone */
    B->linear_fwd(n, in, out, x, w, b, y, 0);
    B->relu_fwd(yn, y, z);
    B->relu_bwd(yn, y, dz, dy, NULL);
    B->linear_bwd(n, in, out, x, w, dy, dx, dw, b ? db : NULL, beta, NULL, NULL);
    /* fused */
    B->linear_fwd(n, in, out, x, w, b, zf, 1);
    B->linear_bwd(n, in, out, x, w, dz, dxf, dwf, b ? dbf : NULL, beta, zf, ws);
    size_t neg = 0;
    for (size_t i = 0; i < yn; i++) neg += y[i] <= 0;
    ck_assert_msg(yn < 4 || (neg > yn / 8 && neg < yn - yn / 8),
                  "linear+relu case %d: %zu of %zu outputs <= 0", _i, neg, yn);
    ck_assert_mem_eq(zf, z, yn * sizeof *z);
    ck_assert_mem_eq(dxf, dx, (xn + 1) * sizeof *dx);
    ck_assert_mem_eq(dwf, dw, (wn + 1) * sizeof *dw);
    ck_assert_mem_eq(dbf, db, (size_t)out * sizeof *db);
    /* without dx, and the input gradient only (no weight gradients) */
    float *dw2 = malloc((wn + 1) * sizeof *dw2), *db2 = fzero_((size_t)out);
    B->linear_bwd(n, in, out, x, w, dz, NULL, dw2, b ? db2 : NULL, 0.0f, zf, ws);
    B->linear_bwd(n, in, out, x, w, dy, NULL, dwf, b ? dbf : NULL, 0.0f, NULL, NULL);
    ck_assert_mem_eq(dw2, dwf, wn * sizeof *dw);
    if (b) ck_assert_mem_eq(db2, dbf, (size_t)out * sizeof *db);
    B->linear_bwd(n, in, out, x, w, dz, dxf, NULL, NULL, 0.0f, zf, ws);
    B->linear_bwd(n, in, out, x, w, dy, dx, NULL, NULL, 0.0f, NULL, NULL);
    ck_assert_mem_eq(dxf, dx, (xn + 1) * sizeof *dx);
    float *all[] = {x, w, b, dz, y, z, zf, dy, ws, dx, dxf, dw, dwf, db, dbf, dw2, db2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}
END_TEST

/* ---- convolution ------------------------------------------------------ */

typedef struct conv_ctx {
    conv_dims_t d;
    float *x, *w, *b, *y, *wo;
    void *ws;
} conv_ctx_t;

static double conv_obj_(void *p)
{
    conv_ctx_t *c = p;
    B->conv_fwd(&c->d, c->x, c->w, c->b, c->y, c->ws);
    return dot_(c->y, c->wo, conv_yn_(&c->d));
}

/* stride 1 and 2, pad 0, 1 and 2, k 1, 3 and 5, several channels, odd
 * sizes; 1x1 on small planes (grouped, im2col) and on 12x11 (in place) */
static const int conv_cases_[][8] = {
    /* n, c, h, w, oc, k, stride, pad */
    {2, 3, 5, 5, 4, 3, 1, 1},   {2, 2, 7, 6, 3, 3, 2, 0}, {3, 4, 5, 5, 2, 1, 1, 0},
    {2, 3, 6, 5, 5, 1, 2, 0},   {2, 2, 6, 7, 3, 3, 2, 1}, {1, 3, 4, 6, 2, 3, 1, 0},
    {2, 1, 5, 4, 2, 1, 1, 1},   {2, 3, 7, 5, 4, 5, 1, 2}, {2, 3, 12, 11, 4, 1, 1, 0},
    {1, 16, 5, 6, 16, 3, 1, 1},
};

START_TEST(conv_gradients)
{
    const int *k = conv_cases_[_i];
    test_seed(10 + (uint64_t)_i);
    conv_ctx_t c = {.d = conv_dims_(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7])};
    size_t xn = conv_xn_(&c.d), yn = conv_yn_(&c.d), wn = conv_wn_(&c.d);
    c.x = test_fvec(xn, 1), c.w = test_fvec(wn, 1), c.b = test_fvec((size_t)c.d.oc, 1);
    c.y = fzero_(yn), c.wo = test_fvec(yn, 1);
    c.ws = B->alloc(B->conv_ws_bytes(&c.d));
    float *dx = fconst_(xn, NAN), *dw = fconst_(wn, NAN), *db = fconst_((size_t)c.d.oc, NAN);
    B->conv_bwd(&c.d, c.x, c.w, c.wo, dx, dw, db, 0.0f, c.ws);
    char what[64];
    snprintf(what, sizeof what, "conv case %d dx", _i);
    fd_check_(what, conv_obj_, &c, c.x, xn, dx, FD_TOL);
    snprintf(what, sizeof what, "conv case %d dw", _i);
    fd_check_(what, conv_obj_, &c, c.w, wn, dw, FD_TOL);
    snprintf(what, sizeof what, "conv case %d db", _i);
    fd_check_(what, conv_obj_, &c, c.b, (size_t)c.d.oc, db, FD_TOL);
    B->free(c.ws);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.wo), free(dx), free(dw), free(db);
}
END_TEST

/* Forward and backward against the naive loops, including batches that take
 * several GEMM groups (n = 130 of 8x8), one-sample groups (large images)
 * and the beta contract (beta = 1 twice == 2x).  "Same" convolutions
 * (stride 1, output the size of the input: 3x3 pad 1, 1x1 pad 0, 5x5 pad 2)
 * take im2col/col2im's shifted-plane path, on odd and non-square sizes and
 * on a plane smaller than the kernel (2x3 under 5x5); the others (stride 2,
 * pad 0 on 3x3) the row-by-row path; a 1x1 stride-1 pad-0 convolution on a
 * plane of one sample per GEMM (12x13) none: the GEMMs use x and dx in
 * place.  3x3 pad 1 with 16 or more channels in and out goes through
 * Winograd F(2x2, 3x3) (forward and input gradient): odd sizes (7x9, a 1x2
 * plane: tiles that hang over the edge), several samples per group (7 of
 * 14x14); 15 input channels stays on im2col.  Its vectorised transforms
 * (blocks of 4 tiles of a tile row): the CNN's 32->64 on 14x14 in three
 * groups (11 samples: 5, 5, 1), odd 9x13 (a partial block in every tile
 * row, an odd last row and column), 3x17 (two whole blocks and one tile),
 * 6x8 (whole blocks only). */
static const int conv_naive_cases_[][8] = {
    {130, 2, 8, 8, 3, 3, 1, 1},  {3, 1, 50, 50, 2, 3, 1, 1},  {1, 3, 9, 7, 4, 3, 2, 1},
    {5, 6, 6, 6, 7, 1, 1, 0},    {4, 3, 9, 9, 5, 3, 2, 0},    {3, 2, 9, 6, 3, 3, 1, 1},
    {2, 2, 2, 3, 3, 5, 1, 2},    {3, 4, 7, 11, 5, 1, 1, 0},   {2, 3, 7, 8, 4, 3, 1, 0},
    {3, 4, 12, 13, 5, 1, 1, 0},  {3, 16, 7, 9, 17, 3, 1, 1},  {7, 20, 14, 14, 16, 3, 1, 1},
    {2, 16, 1, 2, 24, 3, 1, 1},  {2, 15, 8, 8, 16, 3, 1, 1},  {11, 32, 14, 14, 64, 3, 1, 1},
    {3, 24, 9, 13, 16, 3, 1, 1}, {2, 16, 3, 17, 32, 3, 1, 1}, {4, 17, 6, 8, 19, 3, 1, 1},
};

START_TEST(conv_naive)
{
    const int *k = conv_naive_cases_[_i];
    test_seed(20 + (uint64_t)_i);
    conv_dims_t d = conv_dims_(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
    size_t xn = conv_xn_(&d), yn = conv_yn_(&d), wn = conv_wn_(&d), on = (size_t)d.oc;
    float *x = test_fvec(xn, 1), *w = test_fvec(wn, 1), *b = test_fvec(on, 1),
          *dy = test_fvec(yn, 1);
    float *y = fconst_(yn, NAN), *dx = fconst_(xn, NAN), *dw = fconst_(wn, NAN);
    float *db = fconst_(on, NAN);
    float *ry = fzero_(yn), *rdx = fzero_(xn), *rdw = fzero_(wn), *rdb = fzero_(on);
    void *ws = B->alloc(B->conv_ws_bytes(&d));
    conv_naive_(&d, x, w, b, dy, ry, rdx, rdw, rdb);
    B->conv_fwd(&d, x, w, b, y, ws);
    B->conv_bwd(&d, x, w, dy, dx, dw, db, 0.0f, ws);
    /* float sums of up to ~130*64 O(1) products: 1e-4 relative to max(1, |ref|) */
    assert_close_v_(y, ry, yn, 1e-5, "conv y");
    assert_close_v_(dx, rdx, xn, 1e-5, "conv dx");
    assert_close_v_(dw, rdw, wn, 1e-4, "conv dw");
    assert_close_v_(db, rdb, on, 1e-4, "conv db");
    /* beta = 1 twice from zero == 2x; dx == NULL allowed */
    float *dw2 = fzero_(wn), *db2 = fzero_(on);
    B->conv_bwd(&d, x, w, dy, NULL, dw2, db2, 1.0f, ws);
    B->conv_bwd(&d, x, w, dy, NULL, dw2, db2, 1.0f, ws);
    for (size_t i = 0; i < wn; i++)
        ck_assert_float_eq_tol(dw2[i], 2 * dw[i], 1e-5f * fmaxf(1, fabsf(dw[i])));
    for (size_t i = 0; i < on; i++)
        ck_assert_float_eq_tol(db2[i], 2 * db[i], 1e-5f * fmaxf(1, fabsf(db[i])));
    /* a smaller batch in the same workspace (the workspace serves any n' <= n) */
    if (d.n > 1) {
        conv_dims_t d1 = d;
        d1.n = d.n / 2;
        float *y1 = fconst_(conv_yn_(&d1), NAN);
        B->conv_fwd(&d1, x, w, b, y1, ws);
        assert_close_v_(y1, ry, conv_yn_(&d1), 1e-5, "conv y (smaller n)");
        free(y1);
    }
    B->free(ws);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(ry);
    free(rdx), free(rdw), free(rdb), free(dw2), free(db2);
}
END_TEST

START_TEST(conv_empty_batch)
{
    conv_dims_t d = conv_dims_(0, 2, 5, 5, 3, 3, 1, 1);
    size_t wn = conv_wn_(&d);
    float *w = test_fvec(wn, 1), *dw = fconst_(wn, 3.0f), *db = fconst_(3, 3.0f);
    float *dx = fconst_(4, 7.0f), *y = fconst_(4, 7.0f);
    void *ws = B->alloc(B->conv_ws_bytes(&d));
    ck_assert_ptr_nonnull(ws);
    B->conv_fwd(&d, dx, w, db, y, ws);
    assert_all_eq_(y, 7.0f, 4, "conv y after n=0");
    B->conv_bwd(&d, dx, w, y, dx, dw, db, 1.0f, ws);
    assert_all_eq_(dw, 3.0f, wn, "conv dw after n=0, beta=1");
    assert_all_eq_(db, 3.0f, 3, "conv db after n=0, beta=1");
    assert_all_eq_(dx, 7.0f, 4, "conv dx after n=0");
    B->conv_bwd(&d, dx, w, y, dx, dw, db, 0.0f, ws);
    assert_all_eq_(dw, 0.0f, wn, "conv dw after n=0, beta=0");
    assert_all_eq_(db, 0.0f, 3, "conv db after n=0, beta=0");
    B->free(ws);
    free(w), free(dw), free(db), free(dx), free(y);
}
END_TEST

/* ---- pooling ---------------------------------------------------------- */

typedef struct pool_ctx {
    pool_dims_t d;
    int max;
    float *x, *y, *wo;
    int32_t *am;
} pool_ctx_t;

static double pool_obj_(void *p)
{
    pool_ctx_t *c = p;
    if (c->max)
        B->maxpool_fwd(&c->d, c->x, c->y, c->am);
    else
        B->avgpool_fwd(&c->d, c->x, c->y);
    return dot_(c->y, c->wo, (size_t)c->d.n * c->d.c * c->d.oh * c->d.ow);
}

/* distinct values 0.05 apart (> 2H: finite differences never swap a max) */
static float *distinct_(size_t n)
{
    float *a = fzero_(n);
    for (size_t i = 0; i < n; i++) a[i] = 0.05f * (float)i - 0.025f * (float)n;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)((test_urand() + 1) * 0.5f * (float)i) % i;
        float t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
    return a;
}

/* window 2 stride 2 on odd sizes (floor mode drops the last row/column),
 * window 3 stride 2 and stride 1 (overlapping windows); with padding (max
 * pooling only): window 3 stride 2 on odd and even sizes, window 2 stride 1 */
static const int pool_cases_[][7] = {
    /* n, c, h, w, k, stride, pad */
    {2, 3, 6, 7, 2, 2, 0}, {1, 2, 7, 11, 2, 2, 0}, {2, 2, 7, 7, 3, 2, 0}, {1, 2, 5, 6, 3, 1, 0},
    {2, 1, 4, 4, 2, 1, 0}, {2, 2, 7, 9, 3, 2, 1},  {1, 2, 8, 6, 3, 2, 1}, {1, 2, 5, 6, 2, 1, 1},
};

START_TEST(pool_gradients)
{
    const int *k = pool_cases_[_i];
    for (int max = k[6] > 0; max < 2; max++) { /* average pooling has no padding */
        test_seed(30 + (uint64_t)_i);
        pool_ctx_t c = {.d = pool_dims_pad_(k[0], k[1], k[2], k[3], k[4], k[5], k[6]), .max = max};
        size_t xn = (size_t)c.d.n * c.d.c * c.d.h * c.d.w;
        size_t yn = (size_t)c.d.n * c.d.c * c.d.oh * c.d.ow;
        c.x = distinct_(xn), c.y = fzero_(yn), c.wo = test_fvec(yn, 1);
        c.am = calloc(yn, sizeof *c.am);
        float *dx = fconst_(xn, NAN);
        pool_obj_(&c);
        if (max)
            B->maxpool_bwd(&c.d, c.wo, c.am, dx);
        else
            B->avgpool_bwd(&c.d, c.wo, dx);
        char what[64];
        snprintf(what, sizeof what, "%s case %d dx", max ? "maxpool" : "avgpool", _i);
        fd_check_(what, pool_obj_, &c, c.x, xn, dx, FD_TOL);
        free(c.x), free(c.y), free(c.wo), free(c.am), free(dx);
    }
}
END_TEST

/* The definition, as loops: the first maximum in row-major window order, a
 * NaN replacing whatever came before it (PyTorch CPU); padded cells are
 * -inf and never win, so a window of -infs has the first of its cells
 * inside the plane as argmax (PyTorch's MaxPool2d); backward sums dy onto
 * zero at the argmax. */
static void maxpool_naive_(const pool_dims_t *d, const float *x, const float *dy, float *y,
                           int32_t *am, float *dx)
{
    const size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    const size_t ohw = (size_t)d->oh * d->ow;
    for (size_t i = 0; i < planes * hw; i++) dx[i] = 0.0f;
    for (size_t pl = 0; pl < planes; pl++)
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                int best = -1;
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) {
                        int iy = oy * d->stride - d->pad + ky, ix = ox * d->stride - d->pad + kx;
                        if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue; /* padding */
                        int idx = iy * d->w + ix;
                        float v = x[pl * hw + idx];
                        if (best < 0 || v > x[pl * hw + best] || isnan(v)) best = idx;
                    }
                size_t o = pl * ohw + (size_t)oy * d->ow + ox;
                y[o] = x[pl * hw + best];
                am[o] = best;
                dx[pl * hw + best] += dy[o];
            }
}

/* Max pooling bit for bit against the definition, with ties, NaNs and -0
 * in the input and -0 in dy: the 2x2 stride-2 fast path on rows of 4 or
 * more windows (a multiple of 4 and not: the last block overlaps), rows of
 * fewer, odd sizes (floor mode leaves a row and a column out), and the
 * generic loop (3x3 stride 2, 2x2 stride 1); with padding (the ResNet stem's
 * 3x3 stride 2 pad 1 on odd and even sizes, 2x2 stride 1 pad 1, and 2x2
 * stride 2 pad 1, which must not take the fast path), each also on planes
 * of negative values and -infs, where a padded 0 would win. */
static const int maxpool_naive_cases_[][7] = {
    /* n, c, h, w, k, stride, pad */
    {2, 3, 9, 11, 2, 2, 0},  {1, 2, 8, 8, 2, 2, 0}, {2, 2, 28, 28, 2, 2, 0},
    {1, 3, 14, 15, 2, 2, 0}, {2, 2, 6, 7, 2, 2, 0}, {1, 2, 9, 10, 3, 2, 0},
    {1, 2, 7, 9, 2, 1, 0},   {2, 2, 9, 9, 3, 2, 1}, {1, 3, 8, 10, 3, 2, 1},
    {2, 2, 15, 16, 3, 2, 1}, {2, 2, 7, 8, 2, 1, 1}, {1, 2, 7, 9, 2, 2, 1},
    {1, 2, 6, 20, 2, 2, 1},
};

static void maxpool_naive_case_(const pool_dims_t *d, const float *x, const float *dy,
                                const char *what)
{
    size_t xn = (size_t)d->n * d->c * d->h * d->w, yn = (size_t)d->n * d->c * d->oh * d->ow;
    float *y = fconst_(yn, 7), *ry = fconst_(yn, 7), *dx = fconst_(xn, 7), *rdx = fconst_(xn, 7);
    int32_t *am = calloc(yn, sizeof *am), *ram = calloc(yn, sizeof *ram);
    maxpool_naive_(d, x, dy, ry, ram, rdx);
    B->maxpool_fwd(d, x, y, am);
    B->maxpool_bwd(d, dy, am, dx);
    for (size_t i = 0; i < yn; i++) {
        ck_assert_msg(am[i] == ram[i], "%s: argmax[%zu] %d, want %d", what, i, am[i], ram[i]);
        ck_assert_msg(memcmp(&y[i], &ry[i], sizeof *y) == 0, "%s: y[%zu] %g, want %g", what, i,
                      y[i], ry[i]);
    }
    for (size_t i = 0; i < xn; i++)
        ck_assert_msg(memcmp(&dx[i], &rdx[i], sizeof *dx) == 0, "%s: dx[%zu] %g, want %g", what, i,
                      dx[i], rdx[i]);
    free(y), free(ry), free(dx), free(rdx), free(am), free(ram);
}

START_TEST(maxpool_naive)
{
    const int *k = maxpool_naive_cases_[_i];
    test_seed(50 + (uint64_t)_i);
    pool_dims_t d = pool_dims_pad_(k[0], k[1], k[2], k[3], k[4], k[5], k[6]);
    size_t xn = (size_t)d.n * d.c * d.h * d.w, yn = (size_t)d.n * d.c * d.oh * d.ow;
    float *x = test_fvec(xn, 1), *dy = test_fvec(yn, 1), *neg = fzero_(xn);
    for (size_t i = 0; i < xn; i++) {
        /* every value below zero, ties and -infs among them */
        neg[i] = -0.5f - fabsf(roundf(x[i] * 2.0f) * 0.5f);
        if (i % 29 == 3) neg[i] = -INFINITY;
        x[i] = roundf(x[i] * 2.0f) * 0.5f; /* five values: many ties, +0 and -0 */
        if (i % 37 == 5) x[i] = NAN;
        if (i % 53 == 7) x[i] = -0.0f;
    }
    for (size_t i = 0; i < yn; i += 7) dy[i] = -0.0f;
    char what[64];
    snprintf(what, sizeof what, "maxpool case %d", _i);
    maxpool_naive_case_(&d, x, dy, what);
    snprintf(what, sizeof what, "maxpool case %d, negative plane", _i);
    maxpool_naive_case_(&d, neg, dy, what);
    free(x), free(dy), free(neg);
}
END_TEST

START_TEST(maxpool_ties_and_naive)
{
    /* ties pick the first maximum in row-major window order (PyTorch CPU) */
    pool_dims_t d = pool_dims_(1, 1, 4, 4, 2, 2);
    float x[16] = {1, 3, 0, 0, 3, 2, 0, 0, 5, 5, 2, 2, 5, 5, 2, 2}, y[4], dx[16],
          dy[4] = {1, 2, 3, 4};
    int32_t am[4];
    B->maxpool_fwd(&d, x, y, am);
    ck_assert_float_eq(y[0], 3);
    ck_assert_float_eq(y[1], 0);
    ck_assert_float_eq(y[2], 5);
    ck_assert_float_eq(y[3], 2);
    ck_assert_int_eq(am[0], 1);
    ck_assert_int_eq(am[1], 2);
    ck_assert_int_eq(am[2], 8);
    ck_assert_int_eq(am[3], 10);
    B->maxpool_bwd(&d, dy, am, dx);
    const float want[16] = {0, 1, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0};
    ck_assert_mem_eq(dx, want, sizeof want);
    /* 3x3 stride 2 pad 1 (ResNet's stem) on a plane of negative values: the
     * padding is -inf, never 0; argmax in the unpadded plane */
    pool_dims_t p = pool_dims_pad_(1, 1, 4, 4, 3, 2, 1);
    ck_assert_int_eq(p.oh, 2);
    ck_assert_int_eq(p.ow, 2);
    float neg[16];
    for (int i = 0; i < 16; i++) neg[i] = -(float)(i + 1);
    B->maxpool_fwd(&p, neg, y, am);
    const float want_y[4] = {-1, -2, -5, -6};
    const int32_t want_am[4] = {0, 1, 4, 5};
    ck_assert_mem_eq(y, want_y, sizeof want_y);
    ck_assert_mem_eq(am, want_am, sizeof want_am);
    B->maxpool_bwd(&p, dy, am, dx);
    const float want_dx[16] = {1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_mem_eq(dx, want_dx, sizeof want_dx);
    /* a plane of -infs: each window's first cell inside the plane */
    for (int i = 0; i < 16; i++) neg[i] = -INFINITY;
    B->maxpool_fwd(&p, neg, y, am);
    for (int i = 0; i < 4; i++) ck_assert(isinf(y[i]) && y[i] < 0);
    ck_assert_mem_eq(am, want_am, sizeof want_am);
    /* avg pool values against the definition */
    B->avgpool_fwd(&d, x, y);
    ck_assert_float_eq(y[0], 2.25f);
    ck_assert_float_eq(y[1], 0.0f);
    ck_assert_float_eq(y[2], 5.0f);
    ck_assert_float_eq(y[3], 2.0f);
    /* n == 0 */
    pool_dims_t z = pool_dims_(0, 3, 4, 4, 2, 2);
    y[0] = 9;
    B->maxpool_fwd(&z, x, y, am), B->avgpool_fwd(&z, x, y);
    B->maxpool_bwd(&z, dy, am, y), B->avgpool_bwd(&z, dy, y);
    B->gap_fwd(0, 3, 16, x, y), B->gap_bwd(0, 3, 16, dy, y);
    ck_assert_float_eq(y[0], 9);
}
END_TEST

typedef struct gap_ctx {
    int n, c, hw;
    float *x, *y, *wo;
} gap_ctx_t;

static double gap_obj_(void *p)
{
    gap_ctx_t *c = p;
    B->gap_fwd(c->n, c->c, c->hw, c->x, c->y);
    return dot_(c->y, c->wo, (size_t)c->n * c->c);
}

START_TEST(gap_gradients)
{
    test_seed(40);
    gap_ctx_t c = {.n = 3, .c = 4, .hw = 21};
    size_t xn = 3 * 4 * 21;
    c.x = test_fvec(xn, 1), c.y = fzero_(12), c.wo = test_fvec(12, 1);
    float *dx = fconst_(xn, NAN);
    gap_obj_(&c);
    for (int i = 0; i < 12; i++) {
        double s = 0;
        for (int k = 0; k < 21; k++) s += c.x[i * 21 + k];
        ck_assert_float_eq_tol(c.y[i], s / 21, 1e-6);
    }
    B->gap_bwd(c.n, c.c, c.hw, c.wo, dx);
    fd_check_("gap dx", gap_obj_, &c, c.x, xn, dx, FD_TOL);
    free(c.x), free(c.y), free(c.wo), free(dx);
}
END_TEST

/* ---- batch normalisation --------------------------------------------- */

typedef struct bn_ctx {
    int n, c, hw;
    float *x, *gamma, *beta, *y, *wo, *mean, *invstd, *rm, *rv;
    double *stats;
} bn_ctx_t;

static double bn_obj_(void *p)
{
    bn_ctx_t *c = p;
    B->bn_stats(c->n, c->c, c->hw, c->x, c->stats);
    B->bn_finalize(c->c, c->stats, (double)c->n * c->hw, 1e-5f, 0.1f, 0, c->mean, c->invstd, c->rm,
                   c->rv);
    B->bn_fwd(c->n, c->c, c->hw, c->x, c->mean, c->invstd, c->gamma, c->beta, c->y, 0, NULL);
    return dot_(c->y, c->wo, (size_t)c->n * c->c * c->hw);
}

/* BatchNorm1d (hw = 1, more channels than one coefficient block holds) and
 * BatchNorm2d (hw > 1, with and without a vector-length tail) */
static const int bn_cases_[][3] = {{6, 5, 1}, {5, 300, 1}, {3, 4, 6}, {2, 3, 37}};

START_TEST(bn_gradients)
{
    const int *k = bn_cases_[_i];
    test_seed(50 + (uint64_t)_i);
    bn_ctx_t c = {.n = k[0], .c = k[1], .hw = k[2]};
    size_t xn = (size_t)c.n * c.c * c.hw, cn = (size_t)c.c;
    c.x = test_fvec(xn, 2), c.gamma = test_fvec(cn, 1), c.beta = test_fvec(cn, 1), c.y = fzero_(xn);
    c.wo = test_fvec(xn, 1), c.mean = fzero_(cn), c.invstd = fzero_(cn), c.rm = fzero_(cn);
    c.rv = fconst_(cn, 1);
    for (size_t i = 0; i < xn; i++) { /* means off zero, for x and for dy */
        c.x[i] += 0.5f;
        c.wo[i] += 0.5f;
    }
    c.stats = calloc(2 * cn, sizeof *c.stats);
    double *gstats = calloc(2 * cn, sizeof *gstats);
    float *dx = fconst_(xn, NAN), *dg = fconst_(cn, NAN), *dbeta = fconst_(cn, NAN);
    bn_obj_(&c);
    double count = (double)c.n * c.hw;
    B->bn_bwd_stats(c.n, c.c, c.hw, c.x, c.wo, c.mean, c.invstd, gstats, dg, dbeta, 0.0f, NULL,
                    NULL);
    B->bn_bwd_data(c.n, c.c, c.hw, c.x, c.wo, c.mean, c.invstd, c.gamma, gstats, count, dx, NULL);
    /* the forward itself: per channel mean 0 and biased variance 1 before the affine */
    for (int ch = 0; ch < c.c; ch++) {
        double s = 0, s2 = 0;
        for (int i = 0; i < c.n; i++)
            for (int q = 0; q < c.hw; q++) {
                double v = c.x[((size_t)i * c.c + ch) * c.hw + q];
                s += v, s2 += v * v;
            }
        double m = s / count, var = s2 / count - m * m;
        ck_assert_double_eq_tol(c.stats[ch], s, 1e-9 * fmax(1, fabs(s)));
        ck_assert_double_eq_tol(c.stats[c.c + ch], s2, 1e-9 * s2);
        ck_assert_float_eq_tol(c.mean[ch], m, 1e-6);
        ck_assert_float_eq_tol(c.invstd[ch], 1 / sqrt(var + 1e-5), 1e-6 / sqrt(var + 1e-5));
        for (int i = 0; i < c.n; i++) {
            size_t off = ((size_t)i * c.c + ch) * c.hw;
            double want = (c.x[off] - m) / sqrt(var + 1e-5) * c.gamma[ch] + c.beta[ch];
            ck_assert_float_eq_tol(c.y[off], want, 1e-5 * fmax(1, fabs(want)));
        }
    }
    char what[64];
    snprintf(what, sizeof what, "bn case %d dx", _i);
    fd_check_(what, bn_obj_, &c, c.x, xn, dx, FD_TOL_BN);
    snprintf(what, sizeof what, "bn case %d dgamma", _i);
    fd_check_(what, bn_obj_, &c, c.gamma, cn, dg, FD_TOL_BN);
    snprintf(what, sizeof what, "bn case %d dbeta", _i);
    fd_check_(what, bn_obj_, &c, c.beta, cn, dbeta, FD_TOL_BN);
    /* beta = 1 accumulates into dgamma and dbeta; gstats are overwritten */
    float *dg2 = fzero_(cn), *db2 = fzero_(cn);
    B->bn_bwd_stats(c.n, c.c, c.hw, c.x, c.wo, c.mean, c.invstd, gstats, dg2, db2, 1.0f, NULL,
                    NULL);
    B->bn_bwd_stats(c.n, c.c, c.hw, c.x, c.wo, c.mean, c.invstd, gstats, dg2, db2, 1.0f, NULL,
                    NULL);
    for (size_t i = 0; i < cn; i++) {
        ck_assert_float_eq_tol(dg2[i], 2 * dg[i], 1e-6 * fmax(1, fabs(dg[i])));
        ck_assert_float_eq_tol(db2[i], 2 * dbeta[i], 1e-6 * fmax(1, fabs(dbeta[i])));
        ck_assert_float_eq_tol(gstats[i], dbeta[i], 1e-6 * fmax(1, fabs(dbeta[i])));
        ck_assert_float_eq_tol(gstats[cn + i], dg[i], 1e-6 * fmax(1, fabs(dg[i])));
    }
    free(c.x), free(c.gamma), free(c.beta), free(c.y), free(c.wo), free(c.mean), free(c.invstd);
    free(c.rm), free(c.rv), free(c.stats), free(gstats), free(dx), free(dg), free(dbeta);
    free(dg2), free(db2);
}
END_TEST

/* A ReLU fused into the BatchNorm (compute.h) gives the bits of the two
 * layers run alone: bn_fwd then relu_fwd; relu_bwd on the BatchNorm's output
 * then bn_bwd_stats and bn_bwd_data.  About half of the outputs are negative
 * (beta around 0), and the gradient of the ReLU's output is nonzero
 * everywhere, so a mask off anywhere changes the sums. */
START_TEST(bn_relu_fused)
{
    const int *k = bn_cases_[_i];
    const int n = k[0], c = k[1], hw = k[2];
    test_seed(70 + (uint64_t)_i);
    size_t xn = (size_t)n * c * hw, cn = (size_t)c;
    float *x = test_fvec(xn, 2), *gamma = test_fvec(cn, 1), *beta_ = test_fvec(cn, 1);
    float *dz = test_fvec(xn, 1), *mean = fzero_(cn), *invstd = fzero_(cn), *rm = fzero_(cn);
    float *rv = fconst_(cn, 1), *y = fzero_(xn), *z = fzero_(xn), *zf = fconst_(xn, NAN);
    float *dy = fzero_(xn), *dx = fconst_(xn, NAN), *dxf = fconst_(xn, NAN);
    float *dg = fzero_(cn), *db = fzero_(cn), *dgf = fzero_(cn), *dbf = fzero_(cn);
    double *stats = calloc(2 * cn, sizeof *stats), *gs = calloc(2 * cn, sizeof *gs);
    double *gsf = calloc(2 * cn, sizeof *gsf), count = (double)n * hw;
    for (size_t i = 0; i < xn; i++) dz[i] += dz[i] < 0 ? -0.25f : 0.25f; /* never 0 */
    for (size_t i = 0; i < cn; i++) beta_[i] *= 0.25f; /* y <= 0 about half the time */
    B->bn_stats(n, c, hw, x, stats);
    B->bn_finalize(c, stats, count, 1e-5f, 0.1f, 0, mean, invstd, rm, rv);
    /* alone */
    B->bn_fwd(n, c, hw, x, mean, invstd, gamma, beta_, y, 0, NULL);
    B->relu_fwd(xn, y, z);
    B->relu_bwd(xn, y, dz, dy, NULL);
    B->bn_bwd_stats(n, c, hw, x, dy, mean, invstd, gs, dg, db, 0.0f, NULL, NULL);
    B->bn_bwd_data(n, c, hw, x, dy, mean, invstd, gamma, gs, count, dx, NULL);
    /* fused */
    B->bn_fwd(n, c, hw, x, mean, invstd, gamma, beta_, zf, 1, NULL);
    B->bn_bwd_stats(n, c, hw, x, dz, mean, invstd, gsf, dgf, dbf, 0.0f, gamma, beta_);
    B->bn_bwd_data(n, c, hw, x, dz, mean, invstd, gamma, gsf, count, dxf, beta_);
    size_t neg = 0;
    for (size_t i = 0; i < xn; i++) neg += y[i] <= 0;
    ck_assert_msg(neg > xn / 8 && neg < xn - xn / 8, "bn+relu case %d: %zu of %zu outputs <= 0", _i,
                  neg, xn);
    ck_assert_mem_eq(zf, z, xn * sizeof *z);
    ck_assert_mem_eq(gsf, gs, 2 * cn * sizeof *gs);
    ck_assert_mem_eq(dgf, dg, cn * sizeof *dg);
    ck_assert_mem_eq(dbf, db, cn * sizeof *db);
    ck_assert_mem_eq(dxf, dx, xn * sizeof *dx);
    free(x), free(gamma), free(beta_), free(dz), free(mean), free(invstd), free(rm), free(rv);
    free(y), free(z), free(zf), free(dy), free(dx), free(dxf), free(dg), free(db), free(dgf);
    free(dbf), free(stats), free(gs), free(gsf);
}
END_TEST

/* A BatchNorm applied by the block's add reading it (bn_fwd's res) against
 * bn_fwd then add, with the BatchNorm's output either operand, with and
 * without the ReLU after the add: the same bits. */
START_TEST(bn_add_fused)
{
    const int *k = bn_cases_[_i];
    const int n = k[0], c = k[1], hw = k[2];
    test_seed(90 + (uint64_t)_i);
    size_t xn = (size_t)n * c * hw, cn = (size_t)c;
    float *x = test_fvec(xn, 2), *r = test_fvec(xn, 1), *gamma = test_fvec(cn, 1);
    float *beta_ = test_fvec(cn, 1), *mean = fzero_(cn), *invstd = fzero_(cn), *rm = fzero_(cn);
    float *rv = fconst_(cn, 1), *y = fzero_(xn), *z = fzero_(xn), *z2 = fzero_(xn);
    float *zf = fconst_(xn, NAN);
    double *stats = calloc(2 * cn, sizeof *stats);
    B->bn_stats(n, c, hw, x, stats);
    B->bn_finalize(c, stats, (double)n * hw, 1e-5f, 0.1f, 0, mean, invstd, rm, rv);
    B->bn_fwd(n, c, hw, x, mean, invstd, gamma, beta_, y, 0, NULL);
    for (int relu = 0; relu < 2; relu++) {
        B->add(xn, y, r, z, relu);
        B->add(xn, r, y, z2, relu);
        B->bn_fwd(n, c, hw, x, mean, invstd, gamma, beta_, zf, relu, r);
        size_t neg = 0;
        for (size_t i = 0; i < xn; i++) neg += z[i] <= 0;
        ck_assert_msg(neg > xn / 8 && neg < xn - xn / 8, "bn+add case %d: %zu of %zu sums <= 0",
                      _i, neg, xn);
        ck_assert_mem_eq(zf, z, xn * sizeof *z);
        ck_assert_mem_eq(zf, z2, xn * sizeof *z);
    }
    free(x), free(r), free(gamma), free(beta_), free(mean), free(invstd), free(rm), free(rv);
    free(y), free(z), free(z2), free(zf), free(stats);
}
END_TEST

START_TEST(bn_running_and_eval)
{
    test_seed(60);
    const int n = 7, c = 3, hw = 5;
    size_t xn = (size_t)n * c * hw;
    float *x = test_fvec(xn, 3), mean[3], invstd[3], rm[3] = {0.5f, -1, 2}, rv[3] = {1, 2, 0.5f};
    float rm0[3], rv0[3];
    memcpy(rm0, rm, sizeof rm), memcpy(rv0, rv, sizeof rv);
    double stats[6];
    B->bn_stats(n, c, hw, x, stats);
    B->bn_finalize(c, stats, n * hw, 1e-5f, 0.1f, 1, mean, invstd, rm, rv);
    for (int ch = 0; ch < c; ch++) {
        /* two-pass reference in double */
        double m = 0, ss = 0, cnt = n * hw;
        for (int i = 0; i < n; i++)
            for (int q = 0; q < hw; q++) m += x[((size_t)i * c + ch) * hw + q];
        m /= cnt;
        for (int i = 0; i < n; i++)
            for (int q = 0; q < hw; q++) {
                double dv = x[((size_t)i * c + ch) * hw + q] - m;
                ss += dv * dv;
            }
        double biased = ss / cnt, unbiased = ss / (cnt - 1);
        ck_assert_float_eq_tol(mean[ch], m, 1e-6);
        ck_assert_float_eq_tol(invstd[ch], 1 / sqrt(biased + 1e-5), 1e-6);
        ck_assert_float_eq_tol(rm[ch], 0.9 * rm0[ch] + 0.1 * m, 1e-6);
        ck_assert_float_eq_tol(rv[ch], 0.9 * rv0[ch] + 0.1 * unbiased, 1e-6);
    }
    /* update_running = 0 leaves them alone */
    float rm1[3], rv1[3];
    memcpy(rm1, rm, sizeof rm), memcpy(rv1, rv, sizeof rv);
    B->bn_finalize(c, stats, n * hw, 1e-5f, 0.1f, 0, mean, invstd, rm, rv);
    ck_assert_mem_eq(rm, rm1, sizeof rm);
    ck_assert_mem_eq(rv, rv1, sizeof rv);
    /* eval mode */
    B->bn_eval_params(c, rm, rv, 1e-5f, mean, invstd);
    for (int ch = 0; ch < c; ch++) {
        ck_assert_float_eq(mean[ch], rm[ch]);
        ck_assert_float_eq_tol(invstd[ch], 1 / sqrt(rv[ch] + 1e-5), 1e-6);
    }
    /* n == 0: statistics are zero, beta 0 zeroes the parameter gradients */
    double gs[6] = {1, 1, 1, 1, 1, 1};
    float dg[3] = {5, 5, 5}, db[3] = {5, 5, 5}, y[1] = {9};
    B->bn_stats(0, c, hw, x, stats);
    for (int i = 0; i < 6; i++) ck_assert_double_eq(stats[i], 0);
    B->bn_fwd(0, c, hw, x, mean, invstd, rm, rv, y, 0, NULL);
    B->bn_bwd_stats(0, c, hw, x, x, mean, invstd, gs, dg, db, 1.0f, NULL, NULL);
    for (int i = 0; i < 6; i++) ck_assert_double_eq(gs[i], 0);
    assert_all_eq_(dg, 5, 3, "dgamma n=0 beta=1");
    assert_all_eq_(db, 5, 3, "dbeta n=0 beta=1");
    B->bn_bwd_stats(0, c, hw, x, x, mean, invstd, gs, dg, db, 0.0f, rm, rv);
    assert_all_eq_(dg, 0, 3, "dgamma n=0 beta=0");
    assert_all_eq_(db, 0, 3, "dbeta n=0 beta=0");
    B->bn_bwd_data(0, c, hw, x, x, mean, invstd, rm, gs, 10, y, rv);
    ck_assert_float_eq(y[0], 9);
    free(x);
}
END_TEST

/* Data far from zero (mean 1000, std ~0.6): the double statistics keep the
 * variance (a float E[x^2] - mean^2 would lose it entirely) and dx, computed
 * from x - mean, keeps its accuracy.  Reference: two-pass double. */
START_TEST(bn_large_offset)
{
    const int n = 64, c = 5;
    for (int hw = 1; hw <= 3; hw += 2) {
        test_seed(65 + (uint64_t)hw);
        size_t xn = (size_t)n * c * hw;
        float *x = test_fvec(xn, 1), *dy = test_fvec(xn, 1), *dx = fzero_(xn),
              *gamma = test_fvec(c, 1);
        float mean[5], invstd[5], rm[5] = {0}, rv[5] = {0}, dg[5], db[5];
        double stats[10], gs[10], cnt = (double)n * hw;
        for (size_t i = 0; i < xn; i++) x[i] += 1000.0f;
        B->bn_stats(n, c, hw, x, stats);
        B->bn_finalize(c, stats, cnt, 1e-5f, 0.1f, 0, mean, invstd, rm, rv);
        B->bn_bwd_stats(n, c, hw, x, dy, mean, invstd, gs, dg, db, 0.0f, NULL, NULL);
        B->bn_bwd_data(n, c, hw, x, dy, mean, invstd, gamma, gs, cnt, dx, NULL);
        for (int ch = 0; ch < c; ch++) {
            double m = 0, v = 0, sdy = 0, sdyx = 0, dmax = 0;
#define X_(i, q)  ((double)x[((size_t)(i)*c + ch) * hw + (q)])
#define DY_(i, q) ((double)dy[((size_t)(i)*c + ch) * hw + (q)])
            for (int i = 0; i < n; i++)
                for (int q = 0; q < hw; q++) m += X_(i, q);
            m /= cnt;
            for (int i = 0; i < n; i++)
                for (int q = 0; q < hw; q++) v += (X_(i, q) - m) * (X_(i, q) - m);
            v /= cnt;
            double is = 1 / sqrt(v + 1e-5);
            ck_assert_double_le(fabs(mean[ch] - m), 1e-4); /* float rounding of 1000 */
            ck_assert_double_le(fabs(invstd[ch] - is), 1e-5 * is);
            for (int i = 0; i < n; i++)
                for (int q = 0; q < hw; q++) {
                    sdy += DY_(i, q);
                    sdyx += DY_(i, q) * (X_(i, q) - m) * is;
                }
#define WANT_(i, q) (gamma[ch] * is * (DY_(i, q) - sdy / cnt - (X_(i, q) - m) * is * sdyx / cnt))
            for (int i = 0; i < n; i++)
                for (int q = 0; q < hw; q++) dmax = fmax(dmax, fabs(WANT_(i, q)));
            /* 1e-5 of the channel's largest |dx| (observed ~1e-6: mean is a float) */
            for (int i = 0; i < n; i++)
                for (int q = 0; q < hw; q++) {
                    double got = dx[((size_t)i * c + ch) * hw + q], want = WANT_(i, q);
                    ck_assert_msg(fabs(got - want) <= 1e-5 * dmax,
                                  "dx[%d,%d,%d] = %.7g, expected %.7g", i, ch, q, got, want);
                }
#undef WANT_
#undef X_
#undef DY_
        }
        free(x), free(dy), free(dx), free(gamma);
    }
}
END_TEST

void kernels_layer_tests(TCase *t, const compute_ops_t *backend)
{
    B = backend;
    tcase_add_test(t, linear_gradients);
    tcase_add_test(t, linear_forward_naive);
    tcase_add_test(t, linear_beta_and_empty);
    tcase_add_loop_test(t, linear_relu_fused, 0, sizeof lin_relu_cases_ / sizeof lin_relu_cases_[0]);
    tcase_add_loop_test(t, conv_gradients, 0, sizeof conv_cases_ / sizeof conv_cases_[0]);
    tcase_add_loop_test(t, conv_naive, 0, sizeof conv_naive_cases_ / sizeof conv_naive_cases_[0]);
    tcase_add_test(t, conv_empty_batch);
    tcase_add_loop_test(t, pool_gradients, 0, sizeof pool_cases_ / sizeof pool_cases_[0]);
    tcase_add_test(t, maxpool_ties_and_naive);
    tcase_add_loop_test(t, maxpool_naive, 0,
                        sizeof maxpool_naive_cases_ / sizeof maxpool_naive_cases_[0]);
    tcase_add_test(t, gap_gradients);
    tcase_add_loop_test(t, bn_gradients, 0, sizeof bn_cases_ / sizeof bn_cases_[0]);
    tcase_add_loop_test(t, bn_relu_fused, 0, sizeof bn_cases_ / sizeof bn_cases_[0]);
    tcase_add_loop_test(t, bn_add_fused, 0, sizeof bn_cases_ / sizeof bn_cases_[0]);
    tcase_add_test(t, bn_running_and_eval);
    tcase_add_test(t, bn_large_offset);
}
