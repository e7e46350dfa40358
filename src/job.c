/* job.c -- the start and the end of a trainer's main() (job.h). */
#include "job.h"

#include <mpi.h>

#include "comm_mpi.h"
#include "deck.h"
#include "h5util.h"
#include "inject.h"
#include "log.h"
#include "activity.h"
#include "collcheck.h"
#include "signals.h"
#include "watchdog.h"

ddp_status_t job_begin(job_t *j, int *argc, char ***argv)
{
    int provided;
    MPI_Init_thread(argc, argv, COMM_MPI_THREAD_LEVEL, &provided);
    signals_install();
    activity_begin();
    MPI_Comm_rank(MPI_COMM_WORLD, &j->rank);
    log_setup(j->rank, LOG_INFO);
    h5_quiet();
    ddp_status_t s = control_init(&j->ctl, MPI_COMM_WORLD);
    if (s != DDP_OK) {
        log_error(ddp_error_message());
        MPI_Abort(MPI_COMM_WORLD, ddp_exit_code(s));
    }
    config_action_t action;
    s = control_agree(&j->ctl, config_parse_args(&j->cfg, *argc, *argv, deck_load_config, &action));
    /* validated: the same on every rank */
    if (s == DDP_OK) s = inject_setup(j->cfg.inject, j->rank);
    if (s == DDP_OK) log_setup(j->rank, j->cfg.quiet ? LOG_QUIET : LOG_INFO);
    if (s == DDP_OK) {
        s = collcheck_start(&j->ctl, j->cfg.debug_collectives);
        if (s == DDP_OK) s = watchdog_start(&j->ctl, j->cfg.timeout);
        s = control_agree(&j->ctl, s);
    }
    return s;
}

int job_end(job_t *j, ddp_status_t s)
{
    watchdog_stop();
    collcheck_stop();
    if (s == DDP_STOP_REQUEUE || s == DDP_STOP_INTERRUPT)
        log_stopped(ddp_error_message());
    else if (s != DDP_OK && j->rank == 0)
        log_error(ddp_error_message());
    config_free(&j->cfg);
    control_free(&j->ctl);
    MPI_Finalize();
    return ddp_exit_code(s);
}
