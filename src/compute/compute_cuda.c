/* compute_cuda.c -- the "cuda" compute backend (compute_cuda.h): compute.h's
 * ops table over the launchers of cuda/ddp_cuda.h.  The launchers queue
 * their work on the compute stream; a failed one records a sticky status
 * with ddp_fail ("cuda: " + ddp_cuda_last_error()) that `check` returns.
 * C11 without CUDA headers: it is compiled into the CUDA build and into
 * the emulation library (cuda/Makefile.am).
 *
 * DDP_CUDA_MODEL=1 in the environment: the process keeps the cost log of
 * each training step (ddp_cuda_cost_steps) and prints, on stderr at exit,
 * the model of the last complete one on an H200 (gpu_model.h). */
#include "compute_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_cuda.h"
#include "activity.h"
#include "gpu_model.h"

static ddp_status_t cuda_status_ = DDP_OK;
static char cuda_pci_[32];

/* A launcher returned rc: record the first failure (kind s). */
static void cuda_rc_kind_(int rc, ddp_status_t s)
{
    if (rc == 0 || cuda_status_ != DDP_OK) return;
    cuda_status_ = s;
    ddp_fail(s, "cuda: %s", ddp_cuda_last_error());
}

static void cuda_rc_(int rc)
{
    cuda_rc_kind_(rc, DDP_ERR_DEVICE);
}

/* DDP_CUDA_MODEL: the model of the last complete training step, at exit */
static void cuda_model_at_exit_(void)
{
    const ddp_cuda_cost_t *e;
    long steps = 0;
    size_t n = ddp_cuda_cost_last_step(&e, &steps);
    if (n == 0) {
        fprintf(stderr, "# DDP_CUDA_MODEL: no training step completed (a step completes when "
                        "the next one starts: run 2 steps or more); no model\n");
        return;
    }
    gpu_model_t m;
    gpu_model_build(e, n, &gpu_spec_h200, &m);
    double peak = gpu_spec_h200.peak_fp32;
    for (size_t i = 0; i < n; i++)
        if (e[i].kind == DDP_COST_GEMM && e[i].math == DDP_MATH_BF16)
            peak = gpu_spec_h200.peak_bf16;
        else if (e[i].kind == DDP_COST_GEMM && e[i].math == DDP_MATH_TF32 &&
                 peak < gpu_spec_h200.peak_tf32)
            peak = gpu_spec_h200.peak_tf32;
    char what[96];
    snprintf(what, sizeof what, "training step %ld of this process (DDP_CUDA_MODEL)", steps);
    gpu_model_print(stderr, &m, &gpu_spec_h200, what, peak);
}

static ddp_status_t cuda_init(int local_rank, int local_size, char *describe, size_t n)
{
    (void)local_size; /* start-up compares the PCI ids of a node's ranks itself */
    int count = ddp_cuda_device_count();
    if (count <= 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return ddp_fail(DDP_ERR_DEVICE,
                        "cuda: no GPU visible (CUDA_VISIBLE_DEVICES=%s); check "
                        "CUDA_VISIBLE_DEVICES and nvidia-smi, or run with --device cpu",
                        vis ? vis : "(unset)");
    }
    int dev = (local_rank < 0 ? 0 : local_rank) % count;
    if (ddp_cuda_bound_device() < 0 && ddp_cuda_init(dev) != 0)
        return ddp_fail(DDP_ERR_DEVICE, "cuda: binding GPU %d of %d (local rank %d): %s", dev,
                        count, local_rank, ddp_cuda_last_error());
    dev = ddp_cuda_bound_device();
    ddp_cuda_device_info_t info;
    if (ddp_cuda_device_info(dev, &info) != 0)
        return ddp_fail(DDP_ERR_DEVICE, "cuda: querying GPU %d: %s", dev, ddp_cuda_last_error());
    snprintf(cuda_pci_, sizeof cuda_pci_, "%s", info.pci);
    static int model_ = 0;
    const char *model = getenv("DDP_CUDA_MODEL");
    if (!model_ && model && *model && strcmp(model, "0") != 0) {
        model_ = 1;
        ddp_cuda_cost_steps(1);
        atexit(cuda_model_at_exit_);
    }
    /* whether cuBLASLt runs the dense layers' epilogues, or a pass after each
     * GEMM; whether cuDNN runs the convolutions, or im2col and GEMMs */
    if (describe && n)
        snprintf(describe, n, "cuda: GPU %d %s (%s, %.1f GiB), %s, %s", dev, info.name, info.pci,
                 (double)info.mem_total / (1024.0 * 1024.0 * 1024.0),
                 ddp_cuda_lt_loaded() ? "cuBLASLt epilogues" : "no cuBLASLt (epilogue passes)",
                 ddp_cuda_dnn_loaded() ? "cuDNN convolutions" : "no cuDNN (im2col convolutions)");
    return DDP_OK;
}

