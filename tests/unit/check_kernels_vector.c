/* check_kernels_vector.c -- the compute backend's ops over flat vectors
 * against outside references (see check_kernels.c): add (the float sum),
 * relu and gelu (finite differences; relu's backward summing two gradients
 * against add then relu_bwd), dropout's mask, cross-entropy and MSE (finite differences,
 * values, accuracy ties), the SGD and AdamW steps against their recurrences
 * in double, sum of squares, scale and the finite check, half and bfloat16
 * conversions, the memory ops, and the count == 0 contract. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "half.h"
#include "rng.h"
#include "test_rand.h"
#include "tests.h"
#include "kernel_tests.h"

/* the backend under test (set by kernels_vector_tests) */
static const compute_ops_t *B;

/* ---- elementwise ------------------------------------------------------ */

typedef struct ew_ctx {
    size_t count;
    int gelu;
    float *x, *y, *wo;
} ew_ctx_t;

static double ew_obj_(void *p)
{
    ew_ctx_t *c = p;
    if (c->gelu)
        B->gelu_fwd(c->count, c->x, c->y);
    else
        B->relu_fwd(c->count, c->x, c->y);
    return dot_(c->y, c->wo, c->count);
}

START_TEST(relu_gelu_gradients)
{
    for (int gelu = 0; gelu < 2; gelu++) {
        test_seed(70 + (uint64_t)gelu);
        ew_ctx_t c = {.count = 77, .gelu = gelu};
        c.x = test_fvec(c.count, 3), c.y = fzero_(c.count), c.wo = test_fvec(c.count, 1);
        if (!gelu) /* away from the kink */
            for (size_t i = 0; i < c.count; i++) c.x[i] += c.x[i] < 0 ? -0.05f : 0.05f;
        float *dx = fconst_(c.count, NAN);
        ew_obj_(&c);
        for (size_t i = 0; i < c.count; i++) {
            double v = c.x[i];
            double want = gelu ? 0.5 * v * (1 + erf(v / sqrt(2.0))) : (v > 0 ? v : 0);
            ck_assert_float_eq_tol(c.y[i], want, 1e-6);
        }
        if (gelu)
            B->gelu_bwd(c.count, c.x, c.wo, dx);
        else
            B->relu_bwd(c.count, c.x, c.wo, dx, NULL);
        fd_check_(gelu ? "gelu dx" : "relu dx", ew_obj_, &c, c.x, c.count, dx, FD_TOL);
        ew_obj_(&c); /* y at the unperturbed x again */
        /* in place gives the same */
        float *t = fzero_(c.count);
        memcpy(t, c.wo, c.count * sizeof *t);
        if (gelu)
            B->gelu_bwd(c.count, c.x, t, t);
        else
            B->relu_bwd(c.count, c.x, t, t, NULL);
        ck_assert_mem_eq(t, dx, c.count * sizeof *t);
        memcpy(t, c.x, c.count * sizeof *t);
        if (gelu)
            B->gelu_fwd(c.count, t, t);
        else
            B->relu_fwd(c.count, t, t);
        ck_assert_mem_eq(t, c.y, c.count * sizeof *t);
        free(c.x), free(c.y), free(c.wo), free(dx), free(t);
    }
}
END_TEST

/* y = a + b, the float sum element by element: lengths that fill no
 * vector block, several and a tail, and in place (y == a, y == b); with a
 * fused ReLU, relu_fwd of that sum bit for bit (NaN and -0 included) */
