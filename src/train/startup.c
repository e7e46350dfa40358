/* startup.c -- everything a run needs before its first step (see
 * startup.h).  Every local result is agreed on the control plane before the
 * next collective, so a failure on one rank stops every rank with one line. */
#include "startup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "log.h"
#include "memlimit.h"
#include "trainer.h"
#include "version.h"
#include "weights.h"

static double mib_(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

static ddp_status_t open_data_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    DDP_TRY(deck_open(&t->train, cfg->inputs, cfg->ninputs, "train"));
    t->have_train = 1;
    if (deck_has_split_any(cfg->inputs, cfg->ninputs, "val")) {
        DDP_TRY(deck_open(&t->val, cfg->inputs, cfg->ninputs, "val"));
        t->have_val = 1;
    }
    const deck_t *d = &t->train;
    char warning[1024];
    if (t->ctl->rank == 0 && deck_classes_warning(d, warning, sizeof warning))
        log_warn("%s", warning);
    t->loss.kind = cfg->loss == LOSS_AUTO ? (d->regression ? LOSS_MSE : LOSS_XENT) : cfg->loss;
    if (t->loss.kind == LOSS_XENT) DDP_TRY(deck_require_labels(d));
    if (t->have_val &&
        (t->val.regression != d->regression || act_numel(t->val.shape) != act_numel(d->shape)))
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: /val does not match /train (sample shape or label "
                        "kind differ)",
                        cfg->inputs[0]);
    if (cfg->drop_last) DDP_TRY(deck_check_size(d, t->ctl->size, (int)cfg->batch, cfg->drop_last));
    if (cfg->check_data) {
        DDP_TRY(deck_check_finite(&t->train));
        if (t->have_val) DDP_TRY(deck_check_finite(&t->val));
    }
    return DDP_OK;
}

static ddp_status_t memory_check_(trainer_t *t);

static ddp_status_t build_model_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const deck_t *d = &t->train;
    model_opts_t mo = {
        .spec = cfg->model,
        .input = d->shape,
        .outputs = d->regression ? d->targets : d->classes,
        .batch = (int)cfg->batch,
        .bucket_cap_bytes = (size_t)(cfg->bucket_cap_mb * 1024 * 1024),
        .first_bucket_bytes = (size_t)(cfg->first_bucket_mb * 1024 * 1024),
        .freeze = cfg->freeze,
    };
    DDP_TRY(model_layout(&t->model, &mo, t->compute));
    t->have_model = 1;
    const model_t *m = &t->model;
    DDP_TRY(memory_check_(t));
    if (t->loss.kind == LOSS_XENT) {
        DDP_TRY(deck_check_classes(d, m->outputs));
        if (t->have_val) DDP_TRY(deck_check_classes(&t->val, m->outputs));
        t->loss.width = m->outputs;
    } else {
        DDP_TRY(deck_require_targets(d, m->outputs));
        if (t->have_val) DDP_TRY(deck_require_targets(&t->val, m->outputs));
        t->loss.width = d->targets;
    }
    t->sync_bn = cfg->sync_bn < 0 ? (t->comm.size > 1 && model_has_layer(m, LAYER_BN))
                                  : (cfg->sync_bn && t->comm.size > 1);
    return DDP_OK;
}

/* ---- gradient-plane memory ------------------------------------------------ */

/* Parameters, gradients, optimizer state and the 16-bit gradient copy (the
 * buffers the gradient plane reduces or the fused update writes): from the
 * comm backend when the trainer chose its node-shared memory
 * (choose_memory_), else from the compute backend, registered with the comm
 * backend. */
static ddp_status_t compute_failure_(const trainer_t *t, ddp_status_t fallback);

static ddp_status_t plane_alloc_(void *arg, size_t bytes, void **p)
{
    trainer_t *t = arg;
    if (t->comm_memory) return comm_mem_alloc(&t->comm, bytes, p);
    *p = t->compute->alloc(bytes);
    if (!*p)
        return compute_failure_(
            t, ddp_fail(DDP_ERR_NOMEM,
                        "out of memory allocating %zu bytes for parameters, gradients or optimizer "
                        "state; reduce the model size or run fewer ranks per node",
                        bytes));
    ddp_status_t s = comm_register(&t->comm, *p, bytes, t->compute->mem_kind);
    if (s != DDP_OK) {
        t->compute->free(*p);
        *p = NULL;
    }
    return s;
}

static void plane_free_(void *arg, void *p)
{
    trainer_t *t = arg;
    if (t->comm_memory) {
        comm_mem_free(&t->comm, p);
        return;
    }
    comm_deregister(&t->comm, p);
    t->compute->free(p);
}

/* The other buffers the gradient plane moves: BatchNorm running statistics
 * (averaged over ranks with --no-sync-bn) and each BN layer's batch
 * statistics (SyncBatchNorm), compute memory from model_alloc. */
static ddp_status_t register_model_buffers_(trainer_t *t)
{
    model_t *m = &t->model;
    ddp_mem_kind_t kind = t->compute->mem_kind;
    if (m->nbufs) DDP_TRY(comm_register(&t->comm, m->bufs, m->nbufs * sizeof(float), kind));
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        if (L->kind == LAYER_BN)
            DDP_TRY(comm_register(&t->comm, L->stats, (size_t)2 * L->in.c * sizeof(double), kind));
    }
    return DDP_OK;
}

static void deregister_model_buffers_(trainer_t *t)
{
    model_t *m = &t->model;
    if (m->nbufs) comm_deregister(&t->comm, m->bufs);
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == LAYER_BN) comm_deregister(&t->comm, m->layers[i].stats);
}

/* One batch buffer of --batch samples (inputs, labels, targets, indices). */
static size_t batch_bytes_(const trainer_t *t)
{
    size_t numel = t->train.sample_numel, B = (size_t)t->cfg->batch;
    size_t k = t->train.targets > 0 ? (size_t)t->train.targets : 1;
    return B * (numel * sizeof(float) + sizeof(int32_t) + k * sizeof(float) + sizeof(int64_t));
}

