/* train.c -- the trainer: start-up (with agreed errors), the consistency
 * check, the start-up table, the training loop with bucketed all-reduce and
 * accumulation, evaluation, the final save, and the one place errors are
 * reported and the job is ended. */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "deck.h"
#include "h5util.h"
#include "loader.h"
#include "log.h"
#include "model.h"
#include "optim.h"
#include "reducer.h"
#include "sampler.h"
#include "version.h"
#include "weights.h"

/* ---- errors ------------------------------------------------------------- */

/* Start-up errors are agreed on: every rank learns whether any rank failed,
 * and the lowest failing rank's message is the one printed (rank 0's when it
 * failed too), so the job stops with one clear line and no hang. */
static ddp_status_t agree_(MPI_Comm comm, ddp_status_t s)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine = s != DDP_OK ? rank : size, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == size) return DDP_OK;
    struct {
        int status;
        char msg[1024];
    } e = {0, ""};
    if (rank == first) {
        e.status = (int)s;
        snprintf(e.msg, sizeof e.msg, "%s", ddp_error_message());
    }
    MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, comm);
    ddp_clear_error();
    if (first == 0 || size == 1) return ddp_fail((ddp_status_t)e.status, "%s", e.msg);
    return ddp_fail((ddp_status_t)e.status, "rank %d: %s", first, e.msg);
}

/* A failure inside the training loop, where the other ranks may be waiting
 * in a collective: report it and end the whole job.  When several ranks
 * fail the same way, rank 0 speaks; the others give it a moment first. */
static void die_(MPI_Comm comm, ddp_status_t s)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    /* when every rank fails at once, rank 0's line is the one printed: its
     * MPI_Abort ends the others while they wait */
    if (rank != 0) usleep(2000000);
    log_error(ddp_error_message());
    MPI_Abort(comm, ddp_exit_code(s));
    exit(ddp_exit_code(s)); /* not reached */
}

/* ---- helpers ------------------------------------------------------------- */

