/* diagnostics.c -- the non-finite guard, the replica check and the faults
 * they catch (see diagnostics.h). */
#define _POSIX_C_SOURCE 200809L
#include "diagnostics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hash.h"
#include "inject.h"
#include "log.h"
#include "signals.h"
#include "trainer.h"

static ddp_status_t find_tensor_(trainer_t *t, const char *name, float **p);

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

void diagnostics_sample_name(const deck_t *d, int64_t idx, char *buf, size_t cap)
{
    size_t u = 0;
    if (cap) buf[0] = '\0';
    sample_text_(d, idx, buf, cap, &u);
}

/* The samples idx[0..n) as "7, 12, 40 (3 samples: rows 7, 12, 40 of d.h5)",
 * at most DIAG_LIST_MAX of them; rows per sample when they span shards. */
static void samples_text_(const deck_t *d, const int64_t *idx, int n, char *buf, size_t cap)
{
    size_t u = 0;
    int shown = n < DIAG_LIST_MAX ? n : DIAG_LIST_MAX;
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

ddp_status_t diagnostics_init(diagnostics_t *g, trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    memset(g, 0, sizeof *g);
    g->skip = cfg->on_nonfinite == NONFINITE_SKIP;
    /* the tensors --inject bitflip and skipgrad name: checked now, on every
     * rank (the same list everywhere), not when the fault is due */
    inject_fault_t f[INJECT_MAX];
    int nf = 0;
    DDP_TRY(inject_parse(cfg->inject, f, &nf));
    for (int i = 0; i < nf; i++) {
        if (f[i].kind == INJECT_SKIPGRAD) {
            int id = model_find_tensor(m, f[i].arg);
            if (id < 0 || m->tensors[id].kind != TENSOR_PARAM || m->tensors[id].frozen)
                return ddp_fail(DDP_ERR_USAGE,
                                "--inject skipgrad:...:%s: %s; the form is "
                                "skipgrad:RANK:STEP:TENSOR with TENSOR a trainable parameter "
                                "(e.g. %s)",
                                f[i].arg, f[i].arg[0] ? "not a trainable parameter" : "no TENSOR",
                                m->ntensors ? m->tensors[0].name : "layers.0.weight");
        }
        if (f[i].kind == INJECT_BITFLIP && f[i].arg[0]) DDP_TRY(find_tensor_(t, f[i].arg, NULL));
    }
    size_t K = (size_t)cfg->accum, B = (size_t)m->batch;
    g->loss_at = t->compute->alloc(K * sizeof(double));
    g->loss_host = calloc(K, sizeof(double));
    g->idx = calloc(K * B + 1, sizeof(int64_t));
    g->count = calloc(K, sizeof(int));
    int fail = !g->loss_at || !g->loss_host || !g->idx || !g->count;
    if (g->skip) {
        g->bufs = t->compute->alloc(m->nbufs * sizeof(float) + sizeof(float));
        g->loss_sums = t->compute->alloc(2 * sizeof(double));
        g->counters = calloc((size_t)m->nlayers + 1, sizeof(int64_t));
        fail = fail || !g->bufs || !g->loss_sums || !g->counters;
    }
    if (fail) {
        diagnostics_free(g, t);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for the non-finite guard");
    }
    return DDP_OK;
}

void diagnostics_free(diagnostics_t *g, trainer_t *t)
{
    if (g->loss_at) t->compute->free(g->loss_at);
    if (g->bufs) t->compute->free(g->bufs);
    if (g->loss_sums) t->compute->free(g->loss_sums);
    free(g->loss_host);
    free(g->idx);
    free(g->count);
    free(g->counters);
    memset(g, 0, sizeof *g);
}

void diagnostics_step_begin(diagnostics_t *g, trainer_t *t)
{
    model_t *m = &t->model;
    g->nmicro = 0;
    if (!g->skip) return;
    /* a device copy of the BN statistics per step (a few KB for the models
     * here; the cost of skip mode is the unfused optimizer, README) */
    t->compute->copy(g->bufs, m->bufs, m->nbufs * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) g->counters[i] = m->layers[i].num_batches_tracked;
    t->compute->copy(g->loss_sums, t->loss_sums, 2 * sizeof(double));
    g->samples = t->metrics.samples;
}

void diagnostics_batch(diagnostics_t *g, trainer_t *t, int64_t step, int j, int n,
                       const int64_t *idx)
{
    size_t B = (size_t)t->model.batch;
    g->count[j] = n;
    if (idx) memcpy(g->idx + (size_t)j * B, idx, (size_t)n * sizeof *idx);
    g->nmicro = j + 1;
    if (j == 0 && inject_due(INJECT_NAN, step) && n > 0) {
        float v = NAN;
        t->compute->upload(t->batch->x, &v, sizeof v);
    }
}

void diagnostics_loss(diagnostics_t *g, trainer_t *t, int j)
{
    t->compute->copy(g->loss_at + j, t->loss_sums, sizeof(double));
}

int diagnostics_grads_finite(trainer_t *t)
{
    return t->compute->all_finite(t->model.ntrainable, t->model.grads);
}

const char *diagnostics_nonfinite_name(double x)
{
    return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

/* The first sample of micro-batch j holding a non-finite input value, when
 * the device batch still holds that micro-batch (the last of the step):
 * 1 and what was found, 0 none, -1 not known. */
static int scan_inputs_(diagnostics_t *g, trainer_t *t, int j, int *sample, size_t *elem,
                        float *value)
{
    int n = g->count[j];
    if (j != g->nmicro - 1 || n == 0) return -1;
    size_t numel = t->train.sample_numel;
    float *x = malloc((size_t)n * numel * sizeof(float) + 1);
    if (!x) return -1;
    t->compute->download(x, t->batch->x, (size_t)n * numel * sizeof(float));
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

/* What this rank knows about its non-finite loss of micro-batch j, into
 * buf: the samples, and the one with a non-finite input if the batch shows
 * it.  Returns scan_inputs_'s answer. */
static int nonfinite_text_(diagnostics_t *g, trainer_t *t, int64_t step, int j, double loss,
                           char *buf, size_t cap)
{
    const int64_t *idx = g->idx + (size_t)j * (size_t)t->model.batch;
    char micro[64] = "", list[640];
    if (t->cfg->accum > 1)
        snprintf(micro, sizeof micro, " (micro-batch %d of %lld)", j + 1, (long long)t->cfg->accum);
    samples_text_(&t->train, idx, g->count[j], list, sizeof list);
    int sample = 0;
    size_t elem = 0;
    float v = 0;
    int found = scan_inputs_(g, t, j, &sample, &elem, &v);
    size_t u = (size_t)snprintf(buf, cap,
                                "the training loss is %s at step %lld on this rank%s; "
                                "its samples there: %s",
                                diagnostics_nonfinite_name(loss), (long long)step, micro, list);
    if (u >= cap) return found;
    if (found == 1) {
        u += (size_t)snprintf(buf + u, cap - u, "; sample ");
        sample_text_(&t->train, idx[sample], buf, cap, &u);
        if (u < cap)
            snprintf(buf + u, cap - u,
                     " holds a non-finite input value (%s at value %zu of %zu): the input is "
                     "bad; --check-data finds such samples in the files at start-up (fix or "
                     "drop them)",
                     diagnostics_nonfinite_name(v), elem, t->train.sample_numel);
    } else {
        snprintf(buf + u, cap - u, "%s: " DDP_DIVERGED_ADVICE,
                 found == 0 ? "; their inputs are finite" : "");
    }
    return found;
}

/* Abort mode: end the job from this rank. */
_Noreturn static void abort_nonfinite_(diagnostics_t *g, trainer_t *t, int64_t step, int j,
                                       double loss)
{
    char msg[1024];
    int found = nonfinite_text_(g, t, step, j, loss, msg, sizeof msg);
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
static void steps_text_(const diagnostics_t *g, char *buf, size_t cap)
{
    size_t u = 0;
    int64_t n = g->skipped < DIAG_LIST_MAX ? g->skipped : DIAG_LIST_MAX;
    buf[0] = '\0';
    for (int64_t i = 0; i < n && u < cap; i++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? ", " : "", (long long)g->listed[i]);
    if (g->skipped > n && u < cap) snprintf(buf + u, cap - u, ", ...");
}

ddp_status_t diagnostics_step_end(diagnostics_t *g, trainer_t *t, int64_t step, int skipped)
{
    model_t *m = &t->model;
    /* one read of the running loss sums of the step's micro-batches: the
     * first non-finite one names the micro-batch */
    t->compute->download(g->loss_host, g->loss_at, (size_t)g->nmicro * sizeof(double));
    int bad = -1;
    for (int j = 0; j < g->nmicro && bad < 0; j++)
        if (!isfinite(g->loss_host[j])) bad = j;
    if (!g->skip) {
        if (bad >= 0) abort_nonfinite_(g, t, step, bad, g->loss_host[bad]);
        return DDP_OK;
    }
    if (bad >= 0) {
        /* only the rank with the bad input speaks (with SyncBatchNorm every
         * rank's loss is NaN), and a rank whose loss alone was not finite */
        char msg[1024];
        int found = nonfinite_text_(g, t, step, bad, g->loss_host[bad], msg, sizeof msg);
        if (found == 1) log_warn("%s", msg);
        if (!skipped)
            log_warn("the training loss is %s at step %lld on this rank, but the all-reduced "
                     "gradient is finite: the step was applied; its loss is left out of the "
                     "logged loss",
                     diagnostics_nonfinite_name(g->loss_host[bad]), (long long)step);
    }
    if (skipped || bad >= 0) {
        /* the step's loss and samples stay out of the logged loss */
        t->compute->copy(t->loss_sums, g->loss_sums, 2 * sizeof(double));
        t->metrics.samples = g->samples;
    }
    if (!skipped) {
        g->in_a_row = 0;
        return DDP_OK;
    }
    /* the forward passes moved the BN running statistics (NaN, likely) */
    t->compute->copy(m->bufs, g->bufs, m->nbufs * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) m->layers[i].num_batches_tracked = g->counters[i];
    if (g->skipped < DIAG_LIST_MAX) g->listed[g->skipped] = step;
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

void diagnostics_summary(const diagnostics_t *g, trainer_t *t)
{
    (void)t;
    if (!g->skip) return;
    char steps[160];
    steps_text_(g, steps, sizeof steps);
    log_info("skipped_steps=%lld (--on-nonfinite skip)%s%s", (long long)g->skipped,
             g->skipped ? ": steps " : "", steps);
}

/* ---- the replica check ------------------------------------------------- */

/* One tensor of the check: a model tensor (state -1) or optimizer state k
 * of a trainable parameter. */
typedef struct rtensor {
    int id, state;
} rtensor_t;

/* The tensors the check compares, in the order of diagnostics.h; returns
 * how many (list may be NULL). */
static int rtensors_(const trainer_t *t, rtensor_t *list)
{
    const model_t *m = &t->model;
    int n = 0;
    for (int i = 0; i < m->ntensors; i++) {
        /* with --no-sync-bn the running statistics differ between ranks by
         * design (their average is evaluated and saved) */
        if (m->tensors[i].kind == TENSOR_BUFFER && !t->sync_bn) continue;
        if (list) list[n] = (rtensor_t){i, -1};
        n++;
    }
    for (int k = 0; k < 2; k++) {
        if (!t->opt.state[k]) continue;
        for (int i = 0; i < m->ntensors; i++) {
            if (m->tensors[i].kind != TENSOR_PARAM || m->tensors[i].frozen) continue;
            if (list) list[n] = (rtensor_t){i, k};
            n++;
        }
    }
    return n;
}

static void rtensor_name_(const trainer_t *t, rtensor_t r, char *buf, size_t cap)
{
    const char *names[2] = {"state0", "state1"};
    optim_state_names((optimizer_kind_t)t->opt.kind, t->opt.momentum, names);
    if (r.state < 0)
        snprintf(buf, cap, "%s", t->model.tensors[r.id].name);
    else
        snprintf(buf, cap, "%s:%s", names[r.state], t->model.tensors[r.id].name);
}

/* The hash of every tensor of list[0..n): each flat buffer is read back
 * once. */
static ddp_status_t hash_rtensors_(trainer_t *t, const rtensor_t *list, int n, uint64_t *h)
{
    const model_t *m = &t->model;
    size_t most = m->nparams > m->nbufs ? m->nparams : m->nbufs;
    float *host = malloc(most * sizeof(float) + sizeof(float));
    if (!host) return ddp_fail(DDP_ERR_NOMEM, "out of memory in the replica check");
    /* sources: parameters, BN buffers, optimizer state 0, 1 */
    for (int src = 0; src < 4; src++) {
        const float *dev = src == 0 ? m->params : src == 1 ? m->bufs : t->opt.state[src - 2];
        size_t count = src == 0 ? m->nparams : src == 1 ? m->nbufs : m->ntrainable;
        if (!dev || count == 0) continue;
        int loaded = 0;
        for (int i = 0; i < n; i++) {
            const tensor_t *T = &m->tensors[list[i].id];
            int mine = list[i].state < 0 ? (src == 0 && T->kind == TENSOR_PARAM) ||
                                               (src == 1 && T->kind == TENSOR_BUFFER)
                                         : src == list[i].state + 2;
            if (!mine) continue;
            if (!loaded) t->compute->download(host, dev, count * sizeof(float));
            loaded = 1;
            h[i] = hash_words(HASH_SEED, host + T->offset, T->numel * sizeof(float));
        }
    }
    for (int i = 0; i < n; i++) {
        const tensor_t *T = &m->tensors[list[i].id];
        if (list[i].state < 0 && T->kind == TENSOR_COUNTER) {
            int64_t v = m->layers[T->layer].num_batches_tracked;
            h[i] = hash_words(HASH_SEED, &v, sizeof v);
        }
    }
    free(host);
    return DDP_OK;
}

/* From every rank's per-tensor hashes (all: [ranks][n]), the same on every
 * rank: the message naming the first tensor that differs. */
static ddp_status_t replicas_differ_(trainer_t *t, int64_t step, const rtensor_t *list, int n,
                                     const uint64_t *all)
{
    int W = t->ctl->size, first = -1, ndiff = 0;
    for (int i = 0; i < n; i++) {
        int differs = 0;
        for (int r = 1; r < W && !differs; r++) differs = all[(size_t)r * n + i] != all[i];
        if (differs && first < 0) first = i;
        ndiff += differs;
    }
    if (first < 0) /* the totals differed but no tensor does: cannot happen */
        return ddp_fail(DDP_ERR_INTERNAL, "replica check: the hashes differ but no tensor does");
    /* the value most ranks hold (ties: that of the lowest rank) is the
     * reference; the ranks holding another are named */
    int ref = 0, best = 0;
    for (int r = 0; r < W; r++) {
        uint64_t v = all[(size_t)r * n + first];
        int same = 0;
        for (int q = 0; q < W; q++) same += all[(size_t)q * n + first] == v;
        if (same > best) best = same, ref = r;
    }
    uint64_t want = all[(size_t)ref * n + first];
    int odd = -1, nodd = 0;
    char more[160] = "";
    size_t u = 0;
    for (int r = 0; r < W; r++) {
        if (all[(size_t)r * n + first] == want) continue;
        if (odd < 0) {
            odd = r;
        } else if (u < sizeof more) {
            if (nodd <= DIAG_LIST_MAX)
                u += (size_t)snprintf(more + u, sizeof more - u, "%s%d", nodd > 1 ? ", " : "", r);
            else if (nodd == DIAG_LIST_MAX + 1)
                u += (size_t)snprintf(more + u, sizeof more - u, ", ...");
        }
        nodd++;
    }
    char name[TENSOR_NAME_MAX + 32], when[80], also[200] = "", which[64];
    rtensor_name_(t, list[first], name, sizeof name);
    if (step == 0)
        snprintf(when, sizeof when, "at start-up, after the broadcast of rank 0's model");
    else
        snprintf(when, sizeof when, "after step %lld", (long long)step);
    if (nodd > 1)
        snprintf(also, sizeof also, ", and so does that of %d more rank%s (%s)", nodd - 1,
                 nodd > 2 ? "s" : "", more);
    if (ndiff == 1)
        snprintf(which, sizeof which, "the only differing tensor");
    else
        snprintf(which, sizeof which, "first of %d differing tensors", ndiff);
    return ddp_fail(DDP_ERR_MISMATCH,
                    "replicas diverged %s: rank %d's %s differs from rank %d's%s (%s; hash %016llx "
                    "vs %016llx; rank %d is on host %s): the ranks no longer hold the same model; "
                    "go on from the last checkpoint, and if the same host is named again, suspect "
                    "its memory and leave it out",
                    when, odd, name, ref, also, which,
                    (unsigned long long)all[(size_t)odd * n + first], (unsigned long long)want, odd,
                    control_host(t->ctl, odd));
}

ddp_status_t diagnostics_check_replicas(trainer_t *t, int64_t step)
{
    int n = rtensors_(t, NULL), W = t->ctl->size;
    rtensor_t *list = malloc((size_t)n * sizeof *list + sizeof *list);
    uint64_t *h = malloc((size_t)n * sizeof *h + sizeof *h);
    uint64_t *all = malloc((size_t)W * sizeof *all);
    ddp_status_t s =
        list && h && all ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory in the replica check");
    if (s != DDP_OK) control_abort(t->ctl, s);
    rtensors_(t, list);
    s = hash_rtensors_(t, list, n, h);
    if (s != DDP_OK) control_abort(t->ctl, s);
    /* the common case: one hash of the hashes per rank */
    uint64_t total = hash_bytes(HASH_SEED, h, (size_t)n * sizeof *h);
    comm_desc_t d = {"replica-check", -1, step};
    s = control_allgather(t->ctl, &total, all, sizeof total, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    int same = 1;
    for (int r = 1; r < W; r++) same = same && all[r] == all[0];
    free(all);
    if (!same) {
        /* every rank saw the same totals: every rank gathers the per-tensor
         * hashes to name the first that differs */
        uint64_t *hashes = malloc((size_t)W * (size_t)n * sizeof *hashes + sizeof *hashes);
        if (!hashes)
            control_abort(t->ctl, ddp_fail(DDP_ERR_NOMEM, "out of memory in the replica check"));
        comm_desc_t d2 = {"replica-check-tensors", -1, step};
        s = control_allgather(t->ctl, h, hashes, (size_t)n * sizeof *h, &d2);
        if (s != DDP_OK) control_abort(t->ctl, s);
        s = replicas_differ_(t, step, list, n, hashes);
        free(hashes);
    }
    free(h);
    free(list);
    return s;
}

/* ---- --inject bitflip -------------------------------------------------- */

/* The device float array `name` (diagnostics.h's names; a BN buffer too)
 * starts at: *p; DDP_ERR_USAGE when there is none. */
static ddp_status_t find_tensor_(trainer_t *t, const char *name, float **p)
{
    const model_t *m = &t->model;
    const char *names[2] = {NULL, NULL};
    int nstate = optim_state_names((optimizer_kind_t)t->cfg->optimizer, t->cfg->momentum, names);
    const char *colon = strchr(name, ':'), *tensor = colon ? colon + 1 : name;
    int k = -1;
    if (colon) {
        for (int i = 0; i < nstate; i++)
            if (strlen(names[i]) == (size_t)(colon - name) &&
                !strncmp(name, names[i], colon - name))
                k = i;
        if (k < 0)
            return ddp_fail(DDP_ERR_USAGE,
                            "--inject bitflip:...:%s: this optimizer keeps no state '%.*s' (it "
                            "keeps %s%s%s)",
                            name, (int)(colon - name), name, nstate ? names[0] : "none",
                            nstate > 1 ? ", " : "", nstate > 1 ? names[1] : "");
    }
    int id = model_find_tensor(m, tensor);
    const tensor_t *T = id >= 0 ? &m->tensors[id] : NULL;
    int ok = T && (k >= 0 ? T->kind == TENSOR_PARAM && !T->frozen
                          : T->kind == TENSOR_PARAM || T->kind == TENSOR_BUFFER);
    if (!ok)
        return ddp_fail(DDP_ERR_USAGE,
                        "--inject bitflip:...:%s: no such %s; name a tensor as the weights file "
                        "does (layers.0.weight, a BN running_mean) or optimizer state as "
                        "STATE:TENSOR (e.g. %s:layers.0.weight)",
                        name, k >= 0 ? "trainable parameter" : "parameter or BN statistic",
                        nstate ? names[0] : "exp_avg");
    if (p) {
        float *base = k >= 0 ? t->opt.state[k] : T->kind == TENSOR_PARAM ? m->params : m->bufs;
        *p = base + T->offset;
    }
    return DDP_OK;
}

/* Flip the lowest bit of the first element of tensor `arg` ("" the first
 * parameter tensor). */
static void bitflip_(trainer_t *t, const char *arg, int64_t step)
{
    const model_t *m = &t->model;
    char name[INJECT_ARG_MAX];
    float *p = NULL;
    if (arg[0]) {
        if (find_tensor_(t, arg, &p) != DDP_OK) return; /* checked at start-up */
        snprintf(name, sizeof name, "%s", arg);
    } else {
        for (int i = 0; i < m->ntensors && !p; i++)
            if (m->tensors[i].kind == TENSOR_PARAM) {
                p = m->params + m->tensors[i].offset;
                snprintf(name, sizeof name, "%s", m->tensors[i].name);
            }
        if (!p) return;
    }
    float v;
    uint32_t bits;
    t->compute->download(&v, p, sizeof v);
    memcpy(&bits, &v, sizeof bits);
    bits ^= 1u;
    memcpy(&v, &bits, sizeof v);
    t->compute->upload(p, &v, sizeof v);
    log_warn("--inject bitflip: flipped the lowest bit of %s[0] after step %lld", name,
             (long long)step);
}

void diagnostics_inject_bitflip(trainer_t *t, int64_t step)
{
    const inject_fault_t *f;
    /* every one due (one-shot: inject_due marks it fired) */
    while ((f = inject_due(INJECT_BITFLIP, step))) bitflip_(t, f->arg, step);
}
