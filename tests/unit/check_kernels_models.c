/* check_kernels_models.c -- the fixture models of tests/fixtures (an MLP
 * and a CNN), composed from the compute backend's ops, against PyTorch:
 * one train-mode step's loss, gradients and optimizer updates (see
 * check_kernels.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "h5util.h"
#include "tests.h"
#include "kernel_tests.h"

/* the backend under test (set by kernels_model_tests) */
static const compute_ops_t *B;

/* ---- the fixture models, composed from the ops, against PyTorch -------- */

enum { K_LIN, K_CONV, K_BN, K_RELU, K_MAXPOOL, K_GAP };

typedef struct fl {
    int kind, arg;            /* features / channels, or pool window */
    int c, h, w, oc, oh, ow;  /* input [c, h, w], output [oc, oh, ow] */
    float *W, *b, *dW, *db;   /* weight/gamma, bias/beta and their gradients */
    float *mW, *mb, *vW, *vb; /* optimizer state */
    float *rm, *rv, *mean, *invstd;
    double *stats;
    float *y, *dx;
    int32_t *am;
    size_t wn, bn;
} fl_t;

typedef struct fmodel {
    int nl, n;
    fl_t l[10];
    void *ws;
    hid_t f;
} fmodel_t;

static void h5read_(hid_t f, const char *name, hid_t type, void *buf, size_t want)
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "fixture dataset %s missing", name);
    hid_t sp = H5Dget_space(d);
    ck_assert_int_eq((size_t)H5Sget_simple_extent_npoints(sp), want);
    ck_assert_int_ge(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    H5Sclose(sp), H5Dclose(d);
}

static float *h5floats_(hid_t f, const char *name, size_t want)
{
    float *a = fzero_(want);
    h5read_(f, name, H5T_NATIVE_FLOAT, a, want);
    return a;
}

static void fm_load_(fmodel_t *m, const char *group)
{
    char name[128];
    for (int i = 0; i < m->nl; i++) {
        fl_t *l = &m->l[i];
        if (!l->wn) continue;
        snprintf(name, sizeof name, "/%s/layers.%d.weight", group, i);
        h5read_(m->f, name, H5T_NATIVE_FLOAT, l->W, l->wn);
        snprintf(name, sizeof name, "/%s/layers.%d.bias", group, i);
        h5read_(m->f, name, H5T_NATIVE_FLOAT, l->b, l->bn);
        if (l->kind == K_BN) {
            snprintf(name, sizeof name, "/%s/layers.%d.running_mean", group, i);
            h5read_(m->f, name, H5T_NATIVE_FLOAT, l->rm, l->bn);
            snprintf(name, sizeof name, "/%s/layers.%d.running_var", group, i);
            h5read_(m->f, name, H5T_NATIVE_FLOAT, l->rv, l->bn);
        }
    }
}

