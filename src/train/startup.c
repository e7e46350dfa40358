/* startup.c -- everything a run needs before its first step, in order, and
 * the teardown (see startup.h).  Every local result is agreed on the
 * control plane before the next collective, so a failure on one rank stops
 * every rank with one line.  The backends and devices (backends.c), the
 * memory (memplan.c), the consistency check (consistency.c) and the table
 * (table.c) have rooms of their own. */
#include "startup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activity.h"
#include "backends.h"
#include "consistency.h"
#include "log.h"
#include "memplan.h"
#include "replicas.h"
#include "table.h"
#include "weights.h"

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

/* --bucket-cap-mb auto: 25 MiB on one node (shared memory sends no
 * messages: few large buckets cost least); across nodes the link is
 * measured (comm_probe_link, 4 MiB each way between the node leaders) and
 * the cap is what it moves in BUCKET_AUTO_MS, within [BUCKET_AUTO_MIN_MB,
 * 25]: buckets small enough that the first ones go out while backward
 * still runs and the last one, which nothing overlaps, is short; large
 * enough that per-bucket costs stay small.  docs/parallelism.md#buckets
 * has the measurement behind the numbers.  The same on every rank (the
 * probe's answer is). */
#define BUCKET_AUTO_MS     4.0
#define BUCKET_AUTO_MIN_MB 1.0
#define BUCKET_AUTO_MAX_MB 25.0
static ddp_status_t bucket_cap_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    t->link_gbps = 0;
    if (t->comm.nnodes > 1 && (cfg->bucket_cap_mb == 0 || cfg->diagnose))
        DDP_TRY(comm_probe_link(&t->comm, (size_t)4 << 20, &t->link_gbps));
    t->bucket_cap_mb = cfg->bucket_cap_mb;
    if (t->bucket_cap_mb > 0) return DDP_OK;
    double mb = t->link_gbps * 1e9 * BUCKET_AUTO_MS * 1e-3 / (1024.0 * 1024.0);
    if (t->comm.nnodes < 2 || t->link_gbps <= 0 || mb > BUCKET_AUTO_MAX_MB)
        mb = BUCKET_AUTO_MAX_MB;
    if (mb < BUCKET_AUTO_MIN_MB) mb = BUCKET_AUTO_MIN_MB;
    t->bucket_cap_mb = mb;
    return DDP_OK;
}

static ddp_status_t build_model_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const deck_t *d = &t->train;
    DDP_TRY(bucket_cap_(t));
    model_opts_t mo = {
        .spec = cfg->model,
        .input = d->shape,
        .outputs = d->regression ? d->targets : d->classes,
        .batch = (int)cfg->batch,
        .bucket_cap_bytes = (size_t)(t->bucket_cap_mb * 1024 * 1024),
        .first_bucket_bytes =
            (size_t)((cfg->first_bucket_mb < t->bucket_cap_mb ? cfg->first_bucket_mb
                                                               : t->bucket_cap_mb) *
                     1024 * 1024),
        .freeze = cfg->freeze,
    };
    DDP_TRY(model_layout(&t->model, &mo, t->compute));
    t->have_model = 1;
    const model_t *m = &t->model;
    DDP_TRY(zero_plan_init(&t->zero, m, (int)cfg->zero, t->comm.rank, t->comm.size, cfg->accum));
    t->model.grad_slots = t->zero.slots; /* --zero 2: model_alloc makes slots */
    /* --precision bf16: outputs only dense layers read kept in bf16 (compute.h act_bf16),
     * and those between convolutions and BatchNorms where the backend takes them */
    t->model.bf16_acts = cfg->precision == PRECISION_BF16 && t->compute->act_bf16;
    t->model.bf16_conv_acts =
        t->model.bf16_acts && t->compute->conv_acts_bf16 && t->compute->conv_acts_bf16();
    DDP_TRY(memplan_check(t));
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

/* Parameters and gradients from the plane's memory (memplan.h), collectively: every rank has
 * the same layout by now, so buckets are the same slices on every rank,
 * which the shared-memory all-reduce needs.  Then the initial weights, and
 * on rank 0 the checkpoint's (--resume) or --init's. */
