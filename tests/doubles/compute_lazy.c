/* compute_lazy.c -- "cpu-lazy", a test compute backend: the CPU backend
 * with the ordering contract of compute.h ("Ordering") taken at its word,
 * so that a trainer that leaves out an event wait computes something else
 * than on "cpu" (tests/e2e/test_ordering.sh compares the two bit for bit):
 *
 *   - upload_async copies nothing.  The copy is made when its `done` event,
 *     or another event recorded after it, is waited for (or at sync), and
 *     only after a pause, as a slow copy engine would: a loader buffer
 *     handed back before the wait has been refilled with the next batch by
 *     then.  No op sees the data before the wait.
 *   - a device batch is wiped (zero bytes) the moment the trainer records
 *     its reuse event (the event an upload into it names, compute.h): from
 *     then on the trainer said no op uses it, so an op that still reads it
 *     -- the wrong one of the two device batches -- computes on zeros.
 *   - an upload whose reuse event was last recorded before dst's previous
 *     upload landed (or never), while dst has had an upload, could overwrite
 *     a batch that ops still read on a GPU: it is refused (the run fails,
 *     compute_lazy_violation names the upload), as is a reuse event used
 *     for two different buffers.
 *   - download_async reads its source in the ops' order but fills the
 *     host buffer with NaN; the bytes land there when `done`, or another
 *     event recorded after it, is waited for (or at sync), not at the next
 *     op: a host that reads them before its wait sees NaN.
 *   - the parameter gradients a backward op writes (dw, db; dgamma, dbeta)
 *     are held back: the results are kept aside and the gradient memory
 *     holds NaN until an event recorded after the op is waited for, or the
 *     next op of the backend runs (ops see each other in order).  An
 *     all-reduce started without the wait sums NaN.
 *
 * Everything else is the CPU backend's, so with every wait in place the
 * results are the CPU backend's bits.  Not in the builtin registry
 * (compute.c): the test program train_lazy.c registers it in the place of
 * "cpu" and runs the trainer on it.  One thread, like the trainer's use of
 * compute ops.
 */
#include "compute_lazy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COPY_PAUSE_US 3000 /* the pause before delayed uploads are copied */

/* Work held back: an upload (from src) or a gradient (kept in saved). */
typedef struct held {
    uint64_t seq; /* in the order it was called */
    int upload;
    int host; /* a download_async: lands at an event wait, not at the next op */
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
    uint64_t seq;  /* the work called before the last record */
    uint64_t tick; /* when it was last recorded (0: never) */
    /* the device memory uploads naming it as their reuse event use: wiped
     * when it is recorded */
    struct {
        void *p;
        size_t bytes;
    } region[4];
    int nregion;
};

/* Device memory uploads went to, and when the last one landed. */
typedef struct landed {
    void *p;
    uint64_t tick; /* 0: not yet */
} landed_t;
static compute_event_t *events_[64]; /* the live events, for check_reuse_ */
static int nevents_;
static landed_t landed_[16];
static int nlanded_;
static uint64_t tick_;       /* event records and upload landings, in order */
static char violation_[256]; /* the first upload that broke the pairing */

static const compute_ops_t *cpu_(void)
{
    return &compute_cpu_ops;
}

/* Hold back the next piece of work: a copy of `bytes` to dst, from src
 * (upload) or from the entry's saved buffer (a held gradient).  NULL, and
 * failed_ set, when out of memory. */
static held_t *hold_(int upload, void *dst, const void *src, size_t bytes)
{
    if (nheld_ == capheld_) {
        size_t cap = capheld_ ? 2 * capheld_ : 64;
        held_t *h = realloc(held_, cap * sizeof *h);
        if (!h) {
            failed_ = 1;
            return NULL;
        }
        memset(h + capheld_, 0, (cap - capheld_) * sizeof *h);
        held_ = h;
        capheld_ = cap;
    }
    held_t *h = &held_[nheld_++];
    h->seq = ++seq_;
    h->upload = upload;
    h->host = 0;
    h->dst = dst;
    h->src = src;
    h->bytes = bytes;
    return h;
}

/* Complete the held work up to seq (uploads and host downloads only when
 * `uploads`: the host waits), in order. */
