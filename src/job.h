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
    /* CONFIG_RUN, or --help / --version given on every rank of a launched
     * job: the caller prints it (rank 0) and ends with job_end */
    config_action_t action;
} job_t;

/* MPI_Init_thread at COMM_MPI_THREAD_WANTED (MULTIPLE), signals.h's stop requests
 * (from here a SIGUSR1/SIGTERM/SIGINT does not kill the rank), the
 * activity record, the log, HDF5's own messages off, the control plane
 * over MPI_COMM_WORLD (when that fails: the error on every rank, then
 * MPI_Abort with its exit code -- nothing could agree on it), the options
 * parsed and agreed on by every rank (optagree.h: before any collective
 * that depends on an option), --inject armed, --quiet applied and
 * the watchdog (--timeout; watchdog.h) and the --debug-collectives check
 * (collcheck.h) started.
 * The status is the same on every rank; whatever it is, end with job_end. */
ddp_status_t job_begin(job_t *j, int *argc, char ***argv);
/* --help and --version of a process started alone (no launcher announces
 * more than one process): answered without MPI, 0 returned; otherwise -1
 * (a launched job answers after job_begin: the action is agreed, rank 0
 * prints, j->action says so and the caller does not train). */
int job_answer_alone(int argc, char **argv, const char *prog);
/* Report s (a stop request as "stopped", another failure as the error, on
 * rank 0), stop the watchdog and the check, free what job_begin made,
 * MPI_Finalize; the exit code for s. */
int job_end(job_t *j, ddp_status_t s);

#endif