static ddp_status_t cuda_check(void)
{
    return cuda_status_;
}

static const char *cuda_device_id(void)
{
    return cuda_pci_;
}

/* A failed query is recorded like an op's failure (check returns it too). */
static ddp_status_t cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    int rc = ddp_cuda_mem_info(free_bytes, total_bytes);
    if (rc == 0) return DDP_OK;
    cuda_rc_(rc);
    return ddp_fail(DDP_ERR_DEVICE, "cuda: %s", ddp_cuda_last_error());
}

/* ---- memory and ordering ------------------------------------------------ */

static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    int rc = ddp_cuda_malloc(&p, bytes);
    if (rc != 0) {
        int oom = strstr(ddp_cuda_last_error(), "out of memory") != NULL;
        cuda_rc_kind_(rc, oom ? DDP_ERR_NOMEM : DDP_ERR_DEVICE);
        return NULL;
    }
    return p;
}

static void cuda_free(void *p)
{
    cuda_rc_(ddp_cuda_free(p));
}

/* A launcher that makes the host wait for the device (activity.h). */
#define DEVICE_WAIT(call)                                                                          \
    do {                                                                                           \
        activity_device_wait_begin();                                                              \
        cuda_rc_(call);                                                                            \
        activity_device_wait_end();                                                                \
    } while (0)

static void cuda_upload(void *dst, const void *host_src, size_t bytes)
{
    DEVICE_WAIT(ddp_cuda_upload(dst, host_src, bytes));
}

static void cuda_download(void *host_dst, const void *src, size_t bytes)
{
    DEVICE_WAIT(ddp_cuda_download(host_dst, src, bytes));
}

static void cuda_download_async(void *host_dst, const void *src, size_t bytes,
                                compute_event_t *done)
{
    cuda_rc_(ddp_cuda_download_async(host_dst, src, bytes, (ddp_cuda_event_t *)done));
}

static int cuda_bf16_params(const float *params, size_t count)
{
    int rc = ddp_cuda_bf16_params(params, count);
    cuda_rc_(rc);
    return rc;
}

static void cuda_params_written(const float *p, size_t count)
{
    ddp_cuda_params_written(p, count);
}

static int cuda_conv_input_bf16(void)
{
    return ddp_cuda_dnn_loaded();
}

static int cuda_conv_acts_bf16(void)
{
    return ddp_cuda_conv_acts_bf16();
}

static int cuda_act_bias(float *y, const float *b)
{
    int rc = ddp_cuda_act_bias(y, b);
    cuda_rc_(rc);
    return rc;
}

static int cuda_grad_bf16(float *g, size_t count)
{
    int rc = ddp_cuda_grad_bf16(g, count);
    cuda_rc_(rc);
    return rc;
}

static int cuda_act_copy16(float *y, size_t count)
{
    int rc = ddp_cuda_act_copy16(y, count);
    cuda_rc_(rc);
    return rc;
}

static int cuda_act_bf16(float *y, size_t count)
{
    int rc = ddp_cuda_act_bf16(y, count);
    cuda_rc_(rc);
    return rc;
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    cuda_rc_(ddp_cuda_copy(dst, src, bytes));
}

static void cuda_zero(void *p, size_t bytes)
{
    cuda_rc_(ddp_cuda_zero(p, bytes));
}

static void cuda_sync(void)
{
    DEVICE_WAIT(ddp_cuda_sync());
}

