/* ckpt_lock.h -- one job at a time in a checkpoint directory.
 *
 * Rank 0 takes DIR/ddptrain.lock at start-up and removes it when the job
 * ends (any way that runs the teardown: the end, an error, a stop on a
 * signal).  The file appears whole (written under a temporary name, then
 * hard-linked to its name, which fails when it exists) and holds the
 * holder's host, pid, Slurm job id and start time, one "key=value" a line;
 * the holder keeps an flock on it while it runs.
 *
 * A lock found at start-up is:
 *   - live when it is of this host and its flock is held (or, where flock
 *     does not work, its pid exists): refused, naming the other job;
 *   - stale when it is of this host and nobody holds it (the job died
 *     without its teardown: kill -9, MPI_Abort), or of another host with
 *     this job's SLURM_JOB_ID (a requeued job restarting): taken over, with
 *     a note;
 *   - of another host otherwise: its liveness cannot be checked from here,
 *     refused, naming the file to delete if that job has ended.
 * Refusals are DDP_ERR_USAGE (exit 2). */
#ifndef DDP_CKPT_LOCK_H
#define DDP_CKPT_LOCK_H

#include "status.h"

#define CKPT_LOCK_NAME "ddptrain.lock"

typedef struct ckpt_lock {
    int held; /* fd is ours and the lock file on disk is fd's */
    int fd;
    char path[4200];
} ckpt_lock_t;

/* Take the lock of the existing directory dir. */
ddp_status_t ckpt_lock_take(ckpt_lock_t *l, const char *dir);
/* Remove the lock file if it is still ours; close it.  Idempotent. */
void ckpt_lock_release(ckpt_lock_t *l);

#endif
