/* step.c -- one optimizer step (step.h): the uploads of its micro-batches
 * into the device batches in turn, forward, loss and backward with the
 * reducer's bucketed all-reduce overlapping the last backward, and the
 * optimizer, bucket by bucket (trainer_apply_range) or after the last one. */
#include "step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "activity.h"
#include "inject.h"

/* The upload into the device batch after t->batch, whose copy waits only
 * for the ops that used it the last time round (its batch_free event). */
static void upload_next_(trainer_t *t, int n, const float *x, const int32_t *labels,
                         const float *targets, const int64_t *sample_idx)
{
    const compute_ops_t *compute = t->compute;
    int next = (t->cur + 1) % TRAINER_DEVICE_BATCHES;
    device_batch_t *b = &t->batches[next];
    const compute_event_t *reuse = t->batch_free[next];
    compute_event_t *done = t->upload_done;
    t->batch_uploads[next]++;
    compute->upload_async(b->x, x, (size_t)n * t->train.sample_numel * sizeof(float), reuse, done);
    if (sample_idx)
        compute->upload_async(b->sample_idx, sample_idx, (size_t)n * sizeof(int64_t), reuse, done);
    if (t->loss.kind == LOSS_XENT)
        compute->upload_async(b->labels, labels, (size_t)n * sizeof(int32_t), reuse, done);
    else
        compute->upload_async(b->targets, targets,
                              (size_t)n * (size_t)t->loss.width * sizeof(float), reuse, done);
}

/* The ops turn to the next device batch: the one left is free once the work
 * called up to here is done. */
static void turn_(trainer_t *t)
{
    t->compute->event_record(t->batch_free[t->cur]);
    t->cur = (t->cur + 1) % TRAINER_DEVICE_BATCHES;
    t->batch = &t->batches[t->cur];
}

void trainer_upload(trainer_t *t, int n, const float *x, const int32_t *labels,
                    const float *targets, const int64_t *sample_idx)
{
    upload_next_(t, n, x, labels, targets, sample_idx);
    turn_(t);
}

/* The loader's batch b must be micro-batch `micro` of `epoch`. */
static ddp_status_t expect_batch_(const loader_batch_t *b, int64_t epoch, int64_t micro)
{
    if (b->epoch == epoch && b->step == micro) return DDP_OK;
    return ddp_fail(DDP_ERR_INTERNAL,
                    "loader delivered epoch %lld batch %lld, expected epoch %lld batch %lld",
                    (long long)b->epoch, (long long)b->step, (long long)epoch,
                    (long long)micro);
}

ddp_status_t trainer_prefetch(trainer_t *t, int64_t epoch, int64_t micro)
{
    loader_batch_t *b;
    activity_phase(PHASE_DATA_WAIT);
    DDP_TRY(loader_next(t->loader, &b));
    DDP_TRY(expect_batch_(b, epoch, micro));
    activity_phase(PHASE_FORWARD);
    upload_next_(t, b->n, b->x, b->labels, b->targets, b->idx);
    t->prefetched = b;
    activity_phase(PHASE_OPTIMIZER); /* the step's own phase again (its wait) */
    return DDP_OK;
}

void trainer_upload_wait(trainer_t *t)
{
    t->compute->event_wait(t->upload_done);
}

