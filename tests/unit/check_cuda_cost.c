/* check_cuda_cost.c -- every launcher of the CUDA backend (cuda/ddp_cuda.h)
 * declares what its kernels and GEMMs move (DDP_COST), and the declarations
 * are true: run on the CPU emulation with DDP_EMU_COST_CHECK=1, which holds
 * each kernel launch's and cuBLAS call's declared bytes read and written
 * against the device pages it really touches (tests/emu/emu_cost.cc) and
 * aborts the program, naming the launch site, on a difference beyond the
 * pages' rounding and 3%.  So the tensors here are large (1 to 5 MiB:
 * hundreds of pages, where a wrong term shows) and random (a ReLU's
 * backward reads dy only where x > 0).  Each test also reads the cost log
 * (ddp_cuda_cost_log): every entry declared, the kernels expected there,
 * the GEMMs' FLOPs exact and their units (fp32, TF32, bf16) those of the
 * precision set.  Builds without CUDA only (tests/Makefile.am); x86-64 (the
 * check reads the page fault's write bit), elsewhere exit 77. */
#include <check.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_cuda.h"
#include "test_rand.h"
#include "tests.h"

static void setup(void)
{
    static int bound = 0;
    if (bound) return;
    setenv("DDP_EMU_COST_CHECK", "1", 1);
    setenv("DDP_EMU_STREAMS", "sync", 1);
    ddp_emu_reload_env();
    ck_assert_msg(ddp_cuda_init(0) == 0, "init: %s", ddp_cuda_last_error());
    bound = 1;
}

/* n random floats in [-scale, scale) on the device */
static float *dev_rand(size_t n, float scale)
{
    float *h = test_fvec(n, scale), *d = NULL;
    ck_assert_int_eq(ddp_cuda_malloc((void **)&d, n * sizeof *d), 0);
    ck_assert_int_eq(ddp_cuda_upload(d, h, n * sizeof *d), 0);
    free(h);
    return d;
}

static void *dev_zero(size_t bytes)
{
    void *d = NULL;
    ck_assert_int_eq(ddp_cuda_malloc(&d, bytes), 0);
    return d;
}

/* The log since the last begin_(): every entry declared, each name of
 * `want` (NULL-terminated) there; the number of entries. */
static void begin_(void)
{
    setup();
    ddp_cuda_cost_record(1);
}

static size_t end_(const char *const *want)
{
    ck_assert_msg(ddp_cuda_sync() == 0, "%s", ddp_cuda_last_error());
    ddp_cuda_cost_record(0);
    const ddp_cuda_cost_t *e;
    size_t n = ddp_cuda_cost_log(&e);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(e[i].declared, "%s launched without DDP_COST", e[i].name);
        ck_assert_msg(e[i].read >= 0 && e[i].written >= 0 && e[i].flops >= 0, "%s: negative",
                      e[i].name);
    }
    for (; want && *want; want++) {
        int seen = 0;
        for (size_t i = 0; i < n; i++) seen |= strncmp(e[i].name, *want, strlen(*want)) == 0;
        ck_assert_msg(seen, "%s not in the cost log", *want);
    }
    return n;
}