static double now_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv1a_(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
#define FNV_SEED 0xcbf29ce484222325ull

static const char *nonfinite_name_(double x)
{
    return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

static double mib_(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

static double peak_rss_mib_(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* Proportional set size now (Linux /proc/self/smaps_rollup), -1 where the
 * system does not say.  Unlike RSS it counts a page shared by k processes
 * as 1/k: with the shared-memory comm path every rank also touches the
 * others' buffers, which RSS counts again in full in every rank. */
static double pss_mib_(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    double kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

/* ---- the trainer ---------------------------------------------------------- */

typedef struct trainer {
    const ddp_config_t *cfg;
    comm_t comm;
    int comm_ok;
    const compute_ops_t *be;
    char device[128]; /* the backend's description, for the start-up table */
    deck_t train, val;
    int have_train, have_val;
    int loss;    /* LOSS_XENT or LOSS_MSE */
    int sync_bn; /* SyncBatchNorm in use */
    model_t model;
    int have_model;
    optim_t opt;
    reducer_t red;
    int have_red;
    sampler_t sampler;
    loader_t *loader;
    int64_t micro_per_epoch, steps_per_epoch, total_steps, epochs;
    /* device copies of the current batch */
    float *x_dev, *t_dev;
    int32_t *y_dev;
    int64_t *idx_dev;
    double *acc_dev;
    /* per-step times for the medians of the summary (the first 1M steps) */
    double *step_s, *wait_s;
    size_t nstat, stat_cap;
    /* evaluation host buffers */
    float *ex, *et;
    int32_t *ey;
    size_t data_bytes;
} trainer_t;

/* --save is written after training: find out now, not hours later, that it
 * cannot be (rank 0 creates and removes the temporary file it will use). */
static ddp_status_t probe_save_(const trainer_t *t)
{
    const char *path = t->cfg->save;
    if (!path[0] || t->comm.rank != 0) return DDP_OK;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ddp_fail(DDP_ERR_USAGE, "--save %s is a directory; name a file, e.g. %s/weights.h5",
                        path, path);
    h5_atomic_t a;
    ddp_status_t s = h5_atomic_create(&a, path);
    if (s != DDP_OK) return ddp_fail_override(s, "--save %s: %s", path, ddp_error_message());
    h5_atomic_abandon(&a);
    return DDP_OK;
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
    t->loss = cfg->loss == LOSS_AUTO ? (d->regression ? LOSS_MSE : LOSS_XENT) : cfg->loss;
    if (t->loss == LOSS_XENT) DDP_TRY(deck_require_labels(d));
    if (t->have_val &&
        (t->val.regression != d->regression || act_numel(t->val.shape) != act_numel(d->shape)))
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: /val does not match /train (sample shape or label "
                        "kind differ)",
                        cfg->inputs[0]);
    if (cfg->drop_last) DDP_TRY(deck_check_size(d, t->comm.size, (int)cfg->batch, cfg->drop_last));
    if (cfg->check_data) {
        DDP_TRY(deck_check_finite(&t->train));
        if (t->have_val) DDP_TRY(deck_check_finite(&t->val));
    }
    return DDP_OK;
}

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
    DDP_TRY(model_layout(&t->model, &mo, t->be));
    t->have_model = 1;
    const model_t *m = &t->model;
    if (t->loss == LOSS_XENT) {
        DDP_TRY(deck_check_classes(d, m->outputs));
        if (t->have_val) DDP_TRY(deck_check_classes(&t->val, m->outputs));
    } else {
        DDP_TRY(deck_require_targets(d, m->outputs));
        if (t->have_val) DDP_TRY(deck_require_targets(&t->val, m->outputs));
    }
    t->sync_bn = cfg->sync_bn < 0 ? (t->comm.size > 1 && model_has_layer(m, LAYER_BN))
                                  : (cfg->sync_bn && t->comm.size > 1);
    return DDP_OK;
}

static ddp_status_t comm_mem_alloc_cb_(void *comm, size_t bytes, void **p)
{
    return comm_mem_alloc(comm, bytes, p);
}

static void comm_mem_free_cb_(void *comm, void *p)
{
    comm_mem_free(comm, p);
}

/* Memory (parameters and gradients from the comm backend, collectively:
 * every rank has the same layout by now, so buckets are the same slices on
 * every rank, which the shared-memory all-reduce needs), initial weights,
 * --init on rank 0. */
static ddp_status_t alloc_model_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    model_mem_t gm = {comm_mem_alloc_cb_, comm_mem_free_cb_, &t->comm};
    DDP_TRY(model_alloc(&t->model, &gm));
    DDP_TRY(model_init_params(&t->model, (uint64_t)cfg->seed));
    if (cfg->init[0] && t->comm.rank == 0) return weights_load(cfg->init, &t->model);
    return DDP_OK;
}

/* Rank 0's parameters, buffers and BN counters go to every rank. */
static ddp_status_t broadcast_model_(trainer_t *t)
{
    model_t *m = &t->model;
    comm_desc_t d = {"broadcast-parameters", -1, -1};
    size_t np = m->nparams * sizeof(float), nb = m->nbufs * sizeof(float);
    float *host = malloc(np + nb + 1);
    int64_t *cnt = calloc((size_t)m->nlayers, sizeof *cnt);
    ddp_status_t s = agree_(t->comm.mpi, host && cnt ? DDP_OK
                                                     : ddp_fail(DDP_ERR_NOMEM, "out of memory "
                                                                               "broadcasting the "
                                                                               "parameters"));
    if (s != DDP_OK) {
        free(host);
        free(cnt);
        return s;
    }
    t->be->download(host, m->params, np);
    t->be->download((char *)host + np, m->bufs, nb);
    for (int i = 0; i < m->nlayers; i++) cnt[i] = m->layers[i].num_batches_tracked;
    s = t->comm.ops->bcast(&t->comm, host, np + nb, 0, &d);
    if (s == DDP_OK) s = t->comm.ops->bcast(&t->comm, cnt, (size_t)m->nlayers * sizeof *cnt, 0, &d);
    if (s != DDP_OK) die_(t->comm.mpi, s); /* the communicator is unusable */
    t->be->upload(m->params, host, np);
    t->be->upload(m->bufs, (char *)host + np, nb);
    for (int i = 0; i < m->nlayers; i++) m->layers[i].num_batches_tracked = cnt[i];
    free(host);
    free(cnt);
    return DDP_OK;
}

/* ---- start-up consistency check -------------------------------------------- */

#define CHECK_ITEMS_MAX 96

typedef struct check_items {
    int n;
    char name[CHECK_ITEMS_MAX][64];
    uint64_t hash[CHECK_ITEMS_MAX];
} check_items_t;

static void item_(check_items_t *c, const char *name, const void *data, size_t n)
{
    if (c->n >= CHECK_ITEMS_MAX) return;
    snprintf(c->name[c->n], sizeof c->name[0], "%s", name);
    c->hash[c->n++] = fnv1a_(FNV_SEED, data, n);
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

static ddp_status_t consistency_check_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    int W = t->comm.size;
    check_items_t *c = calloc(1, sizeof *c);
    uint64_t *all = malloc((size_t)W * CHECK_ITEMS_MAX * sizeof *all);
    ddp_status_t s = agree_(t->comm.mpi, c && all ? DDP_OK
                                                  : ddp_fail(DDP_ERR_NOMEM, "out of memory in the "
                                                                            "start-up check"));
    if (s != DDP_OK) {
        free(c);
        free(all);
        return s;
    }
    char val[CONFIG_STR_MAX], name[64];
    for (int i = 0; i < ddp_noptions; i++) {
        if (strcmp(ddp_options[i].name, "config") == 0) continue; /* a path; values count */
        config_format(cfg, &ddp_options[i], val, sizeof val);
        snprintf(name, sizeof name, "--%s", ddp_options[i].name);
        item_(c, name, val, strlen(val));
    }
    uint64_t h = FNV_SEED;
    for (int k = 0; k < cfg->ninputs; k++)
        h = fnv1a_(h, cfg->inputs[k], strlen(cfg->inputs[k]) + 1);
    item_(c, "input files", &h, sizeof h);
    int64_t data[4] = {t->train.n, (int64_t)t->train.sample_numel, t->train.dtype,
                       t->train.regression ? t->train.targets : t->train.classes};
    item_(c, "training data", data, sizeof data);
    /* a rank without /val would skip the evaluation the others run */
    int64_t vdata[4] = {t->have_val, t->have_val ? t->val.n : 0,
                        t->have_val ? (int64_t)t->val.sample_numel : 0,
                        t->have_val ? t->val.dtype : 0};
    item_(c, "validation data", vdata, sizeof vdata);
    h = FNV_SEED;
    for (int k = 0; k < m->ntensors; k++) {
        const tensor_t *T = &m->tensors[k];
        h = fnv1a_(h, T->name, strlen(T->name));
        h = fnv1a_(h, T->shape, sizeof T->shape);
        h = fnv1a_(h, &T->offset, sizeof T->offset);
        h = fnv1a_(h, &T->frozen, sizeof T->frozen);
    }
    item_(c, "model layout", &h, sizeof h);
    h = FNV_SEED;
    for (int b = 0; b < m->nbuckets; b++) {
        h = fnv1a_(h, &m->buckets[b].offset, sizeof(size_t));
        h = fnv1a_(h, &m->buckets[b].count, sizeof(size_t));
    }
    item_(c, "bucket layout", &h, sizeof h);

    comm_desc_t d = {"startup-check", -1, -1};
    s = t->comm.ops->allgather(&t->comm, c->hash, all, CHECK_ITEMS_MAX * sizeof *all, &d);
    if (s != DDP_OK) die_(t->comm.mpi, s);
    /* first differing (item, rank) against rank 0, the same on every rank */
    int bad_item = -1, bad_rank = -1, nbad = 0;
    for (int i = 0; i < c->n && s == DDP_OK; i++)
        for (int r = 1; r < W; r++)
            if (all[(size_t)r * CHECK_ITEMS_MAX + i] != all[i]) {
                if (bad_item < 0) bad_item = i, bad_rank = r;
                if (i == bad_item) nbad++;
            }
    if (s == DDP_OK && bad_item >= 0) {
        /* fetch the two values for the message */
        char mine[CONFIG_STR_MAX] = "", theirs[CONFIG_STR_MAX] = "";
        item_text_(t, c, bad_item, mine, sizeof mine);
        snprintf(theirs, sizeof theirs, "%s", mine);
        t->comm.ops->bcast(&t->comm, theirs, sizeof theirs, bad_rank, &d);
        t->comm.ops->bcast(&t->comm, mine, sizeof mine, 0, &d);
        s = ddp_fail(DDP_ERR_MISMATCH,
                     "ranks disagree on %s: rank 0 has '%s', rank %d has '%s'%s; "
                     "every rank must run with the same options and input files",
                     c->name[bad_item], mine, bad_rank, theirs,
                     nbad > 1 ? " (other ranks differ too)" : "");
    }
    free(all);
    free(c);
    return s;
}

/* ---- start-up table --------------------------------------------------------- */

static void print_table_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    const deck_t *d = &t->train;
    if (t->comm.rank != 0) return;
    size_t pbytes = m->nparams * sizeof(float) + m->nbufs * sizeof(float);
    size_t gbytes = m->nparams * sizeof(float);
    size_t obytes = optim_state_bytes(&t->opt) + (t->red.half ? m->ntrainable * 2 : 0);
    log_info("ddptrain %s: %d rank%s on %d node%s (%d per node), device %s, comm %s", ddp_version(),
             t->comm.size, t->comm.size > 1 ? "s" : "", t->comm.nnodes,
             t->comm.nnodes > 1 ? "s" : "", t->comm.local_size, t->device, t->comm.ops->name);
    char desc[256];
    deck_describe(d, desc, sizeof desc);
    log_info("  input        %s%s: %s; %lld val samples", cfg->inputs[0],
             cfg->ninputs > 1 ? " (+ more shards)" : "", desc,
             (long long)(t->have_val ? t->val.n : 0));
    size_t ntrain = m->ntrainable;
    log_info("  model        %s", cfg->model);
    log_info("               %d layers, %zu parameters (%zu trainable), loss %s", m->nlayers,
             m->nparams, ntrain, t->loss == LOSS_XENT ? "cross-entropy" : "mse");
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
             (long long)t->steps_per_epoch, (long long)t->total_steps, (long long)t->epochs,
             t->epochs > 1 ? "s" : "", cfg->drop_last ? "" : ", last batch uneven");
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
}

/* ---- evaluation --------------------------------------------------------------- */

/* Average BN running statistics across ranks (used with --no-sync-bn before
 * evaluation and saving, so every rank evaluates and saves the same model). */
static ddp_status_t average_bn_buffers_(trainer_t *t)
{
    model_t *m = &t->model;
    if (t->sync_bn || t->comm.size == 1 || m->nbufs == 0) return DDP_OK;
    comm_desc_t d = {"average-bn-statistics", -1, -1};
    ddp_status_t s = comm_allreduce(&t->comm, m->bufs, m->nbufs, COMM_FLOAT, &d);
    if (s != DDP_OK) die_(t->comm.mpi, s);
    t->be->scale(m->nbufs, m->bufs, 1.0f / (float)t->comm.size);
    return DDP_OK;
}

static ddp_status_t evaluate_ranks_(trainer_t *t, int64_t epoch, int64_t step, train_result_t *res)
{
    if (!t->have_val) return DDP_OK;
    const ddp_config_t *cfg = t->cfg;
    model_t *m = &t->model;
    const compute_ops_t *be = t->be;
    DDP_TRY(average_bn_buffers_(t));
    int64_t lo, cnt;
    deck_eval_range(&t->val, t->comm.size, t->comm.rank, &lo, &cnt);
    int64_t hi = lo + cnt;
    double acc[3] = {0, 0, 0};
    be->zero(t->acc_dev, 2 * sizeof(double));
    size_t numel = t->val.sample_numel;
    int k = t->val.targets;
    for (int64_t i = lo; i < hi; i += cfg->batch) {
        int n = (int)(hi - i < cfg->batch ? hi - i : cfg->batch);
        DDP_TRY(deck_read_range(&t->val, i, n, t->ex, t->loss == LOSS_XENT ? t->ey : NULL,
                                t->loss == LOSS_MSE ? t->et : NULL));
        be->upload(t->x_dev, t->ex, (size_t)n * numel * sizeof(float));
        if (t->loss == LOSS_XENT)
            be->upload(t->y_dev, t->ey, (size_t)n * sizeof(int32_t));
        else
            be->upload(t->t_dev, t->et, (size_t)n * (size_t)k * sizeof(float));
        step_ctx_t ctx = {.n = n,
                          .global_n = n,
                          .sample_idx = NULL,
                          .step = step,
                          .seed = (uint64_t)cfg->seed,
                          .train = 0};
        const float *out;
        DDP_TRY(model_forward(m, t->x_dev, &ctx, &out));
        if (t->loss == LOSS_XENT)
            be->xent(n, m->outputs, out, t->y_dev, 0.0f, 0.0f, NULL, t->acc_dev);
        else
            be->mse(n, k, out, t->t_dev, 0.0f, NULL, t->acc_dev);
    }
    be->download(acc, t->acc_dev, 2 * sizeof(double));
    acc[2] = (double)cnt;
    comm_desc_t d = {"evaluation", -1, step};
    DDP_TRY(comm_allreduce(&t->comm, acc, 3, COMM_DOUBLE, &d));
    double count = acc[2];
    double loss = acc[0] / (t->loss == LOSS_XENT ? count : count * k);
    res->val_loss = loss;
    res->val_count = (int64_t)count;
    if (t->loss == LOSS_XENT) {
        res->val_acc = acc[1] / count;
        log_result("eval epoch=%lld step=%lld val_loss=%.6f val_acc=%.6f samples=%lld",
                   (long long)epoch, (long long)step, loss, res->val_acc, (long long)count);
    } else {
        res->val_acc = NAN;
        log_result("eval epoch=%lld step=%lld val_loss=%.6f samples=%lld", (long long)epoch,
                   (long long)step, loss, (long long)count);
    }
    return DDP_OK;
}

/* Evaluation on the /val split.  Ranks read different ranges, so a read
 * failure is local: it ends the job (die_) rather than leave the other ranks
 * in the final all-reduce. */
static void evaluate_(trainer_t *t, int64_t epoch, int64_t step, train_result_t *res)
{
    ddp_status_t s = evaluate_ranks_(t, epoch, step, res);
    if (s != DDP_OK) die_(t->comm.mpi, s);
}

/* ---- replica check ------------------------------------------------------------- */

static ddp_status_t check_replicas_(trainer_t *t, int64_t step)
{
    model_t *m = &t->model;
    /* with --no-sync-bn the running statistics differ between ranks by design
     * (they are averaged before evaluation and saving): parameters only */
    size_t np = m->nparams * sizeof(float), nb = t->sync_bn ? m->nbufs * sizeof(float) : 0;
    char *host = malloc(np + nb + 1);
    if (!host) die_(t->comm.mpi, ddp_fail(DDP_ERR_NOMEM, "out of memory in the replica check"));
    t->be->download(host, m->params, np);
    t->be->download(host + np, m->bufs, nb);
    uint64_t h = fnv1a_(FNV_SEED, host, np + nb);
    free(host);
    uint64_t *all = malloc((size_t)t->comm.size * sizeof *all);
    if (!all) die_(t->comm.mpi, ddp_fail(DDP_ERR_NOMEM, "out of memory in the replica check"));
    comm_desc_t d = {"replica-check", -1, step};
    ddp_status_t s = t->comm.ops->allgather(&t->comm, &h, all, sizeof h, &d);
    if (s != DDP_OK) die_(t->comm.mpi, s);
    /* from here every rank sees the same hashes: a mismatch is agreed */
    for (int r = 1; r < t->comm.size && s == DDP_OK; r++)
        if (all[r] != all[0])
            s = ddp_fail(DDP_ERR_MISMATCH,
                         "replicas diverged: after step %lld the parameters%s of "
                         "rank %d differ from rank 0's (hash %016llx vs %016llx); the model is "
                         "no longer the same on every rank",
                         (long long)step, nb ? " and BN statistics" : "", r,
                         (unsigned long long)all[r], (unsigned long long)all[0]);
    free(all);
    return s;
}

/* Fault injection for tests: DDP_FAULT_PERTURB=RANK:STEP nudges one
 * parameter of one rank after that step, so a replica check must fire. */
static void maybe_perturb_(trainer_t *t, int64_t step)
{
    const char *f = getenv("DDP_FAULT_PERTURB");
    int rank;
    long long at;
    if (!f || sscanf(f, "%d:%lld", &rank, &at) != 2) return;
    if (rank != t->comm.rank || at != step || t->model.nparams == 0) return;
    float v;
    t->be->download(&v, t->model.params, sizeof v);
    v += 1e-3f;
    t->be->upload(t->model.params, &v, sizeof v);
}

/* ---- the loop ------------------------------------------------------------------ */

static ddp_status_t setup_(trainer_t *t, train_result_t *res)
{
    const ddp_config_t *cfg = t->cfg;
    MPI_Comm world = t->comm.mpi;
    int W = t->comm.size;
    t->be = compute_find("cpu");
    DDP_TRY(agree_(
        world, t->be->init(t->comm.local_rank, t->comm.local_size, t->device, sizeof t->device)));

    DDP_TRY(agree_(world, probe_save_(t)));
    DDP_TRY(agree_(world, open_data_(t)));
    DDP_TRY(agree_(world, build_model_(t)));
    /* before any collective whose size depends on the options or the model */
    DDP_TRY(agree_(world, consistency_check_(t)));
    DDP_TRY(agree_(world, alloc_model_(t)));
    DDP_TRY(broadcast_model_(t));

    /* steps */
    sampler_init(&t->sampler, t->train.n, W, t->comm.rank, (int)cfg->batch, (uint64_t)cfg->seed,
                 cfg->shuffle, cfg->drop_last);
    t->micro_per_epoch = t->sampler.steps;
    int64_t K = cfg->accum;
    t->steps_per_epoch = cfg->drop_last ? t->micro_per_epoch / K : (t->micro_per_epoch + K - 1) / K;
    if (t->steps_per_epoch < 1)
        DDP_TRY(
            agree_(world, ddp_fail(DDP_ERR_INPUT,
                                   "%s: %lld samples make %lld micro-batches "
                                   "per epoch, fewer than --accum %lld; lower --accum or --batch",
                                   cfg->inputs[0], (long long)t->train.n,
                                   (long long)t->micro_per_epoch, (long long)K)));
    if (cfg->steps > 0) {
        t->total_steps = cfg->steps;
        t->epochs = (cfg->steps + t->steps_per_epoch - 1) / t->steps_per_epoch;
    } else {
        if (cfg->epochs > INT64_MAX / t->steps_per_epoch)
            DDP_TRY(agree_(world, ddp_fail(DDP_ERR_USAGE,
                                           "--epochs %lld x %lld steps per epoch is more steps "
                                           "than can be counted; use fewer epochs",
                                           (long long)cfg->epochs, (long long)t->steps_per_epoch)));
        t->epochs = cfg->epochs;
        t->total_steps = cfg->epochs * t->steps_per_epoch;
    }

    /* device batch buffers and host evaluation buffers */
    const model_t *m = &t->model;
    size_t numel = t->train.sample_numel, B = (size_t)cfg->batch;
    int k = t->train.targets > 0 ? t->train.targets : 1;
    t->x_dev = t->be->alloc(B * numel * sizeof(float));
    t->y_dev = t->be->alloc(B * sizeof(int32_t));
    t->t_dev = t->be->alloc(B * (size_t)k * sizeof(float));
    t->idx_dev = t->be->alloc(B * sizeof(int64_t));
    t->acc_dev = t->be->alloc(2 * sizeof(double));
    t->ex = malloc(B * numel * sizeof(float));
    t->ey = malloc(B * sizeof(int32_t));
    t->et = malloc(B * (size_t)k * sizeof(float));
    if (!t->x_dev || !t->y_dev || !t->t_dev || !t->idx_dev || !t->acc_dev || !t->ex || !t->ey ||
        !t->et)
        DDP_TRY(agree_(world, ddp_fail(DDP_ERR_NOMEM, "out of memory for batch buffers")));
    size_t per_batch =
        B * (numel * sizeof(float) + sizeof(int32_t) + (size_t)k * sizeof(float) + sizeof(int64_t));
    t->data_bytes = per_batch * (size_t)(cfg->prefetch + 2); /* queue + device copy + eval */

    model_mem_t mem = {comm_mem_alloc_cb_, comm_mem_free_cb_, &t->comm};
    ddp_status_t s = optim_init(&t->opt, cfg, m, t->total_steps, &mem);
    if (s == DDP_OK) {
        s = reducer_init(&t->red, &t->model, &t->comm, cfg->grad_compress, cfg->find_unused);
        t->have_red = s == DDP_OK;
    }
    DDP_TRY(agree_(world, s));
    print_table_(t);

    loader_opts_t lo = {.prefetch = (int)cfg->prefetch,
                        .augment = cfg->augment,
                        .first_epoch = 0,
                        .first_step = 0,
                        .epochs = t->epochs};
    DDP_TRY(agree_(world, loader_start(&t->loader, &t->train, &t->sampler, &lo)));
    res->steps = 0;
    return DDP_OK;
}

static void teardown_(trainer_t *t)
{
    if (t->loader) loader_stop(t->loader);
    if (t->have_red) reducer_free(&t->red);
    optim_free(&t->opt);
    if (t->have_model) {
        const compute_ops_t *be = t->be;
        be->free(t->x_dev);
        be->free(t->y_dev);
        be->free(t->t_dev);
        be->free(t->idx_dev);
        be->free(t->acc_dev);
        model_free(&t->model);
    }
    free(t->step_s);
    free(t->wait_s);
    free(t->ex);
    free(t->ey);
    free(t->et);
    if (t->have_val) deck_close(&t->val);
    if (t->have_train) deck_close(&t->train);
}

static void apply_range_(void *arg, size_t offset, size_t count)
{
    trainer_t *t = arg;
    optim_apply(&t->opt, &t->model, offset, count);
}

/* One optimizer step: K micro-batches, the last one all-reduced. */
static ddp_status_t train_step_(trainer_t *t, int64_t epoch, int64_t step_in_epoch,
                                int64_t global_step, int64_t *samples)
{
    const ddp_config_t *cfg = t->cfg;
    model_t *m = &t->model;
    const compute_ops_t *be = t->be;
    int64_t K = cfg->accum;
    int64_t first_micro = step_in_epoch * K;
    int64_t nmicro = t->micro_per_epoch - first_micro < K ? t->micro_per_epoch - first_micro : K;
    /* the union batch of the step over all ranks and micro-batches */
    int64_t gcount = 0;
    for (int64_t j = 0; j < nmicro; j++)
        gcount += sampler_global_count(&t->sampler, first_micro + j);
    int k = t->train.targets;
    float scale = (float)(1.0 / ((double)gcount * (t->loss == LOSS_MSE ? k : 1)));
    size_t numel = t->train.sample_numel;
    /* without clipping, the optimizer runs bucket by bucket as each bucket's
     * gradients become final, while they are still in cache */
    int split = optim_can_split(&t->opt);
    t->red.apply = split ? apply_range_ : NULL;
    t->red.apply_arg = t;
    t->red.napply_out = optim_outputs(&t->opt, m, t->red.apply_out);
    for (int64_t j = 0; j < nmicro; j++) {
        loader_batch_t *b;
        DDP_TRY(loader_next(t->loader, &b));
        if (b->epoch != epoch || b->step != first_micro + j)
            return ddp_fail(DDP_ERR_INTERNAL,
                            "loader delivered epoch %lld batch %lld, expected "
                            "epoch %lld batch %lld",
                            (long long)b->epoch, (long long)b->step, (long long)epoch,
                            (long long)(first_micro + j));
        int n = b->n;
        be->upload(t->x_dev, b->x, (size_t)n * numel * sizeof(float));
        be->upload(t->idx_dev, b->idx, (size_t)n * sizeof(int64_t));
        if (t->loss == LOSS_XENT)
            be->upload(t->y_dev, b->labels, (size_t)n * sizeof(int32_t));
        else
            be->upload(t->t_dev, b->targets, (size_t)n * (size_t)k * sizeof(float));
        *samples += n;
        loader_release(t->loader, b);

        int last = j == nmicro - 1;
        step_ctx_t ctx = {
            .n = n,
            .global_n = sampler_global_count(&t->sampler, first_micro + j),
            .sample_idx = t->idx_dev,
            .step = global_step,
            .seed = (uint64_t)cfg->seed,
            .train = 1,
            .sync_bn = t->sync_bn ? &t->comm : NULL,
            .grad_beta = j == 0 ? 0.0f : 1.0f,
            .grads_ready = reducer_layer_ready,
            .grads_ready_arg = &t->red,
        };
        reducer_begin(&t->red, last, cfg->sync, global_step, ctx.grad_beta);
        if (last && split) optim_begin(&t->opt);
        const float *out;
        DDP_TRY(model_forward(m, t->x_dev, &ctx, &out));
        if (t->loss == LOSS_XENT)
            be->xent(n, m->outputs, out, t->y_dev, (float)cfg->label_smoothing, scale,
                     model_dout(m), t->acc_dev);
        else
            be->mse(n, k, out, t->t_dev, scale, model_dout(m), t->acc_dev);
        DDP_TRY(model_backward(m, t->x_dev, &ctx));
    }
    DDP_TRY(reducer_finish(&t->red));
    if (split) return DDP_OK; /* every bucket was applied as it became final */
    double gnorm;
    return optim_step(&t->opt, m, &gnorm);
}

static int cmp_double_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_(double *v, size_t n)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double_);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static ddp_status_t loop_(trainer_t *t, train_result_t *res)
{
    const ddp_config_t *cfg = t->cfg;
    const compute_ops_t *be = t->be;
    int64_t step = 0, samples = 0, window_samples = 0;
    double t_start = now_(), t_window = t_start;
    double wait0 = loader_wait_seconds(t->loader), comm0 = 0;
    size_t cap = (size_t)(t->total_steps < (1 << 20) ? t->total_steps : (1 << 20));
    t->step_s = malloc((cap + 1) * sizeof *t->step_s);
    t->wait_s = malloc((cap + 1) * sizeof *t->wait_s);
    DDP_TRY(
        agree_(t->comm.mpi, t->step_s && t->wait_s
                                ? DDP_OK
                                : ddp_fail(DDP_ERR_NOMEM, "out of memory for step statistics")));
    t->stat_cap = cap;
    be->zero(t->acc_dev, 2 * sizeof(double));
    for (int64_t epoch = 0; epoch < t->epochs && step < t->total_steps; epoch++) {
        sampler_set_epoch(&t->sampler, epoch);
        int64_t e_steps = t->steps_per_epoch;
        int64_t used_micro = 0;
        for (int64_t s = 0; s < e_steps && step < t->total_steps; s++) {
            double ts = now_(), tw = loader_wait_seconds(t->loader);
            ddp_status_t st = train_step_(t, epoch, s, step, &samples);
            /* a non-finite global gradient norm: every rank sees it and stops */
            if (st == DDP_ERR_NUMERIC) return st;
            if (st != DDP_OK) die_(t->comm.mpi, st);
            /* non-finite guard, every step: a NaN or Inf loss stays in this
             * rank's running loss sum (one double to read back; a device
             * backend may check it every few steps instead of syncing) */
            double lsum;
            be->download(&lsum, t->acc_dev, sizeof lsum);
            if (!isfinite(lsum))
                die_(t->comm.mpi,
                     ddp_fail(DDP_ERR_NUMERIC,
                              "the training loss is %s at step %lld: " DDP_DIVERGED_ADVICE,
                              nonfinite_name_(lsum), (long long)step + 1));
            if (t->nstat < t->stat_cap) {
                t->step_s[t->nstat] = now_() - ts;
                t->wait_s[t->nstat++] = loader_wait_seconds(t->loader) - tw;
            }
            used_micro = (s + 1) * cfg->accum;
            step++;
            maybe_perturb_(t, step);
            if (cfg->check_replicas > 0 && step % cfg->check_replicas == 0)
                DDP_TRY(check_replicas_(t, step));
            int logging =
                cfg->log_every > 0 && (step % cfg->log_every == 0 || step == t->total_steps);
            if (logging) {
                double acc[3];
                be->download(acc, t->acc_dev, 2 * sizeof(double));
                be->zero(t->acc_dev, 2 * sizeof(double));
                acc[2] = (double)(samples - window_samples);
                comm_desc_t d = {"metrics", -1, step};
                ddp_status_t st2 = comm_allreduce(&t->comm, acc, 3, COMM_DOUBLE, &d);
                if (st2 != DDP_OK) die_(t->comm.mpi, st2);
                double denom = acc[2] * (t->loss == LOSS_MSE ? t->train.targets : 1);
                double loss = acc[0] / (denom > 0 ? denom : 1);
                res->last_loss = loss;
                if (!isfinite(loss))
                    return ddp_fail(DDP_ERR_NUMERIC,
                                    "the training loss is %s at step %lld: " DDP_DIVERGED_ADVICE,
                                    nonfinite_name_(loss), (long long)step);
                double now = now_(), dt = now - t_window;
                double wait = loader_wait_seconds(t->loader);
                log_info("step %lld/%lld epoch %lld loss %.5f lr %.4g  %.0f samples/s  data-wait "
                         "%.1f%%  comm-wait %.1f%%",
                         (long long)step, (long long)t->total_steps, (long long)epoch + 1, loss,
                         optim_lr(&t->opt, step - 1), acc[2] / dt, 100.0 * (wait - wait0) / dt,
                         100.0 * (t->red.wait_seconds - comm0) / dt);
                t_window = now;
                wait0 = wait;
                comm0 = t->red.wait_seconds;
                window_samples = samples;
            }
        }
        /* drop this epoch's unused micro-batches (an incomplete accumulation) */
        int64_t left = step < t->total_steps ? t->micro_per_epoch - used_micro : 0;
        for (int64_t j = 0; j < left; j++) {
            loader_batch_t *b;
            ddp_status_t st = loader_next(t->loader, &b);
            if (st != DDP_OK) die_(t->comm.mpi, st);
            loader_release(t->loader, b);
        }
        int64_t done_epochs = epoch + 1;
        if (cfg->eval_every > 0 && done_epochs % cfg->eval_every == 0 && step < t->total_steps)
            evaluate_(t, done_epochs, step, res);
    }
    double elapsed = now_() - t_start;
    double step_p50 = median_(t->step_s, t->nstat), wait_p50 = median_(t->wait_s, t->nstat);
    res->steps = step;
    res->allreduce_bytes = t->red.bytes_sent;
    /* the replicas are identical, so every rank finds the same */
    if (!be->all_finite(t->model.nparams, t->model.params))
        return ddp_fail(DDP_ERR_NUMERIC,
                        "the weights are not finite after step %lld: " DDP_DIVERGED_ADVICE,
                        (long long)step);
    evaluate_(t, (step + t->steps_per_epoch - 1) / t->steps_per_epoch, step, res);
    double total_samples = (double)samples;
    comm_desc_t d = {"summary", -1, step};
    ddp_status_t st = comm_allreduce(&t->comm, &total_samples, 1, COMM_DOUBLE, &d);
    if (st != DDP_OK) die_(t->comm.mpi, st);
    log_info("done: %lld steps, %.0f samples in %.2f s = %.0f samples/s; comm-wait %.1f%%",
             (long long)step, total_samples, elapsed, total_samples / elapsed,
             100.0 * t->red.wait_seconds / elapsed);
    log_info("summary (rank 0): step_ms_p50=%.3f data_wait_ms_p50=%.4f grad_bytes=%llu "
             "grad_allreduces=%llu peak_rss_mib=%.1f pss_mib=%.1f",
             1e3 * step_p50, 1e3 * wait_p50, (unsigned long long)t->red.bytes_sent,
             (unsigned long long)t->red.calls, peak_rss_mib_(), pss_mib_());
    return DDP_OK;
}