static void cuda_upload_async(void *dst, const void *host_src, size_t bytes,
                              const compute_event_t *reuse, compute_event_t *done)
{
    cuda_rc_(ddp_cuda_upload_async(dst, host_src, bytes, (const ddp_cuda_event_t *)reuse,
                                   (ddp_cuda_event_t *)done));
}

/* Pinned host memory; running out of it is no device failure (the loader
 * falls back to malloc), so it is not recorded for `check`. */
static void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    return ddp_cuda_host_alloc(&p, bytes) == 0 ? p : NULL;
}

static void cuda_host_free(void *p)
{
    cuda_rc_(ddp_cuda_host_free(p));
}

/* compute_event_t is the launchers' event */
static compute_event_t *cuda_event_create(void)
{
    ddp_cuda_event_t *e = NULL;
    int rc = ddp_cuda_event_create(&e);
    if (rc != 0) {
        cuda_rc_(rc);
        return NULL;
    }
    return (compute_event_t *)e;
}

static void cuda_event_destroy(compute_event_t *e)
{
    cuda_rc_(ddp_cuda_event_destroy((ddp_cuda_event_t *)e));
}

static void cuda_event_record(compute_event_t *e)
{
    cuda_rc_(ddp_cuda_event_record((ddp_cuda_event_t *)e));
}

static void cuda_event_wait(compute_event_t *e)
{
    DEVICE_WAIT(ddp_cuda_event_wait((ddp_cuda_event_t *)e));
}

/* ---- dense layers and convolution ---------------------------------------- */

static void cuda_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                            float *y, int relu)
{
    cuda_rc_(ddp_cuda_linear_fwd(n, in, out, x, w, b, y, relu));
}

static void cuda_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                            float *dx, float *dw, float *db, float beta, const float *relu_y,
                            void *ws)
{
    cuda_rc_(ddp_cuda_linear_bwd(n, in, out, x, w, dy, dx, dw, db, beta, relu_y, ws));
}

static ddp_cuda_conv_t cuda_conv_(const conv_dims_t *d)
{
    ddp_cuda_conv_t c = {d->n, d->c, d->h, d->w, d->oc, d->k, d->stride, d->pad, d->oh, d->ow};
    return c;
}

static size_t cuda_conv_ws_bytes(const conv_dims_t *d)
{
    ddp_cuda_conv_t c = cuda_conv_(d);
    return ddp_cuda_conv_ws_bytes(&c);
}

static int cuda_conv_group_samples(const conv_dims_t *d)
{
    ddp_cuda_conv_t c = cuda_conv_(d);
    return ddp_cuda_conv_group_samples(&c);
}

static void cuda_conv_fwd(const conv_dims_t *d, const float *x, const float *w, const float *b,
                          float *y, void *ws)
{
    ddp_cuda_conv_t c = cuda_conv_(d);
    cuda_rc_(ddp_cuda_conv_fwd(&c, x, w, b, y, ws));
}

static void cuda_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, float *db, float beta, void *ws)
{
    ddp_cuda_conv_t c = cuda_conv_(d);
    cuda_rc_(ddp_cuda_conv_bwd(&c, x, w, dy, dx, dw, db, beta, ws));
}

/* ---- pooling ------------------------------------------------------------- */

static ddp_cuda_pool_t cuda_pool_(const pool_dims_t *d)
{
    ddp_cuda_pool_t p = {d->n, d->c, d->h, d->w, d->k, d->stride, d->pad, d->oh, d->ow};
    return p;
}

static void cuda_maxpool_fwd(const pool_dims_t *d, const float *x, float *y, int32_t *argmax)
{
    ddp_cuda_pool_t p = cuda_pool_(d);
    cuda_rc_(ddp_cuda_maxpool_fwd(&p, x, y, argmax));
}

static void cuda_maxpool_bwd(const pool_dims_t *d, const float *dy, const int32_t *argmax,
                             float *dx)
{
    ddp_cuda_pool_t p = cuda_pool_(d);
    cuda_rc_(ddp_cuda_maxpool_bwd(&p, dy, argmax, dx));
}

static void cuda_avgpool_fwd(const pool_dims_t *d, const float *x, float *y)
{
    ddp_cuda_pool_t p = cuda_pool_(d);
    cuda_rc_(ddp_cuda_avgpool_fwd(&p, x, y));
}

