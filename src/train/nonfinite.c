/* nonfinite.c -- the non-finite guard of every step, and the names of
 * samples in its messages (see nonfinite.h). */
#define _POSIX_C_SOURCE 200809L
#include "nonfinite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inject.h"
#include "log.h"
#include "signals.h"

/* ---- names: global sample index -> file and row ----------------------- */

/* The shard holding global sample `idx` (shards are concatenated in the
 * order given; deck.h), or NULL. */
static const deck_shard_t *shard_of_(const deck_t *d, int64_t idx)
{
    for (int i = 0; i < d->nshards; i++)
        if (idx >= d->shards[i].first && idx < d->shards[i].first + d->shards[i].n)
            return &d->shards[i];
    return NULL;
}

/* "412 (row 412 of d.h5)" into buf at *u. */
static void sample_text_(const deck_t *d, int64_t idx, char *buf, size_t cap, size_t *u)
{
    const deck_shard_t *s = shard_of_(d, idx);
    if (*u >= cap) return;
    if (s)
        *u += (size_t)snprintf(buf + *u, cap - *u, "%lld (row %lld of %s)", (long long)idx,
                               (long long)(idx - s->first), s->path);
    else
        *u += (size_t)snprintf(buf + *u, cap - *u, "%lld", (long long)idx);
}

void nonfinite_sample_name(const deck_t *d, int64_t idx, char *buf, size_t cap)
{
    size_t u = 0;
    if (cap) buf[0] = '\0';
    sample_text_(d, idx, buf, cap, &u);
}

/* The samples idx[0..n) as "7, 12, 40 (3 samples: rows 7, 12, 40 of d.h5)",
 * at most NONFINITE_LIST_MAX of them; rows per sample when they span shards. */
static void samples_text_(const deck_t *d, const int64_t *idx, int n, char *buf, size_t cap)
{
    size_t u = 0;
    int shown = n < NONFINITE_LIST_MAX ? n : NONFINITE_LIST_MAX;
    const deck_shard_t *one = shown ? shard_of_(d, idx[0]) : NULL;
    for (int i = 1; i < shown && one; i++)
        if (shard_of_(d, idx[i]) != one) one = NULL;
    buf[0] = '\0';
    for (int i = 0; i < shown && u < cap; i++) {
        if (i) u += (size_t)snprintf(buf + u, cap - u, ", ");
        if (one)
            u += (size_t)snprintf(buf + u, u < cap ? cap - u : 0, "%lld", (long long)idx[i]);
        else
            sample_text_(d, idx[i], buf, cap, &u);
    }
    if (u >= cap) return;
    if (shown < n)
        u += (size_t)snprintf(buf + u, cap - u, ", ... (the first %d of %d samples", shown, n);
    else
        u += (size_t)snprintf(buf + u, cap - u, " (%d sample%s", n, n == 1 ? "" : "s");
    if (one && one->first == 0 && u < cap) {
        u += (size_t)snprintf(buf + u, cap - u, ", the same rows of %s", one->path);
    } else if (one && u < cap) {
        u += (size_t)snprintf(buf + u, cap - u, ": rows ");
        for (int i = 0; i < shown && u < cap; i++)
            u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? ", " : "",
                                  (long long)(idx[i] - one->first));
        if (u < cap) u += (size_t)snprintf(buf + u, cap - u, " of %s", one->path);
    }
    if (u < cap) snprintf(buf + u, cap - u, ")");
}

/* ---- the non-finite guard --------------------------------------------- */

ddp_status_t nonfinite_init(nonfinite_t *g, trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    memset(g, 0, sizeof *g);
    g->skip = cfg->on_nonfinite == NONFINITE_SKIP;
    size_t K = (size_t)cfg->accum, B = (size_t)m->batch;
    g->loss_at = t->compute->alloc(K * sizeof(double));
    for (int k = 0; k < (g->skip ? 1 : 2); k++) {
        g->idx_buf[k] = calloc(K * B + 1, sizeof(int64_t));
        g->count_buf[k] = calloc(K, sizeof(int));
    }
    g->now.idx = g->idx_buf[0];
    g->now.count = g->count_buf[0];
    int fail = !g->loss_at || !g->now.idx || !g->now.count;
    if (!g->skip) {
        /* staging memory, so that the copy back does not wait on a GPU */
        if (t->compute->host_alloc) g->late_host = t->compute->host_alloc(K * sizeof(double));
        g->late_staged = g->late_host != NULL;
        if (!g->late_host) g->late_host = calloc(K, sizeof(double));
        g->late_done = t->compute->event_create();
        g->late.idx = g->idx_buf[1];
        g->late.count = g->count_buf[1];
        fail = fail || !g->late_host || !g->late_done || !g->idx_buf[1] || !g->count_buf[1];
    } else {
        g->bufs = t->compute->alloc(m->nbufs * sizeof(float) + sizeof(float));
        g->loss_sums = t->compute->alloc(2 * sizeof(double));
        g->counters = calloc((size_t)m->nlayers + 1, sizeof(int64_t));
        g->loss_host = calloc(K, sizeof(double));
        fail = fail || !g->bufs || !g->loss_sums || !g->counters || !g->loss_host;
    }
    if (fail) {
        nonfinite_free(g, t);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for the non-finite guard");
    }
    return DDP_OK;
}

