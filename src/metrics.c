/* metrics.c -- timers, the progress line, the straggler warning, the
 * summary, memory probes (see metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "clock.h"
#include "log.h"
#include "progress.h"
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

/* What each rank contributes to a progress line (all doubles: it travels as
 * bytes between ranks of one job). */
typedef struct metrics_window_rec {
    double loss_sum; /* summed loss values of the window */
    double samples;  /* samples of the window */
    /* since the last straggler check: */
    double compute_s; /* compute seconds (step - data wait - comm wait) */
    double dwait_s;   /* data-wait seconds inside the steps */
    double steps;     /* steps timed */
} metrics_window_rec_t;

/* Seconds per step that a rank worked on its own (did not wait for the
 * others). */
static double busy_(const metrics_window_rec_t *p)
{
    return (p->compute_s + p->dwait_s) / (p->steps > 0 ? p->steps : 1);
}

/* ... and to the summary: this rank's medians over its steps. */
typedef struct metrics_summary_rec {
    double samples, step_p50, compute_p50, wait_p50;
} metrics_summary_rec_t;

#define METRICS_NAME_MAX    3    /* stragglers named per line (the slowest) */
#define METRICS_NAME_EVERY  10   /* progress lines between two namings of a rank */
#define METRICS_MIN_EXCESS  1e-3 /* seconds per step above the median to count */
#define METRICS_CHECK_STEPS 10   /* steps judged together, at least */

ddp_status_t metrics_init(metrics_t *mt, const trainer_t *t)
{
    memset(mt, 0, sizeof *mt);
    size_t cap =
        (size_t)t->total_steps < METRICS_MAX_STEPS ? (size_t)t->total_steps : METRICS_MAX_STEPS;
    size_t n = (size_t)t->ctl->size;
    size_t rec = sizeof(metrics_window_rec_t) > sizeof(metrics_summary_rec_t)
                     ? sizeof(metrics_window_rec_t)
                     : sizeof(metrics_summary_rec_t);
    mt->step_s = malloc((cap + 1) * sizeof *mt->step_s);
    mt->wait_s = malloc((cap + 1) * sizeof *mt->wait_s);
    mt->compute_s = malloc((cap + 1) * sizeof *mt->compute_s);
    mt->gathered = malloc(n * rec);
    mt->named_at = malloc(n * sizeof *mt->named_at);
    mt->scratch = malloc(n * sizeof *mt->scratch);
    if (!mt->step_s || !mt->wait_s || !mt->compute_s || !mt->gathered || !mt->named_at ||
        !mt->scratch)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for step statistics");
    for (size_t r = 0; r < n; r++) mt->named_at[r] = -1;
    mt->cap = cap;
    mt->nranks = (int)n;
    mt->t_start = mt->window_start = clock_seconds();
    mt->window_wait = loader_wait_seconds(t->loader);
    mt->window_comm = reducer_wait_(t);
    mt->check_first = t->first_step + 1;
    return DDP_OK;
}

void metrics_free(metrics_t *mt)
{
    free(mt->step_s);
    free(mt->wait_s);
    free(mt->compute_s);
    free(mt->gathered);
    free(mt->named_at);
    free(mt->scratch);
    memset(mt, 0, sizeof *mt);
}

void metrics_step_begin(metrics_t *mt, const trainer_t *t)
{
    mt->step_start = clock_seconds();
    mt->step_wait = loader_wait_seconds(t->loader);
    mt->step_comm = progress_wait_seconds();
}