START_TEST(elementwise_costs)
{
    const size_t count = (size_t)1 << 20;
    begin_();
    float *a = dev_rand(count, 1), *b = dev_rand(count, 1), *y = dev_zero(count * 4);
    uint16_t *h = dev_zero(count * 2);
    ck_assert_int_eq(ddp_cuda_add(count, a, b, y, 0), 0);
    ck_assert_int_eq(ddp_cuda_add(count, a, b, y, 1), 0);
    ck_assert_int_eq(ddp_cuda_relu_fwd(count, a, y), 0);
    ck_assert_int_eq(ddp_cuda_relu_bwd(count, a, b, y, NULL), 0);
    ck_assert_int_eq(ddp_cuda_relu_bwd(count, a, b, y, y), 0); /* two gradients */
    ck_assert_int_eq(ddp_cuda_gelu_fwd(count, a, y), 0);
    ck_assert_int_eq(ddp_cuda_gelu_bwd(count, a, b, y), 0);
    ck_assert_int_eq(ddp_cuda_scale(count, y, 0.5f), 0);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        ck_assert_int_eq(ddp_cuda_to_half(count, a, h, bf16), 0);
        ck_assert_int_eq(ddp_cuda_from_half(count, h, y, bf16), 0);
    }
    const int rows = 256;
    int64_t idx[256];
    for (int i = 0; i < rows; i++) idx[i] = 1000 + 3 * i;
    int64_t *didx = dev_zero(sizeof idx);
    ck_assert_int_eq(ddp_cuda_upload(didx, idx, sizeof idx), 0);
    ck_assert_int_eq(ddp_cuda_dropout_fwd(rows, count / rows, a, y, 0.25f, 7, 3, 2, didx), 0);
    ck_assert_int_eq(ddp_cuda_dropout_bwd(rows, count / rows, b, y, 0.25f, 7, 3, 2, didx), 0);
    ck_assert_int_eq(ddp_cuda_copy(y, a, count * 4), 0);
    ck_assert_int_eq(ddp_cuda_zero(y, count * 4), 0);
    const char *want[] = {"add_k", "relu_fwd_k", "relu_bwd_k", "gelu_fwd_k", "gelu_bwd_k",
                          "scale_k", "to_half_k", "from_half_k", "dropout_k", "cudaMemcpyAsync",
                          "cudaMemsetAsync", NULL};
    end_(want);
    ddp_cuda_free(a), ddp_cuda_free(b), ddp_cuda_free(y), ddp_cuda_free(h), ddp_cuda_free(didx);
}
END_TEST

/* The GEMMs' entries: FLOPs 2mnk each, in the units of the precision. */
static void gemm_entries(ddp_cuda_math_t math, double flops_want)
{
    const ddp_cuda_cost_t *e;
    size_t n = ddp_cuda_cost_log(&e);
    double flops = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].kind == DDP_COST_GEMM) {
            ck_assert_int_eq(e[i].math, math);
            ck_assert_uint_gt(e[i].blocks, 0);
            flops += e[i].flops;
        }
    ck_assert_msg(flops == flops_want, "GEMM FLOPs %.0f, want %.0f", flops, flops_want);
}

START_TEST(linear_costs)
{
    const int n = 256, in = 1024, out = 1024;
    begin_();
    float *x = dev_rand((size_t)n * in, 1), *w = dev_rand((size_t)out * in, 0.05f),
          *bias = dev_rand(out, 1), *y = dev_zero((size_t)n * out * 4),
          *dy = dev_rand((size_t)n * out, 1), *dx = dev_zero((size_t)n * in * 4),
          *dw = dev_rand((size_t)out * in, 1), *db = dev_rand(out, 1),
          *ws = dev_zero((size_t)n * out * 4);
    const double step_flops = 3 * 2.0 * n * in * out; /* y, dw, dx */
    for (int mode = 0; mode < 3; mode++) { /* fp32, bf16, tf32 */
        for (int relu = 0; relu < 2; relu++) { /* a ReLU fused after the layer */
            ck_assert_int_eq(ddp_cuda_set_bf16_gemm(mode == 1), 0);
            ck_assert_int_eq(ddp_cuda_set_tf32(mode == 2), 0);
            begin_();
            ck_assert_int_eq(ddp_cuda_linear_fwd(n, in, out, x, w, bias, y, relu), 0);
            ck_assert_int_eq(ddp_cuda_linear_bwd(n, in, out, x, w, dy, dx, dw, db,
                                                 mode == 0 ? 0 : 1, relu ? y : NULL, ws),
                             0);
            const char *pass = mode == 1 ? (relu ? "dy_pass_kernel<kPassMaskBf16>"
                                                 : "dy_pass_kernel<kPassBf16>")
                                         : (relu ? "dy_pass_kernel<kPassMaskF32>"
                                                 : "dy_pass_kernel<kPassNone>");
            /* the forward: one cuBLASLt matmul, the bias and ReLU in its
             * epilogue; TF32 GEMMs stay with cuBLAS and the pass adds them */
            const char *want[] = {mode == 2 ? "bias_act_kernel" : "cublasLtMatmul", pass,
                                  mode == 1 ? "cublasGemmEx" : "cublasSgemm",
                                  mode == 1 ? "to_bf16_kernel" : NULL, NULL};
            end_(want);
            gemm_entries(mode == 1 ? DDP_MATH_BF16 : mode == 2 ? DDP_MATH_TF32 : DDP_MATH_FP32,
                         step_flops);
        }
    }
    ck_assert_int_eq(ddp_cuda_set_bf16_gemm(0), 0);
    ck_assert_int_eq(ddp_cuda_set_tf32(0), 0);
    /* no rows: the gradients scaled by beta */
    begin_();
    ck_assert_int_eq(ddp_cuda_linear_bwd(0, in, out, x, w, dy, dx, dw, db, 0.5f, NULL, NULL), 0);
    const char *want0[] = {"grad_scale_kernel", NULL};
    end_(want0);
    /* no inputs: the bias gradient of the masked gradient */
    begin_();
    ck_assert_int_eq(ddp_cuda_linear_bwd(n, 0, out, x, w, dy, dx, dw, db, 0.0f, y, ws), 0);
    const char *want1[] = {"dy_pass_kernel<kPassMaskNone>", NULL};
    end_(want1);
    ddp_cuda_free(x), ddp_cuda_free(w), ddp_cuda_free(bias), ddp_cuda_free(y);
    ddp_cuda_free(dy), ddp_cuda_free(dx), ddp_cuda_free(dw), ddp_cuda_free(db), ddp_cuda_free(ws);
}
END_TEST

