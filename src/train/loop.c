/* loop.c -- the training loop (see loop.h): steps of K micro-batches from
 * step 0 or where a checkpoint left off, the agreement at step boundaries,
 * checkpoints and evaluation on their schedule, stops on request, the last
 * checkpoint and the final --save. */
#include "loop.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "activity.h"
#include "boundary.h"
#include "clock.h"
#include "diagnose.h"
#include "evaluate.h"
#include "log.h"
#include "replicas.h"
#include "run.h"
#include "signals.h"
#include "startup.h"

/* The position after `steps_in_epoch` steps of `epoch` (the next epoch's
 * start once the epoch is done). */
static ckpt_position_t position_(const trainer_t *t, int64_t step, int64_t epoch,
                                 int64_t steps_in_epoch)
{
    if (steps_in_epoch >= t->steps_per_epoch) return (ckpt_position_t){step, epoch + 1, 0};
    int64_t global = t->cfg->batch * t->cfg->accum * t->ctl->size;
    return (ckpt_position_t){step, epoch, steps_in_epoch * global};
}

/* Checkpoint (if --ckpt-dir) and stop: the job's status. */
static ddp_status_t stop_(run_t *r, int sig, const ckpt_position_t *pos)
{
    trainer_t *t = &r->t;
    const ddp_config_t *cfg = t->cfg;
    const char *name = signals_name(sig);
    if (!cfg->ckpt_dir[0])
        return ddp_fail(DDP_STOP_INTERRUPT,
                        "%s at step %lld: training stopped; nothing was saved (with --ckpt-dir "
                        "a checkpoint is written first)",
                        name, (long long)pos->step);
    if (r->ckpt.last_step != pos->step) DDP_TRY(checkpoint_write(&r->ckpt, t, pos));
    DDP_TRY(checkpoint_settle(&r->ckpt, t));
    /* Open MPI's mpirun passes a SIGUSR1 it is sent on and then returns
     * the ranks' 75; a SIGTERM or SIGINT sent to mpirun it passes on while
     * ending the job itself, and then it returns 1 whatever the ranks
     * return.  A rank cannot tell who sent its SIGTERM: say both, a
     * wrapper keys on the code */
    int mpirun_ends = sig != SIGUSR1 && getenv("OMPI_MCA_orte_hnp_uri") != NULL;
    return ddp_fail(DDP_STOP_REQUEUE,
                    "%s at step %lld: checkpoint %s written; go on with --resume auto "
                    "--ckpt-dir %s (%s)",
                    name, (long long)pos->step, r->ckpt.last_path, cfg->ckpt_dir,
                    mpirun_ends ? "exit code 75: requeue; but mpirun returns 1 when it was "
                                  "sent the SIGTERM or SIGINT itself: send it SIGUSR1 instead"
                                : "exit code 75: requeue");
}

static ddp_status_t steps_(run_t *r, train_result_t *res)
{
    trainer_t *t = &r->t;
    const ddp_config_t *cfg = t->cfg;
    int64_t step = t->first_step;
    ckpt_position_t here = position_(t, step, t->first_epoch, t->first_step_in_epoch);
    DDP_TRY(control_agree(t->ctl, metrics_init(&r->metrics, t, &r->ckpt.resume)));
    t->compute->zero(t->loss_sums, 2 * sizeof(double));
    for (int64_t epoch = t->first_epoch; epoch < t->end_epoch && step < t->total_steps; epoch++) {
        sampler_set_epoch(&t->sampler, epoch);
        int64_t s = epoch == t->first_epoch ? t->first_step_in_epoch : 0;
        int64_t used_micro = s * cfg->accum;
        for (; s < t->steps_per_epoch && step < t->total_steps; s++) {
            int prefetch = s + 1 < t->steps_per_epoch && step + 1 < t->total_steps;
            DDP_TRY(run_step(r, epoch, s, step, prefetch ? (s + 1) * cfg->accum : -1));
            used_micro = (s + 1) * cfg->accum;
            step++;
            replicas_inject_bitflip(t, step);
            int check = cfg->check_replicas > 0 && step % cfg->check_replicas == 0;
            int log = cfg->log_every > 0 && (step % cfg->log_every == 0 || step == t->total_steps);
            int save = cfg->ckpt_every > 0 && step % cfg->ckpt_every == 0 && step < t->total_steps;
            /* what reads the model or the loss has the guard's verdict first */
            if (check || log || save) DDP_TRY(run_settle(r));
            if (check) DDP_TRY(replicas_check(t, step));
            if (log) DDP_TRY(metrics_log(&r->metrics, t, epoch, step, res));
            here = position_(t, step, epoch, s + 1);
            if (save) DDP_TRY(checkpoint_write(&r->ckpt, t, &here));
            int sig;
            activity_phase(PHASE_STEP_END);
            DDP_TRY(boundary_agree(&r->ckpt, t, step, &sig));
            /* at the last step there is nothing to stop: finish as usual */
            if (sig && step < t->total_steps) {
                DDP_TRY(run_settle(r));
                return stop_(r, sig, &here);
            }
        }
        DDP_TRY(run_settle(r)); /* the epoch's end reads the model */
        if (step < t->total_steps) trainer_drop_rest_of_epoch(t, used_micro);
        int64_t done_epochs = epoch + 1;
        if (cfg->eval_every > 0 && done_epochs % cfg->eval_every == 0 && step < t->total_steps)
            evaluate_run(t, &r->metrics, done_epochs, step, res);
        if (cfg->ckpt_every_epochs > 0 && done_epochs % cfg->ckpt_every_epochs == 0 &&
            step < t->total_steps && r->ckpt.last_step != step)
            DDP_TRY(checkpoint_write(&r->ckpt, t, &here));
    }
    activity_phase(PHASE_FINISHING);
    double elapsed = clock_seconds() - r->metrics.t_start;
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
    evaluate_run(t, &r->metrics, (step + t->steps_per_epoch - 1) / t->steps_per_epoch, step, res);
    metrics_summary(&r->metrics, t, step - t->first_step, elapsed);
    nonfinite_summary(&r->guard, t);
    /* the last checkpoint: where training ended */
    if (cfg->ckpt_dir[0] && r->ckpt.last_step != step) DDP_TRY(checkpoint_write(&r->ckpt, t, &here));
    return checkpoint_settle(&r->ckpt, t);
}

static ddp_status_t loop_(run_t *r, train_result_t *res)
{
    DDP_TRY(run_guards_init(r));
    ddp_status_t s = steps_(r, res);
    run_guards_free(r);
    return s;
}

ddp_status_t ddp_train(const ddp_config_t *cfg, control_t *ctl, train_result_t *res)
{
    run_t *r = calloc(1, sizeof *r);
    if (!r) return control_agree(ctl, ddp_fail(DDP_ERR_NOMEM, "out of memory"));
    memset(res, 0, sizeof *res);
    res->val_loss = res->val_acc = NAN;
    /* --diagnose: the same start-up, then the measured modes instead of
     * the loop; nothing written or resumed (diagnose.h) */
    ddp_config_t diag;
    if (cfg->diagnose) {
        diagnose_config(cfg, &diag, ctl->rank);
        cfg = &diag;
    }
    r->t.cfg = cfg;
    r->t.ctl = ctl;
    signals_install();
    ddp_status_t s = startup_run(r);
    if (s == DDP_OK) s = cfg->diagnose ? diagnose_run(r) : loop_(r, res);
    if (s == DDP_OK && !cfg->diagnose) s = checkpoint_save_final(&r->ckpt, &r->t, res);
    startup_teardown(r);
    free(r);
    return s;
}
