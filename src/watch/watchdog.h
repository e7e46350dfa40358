/* watchdog.h -- no hang outlives --timeout: a thread per rank that watches
 * the activity record (activity.h) and ends the job with one report when a
 * collective does not complete, a rank stops responding, or a rank vanishes.
 *
 * The channel does not need the stuck rank's cooperation: every rank's
 * watchdog thread sends its activity record to rank 0's thread (the hub)
 * over a TCP connection of its own, several times per --timeout, and the
 * hub sends its own back.  So the hub knows what every rank was last doing
 * even when a rank's main thread is stuck in MPI, in a file system or in a
 * sleep; a stopped process or an unreachable node falls silent; a process
 * that dies closes its connection.  When
 *   - a rank has waited in collective #N for --timeout seconds, or
 *   - a rank has been silent for --timeout seconds, or
 *   - a rank's connection closed without a goodbye,
 * the hub prints one report (the collective and its step, the ranks that
 * arrived, each missing rank's phase and last collective, with host names,
 * and what to do) and calls MPI_Abort (exit code 10).  When the hub itself
 * is silent or gone, rank 1 reports (the other ranks a few seconds later, in
 * case rank 1 is gone too).  A rank that cannot reach the hub still ends the
 * job when its own wait outlasts --timeout, with its own view only.
 *
 * The watchdog thread makes one MPI call, MPI_Abort, while the main thread
 * may be inside MPI: Open MPI and MPICH carry it out through the process
 * manager, which is what ends a job whose main thread is stuck.
 */
#ifndef DDP_WATCHDOG_H
#define DDP_WATCHDOG_H

#include "control.h"
#include "jobreport.h"
#include "status.h"

/* Collective over ctl (with more than one rank and timeout > 0): connect
 * every rank to the hub and start the thread. */
ddp_status_t watchdog_start(control_t *ctl, double timeout);
/* The job ends normally (every rank calls it; not collective). */
void watchdog_stop(void);

/* End the job now with report t (any thread): this rank's watchdog stands
 * down and tells its peers to (no second report), NCCL work is cancelled, t goes to stderr
 * after "ddptrain: error: " (on rank 0; "ddptrain: rank R (host): error: "
 * elsewhere), then MPI_Abort with exit code `code`.  For other checks that
 * end a job the same way (collcheck.h). */
_Noreturn void watchdog_end_job(const jobreport_t *t, int code);

#endif