START_TEST(add_sums)
{
    const size_t counts[] = {1, 15, 16, 77};
    for (size_t s = 0; s < sizeof counts / sizeof *counts; s++) {
        const size_t n = counts[s];
        test_seed(75 + s);
        float *a = test_fvec(n, 3), *b = test_fvec(n, 3), *y = fconst_(n, NAN);
        float *want = fzero_(n), *t = fzero_(n);
        for (size_t i = 0; i < n; i++) want[i] = a[i] + b[i];
        B->add(n, a, b, y, 0);
        ck_assert_mem_eq(y, want, n * sizeof *y);
        memcpy(t, a, n * sizeof *t);
        B->add(n, t, b, t, 0);
        ck_assert_mem_eq(t, want, n * sizeof *t);
        memcpy(t, b, n * sizeof *t);
        B->add(n, a, t, t, 0);
        ck_assert_mem_eq(t, want, n * sizeof *t);
        if (n > 2) a[0] = NAN, b[0] = 1, a[1] = -0.0f, b[1] = -0.0f;
        for (size_t i = 0; i < n; i++) want[i] = a[i] + b[i];
        B->relu_fwd(n, want, want);
        B->add(n, a, b, y, 1);
        ck_assert_mem_eq(y, want, n * sizeof *y);
        memcpy(t, b, n * sizeof *t);
        B->add(n, a, t, t, 1);
        ck_assert_mem_eq(t, want, n * sizeof *t);
        free(a), free(b), free(y), free(want), free(t);
    }
}
END_TEST

/* relu_bwd with a second gradient (dy2): the bits of add(dy2, dy) then
 * relu_bwd, written elsewhere or over dy2; -0 and NaN in the sums, the mask
 * from an x that is about half <= 0. */
START_TEST(relu_bwd_sums)
{
    const size_t counts[] = {1, 15, 16, 77};
    for (size_t s = 0; s < sizeof counts / sizeof *counts; s++) {
        const size_t n = counts[s];
        test_seed(78 + s);
        float *x = test_fvec(n, 1), *dy = test_fvec(n, 3), *dy2 = test_fvec(n, 3);
        float *sum = fzero_(n), *want = fzero_(n), *got = fconst_(n, NAN), *t = fzero_(n);
        if (n > 2) dy[0] = -0.0f, dy2[0] = -0.0f, x[0] = 1, dy[1] = NAN, x[1] = 2;
        B->add(n, dy2, dy, sum, 0);
        B->relu_bwd(n, x, sum, want, NULL);
        B->relu_bwd(n, x, dy, got, dy2);
        ck_assert_mem_eq(got, want, n * sizeof *got);
        memcpy(t, dy2, n * sizeof *t);
        B->relu_bwd(n, x, dy, t, t);
        ck_assert_mem_eq(t, want, n * sizeof *t);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) kept += !(x[i] <= 0.0f);
        ck_assert_msg(n < 15 || (kept > n / 4 && kept < n - n / 4), "%zu of %zu kept", kept, n);
        free(x), free(dy), free(dy2), free(sum), free(want), free(got), free(t);
    }
}
END_TEST

START_TEST(dropout_mask)
{
    test_seed(80);
    const int n = 64;
    const size_t f = 1001; /* not a multiple of 4: the last Philox word is partial */
    const float p = 0.3f, scale = 1.0f / (1.0f - p);
    int64_t idx[64];
    for (int i = 0; i < n; i++) idx[i] = 1000 + 7 * i;
    size_t total = (size_t)n * f;
    float *x = test_fvec(total, 1), *y = fzero_(total), *y2 = fzero_(total),
          *dy = test_fvec(total, 1);
    float *dx = fzero_(total);
    B->dropout_fwd(n, f, x, y, p, 42, 9, 3, idx);
    size_t kept = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < f; j++) {
            size_t e = (size_t)i * f + j;
            int keep = ddp_dropout_keep(42, 9, 3, idx[i], j, p);
            kept += keep;
            ck_assert_float_eq(y[e], keep ? x[e] * scale : 0.0f);
        }
    /* keep fraction ~ 1 - p within 5 sigma */
    double frac = (double)kept / total;
    ck_assert_double_le(fabs(frac - (1 - p)), 5 * sqrt(p * (1 - p) / total));
    /* identical keys, identical mask; another step or layer, another mask */
    B->dropout_fwd(n, f, x, y2, p, 42, 9, 3, idx);
    ck_assert_mem_eq(y, y2, total * sizeof *y);
    B->dropout_fwd(n, f, x, y2, p, 42, 10, 3, idx);
    ck_assert(memcmp(y, y2, total * sizeof *y) != 0);
    B->dropout_fwd(n, f, x, y2, p, 42, 9, 4, idx);
    ck_assert(memcmp(y, y2, total * sizeof *y) != 0);
    /* backward: dx = mask dy / (1 - p) -- the exact gradient of this linear map */
    B->dropout_bwd(n, f, dy, dx, p, 42, 9, 3, idx);
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < f; j++) {
            size_t e = (size_t)i * f + j;
            int keep = ddp_dropout_keep(42, 9, 3, idx[i], j, p);
            ck_assert_float_eq(dx[e], keep ? dy[e] * scale : 0.0f);
        }
    /* a sample's mask depends on its global index only (not its row) */
    B->dropout_fwd(1, f, x + 5 * f, y2, p, 42, 9, 3, idx + 5);
    ck_assert_mem_eq(y2, y + 5 * f, f * sizeof *y);
    /* p = 0 is the identity; n = 0 does nothing */
    B->dropout_fwd(n, f, x, y2, 0.0f, 42, 9, 3, idx);
    ck_assert_mem_eq(y2, x, total * sizeof *y);
    y2[0] = 5;
    B->dropout_fwd(0, f, x, y2, p, 42, 9, 3, idx);
    B->dropout_bwd(0, f, x, y2, p, 42, 9, 3, idx);
    ck_assert_float_eq(y2[0], 5);
    free(x), free(y), free(y2), free(dy), free(dx);
}
END_TEST

