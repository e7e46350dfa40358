/* train_lazy.c -- ddptrain's training on the "cpu-lazy" test backend
 * (compute_lazy.c), for tests/e2e/test_ordering.sh: the options of ddptrain,
 * the same exit codes, messages and watchdog (job.h). */
#include "compute.h"
#include "compute_lazy.h"
#include "job.h"
#include "loop.h"

int main(int argc, char **argv)
{
    job_t job;
    ddp_status_t s = job_begin(&job, &argc, &argv);
    if (s == DDP_OK && job.action != CONFIG_RUN) return job_end(&job, s);
    /* the test backend stands in for "cpu" (--device cpu and auto) */
    if (s == DDP_OK) s = compute_register("cpu", compute_lazy_ops());
    if (s == DDP_OK) {
        train_result_t res;
        s = ddp_train(&job.cfg, &job.ctl, &res);
    }
    if (s == DDP_OK && compute_lazy_violation())
        s = ddp_fail(DDP_ERR_INTERNAL, "cpu-lazy: %s", compute_lazy_violation());
    if (s == DDP_OK && compute_lazy_failed())
        s = ddp_fail(DDP_ERR_NOMEM, "cpu-lazy: out of memory holding work back");
    return job_end(&job, s);
}
