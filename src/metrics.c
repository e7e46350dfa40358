/* metrics.c -- timers, the progress line, the summary, memory probes (see
 * metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "clock.h"
#include "log.h"
#include "trainer.h"

#define METRICS_MAX_STEPS ((size_t)1 << 20) /* steps whose times are kept for medians */

double metrics_peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* Linux /proc/self/smaps_rollup.  Unlike RSS it counts a page shared by k
 * processes as 1/k: with the shared-memory comm path every rank also touches
 * the others' buffers, which RSS counts again in full in every rank. */
double metrics_pss_mib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    double kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

static double reducer_wait_(const trainer_t *t)
{
    reducer_stats_t rs;
    reducer_get_stats(t->reducer, &rs);
    return rs.wait_seconds;
}

ddp_status_t metrics_init(metrics_t *mt, const trainer_t *t)
{
    memset(mt, 0, sizeof *mt);
    size_t cap =
        (size_t)t->total_steps < METRICS_MAX_STEPS ? (size_t)t->total_steps : METRICS_MAX_STEPS;
    mt->step_s = malloc((cap + 1) * sizeof *mt->step_s);
    mt->wait_s = malloc((cap + 1) * sizeof *mt->wait_s);
    if (!mt->step_s || !mt->wait_s)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for step statistics");
    mt->cap = cap;
    mt->t_start = mt->window_start = clock_seconds();
    mt->window_wait = loader_wait_seconds(t->loader);
    mt->window_comm = reducer_wait_(t);
    return DDP_OK;
}

void metrics_free(metrics_t *mt)
{
    free(mt->step_s);
    free(mt->wait_s);
    memset(mt, 0, sizeof *mt);
}

void metrics_step_begin(metrics_t *mt, const trainer_t *t)
{
    mt->step_start = clock_seconds();
    mt->step_wait = loader_wait_seconds(t->loader);
}

void metrics_step_end(metrics_t *mt, const trainer_t *t)
{
    if (mt->nsteps >= mt->cap) return;
    mt->step_s[mt->nsteps] = clock_seconds() - mt->step_start;
    mt->wait_s[mt->nsteps++] = loader_wait_seconds(t->loader) - mt->step_wait;
}

ddp_status_t metrics_log(metrics_t *mt, trainer_t *t, int64_t epoch, int64_t step,
                         train_result_t *res)
{
    /* loss sum, hits, samples of the window over all ranks */
    double sums[3];
    t->compute->download(sums, t->loss_sums, 2 * sizeof(double));
    t->compute->zero(t->loss_sums, 2 * sizeof(double));
    sums[2] = (double)(mt->samples - mt->window_samples);
    comm_desc_t d = {"metrics", -1, step};
    ddp_status_t s = control_allreduce(t->ctl, sums, 3, COMM_DOUBLE, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    double values = loss_values(&t->loss, sums[2]);
    double loss = sums[0] / (values > 0 ? values : 1);
    res->last_loss = loss;
    if (!isfinite(loss))
        return ddp_fail(DDP_ERR_NUMERIC,
                        "the training loss is %s at step %lld: " DDP_DIVERGED_ADVICE,
                        isnan(loss) ? "nan"
                        : loss > 0  ? "inf"
                                    : "-inf",
                        (long long)step);
    double now = clock_seconds(), dt = now - mt->window_start;
    double wait = loader_wait_seconds(t->loader), comm = reducer_wait_(t);
    log_info("step %lld/%lld epoch %lld loss %.5f lr %.4g  %.0f samples/s  data-wait "
             "%.1f%%  comm-wait %.1f%%",
             (long long)step, (long long)t->total_steps, (long long)epoch + 1, loss,
             optim_lr(&t->opt, step - 1), sums[2] / dt, 100.0 * (wait - mt->window_wait) / dt,
             100.0 * (comm - mt->window_comm) / dt);
    mt->window_start = now;
    mt->window_wait = wait;
    mt->window_comm = comm;
    mt->window_samples = mt->samples;
    return DDP_OK;
}

static int cmp_double_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_(double *v, size_t n)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double_);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void metrics_summary(metrics_t *mt, trainer_t *t, int64_t steps, double elapsed)
{
    double step_p50 = median_(mt->step_s, mt->nsteps), wait_p50 = median_(mt->wait_s, mt->nsteps);
    double total_samples = (double)mt->samples;
    comm_desc_t d = {"summary", -1, steps};
    ddp_status_t s = control_allreduce(t->ctl, &total_samples, 1, COMM_DOUBLE, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    reducer_stats_t rs;
    reducer_get_stats(t->reducer, &rs);
    log_info("done: %lld steps, %.0f samples in %.2f s = %.0f samples/s; comm-wait %.1f%%",
             (long long)steps, total_samples, elapsed, total_samples / elapsed,
             100.0 * rs.wait_seconds / elapsed);
    log_info("summary (rank 0): step_ms_p50=%.3f data_wait_ms_p50=%.4f grad_bytes=%llu "
             "grad_allreduces=%llu peak_rss_mib=%.1f pss_mib=%.1f",
             1e3 * step_p50, 1e3 * wait_p50, (unsigned long long)rs.bytes_sent,
             (unsigned long long)rs.calls, metrics_peak_rss_mib(), metrics_pss_mib());
}