static void cuda_avgpool_bwd(const pool_dims_t *d, const float *dy, float *dx)
{
    ddp_cuda_pool_t p = cuda_pool_(d);
    cuda_rc_(ddp_cuda_avgpool_bwd(&p, dy, dx));
}

static void cuda_gap_fwd(int n, int c, int hw, const float *x, float *y)
{
    cuda_rc_(ddp_cuda_gap_fwd(n, c, hw, x, y));
}

static void cuda_gap_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    cuda_rc_(ddp_cuda_gap_bwd(n, c, hw, dy, dx));
}

/* ---- batch normalisation --------------------------------------------------- */

static void cuda_bn_stats(int n, int c, int hw, const float *x, double *stats)
{
    cuda_rc_(ddp_cuda_bn_stats(n, c, hw, x, stats));
}

static void cuda_bn_finalize(int c, const double *stats, double count, float eps, float momentum,
                             int update_running, float *mean, float *invstd, float *running_mean,
                             float *running_var)
{
    cuda_rc_(ddp_cuda_bn_finalize(c, stats, count, eps, momentum, update_running, mean, invstd,
                                  running_mean, running_var));
}

static void cuda_bn_stats_finalize(int n, int c, int hw, const float *x, double *stats,
                                   double count, float eps, float momentum, int update_running,
                                   float *mean, float *invstd, float *running_mean,
                                   float *running_var)
{
    cuda_rc_(ddp_cuda_bn_stats_finalize(n, c, hw, x, stats, count, eps, momentum, update_running,
                                        mean, invstd, running_mean, running_var));
}

static void cuda_bn_eval_params(int c, const float *running_mean, const float *running_var,
                                float eps, float *mean, float *invstd)
{
    cuda_rc_(ddp_cuda_bn_eval_params(c, running_mean, running_var, eps, mean, invstd));
}

static void cuda_bn_fwd(int n, int c, int hw, const float *x, const float *mean,
                        const float *invstd, const float *gamma, const float *beta_, float *y,
                        int relu, const float *res)
{
    cuda_rc_(ddp_cuda_bn_fwd(n, c, hw, x, mean, invstd, gamma, beta_, y, relu, res));
}

static void cuda_bn_bwd_stats(int n, int c, int hw, const float *x, const float *dy,
                              const float *mean, const float *invstd, double *gstats, float *dgamma,
                              float *dbeta, float beta, const float *relu_gamma,
                              const float *relu_beta)
{
    cuda_rc_(ddp_cuda_bn_bwd_stats(n, c, hw, x, dy, mean, invstd, gstats, dgamma, dbeta, beta,
                                   relu_gamma, relu_beta));
}

static void cuda_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy,
                             const float *mean, const float *invstd, const float *gamma,
                             const double *gstats, double count, float *dx, const float *relu_beta)
{
    cuda_rc_(
        ddp_cuda_bn_bwd_data(n, c, hw, x, dy, mean, invstd, gamma, gstats, count, dx, relu_beta));
}

static int cuda_bn_maxpool(void)
{
    return ddp_cuda_bn_maxpool();
}

static void cuda_bn_maxpool_fwd(const pool_dims_t *d, const float *x, const float *mean,
                                const float *invstd, const float *gamma, const float *beta_,
                                int relu, float *y, int32_t *argmax)
{
    ddp_cuda_pool_t p = cuda_pool_(d);
    cuda_rc_(ddp_cuda_bn_maxpool_fwd(&p, x, mean, invstd, gamma, beta_, relu, y, argmax));
}

static void cuda_bn_maxpool_bwd_stats(const pool_dims_t *d, const int32_t *argmax,
                                      const float *x, const float *dy, const float *mean,
                                      const float *invstd, const float *gamma,
                                      const float *beta_, int relu, double *gstats,
                                      float *dgamma, float *dbeta, float beta)
{
    ddp_cuda_pool_t p = cuda_pool_(d);
    cuda_rc_(ddp_cuda_bn_maxpool_bwd_stats(&p, argmax, x, dy, mean, invstd, gamma, beta_, relu,
                                           gstats, dgamma, dbeta, beta));
}

