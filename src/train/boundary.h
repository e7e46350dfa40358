/* boundary.h -- what every rank learns at a step boundary, with one small
 * all-reduce on the control plane: a stop request (signals.h) that one or
 * more ranks received, and a failed background checkpoint write (rank
 * 0's), so that every rank stops, or settles the write, at the same step.
 * The loop and --diagnose call it after every step. */
#ifndef DDP_BOUNDARY_H
#define DDP_BOUNDARY_H

#include <stdint.h>

#include "checkpoint.h"
#include "status.h"
#include "step.h"

/* At the boundary after `step` (1-based): *sig is the stop signal some rank
 * received (SIGUSR1 before SIGTERM before SIGINT), or 0; a failed
 * checkpoint write is settled (checkpoint_settle) and its status
 * returned.  Collective on the control plane. */
ddp_status_t boundary_agree(checkpoint_t *ck, trainer_t *t, int64_t step, int *sig);

#endif