/* ---- losses ----------------------------------------------------------- */

typedef struct xent_ctx {
    int n, classes;
    float *logits, smoothing;
    int32_t *labels;
} xent_ctx_t;

static double xent_obj_(void *p)
{
    xent_ctx_t *c = p;
    double acc[2] = {0, 0};
    B->xent(c->n, c->classes, c->logits, c->labels, c->smoothing, 1.0f, NULL, acc);
    return acc[0];
}

START_TEST(xent_gradients_and_values)
{
    const float smooth[] = {0.0f, 0.1f};
    for (int s = 0; s < 2; s++) {
        test_seed(90 + (uint64_t)s);
        xent_ctx_t c = {.n = 5, .classes = 7, .smoothing = smooth[s]};
        size_t ln = (size_t)c.n * c.classes;
        c.logits = test_fvec(ln, 3);
        int32_t labels[5] = {0, 6, 3, 3, 1};
        c.labels = labels;
        /* PyTorch CrossEntropyLoss(label_smoothing) in double, per sample */
        double want = 0;
        for (int i = 0; i < c.n; i++) {
            const float *z = c.logits + (size_t)i * c.classes;
            double m = z[0], se = 0, sum_nlp = 0;
            for (int j = 1; j < c.classes; j++) m = fmax(m, z[j]);
            for (int j = 0; j < c.classes; j++) se += exp(z[j] - m);
            double lse = m + log(se);
            for (int j = 0; j < c.classes; j++) sum_nlp += lse - z[j];
            want += (1 - c.smoothing) * (lse - z[labels[i]]) + c.smoothing * sum_nlp / c.classes;
        }
        /* log-sum-exp in double over float logits: 1e-6 relative */
        ck_assert_double_eq_tol(xent_obj_(&c), want, 1e-6 * fabs(want));
        float *dl = fconst_(ln, NAN), *dl2 = fconst_(ln, NAN);
        double acc[2] = {1, 2};
        B->xent(c.n, c.classes, c.logits, c.labels, c.smoothing, 1.0f, dl, acc);
        ck_assert_double_eq_tol(acc[0], 1 + want, 1e-6 * fabs(want));
        fd_check_(s ? "xent (smoothing 0.1) dlogits" : "xent dlogits", xent_obj_, &c, c.logits, ln,
                  dl, FD_TOL);
        /* grad_scale scales; the gradient of each row sums to zero */
        B->xent(c.n, c.classes, c.logits, c.labels, c.smoothing, 0.25f, dl2, acc);
        for (size_t i = 0; i < ln; i++) ck_assert_float_eq_tol(dl2[i], 0.25f * dl[i], 1e-7);
        for (int i = 0; i < c.n; i++) {
            double rs = 0;
            for (int j = 0; j < c.classes; j++) rs += dl[i * c.classes + j];
            ck_assert_double_le(fabs(rs), 1e-6);
        }
        /* in place: dlogits == logits */
        B->xent(c.n, c.classes, c.logits, c.labels, c.smoothing, 0.25f, c.logits, acc);
        ck_assert_mem_eq(c.logits, dl2, ln * sizeof *dl2);
        free(c.logits), free(dl), free(dl2);
    }
}
END_TEST