/* The batch buffers in host memory: the loader's queue (prefetch + 1) and
 * evaluation's host batch. */
static size_t host_data_bytes_(const trainer_t *t)
{
    return batch_bytes_(t) * (size_t)(t->cfg->prefetch + 2);
}

/* All batch buffers: those and the device batches (TRAINER_DEVICE_BATCHES,
 * trainer.h). */
static size_t data_bytes_(const trainer_t *t)
{
    return host_data_bytes_(t) + batch_bytes_(t) * TRAINER_DEVICE_BATCHES;
}

/* ---- memory: the estimate against the limits ------------------------------ */

/* What the rest of the start-up will allocate, per rank. */
typedef struct mem_plan {
    size_t comm;     /* parameters, gradients, optimizer state, 16-bit scratch */
    int ncomm;       /* ... in this many allocations (plane_alloc_) */
    size_t resident; /* all buffers, comm included */
    size_t address;  /* address space beyond the buffers */
} mem_plan_t;

static mem_plan_t mem_plan_(const trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    const char *names[2];
    size_t nstate = (size_t)optim_state_names(cfg->optimizer, cfg->momentum, names);
    size_t params = m->nparams * sizeof(float) + sizeof(float);
    size_t state = m->ntrainable * sizeof(float) + sizeof(float);
    mem_plan_t p = {.comm = 2 * params + nstate * state, .ncomm = 2 + (int)nstate};
    if (cfg->grad_compress) {
        p.comm += m->ntrainable * sizeof(uint16_t) + 2;
        p.ncomm++;
    }
    /* rank 0's start-up broadcast copy; checkpoints keep a snapshot */
    size_t copy = params + m->nbufs * sizeof(float) + nstate * state;
    p.resident = p.comm + m->nbufs * sizeof(float) + model_act_bytes(m) + data_bytes_(t) + copy;
    /* device memory: the host holds the batches and the start-up copy only */
    if (t->compute->mem_kind == DDP_MEM_DEVICE) p.resident = host_data_bytes_(t) + copy;
    /* the first BLAS call maps its work buffer; the loader thread and the
     * checkpoint writer each add a stack and a malloc arena; slack */
    p.address = MEMLIMIT_BLAS_BUFFER + (cfg->ckpt_dir[0] ? 2 : 1) * MEMLIMIT_THREAD +
                ((size_t)16 << 20);
    return p;
}

/* Refuse a run whose buffers will not fit under the address-space limit,
 * in the cgroup's room or in the machine's memory, before anything is
 * allocated (memlimit.h): right after the layout, so that an absurd size
 * (a `classes` attribute of 10^9 makes a last layer of 10^9 outputs) is
 * named before any other check.  Every buffer is counted as host memory,
 * which it is on the cpu compute backend (compute_ops_t.mem_kind); a
 * device backend's buffers would belong to a check of the device's memory. */
static ddp_status_t memory_check_(trainer_t *t)
{
    mem_plan_t p = mem_plan_(t);
    memlimit_t l;
    memlimit_probe(&l, NULL, NULL);
    mem_need_t need = {p.resident, p.address};
    char warn[512];
    ddp_status_t s = memlimit_check(&l, &need, t->comm.local_size, warn, sizeof warn);
    if (s == DDP_OK && warn[0] && t->ctl->rank == 0) log_warn("%s", warn);
    const deck_t *d = &t->train;
    const model_t *m = &t->model;
    const layer_t *last = m->nlayers ? &m->layers[m->nlayers - 1] : NULL;
    if (s == DDP_ERR_NOMEM && last && last->kind == LAYER_LINEAR && !d->regression &&
        m->outputs == d->classes &&
        2 * (double)act_numel(last->in) * (double)m->outputs > (double)m->nparams) {
        /* most of it is the last layer, as wide as the classes: name their source */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ddp_error_message());
        s = ddp_fail_override(DDP_ERR_NOMEM,
                              "%s; most of it is the last layer's %d outputs, the deck's classes "
                              "(%s of /train/y in %s): check that number",
                              msg, d->classes,
                              d->classes_inferred ? "the largest label + 1" : "attribute classes",
                              d->shards[d->classes_inferred ? d->label_max_shard : 0].path);
    }
    t->mem_need_address = l.as_used + p.resident + p.address;
    t->mem_limit_address = l.as_limit;
    return s;
}

/* Whether parameters, gradients and optimizer state come from the comm
 * backend's node-shared memory: only for host compute memory and a comm
 * backend with COMM_CAP_NODE_SHARED_MEMORY that finds room for them
 * (comm_mem_plan).  Collective; the same answer on every rank. */
static ddp_status_t choose_memory_(trainer_t *t)
{
    t->comm_memory = 0;
    if (t->compute->mem_kind != DDP_MEM_HOST ||
        !(comm_caps(&t->comm) & COMM_CAP_NODE_SHARED_MEMORY))
        return DDP_OK;
    mem_plan_t plan = mem_plan_(t);
    DDP_TRY(comm_mem_plan(&t->comm, plan.comm, plan.ncomm));
    t->comm_memory = (comm_caps(&t->comm) & COMM_CAP_NODE_SHARED_MEMORY) != 0;
    return DDP_OK;
}

/* Parameters and gradients from plane_alloc_, collectively: every rank has
 * the same layout by now, so buckets are the same slices on every rank,
 * which the shared-memory all-reduce needs.  Then the initial weights, and
 * on rank 0 the checkpoint's (--resume) or --init's. */
static ddp_status_t alloc_model_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    model_mem_t gm = {plane_alloc_, plane_free_, t};
    DDP_TRY(model_alloc(&t->model, &gm));
    DDP_TRY(register_model_buffers_(t));
    t->registered_model = 1;
    DDP_TRY(model_init_params(&t->model, (uint64_t)cfg->seed));
    if (t->ckpt.resume.active) {
        checkpoint_resume_model(t);
        return DDP_OK;
    }
    if (cfg->init[0] && t->ctl->rank == 0) return weights_load(cfg->init, &t->model);
    return DDP_OK;
}