static ddp_status_t alloc_model_(run_t *r)
{
    trainer_t *t = &r->t;
    const ddp_config_t *cfg = t->cfg;
    model_mem_t gm = memplan_plane_memory(t);
    DDP_TRY(model_alloc(&t->model, &gm));
    /* --precision bf16: the backend's bf16 copy of the parameters, which its
     * optimizer writes and the forwards' GEMMs read, where the weights' copies
     * there are aligned (memplan_bf16_mirror: the device plan counts it) */
    if (cfg->precision == PRECISION_BF16 && t->compute->bf16_params &&
        memplan_bf16_mirror(&t->model) &&
        t->compute->bf16_params(t->model.params, t->model.nparams) != 0)
        return trainer_compute_failure(
            t, ddp_fail(DDP_ERR_NOMEM, "out of device memory for the bf16 copy of the parameters"));
    if (t->zero.slots) { /* --zero 2: the reduced gradients of the shard */
        t->zero.shard_grads = t->compute->alloc((t->zero.shard_count + 1) * sizeof(float));
        if (!t->zero.shard_grads)
            return trainer_compute_failure(
                t, ddp_fail(DDP_ERR_NOMEM, "out of memory for the gradients of this rank's shard"));
    }
    DDP_TRY(memplan_register_model(t));
    t->registered_model = 1;
    DDP_TRY(model_init_params(&t->model, (uint64_t)cfg->seed));
    if (r->ckpt.resume.active) {
        checkpoint_resume_model(&r->ckpt, t);
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

/* ---- steps, buffers, the rest ------------------------------------------- */

/* Where the loop starts: step 0, or the checkpoint's position.  The global
 * sample cursor makes a resume at another world size continue where the
 * checkpoint stopped: the sampler's order of an epoch does not depend on
 * the world size. */
static ddp_status_t start_position_(trainer_t *t, const ckpt_resume_t *r)
{
    const ddp_config_t *cfg = t->cfg;
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

static ddp_status_t count_steps_(trainer_t *t, const ckpt_resume_t *resume)
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
    DDP_TRY(start_position_(t, resume));
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
        return trainer_compute_failure(t, ddp_fail(DDP_ERR_NOMEM, "out of memory for batch buffers"));
    t->data_bytes = memplan_data_bytes(t);
    return DDP_OK;
}

static comm_dtype_t wire_type_(int grad_compress)
{
    return grad_compress == COMPRESS_BF16   ? COMM_BF16
           : grad_compress == COMPRESS_FP16 ? COMM_FP16
                                            : COMM_FLOAT;
}

static ddp_status_t optimizer_and_reducer_(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    model_mem_t mem = memplan_plane_memory(t);
    optim_opts_t oo = optim_opts_from_config(cfg, t->total_steps);
    DDP_TRY(optim_init(&t->opt, &oo, &t->model, &mem, &t->zero));
    /* without clipping the optimizer runs bucket by bucket inside the
     * reducer, as each bucket's gradients become final (reducer.h), fused
     * into the all-reduce unless --update says otherwise */
    reducer_apply_t apply = {.fn = trainer_apply_range, .arg = t};
    apply.nout = optim_outputs(&t->opt, &t->model, apply.out);
    reducer_opts_t ro = {.wire = wire_type_(cfg->grad_compress),
                         .find_unused = cfg->find_unused,
                         .apply = trainer_update_per_bucket(t) ? &apply : NULL,
                         .fuse = cfg->update == UPDATE_FUSED,
                         .mem = &mem,
                         .zero = &t->zero,
                         .params = t->model.params};
    return reducer_init(&t->reducer, &t->model, &t->comm, &ro);
}

/* ---- the sequence ----------------------------------------------------------- */

ddp_status_t startup_run(run_t *r)
{
    trainer_t *t = &r->t;
    const ddp_config_t *cfg = t->cfg;
    control_t *ctl = t->ctl;
    DDP_TRY(backends_start(t));
    DDP_TRY(control_agree(ctl, checkpoint_startup(&r->ckpt, t)));
    DDP_TRY(control_agree(ctl, metrics_open(&r->metrics, t)));
    DDP_TRY(control_agree(ctl, open_data_(t)));
    DDP_TRY(control_agree(ctl, build_model_(t)));
    /* before any collective whose size depends on the options or the model */
    DDP_TRY(control_agree(ctl, consistency_check(t)));
    DDP_TRY(checkpoint_resume_open(&r->ckpt, t));
    DDP_TRY(control_agree(ctl, memplan_choose(t)));
    DDP_TRY(control_agree(ctl, alloc_model_(r)));
    DDP_TRY(broadcast_model_(t));
    /* the start-up broadcast reached every rank: the first replica check */
    if (cfg->check_replicas > 0) DDP_TRY(replicas_check(t, 0));
    DDP_TRY(control_agree(ctl, count_steps_(t, &r->ckpt.resume)));
    DDP_TRY(control_agree(ctl, alloc_batches_(t)));
    DDP_TRY(control_agree(ctl, optimizer_and_reducer_(t)));
    t->sync = cfg->sync;
    DDP_TRY(checkpoint_resume_state(&r->ckpt, t));
    table_print(r);

    loader_opts_t lo = {.prefetch = (int)cfg->prefetch,
                        .augment = cfg->augment,
                        .first_epoch = t->first_epoch,
                        .first_step = t->first_step_in_epoch * cfg->accum,
                        .epochs = t->end_epoch - t->first_epoch,
                        .host_alloc = t->compute->host_alloc,
                        .host_free = t->compute->host_free};
    return control_agree(ctl, loader_start(&t->loader, &t->train, &t->sampler, &lo));
}

void startup_teardown(run_t *r)
{
    trainer_t *t = &r->t;
    activity_trace(NULL, NULL); /* the open phase range ends */
    if (t->loader) loader_stop(t->loader);
    metrics_free(&r->metrics);
    reducer_free(t->reducer);
    optim_free(&t->opt);
    if (t->zero.shard_grads) t->compute->free(t->zero.shard_grads);
    zero_plan_free(&t->zero);
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
        if (t->registered_model) memplan_deregister_model(t);
        if (t->cfg->precision == PRECISION_BF16 && t->compute->bf16_params)
            t->compute->bf16_params(NULL, 0);
        model_free(&t->model);
    }
    free(t->eval_host.x);
    free(t->eval_host.labels);
    free(t->eval_host.targets);
    if (t->have_val) deck_close(&t->val);
    if (t->have_train) deck_close(&t->train);
    if (t->have_comm) comm_free(&t->comm);
    free(t->rank_devices);
    checkpoint_free(&r->ckpt);
}
