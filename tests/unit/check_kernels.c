/* check_kernels.c -- the compute backends' kernels against outside
 * references: the suite, the tests of one backend only (the registry of the
 * CPU build; the cuda backend's bf16 GEMM inputs, grouped convolution and
 * error record), and the rooms' tests by op family: check_kernels_layers.c
 * (linear, convolution, pooling, batch normalisation),
 * check_kernels_vector.c (activations, dropout, losses, optimizers,
 * reductions, half conversions, memory ops, count == 0) and
 * check_kernels_models.c (a kernel-level composition of the fixture models
 * against PyTorch, tests/fixtures); their shared helpers in kernel_tests.h.
 * The references are finite-difference gradients of every layer op and
 * loss, naive loops for the GEMM-based forwards and backwards,
 * hand-computed optimizer sequences in double, the n == 0 and beta
 * contracts, and the PyTorch fixtures.
 *
 * Finite differences: float data, objective L = sum(w_out * y) accumulated
 * in double with random w_out (for losses L is the summed loss), central
 * differences with step H = 1e-2 over the float inputs, divided by the step
 * actually taken in float.  Error budget: float rounding of y (~1e-7 |L|)
 * divided by 2H gives < 1e-4, the truncation error O(H^2 L''') is < 1e-3 for
 * these smooth ops on O(1) data, so |numeric - analytic| <= FD_TOL * max(1,
 * |numeric|) with FD_TOL = 2e-3 (BN, with its 1/count couplings: 5e-3).  A
 * missing term or factor in a gradient shows up as an error of O(0.1).
 * Piecewise ops (relu, maxpool) get inputs at least 2H away from their kinks.
 *
 * Built with -DDDP_TEST_BACKEND_MIRROR (check_kernels_cuda), the same tests
 * run on the "cuda" backend through tests/doubles/compute_mirror.c, with the same
 * tolerances, except the registry test (about the CPU build); a bf16 GEMM
 * test is added.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "ddp_build.h"
#include "cpu_dnnl.h"
#include "tests.h"
#include "kernel_tests.h"
#ifdef DDP_TEST_BACKEND_MIRROR
#include "compute_mirror.h"
#include "ddp_cuda.h"
#include "half.h"
#include "test_rand.h"
#endif

/* the backend under test (test_suite sets the mirror of "cuda") */
static const compute_ops_t *B = &compute_cpu_ops;

#ifndef DDP_TEST_BACKEND_MIRROR
/* The registry holds what configure built (DDP_COMPUTE_BACKENDS, the list of
 * its summary), the default first; the cpu backend computes on host memory
 * and its events are there. */
START_TEST(registry)
{
    char names[256] = "";
    size_t u = 0;
    for (int i = 0; i < compute_backend_count(); i++) {
        const compute_ops_t *c = compute_backend(i);
        ck_assert_ptr_eq(compute_find(c->name), c);
        ck_assert_ptr_nonnull(c->upload_async);
        ck_assert_ptr_nonnull(c->download_async);
        ck_assert_ptr_nonnull(c->event_create);
        u += (size_t)snprintf(names + u, sizeof names - u, "%s%s", i ? " " : "", c->name);
    }
    ck_assert_str_eq(names, DDP_COMPUTE_BACKENDS);
    ck_assert_ptr_null(compute_backend(compute_backend_count()));
    ck_assert_ptr_eq(compute_backend(0), &compute_cpu_ops);
    ck_assert_int_eq(compute_cpu_ops.mem_kind, DDP_MEM_HOST);
    ck_assert_ptr_null(compute_cpu_ops.mem_info); /* host memory: no device plan */
    compute_event_t *e = B->event_create();
    ck_assert_ptr_nonnull(e);
    B->event_record(e);
    B->event_wait(e);
    B->event_destroy(e);

    /* a table with a required op missing is refused, naming it; optional
     * ops may be missing */
    static compute_ops_t partial;
    partial = compute_cpu_ops;
    partial.name = "cpu-partial";
    partial.bn_bwd_data = NULL;
    ddp_clear_error();
    ck_assert_int_eq(compute_register("cpu-partial", &partial), DDP_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "bn_bwd_data"));
    ck_assert_ptr_null(compute_find("cpu-partial"));
    ddp_clear_error();
    /* a double stands in for "cpu" (--device cpu and auto take it), then
     * the backend itself again */
    static compute_ops_t twin;
    twin = compute_cpu_ops;
    twin.name = "cpu-twin";
    twin.check = NULL;
    twin.device_id = NULL;
    twin.host_alloc = NULL;
    twin.host_free = NULL;
    int n = compute_backend_count();
    ck_assert_int_eq(compute_register("cpu", &twin), DDP_OK);
    ck_assert_int_eq(compute_backend_count(), n);
    const compute_ops_t *picked = NULL;
    ck_assert_int_eq(compute_pick("cpu", &picked), DDP_OK);
    ck_assert_ptr_eq(picked, &twin);
    ck_assert_int_eq(compute_register("cpu", &compute_cpu_ops), DDP_OK);
    ck_assert_ptr_eq(compute_find("cpu"), &compute_cpu_ops);
    ck_assert_str_eq(compute_backend_name(0), "cpu");
    /* --device: a name with no backend is a usage error naming it; auto
     * without a visible GPU is cpu */
    ck_assert_int_eq(compute_pick("tpu", &picked), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--device tpu"));
    ddp_clear_error();
    const compute_ops_t *cuda = compute_find("cuda");
    if (!cuda || cuda->device_count() <= 0) {
        ck_assert_int_eq(compute_pick("auto", &picked), DDP_OK);
        ck_assert_ptr_eq(picked, &compute_cpu_ops);
    }
}
END_TEST
#endif