static void complete_(uint64_t seq, int uploads)
{
    int paused = 0;
    size_t keep = 0;
    for (size_t i = 0; i < nheld_; i++) {
        held_t *h = &held_[i];
        int due = h->seq <= seq && ((!h->upload && !h->host) || uploads);
        if (due && h->upload) {
            if (!paused) usleep(COPY_PAUSE_US);
            paused = 1;
            memcpy(h->dst, h->src, h->bytes);
            for (int k = 0; k < nlanded_; k++)
                if (landed_[k].p == h->dst) landed_[k].tick = ++tick_;
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

/* Keep the bytes at src aside for dst (NaN there until completion); the
 * entry, or NULL when out of memory. */
static held_t *hold_bytes_(void *dst, const void *src, size_t bytes)
{
    held_t *h = hold_(0, dst, NULL, bytes);
    if (!h) return NULL;
    if (h->cap < bytes) {
        float *s = realloc(h->saved, bytes);
        if (!s) {
            nheld_--;
            failed_ = 1;
            return NULL;
        }
        h->saved = s;
        h->cap = bytes;
    }
    memcpy(h->saved, src, bytes);
    memset(dst, 0xff, bytes); /* NaN as float and as double */
    return h;
}

/* A backward op wrote n floats of parameter gradient at p: keep them aside,
 * leave NaN until completion. */
static void hold_grad_(float *p, size_t n)
{
    if (p && n) hold_bytes_(p, p, n * sizeof(float));
}

static landed_t *landed_of_(void *p)
{
    for (int k = 0; k < nlanded_; k++)
        if (landed_[k].p == p) return &landed_[k];
    if (nlanded_ == (int)(sizeof landed_ / sizeof *landed_)) return NULL;
    landed_[nlanded_] = (landed_t){p, 0};
    return &landed_[nlanded_++];
}

static void violate_(const char *fmt, const void *p, size_t bytes)
{
    if (!violation_[0]) snprintf(violation_, sizeof violation_, fmt, p, bytes);
}

/* The pairing of device batch and reuse event (compute.h, "Ordering"). */
static void check_reuse_(void *dst, size_t bytes, const compute_event_t *reuse_c)
{
    compute_event_t *reuse = (compute_event_t *)reuse_c;
    landed_t *l = landed_of_(dst);
    if (!l) {
        failed_ = 1;
        return;
    }
    if (!reuse) return; /* waits for all work before it */
    if (l->tick > reuse->tick)
        violate_("an upload into %p (%zu bytes) names a reuse event recorded before that "
                 "buffer's last upload landed: ops reading it may still run on a GPU",
                 dst, bytes);
    int k = 0;
    while (k < reuse->nregion && reuse->region[k].p != dst) k++;
    if (k == reuse->nregion) {
        if (k == (int)(sizeof reuse->region / sizeof *reuse->region)) {
            violate_("a reuse event named by uploads into more than 4 buffers (the last %p, "
                     "%zu bytes): one event per device batch",
                     dst, bytes);
            return;
        }
        for (int e = 0; e < nevents_; e++)
            for (int r = 0; events_[e] != reuse && r < events_[e]->nregion; r++)
                if (events_[e]->region[r].p == dst)
                    violate_("an upload into %p (%zu bytes) names another reuse event than "
                             "the uploads into it before",
                             dst, bytes);
        reuse->nregion++;
    }
    reuse->region[k].p = dst;
    reuse->region[k].bytes = bytes;
}

static void lazy_upload_async_(void *dst, const void *host_src, size_t bytes,
                               const compute_event_t *reuse, compute_event_t *done)
{
    if (bytes) {
        check_reuse_(dst, bytes, reuse);
        if (!hold_(1, dst, host_src, bytes)) return;
    }
    if (done) done->seq = seq_; /* the uploads so far (and held gradients) */
}

static compute_event_t *lazy_event_create_(void)
{
    if (nevents_ == (int)(sizeof events_ / sizeof *events_)) return NULL;
    compute_event_t *e = calloc(1, sizeof(compute_event_t));
    if (e) events_[nevents_++] = e;
    return e;
}

static void lazy_event_destroy_(compute_event_t *e)
{
    for (int i = 0; i < nevents_; i++)
        if (events_[i] == e) events_[i] = events_[--nevents_];
    free(e);
}

/* A reuse event recorded: the trainer uses its buffers no more until their
 * next upload lands; wipe them, so an op that still reads one sees zeros. */
static void lazy_event_record_(compute_event_t *e)
{
    e->seq = seq_;
    e->tick = ++tick_;
    for (int k = 0; k < e->nregion; k++) memset(e->region[k].p, 0, e->region[k].bytes);
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
                             const float *dy, float *dx, float *dw, float *db, float beta,
                             const float *relu_y, void *ws)
{
    ops_in_order_();
    cpu_()->linear_bwd(n, in, out, x, w, dy, dx, dw, db, beta, relu_y, ws);
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
                               float *dgamma, float *dbeta, float beta, const float *relu_gamma,
                               const float *relu_beta)
{
    ops_in_order_();
    cpu_()->bn_bwd_stats(n, c, hw, x, dy, mean, invstd, gstats, dgamma, dbeta, beta, relu_gamma,
                         relu_beta);
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

static void lazy_download_async_(void *host_dst, const void *src, size_t bytes,
                                 compute_event_t *done)
{
    ops_in_order_();
    if (bytes) {
        held_t *h = hold_bytes_(host_dst, src, bytes);
        if (h) h->host = 1;
    }
    if (done) done->seq = seq_;
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
        ops.download_async = lazy_download_async_;
        ops.copy = lazy_copy_;
        ops.zero = lazy_zero_;
    }
    return &ops;
}

int compute_lazy_failed(void)
{
    return failed_;
}

const char *compute_lazy_violation(void)
{
    return violation_[0] ? violation_ : NULL;
}
