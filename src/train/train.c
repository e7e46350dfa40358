/* train.c -- the training loop: steps of K micro-batches whose last
 * backward overlaps the bucketed all-reduce, from step 0 or where a
 * checkpoint left off; at step boundaries checkpoints and the agreement on
 * stop requests; evaluation at epoch ends; the final checkpoint and save.
 * The rooms around it are listed in trainer.h. */
#include "train.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "diagnose.h"
#include "inject.h"
#include "log.h"
#include "activity.h"
#include "signals.h"
#include "trainer.h"

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

ddp_status_t trainer_step(trainer_t *t, diagnostics_t *g, int64_t epoch, int64_t step_in_epoch,
                          int64_t global_step, int64_t *samples, int *skipped)
{
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
    int per_bucket = optim_can_apply_per_bucket(&t->opt);
    t->metrics.grad_norm = NAN;
    inject_step_begin(global_step + 1);
    activity_step(global_step + 1);
    diagnostics_step_begin(g, t);
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
        diagnostics_batch(g, t, global_step + 1, (int)j, n, b->idx);
        *samples += n;
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
            .grads_ready = reducer_layer_ready,
            .grads_ready_arg = t->reducer,
        };
        reducer_begin(t->reducer, last, t->sync, global_step, ctx.grad_beta);
        if (last && per_bucket) optim_begin(&t->opt);
        const float *out;
        DDP_TRY(model_forward(m, t->batch->x, &ctx, &out));
        loss_apply(&t->loss, t->compute, n, out, t->batch->labels, t->batch->targets,
                   (float)cfg->label_smoothing, scale, model_dout(m), t->loss_sums);
        diagnostics_loss(g, t, (int)j);
        activity_phase(PHASE_BACKWARD);
        DDP_TRY(model_backward(m, t->batch->x, &ctx));
    }
    activity_phase(PHASE_OPTIMIZER);
    DDP_TRY(reducer_finish(t->reducer));
    if (per_bucket) return DDP_OK; /* every bucket was applied as it became final */
    /* --on-nonfinite skip: the optimizer waits for every reduced gradient
     * and runs only if all are finite.  They are bit-identical on every rank
     * and a NaN or Inf on any rank is one in the sum, so every rank drops
     * the same steps with no extra collective; the weights and optimizer
     * state are then untouched (the fused per-bucket update, off in this
     * mode, would have changed them before the last gradient was known). */
    if (g->skip && !diagnostics_grads_finite(t)) {
        *skipped = 1;
        return DDP_OK;
    }
    double grad_norm;
    ddp_status_t s = optim_step(&t->opt, m, &grad_norm);
    /* computed only with clipping (the norm costs a pass over the gradients) */
    t->metrics.grad_norm = grad_norm >= 0 ? grad_norm : NAN;
    return s;
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

/* The position after `steps_in_epoch` steps of `epoch` (the next epoch's
 * start once the epoch is done). */
static ckpt_position_t position_(const trainer_t *t, int64_t step, int64_t epoch,
                                 int64_t steps_in_epoch)
{
    if (steps_in_epoch >= t->steps_per_epoch) return (ckpt_position_t){step, epoch + 1, 0};
    int64_t global = t->cfg->batch * t->cfg->accum * t->ctl->size;
    return (ckpt_position_t){step, epoch, steps_in_epoch * global};
}

ddp_status_t trainer_step_boundary(trainer_t *t, int64_t step, int *sig)
{
    static const int order[] = {SIGUSR1, SIGTERM, SIGINT};
    int64_t seen[4] = {0, 0, 0, 0};
    int pending = signals_pending();
    for (int i = 0; i < 3; i++) seen[i] = pending == order[i];
    seen[3] = checkpoint_poll(t);
    /* --inject desync: this rank leaves the agreement out */
    if (t->ctl->size > 1 && !inject_due(INJECT_DESYNC, step)) {
        comm_desc_t d = {"step-boundary", -1, step};
        ddp_status_t s = control_allreduce(t->ctl, seen, 4, COMM_INT64, &d);
        if (s != DDP_OK) control_abort(t->ctl, s);
    }
    *sig = 0;
    for (int i = 2; i >= 0; i--)
        if (seen[i]) *sig = order[i];
    return seen[3] ? checkpoint_settle(t) : DDP_OK;
}