#ifdef DDP_TEST_BACKEND_MIRROR
/* ---- bf16 GEMM inputs (ddp_cuda_set_bf16_gemm) --------------------------- */

static float bf16r_(float v)
{
    return ddp_bf16_to_f32(ddp_f32_to_bf16(v));
}

static void bf16_off_(void)
{
    ddp_cuda_set_bf16_gemm(0);
    ddp_cuda_set_tf32(0);
}

/* TF32 as the tensor cores take an fp32 input: 10 mantissa bits, to
 * nearest with ties away from zero (cvt.rna.tf32.f32). */
static float tf32r_(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* linear forward and backward with bf16 GEMM inputs against naive loops in
 * double over the bf16-rounded operands (the bias and beta * dw stay fp32).
 * Products of two bf16 values are exact in fp32, so only the fp32
 * accumulation over at most 70 terms of O(1) differs: 1e-5 relative to
 * max(1, |ref|), as the fp32 test.  That the inputs were rounded at all:
 * the fp32 reference is off by more than 1e-3 somewhere (rounding x and w
 * to 8 significant bits moves these sums by ~1e-2). */
START_TEST(linear_bf16)
{
    test_seed(7);
    const int n = 33, in = 70, out = 19;
    const size_t xn = (size_t)n * in, wn = (size_t)out * in, yn = (size_t)n * out;
    float *x = test_fvec(xn, 2), *w = test_fvec(wn, 1), *b = test_fvec(out, 1),
          *dy = test_fvec(yn, 1);
    float *y = fconst_(yn, NAN), *dx = fconst_(xn, NAN), *dw = test_fvec(wn, 1), *db = fzero_(out);
    float *dw0 = malloc(wn * sizeof *dw0), *ref = fzero_(yn), *ref32 = fzero_(yn);
    float *rdx = fzero_(xn), *rdw = fzero_(wn);
    memcpy(dw0, dw, wn * sizeof *dw0);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o], s32 = b[o];
            for (int k = 0; k < in; k++) {
                s += (double)bf16r_(x[i * in + k]) * bf16r_(w[o * in + k]);
                s32 += (double)x[i * in + k] * w[o * in + k];
            }
            ref[i * out + o] = (float)s, ref32[i * out + o] = (float)s32;
        }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < in; k++) {
            double s = 0;
            for (int o = 0; o < out; o++)
                s += (double)bf16r_(dy[i * out + o]) * bf16r_(w[o * in + k]);
            rdx[i * in + k] = (float)s;
        }
    for (int o = 0; o < out; o++)
        for (int k = 0; k < in; k++) {
            double s = 0.5 * dw0[o * in + k];
            for (int i = 0; i < n; i++)
                s += (double)bf16r_(dy[i * out + o]) * bf16r_(x[i * in + k]);
            rdw[o * in + k] = (float)s;
        }
    ddp_cuda_set_bf16_gemm(1);
    B->linear_fwd(n, in, out, x, w, b, y, 0);
    B->linear_bwd(n, in, out, x, w, dy, dx, dw, db, 0.5f, NULL, NULL);
    ddp_cuda_set_bf16_gemm(0);
    assert_close_v_(y, ref, yn, 1e-5, "bf16 linear y");
    assert_close_v_(dx, rdx, xn, 1e-5, "bf16 linear dx");
    assert_close_v_(dw, rdw, wn, 1e-5, "bf16 linear dw (beta 0.5)");
    double off = 0;
    for (size_t i = 0; i < yn; i++) off = fmax(off, fabs((double)y[i] - ref32[i]));
    ck_assert_msg(off > 1e-3, "bf16 linear y within %g of the fp32 result: inputs not rounded",
                  off);
    /* off again: fp32 as before */
    B->linear_fwd(n, in, out, x, w, b, y, 0);
    assert_close_v_(y, ref32, yn, 1e-5, "fp32 linear y after bf16");
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(dw0);
    free(ref), free(ref32), free(rdx), free(rdw);
}
END_TEST

