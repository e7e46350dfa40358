/* train_lazy.c -- ddptrain's training on the "cpu-lazy" test backend
 * (compute_lazy.c), for tests/test_ordering.sh: the options of ddptrain,
 * the same exit codes, no watchdog. */
#include <mpi.h>
#include <stdio.h>

#include "comm.h"
#include "compute_lazy.h"
#include "config.h"
#include "control.h"
#include "deck.h"
#include "h5util.h"
#include "log.h"
#include "progress.h"
#include "signals.h"
#include "train.h"

int main(int argc, char **argv)
{
    int provided, rank;
    MPI_Init_thread(&argc, &argv, COMM_MPI_THREAD_LEVEL, &provided);
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
    if (s == DDP_OK) {
        log_setup(rank, cfg.quiet ? LOG_QUIET : LOG_INFO);
        train_result_t res;
        s = ddp_train_on(&cfg, &ctl, compute_lazy_ops(), &res);
    }
    if (s == DDP_OK && compute_lazy_violation())
        s = ddp_fail(DDP_ERR_INTERNAL, "cpu-lazy: %s", compute_lazy_violation());
    if (s == DDP_OK && compute_lazy_failed())
        s = ddp_fail(DDP_ERR_NOMEM, "cpu-lazy: out of memory holding work back");
    if (s != DDP_OK && rank == 0) log_error(ddp_error_message());
    config_free(&cfg);
    control_free(&ctl);
    MPI_Finalize();
    return ddp_exit_code(s);
}
