/* compute_mirror.c -- host-pointer ops over a device backend, for the tests
 * (compute_mirror.h). */
#include "compute_mirror.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute_cuda.h"
#include "ddp_cuda.h"
#include "tests.h"

static const compute_ops_t *D; /* the device backend */

/* The device buffers of the op being run: one per distinct host pointer. */
typedef struct mbuf {
    const void *host;
    void *dev;
    size_t bytes;
    int out;
} mbuf_t;
static mbuf_t mb_[24];
static int nmb_;

static size_t nz_(long long v)
{
    return v > 0 ? (size_t)v : 0;
}

static void check_(const char *op)
{
    ddp_status_t s = D->check ? D->check() : DDP_OK;
    ck_assert_msg(s == DDP_OK, "%s on the %s backend failed (%s): %s", op, D->name,
                  ddp_status_name(s), ddp_error_message());
}

static void *dev_alloc_(size_t bytes, const char *op)
{
    void *d = D->alloc(bytes);
    ck_assert_msg(d != NULL, "%s: device alloc of %zu bytes failed: %s", op, bytes,
                  ddp_error_message());
    return d;
}

static void begin_(void)
{
    nmb_ = 0; /* a failed op before left its buffers: leaked, the test failed */
}

/* The device copy of host buffer h (NULL for NULL), uploaded. */
static void *reg_(const void *h, size_t bytes, int out)
{
    if (!h) return NULL;
    for (int i = 0; i < nmb_; i++)
        if (mb_[i].host == h) {
            ck_assert_msg(bytes <= mb_[i].bytes, "mirror: aliased arguments of %zu and %zu bytes",
                          mb_[i].bytes, bytes);
            mb_[i].out |= out;
            return mb_[i].dev;
        }
    ck_assert_int_lt(nmb_, (int)(sizeof mb_ / sizeof mb_[0]));
    mbuf_t *m = &mb_[nmb_++];
    m->host = h, m->bytes = bytes, m->out = out;
    m->dev = dev_alloc_(bytes, "mirror");
    if (bytes) D->upload(m->dev, h, bytes);
    return m->dev;
}

#define IN(h, bytes)  reg_((h), (bytes), 0)
#define OUT(h, bytes) reg_((h), (bytes), 1)

/* Download the outputs, free the buffers, fail on a device error. */
static void done_(const char *op)
{
    for (int i = 0; i < nmb_; i++)
        if (mb_[i].out && mb_[i].bytes) D->download((void *)mb_[i].host, mb_[i].dev, mb_[i].bytes);
    for (int i = 0; i < nmb_; i++) D->free(mb_[i].dev);
    nmb_ = 0;
    check_(op);
}

/* ---- memory: host memory, every op through the device ------------------- */

static ddp_status_t m_init(int local_rank, int local_size, char *describe, size_t n)
{
    (void)local_rank, (void)local_size;
    if (describe && n) snprintf(describe, n, "mirror of %s", D->name);
    return DDP_OK;
}

static ddp_status_t m_check(void)
{
    return D->check ? D->check() : DDP_OK;
}

static void *m_alloc(size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return NULL;
    memset(h, 0x7f, bytes ? bytes : 1); /* the device's zero fill must show */
    void *d = dev_alloc_(bytes, "alloc");
    if (bytes) D->download(h, d, bytes);
    D->free(d);
    check_("alloc");
    return h;
}

static void m_free(void *p)
{
    free(p);
}

static void m_upload(void *dst, const void *src, size_t bytes)
{
    void *d = dev_alloc_(bytes, "upload");
    D->upload(d, src, bytes);
    D->download(dst, d, bytes);
    D->free(d);
    check_("upload");
}

static void m_copy(void *dst, const void *src, size_t bytes)
{
    void *a = dev_alloc_(bytes, "copy"), *b = dev_alloc_(bytes, "copy");
    D->upload(a, src, bytes);
    D->copy(b, a, bytes);
    D->download(dst, b, bytes);
    D->free(a), D->free(b);
    check_("copy");
}

static void m_zero(void *p, size_t bytes)
{
    void *d = dev_alloc_(bytes, "zero");
    D->upload(d, p, bytes);
    D->zero(d, bytes);
    D->download(p, d, bytes);
    D->free(d);
    check_("zero");
}

static void m_sync(void)
{
    D->sync();
    check_("sync");
}