/* Convolution forward and backward with bf16 GEMM inputs (the columns made
 * in bf16 by im2col, conv.cu) against the CPU backend's convolution on the
 * bf16-rounded operands: y from x and w rounded, dx from w and dy rounded,
 * dw from dy and x rounded.  Products of two bf16 values are exact in fp32,
 * so only the fp32 accumulation over c k k (or n oh ow) terms of O(1)
 * differs: 1e-5 relative to max(1, |ref|), as linear_bf16.  Shapes: samples
 * grouped into one GEMM (3x3, padding), a stride of 2, a direct 1x1 (no
 * im2col: the fp32 input converted by the GEMM entry), a 1x1 over a group
 * of samples (one strided batched GEMM on the rounded inputs, dx from the
 * gathered dy; and one of samples under 64 pixels, one GEMM), and stride-1 3x3 and 5x5 ones whose
 * dx is a convolution of dy (padded by k - 1 - pad: 2 and 3 here) by the flipped weight.  That the
 * inputs were rounded at all: the fp32 result is off by more than 1e-3.
 * Through cuDNN (where loaded) the same operands, and y - b, dx and dw
 * written in bf16 (cuda/conv.cu): within that rounding, 2^-8 of the
 * reference (a sum an ulp off may round the other way), plus 1e-5. */
