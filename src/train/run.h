/* run.h -- one training run: the step's state (step.h) and what the rooms
 * above the step keep beside it -- the checkpoints (checkpoint.h), the
 * metrics (metrics.h) and the non-finite guard (nonfinite.h).  Start-up
 * builds it (startup.h); the loop (loop.h) and --diagnose (diagnose.h) run
 * its steps through run_step.
 *
 * The rooms of the trainer, from the step up:
 *   step.c        one optimizer step (trainer_t, the state)
 *   evaluate.c    evaluation on the /val split
 *   metrics.c     timers, the progress line, --metrics, the summary
 *   checkpoint.c  --save and checkpoints, written and resumed
 *   boundary.c    the agreement at every step boundary (stops, writes)
 *   nonfinite.c, replicas.c (src/guards)  the non-finite guard, the replica
 *                 check and the faults that prove them
 *   startup.c     everything before the first step, and the teardown
 *                 (devices.c, memplan.c, consistency.c, table.c)
 *   run.c         a step with what watches it (here)
 *   loop.c        epochs, stops, evaluation and checkpoint scheduling
 *   diagnose.c    --diagnose: measured steps instead of the loop
 */
#ifndef DDP_RUN_H
#define DDP_RUN_H

#include <stdint.h>

#include "checkpoint.h"
#include "metrics.h"
#include "nonfinite.h"
#include "status.h"
#include "step.h"

typedef struct run {
    trainer_t t;
    checkpoint_t ckpt;
    metrics_t metrics;
    nonfinite_t guard;
    int have_guard;
} run_t;

/* The guards of the steps, once start-up is done: the tensors --inject
 * names checked, the non-finite guard allocated.  Agreed on every rank. */
ddp_status_t run_guards_init(run_t *r);
void run_guards_free(run_t *r);

/* Step global_step (0-based; step_in_epoch of epoch) with what watches it:
 * the metrics' clocks around it, the non-finite guard's hooks and verdict,
 * this rank's samples counted.  next_micro >= 0: the next step's first
 * micro-batch of this epoch is read and uploaded while the step's work is
 * still queued (trainer_prefetch).  DDP_ERR_NUMERIC comes back (every rank
 * sees it); another failure ends the job. */
ddp_status_t run_step(run_t *r, int64_t epoch, int64_t step_in_epoch, int64_t global_step,
                      int64_t next_micro);
/* The non-finite guard's verdict on the last step run (nonfinite_settle),
 * which run_step gives one step late: before anything reads the model or
 * the loss (a checkpoint, the logged loss, evaluation, the replica check,
 * the end of training). */
ddp_status_t run_settle(run_t *r);

#endif