static void cuda_bn_maxpool_bwd_data(const pool_dims_t *d, const int32_t *argmax,
                                     const float *x, const float *dy, const float *mean,
                                     const float *invstd, const float *gamma,
                                     const float *beta_, int relu, const double *gstats,
                                     double count, float *dx)
{
    ddp_cuda_pool_t p = cuda_pool_(d);
    cuda_rc_(ddp_cuda_bn_maxpool_bwd_data(&p, argmax, x, dy, mean, invstd, gamma, beta_, relu,
                                          gstats, count, dx));
}

/* ---- elementwise, losses, optimizers, reductions ------------------------------ */

static void cuda_add(size_t count, const float *a, const float *b, float *y, int relu)
{
    cuda_rc_(ddp_cuda_add(count, a, b, y, relu));
}

static void cuda_relu_fwd(size_t count, const float *x, float *y)
{
    cuda_rc_(ddp_cuda_relu_fwd(count, x, y));
}

static void cuda_relu_bwd(size_t count, const float *x, const float *dy, float *dx,
                          const float *dy2)
{
    cuda_rc_(ddp_cuda_relu_bwd(count, x, dy, dx, dy2));
}

static void cuda_gelu_fwd(size_t count, const float *x, float *y)
{
    cuda_rc_(ddp_cuda_gelu_fwd(count, x, y));
}

static void cuda_gelu_bwd(size_t count, const float *x, const float *dy, float *dx)
{
    cuda_rc_(ddp_cuda_gelu_bwd(count, x, dy, dx));
}

static void cuda_dropout_fwd(int n, size_t features, const float *x, float *y, float p,
                             uint64_t seed, uint64_t step, uint32_t layer,
                             const int64_t *sample_idx)
{
    cuda_rc_(ddp_cuda_dropout_fwd(n, features, x, y, p, seed, step, layer, sample_idx));
}

static void cuda_dropout_bwd(int n, size_t features, const float *dy, float *dx, float p,
                             uint64_t seed, uint64_t step, uint32_t layer,
                             const int64_t *sample_idx)
{
    cuda_rc_(ddp_cuda_dropout_bwd(n, features, dy, dx, p, seed, step, layer, sample_idx));
}

static void cuda_xent(int n, int classes, const float *logits, const int32_t *labels,
                      float smoothing, float grad_scale, float *dlogits, double *acc)
{
    cuda_rc_(ddp_cuda_xent(n, classes, logits, labels, smoothing, grad_scale, dlogits, acc));
}

static void cuda_xent_dense(int n, int classes, const float *logits, const int32_t *labels,
                            float smoothing, float grad_scale, float *dlogits, double *acc)
{
    cuda_rc_(
        ddp_cuda_xent_dense(n, classes, logits, labels, smoothing, grad_scale, dlogits, acc));
}

static void cuda_mse(int n, int k, const float *pred, const float *target, float grad_scale,
                     float *dpred, double *acc)
{
    cuda_rc_(ddp_cuda_mse(n, k, pred, target, grad_scale, dpred, acc));
}

static void cuda_sgd_step(size_t count, float *p, const float *g, float *buf, float lr,
                          float momentum, int nesterov, float wd, int first)
{
    cuda_rc_(ddp_cuda_sgd_step(count, p, g, buf, lr, momentum, nesterov, wd, first));
}

static void cuda_adamw_step(size_t count, float *p, const float *g, float *m, float *v, float lr,
                            float beta1, float beta2, float eps, float wd, int64_t t)
{
    cuda_rc_(ddp_cuda_adamw_step(count, p, g, m, v, lr, beta1, beta2, eps, wd, t));
}

static void cuda_scale(size_t count, float *x, float alpha)
{
    cuda_rc_(ddp_cuda_scale(count, x, alpha));
}

static double cuda_sumsq(size_t count, const float *x)
{
    double r = 0;
    int rc;
    DEVICE_WAIT(rc = ddp_cuda_sumsq(count, x, &r));
    return rc == 0 ? r : NAN;
}