static void m_upload_async(void *dst, const void *src, size_t bytes, const compute_event_t *reuse,
                           compute_event_t *done)
{
    void *d = dev_alloc_(bytes, "upload_async");
    D->upload_async(d, src, bytes, reuse, done);
    D->download(dst, d, bytes); /* waits for the work before it, the copy included */
    D->free(d);
    check_("upload_async");
}

/* Through the device's download_async into the caller's buffer (pageable
 * here: the device's copy is then complete when it returns), waited for
 * before the device buffer is freed. */
static void m_download_async(void *dst, const void *src, size_t bytes, compute_event_t *done)
{
    void *d = dev_alloc_(bytes, "download_async");
    D->upload(d, src, bytes);
    D->download_async(dst, d, bytes, done);
    if (done) D->event_wait(done);
    D->sync();
    D->free(d);
    check_("download_async");
}

static compute_event_t *m_event_create(void)
{
    compute_event_t *e = D->event_create();
    check_("event_create");
    return e;
}

static void m_event_destroy(compute_event_t *e)
{
    D->event_destroy(e);
    check_("event_destroy");
}

static void m_event_record(compute_event_t *e)
{
    D->event_record(e);
    check_("event_record");
}

static void m_event_wait(compute_event_t *e)
{
    D->event_wait(e);
    check_("event_wait");
}

/* ---- layers ---------------------------------------------------------------- */

#define F4 sizeof(float)

static void m_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                         float *y, int relu)
{
    begin_();
    size_t N = nz_(n), I = nz_(in), O = nz_(out);
    D->linear_fwd(n, in, out, IN(x, N * I * F4), IN(w, O * I * F4), IN(b, O * F4),
                  OUT(y, N * O * F4), relu);
    done_("linear_fwd");
}

/* The caller's workspace is host memory: the device op gets its own. */
static void m_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                         float *dx, float *dw, float *db, float beta, const float *relu_y,
                         void *ws)
{
    (void)ws;
    begin_();
    size_t N = nz_(n), I = nz_(in), O = nz_(out);
    void *dws = relu_y ? dev_alloc_(D->linear_ws_bytes(n, out), "linear_bwd") : NULL;
    D->linear_bwd(n, in, out, IN(x, N * I * F4), IN(w, O * I * F4), IN(dy, N * O * F4),
                  OUT(dx, N * I * F4), OUT(dw, O * I * F4), OUT(db, O * F4), beta,
                  IN(relu_y, N * O * F4), dws);
    done_("linear_bwd");
    if (dws) D->free(dws);
}

static size_t conv_x_(const conv_dims_t *d)
{
    return nz_(d->n) * nz_(d->c) * nz_(d->h) * nz_(d->w) * F4;
}
static size_t conv_y_(const conv_dims_t *d)
{
    return nz_(d->n) * nz_(d->oc) * nz_(d->oh) * nz_(d->ow) * F4;
}
static size_t conv_w_(const conv_dims_t *d)
{
    return nz_(d->oc) * nz_(d->c) * nz_(d->k) * nz_(d->k) * F4;
}

static size_t m_linear_ws_bytes(int n, int out)
{
    return D->linear_ws_bytes(n, out);
}

static size_t m_conv_ws_bytes(const conv_dims_t *d)
{
    return D->conv_ws_bytes(d);
}

/* The caller's workspace is host memory: the device op gets its own. */
static void m_conv_fwd(const conv_dims_t *d, const float *x, const float *w, const float *b,
                       float *y, void *ws)
{
    (void)ws;
    begin_();
    void *dws = dev_alloc_(D->conv_ws_bytes(d), "conv_fwd");
    D->conv_fwd(d, IN(x, conv_x_(d)), IN(w, conv_w_(d)), IN(b, nz_(d->oc) * F4), OUT(y, conv_y_(d)),
                dws);
    done_("conv_fwd");
    D->free(dws);
}

static void m_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, float beta, void *ws)
{
    (void)ws;
    begin_();
    void *dws = dev_alloc_(D->conv_ws_bytes(d), "conv_bwd");
    D->conv_bwd(d, IN(x, conv_x_(d)), IN(w, conv_w_(d)), IN(dy, conv_y_(d)), OUT(dx, conv_x_(d)),
                OUT(dw, conv_w_(d)), OUT(db, nz_(d->oc) * F4), beta, dws);
    done_("conv_bwd");
    D->free(dws);
}