static ddp_status_t save_(trainer_t *t, const train_result_t *res)
{
    const ddp_config_t *cfg = t->cfg;
    if (!cfg->save[0]) return DDP_OK;
    DDP_TRY(average_bn_buffers_(t));
    ddp_status_t s = DDP_OK;
    if (t->comm.rank == 0) {
        weights_meta_t meta = {.step = res->steps,
                               .epoch = (res->steps + t->steps_per_epoch - 1) / t->steps_per_epoch,
                               .world_size = t->comm.size,
                               .cfg = cfg};
        s = weights_save(cfg->save, &t->model, &meta);
        if (s == DDP_OK) log_info("saved weights to %s", cfg->save);
    }
    return agree_(t->comm.mpi, s);
}

ddp_status_t ddp_train(const ddp_config_t *cfg, MPI_Comm world, train_result_t *res)
{
    trainer_t *t = calloc(1, sizeof *t);
    if (!t) return agree_(world, ddp_fail(DDP_ERR_NOMEM, "out of memory"));
    memset(res, 0, sizeof *res);
    res->val_loss = res->val_acc = NAN;
    t->cfg = cfg;
    ddp_status_t s = agree_(world, comm_init_mpi(&t->comm, world));
    if (s == DDP_OK) {
        t->comm_ok = 1;
        s = setup_(t, res);
    }
    if (s == DDP_OK) s = loop_(t, res);
    if (s == DDP_OK) s = save_(t, res);
    teardown_(t);
    if (t->comm_ok) comm_free(&t->comm);
    free(t);
    return s;
}

int ddp_main(int argc, char **argv)
{
    /* --help and --version need no MPI start-up */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            config_print_help(stdout, "ddptrain");
            return 0;
        }
        if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
            ddp_print_version(stdout, "ddptrain");
            return 0;
        }
    }

    int provided, rank;
    MPI_Init_thread(&argc, &argv, COMM_MPI_THREAD_LEVEL, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    log_setup(rank, LOG_INFO);
    h5_quiet();

    ddp_config_t cfg;
    config_action_t action;
    ddp_status_t s = config_parse_args(&cfg, argc, argv, deck_load_config, &action);
    s = agree_(MPI_COMM_WORLD, s);
    if (s == DDP_OK) {
        log_setup(rank, cfg.quiet ? LOG_QUIET : LOG_INFO);
        train_result_t res;
        s = ddp_train(&cfg, MPI_COMM_WORLD, &res);
    }
    if (s != DDP_OK && rank == 0) log_error(ddp_error_message());
    config_free(&cfg);
    MPI_Finalize();
    return ddp_exit_code(s);
}
