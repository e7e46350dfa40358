/* evaluate.c -- evaluation on the /val split (see evaluate.h). */
#include "evaluate.h"

#include <math.h>
#include <stdlib.h>

#include "log.h"
#include "progress.h"
#include "trainer.h"

static ddp_status_t evaluate_local_(trainer_t *t, int64_t epoch, int64_t step, train_result_t *res)
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
    for (int64_t i = first; i < end; i += cfg->batch) {
        int n = (int)(end - i < cfg->batch ? end - i : cfg->batch);
        DDP_TRY(deck_read_range(&t->val, i, n, h->x, xent ? h->labels : NULL,
                                xent ? NULL : h->targets));
        trainer_upload(t, n, h->x, h->labels, h->targets, NULL);
        step_ctx_t ctx = {.n = n,
                          .global_n = n,
                          .sample_idx = NULL,
                          .step = step,
                          .seed = (uint64_t)cfg->seed,
                          .train = 0};
        const float *out;
        DDP_TRY(model_forward(m, t->batch.x, &ctx, &out));
        loss_apply(&t->loss, t->compute, n, out, t->batch.labels, t->batch.targets, 0.0f, 0.0f,
                   NULL, t->loss_sums);
    }
    /* loss sum, hits, samples over all ranks */
    double sums[3];
    t->compute->download(sums, t->loss_sums, 2 * sizeof(double));
    t->compute->upload(t->loss_sums, training, sizeof training);
    sums[2] = (double)count;
    comm_desc_t d = {"evaluation", -1, step};
    DDP_TRY(control_allreduce(t->ctl, sums, 3, COMM_DOUBLE, &d));
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
    return DDP_OK;
}

void evaluate_run(trainer_t *t, int64_t epoch, int64_t step, train_result_t *res)
{
    if (!t->have_val) return;
    progress_phase(PHASE_EVALUATION);
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
    if (s == DDP_OK) s = evaluate_local_(t, epoch, step, res);
    if (s != DDP_OK) control_abort(t->ctl, s);
    if (own) t->compute->upload(m->bufs, own, m->nbufs * sizeof(float));
    free(own);
}
