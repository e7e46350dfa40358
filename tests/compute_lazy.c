/* compute_lazy.c -- "cpu-lazy", a test compute backend: the CPU backend
 * with the ordering contract of compute.h ("Ordering") taken at its word,
 * so that a trainer that leaves out an event wait computes something else
 * than on "cpu" (tests/test_ordering.sh compares the two bit for bit):
 *
 *   - upload_async copies nothing.  The copy is made when an event recorded
 *     after it is waited for (or at sync), and only after a pause, as a slow
 *     copy engine would: a loader buffer handed back before the wait has
 *     been refilled with the next batch by then.  No op sees the data
 *     before the wait.
 *   - the parameter gradients a backward op writes (dw, db; dgamma, dbeta)
 *     are held back: the results are kept aside and the gradient memory
 *     holds NaN until an event recorded after the op is waited for, or the
 *     next op of the backend runs (ops see each other in order).  An
 *     all-reduce started without the wait sums NaN.
 *
 * Everything else is the CPU backend's, so with every wait in place the
 * results are the CPU backend's bits.  Not in the registry (compute.c): the
 * test program train_lazy.c runs the trainer on it (ddp_train_on).  One
 * thread, like the trainer's use of compute ops.
 */
#include "compute_lazy.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COPY_PAUSE_US 3000 /* the pause before delayed uploads are copied */

/* Work held back: an upload (from src) or a gradient (kept in saved). */
typedef struct held {
    uint64_t seq; /* in the order it was called */
    int upload;
    void *dst;
    const void *src;
    float *saved; /* kept across uses of the slot */
    size_t bytes, cap;
} held_t;

static held_t *held_;
static size_t nheld_, capheld_;
static uint64_t seq_;
static int failed_; /* out of memory holding work back: results are wrong, say so */

struct compute_event {
    uint64_t seq; /* the work called before the last record */
};

static const compute_ops_t *cpu_(void)
{
    return &compute_cpu_ops;
}

static held_t *hold_(void)
{
    if (nheld_ == capheld_) {
        size_t cap = capheld_ ? 2 * capheld_ : 64;
        held_t *h = realloc(held_, cap * sizeof *h);
        if (!h) return NULL;
        memset(h + capheld_, 0, (cap - capheld_) * sizeof *h);
        held_ = h;
        capheld_ = cap;
    }
    held_t *h = &held_[nheld_++];
    h->seq = ++seq_;
    return h;
}

/* Complete the held work up to seq (uploads only when `uploads`), in order. */
static void complete_(uint64_t seq, int uploads)
{
    int paused = 0;
    size_t keep = 0;
    for (size_t i = 0; i < nheld_; i++) {
        held_t *h = &held_[i];
        int due = h->seq <= seq && (!h->upload || uploads);
        if (due && h->upload) {
            if (!paused) usleep(COPY_PAUSE_US);
            paused = 1;
            memcpy(h->dst, h->src, h->bytes);
        } else if (due) {
            memcpy(h->dst, h->saved, h->bytes);
        }
        if (due) continue;
        if (keep != i) { /* swap, so the saved buffers stay for reuse */
            held_t t = held_[keep];
            held_[keep] = *h;
            *h = t;
        }
        keep++;
    }
    nheld_ = keep;
}

/* Ops see what the ops before them wrote: the held gradients first. */
static void ops_in_order_(void)
{
    complete_(UINT64_MAX, 0);
}

/* A backward op wrote n floats of parameter gradient at p: keep them aside,
 * leave NaN until completion. */
