/* metrics.c -- timers, the progress line and the status line, the
 * straggler warning, the summary, the --metrics JSON lines, memory probes
 * (see metrics.h). */
#define _GNU_SOURCE
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "atomicfile.h"
#include "clock.h"
#include "jsonl.h"
#include "log.h"
#include "activity.h"
#include "straggler.h"
#include "version.h"

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
    /* the progress window's steps and their time split (seconds, sums) */
    double win_steps, win_step_s, win_data_s, win_forward_s, win_backward_s, win_comm_s,
        win_optim_s;
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

#define METRICS_NAME_EVERY  10   /* progress lines between two namings of a rank */
#define METRICS_MIN_EXCESS  1e-3 /* seconds per step above the median to count */
#define METRICS_CHECK_STEPS 10   /* steps judged together, at least */

static uint64_t reducer_bytes_(const trainer_t *t)
{
    reducer_stats_t rs;
    reducer_get_stats(t->reducer, &rs);
    return rs.bytes_sent;
}

/* ---- --metrics ----------------------------------------------------------- */

ddp_status_t metrics_open(metrics_t *mt, const trainer_t *t)
{
    const char *path = t->cfg->metrics;
    mt->jsonl = NULL;
    if (!path[0] || t->ctl->rank != 0) return DDP_OK;
    /* none of the inputs, no FIFO, device or directory: config_validate
     * checked (pathclash.h) */
    FILE *f = fopen(path, "a+e"); /* read too: a torn last record is looked for */
    if (!f)
        return ddp_fail(DDP_ERR_IO,
                        "--metrics %s: cannot open it for appending: %s%s",
                        path, strerror(errno), atomicfile_advice(errno));
    /* a record torn by a crash or a full disk would make the history
     * unreadable with the records appended after it */
    long long removed = 0;
    if (jsonl_cut_torn(f, &removed) != 0)
        log_warn("--metrics %s: cannot check its last record: %s", path, strerror(errno));
    else if (removed > 0)
        log_warn("--metrics %s: removed %lld byte%s of a torn last record (an earlier run "
                 "stopped mid-write); appending after the last whole record",
                 path, removed, removed > 1 ? "s" : "");
    mt->jsonl = f;
    return DDP_OK;
}

/* Rank 0: one record to the file; a failed write is warned about once and
 * ends the file's records (training goes on). */
static void write_(metrics_t *mt, const trainer_t *t, jsonl_rec_t *r)
{
    if (!mt->jsonl || mt->jsonl_failed) {
        jsonl_free(r);
        return;
    }
    if (jsonl_write(r, mt->jsonl) == 0) return;
    mt->jsonl_failed = 1;
    log_warn("--metrics %s: writing a record failed: %s; no more records are written to it "
             "(training goes on)",
             t->cfg->metrics, strerror(errno));
}

void metrics_write(metrics_t *mt, const trainer_t *t, jsonl_rec_t *r)
{
    write_(mt, t, r);
}

/* An option's value in its JSON type. */
static void option_(jsonl_rec_t *r, const ddp_config_t *cfg, const ddp_option_t *o)
{
    const char *at = (const char *)cfg + o->offset;
    char text[CONFIG_STR_MAX];
    switch (o->type) {
    case OPT_INT: jsonl_int(r, o->name, *(const int64_t *)at); return;
    case OPT_FLOAT: jsonl_num(r, o->name, *(const double *)at); return;
    case OPT_BOOL:
        if (*(const int *)at == 0 || *(const int *)at == 1) {
            jsonl_bool(r, o->name, *(const int *)at);
            return;
        }
        break; /* "auto" */
    default: break;
    }
    config_format(cfg, o, text, sizeof text);
    jsonl_str(r, o->name, text);
}

