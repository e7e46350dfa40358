/* train.c -- the trainer: start-up, the training loop, and error reporting. */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deck.h"
#include "h5util.h"
#include "log.h"
#include "version.h"

/* ---- errors ------------------------------------------------------------- */

/* Start-up errors are agreed on: every rank learns whether any rank failed,
 * and the lowest failing rank's message is the one printed (rank 0's when it
 * failed too), so the job stops with one clear line and no hang. */
static ddp_status_t agree_(MPI_Comm comm, ddp_status_t s)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine = s != DDP_OK ? rank : size, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == size) return DDP_OK;
    /* share the first failing rank's status and message */
    struct {
        int status;
        char msg[1024];
    } e = {0, ""};
    if (rank == first) {
        e.status = (int)s;
        snprintf(e.msg, sizeof e.msg, "%s", ddp_error_message());
    }
    MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, comm);
    ddp_clear_error();
    if (first == 0 || rank != 0) return ddp_fail((ddp_status_t)e.status, "%s", e.msg);
    return ddp_fail((ddp_status_t)e.status, "rank %d: %s", first, e.msg);
}

/* A failure on one rank in the middle of the run: report it from that rank
 * and end the whole job (the other ranks may be inside a collective). */
static void die_(MPI_Comm comm, ddp_status_t s)
{
    log_error(ddp_error_message());
    MPI_Abort(comm, ddp_exit_code(s));
    exit(ddp_exit_code(s)); /* not reached */
}

ddp_status_t ddp_train(const ddp_config_t *cfg, MPI_Comm world, train_result_t *res)
{
    (void)cfg;
    (void)res;
    (void)die_;
    return agree_(world, ddp_fail(DDP_ERR_INTERNAL, "training is not built yet"));
}

int ddp_main(int argc, char **argv)
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
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    log_setup(rank, LOG_INFO);
    h5_quiet();

    ddp_config_t cfg;
    config_action_t action;
    ddp_status_t s = config_parse_args(&cfg, argc, argv, deck_load_config, &action);
    s = agree_(MPI_COMM_WORLD, s);
    if (s == DDP_OK) {
        log_setup(rank, cfg.quiet ? LOG_QUIET : LOG_INFO);
        train_result_t res;
        s = ddp_train(&cfg, MPI_COMM_WORLD, &res);
    }
    if (s != DDP_OK && rank == 0) log_error(ddp_error_message());
    config_free(&cfg);
    MPI_Finalize();
    return ddp_exit_code(s);
}