START_TEST(conv_bf16)
{
    test_seed(9);
    const conv_dims_t shapes[] = {conv_dims_(5, 4, 9, 9, 6, 3, 1, 1),
                                  conv_dims_(3, 3, 11, 11, 5, 3, 2, 1),
                                  conv_dims_(1, 4, 8, 8, 3, 1, 1, 0),
                                  conv_dims_(4, 6, 8, 9, 9, 1, 1, 0),
                                  conv_dims_(4, 6, 5, 7, 9, 1, 1, 0),
                                  conv_dims_(1, 6, 8, 9, 5, 3, 1, 0),
                                  conv_dims_(1, 4, 9, 8, 4, 5, 1, 1)};
    const compute_ops_t *C = &compute_cpu_ops;
    double off32 = 0;
    for (int sh = 0; sh < 7; sh++) {
        const conv_dims_t *d = &shapes[sh];
        const size_t xn = conv_xn_(d), wn = (size_t)d->oc * d->c * d->k * d->k,
                     yn = (size_t)d->n * d->oc * d->oh * d->ow;
        float *x = test_fvec(xn, 2), *w = test_fvec(wn, 1), *b = test_fvec(d->oc, 1),
              *dy = test_fvec(yn, 1);
        float *xr = fzero_(xn), *wr = fzero_(wn), *dyr = fzero_(yn);
        for (size_t i = 0; i < xn; i++) xr[i] = bf16r_(x[i]);
        for (size_t i = 0; i < wn; i++) wr[i] = bf16r_(w[i]);
        for (size_t i = 0; i < yn; i++) dyr[i] = bf16r_(dy[i]);
        float *y = fconst_(yn, NAN), *dx = fconst_(xn, NAN), *dw = fconst_(wn, NAN),
              *db = fzero_(d->oc), *ry = fzero_(yn), *r32 = fzero_(yn), *rdx = fzero_(xn),
              *rdw = fzero_(wn), *rdb = fzero_(d->oc);
        void *cws = C->alloc(C->conv_ws_bytes(d)), *ws = B->alloc(B->conv_ws_bytes(d));
        C->conv_fwd(d, xr, wr, b, ry, cws);
        C->conv_fwd(d, x, w, b, r32, cws);
        C->conv_bwd(d, xr, wr, dyr, rdx, rdw, rdb, 0.0f, cws);
        for (int dnn = 0; dnn < 1 + ddp_cuda_dnn_loaded(); dnn++) {
            ddp_cuda_dnn_enable(dnn);
            ck_assert_int_eq(ddp_cuda_set_bf16_gemm(1), 0);
            B->conv_fwd(d, x, w, b, y, ws);
            B->conv_bwd(d, x, w, dy, dx, dw, db, 0.0f, ws);
            ck_assert_int_eq(ddp_cuda_set_bf16_gemm(0), 0);
            ddp_cuda_dnn_enable(1);
            char what[64];
            if (!dnn) {
                snprintf(what, sizeof what, "bf16 conv %d y", sh);
                assert_close_v_(y, ry, yn, 1e-5, what);
                snprintf(what, sizeof what, "bf16 conv %d dx", sh);
                assert_close_v_(dx, rdx, xn, 1e-5, what);
                snprintf(what, sizeof what, "bf16 conv %d dw", sh);
                assert_close_v_(dw, rdw, wn, 1e-5, what);
            } else {
                const size_t ohw = (size_t)d->oh * d->ow;
                for (size_t i = 0; i < yn; i++) {
                    const double bias = b[(i / ohw) % (size_t)d->oc];
                    ck_assert_msg(fabs(y[i] - ry[i]) <= 0x1p-8 * fabs(ry[i] - bias) + 1e-5,
                                  "bf16 conv %d (cuDNN) y[%zu] = %.9g, expected %.9g", sh, i, y[i],
                                  ry[i]);
                }
                for (size_t i = 0; i < xn; i++)
                    ck_assert_msg(fabs(dx[i] - rdx[i]) <= 0x1p-8 * fabs(rdx[i]) + 1e-5,
                                  "bf16 conv %d (cuDNN) dx[%zu] = %.9g, expected %.9g", sh, i,
                                  dx[i], rdx[i]);
                for (size_t i = 0; i < wn; i++)
                    ck_assert_msg(fabs(dw[i] - rdw[i]) <= 0x1p-8 * fabs(rdw[i]) + 1e-5,
                                  "bf16 conv %d (cuDNN) dw[%zu] = %.9g, expected %.9g", sh, i,
                                  dw[i], rdw[i]);
            }
            for (size_t i = 0; i < yn; i++) off32 = fmax(off32, fabs((double)y[i] - r32[i]));
        }
        C->free(cws), B->free(ws);
        free(x), free(w), free(b), free(dy), free(xr), free(wr), free(dyr), free(y), free(dx);
        free(dw), free(db), free(ry), free(r32), free(rdx), free(rdw), free(rdb);
    }
    ck_assert_msg(off32 > 1e-3, "bf16 conv y within %g of the fp32 result: inputs not rounded",
                  off32);
}
END_TEST

/* --precision tf32 (ddp_cuda_set_tf32): linear forward and backward against
 * naive loops in double over the TF32-rounded operands.  A GPU may truncate
 * instead of rounding (each operand off by less than 2^-10 relative, a
 * product by 2^-9), so the bound is 2^-9 S + 1e-5 max(1, |ref|), S the sum
 * of |products|; on the emulation, which rounds as tf32r_, products of two
 * TF32 values are exact in fp32 and only the fp32 accumulation differs:
 * 1e-5.  That the inputs were rounded at all: the fp32 reference is off by
 * more than 1e-4 somewhere (rounding to 11 significant bits moves these sums
 * by ~1e-3); and off again, fp32 as before. */