/* Rank 0's parameters, buffers and BN counters go to every rank. */
static ddp_status_t broadcast_model_(trainer_t *t)
{
    model_t *m = &t->model;
    const compute_ops_t *compute = t->compute;
    comm_desc_t d = {"broadcast-parameters", -1, -1};
    size_t np = m->nparams * sizeof(float), nb = m->nbufs * sizeof(float);
    float *host = malloc(np + nb + 1);
    int64_t *counters = calloc((size_t)m->nlayers, sizeof *counters);
    ddp_status_t s = control_agree(
        t->ctl, host && counters
                    ? DDP_OK
                    : ddp_fail(DDP_ERR_NOMEM, "out of memory broadcasting the parameters"));
    if (s != DDP_OK) {
        free(host);
        free(counters);
        return s;
    }
    compute->download(host, m->params, np);
    compute->download((char *)host + np, m->bufs, nb);
    for (int i = 0; i < m->nlayers; i++) counters[i] = m->layers[i].num_batches_tracked;
    s = control_bcast(t->ctl, host, np + nb, 0, &d);
    if (s == DDP_OK)
        s = control_bcast(t->ctl, counters, (size_t)m->nlayers * sizeof *counters, 0, &d);
    if (s != DDP_OK) control_abort(t->ctl, s); /* the control plane is unusable */
    compute->upload(m->params, host, np);
    compute->upload(m->bufs, (char *)host + np, nb);
    for (int i = 0; i < m->nlayers; i++) m->layers[i].num_batches_tracked = counters[i];
    free(host);
    free(counters);
    return DDP_OK;
}

/* ---- start-up consistency check ---------------------------------------- */

#define CHECK_ITEMS_MAX 96

/* What every rank must agree on, one fingerprint per item. */
typedef struct check_items {
    int n;
    char name[CHECK_ITEMS_MAX][64];
    uint64_t hash[CHECK_ITEMS_MAX];
} check_items_t;

static void item_(check_items_t *c, const char *name, const void *data, size_t n)
{
    if (c->n >= CHECK_ITEMS_MAX) return;
    snprintf(c->name[c->n], sizeof c->name[0], "%s", name);
    c->hash[c->n++] = hash_bytes(HASH_SEED, data, n);
}

/* The text of item i on this rank (for the mismatch message). */
static void item_text_(const trainer_t *t, const check_items_t *c, int i, char *buf, size_t n)
{
    const ddp_option_t *o = config_find(c->name[i] + 2);
    if (strncmp(c->name[i], "--", 2) == 0 && o) {
        config_format(t->cfg, o, buf, n);
    } else if (strcmp(c->name[i], "input files") == 0) {
        size_t u = 0;
        for (int k = 0; k < t->cfg->ninputs && u < n; k++)
            u += (size_t)snprintf(buf + u, n - u, "%s%s", k ? " " : "", t->cfg->inputs[k]);
    } else if (strcmp(c->name[i], "training data") == 0) {
        snprintf(buf, n, "%lld samples of %zu values", (long long)t->train.n,
                 t->train.sample_numel);
    } else if (strcmp(c->name[i], "validation data") == 0) {
        if (t->have_val)
            snprintf(buf, n, "/val with %lld samples of %zu values", (long long)t->val.n,
                     t->val.sample_numel);
        else
            snprintf(buf, n, "no /val");
    } else {
        snprintf(buf, n, "a different %s", c->name[i]);
    }
}

/* ---- content of the input files ----------------------------------------- */

/* Per input file, the fingerprint parts of its /train, then of its /val
 * (zeros where the file has no /val). */
#define FP_PER_FILE (2 * DECK_FP_PARTS)

static void fp_place_(const trainer_t *t, const deck_t *d, const deck_fp_t *fp, int split,
                      uint64_t *out)
{
    int k = 0;
    for (int i = 0; i < d->nshards; i++) {
        /* the shards are the input files in order, less those without the split */
        while (k < t->cfg->ninputs && strcmp(t->cfg->inputs[k], d->shards[i].path) != 0) k++;
        if (k == t->cfg->ninputs) return;
        memcpy(out + (size_t)k * FP_PER_FILE + (size_t)split * DECK_FP_PARTS, fp[i].part,
               sizeof fp[i].part);
        k++;
    }
}

/* Fingerprint every input file (deck_fingerprint) into out [ninputs *
 * FP_PER_FILE]; on one rank there is nobody to disagree with (zeros). */
static ddp_status_t fingerprint_inputs_(const trainer_t *t, uint64_t *out)
{
    if (t->ctl->size == 1) return DDP_OK;
    int n = t->train.nshards > t->val.nshards ? t->train.nshards : t->val.nshards;
    deck_fp_t *fp = ddp_calloc((size_t)n, sizeof *fp, "the input fingerprints");
    if (!fp) return DDP_ERR_NOMEM;
    ddp_status_t s = deck_fingerprint(&t->train, fp);
    if (s == DDP_OK) fp_place_(t, &t->train, fp, 0, out);
    if (s == DDP_OK && t->have_val) {
        s = deck_fingerprint(&t->val, fp);
        if (s == DDP_OK) fp_place_(t, &t->val, fp, 1, out);
    }
    free(fp);
    return s;
}

/* The content item differs: name the first input file, split and part
 * where rank bad_rank's fingerprint differs from rank 0's (collective). */