/* forward and backward of one convolution shape, with its bias: in fp32
 * with the launches `want` among them, in bf16 with `want16` */
/* One convolution's forward and backward in fp32 and bf16: as im2col and
 * GEMMs (cuDNN off; `want` and `want16` in the log), then through cuDNN
 * (its three calls, and under bf16 the rounding and widening passes),
 * every declaration held against the pages touched (DDP_EMU_COST_CHECK);
 * dw with beta 0 and 1 (cuDNN's weight gradient then reads dw). */
static void conv_case(ddp_cuda_conv_t d, const char *const *want, const char *const *want16)
{
    const size_t xs = (size_t)d.n * d.c * d.h * d.w, ys = (size_t)d.n * d.oc * d.oh * d.ow,
                 ws_ = (size_t)d.oc * d.c * d.k * d.k;
    float *x = dev_rand(xs, 1), *w = dev_rand(ws_, 0.1f), *b = dev_rand(d.oc, 1),
          *y = dev_zero(ys * 4), *dy = dev_rand(ys, 1), *dx = dev_zero(xs * 4),
          *dw = dev_zero(ws_ * 4), *db = dev_zero(d.oc * 4);
    void *ws = dev_zero(ddp_cuda_conv_ws_bytes(&d));
    static const char *const dnn[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                      "cudnnConvolutionBackwardFilter", "bias_add_kernel", NULL};
    static const char *const dnn16[] = {"cudnnConvolutionForward",
                                        "cudnnConvolutionBackwardData",
                                        "cudnnConvolutionBackwardFilter",
                                        "to_bf16_kernel",
                                        "widen_kernel",
                                        "widen_add_kernel",
                                        NULL};
    for (int cudnn = 0; cudnn < 2; cudnn++) {
        ddp_cuda_dnn_enable(cudnn);
        for (int b16 = 0; b16 < 2; b16++) { /* bf16 GEMMs: the columns made in bf16 */
            ck_assert_int_eq(ddp_cuda_set_bf16_gemm(b16), 0);
            begin_();
            ck_assert_int_eq(ddp_cuda_conv_fwd(&d, x, w, b, y, ws), 0);
            ck_assert_int_eq(ddp_cuda_conv_bwd(&d, x, w, dy, dx, dw, db, 0.0f, ws), 0);
            ck_assert_int_eq(ddp_cuda_conv_bwd(&d, x, w, dy, dx, dw, db, 1.0f, ws), 0);
            end_(cudnn ? (b16 ? dnn16 : dnn) : (b16 ? want16 : want));
        }
        ck_assert_int_eq(ddp_cuda_set_bf16_gemm(0), 0);
    }
    ddp_cuda_free(x), ddp_cuda_free(w), ddp_cuda_free(b), ddp_cuda_free(y), ddp_cuda_free(dy);
    ddp_cuda_free(dx), ddp_cuda_free(dw), ddp_cuda_free(db), ddp_cuda_free(ws);
}

