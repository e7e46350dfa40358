/* boundary.c -- the agreement at every step boundary (see boundary.h). */
#include "boundary.h"

#include <signal.h>

#include "inject.h"
#include "signals.h"

ddp_status_t boundary_agree(checkpoint_t *ck, trainer_t *t, int64_t step, int *sig)
{
    static const int order[] = {SIGUSR1, SIGTERM, SIGINT};
    int64_t seen[4] = {0, 0, 0, 0};
    int pending = signals_pending();
    for (int i = 0; i < 3; i++) seen[i] = pending == order[i];
    seen[3] = checkpoint_poll(ck, t);
    /* --inject desync: this rank leaves the agreement out */
    if (t->ctl->size > 1 && !inject_due(INJECT_DESYNC, step)) {
        comm_desc_t d = {"step-boundary", -1, step};
        ddp_status_t s = control_allreduce(t->ctl, seen, 4, COMM_INT64, &d);
        if (s != DDP_OK) control_abort(t->ctl, s);
    }
    *sig = 0;
    for (int i = 2; i >= 0; i--)
        if (seen[i]) *sig = order[i];
    return seen[3] ? checkpoint_settle(ck, t) : DDP_OK;
}
