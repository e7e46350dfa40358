/* run.c -- a step of a run with what watches it (see run.h). */
#include "run.h"

#include "activity.h"
#include "replicas.h"

ddp_status_t run_guards_init(run_t *r)
{
    trainer_t *t = &r->t;
    ddp_status_t s = replicas_check_injections(t);
    if (s == DDP_OK) s = nonfinite_init(&r->guard, t);
    r->have_guard = s == DDP_OK;
    return control_agree(t->ctl, s);
}

void run_guards_free(run_t *r)
{
    if (r->have_guard) nonfinite_free(&r->guard, &r->t);
    r->have_guard = 0;
}

ddp_status_t run_settle(run_t *r)
{
    return r->have_guard ? nonfinite_settle(&r->guard, &r->t) : DDP_OK;
}

ddp_status_t run_step(run_t *r, int64_t epoch, int64_t step_in_epoch, int64_t global_step,
                      int64_t next_micro)
{
    trainer_t *t = &r->t;
    metrics_step_begin(&r->metrics, t);
    step_watch_t watch = nonfinite_watch(&r->guard);
    step_result_t res;
    ddp_status_t st = trainer_step(t, &watch, epoch, step_in_epoch, global_step, &res);
    /* the verdict on the step before (abort mode), with this step's work
     * queued: the host does not wait for it; before the next batch is
     * uploaded, so that the device batch of the step before still shows its
     * inputs to the message */
    DDP_TRY(run_settle(r));
    /* a non-finite global gradient norm: every rank sees it and stops */
    if (st == DDP_ERR_NUMERIC) return st;
    if (st != DDP_OK) control_abort(t->ctl, st);
    /* the next step's first micro-batch, read and uploaded while this
     * step's compute is still queued on a GPU (the host waits for it
     * next, for the loss): its copy overlaps this step's compute */
    if (next_micro >= 0) {
        st = trainer_prefetch(t, epoch, next_micro);
        if (st != DDP_OK) control_abort(t->ctl, st);
    }
    /* a device failure surfaces after the op that caused it returned */
    trainer_check_device(t);
    /* the non-finite guard, every step: a NaN or Inf loss stays in this
     * rank's running loss sum (one read of the step's sums; in abort mode
     * judged at the next run_settle) */
    DDP_TRY(nonfinite_step_end(&r->guard, t, global_step + 1, &res));
    r->metrics.samples += res.samples;
    r->metrics.grad_norm = res.grad_norm;
    metrics_step_end(&r->metrics, t, epoch, global_step + 1);
    activity_phase(PHASE_STEP_END);
    return DDP_OK;
}