START_TEST(conv_costs)
{
    /* samples grouped into one GEMM (gather, scatter) */
    ddp_cuda_conv_t grouped = {8, 16, 32, 32, 32, 3, 1, 1, 32, 32};
    const char *w1[] = {"im2col_kernel",           "scatter_bias_kernel",
                        "gather_kernel",           "col2im_kernel",
                        "conv_bias_planes_kernel", "conv_bias_combine_kernel",
                        "cublasSgemm",             NULL};
    const char *cols16[] = {"cublasGemmEx", "im2col_bf16_kernel", "gather_bf16_kernel", NULL};
    conv_case(grouped, w1, cols16);
    /* one sample a GEMM (bias added in place) */
    ddp_cuda_conv_t single = {2, 4, 192, 192, 8, 3, 1, 1, 192, 192};
    const char *w2[] = {"im2col_kernel", "bias_add_kernel", "col2im_kernel", NULL};
    const char *w2_16[] = {"cublasGemmEx", "im2col_bf16_kernel", "to_bf16_kernel", NULL};
    conv_case(single, w2, w2_16);
    /* 1x1, stride 1, one sample a GEMM: no im2col */
    ddp_cuda_conv_t direct = {2, 8, 192, 192, 8, 1, 1, 0, 192, 192};
    const char *w3[] = {"bias_add_kernel", "cublasSgemm", NULL};
    const char *w3_16[] = {"cublasGemmEx", "to_bf16_kernel", NULL};
    conv_case(direct, w3, w3_16);
    /* 1x1, stride 1, a group of samples: one strided batched GEMM forward
     * and for dx (no scatter, no col2im); dw over the gathered group */
    ddp_cuda_conv_t pointwise = {8, 16, 24, 24, 32, 1, 1, 0, 24, 24};
    const char *w5[] = {"cublasSgemmStridedBatched", "bias_add_kernel", "gather_kernel",
                        "im2col_kernel", "cublasSgemm", NULL};
    const char *w5_16[] = {"cublasGemmStridedBatchedEx", "gather_bf16_kernel",
                           "im2col_bf16_kernel", "cublasGemmEx", NULL};
    conv_case(pointwise, w5, w5_16);
    /* 3x3, stride 1, c == oc: under bf16 the input gradient is a
     * convolution of dy by the transposed, flipped weight (no col2im) */
    ddp_cuda_conv_t same = {8, 16, 16, 16, 16, 3, 1, 1, 16, 16};
    const char *w6[] = {"im2col_kernel", "col2im_kernel", "scatter_bias_kernel", NULL};
    const char *w6_16[] = {"conv_wt_kernel", "im2col_bf16_kernel", "scatter_bias_kernel",
                           "cublasGemmEx", NULL};
    conv_case(same, w6, w6_16);
    /* a ResNet stem: 7x7, stride 2, padding 3 */
    ddp_cuda_conv_t stem = {4, 3, 128, 128, 16, 7, 2, 3, 64, 64};
    const char *w4[] = {"im2col_kernel", "col2im_kernel", NULL};
    conv_case(stem, w4, cols16);
}
END_TEST

START_TEST(pool_costs)
{
    ddp_cuda_pool_t mp = {8, 32, 64, 64, 3, 2, 1, 32, 32}, ap = {8, 32, 64, 64, 2, 2, 0, 32, 32};
    const size_t xs = (size_t)8 * 32 * 64 * 64, ys = (size_t)8 * 32 * 32 * 32;
    begin_();
    float *x = dev_rand(xs, 1), *dy = dev_rand(ys, 1), *y = dev_zero(ys * 4),
          *dx = dev_zero(xs * 4);
    int32_t *arg = dev_zero(ys * 4);
    ck_assert_int_eq(ddp_cuda_maxpool_fwd(&mp, x, y, arg), 0);
    ck_assert_int_eq(ddp_cuda_maxpool_bwd(&mp, dy, arg, dx), 0);
    ck_assert_int_eq(ddp_cuda_avgpool_fwd(&ap, x, y), 0);
    ck_assert_int_eq(ddp_cuda_avgpool_bwd(&ap, dy, dx), 0);
    ck_assert_int_eq(ddp_cuda_gap_fwd(256, 64, 64, x, y), 0);
    ck_assert_int_eq(ddp_cuda_gap_bwd(256, 64, 64, dy, dx), 0);
    const char *want[] = {"maxpool_fwd_kernel", "maxpool_bwd_kernel", "avgpool_fwd_kernel",
                          "avgpool_bwd_kernel", "gap_fwd_kernel", "gap_bwd_kernel", NULL};
    end_(want);
    ddp_cuda_free(x), ddp_cuda_free(dy), ddp_cuda_free(y), ddp_cuda_free(dx), ddp_cuda_free(arg);
}
END_TEST