START_TEST(linear_tf32)
{
    test_seed(8);
    const int n = 33, in = 70, out = 19;
    const size_t xn = (size_t)n * in, wn = (size_t)out * in, yn = (size_t)n * out;
    float *x = test_fvec(xn, 2), *w = test_fvec(wn, 1), *b = test_fvec(out, 1),
          *dy = test_fvec(yn, 1);
    float *y = fconst_(yn, NAN), *dx = fconst_(xn, NAN), *dw = fzero_(wn), *db = fzero_(out);
    float *ref = fzero_(yn), *ref32 = fzero_(yn), *sy = fzero_(yn);
    float *rdx = fzero_(xn), *sdx = fzero_(xn), *rdw = fzero_(wn), *sdw = fzero_(wn);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o], s32 = b[o], a = fabs(b[o]);
            for (int k = 0; k < in; k++) {
                s += (double)tf32r_(x[i * in + k]) * tf32r_(w[o * in + k]);
                s32 += (double)x[i * in + k] * w[o * in + k];
                a += fabs((double)x[i * in + k] * w[o * in + k]);
            }
            ref[i * out + o] = (float)s, ref32[i * out + o] = (float)s32, sy[i * out + o] = a;
        }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < in; k++) {
            double s = 0, a = 0;
            for (int o = 0; o < out; o++) {
                s += (double)tf32r_(dy[i * out + o]) * tf32r_(w[o * in + k]);
                a += fabs((double)dy[i * out + o] * w[o * in + k]);
            }
            rdx[i * in + k] = (float)s, sdx[i * in + k] = a;
        }
    for (int o = 0; o < out; o++)
        for (int k = 0; k < in; k++) {
            double s = 0, a = 0;
            for (int i = 0; i < n; i++) {
                s += (double)tf32r_(dy[i * out + o]) * tf32r_(x[i * in + k]);
                a += fabs((double)dy[i * out + o] * x[i * in + k]);
            }
            rdw[o * in + k] = (float)s, sdw[o * in + k] = a;
        }
    ck_assert_int_eq(ddp_cuda_set_tf32(1), 0);
    B->linear_fwd(n, in, out, x, w, b, y, 0);
    B->linear_bwd(n, in, out, x, w, dy, dx, dw, db, 0.0f, NULL, NULL);
    ck_assert_int_eq(ddp_cuda_set_tf32(0), 0);
    const float *got[] = {y, dx, dw}, *want[] = {ref, rdx, rdw}, *sum[] = {sy, sdx, sdw};
    const size_t len[] = {yn, xn, wn};
    const char *name[] = {"y", "dx", "dw"};
    for (int v = 0; v < 3; v++)
        for (size_t i = 0; i < len[v]; i++) {
#ifdef HAVE_CUDA
            double tol = 1e-5 * fmax(1.0, fabs(want[v][i])) + ldexp(sum[v][i], -9); /* a GPU */
#else
            double tol = 1e-5 * fmax(1.0, fabs(want[v][i])); /* the emulation */
#endif
            ck_assert_msg(fabs((double)got[v][i] - want[v][i]) <= tol,
                          "tf32 linear %s[%zu]: %.9g, want %.9g (tolerance %.3g)", name[v], i,
                          got[v][i], want[v][i], tol);
        }
    double off = 0;
    for (size_t i = 0; i < yn; i++) off = fmax(off, fabs((double)y[i] - ref32[i]));
    ck_assert_msg(off > 1e-4, "tf32 linear y within %g of the fp32 result: inputs not rounded",
                  off);
    B->linear_fwd(n, in, out, x, w, b, y, 0);
    assert_close_v_(y, ref32, yn, 1e-5, "fp32 linear y after tf32");
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
    free(ref), free(ref32), free(sy), free(rdx), free(sdx), free(rdw), free(sdw);
}
END_TEST

/* The cuda backend's convolution takes up to 2^16 GEMM columns per group
 * of samples: 17 samples of 64x64 are a group of 16 and a group of 1 (the
 * one-sample path), dw accumulating over both.  Against the naive loops:
 * y and dx sum 9 products (1e-5 relative to max(1, |ref|), as conv_naive),
 * dw and db sum 17*4096 products: 1e-4 (conv_naive's tolerance for dw and
 * db; float error ~ sqrt(70000) * 6e-8 ~ 2e-5 of the terms' size); beta =
 * 0.5 on a NaN-free start, same tolerances. */
