/* collcheck.h -- --debug-collectives: before every collective the ranks
 * compare a hash of its descriptor (activity.h: what, op, step, index,
 * plane), with one extra small all-reduce on a communicator of its own, so
 * a job whose ranks call different collectives stops at the first one
 * where they differ instead of hanging or mixing up data.  A mismatch names
 * the ranks and their descriptors (rank 0 reports); a collective started on
 * the wrong plane, or with a name the table of planes does not know, is
 * refused on the rank that started it.  Either ends the job through the
 * watchdog (watchdog_end_job, exit code 6).  The check runs in the main
 * thread, from activity's start hook. */
#ifndef DDP_COLLCHECK_H
#define DDP_COLLCHECK_H

#include "control.h"
#include "status.h"

/* Collective over ctl when `on` and there is more than one rank: duplicate
 * its communicator and hook the check before every collective.  Call it
 * before watchdog_start, so that the watchdog's own collectives are checked
 * too. */
ddp_status_t collcheck_start(control_t *ctl, int on);
/* Unhook the check and free its communicator (every rank; not collective). */
void collcheck_stop(void);

#endif