/* A BatchNorm and the max pooling after it in one pass each way, over
 * ResNet's stem windows (argmax kept) and the CNN's 2x2 (none kept: found
 * again, as the model runs it), fp32 and with x (carrying a convolution's
 * bias), the pooled output and both gradients kept in bf16 (b16); max
 * pooling alone on bf16 buffers (its output and its gradient). */
START_TEST(bn_maxpool_costs)
{
    ddp_cuda_pool_t pools[2] = {{8, 32, 64, 64, 3, 2, 1, 32, 32}, {8, 32, 64, 64, 2, 2, 0, 32, 32}};
    const size_t xs = (size_t)8 * 32 * 64 * 64, ys = (size_t)8 * 32 * 32 * 32;
    begin_();
    for (int b16 = 0; b16 < 2; b16++)
        for (int k = 0; k < 2; k++) {
            const ddp_cuda_pool_t *d = &pools[k];
            float *x = dev_rand(xs, 1), *dy = dev_rand(ys, 1), *y = dev_zero(ys * 4),
                  *dx = dev_zero(xs * 4), *g = dev_rand(32, 1), *bt = dev_rand(32, 1),
                  *mean = dev_rand(32, 1), *inv = dev_rand(32, 1), *dg = dev_rand(32, 1),
                  *dbt = dev_rand(32, 1);
            double *gst = dev_zero(64 * sizeof(double));
            int32_t *arg = dev_zero(ys * 4);
            ck_assert_int_eq(ddp_cuda_set_bf16_gemm(b16), 0);
            if (b16) {
                ck_assert_int_eq(ddp_cuda_act_bf16(x, xs), 0);
                ck_assert_int_eq(ddp_cuda_act_bias(x, bt), 0); /* read with it */
                ck_assert_int_eq(ddp_cuda_act_bf16(y, ys), 0);
                ck_assert_int_eq(ddp_cuda_grad_bf16(dy, ys), 0);
                ck_assert_int_eq(ddp_cuda_grad_bf16(dx, xs), 0);
            }
            int32_t *am = d->stride >= d->k ? NULL : arg;
            ck_assert_int_eq(ddp_cuda_bn_maxpool_fwd(d, x, mean, inv, g, bt, 1, y, am), 0);
            ck_assert_int_eq(ddp_cuda_bn_maxpool_bwd_stats(d, am, x, dy, mean, inv, g, bt, 1, gst,
                                                           dg, dbt, 1.0f),
                             0);
            ck_assert_int_eq(ddp_cuda_bn_maxpool_bwd_data(d, am, x, dy, mean, inv, g, bt, 1, gst,
                                                          8.0 * 64 * 64, dx),
                             0);
            if (b16) { /* the pooling alone: its output, then its gradient, in bf16 */
                ck_assert_int_eq(ddp_cuda_grad_bf16(dx, 0), 0);
                ck_assert_int_eq(ddp_cuda_maxpool_fwd(d, dx, y, arg), 0);
                ck_assert_int_eq(ddp_cuda_maxpool_bwd(d, dy, arg, dx), 0);
                ck_assert_int_eq(ddp_cuda_grad_bf16(dy, 0), 0);
            }
            ck_assert_int_eq(ddp_cuda_set_bf16_gemm(0), 0);
            void *all[] = {x, dy, y, dx, g, bt, mean, inv, dg, dbt, gst, arg};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) ddp_cuda_free(all[i]);
        }
    const char *want[] = {"bn_maxpool_fwd_kernel", "bn_maxpool_partials_kernel",
                          "bn_bwd_stats_combine_kernel", "bn_maxpool_bwd_data_kernel",
                          "maxpool_fwd_kernel", "maxpool_bwd_kernel", NULL};
    end_(want);
}
END_TEST

