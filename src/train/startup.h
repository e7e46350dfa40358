/* startup.h -- everything a run needs before its first step, agreed on by
 * every rank: the gradient-plane communicator, the compute backend, the
 * input, the model and its memory, the start-up consistency check (every
 * rank runs the same options, data and layout), rank 0's model broadcast to
 * all, the optimizer, the reducer, the loader, and the start-up table.  A
 * failure on any rank is every rank's status.  Then the teardown. */
#ifndef DDP_STARTUP_H
#define DDP_STARTUP_H

#include "status.h"

struct trainer;

ddp_status_t startup_run(struct trainer *t);
/* Frees what startup_run built, whether or not it finished. */
void startup_teardown(struct trainer *t);

#endif