static void hold_grad_(float *p, size_t n)
{
    if (!p || !n) return;
    held_t *h = hold_();
    size_t bytes = n * sizeof(float);
    if (h && h->cap < bytes) {
        float *s = realloc(h->saved, bytes);
        if (!s) {
            nheld_--;
            h = NULL;
        } else {
            h->saved = s;
            h->cap = bytes;
        }
    }
    if (!h) {
        failed_ = 1;
        return;
    }
    h->upload = 0;
    h->dst = p;
    h->src = NULL;
    h->bytes = bytes;
    memcpy(h->saved, p, bytes);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static void lazy_upload_async_(void *dst, const void *host_src, size_t bytes)
{
    if (!bytes) return;
    held_t *h = hold_();
    if (!h) {
        failed_ = 1;
        return;
    }
    h->upload = 1;
    h->dst = dst;
    h->src = host_src;
    h->bytes = bytes;
}

static compute_event_t *lazy_event_create_(void)
{
    return calloc(1, sizeof(compute_event_t));
}

static void lazy_event_destroy_(compute_event_t *e)
{
    free(e);
}

static void lazy_event_record_(compute_event_t *e)
{
    e->seq = seq_;
}

static void lazy_event_wait_(compute_event_t *e)
{
    complete_(e->seq, 1);
}

static void lazy_sync_(void)
{
    complete_(UINT64_MAX, 1);
}

/* ---- the ops that read or write parameter gradients ---------------------- */

static void lazy_linear_bwd_(int n, int in, int out, const float *x, const float *w,
                             const float *dy, float *dx, float *dw, float *db, float beta)
{
    ops_in_order_();
    cpu_()->linear_bwd(n, in, out, x, w, dy, dx, dw, db, beta);
    hold_grad_(dw, (size_t)out * (size_t)in);
    hold_grad_(db, (size_t)out);
}

static void lazy_conv_bwd_(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                           float *dx, float *dw, float *db, float beta, void *ws)
{
    ops_in_order_();
    cpu_()->conv_bwd(d, x, w, dy, dx, dw, db, beta, ws);
    hold_grad_(dw, (size_t)d->oc * (size_t)d->c * (size_t)d->k * (size_t)d->k);
    hold_grad_(db, (size_t)d->oc);
}

static void lazy_bn_bwd_stats_(int n, int c, int hw, const float *x, const float *dy,
                               const float *mean, const float *invstd, double *gstats,
                               float *dgamma, float *dbeta, float beta)
{
    ops_in_order_();
    cpu_()->bn_bwd_stats(n, c, hw, x, dy, mean, invstd, gstats, dgamma, dbeta, beta);
    hold_grad_(dgamma, (size_t)c);
    hold_grad_(dbeta, (size_t)c);
}

static void lazy_sgd_step_(size_t count, float *p, const float *g, float *buf, float lr,
                           float momentum, int nesterov, float wd, int first)
{
    ops_in_order_();
    cpu_()->sgd_step(count, p, g, buf, lr, momentum, nesterov, wd, first);
}

static void lazy_adamw_step_(size_t count, float *p, const float *g, float *m, float *v, float lr,
                             float beta1, float beta2, float eps, float wd, int64_t t)
{
    ops_in_order_();
    cpu_()->adamw_step(count, p, g, m, v, lr, beta1, beta2, eps, wd, t);
}

static void lazy_scale_(size_t count, float *x, float alpha)
{
    ops_in_order_();
    cpu_()->scale(count, x, alpha);
}

static double lazy_sumsq_(size_t count, const float *x)
{
    ops_in_order_();
    return cpu_()->sumsq(count, x);
}

static int lazy_all_finite_(size_t count, const float *x)
{
    ops_in_order_();
    return cpu_()->all_finite(count, x);
}

static void lazy_to_half_(size_t count, const float *x, uint16_t *h, int bf16)
{
    ops_in_order_();
    cpu_()->to_half(count, x, h, bf16);
}

static void lazy_from_half_(size_t count, const uint16_t *h, float *x, int bf16)
{
    ops_in_order_();
    cpu_()->from_half(count, h, x, bf16);
}

static void lazy_download_(void *host_dst, const void *src, size_t bytes)
{
    ops_in_order_();
    cpu_()->download(host_dst, src, bytes);
}

static void lazy_copy_(void *dst, const void *src, size_t bytes)
{
    ops_in_order_();
    cpu_()->copy(dst, src, bytes);
}

static void lazy_zero_(void *p, size_t bytes)
{
    ops_in_order_();
    cpu_()->zero(p, bytes);
}

/* The CPU table with the ops above in place (filled on first use: a table
 * of another file is no constant initialiser). */
const compute_ops_t *compute_lazy_ops(void)
{
    static compute_ops_t ops;
    if (!ops.name) {
        ops = compute_cpu_ops;
        ops.name = "cpu-lazy";
        ops.upload_async = lazy_upload_async_;
        ops.event_create = lazy_event_create_;
        ops.event_destroy = lazy_event_destroy_;
        ops.event_record = lazy_event_record_;
        ops.event_wait = lazy_event_wait_;
        ops.sync = lazy_sync_;
        ops.linear_bwd = lazy_linear_bwd_;
        ops.conv_bwd = lazy_conv_bwd_;
        ops.bn_bwd_stats = lazy_bn_bwd_stats_;
        ops.sgd_step = lazy_sgd_step_;
        ops.adamw_step = lazy_adamw_step_;
        ops.scale = lazy_scale_;
        ops.sumsq = lazy_sumsq_;
        ops.all_finite = lazy_all_finite_;
        ops.to_half = lazy_to_half_;
        ops.from_half = lazy_from_half_;
        ops.download = lazy_download_;
        ops.copy = lazy_copy_;
        ops.zero = lazy_zero_;
    }
    return &ops;
}

int compute_lazy_failed(void)
{
    return failed_;
}
