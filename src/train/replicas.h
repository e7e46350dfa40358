/* replicas.h -- the replica check (--check-replicas N), and --inject
 * bitflip, the fault that proves it fires.
 *
 * Parameters, BN statistics and optimizer state are hashed per tensor, one
 * all-gather of one hash per rank in the common case, the first differing
 * tensor and its ranks named when they differ.  The tensors it compares, in
 * this order, and the names it (and --inject bitflip:RANK:STEP:NAME) uses:
 *   layers.<i>.weight ...             parameters, BN num_batches_tracked
 *                                     and, with SyncBatchNorm, BN running
 *                                     statistics (state_dict order)
 *   <state>:layers.<i>.weight ...     optimizer state of each trainable
 *                                     parameter: momentum_buffer (SGD with
 *                                     momentum), exp_avg, exp_avg_sq (AdamW)
 * Under --zero 1|2 the optimizer state is sharded: each element has one
 * copy, on the rank that owns it, so there is nothing to compare it with
 * and the check leaves it out (the start-up table says so); a corrupted
 * shard shows in the parameters it updates, which are compared after
 * their all-gather.
 */
#ifndef DDP_REPLICAS_H
#define DDP_REPLICAS_H

#include <stdint.h>

#include "status.h"
#include "step.h"

#define REPLICAS_LIST_MAX 8 /* ranks a message lists */

/* Every rank's tensors (the list above; BN statistics only with SyncBN)
 * hash to the same values: else DDP_ERR_MISMATCH, the same on every rank,
 * naming the first tensor that differs, the rank(s) that hold another value
 * than most ranks, and how many tensors differ.  step 0: right after the
 * start-up broadcast.  One all-gather of 8 bytes per rank; a second one of
 * the per-tensor hashes only when they differ. */
ddp_status_t replicas_check(trainer_t *t, int64_t step);
/* Every --inject bitflip or skipgrad names a tensor of the model
 * (DDP_ERR_USAGE otherwise; the same on every rank): checked when the run
 * starts, not when the fault is due.  Local. */
ddp_status_t replicas_check_injections(trainer_t *t);
/* --inject bitflip due after `step` (1-based) on this rank: flip the lowest
 * bit of the first element of its tensor. */
void replicas_inject_bitflip(trainer_t *t, int64_t step);

#endif
