/* evaluate.c -- evaluation on the /val split (see evaluate.h). */
#include "evaluate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "activity.h"
#include "nonfinite.h"

/* The first non-finite evaluation loss a rank saw: the val sample and
 * what in it is not finite.  Gathered from every rank when any saw one. */
typedef struct eval_bad {
    int64_t idx;  /* global /val sample index; -1: none */
    int64_t elem; /* element of the input or target */
    int32_t what; /* 0 none, 1 input value, 2 target, 3 inputs finite (the loss alone) */
    float value;
} eval_bad_t;

/* The batch of n samples from global index first made the loss sum
 * non-finite: the first sample with a non-finite input value (or target). */
static eval_bad_t find_bad_(const trainer_t *t, const host_batch_t *h, int64_t first, int n,
                            int xent)
{
    size_t numel = t->val.sample_numel, k = (size_t)t->val.targets;
    eval_bad_t b = {first, 0, 3, NAN};
    for (int i = 0; i < n; i++) {
        for (size_t e = 0; e < numel; e++)
            if (!isfinite(h->x[(size_t)i * numel + e]))
                return (eval_bad_t){first + i, (int64_t)e, 1, h->x[(size_t)i * numel + e]};
        for (size_t e = 0; !xent && e < k; e++)
            if (!isfinite(h->targets[(size_t)i * k + e]))
                return (eval_bad_t){first + i, (int64_t)e, 2, h->targets[(size_t)i * k + e]};
    }
    return b;
}

/* Every rank gathers every rank's finding; all return the same error,
 * naming the first rank's sample with a non-finite value (else the first
 * finding), so control_abort prints one line. */
static ddp_status_t fail_nonfinite_(trainer_t *t, const eval_bad_t *mine, double loss, int64_t step)
{
    int world = t->ctl->size;
    eval_bad_t *all = calloc((size_t)world, sizeof *all);
    if (!all) return ddp_fail(DDP_ERR_NOMEM, "out of memory reporting a non-finite val loss");
    comm_desc_t d = {"evaluation-nonfinite", -1, step};
    ddp_status_t s = control_allgather(t->ctl, mine, all, sizeof *mine, &d);
    if (s != DDP_OK) {
        free(all);
        return s;
    }
    int pick = -1;
    for (int r = 0; r < world; r++)
        if (all[r].what == 1 || all[r].what == 2) {
            pick = r;
            break;
        }
    for (int r = 0; r < world && pick < 0; r++)
        if (all[r].what) pick = r;
    eval_bad_t b = all[pick];
    free(all);
    const deck_t *v = &t->val;
    char sample[4200], where[4300];
    nonfinite_sample_name(v, b.idx, sample, sizeof sample);
    snprintf(where, sizeof where, "/val sample %s", sample);
    if (b.what == 3)
        return ddp_fail(DDP_ERR_NUMERIC,
                        "the validation loss is %s at step %lld, first in the batch from %s; "
                        "its inputs are finite: " DDP_DIVERGED_ADVICE,
                        nonfinite_value_name(loss), (long long)step, where);
    return ddp_fail(DDP_ERR_NUMERIC,
                    "the validation loss is %s at step %lld: %s holds a non-finite %s "
                    "(%s at value %lld of %zu): the input is bad; --check-data finds such "
                    "samples in the files at start-up (fix or drop them)",
                    nonfinite_value_name(loss), (long long)step, where,
                    b.what == 1 ? "input value" : "target", nonfinite_value_name(b.value),
                    (long long)b.elem, b.what == 1 ? v->sample_numel : (size_t)v->targets);
}