ddp_status_t trainer_average_bn_buffers(trainer_t *t)
{
    model_t *m = &t->model;
    if (t->sync_bn || t->comm.size == 1 || m->nbufs == 0) return DDP_OK;
    comm_desc_t d = {"average-bn-statistics", -1, -1};
    model_ops_wait(m);
    ddp_status_t s = comm_allreduce(&t->comm, m->bufs, m->nbufs, COMM_FLOAT, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    t->compute->scale(m->nbufs, m->bufs, 1.0f / (float)t->comm.size);
    return DDP_OK;
}

ddp_status_t trainer_step(trainer_t *t, const step_watch_t *watch, int64_t epoch,
                          int64_t step_in_epoch, int64_t global_step, step_result_t *res)
{
    static const step_watch_t none = {0};
    const step_watch_t *w = watch ? watch : &none;
    const ddp_config_t *cfg = t->cfg;
    model_t *m = &t->model;
    int64_t K = cfg->accum;
    int64_t first_micro = step_in_epoch * K;
    int64_t nmicro = t->micro_per_epoch - first_micro < K ? t->micro_per_epoch - first_micro : K;
    /* the union batch of the step over all ranks and micro-batches */
    int64_t step_samples = 0;
    for (int64_t j = 0; j < nmicro; j++)
        step_samples += sampler_global_count(&t->sampler, first_micro + j);
    float scale = (float)(1.0 / loss_values(&t->loss, (double)step_samples));
    /* without clipping (and --on-nonfinite skip), the optimizer runs bucket
     * by bucket as each bucket's gradients become final, inside the reducer
     * (reducer.h) */
    int per_bucket = trainer_update_per_bucket(t);
    *res = (step_result_t){.samples = 0, .skipped = 0, .grad_norm = NAN};
    inject_step_begin(global_step + 1);
    activity_step(global_step + 1);
    if (w->begin) w->begin(w->arg, t);
    for (int64_t j = 0; j < nmicro; j++) {
        loader_batch_t *b;
        if (j == 0 && t->prefetched) { /* read and uploaded by trainer_prefetch */
            b = t->prefetched;
            t->prefetched = NULL;
            DDP_TRY(expect_batch_(b, epoch, first_micro));
            activity_phase(PHASE_FORWARD);
            turn_(t);
        } else {
            activity_phase(PHASE_DATA_WAIT);
            DDP_TRY(loader_next(t->loader, &b));
            DDP_TRY(expect_batch_(b, epoch, first_micro + j));
            activity_phase(PHASE_FORWARD);
            trainer_upload(t, b->n, b->x, b->labels, b->targets, b->idx);
        }
        int n = b->n;
        trainer_upload_wait(t); /* before the loader may refill b */
        if (w->batch) w->batch(w->arg, t, global_step + 1, (int)j, n, b->idx);
        res->samples += n;
        loader_release(t->loader, b);

        int last = j == nmicro - 1;
        step_ctx_t ctx = {
            .n = n,
            .global_n = sampler_global_count(&t->sampler, first_micro + j),
            .sample_idx = t->batch->sample_idx,
            .step = global_step,
            .seed = (uint64_t)cfg->seed,
            .train = 1,
            .sync_bn = t->sync_bn ? &t->comm : NULL,
            .grad_beta = j == 0 ? 0.0f : 1.0f,
            .grads_needed = reducer_layer_begin,
            .grads_ready = reducer_layer_ready,
            .grads_ready_arg = t->reducer,
        };
        reducer_begin(t->reducer, last, t->sync, global_step, ctx.grad_beta);
        if (last && per_bucket) optim_begin(&t->opt);
        const float *out;
        DDP_TRY(model_forward(m, t->batch->x, &ctx, &out));
        loss_apply(&t->loss, t->compute, n, out, t->batch->labels, t->batch->targets,
                   (float)cfg->label_smoothing, scale, model_dout(m), t->loss_sums,
                   model_dout_dense(m));
        if (w->loss) w->loss(w->arg, t, (int)j);
        activity_phase(PHASE_BACKWARD);
        DDP_TRY(model_backward(m, t->batch->x, &ctx));
    }
    activity_phase(PHASE_OPTIMIZER);
    DDP_TRY(reducer_finish(t->reducer));
    if (per_bucket) return DDP_OK; /* every bucket was applied as it became final */
    /* --on-nonfinite skip: the optimizer waits for every reduced gradient
     * and runs only if the watch says so (all finite).  They are
     * bit-identical on every rank and a NaN or Inf on any rank is one in
     * the sum, so every rank drops the same steps with no extra collective;
     * the weights and optimizer state are then untouched. */
    if (w->update_ok && !w->update_ok(w->arg, t)) {
        res->skipped = 1;
        return DDP_OK;
    }
    /* computed only with clipping (the norm costs a pass over the gradients),
     * in the same pieces at every --zero stage (zero_grad_norm) */
    double grad_norm = NAN;
    if (t->opt.clip > 0) DDP_TRY(zero_grad_norm(&t->zero, m, t->ctl, &grad_norm));
    res->grad_norm = grad_norm;
    DDP_TRY(optim_step(&t->opt, m, grad_norm));
    /* --zero: each rank updated its blocks; the parameters from their owners */
    return reducer_gather_params(t->reducer);
}

int trainer_update_per_bucket(const trainer_t *t)
{
    return t->cfg->update != UPDATE_STEP && optim_can_apply_per_bucket(&t->opt);
}

void trainer_apply_range(void *arg, size_t offset, size_t count)
{
    trainer_t *t = arg;
    optim_apply(&t->opt, &t->model, offset, count);
}

ddp_status_t trainer_compute_failure(const trainer_t *t, ddp_status_t fallback)
{
    if (t->compute && t->compute->check) {
        ddp_status_t s = t->compute->check();
        if (s != DDP_OK) return s;
    }
    return fallback;
}

void trainer_check_device(trainer_t *t)
{
    if (!t->compute->check) return;
    ddp_status_t s = t->compute->check();
    if (s != DDP_OK) control_abort(t->ctl, s);
}

void trainer_drop_rest_of_epoch(trainer_t *t, int64_t used_micro)
{
    for (int64_t j = used_micro; j < t->micro_per_epoch; j++) {
        loader_batch_t *b;
        ddp_status_t s = loader_next(t->loader, &b);
        if (s != DDP_OK) control_abort(t->ctl, s);
        loader_release(t->loader, b);
    }
}

