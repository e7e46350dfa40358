/* signals.h -- SIGUSR1, SIGTERM and SIGINT as requests to stop at the next
 * step boundary.
 *
 * Slurm sends SIGUSR1 (sbatch --signal) or SIGTERM (time limit, preemption,
 * scancel) some time before it kills a job.  The handler only records the
 * signal; the training loop asks signals_pending() at every step boundary,
 * the ranks agree on it (any rank that saw one stops every rank), rank 0
 * writes a checkpoint and the job exits with DDP_STOP_REQUEUE (75).  A
 * SIGTERM or SIGINT while an earlier SIGTERM or SIGINT is being honoured
 * ends the process at once with the default action (a SIGTERM after a
 * SIGUSR1 does not: Slurm sends one after the other): a checkpoint being
 * written is then left under its temporary name, which --resume never
 * takes. */
#ifndef DDP_SIGNALS_H
#define DDP_SIGNALS_H

/* Install the handlers (idempotent; job_begin does it right after
 * MPI_Init, ddp_train again).  They stay until the process ends. */
void signals_install(void);
/* Restore the previous handlers (control_abort: the job is ending, and the
 * launcher's SIGTERM must end this rank at once). */
void signals_restore(void);
/* The first signal received since signals_install, or 0. */
int signals_pending(void);
/* "SIGTERM" etc. */
const char *signals_name(int signo);

#endif