/* shapes and buffers; input [c, h, w] */
static void fm_build_(fmodel_t *m, const int (*spec)[2], int nl, int n, int c, int h, int w)
{
    m->nl = nl, m->n = n;
    size_t ws = 0;
    for (int i = 0; i < nl; i++) {
        fl_t *l = &m->l[i];
        memset(l, 0, sizeof *l);
        l->kind = spec[i][0], l->arg = spec[i][1];
        l->c = c, l->h = h, l->w = w;
        l->oc = c, l->oh = h, l->ow = w;
        switch (l->kind) {
        case K_LIN:
            l->oc = l->arg, l->oh = l->ow = 1;
            l->wn = (size_t)l->arg * c * h * w, l->bn = (size_t)l->arg;
            break;
        case K_CONV: { /* 3x3, stride 1, pad 1 */
            l->oc = l->arg;
            l->wn = (size_t)l->arg * c * 9, l->bn = (size_t)l->arg;
            conv_dims_t d = conv_dims_(n, c, h, w, l->arg, 3, 1, 1);
            ws = ws > B->conv_ws_bytes(&d) ? ws : B->conv_ws_bytes(&d);
            break;
        }
        case K_BN: l->wn = l->bn = (size_t)c; break;
        case K_MAXPOOL: l->oh = h / l->arg, l->ow = w / l->arg; break;
        case K_GAP: l->oh = l->ow = 1; break;
        }
        size_t in = (size_t)n * c * h * w, out = (size_t)n * l->oc * l->oh * l->ow;
        l->y = fzero_(out), l->dx = fzero_(in);
        if (l->wn) {
            l->W = fzero_(l->wn), l->dW = fzero_(l->wn), l->mW = fzero_(l->wn);
            l->vW = fzero_(l->wn), l->b = fzero_(l->bn), l->db = fzero_(l->bn);
            l->mb = fzero_(l->bn), l->vb = fzero_(l->bn);
        }
        if (l->kind == K_BN) {
            l->rm = fzero_((size_t)c), l->rv = fzero_((size_t)c), l->mean = fzero_((size_t)c);
            l->invstd = fzero_((size_t)c), l->stats = calloc(2 * (size_t)c, sizeof(double));
        }
        if (l->kind == K_MAXPOOL) l->am = calloc(out, sizeof *l->am);
        c = l->oc, h = l->oh, w = l->ow;
    }
    m->ws = B->alloc(ws);
}

static void fm_free_(fmodel_t *m)
{
    for (int i = 0; i < m->nl; i++) {
        fl_t *l = &m->l[i];
        free(l->W), free(l->b), free(l->dW), free(l->db), free(l->mW), free(l->mb);
        free(l->vW), free(l->vb), free(l->rm), free(l->rv), free(l->mean), free(l->invstd);
        free(l->stats), free(l->y), free(l->dx), free(l->am);
    }
    B->free(m->ws);
}

/* train-mode forward, mean cross-entropy, backward; returns the loss */
static double fm_step_(fmodel_t *m, const float *x, const int32_t *labels, float *dlogits)
{
    const int n = m->n;
    const float *in = x;
    for (int i = 0; i < m->nl; i++) {
        fl_t *l = &m->l[i];
        int hw = l->h * l->w;
        switch (l->kind) {
        case K_LIN: B->linear_fwd(n, l->c * hw, l->oc, in, l->W, l->b, l->y, 0); break;
        case K_CONV: {
            conv_dims_t d = conv_dims_(n, l->c, l->h, l->w, l->oc, 3, 1, 1);
            B->conv_fwd(&d, in, l->W, l->b, l->y, m->ws);
            break;
        }
        case K_BN:
            B->bn_stats(n, l->c, hw, in, l->stats);
            B->bn_finalize(l->c, l->stats, (double)n * hw, 1e-5f, 0.1f, 1, l->mean, l->invstd,
                           l->rm, l->rv);
            B->bn_fwd(n, l->c, hw, in, l->mean, l->invstd, l->W, l->b, l->y, 0, NULL);
            break;
        case K_RELU: B->relu_fwd((size_t)n * l->c * hw, in, l->y); break;
        case K_MAXPOOL: {
            pool_dims_t d = pool_dims_(n, l->c, l->h, l->w, l->arg, l->arg);
            B->maxpool_fwd(&d, in, l->y, l->am);
            break;
        }
        case K_GAP: B->gap_fwd(n, l->c, hw, in, l->y); break;
        }
        in = l->y;
    }
    const fl_t *last = &m->l[m->nl - 1];
    double acc[2] = {0, 0};
    B->xent(n, last->oc, in, labels, 0.0f, 1.0f / n, dlogits, acc);
    const float *dy = dlogits;
    for (int i = m->nl - 1; i >= 0; i--) {
        fl_t *l = &m->l[i];
        const float *xin = i ? m->l[i - 1].y : x;
        float *dx = i ? l->dx : NULL;
        int hw = l->h * l->w;
        switch (l->kind) {
        case K_LIN:
            B->linear_bwd(n, l->c * hw, l->oc, xin, l->W, dy, dx, l->dW, l->db, 0.0f, NULL, NULL);
            break;
        case K_CONV: {
            conv_dims_t d = conv_dims_(n, l->c, l->h, l->w, l->oc, 3, 1, 1);
            B->conv_bwd(&d, xin, l->W, dy, dx, l->dW, l->db, 0.0f, m->ws);
            break;
        }
        case K_BN: {
            double gs[64];
            B->bn_bwd_stats(n, l->c, hw, xin, dy, l->mean, l->invstd, gs, l->dW, l->db, 0.0f, NULL,
                            NULL);
            B->bn_bwd_data(n, l->c, hw, xin, dy, l->mean, l->invstd, l->W, gs, (double)n * hw, dx,
                           NULL);
            break;
        }
        case K_RELU: B->relu_bwd((size_t)n * l->c * hw, xin, dy, dx, NULL); break;
        case K_MAXPOOL: {
            pool_dims_t d = pool_dims_(n, l->c, l->h, l->w, l->arg, l->arg);
            B->maxpool_bwd(&d, dy, l->am, dx);
            break;
        }
        case K_GAP: B->gap_bwd(n, l->c, hw, dy, dx); break;
        }
        dy = dx;
    }
    return acc[0] / n;
}