static ddp_status_t evaluate_local_(trainer_t *t, metrics_t *mt, int64_t epoch, int64_t step,
                                    train_result_t *res)
{
    const ddp_config_t *cfg = t->cfg;
    model_t *m = &t->model;
    int64_t first, count;
    deck_eval_range(&t->val, t->comm.size, t->comm.rank, &first, &count);
    int64_t end = first + count;
    /* the training loss of the current progress window is kept aside: the
     * next progress line reports training samples only */
    double training[2];
    t->compute->download(training, t->loss_sums, sizeof training);
    t->compute->zero(t->loss_sums, 2 * sizeof(double));
    const host_batch_t *h = &t->eval_host;
    int xent = t->loss.kind == LOSS_XENT;
    eval_bad_t bad = {-1, 0, 0, 0};
    for (int64_t i = first; i < end; i += cfg->batch) {
        int n = (int)(end - i < cfg->batch ? end - i : cfg->batch);
        DDP_TRY(deck_read_range(&t->val, i, n, h->x, xent ? h->labels : NULL,
                                xent ? NULL : h->targets));
        trainer_upload(t, n, h->x, h->labels, h->targets, NULL);
        trainer_upload_wait(t); /* before forward, and before h is read into again */
        step_ctx_t ctx = {.n = n,
                          .global_n = n,
                          .sample_idx = NULL,
                          .step = step,
                          .seed = (uint64_t)cfg->seed,
                          .train = 0};
        const float *out;
        DDP_TRY(model_forward(m, t->batch->x, &ctx, &out));
        loss_apply(&t->loss, t->compute, n, out, t->batch->labels, t->batch->targets, 0.0f, 0.0f,
                   NULL, t->loss_sums, 0);
        /* one double per batch: the batch that makes the sum non-finite
         * still lies in h, so its bad sample can be named */
        double sum;
        if (bad.idx < 0) {
            t->compute->download(&sum, t->loss_sums, sizeof sum);
            if (!isfinite(sum)) bad = find_bad_(t, h, i, n, xent);
        }
    }
    /* loss sum, hits, samples, ranks with a non-finite loss over all ranks */
    double sums[4];
    t->compute->download(sums, t->loss_sums, 2 * sizeof(double));
    t->compute->upload(t->loss_sums, training, sizeof training);
    trainer_check_device(t); /* the sums are real before they are reported */
    sums[2] = (double)count;
    sums[3] = bad.idx >= 0;
    comm_desc_t d = {"evaluation", -1, step};
    DDP_TRY(control_allreduce(t->ctl, sums, 4, COMM_DOUBLE, &d));
    if (sums[3] > 0) return fail_nonfinite_(t, &bad, sums[0], step);
    double samples = sums[2];
    double loss = sums[0] / loss_values(&t->loss, samples);
    res->val_loss = loss;
    res->val_count = (int64_t)samples;
    if (xent) {
        res->val_acc = sums[1] / samples;
        log_result("eval epoch=%lld step=%lld val_loss=%.6f val_acc=%.6f samples=%lld",
                   (long long)epoch, (long long)step, loss, res->val_acc, (long long)samples);
    } else {
        res->val_acc = NAN;
        log_result("eval epoch=%lld step=%lld val_loss=%.6f samples=%lld", (long long)epoch,
                   (long long)step, loss, (long long)samples);
    }
    metrics_eval(mt, t, epoch, step, loss, res->val_acc, (int64_t)samples);
    return DDP_OK;
}

void evaluate_run(trainer_t *t, metrics_t *mt, int64_t epoch, int64_t step, train_result_t *res)
{
    if (!t->have_val) return;
    activity_phase(PHASE_EVALUATION);
    /* With local BatchNorm statistics (--no-sync-bn) every rank evaluates the
     * model with their average, as saved; the ranks' own statistics are put
     * back afterwards, so evaluating changes nothing in training (and a run
     * resumed from a checkpoint evaluates where the original did not). */
    model_t *m = &t->model;
    int local_bn = !t->sync_bn && t->comm.size > 1 && m->nbufs > 0;
    float *own = local_bn ? malloc(m->nbufs * sizeof(float)) : NULL;
    if (local_bn && !own)
        control_abort(t->ctl,
                      ddp_fail(DDP_ERR_NOMEM, "out of memory for the BatchNorm statistics"));
    if (own) t->compute->download(own, m->bufs, m->nbufs * sizeof(float));
    ddp_status_t s = trainer_average_bn_buffers(t);
    if (s == DDP_OK) s = evaluate_local_(t, mt, epoch, step, res);
    if (s != DDP_OK) control_abort(t->ctl, s);
    if (own) t->compute->upload(m->bufs, own, m->nbufs * sizeof(float));
    free(own);
}