static void cuda_sumsq_many(int n, const float *const *x, const size_t *count, double *out)
{
    int rc;
    DEVICE_WAIT(rc = ddp_cuda_sumsq_many(n, x, count, out));
    for (int i = 0; rc != 0 && i < n; i++) out[i] = NAN;
}

static int cuda_all_finite(size_t count, const float *x)
{
    int r = 0;
    int rc;
    DEVICE_WAIT(rc = ddp_cuda_all_finite(count, x, &r));
    return rc == 0 ? r : 0;
}

static void cuda_to_half(size_t count, const float *x, uint16_t *h, int bf16)
{
    cuda_rc_(ddp_cuda_to_half(count, x, h, bf16));
}

static void cuda_from_half(size_t count, const uint16_t *h, float *x, int bf16)
{
    cuda_rc_(ddp_cuda_from_half(count, h, x, bf16));
}

const compute_ops_t compute_cuda_ops = {
    .name = "cuda",
    .mem_kind = DDP_MEM_DEVICE,
    .init = cuda_init,
    .check = cuda_check,
    .device_id = cuda_device_id,
    .device_count = ddp_cuda_device_count,
    .set_bf16 = ddp_cuda_set_bf16_gemm,
    .bf16_params = cuda_bf16_params,
    .params_written = cuda_params_written,
    .act_bf16 = cuda_act_bf16,
    .conv_input_bf16 = cuda_conv_input_bf16,
    .conv_acts_bf16 = cuda_conv_acts_bf16,
    .act_bias = cuda_act_bias,
    .grad_bf16 = cuda_grad_bf16,
    .act_copy16 = cuda_act_copy16,
    .set_tf32 = ddp_cuda_set_tf32,
    .range_start = ddp_cuda_range_start,
    .range_end = ddp_cuda_range_end,
    .mem_info = cuda_mem_info,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .download_async = cuda_download_async,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .sync = cuda_sync,
    .upload_async = cuda_upload_async,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .linear_fwd = cuda_linear_fwd,
    .linear_bwd = cuda_linear_bwd,
    .linear_ws_bytes = ddp_cuda_linear_ws_bytes,
    .conv_ws_bytes = cuda_conv_ws_bytes,
    .conv_group_samples = cuda_conv_group_samples,
    .conv_fwd = cuda_conv_fwd,
    .conv_bwd = cuda_conv_bwd,
    .maxpool_fwd = cuda_maxpool_fwd,
    .maxpool_bwd = cuda_maxpool_bwd,
    .avgpool_fwd = cuda_avgpool_fwd,
    .avgpool_bwd = cuda_avgpool_bwd,
    .gap_fwd = cuda_gap_fwd,
    .gap_bwd = cuda_gap_bwd,
    .bn_stats = cuda_bn_stats,
    .bn_finalize = cuda_bn_finalize,
    .bn_stats_finalize = cuda_bn_stats_finalize,
    .bn_eval_params = cuda_bn_eval_params,
    .bn_fwd = cuda_bn_fwd,
    .bn_bwd_stats = cuda_bn_bwd_stats,
    .bn_bwd_data = cuda_bn_bwd_data,
    .bn_maxpool = cuda_bn_maxpool,
    .bn_maxpool_fwd = cuda_bn_maxpool_fwd,
    .bn_maxpool_bwd_stats = cuda_bn_maxpool_bwd_stats,
    .bn_maxpool_bwd_data = cuda_bn_maxpool_bwd_data,
    .add = cuda_add,
    .relu_fwd = cuda_relu_fwd,
    .relu_bwd = cuda_relu_bwd,
    .gelu_fwd = cuda_gelu_fwd,
    .gelu_bwd = cuda_gelu_bwd,
    .dropout_fwd = cuda_dropout_fwd,
    .dropout_bwd = cuda_dropout_bwd,
    .xent = cuda_xent,
    .xent_dense = cuda_xent_dense,
    .mse = cuda_mse,
    .sgd_step = cuda_sgd_step,
    .adamw_step = cuda_adamw_step,
    .scale = cuda_scale,
    .sumsq = cuda_sumsq,
    .sumsq_many = cuda_sumsq_many,
    .all_finite = cuda_all_finite,
    .to_half = cuda_to_half,
    .from_half = cuda_from_half,
};
