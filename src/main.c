/* main.c -- ddptrain: parse the options, start MPI and the control plane,
 * train, and the one place a failure is reported and mapped to the exit
 * code.  Everything else lives in libddp (trainer.h lists the rooms). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "control.h"
#include "deck.h"
#include "h5util.h"
#include "inject.h"
#include "log.h"
#include "progress.h"
#include "signals.h"
#include "train.h"
#include "version.h"
#include "watchdog.h"

int main(int argc, char **argv)
{
    /* --help and --version need no MPI start-up */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            config_print_help(stdout, "ddptrain");
            return 0;
        }
        if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
            ddp_print_version(stdout, "ddptrain");
            return 0;
        }
    }

    int provided, rank;
    MPI_Init_thread(&argc, &argv, COMM_MPI_THREAD_LEVEL, &provided);
    /* from here SIGUSR1/SIGTERM/SIGINT ask for a stop at a step boundary
     * (signals.h): one that comes while starting up or finishing does not
     * kill the rank */
    signals_install();
    progress_begin();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    log_setup(rank, LOG_INFO);
    h5_quiet();

    control_t ctl;
    ddp_status_t s = control_init(&ctl, MPI_COMM_WORLD);
    if (s != DDP_OK) {
        log_error(ddp_error_message());
        MPI_Abort(MPI_COMM_WORLD, ddp_exit_code(s));
    }
    ddp_config_t cfg;
    config_action_t action;
    s = control_agree(&ctl, config_parse_args(&cfg, argc, argv, deck_load_config, &action));
    if (s == DDP_OK) s = inject_setup(cfg.inject, rank); /* validated: the same on every rank */
    if (s == DDP_OK)
        s = control_agree(&ctl, watchdog_start(&ctl, cfg.timeout, cfg.debug_collectives));
    if (s == DDP_OK) {
        log_setup(rank, cfg.quiet ? LOG_QUIET : LOG_INFO);
        train_result_t res;
        s = ddp_train(&cfg, &ctl, &res);
    }
    if (s == DDP_STOP_REQUEUE || s == DDP_STOP_INTERRUPT)
        log_stopped(ddp_error_message());
    else if (s != DDP_OK && rank == 0)
        log_error(ddp_error_message());
    watchdog_stop();
    config_free(&cfg);
    control_free(&ctl);
    MPI_Finalize();
    return ddp_exit_code(s);
}