void nonfinite_free(nonfinite_t *g, trainer_t *t)
{
    if (g->loss_at) t->compute->free(g->loss_at);
    if (g->bufs) t->compute->free(g->bufs);
    if (g->loss_sums) t->compute->free(g->loss_sums);
    free(g->loss_host);
    if (g->late_staged)
        t->compute->host_free(g->late_host);
    else
        free(g->late_host);
    if (g->late_done) t->compute->event_destroy(g->late_done);
    for (int k = 0; k < 2; k++) {
        free(g->idx_buf[k]);
        free(g->count_buf[k]);
    }
    free(g->counters);
    memset(g, 0, sizeof *g);
}

static void step_begin_(void *arg, trainer_t *t)
{
    nonfinite_t *g = arg;
    model_t *m = &t->model;
    g->now.nmicro = 0;
    if (!g->skip) return;
    /* a device copy of the BN statistics per step (a few KB for the models
     * here; the cost of skip mode is the unfused optimizer, docs/diagnostics.md) */
    t->compute->copy(g->bufs, m->bufs, m->nbufs * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) g->counters[i] = m->layers[i].num_batches_tracked;
    t->compute->copy(g->loss_sums, t->loss_sums, 2 * sizeof(double));
}

static void batch_(void *arg, trainer_t *t, int64_t step, int j, int n, const int64_t *idx)
{
    nonfinite_t *g = arg;
    size_t B = (size_t)t->model.batch;
    g->now.count[j] = n;
    if (idx) memcpy(g->now.idx + (size_t)j * B, idx, (size_t)n * sizeof *idx);
    g->now.nmicro = j + 1;
    g->now.cur = t->cur;
    g->now.uploads = t->batch_uploads[t->cur];
    if (j == 0 && inject_due(INJECT_NAN, step) && n > 0) {
        float v = NAN;
        t->compute->upload(t->batch->x, &v, sizeof v);
    }
}

static void loss_(void *arg, trainer_t *t, int j)
{
    nonfinite_t *g = arg;
    t->compute->copy(g->loss_at + j, t->loss_sums, sizeof(double));
}

/* skip mode: the all-reduced gradients [0, ntrainable) are all finite.
 * They are bit-identical on every rank (a NaN on one rank is a NaN in the
 * sum), so every rank reaches the same answer without a collective; under
 * --zero each rank holds its blocks' sums only, and the ranks agree on the
 * answer (zero_grads_finite). */
static int update_ok_(void *arg, trainer_t *t)
{
    (void)arg;
    int ok = 0;
    ddp_status_t s = zero_grads_finite(&t->zero, &t->model, t->ctl, &ok);
    if (s != DDP_OK) control_abort(t->ctl, s);
    return ok;
}

