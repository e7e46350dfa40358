/* main.c -- ddptrain: --help and --version, then start MPI, the control
 * plane, the options and the watchdog (job.h), train, and report (job_end:
 * the one place a failure is reported and mapped to the exit code).
 * Everything else lives in libddp (run.h lists the trainer's rooms). */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "job.h"
#include "loop.h"
#include "about.h"

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

    job_t job;
    ddp_status_t s = job_begin(&job, &argc, &argv);
    if (s == DDP_OK) {
        train_result_t res;
        s = ddp_train(&job.cfg, &job.ctl, &res);
    }
    return job_end(&job, s);
}