START_TEST(conv_groups)
{
    test_seed(27);
    conv_dims_t d = conv_dims_(17, 1, 64, 64, 2, 3, 1, 1);
    size_t xn = conv_xn_(&d), yn = conv_yn_(&d), wn = conv_wn_(&d), on = (size_t)d.oc;
    float *x = test_fvec(xn, 1), *w = test_fvec(wn, 1), *b = test_fvec(on, 1),
          *dy = test_fvec(yn, 1);
    float *y = fconst_(yn, NAN), *dx = fconst_(xn, NAN), *dw = test_fvec(wn, 1),
          *db = test_fvec(on, 1);
    float *dw0 = malloc(wn * sizeof *dw0), *db0 = malloc(on * sizeof *db0);
    memcpy(dw0, dw, wn * sizeof *dw), memcpy(db0, db, on * sizeof *db);
    float *ry = fzero_(yn), *rdx = fzero_(xn), *rdw = fzero_(wn), *rdb = fzero_(on);
    conv_naive_(&d, x, w, b, dy, ry, rdx, rdw, rdb);
    for (size_t i = 0; i < wn; i++) rdw[i] += 0.5f * dw0[i];
    for (size_t i = 0; i < on; i++) rdb[i] += 0.5f * db0[i];
    void *ws = B->alloc(B->conv_ws_bytes(&d));
    B->conv_fwd(&d, x, w, b, y, ws);
    B->conv_bwd(&d, x, w, dy, dx, dw, db, 0.5f, ws);
    assert_close_v_(y, ry, yn, 1e-5, "grouped conv y");
    assert_close_v_(dx, rdx, xn, 1e-5, "grouped conv dx");
    assert_close_v_(dw, rdw, wn, 1e-4, "grouped conv dw (beta 0.5)");
    assert_close_v_(db, rdb, on, 1e-4, "grouped conv db (beta 0.5)");
    B->free(ws);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(dw0);
    free(db0), free(ry), free(rdx), free(rdw), free(rdb);
}
END_TEST

/* The launchers' error record: "CALL: WHY (file.cu:LINE)", the first failure
 * sticks until cleared (ddp_cuda.h).  Uses failures that leave the backend
 * usable (a second init, an unknown device). */
START_TEST(cuda_error_record)
{
    ddp_cuda_clear_error();
    ck_assert_str_eq(ddp_cuda_last_error(), "");
    ck_assert_int_eq(ddp_cuda_init(0), -1);
    char first[512];
    snprintf(first, sizeof first, "%s", ddp_cuda_last_error());
    ck_assert_msg(strncmp(first, "ddp_cuda_init: called twice (runtime.cu:", 40) == 0, "%s", first);
    ck_assert_msg(first[strlen(first) - 1] == ')', "%s", first);
    ddp_cuda_device_info_t info;
    ck_assert_int_eq(ddp_cuda_device_info(ddp_cuda_device_count() + 7, &info), -1);
    ck_assert_str_eq(ddp_cuda_last_error(), first);
    ddp_cuda_clear_error();
    ck_assert_str_eq(ddp_cuda_last_error(), "");
    ck_assert_int_ge(ddp_cuda_bound_device(), 0);
    /* still usable afterwards */
    float a[3] = {1, 2, 3}, b[3] = {0};
    B->copy(b, a, sizeof a);
    ck_assert_mem_eq(a, b, sizeof a);
}
END_TEST
#endif

#ifndef DDP_TEST_BACKEND_MIRROR
static void native_conv_on_(void)
{
    cpu_dnnl_enable(0);
}
static void native_conv_off_(void)
{
    cpu_dnnl_enable(1);
}
#endif

Suite *test_suite(void)
{
#ifdef DDP_TEST_BACKEND_MIRROR
    B = compute_mirror_cuda("check_kernels_cuda");
    Suite *s = suite_create("kernels");
    TCase *t = tcase_create(B->name);
    TCase *tb = tcase_create("cuda-only");
    tcase_add_checked_fixture(tb, NULL, bf16_off_);
    tcase_add_test(tb, linear_bf16);
    tcase_add_test(tb, conv_bf16);
    tcase_add_test(tb, linear_tf32);
    tcase_add_test(tb, cuda_error_record);
    tcase_add_test(tb, conv_groups);
    suite_add_tcase(s, tb);
#else
    Suite *s = suite_create("kernels");
    TCase *t = tcase_create("cpu");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, registry); /* the CPU build's registry */
    /* the layers again on the backend's own convolutions (im2col, Winograd)
     * where oneDNN takes them by default */
    TCase *tn = tcase_create("cpu-native-conv");
    tcase_set_timeout(tn, 60);
    tcase_add_checked_fixture(tn, native_conv_on_, native_conv_off_);
    kernels_layer_tests(tn, B);
    suite_add_tcase(s, tn);
#endif
    kernels_layer_tests(t, B);
    kernels_vector_tests(t, B);
    kernels_model_tests(t, B);
    suite_add_tcase(s, t);
    return s;
}