START_TEST(xent_accuracy_ties)
{
    /* argmax is the first maximum: row 0 ties classes 1 and 2 */
    const float z[] = {0, 2, 2, 1, 5, 5, 5, 0, 1, 1, 1, 3};
    const int32_t y1[] = {1, 0, 3}, y2[] = {2, 1, 2};
    double acc[2] = {0, 0};
    B->xent(3, 4, z, y1, 0.0f, 1.0f, NULL, acc);
    ck_assert_double_eq(acc[1], 3);
    B->xent(3, 4, z, y2, 0.0f, 1.0f, NULL, acc);
    ck_assert_double_eq(acc[1], 3);
    /* n == 0 adds nothing */
    float d[12];
    d[0] = 8;
    B->xent(0, 4, z, y1, 0.0f, 1.0f, d, acc);
    ck_assert_double_eq(acc[1], 3);
    ck_assert_float_eq(d[0], 8);
}
END_TEST

typedef struct mse_ctx {
    int n, k;
    float *p, *t;
} mse_ctx_t;

static double mse_obj_(void *v)
{
    mse_ctx_t *c = v;
    double acc[1] = {0};
    B->mse(c->n, c->k, c->p, c->t, 1.0f, NULL, acc);
    return acc[0];
}

START_TEST(mse_gradients)
{
    test_seed(95);
    mse_ctx_t c = {.n = 5, .k = 7};
    size_t cnt = 35;
    c.p = test_fvec(cnt, 2), c.t = test_fvec(cnt, 2);
    double want = 0;
    for (size_t i = 0; i < cnt; i++) want += ((double)c.p[i] - c.t[i]) * (c.p[i] - c.t[i]);
    ck_assert_double_eq_tol(mse_obj_(&c), want, 1e-6 * want);
    float *d = fconst_(cnt, NAN);
    double acc[1] = {0};
    B->mse(c.n, c.k, c.p, c.t, 1.0f, d, acc);
    fd_check_("mse dpred", mse_obj_, &c, c.p, cnt, d, FD_TOL);
    B->mse(c.n, c.k, c.p, c.t, 0.5f / 35, d, acc);
    for (size_t i = 0; i < cnt; i++) ck_assert_float_eq_tol(d[i], (c.p[i] - c.t[i]) / 35.0f, 1e-7);
    ck_assert_double_eq_tol(acc[0], 2 * want, 2e-6 * want);
    B->mse(0, c.k, c.p, c.t, 1.0f, d, acc);
    ck_assert_double_eq_tol(acc[0], 2 * want, 2e-6 * want);
    free(c.p), free(c.t), free(d);
}
END_TEST

/* ---- optimizers ------------------------------------------------------- */

/* SGD over 6 steps against the PyTorch recurrence in double, for
 * {plain, momentum, nesterov} x {no decay, decay}; 37 elements (blocks and
 * a tail).  Float vs double over 6 steps: 1e-6 relative. */