static size_t pool_x_(const pool_dims_t *d)
{
    return nz_(d->n) * nz_(d->c) * nz_(d->h) * nz_(d->w);
}
static size_t pool_y_(const pool_dims_t *d)
{
    return nz_(d->n) * nz_(d->c) * nz_(d->oh) * nz_(d->ow);
}

static void m_maxpool_fwd(const pool_dims_t *d, const float *x, float *y, int32_t *argmax)
{
    begin_();
    D->maxpool_fwd(d, IN(x, pool_x_(d) * F4), OUT(y, pool_y_(d) * F4),
                   OUT(argmax, pool_y_(d) * sizeof(int32_t)));
    done_("maxpool_fwd");
}

static void m_maxpool_bwd(const pool_dims_t *d, const float *dy, const int32_t *argmax, float *dx)
{
    begin_();
    D->maxpool_bwd(d, IN(dy, pool_y_(d) * F4), IN(argmax, pool_y_(d) * sizeof(int32_t)),
                   OUT(dx, pool_x_(d) * F4));
    done_("maxpool_bwd");
}

static void m_avgpool_fwd(const pool_dims_t *d, const float *x, float *y)
{
    begin_();
    D->avgpool_fwd(d, IN(x, pool_x_(d) * F4), OUT(y, pool_y_(d) * F4));
    done_("avgpool_fwd");
}

static void m_avgpool_bwd(const pool_dims_t *d, const float *dy, float *dx)
{
    begin_();
    D->avgpool_bwd(d, IN(dy, pool_y_(d) * F4), OUT(dx, pool_x_(d) * F4));
    done_("avgpool_bwd");
}

static void m_gap_fwd(int n, int c, int hw, const float *x, float *y)
{
    begin_();
    size_t P = nz_(n) * nz_(c);
    D->gap_fwd(n, c, hw, IN(x, P * nz_(hw) * F4), OUT(y, P * F4));
    done_("gap_fwd");
}

static void m_gap_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    begin_();
    size_t P = nz_(n) * nz_(c);
    D->gap_bwd(n, c, hw, IN(dy, P * F4), OUT(dx, P * nz_(hw) * F4));
    done_("gap_bwd");
}

/* ---- batch normalisation ---------------------------------------------------- */

#define D8 sizeof(double)

static void m_bn_stats(int n, int c, int hw, const float *x, double *stats)
{
    begin_();
    size_t X = nz_(n) * nz_(c) * nz_(hw), C = nz_(c);
    D->bn_stats(n, c, hw, IN(x, X * F4), OUT(stats, 2 * C * D8));
    done_("bn_stats");
}

static void m_bn_finalize(int c, const double *stats, double count, float eps, float momentum,
                          int update_running, float *mean, float *invstd, float *running_mean,
                          float *running_var)
{
    begin_();
    size_t C = nz_(c);
    D->bn_finalize(c, IN(stats, 2 * C * D8), count, eps, momentum, update_running,
                   OUT(mean, C * F4), OUT(invstd, C * F4), OUT(running_mean, C * F4),
                   OUT(running_var, C * F4));
    done_("bn_finalize");
}

static void m_bn_eval_params(int c, const float *running_mean, const float *running_var, float eps,
                             float *mean, float *invstd)
{
    begin_();
    size_t C = nz_(c);
    D->bn_eval_params(c, IN(running_mean, C * F4), IN(running_var, C * F4), eps, OUT(mean, C * F4),
                      OUT(invstd, C * F4));
    done_("bn_eval_params");
}

static void m_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                     const float *gamma, const float *beta_, float *y, int relu,
                     const float *res)
{
    begin_();
    size_t X = nz_(n) * nz_(c) * nz_(hw), C = nz_(c);
    D->bn_fwd(n, c, hw, IN(x, X * F4), IN(mean, C * F4), IN(invstd, C * F4), IN(gamma, C * F4),
              IN(beta_, C * F4), OUT(y, X * F4), relu, IN(res, X * F4));
    done_("bn_fwd");
}

static void m_bn_bwd_stats(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                           const float *invstd, double *gstats, float *dgamma, float *dbeta,
                           float beta, const float *relu_gamma, const float *relu_beta)
{
    begin_();
    size_t X = nz_(n) * nz_(c) * nz_(hw), C = nz_(c);
    D->bn_bwd_stats(n, c, hw, IN(x, X * F4), IN(dy, X * F4), IN(mean, C * F4), IN(invstd, C * F4),
                    OUT(gstats, 2 * C * D8), OUT(dgamma, C * F4), OUT(dbeta, C * F4), beta,
                    IN(relu_gamma, C * F4), IN(relu_beta, C * F4));
    done_("bn_bwd_stats");
}