static void time_text_(char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The run's configuration and machine, and where it resumed. */
static void start_records_(metrics_t *mt, const trainer_t *t, const ckpt_resume_t *resume)
{
    const ddp_config_t *cfg = t->cfg;
    char when[32];
    time_text_(when, sizeof when);
    jsonl_rec_t r;
    jsonl_begin(&r, "config");
    jsonl_str(&r, "program", "ddptrain");
    jsonl_str(&r, "version", ddp_version());
    jsonl_str(&r, "time", when);
    jsonl_int(&r, "world_size", t->ctl->size);
    jsonl_int(&r, "ranks_per_node", t->comm.local_size);
    jsonl_str(&r, "host", control_host(t->ctl, 0));
    jsonl_array(&r, "hosts");
    for (int k = 0; k < t->ctl->size; k++) jsonl_str(&r, NULL, control_host(t->ctl, k));
    jsonl_close(&r, ']');
    jsonl_str(&r, "device", t->device);
    jsonl_array(&r, "inputs");
    for (int k = 0; k < cfg->ninputs; k++) jsonl_str(&r, NULL, cfg->inputs[k]);
    jsonl_close(&r, ']');
    jsonl_int(&r, "train_samples", t->train.n);
    jsonl_int(&r, "parameters", (int64_t)t->model.nvalues);
    jsonl_int(&r, "global_batch", cfg->batch * cfg->accum * t->ctl->size);
    jsonl_int(&r, "steps_per_epoch", t->steps_per_epoch);
    jsonl_int(&r, "total_steps", t->total_steps);
    jsonl_int(&r, "first_step", t->first_step);
    jsonl_object(&r, "options");
    for (int k = 0; k < ddp_noptions; k++) option_(&r, cfg, &ddp_options[k]);
    jsonl_close(&r, '}');
    write_(mt, t, &r);
    if (!resume || !resume->active) return;
    jsonl_begin(&r, "resume");
    jsonl_int(&r, "step", resume->pos.step);
    jsonl_int(&r, "epoch", resume->pos.epoch + 1);
    jsonl_int(&r, "sample_in_epoch", resume->pos.sample_in_epoch);
    jsonl_str(&r, "checkpoint", resume->path);
    jsonl_int(&r, "world_size_at_save", resume->world_size);
    jsonl_str(&r, "time", when);
    write_(mt, t, &r);
}

void metrics_eval(metrics_t *mt, const trainer_t *t, int64_t epoch, int64_t step, double val_loss,
                  double val_acc, int64_t samples)
{
    if (!mt->jsonl) return;
    jsonl_rec_t r;
    jsonl_begin(&r, "eval");
    jsonl_int(&r, "epoch", epoch);
    jsonl_int(&r, "step", step);
    jsonl_num(&r, "val_loss", val_loss);
    jsonl_num(&r, "val_acc", val_acc);
    jsonl_int(&r, "samples", samples);
    write_(mt, t, &r);
}

ddp_status_t metrics_init(metrics_t *mt, const trainer_t *t, const ckpt_resume_t *resume)
{
    FILE *jsonl = mt->jsonl; /* opened at start-up (metrics_open) */
    memset(mt, 0, sizeof *mt);
    mt->jsonl = jsonl;
    mt->grad_norm = NAN;
    mt->status_loss = mt->status_sps = NAN;
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
    mt->busy = malloc(n * sizeof *mt->busy);
    if (!mt->step_s || !mt->wait_s || !mt->compute_s || !mt->gathered || !mt->named_at ||
        !mt->scratch || !mt->busy)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for step statistics");
    for (size_t r = 0; r < n; r++) mt->named_at[r] = -1;
    mt->cap = cap;
    mt->nranks = (int)n;
    mt->t_start = mt->window_start = clock_seconds();
    mt->window_wait = loader_wait_seconds(t->loader);
    mt->window_comm = reducer_wait_(t);
    mt->check_first = t->first_step + 1;
    mt->window_bytes = reducer_bytes_(t);
    start_records_(mt, t, resume);
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
    free(mt->busy);
    if (mt->jsonl) fclose(mt->jsonl);
    memset(mt, 0, sizeof *mt);
}

void metrics_step_begin(metrics_t *mt, const trainer_t *t)
{
    mt->step_start = clock_seconds();
    mt->step_wait = loader_wait_seconds(t->loader);
    mt->step_comm = activity_wait_seconds();
    activity_phase_seconds(mt->step_phase); /* after step_start (metrics_step_end) */
    mt->step_rwait = reducer_wait_(t);
}

void metrics_status_format(char *buf, size_t n, int64_t epoch, int64_t epochs, int64_t step,
                           int64_t total, double loss, double samples_per_s, double eta_s)
{
    char l[32] = "-", sps[32] = "-", eta[32] = "-";
    if (isfinite(loss)) snprintf(l, sizeof l, "%.5f", loss);
    if (isfinite(samples_per_s)) snprintf(sps, sizeof sps, "%.0f", samples_per_s);
    if (isfinite(eta_s) && eta_s >= 0 && eta_s < 1e9) {
        long long s = (long long)(eta_s + 0.5);
        snprintf(eta, sizeof eta, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    }
    snprintf(buf, n, "epoch %lld/%lld  step %lld/%lld  loss %s  %s samples/s  ETA %s",
             (long long)epoch + 1, (long long)epochs, (long long)step, (long long)total, l, sps,
             eta);
}

/* Rank 0, a status line in use: redraw it (ETA from the steps of this run). */
static void draw_status_(metrics_t *mt, const trainer_t *t, int64_t epoch, int64_t step, double now)
{
    int64_t done = step - t->first_step;
    double eta =
        done > 0 ? (now - mt->t_start) / (double)done * (double)(t->total_steps - step) : NAN;
    char line[256];
    metrics_status_format(line, sizeof line, epoch, t->end_epoch, step, t->total_steps,
                          mt->status_loss, mt->status_sps, eta);
    log_status(line);
    mt->status_drawn = now;
}

void metrics_step_end(metrics_t *mt, const trainer_t *t, int64_t epoch, int64_t step)
{
    /* the phases first, then the step's end: the phases' window lies
     * inside the step's (metrics_step_begin reads them in the other order),
     * so the parts never sum to more than the step */
    double ph[PHASE_COUNT];
    activity_phase_seconds(ph);
    double seconds = clock_seconds() - mt->step_start;
    double wait = loader_wait_seconds(t->loader) - mt->step_wait;
    /* every wait in a collective, SyncBatchNorm's included: with SyncBN the
     * others wait for a slow rank inside the forward pass */
    double compute = seconds - wait - (activity_wait_seconds() - mt->step_comm);
    if (compute < 0) compute = 0;
    mt->check_steps++;
    mt->check_compute += compute;
    mt->check_dwait += wait;
    /* the split: phases of this step; the reducer's wait happens in the
     * optimizer phase (reducer_finish), so it is taken out of it */
    double opt = ph[PHASE_OPTIMIZER] - mt->step_phase[PHASE_OPTIMIZER];
    double rwait = reducer_wait_(t) - mt->step_rwait;
    if (rwait > opt) rwait = opt;
    if (rwait < 0) rwait = 0;
    metrics_split_t *l = &mt->last;
    l->step = seconds;
    l->data = ph[PHASE_DATA_WAIT] - mt->step_phase[PHASE_DATA_WAIT];
    l->forward = ph[PHASE_FORWARD] - mt->step_phase[PHASE_FORWARD];
    l->backward = ph[PHASE_BACKWARD] - mt->step_phase[PHASE_BACKWARD];
    l->comm = rwait;
    l->optim = opt - rwait;
    l->compute = compute;
    mt->win_steps++;
    mt->win_step_s += seconds;
    mt->win_data_s += l->data;
    mt->win_forward_s += l->forward;
    mt->win_backward_s += l->backward;
    mt->win_comm_s += l->comm;
    mt->win_optim_s += l->optim;
    if (log_status_active()) {
        double now = clock_seconds();
        if (now - mt->status_drawn >= 0.2) draw_status_(mt, t, epoch, step, now);
    }
    if (mt->nsteps >= mt->cap) return;
    mt->step_s[mt->nsteps] = seconds;
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

/* Rank 0: warn about the stragglers of the window (straggler.h): the
 * slowest few by name with their split, the others counted. */
static void stragglers_(metrics_t *mt, const trainer_t *t, const metrics_window_rec_t *g,
                        int64_t first, int64_t last)
{
    int n = mt->nranks;
    double factor = t->cfg->straggler_factor;
    for (int r = 0; r < n; r++) mt->busy[r] = busy_(&g[r]);
    straggler_rule_t rule = {factor, METRICS_MIN_EXCESS, METRICS_NAME_EVERY};
    straggler_pick_t pick;
    straggler_pick(mt->busy, n, &rule, mt->named_at, mt->nlines, mt->scratch, &pick);
    int ndue = pick.ndue, ntop = pick.ntop;
    const int *top = pick.top;
    double med = pick.median;
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

/* Rank 0: the "step" record of a progress line.  The step-time split: the
 * mean over ranks of each rank's mean per step over the window. */
static void step_record_(metrics_t *mt, const trainer_t *t, const metrics_window_rec_t *g,
                         int64_t epoch, int64_t step, double loss, double samples, double dt,
                         uint64_t bytes)
{
    int n = t->ctl->size, min_rank = 0, max_rank = 0;
    double mean[6] = {0, 0, 0, 0, 0, 0}, min = 0, max = 0;
    for (int r = 0; r < n; r++) {
        double k = g[r].win_steps > 0 ? g[r].win_steps : 1;
        double v[6] = {g[r].win_step_s,     g[r].win_data_s, g[r].win_forward_s,
                       g[r].win_backward_s, g[r].win_comm_s, g[r].win_optim_s};
        for (int i = 0; i < 6; i++) mean[i] += 1e3 * v[i] / k / n;
        double st = 1e3 * v[0] / k;
        if (r == 0 || st < min) min = st, min_rank = r;
        if (r == 0 || st > max) max = st, max_rank = r;
    }
    jsonl_rec_t r;
    jsonl_begin(&r, "step");
    jsonl_int(&r, "step", step);
    jsonl_int(&r, "epoch", epoch + 1);
    jsonl_num(&r, "loss", loss);
    jsonl_num(&r, "lr", optim_lr(&t->opt, step - 1));
    jsonl_num(&r, "grad_norm", mt->grad_norm);
    jsonl_num(&r, "samples_per_s", samples / dt);
    jsonl_int(&r, "samples", (int64_t)samples);
    jsonl_int(&r, "steps", (int64_t)g[0].win_steps);
    jsonl_num(&r, "step_ms", mean[0]);
    jsonl_num(&r, "data_wait_ms", mean[1]);
    jsonl_num(&r, "forward_ms", mean[2]);
    jsonl_num(&r, "backward_ms", mean[3]);
    jsonl_num(&r, "comm_exposed_ms", mean[4]);
    jsonl_num(&r, "optimizer_ms", mean[5]);
    jsonl_num(&r, "step_ms_min", min);
    jsonl_int(&r, "step_ms_min_rank", min_rank);
    jsonl_num(&r, "step_ms_max", max);
    jsonl_int(&r, "step_ms_max_rank", max_rank);
    jsonl_int(&r, "bytes_reduced", (int64_t)bytes);
    jsonl_num(&r, "time_s", clock_seconds() - mt->t_start);
    write_(mt, t, &r);
}

ddp_status_t metrics_log(metrics_t *mt, trainer_t *t, int64_t epoch, int64_t step,
                         train_result_t *res)
{
    double loss_sums[2];
    t->compute->download(loss_sums, t->loss_sums, 2 * sizeof(double));
    t->compute->zero(t->loss_sums, 2 * sizeof(double));
    trainer_check_device(t); /* the sums are real before they are reported */
    metrics_window_rec_t me = {
        .loss_sum = loss_sums[0],
        .samples = (double)(mt->samples - mt->window_samples),
        .compute_s = mt->check_compute,
        .dwait_s = mt->check_dwait,
        .steps = (double)mt->check_steps,
        .win_steps = (double)mt->win_steps,
        .win_step_s = mt->win_step_s,
        .win_data_s = mt->win_data_s,
        .win_forward_s = mt->win_forward_s,
        .win_backward_s = mt->win_backward_s,
        .win_comm_s = mt->win_comm_s,
        .win_optim_s = mt->win_optim_s,
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
    uint64_t bytes = reducer_bytes_(t);
    if (mt->jsonl) step_record_(mt, t, g, epoch, step, loss, samples, dt, bytes - mt->window_bytes);
    if (log_progress_plain())
        log_info("step %lld/%lld epoch %lld loss %.5f lr %.4g  %.0f samples/s  data-wait "
                 "%.1f%%  comm-wait %.1f%%",
                 (long long)step, (long long)t->total_steps, (long long)epoch + 1, loss,
                 optim_lr(&t->opt, step - 1), samples / dt, 100.0 * (wait - mt->window_wait) / dt,
                 100.0 * (comm - mt->window_comm) / dt);
    mt->status_loss = loss;
    mt->status_sps = samples / dt;
    if (log_status_active()) draw_status_(mt, t, epoch, step, now);
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
    mt->window_bytes = bytes;
    mt->win_steps = 0;
    mt->win_step_s = mt->win_data_s = mt->win_forward_s = mt->win_backward_s = 0;
    mt->win_comm_s = mt->win_optim_s = 0;
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
    log_status_end();
    log_info("done: %lld steps, %.0f samples in %.2f s = %.0f samples/s; comm-wait %.1f%%",
             (long long)steps, total_samples, elapsed, total_samples / elapsed,
             100.0 * rs.wait_seconds / elapsed);
    log_info("summary (rank 0): step_ms_p50=%.3f data_wait_ms_p50=%.4f grad_bytes=%llu "
             "grad_allreduces=%llu peak_rss_mib=%.1f pss_mib=%.1f",
             1e3 * me.step_p50, 1e3 * me.wait_p50, (unsigned long long)rs.bytes_sent,
             (unsigned long long)rs.calls, metrics_peak_rss_mib(), metrics_pss_mib());
    char algos[160];
    comm_algorithms(&t->comm, algos, sizeof algos);
    log_info("summary (rank 0): collectives by algorithm: %s", algos);
    metrics_spread_t st = spread_(mt, g, offsetof(metrics_summary_rec_t, step_p50));
    metrics_spread_t co = spread_(mt, g, offsetof(metrics_summary_rec_t, compute_p50));
    metrics_spread_t wa = spread_(mt, g, offsetof(metrics_summary_rec_t, wait_p50));
    log_info("summary (all ranks): step_ms min %.3f (rank %d) median %.3f max %.3f (rank %d); "
             "compute_ms min %.3f (rank %d) median %.3f max %.3f (rank %d); data_wait_ms min "
             "%.4f (rank %d) median %.4f max %.4f (rank %d)",
             1e3 * st.min, st.min_rank, 1e3 * st.median, 1e3 * st.max, st.max_rank, 1e3 * co.min,
             co.min_rank, 1e3 * co.median, 1e3 * co.max, co.max_rank, 1e3 * wa.min, wa.min_rank,
             1e3 * wa.median, 1e3 * wa.max, wa.max_rank);
    if (!mt->jsonl) return;
    jsonl_rec_t r;
    jsonl_begin(&r, "summary");
    jsonl_int(&r, "steps", steps);
    jsonl_int(&r, "last_step", t->first_step + steps);
    jsonl_int(&r, "samples", (int64_t)total_samples);
    jsonl_num(&r, "elapsed_s", elapsed);
    jsonl_num(&r, "samples_per_s", total_samples / elapsed);
    jsonl_num(&r, "comm_wait_fraction", rs.wait_seconds / elapsed);
    jsonl_str(&r, "algorithms", algos);
    jsonl_num(&r, "step_ms_p50", 1e3 * me.step_p50);
    jsonl_num(&r, "data_wait_ms_p50", 1e3 * me.wait_p50);
    jsonl_num(&r, "compute_ms_p50", 1e3 * me.compute_p50);
    jsonl_num(&r, "step_ms_p50_min", 1e3 * st.min);
    jsonl_int(&r, "step_ms_p50_min_rank", st.min_rank);
    jsonl_num(&r, "step_ms_p50_median", 1e3 * st.median);
    jsonl_num(&r, "step_ms_p50_max", 1e3 * st.max);
    jsonl_int(&r, "step_ms_p50_max_rank", st.max_rank);
    jsonl_int(&r, "grad_bytes", (int64_t)rs.bytes_sent);
    jsonl_int(&r, "grad_allreduces", (int64_t)rs.calls);
    jsonl_num(&r, "peak_rss_mib", metrics_peak_rss_mib());
    double pss = metrics_pss_mib();
    jsonl_num(&r, "pss_mib", pss < 0 ? NAN : pss);
    write_(mt, t, &r);
}
