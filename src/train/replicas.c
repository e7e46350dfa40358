/* replicas.c -- the replica check (--check-replicas) and the fault it
 * catches, --inject bitflip (see replicas.h). */
#include "replicas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "inject.h"
#include "log.h"

static ddp_status_t find_tensor_(trainer_t *t, const char *name, float **p);

/* ---- the replica check ------------------------------------------------- */

/* One tensor of the check: a model tensor (state -1) or optimizer state k
 * of a trainable parameter. */
typedef struct rtensor {
    int id, state;
} rtensor_t;

/* The tensors the check compares, in the order of replicas.h; returns
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
        /* --zero: one copy of each element of the state, nothing to compare */
        if (!t->opt.state[k] || zero_sharded(&t->zero)) continue;
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
            if (nodd <= REPLICAS_LIST_MAX)
                u += (size_t)snprintf(more + u, sizeof more - u, "%s%d", nodd > 1 ? ", " : "", r);
            else if (nodd == REPLICAS_LIST_MAX + 1)
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

ddp_status_t replicas_check(trainer_t *t, int64_t step)
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

/* The device float array `name` (replicas.h's names; a BN buffer too)
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
    if (k >= 0 && zero_sharded(&t->zero))
        return ddp_fail(DDP_ERR_USAGE,
                        "--inject bitflip:...:%s: under --zero %d the optimizer state is sharded "
                        "(one copy of each element, on the rank that owns it) and the replica "
                        "check does not compare it; flip a parameter or a BN statistic instead",
                        name, t->zero.stage);
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

void replicas_inject_bitflip(trainer_t *t, int64_t step)
{
    const inject_fault_t *f;
    /* every one due (one-shot: inject_due marks it fired) */
    while ((f = inject_due(INJECT_BITFLIP, step))) bitflip_(t, f->arg, step);
}

ddp_status_t replicas_check_injections(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
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
    return DDP_OK;
}
