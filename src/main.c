/* main.c -- ddptrain: --help and --version, then start MPI, the control
 * plane, the options and the watchdog (job.h), train, and report (job_end:
 * the one place a failure is reported and mapped to the exit code).
 * Everything else lives in libddp (run.h lists the trainer's rooms). */
#include "config.h"
#include "job.h"
#include "loop.h"

int main(int argc, char **argv)
{
    /* --help and --version need no MPI start-up when started alone */
    if (job_answer_alone(argc, argv, "ddptrain") == 0) return 0;

    job_t job;
    ddp_status_t s = job_begin(&job, &argc, &argv);
    if (s == DDP_OK && job.action == CONFIG_RUN) {
        train_result_t res;
        s = ddp_train(&job.cfg, &job.ctl, &res);
    }
    return job_end(&job, s);
}