void metrics_step_end(metrics_t *mt, const trainer_t *t)
{
    double step = clock_seconds() - mt->step_start;
    double wait = loader_wait_seconds(t->loader) - mt->step_wait;
    /* every wait in a collective, SyncBatchNorm's included: with SyncBN the
     * others wait for a slow rank inside the forward pass */
    double compute = step - wait - (progress_wait_seconds() - mt->step_comm);
    if (compute < 0) compute = 0;
    mt->check_steps++;
    mt->check_compute += compute;
    mt->check_dwait += wait;
    if (mt->nsteps >= mt->cap) return;
    mt->step_s[mt->nsteps] = step;
    mt->compute_s[mt->nsteps] = compute;
    mt->wait_s[mt->nsteps++] = wait;
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

/* Rank 0: warn about the ranks whose busy time (compute + data wait) per
 * step since the last check exceeds the factor times the (lower) median over
 * ranks, and the median by METRICS_MIN_EXCESS (on an oversubscribed node a rank
 * descheduled for a moment must not be named); the slowest few by name, the
 * others counted; a rank named is not named again for METRICS_NAME_EVERY
 * lines. */
static void stragglers_(metrics_t *mt, const trainer_t *t, const metrics_window_rec_t *g,
                        int64_t first, int64_t last)
{
    int n = mt->nranks;
    double factor = t->cfg->straggler_factor;
    for (int r = 0; r < n; r++) mt->scratch[r] = busy_(&g[r]);
    /* the lower median: with 2 ranks (or half the ranks slow) the typical
     * rank, not the mean of a slow and a fast one */
    qsort(mt->scratch, (size_t)n, sizeof *mt->scratch, cmp_double_);
    double med = mt->scratch[(n - 1) / 2];
    int top[METRICS_NAME_MAX], ntop = 0, ndue = 0;
    for (int r = 0; r < n; r++) {
        double busy = busy_(&g[r]);
        if (!(busy > factor * med && busy - med > METRICS_MIN_EXCESS)) continue;
        if (mt->named_at[r] >= 0 && mt->nlines - mt->named_at[r] < METRICS_NAME_EVERY) continue;
        mt->named_at[r] = mt->nlines;
        ndue++;
        /* keep the slowest METRICS_NAME_MAX, slowest first (ties: lower rank) */
        int at = ntop < METRICS_NAME_MAX ? ntop++ : METRICS_NAME_MAX;
        while (at > 0) {
            if (busy <= busy_(&g[top[at - 1]])) break;
            if (at < METRICS_NAME_MAX) top[at] = top[at - 1];
            at--;
        }
        if (at < METRICS_NAME_MAX) top[at] = r;
    }
    if (ndue == 0) return;
    char line[1024];
    size_t len = 0;
    for (int i = 0; i < ntop; i++) {
        const metrics_window_rec_t *p = &g[top[i]];
        double steps = p->steps > 0 ? p->steps : 1;
        double c = 1e3 * p->compute_s / steps, w = 1e3 * p->dwait_s / steps;
        len += (size_t)snprintf(line + len, sizeof line - len,
                                "%srank %d (%s) compute %.1f + data wait %.1f = %.1f ms/step",
                                i ? ", " : "", top[i], control_host(t->ctl, top[i]), c, w, c + w);
        if (med > 0 && len < sizeof line)
            len +=
                (size_t)snprintf(line + len, sizeof line - len, " (%.1fx)", (c + w) / (1e3 * med));
        if (len >= sizeof line) break;
    }
    if (len < sizeof line && ndue > ntop)
        snprintf(line + len, sizeof line - len, " and %d more", ndue - ntop);
    /* a median under 1 ms (a tiny model) with three decimals, not as 0.0 */
    log_warn("straggler: %s vs the median %.*f ms/step over steps %lld-%lld (--straggler-factor "
             "%g); the other ranks wait for %s in their collectives",
             line, 1e3 * med < 1 ? 3 : 1, 1e3 * med, (long long)first, (long long)last, factor,
             ndue > 1 ? "them" : "it");
}

ddp_status_t metrics_log(metrics_t *mt, trainer_t *t, int64_t epoch, int64_t step,
                         train_result_t *res)
{
    double loss_sums[2];
    t->compute->download(loss_sums, t->loss_sums, 2 * sizeof(double));
    t->compute->zero(t->loss_sums, 2 * sizeof(double));
    metrics_window_rec_t me = {
        .loss_sum = loss_sums[0],
        .samples = (double)(mt->samples - mt->window_samples),
        .compute_s = mt->check_compute,
        .dwait_s = mt->check_dwait,
        .steps = (double)mt->check_steps,
    };
    /* one all-gather of every rank's record; the sums in rank order, so
     * every rank computes bit-identical values */
    comm_desc_t d = {"metrics", -1, step};
    ddp_status_t s = control_allgather(t->ctl, &me, mt->gathered, sizeof me, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    const metrics_window_rec_t *g = mt->gathered;
    double loss_sum = 0, samples = 0;
    for (int r = 0; r < t->ctl->size; r++) {
        loss_sum += g[r].loss_sum;
        samples += g[r].samples;
    }
    double values = loss_values(&t->loss, samples);
    double loss = loss_sum / (values > 0 ? values : 1);
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
             optim_lr(&t->opt, step - 1), samples / dt, 100.0 * (wait - mt->window_wait) / dt,
             100.0 * (comm - mt->window_comm) / dt);
    /* the same decision on every rank: their step counts are equal */
    if (mt->check_steps >= METRICS_CHECK_STEPS) {
        if (t->ctl->rank == 0 && t->ctl->size > 1) stragglers_(mt, t, g, mt->check_first, step);
        mt->check_first = step + 1;
        mt->check_steps = 0;
        mt->check_compute = mt->check_dwait = 0;
    }
    mt->nlines++;
    mt->window_start = now;
    mt->window_wait = wait;
    mt->window_comm = comm;
    mt->window_samples = mt->samples;
    return DDP_OK;
}

/* The minimum (lowest rank on ties), median and maximum over ranks of
 * field `off` of the gathered summary records. */
typedef struct metrics_spread {
    double min, median, max;
    int min_rank, max_rank;
} metrics_spread_t;

static metrics_spread_t spread_(metrics_t *mt, const metrics_summary_rec_t *g, size_t off)
{
    metrics_spread_t sp = {0, 0, 0, 0, 0};
    for (int r = 0; r < mt->nranks; r++) {
        double v = *(const double *)((const char *)&g[r] + off);
        mt->scratch[r] = v;
        if (r == 0 || v < sp.min) sp.min = v, sp.min_rank = r;
        if (r == 0 || v > sp.max) sp.max = v, sp.max_rank = r;
    }
    sp.median = median_(mt->scratch, (size_t)mt->nranks);
    return sp;
}

void metrics_summary(metrics_t *mt, trainer_t *t, int64_t steps, double elapsed)
{
    metrics_summary_rec_t me = {
        .samples = (double)mt->samples,
        .step_p50 = median_(mt->step_s, mt->nsteps),
        .compute_p50 = median_(mt->compute_s, mt->nsteps),
        .wait_p50 = median_(mt->wait_s, mt->nsteps),
    };
    comm_desc_t d = {"summary", -1, steps};
    ddp_status_t s = control_allgather(t->ctl, &me, mt->gathered, sizeof me, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    const metrics_summary_rec_t *g = mt->gathered;
    double total_samples = 0;
    for (int r = 0; r < t->ctl->size; r++) total_samples += g[r].samples;
    reducer_stats_t rs;
    reducer_get_stats(t->reducer, &rs);
    log_info("done: %lld steps, %.0f samples in %.2f s = %.0f samples/s; comm-wait %.1f%%",
             (long long)steps, total_samples, elapsed, total_samples / elapsed,
             100.0 * rs.wait_seconds / elapsed);
    log_info("summary (rank 0): step_ms_p50=%.3f data_wait_ms_p50=%.4f grad_bytes=%llu "
             "grad_allreduces=%llu peak_rss_mib=%.1f pss_mib=%.1f",
             1e3 * me.step_p50, 1e3 * me.wait_p50, (unsigned long long)rs.bytes_sent,
             (unsigned long long)rs.calls, metrics_peak_rss_mib(), metrics_pss_mib());
    metrics_spread_t st = spread_(mt, g, offsetof(metrics_summary_rec_t, step_p50));
    metrics_spread_t co = spread_(mt, g, offsetof(metrics_summary_rec_t, compute_p50));
    metrics_spread_t wa = spread_(mt, g, offsetof(metrics_summary_rec_t, wait_p50));
    log_info("summary (all ranks): step_ms min %.3f (rank %d) median %.3f max %.3f (rank %d); "
             "compute_ms min %.3f (rank %d) median %.3f max %.3f (rank %d); data_wait_ms min "
             "%.4f (rank %d) median %.4f max %.4f (rank %d)",
             1e3 * st.min, st.min_rank, 1e3 * st.median, 1e3 * st.max, st.max_rank, 1e3 * co.min,
             co.min_rank, 1e3 * co.median, 1e3 * co.max, co.max_rank, 1e3 * wa.min, wa.min_rank,
             1e3 * wa.median, 1e3 * wa.max, wa.max_rank);
}