START_TEST(sgd_sequences)
{
    const int n = 37, steps = 6;
    for (int mode = 0; mode < 6; mode++) {
        const float lr = 0.1f, mom = mode % 3 ? 0.9f : 0.0f, wd = mode >= 3 ? 1e-2f : 0.0f;
        const int nesterov = mode % 3 == 2;
        test_seed(100 + (uint64_t)mode);
        float *p = test_fvec(n, 1), *g = fzero_(n), *buf = fconst_(n, NAN);
        double rp[37], rb[37];
        for (int i = 0; i < n; i++) rp[i] = p[i];
        for (int t = 0; t < steps; t++) {
            for (int i = 0; i < n; i++) g[i] = test_urand();
            B->sgd_step(n, p, g, mom != 0 ? buf : NULL, lr, mom, nesterov, wd, t == 0);
            for (int i = 0; i < n; i++) {
                double d = (double)g[i] + (double)wd * rp[i];
                if (mom != 0) {
                    rb[i] = t == 0 ? d : (double)mom * rb[i] + d;
                    d = nesterov ? d + (double)mom * rb[i] : rb[i];
                }
                rp[i] -= (double)lr * d;
            }
        }
        for (int i = 0; i < n; i++) {
            ck_assert_msg(fabs(p[i] - rp[i]) <= 1e-6 * fmax(1, fabs(rp[i])),
                          "sgd mode %d p[%d] = %.9g, expected %.9g", mode, i, p[i], rp[i]);
            if (mom != 0) ck_assert_float_eq_tol(buf[i], rb[i], 1e-6 * fmax(1, fabs(rb[i])));
        }
        free(p), free(g), free(buf);
    }
}
END_TEST

START_TEST(adamw_sequence)
{
    const int n = 37, steps = 7;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 1e-2f;
    test_seed(110);
    float *p = test_fvec(n, 1), *g = fzero_(n), *m = fzero_(n), *v = fzero_(n);
    double rp[37], rm[37] = {0}, rv[37] = {0};
    for (int i = 0; i < n; i++) rp[i] = p[i];
    for (int t = 1; t <= steps; t++) {
        for (int i = 0; i < n; i++) g[i] = test_urand() * (i == 3 ? 1e-3f : 1.0f);
        B->adamw_step(n, p, g, m, v, lr, b1, b2, eps, wd, t);
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (int i = 0; i < n; i++) {
            rp[i] *= 1 - (double)lr * wd;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * g[i];
            rv[i] = b2 * rv[i] + (1 - (double)b2) * g[i] * g[i];
            rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
    }
    for (int i = 0; i < n; i++) {
        ck_assert_msg(fabs(p[i] - rp[i]) <= 2e-6 * fmax(1, fabs(rp[i])),
                      "adamw p[%d] = %.9g, expected %.9g", i, p[i], rp[i]);
        ck_assert_float_eq_tol(m[i], rm[i], 1e-6);
        ck_assert_float_eq_tol(v[i], rv[i], 1e-6 * fmax(1e-3, rv[i]));
    }
    free(p), free(g), free(m), free(v);
}
END_TEST

/* ---- reductions and helpers ------------------------------------------ */

START_TEST(scale_sumsq_finite)
{
    test_seed(120);
    const size_t n = 10007;
    float *x = test_fvec(n, 2);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    ck_assert_double_eq_tol(B->sumsq(n, x), s, 1e-12 * s);
    ck_assert_double_eq(B->sumsq(0, x), 0);
    float *y = fzero_(n);
    memcpy(y, x, n * sizeof *y);
    B->scale(n, y, -0.5f);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(y[i], x[i] * -0.5f);
    ck_assert_int_eq(B->all_finite(n, x), 1);
    ck_assert_int_eq(B->all_finite(0, x), 1);
    /* NaN, +Inf, -Inf at the start, in a block, in the tail, past the first chunk */
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const size_t at[] = {0, 17, 4100, n - 1, n - 3};
    for (size_t b = 0; b < 3; b++)
        for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
            float keep = x[at[a]];
            x[at[a]] = bad[b];
            ck_assert_msg(B->all_finite(n, x) == 0, "%g at %zu not found", bad[b], at[a]);
            ck_assert_int_eq(B->all_finite(at[a], x), 1); /* the prefix before it */
            x[at[a]] = keep;
        }
    /* the largest finite floats are finite */
    x[5] = 3.4028235e38f, x[6] = -3.4028235e38f;
    ck_assert_int_eq(B->all_finite(n, x), 1);
    free(x), free(y);
}
END_TEST