static ddp_status_t content_mismatch_(const trainer_t *t, const uint64_t *fp, int bad_rank,
                                      int nbad)
{
    size_t n = (size_t)t->cfg->ninputs * FP_PER_FILE;
    comm_desc_t d = {"startup-check", -1, -1};
    uint64_t *r0 = malloc(n * sizeof *r0), *rb = malloc(n * sizeof *rb);
    ddp_status_t s = control_agree(
        t->ctl, r0 && rb ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory in the start-up check"));
    if (s != DDP_OK) {
        free(r0);
        free(rb);
        return s;
    }
    memcpy(r0, fp, n * sizeof *r0);
    memcpy(rb, fp, n * sizeof *rb);
    if (control_bcast(t->ctl, r0, n * sizeof *r0, 0, &d) != DDP_OK ||
        control_bcast(t->ctl, rb, n * sizeof *rb, bad_rank, &d) != DDP_OK)
        control_abort(t->ctl, ddp_fail(DDP_ERR_COMM, "%s", ddp_error_message()));
    size_t at = 0;
    while (at < n && r0[at] == rb[at]) at++;
    free(r0);
    free(rb);
    if (at == n) at = 0; /* not reached: the combined hashes differ */
    int file = (int)(at / FP_PER_FILE), split = (int)(at % FP_PER_FILE) / DECK_FP_PARTS;
    int part = (int)(at % DECK_FP_PARTS);
    const char *sp = split ? "val" : "train";
    char what[160];
    if (part == DECK_FP_SIZE)
        snprintf(what, sizeof what, "the file sizes");
    else
        snprintf(what, sizeof what, "the %s of /%s/x or /%s/y", deck_fp_part_name(part), sp, sp);
    return ddp_fail(DDP_ERR_MISMATCH,
                    "ranks disagree on the content of input file %s: rank 0 and rank %d read "
                    "different data under the same path (%s differ%s; a stale node-local "
                    "copy?); give every rank the same file",
                    t->cfg->inputs[file], bad_rank, what,
                    nbad > 1 ? "; other ranks differ too" : "");
}

static void collect_items_(const trainer_t *t, const uint64_t *fp, check_items_t *c)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    char val[CONFIG_STR_MAX], name[64];
    for (int i = 0; i < ddp_noptions; i++) {
        if (strcmp(ddp_options[i].name, "config") == 0) continue; /* a path; values count */
        config_format(cfg, &ddp_options[i], val, sizeof val);
        snprintf(name, sizeof name, "--%s", ddp_options[i].name);
        item_(c, name, val, strlen(val));
    }
    uint64_t h = HASH_SEED;
    for (int k = 0; k < cfg->ninputs; k++)
        h = hash_bytes(h, cfg->inputs[k], strlen(cfg->inputs[k]) + 1);
    item_(c, "input files", &h, sizeof h);
    int64_t data[4] = {t->train.n, (int64_t)t->train.sample_numel, t->train.dtype,
                       t->train.regression ? t->train.targets : t->train.classes};
    item_(c, "training data", data, sizeof data);
    /* a rank without /val would skip the evaluation the others run */
    int64_t vdata[4] = {t->have_val, t->have_val ? t->val.n : 0,
                        t->have_val ? (int64_t)t->val.sample_numel : 0,
                        t->have_val ? t->val.dtype : 0};
    item_(c, "validation data", vdata, sizeof vdata);
    /* same paths and shapes, yet other bytes: a stale copy on some node */
    item_(c, "input content", fp, (size_t)cfg->ninputs * FP_PER_FILE * sizeof *fp);
    h = HASH_SEED;
    for (int k = 0; k < m->ntensors; k++) {
        const tensor_t *T = &m->tensors[k];
        h = hash_bytes(h, T->name, strlen(T->name));
        h = hash_bytes(h, T->shape, sizeof T->shape);
        h = hash_bytes(h, &T->offset, sizeof T->offset);
        h = hash_bytes(h, &T->frozen, sizeof T->frozen);
    }
    item_(c, "model layout", &h, sizeof h);
    h = HASH_SEED;
    for (int b = 0; b < m->nbuckets; b++) {
        h = hash_bytes(h, &m->buckets[b].offset, sizeof(size_t));
        h = hash_bytes(h, &m->buckets[b].count, sizeof(size_t));
    }
    item_(c, "bucket layout", &h, sizeof h);
}

/* Every rank runs with the same options, input files, data and layout:
 * before any collective whose size depends on them. */
