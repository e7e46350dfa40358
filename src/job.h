/* job.h -- the start and the end of a trainer's main(): ddptrain's
 * (src/main.c) and the test trainers' (tests/doubles/train_emu.c,
 * tests/doubles/train_lazy.c), which register test doubles of the backends
 * and train between the two. */
#ifndef DDP_JOB_H
#define DDP_JOB_H

#include "config.h"
#include "control.h"
#include "status.h"

typedef struct job {
    int rank; /* in MPI_COMM_WORLD */
    control_t ctl;
    ddp_config_t cfg;
} job_t;

/* MPI_Init_thread at COMM_MPI_THREAD_LEVEL, signals.h's stop requests
 * (from here a SIGUSR1/SIGTERM/SIGINT does not kill the rank), the
 * activity record, the log, HDF5's own messages off, the control plane
 * over MPI_COMM_WORLD (when that fails: the error on every rank, then
 * MPI_Abort with its exit code -- nothing could agree on it), the options
 * parsed and agreed on by every rank, --inject armed, --quiet applied and
 * the watchdog (--timeout; watchdog.h) and the --debug-collectives check
 * (collcheck.h) started.
 * The status is the same on every rank; whatever it is, end with job_end. */
ddp_status_t job_begin(job_t *j, int *argc, char ***argv);
/* Report s (a stop request as "stopped", another failure as the error, on
 * rank 0), stop the watchdog and the check, free what job_begin made,
 * MPI_Finalize; the exit code for s. */
int job_end(job_t *j, ddp_status_t s);

#endif