static void m_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                          const float *invstd, const float *gamma, const double *gstats,
                          double count, float *dx, const float *relu_beta)
{
    begin_();
    size_t X = nz_(n) * nz_(c) * nz_(hw), C = nz_(c);
    D->bn_bwd_data(n, c, hw, IN(x, X * F4), IN(dy, X * F4), IN(mean, C * F4), IN(invstd, C * F4),
                   IN(gamma, C * F4), IN(gstats, 2 * C * D8), count, OUT(dx, X * F4),
                   IN(relu_beta, C * F4));
    done_("bn_bwd_data");
}

/* ---- elementwise, losses, optimizers, reductions ------------------------------ */

static void m_add(size_t count, const float *a, const float *b, float *y, int relu)
{
    begin_();
    D->add(count, IN(a, count * F4), IN(b, count * F4), OUT(y, count * F4), relu);
    done_("add");
}

static void m_relu_fwd(size_t count, const float *x, float *y)
{
    begin_();
    D->relu_fwd(count, IN(x, count * F4), OUT(y, count * F4));
    done_("relu_fwd");
}

static void m_relu_bwd(size_t count, const float *x, const float *dy, float *dx, const float *dy2)
{
    begin_();
    D->relu_bwd(count, IN(x, count * F4), IN(dy, count * F4), OUT(dx, count * F4),
                IN(dy2, count * F4));
    done_("relu_bwd");
}

static void m_gelu_fwd(size_t count, const float *x, float *y)
{
    begin_();
    D->gelu_fwd(count, IN(x, count * F4), OUT(y, count * F4));
    done_("gelu_fwd");
}

static void m_gelu_bwd(size_t count, const float *x, const float *dy, float *dx)
{
    begin_();
    D->gelu_bwd(count, IN(x, count * F4), IN(dy, count * F4), OUT(dx, count * F4));
    done_("gelu_bwd");
}

static void m_dropout_fwd(int n, size_t features, const float *x, float *y, float p, uint64_t seed,
                          uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    begin_();
    size_t X = nz_(n) * features;
    D->dropout_fwd(n, features, IN(x, X * F4), OUT(y, X * F4), p, seed, step, layer,
                   IN(sample_idx, nz_(n) * sizeof(int64_t)));
    done_("dropout_fwd");
}

static void m_dropout_bwd(int n, size_t features, const float *dy, float *dx, float p,
                          uint64_t seed, uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    begin_();
    size_t X = nz_(n) * features;
    D->dropout_bwd(n, features, IN(dy, X * F4), OUT(dx, X * F4), p, seed, step, layer,
                   IN(sample_idx, nz_(n) * sizeof(int64_t)));
    done_("dropout_bwd");
}

static void m_xent(int n, int classes, const float *logits, const int32_t *labels, float smoothing,
                   float grad_scale, float *dlogits, double *acc)
{
    begin_();
    size_t L = nz_(n) * nz_(classes);
    D->xent(n, classes, IN(logits, L * F4), IN(labels, nz_(n) * sizeof(int32_t)), smoothing,
            grad_scale, OUT(dlogits, L * F4), OUT(acc, 2 * D8));
    done_("xent");
}

static void m_mse(int n, int k, const float *pred, const float *target, float grad_scale,
                  float *dpred, double *acc)
{
    begin_();
    size_t X = nz_(n) * nz_(k);
    D->mse(n, k, IN(pred, X * F4), IN(target, X * F4), grad_scale, OUT(dpred, X * F4),
           OUT(acc, D8));
    done_("mse");
}

static void m_sgd_step(size_t count, float *p, const float *g, float *buf, float lr, float momentum,
                       int nesterov, float wd, int first)
{
    begin_();
    D->sgd_step(count, OUT(p, count * F4), IN(g, count * F4), OUT(buf, count * F4), lr, momentum,
                nesterov, wd, first);
    done_("sgd_step");
}