static ddp_status_t consistency_check_(trainer_t *t)
{
    int W = t->ctl->size;
    check_items_t *c = calloc(1, sizeof *c);
    uint64_t *all = malloc((size_t)W * CHECK_ITEMS_MAX * sizeof *all);
    uint64_t *fp = calloc((size_t)t->cfg->ninputs * FP_PER_FILE, sizeof *fp);
    ddp_status_t s = control_agree(
        t->ctl, c && all && fp ? fingerprint_inputs_(t, fp)
                               : ddp_fail(DDP_ERR_NOMEM, "out of memory in the start-up check"));
    if (s != DDP_OK) {
        free(c);
        free(all);
        free(fp);
        return s;
    }
    collect_items_(t, fp, c);
    comm_desc_t d = {"startup-check", -1, -1};
    s = control_allgather(t->ctl, c->hash, all, CHECK_ITEMS_MAX * sizeof *all, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    /* first differing (item, rank) against rank 0, the same on every rank */
    int bad_item = -1, bad_rank = -1, nbad = 0;
    for (int i = 0; i < c->n; i++)
        for (int r = 1; r < W; r++)
            if (all[(size_t)r * CHECK_ITEMS_MAX + i] != all[i]) {
                if (bad_item < 0) bad_item = i, bad_rank = r;
                if (i == bad_item) nbad++;
            }
    if (bad_item >= 0 && strcmp(c->name[bad_item], "input content") == 0) {
        s = content_mismatch_(t, fp, bad_rank, nbad);
    } else if (bad_item >= 0) {
        /* fetch the two values for the message */
        char mine[CONFIG_STR_MAX] = "", theirs[CONFIG_STR_MAX] = "";
        item_text_(t, c, bad_item, mine, sizeof mine);
        snprintf(theirs, sizeof theirs, "%s", mine);
        if (control_bcast(t->ctl, theirs, sizeof theirs, bad_rank, &d) != DDP_OK ||
            control_bcast(t->ctl, mine, sizeof mine, 0, &d) != DDP_OK)
            control_abort(t->ctl, ddp_fail(DDP_ERR_COMM, "%s", ddp_error_message()));
        s = ddp_fail(DDP_ERR_MISMATCH,
                     "ranks disagree on %s: rank 0 has '%s', rank %d has '%s'%s; "
                     "every rank must run with the same options and input files",
                     c->name[bad_item], mine, bad_rank, theirs,
                     nbad > 1 ? " (other ranks differ too)" : "");
    }
    free(all);
    free(c);
    free(fp);
    return s;
}

/* ---- steps, buffers, the rest ------------------------------------------- */

/* Where the loop starts: step 0, or the checkpoint's position.  The global
 * sample cursor makes a resume at another world size continue where the
 * checkpoint stopped: the sampler's order of an epoch does not depend on
 * the world size. */
static ddp_status_t start_position_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const ckpt_resume_t *r = &t->ckpt.resume;
    t->first_step = t->first_epoch = t->first_step_in_epoch = 0;
    if (!r->active) return DDP_OK;
    int64_t global = cfg->batch * cfg->accum * t->ctl->size; /* samples per step */
    int64_t was = r->batch * r->accum * r->world_size;
    t->first_step = r->pos.step;
    t->first_epoch = r->pos.epoch;
    t->first_step_in_epoch = r->pos.sample_in_epoch / global;
    int64_t at = t->first_step_in_epoch * global;
    if (was != global)
        log_info("  resume       the global batch changes from %lld to %lld samples per step: "
                 "epoch %lld goes on at sample %lld of its order (the checkpoint had trained "
                 "on %lld of them%s); step numbers go on from %lld",
                 (long long)was, (long long)global, (long long)t->first_epoch + 1, (long long)at,
                 (long long)r->pos.sample_in_epoch,
                 at != r->pos.sample_in_epoch ? "; the ones in between are seen again" : "",
                 (long long)r->pos.step);
    if (t->first_step_in_epoch >= t->steps_per_epoch) {
        t->first_epoch++;
        t->first_step_in_epoch = 0;
    }
    return DDP_OK;
}

static ddp_status_t count_steps_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    sampler_init(&t->sampler, t->train.n, t->ctl->size, t->ctl->rank, (int)cfg->batch,
                 (uint64_t)cfg->seed, cfg->shuffle, cfg->drop_last);
    t->micro_per_epoch = t->sampler.steps;
    int64_t K = cfg->accum;
    t->steps_per_epoch = cfg->drop_last ? t->micro_per_epoch / K : (t->micro_per_epoch + K - 1) / K;
    if (t->steps_per_epoch < 1)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %lld samples make %lld micro-batches "
                        "per epoch, fewer than --accum %lld; lower --accum or --batch",
                        cfg->inputs[0], (long long)t->train.n, (long long)t->micro_per_epoch,
                        (long long)K);
    DDP_TRY(start_position_(t));
    int64_t spe = t->steps_per_epoch;
    if (cfg->steps > 0) {
        t->total_steps = cfg->steps;
        int64_t left = t->total_steps > t->first_step ? t->total_steps - t->first_step : 0;
        t->end_epoch =
            t->first_epoch + (left ? (t->first_step_in_epoch + left + spe - 1) / spe : 0);
        return DDP_OK;
    }
    if (cfg->epochs > INT64_MAX / spe)
        return ddp_fail(DDP_ERR_USAGE,
                        "--epochs %lld x %lld steps per epoch is more steps "
                        "than can be counted; use fewer epochs",
                        (long long)cfg->epochs, (long long)spe);
    t->end_epoch = cfg->epochs;
    t->total_steps = t->first_epoch >= cfg->epochs
                         ? t->first_step
                         : t->first_step + (spe - t->first_step_in_epoch) +
                               (cfg->epochs - t->first_epoch - 1) * spe;
    return DDP_OK;
}

/* The device batches, the loss sums, the host evaluation batch. */
static ddp_status_t alloc_batches_(trainer_t *t)
{
    const compute_ops_t *compute = t->compute;
    size_t numel = t->train.sample_numel, B = (size_t)t->cfg->batch;
    size_t k = t->train.targets > 0 ? (size_t)t->train.targets : 1;
    host_batch_t *h = &t->eval_host;
    int ok = 1;
    for (int i = 0; i < TRAINER_DEVICE_BATCHES; i++) {
        device_batch_t *d = &t->batches[i];
        d->x = compute->alloc(B * numel * sizeof(float));
        d->labels = compute->alloc(B * sizeof(int32_t));
        d->targets = compute->alloc(B * k * sizeof(float));
        d->sample_idx = compute->alloc(B * sizeof(int64_t));
        t->batch_free[i] = compute->event_create();
        ok = ok && d->x && d->labels && d->targets && d->sample_idx && t->batch_free[i];
    }
    t->cur = 0;
    t->batch = &t->batches[0];
    t->loss_sums = compute->alloc(2 * sizeof(double));
    t->upload_done = compute->event_create();
    h->x = malloc(B * numel * sizeof(float));
    h->labels = malloc(B * sizeof(int32_t));
    h->targets = malloc(B * k * sizeof(float));
    if (!ok || !t->loss_sums || !t->upload_done || !h->x || !h->labels || !h->targets)
        return compute_failure_(t, ddp_fail(DDP_ERR_NOMEM, "out of memory for batch buffers"));
    t->data_bytes = data_bytes_(t);
    return DDP_OK;
}

static comm_dtype_t wire_type_(int grad_compress)
{
    return grad_compress == COMPRESS_BF16   ? COMM_BF16
           : grad_compress == COMPRESS_FP16 ? COMM_FP16
                                            : COMM_FLOAT;
}

