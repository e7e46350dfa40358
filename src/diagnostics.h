/* diagnostics.h -- checks that say loudly when the invariant breaks: the
 * replica check (--check-replicas), and fault injection for the tests that
 * prove the checks fire. */
#ifndef DDP_DIAGNOSTICS_H
#define DDP_DIAGNOSTICS_H

#include <stdint.h>

#include "status.h"

struct trainer;

/* Every rank's parameters (and, with SyncBatchNorm, BN statistics) hash to
 * rank 0's: else DDP_ERR_MISMATCH naming the first rank that differs, the
 * same status on every rank.  step 0: right after the start-up broadcast. */
ddp_status_t diagnostics_check_replicas(struct trainer *t, int64_t step);
/* DDP_FAULT_PERTURB=RANK:STEP nudges one parameter of RANK after STEP, so
 * a replica check must fire (tests). */
void diagnostics_maybe_perturb(struct trainer *t, int64_t step);

#endif
