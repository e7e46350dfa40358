/* job.c -- the start and the end of a trainer's main() (job.h). */
#include "job.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"
#include "deck.h"
#include "h5util.h"
#include "inject.h"
#include "log.h"
#include "optagree.h"
#include "about.h"
#include "activity.h"
#include "collcheck.h"
#include "signals.h"
#include "watchdog.h"

/* The size a launcher's environment announces (Open MPI's mpirun, Slurm's
 * srun, MPICH's Hydra), or 1. */
static long launched_size_(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "PMI_SIZE"};
    long n = 1;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        long k = v ? strtol(v, NULL, 10) : 0;
        if (k > n) n = k;
    }
    return n;
}

int job_answer_alone(int argc, char **argv, const char *prog)
{
    /* one of several ranks answering alone would leave the others waiting
     * for it in MPI_Init: in a launched job every rank parses and agrees */
    if (launched_size_() > 1) return -1;
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            config_print_help(stdout, prog);
            return 0;
        }
        if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
            ddp_print_version(stdout, prog);
            return 0;
        }
    }
    return -1;
}

ddp_status_t job_begin(job_t *j, int *argc, char ***argv)
{
    int provided;
    /* MULTIPLE for --comm-thread; the backend runs without its thread, and
     * says so, where MPI gives less (it needs COMM_MPI_THREAD_LEVEL) */
    MPI_Init_thread(argc, argv, COMM_MPI_THREAD_WANTED, &provided);
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
    j->action = CONFIG_RUN;
    s = control_agree(&j->ctl,
                      config_parse_args(&j->cfg, *argc, *argv, deck_load_config, &j->action));
    /* the same options on every rank before anything whose collectives
     * depend on them (the --debug-collectives check, the watchdog) */
    if (s == DDP_OK) s = optagree_check(&j->ctl, &j->cfg, j->action);
    if (s == DDP_OK && j->action != CONFIG_RUN) {
        /* --help or --version on every rank of a launched job: rank 0 answers */
        if (j->rank == 0 && j->action == CONFIG_HELP) config_print_help(stdout, "ddptrain");
        if (j->rank == 0 && j->action == CONFIG_VERSION) ddp_print_version(stdout, "ddptrain");
        fflush(stdout);
        return s;
    }
    /* validated: the same on every rank */
    if (s == DDP_OK) s = inject_setup(j->cfg.inject, j->rank, j->ctl.size);
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