/* The update hook the reducer runs per bucket: the optimizer over a range. */
static void apply_range_(void *arg, size_t offset, size_t count)
{
    trainer_t *t = arg;
    optim_apply(&t->opt, &t->model, offset, count);
}

static ddp_status_t optimizer_and_reducer_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    model_mem_t mem = {plane_alloc_, plane_free_, t};
    optim_opts_t oo = optim_opts_from_config(cfg, t->total_steps);
    DDP_TRY(optim_init(&t->opt, &oo, &t->model, &mem));
    /* without clipping the optimizer runs bucket by bucket inside the
     * reducer, as each bucket's gradients become final (reducer.h) */
    reducer_apply_t apply = {.fn = apply_range_, .arg = t};
    apply.nout = optim_outputs(&t->opt, &t->model, apply.out);
    reducer_opts_t ro = {.wire = wire_type_(cfg->grad_compress),
                         .find_unused = cfg->find_unused,
                         .apply = optim_can_apply_per_bucket(&t->opt) ? &apply : NULL,
                         .mem = &mem};
    return reducer_init(&t->reducer, &t->model, &t->comm, &ro);
}

/* ---- the start-up table ----------------------------------------------------- */

static void print_table_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    const deck_t *d = &t->train;
    if (t->ctl->rank != 0) return;
    reducer_stats_t rs;
    reducer_get_stats(t->reducer, &rs);
    size_t pbytes = m->nparams * sizeof(float) + m->nbufs * sizeof(float);
    size_t gbytes = m->nparams * sizeof(float);
    size_t obytes = optim_state_bytes(&t->opt) + rs.scratch_bytes;
    log_info("ddptrain %s: %d rank%s on %d node%s (%d per node), device %s, comm %s%s",
             ddp_version(), t->comm.size, t->comm.size > 1 ? "s" : "", t->comm.nnodes,
             t->comm.nnodes > 1 ? "s" : "", t->comm.local_size, t->device, t->comm.ops->name,
             t->comm_memory ? " (node-shared memory)" : "");
    if (t->rank_devices) { /* device memory: every rank's GPU */
        int shown = t->comm.size <= 16 ? t->comm.size : 15;
        for (int r = 0; r < shown; r++)
            log_info("  %-12s rank %d on %s: %s", r ? "" : "gpus", r, control_host(t->ctl, r),
                     t->rank_devices[r]);
        if (shown < t->comm.size)
            log_info("               ... %d more ranks (rank %d: %s on %s)", t->comm.size - shown,
                     t->comm.size - 1, t->rank_devices[t->comm.size - 1],
                     control_host(t->ctl, t->comm.size - 1));
        if (cfg->precision == PRECISION_BF16)
            log_info("  precision    bf16 GEMM and convolution inputs, fp32 accumulation and "
                     "master weights");
    }
    char desc[256];
    deck_describe(d, desc, sizeof desc);
    log_info("  input        %s%s: %s; %lld val samples", cfg->inputs[0],
             cfg->ninputs > 1 ? " (+ more shards)" : "", desc,
             (long long)(t->have_val ? t->val.n : 0));
    log_info("  model        %s", cfg->model);
    log_info("               %d layers, %zu parameters (%zu trainable), loss %s", m->nlayers,
             m->nparams, m->ntrainable, t->loss.kind == LOSS_XENT ? "cross-entropy" : "mse");
    char buckets[512];
    size_t u = 0;
    for (int b = 0; b < m->nbuckets && u < sizeof buckets - 32; b++) {
        if (b == 8 && m->nbuckets > 9) {
            u += (size_t)snprintf(buckets + u, sizeof buckets - u, ", ... (%d more)",
                                  m->nbuckets - 8);
            break;
        }
        u += (size_t)snprintf(buckets + u, sizeof buckets - u, "%s%.2f", b ? ", " : "",
                              mib_(m->buckets[b].count * sizeof(float)));
    }
    log_info("  buckets      %d: %s MiB (cap %g MiB, first %g MiB)%s", m->nbuckets,
             m->nbuckets ? buckets : "-", cfg->bucket_cap_mb, cfg->first_bucket_mb,
             cfg->grad_compress
                 ? (cfg->grad_compress == COMPRESS_BF16 ? ", bf16 all-reduce" : ", fp16 all-reduce")
                 : "");
    log_info("  batch        %lld per rank x accum %lld x %d ranks = global batch %lld",
             (long long)cfg->batch, (long long)cfg->accum, t->comm.size,
             (long long)(cfg->batch * cfg->accum * t->comm.size));
    log_info("  steps        %lld per epoch, %lld total (%lld epoch%s)%s",
             (long long)t->steps_per_epoch, (long long)t->total_steps, (long long)t->end_epoch,
             t->end_epoch > 1 ? "s" : "", cfg->drop_last ? "" : ", last batch uneven");
    const ckpt_resume_t *r = &t->ckpt.resume;
    if (r->active)
        log_info(
            "  resume       %s: step %lld, epoch %lld, sample %lld of the epoch (saved by %lld "
            "rank%s)%s",
            r->path, (long long)r->pos.step, (long long)r->pos.epoch + 1,
            (long long)r->pos.sample_in_epoch, (long long)r->world_size,
            r->world_size > 1 ? "s" : "",
            t->first_step >= t->total_steps ? "; nothing left to train" : "");
    if (t->ckpt.note[0]) log_info("  resume       %s", t->ckpt.note);
    if (cfg->ckpt_dir[0]) {
        char every[96] = "", keep[32] = "all";
        if (cfg->ckpt_every > 0)
            snprintf(every, sizeof every, "every %lld steps, ", (long long)cfg->ckpt_every);
        if (cfg->ckpt_every_epochs > 0)
            snprintf(every + strlen(every), sizeof every - strlen(every), "every %lld epochs, ",
                     (long long)cfg->ckpt_every_epochs);
        if (cfg->keep > 0) snprintf(keep, sizeof keep, "the newest %lld", (long long)cfg->keep);
        log_info("  checkpoints  %s: %sat the end and on SIGUSR1/SIGTERM; keep %s", cfg->ckpt_dir,
                 every, keep);
    }
    log_info("  optimizer    %s, lr %g, schedule %s, warm-up %lld%s",
             config_choice_name("optimizer", cfg->optimizer), cfg->lr,
             config_choice_name("lr-schedule", cfg->lr_schedule), (long long)cfg->warmup_steps,
             cfg->clip_grad_norm > 0 ? ", gradient clipping" : "");
    log_info("  batchnorm    %s", !model_has_layer(m, LAYER_BN) ? "none in the model"
                                  : t->sync_bn ? "SyncBatchNorm (statistics over all ranks)"
                                               : "local statistics per rank");
    log_info("  memory/rank  params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations "
             "%.1f MiB, data %.1f MiB = %.1f MiB",
             mib_(pbytes), mib_(gbytes), mib_(obytes), mib_(m->act_bytes), mib_(t->data_bytes),
             mib_(pbytes + gbytes + obytes + m->act_bytes + t->data_bytes));
    if (t->mem_limit_address != MEMLIMIT_NONE)
        log_info("  address      about %.0f MiB per rank (with BLAS buffers and threads) of the "
                 "%.0f MiB limit (ulimit -v)",
                 mib_(t->mem_need_address), mib_(t->mem_limit_address));
    /* options that are not at their defaults, with where they came from */
    static const char *src_name[] = {"default", "input", "config file", "command line"};
    char line[1024];
    size_t lu = 0;
    for (int i = 0; i < ddp_noptions; i++) {
        if (cfg->source[i] == SRC_DEFAULT || strcmp(ddp_options[i].name, "model") == 0) continue;
        char v[CONFIG_STR_MAX];
        config_format(cfg, &ddp_options[i], v, sizeof v);
        int w = snprintf(line + lu, sizeof line - lu, "%s%s=%s (%s)", lu ? ", " : "",
                         ddp_options[i].name, v, src_name[cfg->source[i]]);
        if (w < 0 || (size_t)w >= sizeof line - lu) break;
        lu += (size_t)w;
    }
    if (lu) log_info("  options      %s", line);
    if (!cfg->sync && t->comm.size > 1)
        log_warn("--no-sync: gradients are not all-reduced, so the replicas diverge (a "
                 "benchmark mode, not training)");
}