static void m_adamw_step(size_t count, float *p, const float *g, float *m, float *v, float lr,
                         float beta1, float beta2, float eps, float wd, int64_t t)
{
    begin_();
    D->adamw_step(count, OUT(p, count * F4), IN(g, count * F4), OUT(m, count * F4),
                  OUT(v, count * F4), lr, beta1, beta2, eps, wd, t);
    done_("adamw_step");
}

static void m_scale(size_t count, float *x, float alpha)
{
    begin_();
    D->scale(count, OUT(x, count * F4), alpha);
    done_("scale");
}

static double m_sumsq(size_t count, const float *x)
{
    begin_();
    double r = D->sumsq(count, IN(x, count * F4));
    done_("sumsq");
    return r;
}

static int m_all_finite(size_t count, const float *x)
{
    begin_();
    int r = D->all_finite(count, IN(x, count * F4));
    done_("all_finite");
    return r;
}

static void m_to_half(size_t count, const float *x, uint16_t *h, int bf16)
{
    begin_();
    D->to_half(count, IN(x, count * F4), OUT(h, count * sizeof(uint16_t)), bf16);
    done_("to_half");
}

static void m_from_half(size_t count, const uint16_t *h, float *x, int bf16)
{
    begin_();
    D->from_half(count, IN(h, count * sizeof(uint16_t)), OUT(x, count * F4), bf16);
    done_("from_half");
}

static compute_ops_t mirror_ = {
    .mem_kind = DDP_MEM_HOST,
    .init = m_init,
    .check = m_check,
    .alloc = m_alloc,
    .free = m_free,
    .upload = m_upload,
    .download = m_upload, /* host to host through the device, as upload */
    .download_async = m_download_async,
    .copy = m_copy,
    .zero = m_zero,
    .sync = m_sync,
    .upload_async = m_upload_async,
    .event_create = m_event_create,
    .event_destroy = m_event_destroy,
    .event_record = m_event_record,
    .event_wait = m_event_wait,
    .linear_fwd = m_linear_fwd,
    .linear_bwd = m_linear_bwd,
    .linear_ws_bytes = m_linear_ws_bytes,
    .conv_ws_bytes = m_conv_ws_bytes,
    .conv_fwd = m_conv_fwd,
    .conv_bwd = m_conv_bwd,
    .maxpool_fwd = m_maxpool_fwd,
    .maxpool_bwd = m_maxpool_bwd,
    .avgpool_fwd = m_avgpool_fwd,
    .avgpool_bwd = m_avgpool_bwd,
    .gap_fwd = m_gap_fwd,
    .gap_bwd = m_gap_bwd,
    .bn_stats = m_bn_stats,
    .bn_finalize = m_bn_finalize,
    .bn_eval_params = m_bn_eval_params,
    .bn_fwd = m_bn_fwd,
    .bn_bwd_stats = m_bn_bwd_stats,
    .bn_bwd_data = m_bn_bwd_data,
    .add = m_add,
    .relu_fwd = m_relu_fwd,
    .relu_bwd = m_relu_bwd,
    .gelu_fwd = m_gelu_fwd,
    .gelu_bwd = m_gelu_bwd,
    .dropout_fwd = m_dropout_fwd,
    .dropout_bwd = m_dropout_bwd,
    .xent = m_xent,
    .mse = m_mse,
    .sgd_step = m_sgd_step,
    .adamw_step = m_adamw_step,
    .scale = m_scale,
    .sumsq = m_sumsq,
    .all_finite = m_all_finite,
    .to_half = m_to_half,
    .from_half = m_from_half,
};

const compute_ops_t *compute_mirror(const compute_ops_t *device, ddp_status_t *st)
{
    static char name[64];
    *st = DDP_OK;
    if (D) return &mirror_;
    char describe[256];
    *st = device->init(0, 1, describe, sizeof describe);
    if (*st != DDP_OK) return NULL;
    D = device;
    snprintf(name, sizeof name, "mirror-%s", device->name);
    mirror_.name = name;
    return &mirror_;
}

const compute_ops_t *compute_mirror_cuda(const char *prog)
{
    if (ddp_cuda_device_count() == 0) {
        fprintf(stderr, "%s: no GPU visible: skipped\n", prog);
        exit(77);
    }
    ddp_status_t st;
    const compute_ops_t *m = compute_mirror(&compute_cuda_ops, &st);
    if (!m) {
        fprintf(stderr, "%s: %s\n", prog, ddp_error_message());
        exit(1);
    }
    return m;
}