START_TEST(half_round_trips)
{
    test_seed(130);
    const size_t n = 1000;
    float *x = test_fvec(n, 100), *back = fzero_(n);
    uint16_t *h = calloc(n, sizeof *h);
    for (int bf = 0; bf < 2; bf++) {
        B->to_half(n, x, h, bf);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(h[i], bf ? ddp_f32_to_bf16(x[i]) : ddp_f32_to_f16(x[i]));
        B->from_half(n, h, back, bf);
        for (size_t i = 0; i < n; i++) {
            ck_assert_float_le(fabsf(back[i] - x[i]),
                               fabsf(x[i]) * (bf ? 1.0f / 256 : 1.0f / 2048));
        }
        /* values already in 16 bits survive both ways exactly */
        float *again = fzero_(n);
        uint16_t *h2 = calloc(n, sizeof *h2);
        B->to_half(n, back, h2, bf);
        B->from_half(n, h2, again, bf);
        ck_assert_mem_eq(h, h2, n * sizeof *h);
        ck_assert_mem_eq(back, again, n * sizeof *back);
        free(again), free(h2);
    }
    free(x), free(back), free(h);
}
END_TEST

START_TEST(memory_ops)
{
    float *a = B->alloc(1000 * sizeof *a), *b = B->alloc(1000 * sizeof *b);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    assert_all_eq_(a, 0.0f, 1000, "alloc"); /* zero-filled */
    float host[1000];
    for (int i = 0; i < 1000; i++) host[i] = (float)i;
    B->upload(a, host, sizeof host);
    B->copy(b, a, sizeof host);
    memset(host, 0, sizeof host);
    B->download(host, b, sizeof host);
    for (int i = 0; i < 1000; i++) ck_assert_float_eq(host[i], (float)i);
    B->zero(b, 10 * sizeof *b);
    ck_assert_float_eq(b[9], 0);
    ck_assert_float_eq(b[10], 10);
    B->sync();
    void *z = B->alloc(0);
    ck_assert_ptr_nonnull(z);
    B->free(z), B->free(a), B->free(b);
    ck_assert_ptr_eq(compute_find("cpu"), &compute_cpu_ops);
    ck_assert_ptr_null(compute_find("no-such-backend"));
}
END_TEST

/* count == 0 / n == 0 for the ops not covered above: nothing is touched */
START_TEST(empty_counts)
{
    float a[4] = {1, -2, 3, -4}, b[4] = {5, 5, 5, 5}, m[4] = {0}, v[4] = {0};
    uint16_t h[4] = {7, 7, 7, 7};
    B->add(0, a, a, b, 0), B->add(0, a, a, b, 1);
    B->relu_fwd(0, a, b), B->relu_bwd(0, a, a, b, NULL), B->gelu_fwd(0, a, b), B->gelu_bwd(0, a, a, b);
    B->scale(0, b, 3.0f), B->to_half(0, a, h, 1), B->from_half(0, h, b, 0);
    B->sgd_step(0, b, a, m, 0.1f, 0.9f, 1, 0.1f, 1);
    B->adamw_step(0, b, a, m, v, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
    double acc[2] = {0, 0};
    B->mse(0, 4, a, a, 1.0f, b, acc);
    assert_all_eq_(b, 5.0f, 4, "outputs after count 0");
    for (int i = 0; i < 4; i++) ck_assert_uint_eq(h[i], 7);
    ck_assert_double_eq(acc[0], 0);
}
END_TEST

void kernels_vector_tests(TCase *t, const compute_ops_t *backend)
{
    B = backend;
    tcase_add_test(t, add_sums);
    tcase_add_test(t, relu_gelu_gradients);
    tcase_add_test(t, relu_bwd_sums);
    tcase_add_test(t, dropout_mask);
    tcase_add_test(t, xent_gradients_and_values);
    tcase_add_test(t, xent_accuracy_ties);
    tcase_add_test(t, mse_gradients);
    tcase_add_test(t, sgd_sequences);
    tcase_add_test(t, adamw_sequence);
    tcase_add_test(t, scale_sumsq_finite);
    tcase_add_test(t, half_round_trips);
    tcase_add_test(t, memory_ops);
    tcase_add_test(t, empty_counts);
}