/* max |a - ref| / max|ref|: errors relative to the tensor's scale */
static double scaled_diff_(const float *a, const float *ref, size_t n)
{
    double mx = 0, d = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)ref[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]);
        if (!(e <= d)) d = e;
    }
    return d / fmax(mx, 1e-30);
}

/* a bias right before BN: zero true gradient, rounding noise (make_fixtures.py) */
static int pre_bn_(const fmodel_t *m, int i)
{
    return i + 1 < m->nl && m->l[i + 1].kind == K_BN;
}

static void check_fixture_(const char *file, const int (*spec)[2], int nl, int c, int h, int w)
{
    char path[1024], name[128];
    snprintf(path, sizeof path, "%s/fixtures/%s", test_srcdir(), file);
    fmodel_t m;
    ck_assert_int_eq(h5_open_read(path, &m.f), DDP_OK);
    const int n = 16, classes = 5;
    fm_build_(&m, spec, nl, n, c, h, w);
    size_t xn = (size_t)n * c * h * w;
    float *x = h5floats_(m.f, "/x", xn);
    int64_t y64[16];
    int32_t y[16];
    h5read_(m.f, "/y", H5T_NATIVE_INT64, y64, 16);
    for (int i = 0; i < n; i++) y[i] = (int32_t)y64[i];
    float *dl = fzero_((size_t)n * classes);

    /* forward, loss and gradients at init.  PyTorch and we differ by float
     * rounding (different summation orders), amplified a little by BN over
     * 16 samples: observed <= 1.5e-6 of each tensor's scale; allowed 2e-5 of it,
     * 1e-5 relative on the loss. */
    fm_load_(&m, "init");
    double loss = fm_step_(&m, x, y, dl);
    float ref_loss;
    h5read_(m.f, "/forward/loss", H5T_NATIVE_FLOAT, &ref_loss, 1);
    ck_assert_double_eq_tol(loss, ref_loss, 1e-5 * ref_loss);
    float *out = h5floats_(m.f, "/forward/out", (size_t)n * classes);
    ck_assert_double_le(scaled_diff_(m.l[nl - 1].y, out, (size_t)n * classes), 1e-5);
    free(out);
    for (int i = 0; i < nl; i++) {
        fl_t *l = &m.l[i];
        if (!l->wn) continue;
        snprintf(name, sizeof name, "/grad/layers.%d.weight", i);
        float *g = h5floats_(m.f, name, l->wn);
        ck_assert_msg(scaled_diff_(l->dW, g, l->wn) <= 2e-5, "%s: %s off by %g", file, name,
                      scaled_diff_(l->dW, g, l->wn));
        free(g);
        snprintf(name, sizeof name, "/grad/layers.%d.bias", i);
        g = h5floats_(m.f, name, l->bn);
        if (pre_bn_(&m, i)) {
            for (size_t k = 0; k < l->bn; k++) ck_assert_float_le(fabsf(l->db[k] - g[k]), 1e-6f);
        } else {
            ck_assert_msg(scaled_diff_(l->db, g, l->bn) <= 2e-5, "%s: %s off by %g", file, name,
                          scaled_diff_(l->db, g, l->bn));
        }
        free(g);
    }

    /* 5 steps of SGD (momentum 0.9, decay 1e-4) and of AdamW on the same
     * batch, weights and BN running statistics after them: 2e-5 of scale.
     * AdamW skips the pre-BN biases and the running means they feed. */
    for (int opt = 0; opt < 2; opt++) {
        fm_load_(&m, "init");
        for (int i = 0; i < nl; i++) {
            fl_t *l = &m.l[i];
            if (!l->wn) continue;
            memset(l->mW, 0, l->wn * sizeof(float)), memset(l->vW, 0, l->wn * sizeof(float));
            memset(l->mb, 0, l->bn * sizeof(float)), memset(l->vb, 0, l->bn * sizeof(float));
        }
        for (int t = 1; t <= 5; t++) {
            fm_step_(&m, x, y, dl);
            for (int i = 0; i < nl; i++) {
                fl_t *l = &m.l[i];
                if (!l->wn) continue;
                if (opt == 0) {
                    B->sgd_step(l->wn, l->W, l->dW, l->mW, 0.1f, 0.9f, 0, 1e-4f, t == 1);
                    B->sgd_step(l->bn, l->b, l->db, l->mb, 0.1f, 0.9f, 0, 1e-4f, t == 1);
                } else {
                    B->adamw_step(l->wn, l->W, l->dW, l->mW, l->vW, 1e-2f, 0.9f, 0.999f, 1e-8f,
                                  1e-2f, t);
                    B->adamw_step(l->bn, l->b, l->db, l->mb, l->vb, 1e-2f, 0.9f, 0.999f, 1e-8f,
                                  1e-2f, t);
                }
            }
        }
        const char *grp = opt ? "adamw/step5" : "sgd/step5";
        for (int i = 0; i < nl; i++) {
            fl_t *l = &m.l[i];
            if (!l->wn) continue;
            const char *what[4] = {"weight", "bias", "running_mean", "running_var"};
            float *mine[4] = {l->W, l->b, l->rm, l->rv};
            size_t cnt[4] = {l->wn, l->bn, l->bn, l->bn};
            for (int k = 0; k < (l->kind == K_BN ? 4 : 2); k++) {
                if (opt == 1 && k == 1 && pre_bn_(&m, i)) continue;
                if (opt == 1 && k == 2) continue;
                snprintf(name, sizeof name, "/%s/layers.%d.%s", grp, i, what[k]);
                float *ref = h5floats_(m.f, name, cnt[k]);
                double e = scaled_diff_(mine[k], ref, cnt[k]);
                ck_assert_msg(e <= 2e-5, "%s: %s off by %g of its scale", file, name, e);
                free(ref);
            }
        }
    }
    free(x), free(dl);
    fm_free_(&m);
    H5Fclose(m.f);
}

START_TEST(fixture_mlp)
{
    static const int spec[][2] = {{K_LIN, 32}, {K_BN, 0},   {K_RELU, 0}, {K_LIN, 16},
                                  {K_BN, 0},   {K_RELU, 0}, {K_LIN, 5}};
    check_fixture_("mlp.h5", spec, 7, 20, 1, 1);
}
END_TEST

START_TEST(fixture_cnn)
{
    static const int spec[][2] = {{K_CONV, 8},    {K_BN, 0},    {K_RELU, 0},
                                  {K_MAXPOOL, 2}, {K_CONV, 16}, {K_BN, 0},
                                  {K_RELU, 0},    {K_GAP, 0},   {K_LIN, 5}};
    check_fixture_("cnn.h5", spec, 9, 3, 8, 8);
}
END_TEST

void kernels_model_tests(TCase *t, const compute_ops_t *backend)
{
    B = backend;
    tcase_add_test(t, fixture_mlp);
    tcase_add_test(t, fixture_cnn);
}