/* Checkpoint (if --ckpt-dir) and stop: the job's status. */
static ddp_status_t stop_(trainer_t *t, int sig, const ckpt_position_t *pos)
{
    const ddp_config_t *cfg = t->cfg;
    const char *name = signals_name(sig);
    if (!cfg->ckpt_dir[0])
        return ddp_fail(DDP_STOP_INTERRUPT,
                        "%s at step %lld: training stopped; nothing was saved (with --ckpt-dir "
                        "a checkpoint is written first)",
                        name, (long long)pos->step);
    if (t->ckpt.last_step != pos->step) DDP_TRY(checkpoint_write(t, pos));
    DDP_TRY(checkpoint_settle(t));
    return ddp_fail(DDP_STOP_REQUEUE,
                    "%s at step %lld: checkpoint %s written; go on with --resume auto "
                    "--ckpt-dir %s (exit code 75: requeue)",
                    name, (long long)pos->step, t->ckpt.last_path, cfg->ckpt_dir);
}

static ddp_status_t steps_(trainer_t *t, diagnostics_t *g, train_result_t *res)
{
    const ddp_config_t *cfg = t->cfg;
    int64_t step = t->first_step;
    ckpt_position_t here = position_(t, step, t->first_epoch, t->first_step_in_epoch);
    DDP_TRY(control_agree(t->ctl, metrics_init(&t->metrics, t)));
    t->compute->zero(t->loss_sums, 2 * sizeof(double));
    for (int64_t epoch = t->first_epoch; epoch < t->end_epoch && step < t->total_steps; epoch++) {
        sampler_set_epoch(&t->sampler, epoch);
        int64_t s = epoch == t->first_epoch ? t->first_step_in_epoch : 0;
        int64_t used_micro = s * cfg->accum;
        for (; s < t->steps_per_epoch && step < t->total_steps; s++) {
            metrics_step_begin(&t->metrics, t);
            int skipped = 0;
            ddp_status_t st = trainer_step(t, g, epoch, s, step, &t->metrics.samples, &skipped);
            /* a non-finite global gradient norm: every rank sees it and stops */
            if (st == DDP_ERR_NUMERIC) return st;
            if (st != DDP_OK) control_abort(t->ctl, st);
            /* the next step's first micro-batch, read and uploaded while this
             * step's compute is still queued on a GPU (the host waits for it
             * next, for the loss): its copy overlaps this step's compute */
            if (s + 1 < t->steps_per_epoch && step + 1 < t->total_steps) {
                st = trainer_prefetch(t, epoch, (s + 1) * cfg->accum);
                if (st != DDP_OK) control_abort(t->ctl, st);
            }
            /* a device failure surfaces after the op that caused it returned */
            trainer_check_device(t);
            /* the non-finite guard, every step: a NaN or Inf loss stays in
             * this rank's running loss sum (one read of the step's sums) */
            DDP_TRY(diagnostics_step_end(g, t, step + 1, skipped));
            metrics_step_end(&t->metrics, t, epoch, step + 1);
            activity_phase(PHASE_STEP_END);
            used_micro = (s + 1) * cfg->accum;
            step++;
            diagnostics_inject_bitflip(t, step);
            if (cfg->check_replicas > 0 && step % cfg->check_replicas == 0)
                DDP_TRY(diagnostics_check_replicas(t, step));
            if (cfg->log_every > 0 && (step % cfg->log_every == 0 || step == t->total_steps))
                DDP_TRY(metrics_log(&t->metrics, t, epoch, step, res));
            here = position_(t, step, epoch, s + 1);
            if (cfg->ckpt_every > 0 && step % cfg->ckpt_every == 0 && step < t->total_steps)
                DDP_TRY(checkpoint_write(t, &here));
            int sig;
            activity_phase(PHASE_STEP_END);
            DDP_TRY(trainer_step_boundary(t, step, &sig));
            /* at the last step there is nothing to stop: finish as usual */
            if (sig && step < t->total_steps) return stop_(t, sig, &here);
        }
        if (step < t->total_steps) trainer_drop_rest_of_epoch(t, used_micro);
        int64_t done_epochs = epoch + 1;
        if (cfg->eval_every > 0 && done_epochs % cfg->eval_every == 0 && step < t->total_steps)
            evaluate_run(t, done_epochs, step, res);
        if (cfg->ckpt_every_epochs > 0 && done_epochs % cfg->ckpt_every_epochs == 0 &&
            step < t->total_steps && t->ckpt.last_step != step)
            DDP_TRY(checkpoint_write(t, &here));
    }
    activity_phase(PHASE_FINISHING);
    double elapsed = clock_seconds() - t->metrics.t_start;
    res->steps = step;
    reducer_stats_t rs;
    reducer_get_stats(t->reducer, &rs);
    res->allreduce_bytes = rs.bytes_sent;
    trainer_check_device(t);
    /* the replicas are identical, so every rank finds the same */
    if (!t->compute->all_finite(t->model.nparams, t->model.params))
        return ddp_fail(DDP_ERR_NUMERIC,
                        "the weights are not finite after step %lld: " DDP_DIVERGED_ADVICE,
                        (long long)step);
    evaluate_run(t, (step + t->steps_per_epoch - 1) / t->steps_per_epoch, step, res);
    metrics_summary(&t->metrics, t, step - t->first_step, elapsed);
    diagnostics_summary(g, t);
    /* the last checkpoint: where training ended */
    if (cfg->ckpt_dir[0] && t->ckpt.last_step != step) DDP_TRY(checkpoint_write(t, &here));
    return checkpoint_settle(t);
}

