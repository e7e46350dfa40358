/* consistency.h -- the start-up consistency check: every rank runs with the
 * same data (sizes and content fingerprints: a stale
 * node-local copy reads other bytes under the same path), model layout and
 * bucket layout (the options and input file names were agreed before:
 * optagree.h), checked with one all-gather of one fingerprint per item
 * before any collective whose size depends on them.  A difference is
 * DDP_ERR_MISMATCH (exit 6) on every rank, naming the item, rank 0's value
 * and the first rank with another. */
#ifndef DDP_CONSISTENCY_H
#define DDP_CONSISTENCY_H

#include "status.h"
#include "step.h"

/* Collective on the control plane; the same status on every rank. */
ddp_status_t consistency_check(trainer_t *t);

#endif