/* ---- the device ----------------------------------------------------------- */

/* A failed compute op or allocation: the backend's own message (naming the
 * call) when it has one, else `fallback`. */
static ddp_status_t compute_failure_(const trainer_t *t, ddp_status_t fallback)
{
    if (t->compute && t->compute->check) {
        ddp_status_t s = t->compute->check();
        if (s != DDP_OK) return s;
    }
    return fallback;
}

/* --device and --precision: the compute backend (compute_pick), and the
 * comm backend for its memory: mpi for host memory, nccl for device
 * memory.  Not collective (agreed by the caller). */
static ddp_status_t choose_backends_(trainer_t *t, const comm_backend_t **comm)
{
    const ddp_config_t *cfg = t->cfg;
    const train_backends_t *b = t->backends;
    int gpus = b->cuda && b->gpu_count ? b->gpu_count() : 0;
    DDP_TRY(compute_pick(config_choice_name("device", cfg->device), b->cpu, b->cuda, gpus,
                         &t->compute));
    if (cfg->precision == PRECISION_BF16 && (t->compute != b->cuda || !b->set_bf16_gemm))
        return ddp_fail(DDP_ERR_USAGE,
                        "--precision bf16 needs the cuda backend, and this run computes on %s%s; "
                        "drop --precision bf16 or run with --device cuda on a GPU node",
                        t->compute->name,
                        cfg->device == DEVICE_AUTO ? " (--device auto found no GPU)" : "");
    *comm = t->compute->mem_kind == DDP_MEM_DEVICE ? b->device_comm : b->host_comm;
    if (!*comm)
        return ddp_fail(
            DDP_ERR_USAGE,
            "the %s compute backend computes in %s memory and this ddptrain has no comm "
            "backend for it (built without NCCL?); rebuild with ./configure --with-cuda "
            "--with-nccl, or use --device cpu",
            t->compute->name, ddp_mem_kind_name(t->compute->mem_kind));
    return DDP_OK;
}

/* This rank's place on its host, from the control plane's host names: the
 * compute backend binds its device before any comm backend exists (NCCL
 * needs the device set first). */
static void local_rank_(const trainer_t *t, int *local_rank, int *local_size)
{
    const control_t *ctl = t->ctl;
    const char *me = control_host(ctl, ctl->rank);
    *local_rank = 0;
    *local_size = 0;
    for (int r = 0; r < ctl->size; r++) {
        if (strcmp(control_host(ctl, r), me) != 0) continue;
        if (r < ctl->rank) ++*local_rank;
        ++*local_size;
    }
}

/* What every rank tells the others about its device. */
typedef struct rank_device {
    char id[64];    /* compute->device_id(): the PCI bus id ("" for host memory) */
    char desc[192]; /* compute->init's description */
} rank_device_t;

/* Every rank's device, gathered on the control plane: the start-up table
 * lists them, and two ranks of one host on one GPU are refused (they would
 * share its memory and serialise, and NCCL refuses them). */