static ddp_status_t loop_(trainer_t *t, train_result_t *res)
{
    diagnostics_t g;
    DDP_TRY(control_agree(t->ctl, diagnostics_init(&g, t)));
    ddp_status_t s = steps_(t, &g, res);
    diagnostics_free(&g, t);
    return s;
}

void train_backends_builtin(train_backends_t *b)
{
    memset(b, 0, sizeof *b);
    b->cpu = compute_find("cpu");
    b->cuda = compute_find("cuda");
    b->gpu_count = compute_gpu_count;
    b->set_bf16_gemm = compute_bf16_gemm_fn();
    b->host_comm = comm_find("mpi");
    b->device_comm = comm_find("nccl");
}

ddp_status_t ddp_train(const ddp_config_t *cfg, control_t *ctl, train_result_t *res)
{
    return ddp_train_with(cfg, ctl, NULL, res);
}

ddp_status_t ddp_train_on(const ddp_config_t *cfg, control_t *ctl, const compute_ops_t *compute,
                          train_result_t *res)
{
    train_backends_t b;
    train_backends_builtin(&b);
    if (compute) {
        b.cpu = compute;
        b.cuda = NULL;
        b.set_bf16_gemm = NULL;
    }
    return ddp_train_with(cfg, ctl, &b, res);
}

ddp_status_t ddp_train_with(const ddp_config_t *cfg, control_t *ctl, const train_backends_t *b,
                            train_result_t *res)
{
    train_backends_t builtin;
    if (!b) {
        train_backends_builtin(&builtin);
        b = &builtin;
    }
    trainer_t *t = calloc(1, sizeof *t);
    if (!t) return control_agree(ctl, ddp_fail(DDP_ERR_NOMEM, "out of memory"));
    memset(res, 0, sizeof *res);
    res->val_loss = res->val_acc = NAN;
    /* --diagnose: the same start-up, then the measured modes instead of
     * the loop; nothing written or resumed (diagnose.h) */
    ddp_config_t diag;
    if (cfg->diagnose) {
        diagnose_config(cfg, &diag, ctl->rank);
        cfg = &diag;
    }
    t->cfg = cfg;
    t->ctl = ctl;
    t->backends = b; /* startup_run chooses among them */
    signals_install();
    ddp_status_t s = startup_run(t);
    if (s == DDP_OK) s = cfg->diagnose ? diagnose_run(t) : loop_(t, res);
    if (s == DDP_OK && !cfg->diagnose) s = checkpoint_save_final(t, res);
    startup_teardown(t);
    free(t);
    return s;
}