/* BatchNorm over [n, c, hw]: statistics, the parameters, forward, backward;
 * relu: with a ReLU fused (its mask reads gamma and beta) */
static void bn_case(int n, int c, int hw, float beta, int relu)
{
    const size_t count = (size_t)n * c * hw;
    float *x = dev_rand(count, 1), *dy = dev_rand(count, 1), *y = dev_zero(count * 4);
    float *gamma = dev_rand(c, 1), *bt = dev_rand(c, 1), *mean = dev_zero(c * 4),
          *invstd = dev_zero(c * 4), *rm = dev_zero(c * 4), *rv = dev_rand(c, 1),
          *dg = dev_rand(c, 1), *dbt = dev_rand(c, 1);
    double *stats = dev_zero(2 * c * sizeof(double)), *gstats = dev_zero(2 * c * sizeof(double));
    ck_assert_int_eq(ddp_cuda_bn_stats(n, c, hw, x, stats), 0);
    ck_assert_int_eq(
        ddp_cuda_bn_finalize(c, stats, (double)n * hw, 1e-5f, 0.1f, 1, mean, invstd, rm, rv), 0);
    ck_assert_int_eq(ddp_cuda_bn_fwd(n, c, hw, x, mean, invstd, gamma, bt, y, relu, NULL), 0);
    /* applied by a block's add: its other input read too */
    ck_assert_int_eq(ddp_cuda_bn_fwd(n, c, hw, x, mean, invstd, gamma, bt, y, relu, dy), 0);
    ck_assert_int_eq(ddp_cuda_bn_bwd_stats(n, c, hw, x, dy, mean, invstd, gstats, dg, dbt, beta,
                                           relu ? gamma : NULL, relu ? bt : NULL),
                     0);
    ck_assert_int_eq(ddp_cuda_bn_bwd_data(n, c, hw, x, dy, mean, invstd, gamma, gstats,
                                          (double)n * hw, y, relu ? bt : NULL),
                     0);
    ck_assert_int_eq(ddp_cuda_bn_eval_params(c, rm, rv, 1e-5f, mean, invstd), 0);
    ck_assert_int_eq(ddp_cuda_bn_stats_finalize(n, c, hw, x, stats, (double)n * hw, 1e-5f, 0.1f, 1,
                                                mean, invstd, rm, rv),
                     0);
    ddp_cuda_free(x), ddp_cuda_free(dy), ddp_cuda_free(y), ddp_cuda_free(gamma);
    ddp_cuda_free(bt), ddp_cuda_free(mean), ddp_cuda_free(invstd), ddp_cuda_free(rm);
    ddp_cuda_free(rv), ddp_cuda_free(dg), ddp_cuda_free(dbt), ddp_cuda_free(stats);
    ddp_cuda_free(gstats);
}

START_TEST(bn_costs)
{
    begin_();
    bn_case(16, 32, 1024, 0.0f, 0);
    bn_case(16, 32, 1024, 1.0f, 0);
    bn_case(1024, 512, 1, 0.0f, 0);
    bn_case(1024, 512, 1, 1.0f, 0);
    bn_case(16, 32, 1024, 1.0f, 1);
    bn_case(1024, 512, 1, 0.0f, 1);
    const char *want[] = {"bn_partials_kernel", "bn_stats_combine_kernel", "bn_finalize_kernel",
                          "bn_fwd_kernel", "bn_bwd_stats_combine_kernel", "bn_bwd_data_kernel",
                          "bn1d_stats_kernel", "bn1d_bwd_stats_kernel", "bn_eval_params_kernel",
                          "bn_stats_finalize_kernel", NULL};
    end_(want);
}
END_TEST