const char *nonfinite_value_name(double x)
{
    return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

/* The first of n samples of `numel` values each in device memory src
 * holding a non-finite value: 1 and what was found, 0 none, -1 not known. */
static int scan_values_(trainer_t *t, const float *src, int n, size_t numel, int *sample,
                        size_t *elem, float *value)
{
    float *x = malloc((size_t)n * numel * sizeof(float) + 1);
    if (!x) return -1;
    t->compute->download(x, src, (size_t)n * numel * sizeof(float));
    int found = 0;
    for (size_t k = 0; k < (size_t)n * numel && !found; k++)
        if (!isfinite(x[k])) {
            *sample = (int)(k / numel);
            *elem = k % numel;
            *value = x[k];
            found = 1;
        }
    free(x);
    return found;
}

/* The first sample of micro-batch j of step `seen` holding a non-finite
 * input value (*target 0) or, with float targets, regression target
 * (*target 1), when its device batch still holds that micro-batch (the last
 * of the step, and nothing uploaded into that batch since): 1 and what was
 * found, 0 none, -1 not known. */
static int scan_inputs_(const nonfinite_seen_t *seen, trainer_t *t, int j, int *sample,
                        size_t *elem, float *value, int *target)
{
    int n = seen->count[j];
    if (j != seen->nmicro - 1 || n == 0 || t->batch_uploads[seen->cur] != seen->uploads) return -1;
    const device_batch_t *b = &t->batches[seen->cur];
    *target = 0;
    int found = scan_values_(t, b->x, n, t->train.sample_numel, sample, elem, value);
    if (found == 0 && t->train.regression) {
        found = scan_values_(t, b->targets, n, (size_t)t->train.targets, sample, elem, value);
        *target = found == 1;
    }
    return found;
}

/* What this rank knows about its non-finite loss of micro-batch j, into
 * buf: the samples, and the one with a non-finite input if the batch shows
 * it.  Returns scan_inputs_'s answer. */
static int nonfinite_text_(const nonfinite_seen_t *seen, trainer_t *t, int j, double loss,
                           char *buf, size_t cap)
{
    int64_t step = seen->step;
    const int64_t *idx = seen->idx + (size_t)j * (size_t)t->model.batch;
    char micro[64] = "", list[640];
    if (t->cfg->accum > 1)
        snprintf(micro, sizeof micro, " (micro-batch %d of %lld)", j + 1, (long long)t->cfg->accum);
    samples_text_(&t->train, idx, seen->count[j], list, sizeof list);
    int sample = 0;
    size_t elem = 0;
    float v = 0;
    int target = 0;
    int found = scan_inputs_(seen, t, j, &sample, &elem, &v, &target);
    size_t u = (size_t)snprintf(buf, cap,
                                "the training loss is %s at step %lld on this rank%s; "
                                "its samples there: %s",
                                nonfinite_value_name(loss), (long long)step, micro, list);
    if (u >= cap) return found;
    if (found == 1) {
        u += (size_t)snprintf(buf + u, cap - u, "; sample ");
        sample_text_(&t->train, idx[sample], buf, cap, &u);
        if (u < cap)
            snprintf(buf + u, cap - u,
                     " holds a non-finite %s value (%s at value %zu of %zu): the %s is "
                     "bad; --check-data finds such samples in the files at start-up (fix or "
                     "drop them)",
                     target ? "target" : "input", nonfinite_value_name(v), elem,
                     target ? (size_t)t->train.targets : t->train.sample_numel,
                     target ? "regression target in /train/y" : "input");
    } else {
        snprintf(buf + u, cap - u, "%s: " DDP_DIVERGED_ADVICE,
                 found == 0 ? "; their inputs are finite" : "");
    }
    return found;
}

/* Abort mode: end the job from this rank. */
_Noreturn static void abort_nonfinite_(const nonfinite_seen_t *seen, trainer_t *t, int j,
                                       double loss)
{
    char msg[1024];
    int found = nonfinite_text_(seen, t, j, loss, msg, sizeof msg);
    /* With SyncBatchNorm (or weights already poisoned) every rank sees the
     * NaN; the rank whose input holds it has the useful message, so a rank
     * that did not find a bad input gives it time to end the job first
     * (control_abort: within 2 s).  The job is ending either way: the
     * launcher's SIGTERM must end this rank while it waits, not be taken for
     * a stop request. */
    signals_restore();
    if (found != 1 && t->ctl->size > 1) {
        struct timespec ts = {5, 0};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    control_abort(t->ctl, ddp_fail(DDP_ERR_NUMERIC, "%s", msg));
}

/* Skip mode: the rows of the summary line and of the --max-skips message. */
static void steps_text_(const nonfinite_t *g, char *buf, size_t cap)
{
    size_t u = 0;
    int64_t n = g->skipped < NONFINITE_LIST_MAX ? g->skipped : NONFINITE_LIST_MAX;
    buf[0] = '\0';
    for (int64_t i = 0; i < n && u < cap; i++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? ", " : "", (long long)g->listed[i]);
    if (g->skipped > n && u < cap) snprintf(buf + u, cap - u, ", ...");
}

step_watch_t nonfinite_watch(nonfinite_t *g)
{
    return (step_watch_t){.arg = g,
                          .begin = step_begin_,
                          .batch = batch_,
                          .loss = loss_,
                          .update_ok = g->skip ? update_ok_ : NULL};
}

/* The first non-finite of the n running loss sums, or -1. */
static int first_bad_(const double *loss, int n)
{
    for (int j = 0; j < n; j++)
        if (!isfinite(loss[j])) return j;
    return -1;
}

ddp_status_t nonfinite_settle(nonfinite_t *g, trainer_t *t)
{
    if (g->skip || !g->late.step) return DDP_OK;
    t->compute->event_wait(g->late_done);
    int bad = first_bad_(g->late_host, g->late.nmicro);
    if (bad >= 0) abort_nonfinite_(&g->late, t, bad, g->late_host[bad]);
    g->late.step = 0;
    return DDP_OK;
}

ddp_status_t nonfinite_step_end(nonfinite_t *g, trainer_t *t, int64_t step, step_result_t *res)
{
    int skipped = res->skipped;
    model_t *m = &t->model;
    if (!g->skip) {
        /* the step's running loss sums come back behind its work, judged
         * once the next step is queued (nonfinite_settle) */
        DDP_TRY(nonfinite_settle(g, t));
        t->compute->download_async(g->late_host, g->loss_at,
                                   (size_t)g->now.nmicro * sizeof(double), g->late_done);
        nonfinite_seen_t settled = g->late; /* its arrays are free now */
        g->late = g->now;
        g->late.step = step;
        g->now = (nonfinite_seen_t){.idx = settled.idx, .count = settled.count};
        return DDP_OK;
    }
    /* one read of the running loss sums of the step's micro-batches: the
     * first non-finite one names the micro-batch */
    t->compute->download(g->loss_host, g->loss_at, (size_t)g->now.nmicro * sizeof(double));
    int bad = first_bad_(g->loss_host, g->now.nmicro);
    g->now.step = step;
    if (bad >= 0) {
        /* only the rank with the bad input speaks (with SyncBatchNorm every
         * rank's loss is NaN), and a rank whose loss alone was not finite */
        char msg[1024];
        int found = nonfinite_text_(&g->now, t, bad, g->loss_host[bad], msg, sizeof msg);
        if (found == 1) log_warn("%s", msg);
        if (!skipped)
            log_warn("the training loss is %s at step %lld on this rank, but the all-reduced "
                     "gradient is finite: the step was applied; its loss is left out of the "
                     "logged loss",
                     nonfinite_value_name(g->loss_host[bad]), (long long)step);
    }
    if (skipped || bad >= 0) {
        /* the step's loss and samples stay out of the logged loss */
        t->compute->copy(t->loss_sums, g->loss_sums, 2 * sizeof(double));
        res->samples = 0;
    }
    if (!skipped) {
        g->in_a_row = 0;
        return DDP_OK;
    }
    /* the forward passes moved the BN running statistics (NaN, likely) */
    t->compute->copy(m->bufs, g->bufs, m->nbufs * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) m->layers[i].num_batches_tracked = g->counters[i];
    if (g->skipped < NONFINITE_LIST_MAX) g->listed[g->skipped] = step;
    g->skipped++;
    g->in_a_row++;
    if (g->in_a_row >= t->cfg->max_skips)
        return ddp_fail(DDP_ERR_NUMERIC,
                        "%lld steps in a row had a non-finite gradient and were skipped (steps "
                        "%lld to %lld; --max-skips %lld): " DDP_DIVERGED_ADVICE,
                        (long long)g->in_a_row, (long long)(step - g->in_a_row + 1),
                        (long long)step, (long long)t->cfg->max_skips);
    if (t->ctl->rank == 0)
        log_warn("step %lld skipped: the all-reduced gradient is not finite; weights, optimizer "
                 "state and BN statistics are unchanged (%lld skipped, %lld in a row; "
                 "--max-skips %lld)",
                 (long long)step, (long long)g->skipped, (long long)g->in_a_row,
                 (long long)t->cfg->max_skips);
    return DDP_OK;
}

void nonfinite_summary(const nonfinite_t *g, trainer_t *t)
{
    (void)t;
    if (!g->skip) return;
    char steps[160];
    steps_text_(g, steps, sizeof steps);
    log_info("skipped_steps=%lld (--on-nonfinite skip)%s%s", (long long)g->skipped,
             g->skipped ? ": steps " : "", steps);
}