static ddp_status_t check_devices_(trainer_t *t)
{
    control_t *ctl = t->ctl;
    if (t->compute->mem_kind != DDP_MEM_DEVICE) return DDP_OK;
    rank_device_t mine;
    memset(&mine, 0, sizeof mine);
    const char *id = t->compute->device_id ? t->compute->device_id() : "";
    snprintf(mine.id, sizeof mine.id, "%s", id ? id : "");
    snprintf(mine.desc, sizeof mine.desc, "%s", t->device);
    rank_device_t *all = calloc((size_t)ctl->size, sizeof *all);
    t->rank_devices = calloc((size_t)ctl->size, sizeof *t->rank_devices);
    ddp_status_t s = control_agree(
        ctl, all && t->rank_devices ? DDP_OK
                                    : ddp_fail(DDP_ERR_NOMEM, "out of memory for the device table"));
    if (s != DDP_OK) {
        free(all);
        return s;
    }
    comm_desc_t d = {"startup-devices", -1, -1};
    s = control_allgather(ctl, &mine, all, sizeof mine, &d);
    if (s != DDP_OK) control_abort(ctl, s);
    for (int r = 0; r < ctl->size; r++)
        snprintf(t->rank_devices[r], sizeof t->rank_devices[r], "%s", all[r].desc);
    for (int a = 0; a < ctl->size && s == DDP_OK; a++)
        for (int b = a + 1; b < ctl->size && s == DDP_OK; b++) {
            if (!all[a].id[0] || strcmp(all[a].id, all[b].id) != 0 ||
                strcmp(control_host(ctl, a), control_host(ctl, b)) != 0)
                continue;
            int n = 0;
            for (int r = 0; r < ctl->size; r++)
                n += strcmp(control_host(ctl, r), control_host(ctl, a)) == 0;
            s = ddp_fail(DDP_ERR_DEVICE,
                         "ranks %d and %d of host %s both compute on GPU %s (the host runs %d "
                         "ranks): start at most as many ranks per node as it has GPUs (Slurm: "
                         "--gpus-per-task=1, or --ntasks-per-node at most the GPUs per node; "
                         "mpirun: -npernode N), or check CUDA_VISIBLE_DEVICES",
                         a, b, control_host(ctl, a), all[a].id, n);
        }
    free(all);
    /* every rank found the same: no agreement needed */
    return s;
}

/* ---- the sequence ----------------------------------------------------------- */

ddp_status_t startup_run(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    control_t *ctl = t->ctl;
    /* the compute backend first, and its device bound (NCCL needs it),
     * then the gradient plane's comm backend for its memory */
    const comm_backend_t *comm = NULL;
    DDP_TRY(control_agree(ctl, choose_backends_(t, &comm)));
    int local_rank, local_size;
    local_rank_(t, &local_rank, &local_size);
    DDP_TRY(
        control_agree(ctl, t->compute->init(local_rank, local_size, t->device, sizeof t->device)));
    if (cfg->precision == PRECISION_BF16) {
        ddp_status_t bs = DDP_OK;
        if (t->backends->set_bf16_gemm(1) != 0)
            bs = compute_failure_(
                t, ddp_fail(DDP_ERR_DEVICE, "--precision bf16: the cuda backend refused it"));
        DDP_TRY(control_agree(ctl, bs));
    }
    DDP_TRY(check_devices_(t));
    ddp_status_t s = control_agree(ctl, comm->init(&t->comm, ctl->mpi));
    t->have_comm = s == DDP_OK;
    DDP_TRY(s);
    comm_track(&t->comm); /* a fatal error aborts it (comm_abort_all) */
    DDP_TRY(control_agree(ctl, checkpoint_startup(t)));
    DDP_TRY(control_agree(ctl, metrics_open(&t->metrics, t)));
    DDP_TRY(control_agree(ctl, open_data_(t)));
    DDP_TRY(control_agree(ctl, build_model_(t)));
    /* before any collective whose size depends on the options or the model */
    DDP_TRY(control_agree(ctl, consistency_check_(t)));
    DDP_TRY(checkpoint_resume_open(t));
    DDP_TRY(control_agree(ctl, choose_memory_(t)));
    DDP_TRY(control_agree(ctl, alloc_model_(t)));
    DDP_TRY(broadcast_model_(t));
    /* the start-up broadcast reached every rank: the first replica check */
    if (cfg->check_replicas > 0) DDP_TRY(diagnostics_check_replicas(t, 0));
    DDP_TRY(control_agree(ctl, count_steps_(t)));
    DDP_TRY(control_agree(ctl, alloc_batches_(t)));
    DDP_TRY(control_agree(ctl, optimizer_and_reducer_(t)));
    t->sync = cfg->sync;
    DDP_TRY(checkpoint_resume_state(t));
    print_table_(t);

    loader_opts_t lo = {.prefetch = (int)cfg->prefetch,
                        .augment = cfg->augment,
                        .first_epoch = t->first_epoch,
                        .first_step = t->first_step_in_epoch * cfg->accum,
                        .epochs = t->end_epoch - t->first_epoch,
                        .host_alloc = t->compute->host_alloc,
                        .host_free = t->compute->host_free};
    return control_agree(ctl, loader_start(&t->loader, &t->train, &t->sampler, &lo));
}

void startup_teardown(trainer_t *t)
{
    if (t->loader) loader_stop(t->loader);
    metrics_free(&t->metrics);
    reducer_free(t->reducer);
    optim_free(&t->opt);
    if (t->have_model) {
        const compute_ops_t *compute = t->compute;
        for (int i = 0; i < TRAINER_DEVICE_BATCHES; i++) {
            compute->free(t->batches[i].x);
            compute->free(t->batches[i].labels);
            compute->free(t->batches[i].targets);
            compute->free(t->batches[i].sample_idx);
            if (t->batch_free[i]) compute->event_destroy(t->batch_free[i]);
        }
        compute->free(t->loss_sums);
        if (t->upload_done) compute->event_destroy(t->upload_done);
        if (t->registered_model) deregister_model_buffers_(t);
        model_free(&t->model);
    }
    free(t->eval_host.x);
    free(t->eval_host.labels);
    free(t->eval_host.targets);
    if (t->have_val) deck_close(&t->val);
    if (t->have_train) deck_close(&t->train);
    if (t->have_comm) comm_free(&t->comm);
    free(t->rank_devices);
    checkpoint_free(&t->ckpt);
}