START_TEST(loss_costs)
{
    begin_();
    double *acc = dev_zero(2 * sizeof(double));
    const int shapes[2][2] = {{256, 4096}, {65536, 10}}; /* a block, a warp per row */
    for (int s = 0; s < 2; s++) {
        const int n = shapes[s][0], k = shapes[s][1];
        float *z = dev_rand((size_t)n * k, 3), *dz = dev_zero((size_t)n * k * 4);
        int32_t *lab = dev_zero((size_t)n * 4), *hl = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) hl[i] = (int32_t)((i * 7) % k);
        ck_assert_int_eq(ddp_cuda_upload(lab, hl, (size_t)n * 4), 0);
        ck_assert_int_eq(ddp_cuda_xent(n, k, z, lab, 0.1f, 1.0f / n, dz, acc), 0);
        ck_assert_int_eq(ddp_cuda_xent(n, k, z, lab, 0.0f, 1.0f / n, NULL, acc), 0);
        free(hl);
        ddp_cuda_free(z), ddp_cuda_free(dz), ddp_cuda_free(lab);
    }
    const int n = 4096, k = 256;
    float *p = dev_rand((size_t)n * k, 1), *t = dev_rand((size_t)n * k, 1),
          *dp = dev_zero((size_t)n * k * 4);
    ck_assert_int_eq(ddp_cuda_mse(n, k, p, t, 1.0f / n, dp, acc), 0);
    const char *want[] = {"xent_k<true>", "xent_k<false>", "add_partials_k", "mse_k", NULL};
    end_(want);
    ddp_cuda_free(p), ddp_cuda_free(t), ddp_cuda_free(dp), ddp_cuda_free(acc);
}
END_TEST

START_TEST(optim_costs)
{
    const size_t count = (size_t)1 << 20;
    begin_();
    float *p = dev_rand(count, 1), *g = dev_rand(count, 1), *m = dev_zero(count * 4),
          *v = dev_zero(count * 4);
    ck_assert_int_eq(ddp_cuda_sgd_step(count, p, g, NULL, 0.1f, 0.0f, 0, 1e-4f, 0), 0);
    ck_assert_int_eq(ddp_cuda_sgd_step(count, p, g, m, 0.1f, 0.9f, 0, 1e-4f, 1), 0);
    ck_assert_int_eq(ddp_cuda_sgd_step(count, p, g, m, 0.1f, 0.9f, 1, 1e-4f, 0), 0);
    ck_assert_int_eq(ddp_cuda_adamw_step(count, p, g, m, v, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1),
                     0);
    /* under bf16, with p the parameters: each also writes the mirror's copy */
    ck_assert_int_eq(ddp_cuda_set_bf16_gemm(1), 0);
    ck_assert_int_eq(ddp_cuda_bf16_params(p, count), 0);
    ck_assert_int_eq(ddp_cuda_sgd_step(count, p, g, NULL, 0.1f, 0.0f, 0, 1e-4f, 0), 0);
    ck_assert_int_eq(ddp_cuda_sgd_step(count, p, g, m, 0.1f, 0.9f, 1, 1e-4f, 0), 0);
    ck_assert_int_eq(ddp_cuda_adamw_step(count, p, g, m, v, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 2),
                     0);
    ck_assert_int_eq(ddp_cuda_bf16_params(NULL, 0), 0);
    ck_assert_int_eq(ddp_cuda_set_bf16_gemm(0), 0);
    double ss;
    int finite;
    ck_assert_int_eq(ddp_cuda_sumsq(count, g, &ss), 0);
    ck_assert_int_eq(ddp_cuda_all_finite(count, g, &finite), 0);
    ck_assert_int_eq(finite, 1);
    const char *want[] = {"sgd_plain_k", "sgd_mom_k", "adamw_k", "sumsq_k", "sum_partials_k",
                          "all_finite_k", NULL};
    end_(want);
    ddp_cuda_free(p), ddp_cuda_free(g), ddp_cuda_free(m), ddp_cuda_free(v);
}
END_TEST

Suite *test_suite(void)
{
#if !defined(__x86_64__)
    fprintf(stderr, "check_cuda_cost: the emulation's cost check needs x86-64; skipped\n");
    exit(77);
#endif
    Suite *s = suite_create("cuda_cost");
    TCase *t = tcase_create("declared");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, elementwise_costs);
    tcase_add_test(t, linear_costs);
    tcase_add_test(t, conv_costs);
    tcase_add_test(t, pool_costs);
    tcase_add_test(t, bn_maxpool_costs);
    tcase_add_test(t, bn_costs);
    tcase_add_test(t, loss_costs);
    tcase_add_test(t, optim_costs);
    suite_add_tcase(s, t);
    return s;
}
