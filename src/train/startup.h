/* startup.h -- everything a run needs before its first step, agreed on by
 * every rank: the backends and devices (backends.h), the checkpoint
 * directory and the metrics file, the input, the model and its memory
 * (memplan.h), the start-up consistency check (consistency.h), rank 0's
 * model (or the checkpoint's) broadcast to all, the step counts, the
 * batches, the optimizer and the reducer, the resumed state, the start-up
 * table (table.h) and the loader.  A failure on any rank is every rank's
 * status.  Then the teardown. */
#ifndef DDP_STARTUP_H
#define DDP_STARTUP_H

#include "run.h"
#include "status.h"

/* r->t.cfg and r->t.ctl set, the rest zero. */
ddp_status_t startup_run(run_t *r);
/* Frees what startup_run built, whether or not it finished. */
void startup_teardown(run_t *r);

#endif
