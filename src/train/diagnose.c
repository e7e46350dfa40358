/* diagnose.c -- --diagnose: the four measured modes, the table, the
 * verdict (see diagnose.h). */
#include "diagnose.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "jsonl.h"
#include "log.h"
#include "activity.h"
#include "signals.h"
#include "boundary.h"
#include "run.h"

/* ---- the verdict ---------------------------------------------------------- */

static int cmp_double_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void diagnose_bandwidth(double bytes, double ms, int nranks, double *algbw, double *busbw)
{
    *algbw = bytes / (ms * 1e-3) / 1e9;
    *busbw = *algbw * 2.0 * (nranks - 1) / nranks;
}

void diagnose_judge(const diagnose_numbers_t *n, double *scratch, diagnose_verdict_t *v)
{
    memset(v, 0, sizeof *v);
    v->straggler = -1;
    v->straggler_times = NAN;
    double step = n->step_ms > 0 ? n->step_ms : NAN;
    v->input_fraction = n->data_wait_ms / step;
    v->memory_gain = n->step_ms / n->memory_step_ms;
    v->comm_fraction = n->nranks > 1 ? n->comm_exposed_ms / step : NAN;
    v->compute_ratio = n->nranks > 1 ? n->step_ms / n->nocomm_step_ms : NAN;
    /* the lower median: with 2 ranks (or half the ranks slow) the typical
     * rank, not the mean of a slow and a fast one (as metrics.c's check) */
    memcpy(scratch, n->compute_ms, (size_t)n->nranks * sizeof *scratch);
    qsort(scratch, (size_t)n->nranks, sizeof *scratch, cmp_double_);
    double med = scratch[(n->nranks - 1) / 2];
    v->median_compute_ms = med;
    for (int r = 0; r < n->nranks && n->nranks > 1; r++) {
        double c = n->compute_ms[r];
        if (!(c > n->straggler_factor * med && c - med > DIAGNOSE_STRAGGLER_MIN_MS &&
              c - med > DIAGNOSE_STRAGGLER_MIN_FRACTION * n->step_ms))
            continue;
        if (v->straggler < 0 || c > n->compute_ms[v->straggler]) v->straggler = r;
    }
    if (v->straggler >= 0) {
        v->straggler_times = med > 0 ? n->compute_ms[v->straggler] / med : INFINITY;
        v->kind = DIAGNOSE_STRAGGLER;
    } else if ((v->input_fraction > DIAGNOSE_INPUT_FRACTION &&
                v->memory_gain > DIAGNOSE_INPUT_GAIN) ||
               v->memory_gain > DIAGNOSE_INPUT_GAIN_ALONE) {
        v->kind = DIAGNOSE_INPUT_BOUND;
    } else if (n->nranks > 1 && (v->comm_fraction > DIAGNOSE_COMM_FRACTION ||
                                 v->compute_ratio > DIAGNOSE_COMM_RATIO)) {
        v->kind = DIAGNOSE_COMM_BOUND;
    } else {
        v->kind = DIAGNOSE_COMPUTE_BOUND;
    }
}

const char *diagnose_kind_name(diagnose_kind_t k)
{
    switch (k) {
    case DIAGNOSE_STRAGGLER: return "straggler";
    case DIAGNOSE_INPUT_BOUND: return "input-bound";
    case DIAGNOSE_COMM_BOUND: return "communication-bound";
    case DIAGNOSE_COMPUTE_BOUND: break;
    }
    return "compute-bound (healthy)";
}

void diagnose_next(const diagnose_verdict_t *v, const diagnose_numbers_t *n, const char *host,
                   char *buf, size_t len)
{
    switch (v->kind) {
    case DIAGNOSE_STRAGGLER:
        snprintf(buf, len,
                 "rank %d on host %s is %.1f times the median compute time (%.3f vs %.3f ms per "
                 "step; every other rank waits for it): check that node (other jobs: top; "
                 "thermal throttling; CPU binding), or leave it out of the job",
                 v->straggler, host, v->straggler_times, n->compute_ms[v->straggler],
                 v->median_compute_ms);
        return;
    case DIAGNOSE_INPUT_BOUND:
        snprintf(buf, len,
                 "the input limits the job (%.2fx faster from memory; %.0f%% of the step waits "
                 "for data%s): raise --prefetch, store the deck uncompressed and chunked along "
                 "the samples (as ddptrain-prep writes it; ddptrain-prep info shows a deck's "
                 "layout), or put it on faster storage (node-local disk, /dev/shm)",
                 v->memory_gain, 100 * v->input_fraction,
                 v->input_fraction > DIAGNOSE_INPUT_FRACTION
                     ? ""
                     : ", the rest of the cost is the loader's reads and decompression taking "
                       "CPU time from the ranks");
        return;
    case DIAGNOSE_COMM_BOUND:
        snprintf(buf, len,
                 "communication limits the job: try a larger --bucket-cap-mb, --grad-compress "
                 "bf16, fewer ranks per node or a faster interconnect; a larger --batch gives "
                 "every all-reduce more compute to hide behind");
        return;
    case DIAGNOSE_COMPUTE_BOUND: break;
    }
    snprintf(buf, len, "scaling is limited by compute: raise the --batch or add ranks");
}

void diagnose_config(const ddp_config_t *cfg, ddp_config_t *out, int rank)
{
    *out = *cfg;
    static const struct {
        const char *name;
        size_t offset;
    } paths[] = {
        {"save", offsetof(ddp_config_t, save)},
        {"ckpt-dir", offsetof(ddp_config_t, ckpt_dir)},
        {"resume", offsetof(ddp_config_t, resume)},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char *v = (char *)out + paths[i].offset;
        if (!v[0]) continue;
        if (rank == 0)
            log_warn("--diagnose: --%s %s is ignored (a diagnosis writes no weights or "
                     "checkpoints and resumes nothing)",
                     paths[i].name, v);
        v[0] = '\0';
    }
    out->ckpt_every = out->ckpt_every_epochs = 0;
}

/* ---- the measured modes ------------------------------------------------- */

enum { MODE_NORMAL, MODE_NOCOMM, MODE_MEMORY, NMODES };
static const char *const mode_names_[NMODES] = {"normal", "no-comm", "in-memory"};

/* The columns of the table: metrics_split_t's fields in order. */
enum {
    PART_STEP,
    PART_DATA,
    PART_FORWARD,
    PART_BACKWARD,
    PART_COMM,
    PART_OPTIM,
    PART_COMPUTE,
    NPARTS
};

static double part_(const metrics_split_t *s, int k)
{
    const double v[NPARTS] = {s->step, s->data,  s->forward, s->backward,
                              s->comm, s->optim, s->compute};
    return v[k];
}

/* What each rank measured (doubles only: it travels as bytes). */
typedef struct rank_rec {
    double ran[NMODES];          /* 1: the mode was measured */
    double mean[NMODES][NPARTS]; /* ms per step, means over the measured steps */
    double allreduce_ms;         /* one all-reduce of every bucket */
} rank_rec_t;

/* Where the sample order is: the modes walk on through the epochs. */
typedef struct cursor {
    int64_t epoch, step; /* step within the epoch */
    int64_t global;      /* steps taken (0-based global step of the next) */
} cursor_t;

/* The means of the measured steps' split into rec (ms). */
static void summarise_(const metrics_split_t *sp, int64_t n, rank_rec_t *rec, int mode)
{
    for (int k = 0; k < NPARTS; k++) {
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += part_(&sp[i], k);
        rec->mean[mode][k] = 1e3 * sum / (double)n;
    }
    rec->ran[mode] = 1;
}

/* One turn of a mode: a fresh loader at the cursor (replaying batches in
 * memory for the in-memory mode), warm-up steps, measured steps into sp. */
static ddp_status_t mode_(run_t *r, int mode, cursor_t *c,
                          metrics_split_t *sp, int64_t nmeasured)
{
    trainer_t *t = &r->t;
    const ddp_config_t *cfg = t->cfg;
    int64_t steps = DIAGNOSE_WARMUP_STEPS + nmeasured, spe = t->steps_per_epoch;
    loader_stop(t->loader);
    t->loader = NULL;
    loader_opts_t lo = {.prefetch = (int)cfg->prefetch,
                        .augment = cfg->augment,
                        .first_epoch = c->epoch,
                        .first_step = c->step * cfg->accum,
                        .epochs = (c->step + steps + spe - 1) / spe,
                        .replay = mode == MODE_MEMORY ? DIAGNOSE_REPLAY_BATCHES : 0,
                        .host_alloc = t->compute->host_alloc,
                        .host_free = t->compute->host_free};
    DDP_TRY(control_agree(t->ctl, loader_start(&t->loader, &t->train, &t->sampler, &lo)));
    t->sync = mode == MODE_NOCOMM ? 0 : cfg->sync;
    sampler_set_epoch(&t->sampler, c->epoch);
    for (int64_t i = 0; i < steps; i++) {
        if (c->step == spe) {
            trainer_drop_rest_of_epoch(t, c->step * cfg->accum);
            c->epoch++;
            c->step = 0;
            sampler_set_epoch(&t->sampler, c->epoch);
        }
        DDP_TRY(run_step(r, c->epoch, c->step, c->global, -1));
        if (i >= DIAGNOSE_WARMUP_STEPS) sp[i - DIAGNOSE_WARMUP_STEPS] = r->metrics.last;
        c->global++;
        c->step++;
        int sig;
        DDP_TRY(boundary_agree(&r->ckpt, t, c->global, &sig));
        if (sig)
            return ddp_fail(DDP_STOP_INTERRUPT,
                            "%s at step %lld of --diagnose (%s mode): stopped before the verdict",
                            signals_name(sig), (long long)c->global, mode_names_[mode]);
    }
    /* the last step's verdict, outside its clock: a step's time holds the
     * wait for the step before it (run_step), as in training */
    DDP_TRY(run_settle(r));
    t->sync = cfg->sync;
    return DDP_OK;
}

/* Communication alone: warm-up, then nmeasured all-reduces of every
 * bucket; this rank's mean ms per call (NaN with one rank). */
static double allreduce_alone_(trainer_t *t, int64_t nmeasured, uint64_t *bytes)
{
    *bytes = 0;
    if (t->comm.size == 1) return NAN;
    ddp_status_t s = DDP_OK;
    for (int i = 0; i < DIAGNOSE_WARMUP_STEPS && s == DDP_OK; i++)
        s = reducer_allreduce_buckets(t->reducer, bytes);
    if (s == DDP_OK) s = t->comm.ops->barrier(&t->comm);
    double t0 = clock_seconds();
    for (int64_t i = 0; i < nmeasured && s == DDP_OK; i++)
        s = reducer_allreduce_buckets(t->reducer, bytes);
    double ms = 1e3 * (clock_seconds() - t0) / (double)nmeasured;
    if (s != DDP_OK) control_abort(t->ctl, s); /* the gradient plane is unusable */
    return ms;
}

/* ---- the report ----------------------------------------------------------- */

/* The largest (most > 0) or smallest (most < 0) over ranks of part k in
 * mode m. */
static double over_ranks_(const rank_rec_t *all, int n, int m, int k, int most)
{
    double v = all[0].mean[m][k];
    for (int r = 1; r < n; r++)
        if (most > 0 ? all[r].mean[m][k] > v : all[r].mean[m][k] < v) v = all[r].mean[m][k];
    return v;
}

/* The job's step in mode m: the slowest rank's (a data-parallel step
 * waits for the slowest rank; without communication the ranks run apart,
 * and the slowest one is what the job would take). */
static double step_over_ranks_(const rank_rec_t *all, int n, int m)
{
    if (!all[0].ran[m]) return NAN;
    double max = all[0].mean[m][PART_STEP];
    for (int r = 1; r < n; r++)
        if (all[r].mean[m][PART_STEP] > max) max = all[r].mean[m][PART_STEP];
    return max;
}

typedef struct report {
    int nranks, nbuckets, rounds;
    int64_t steps;
    uint64_t bytes;
    double allreduce_ms, algbw, busbw, overlap;
    diagnose_numbers_t num;
    diagnose_verdict_t verdict;
    char next[1024];
} report_t;

static void print_(const trainer_t *t, const rank_rec_t *all, const report_t *rp)
{
    int n = rp->nranks;
    log_result("diagnose: %d rank%s, %lld measured steps per mode in %d rounds; means over the "
               "measured steps, ms per step",
               n, n > 1 ? "s" : "", (long long)rp->steps, rp->rounds);
    log_result("#");
    log_result("#%5s  %-10s %10s %10s %10s %10s %10s %10s %10s", "rank", "mode", "step",
               "data wait", "forward", "backward", "exp. comm", "optimizer", "compute");
    log_result("#%5s  %-10s %10s %10s %10s %10s %10s %10s %10s", "", "", "(ms)", "(ms)", "(ms)",
               "(ms)", "(ms)", "(ms)", "(ms)");
    for (int r = 0; r < n; r++)
        for (int m = 0; m < NMODES; m++) {
            if (!all[r].ran[m]) {
                log_result(" %5d  %-10s %10s", r, mode_names_[m], "n/a (1 rank)");
                continue;
            }
            const double *v = all[r].mean[m];
            log_result(" %5d  %-10s %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f%s", r,
                       mode_names_[m], v[PART_STEP], v[PART_DATA], v[PART_FORWARD],
                       v[PART_BACKWARD], v[PART_COMM], v[PART_OPTIM], v[PART_COMPUTE],
                       m == MODE_NOCOMM && t->sync_bn ? "  (SyncBN still communicates)" : "");
        }
    log_result("#");
    if (n > 1)
        log_result("all-reduce alone: %d bucket%s, %llu bytes, %.3f ms, algbw %.4g GB/s, "
                   "busbw %.4g GB/s",
                   rp->nbuckets, rp->nbuckets > 1 ? "s" : "", (unsigned long long)rp->bytes,
                   rp->allreduce_ms, rp->algbw, rp->busbw);
    else
        log_result("all-reduce alone: n/a (1 rank)");
    if (n > 1) {
        char algos[160], link[128] = "one node";
        comm_algorithms(&t->comm, algos, sizeof algos);
        if (t->comm.nnodes > 1)
            snprintf(link, sizeof link, "%d nodes, the link between them %.3g GB/s each way",
                     t->comm.nnodes, t->link_gbps);
        log_result("all-reduce algorithms: %s (collectives started); %s", algos, link);
    }
    const diagnose_verdict_t *v = &rp->verdict;
    const diagnose_numbers_t *x = &rp->num;
    char nocomm[32] = "n/a (1 rank)";
    if (n > 1) snprintf(nocomm, sizeof nocomm, "%.3f ms", x->nocomm_step_ms);
    log_result("step (slowest rank): normal %.3f ms, in-memory %.3f ms, no-comm %s; normal mode: "
               "data wait %.3f ms (most of any rank), exposed comm %.3f ms (least of any rank)",
               x->step_ms, x->memory_step_ms, nocomm, x->data_wait_ms, x->comm_exposed_ms);
    if (n > 1)
        log_result("overlap fraction: %.2f (1 - exposed comm %.3f ms / all-reduce alone %.3f ms)",
                   rp->overlap, x->comm_exposed_ms, rp->allreduce_ms);
    else
        log_result("overlap fraction: n/a (1 rank)");
    log_result("input fraction: %.3f (data wait / step, normal mode; in-memory gain %.2fx)",
               v->input_fraction, v->memory_gain);
    if (n > 1)
        log_result("compute ratio: %.2f (normal / no-comm step)", v->compute_ratio);
    else
        log_result("compute ratio: n/a (1 rank)");
    log_result("verdict: %s", diagnose_kind_name(v->kind));
    log_result("next: %s", rp->next);
}

static void record_(metrics_t *mt, const trainer_t *t, const rank_rec_t *all, const report_t *rp)
{
    static const char *keys[NPARTS] = {"step_ms",     "data_wait_ms",    "forward_ms",
                                       "backward_ms", "comm_exposed_ms", "optimizer_ms",
                                       "compute_ms"};
    const diagnose_verdict_t *v = &rp->verdict;
    jsonl_rec_t r;
    jsonl_begin(&r, "diagnose");
    jsonl_int(&r, "world_size", rp->nranks);
    jsonl_int(&r, "steps", rp->steps);
    jsonl_int(&r, "rounds", rp->rounds);
    jsonl_int(&r, "warmup_steps", DIAGNOSE_WARMUP_STEPS);
    jsonl_array(&r, "table");
    for (int k = 0; k < rp->nranks; k++)
        for (int m = 0; m < NMODES; m++) {
            if (!all[k].ran[m]) continue;
            jsonl_object(&r, NULL);
            jsonl_int(&r, "rank", k);
            jsonl_str(&r, "mode", mode_names_[m]);
            for (int p = 0; p < NPARTS; p++) jsonl_num(&r, keys[p], all[k].mean[m][p]);
            jsonl_close(&r, '}');
        }
    jsonl_close(&r, ']');
    jsonl_int(&r, "allreduce_bytes", (int64_t)rp->bytes);
    jsonl_num(&r, "allreduce_ms", rp->allreduce_ms);
    jsonl_num(&r, "algbw_gbps", rp->algbw);
    jsonl_num(&r, "busbw_gbps", rp->busbw);
    char algos[160];
    comm_algorithms(&t->comm, algos, sizeof algos);
    jsonl_str(&r, "algorithms", algos);
    jsonl_int(&r, "nodes", t->comm.nnodes);
    jsonl_num(&r, "link_gbps", t->link_gbps);
    jsonl_num(&r, "overlap_fraction", rp->overlap);
    jsonl_num(&r, "input_fraction", v->input_fraction);
    jsonl_num(&r, "memory_gain", v->memory_gain);
    jsonl_num(&r, "comm_fraction", v->comm_fraction);
    jsonl_num(&r, "compute_ratio", v->compute_ratio);
    jsonl_str(&r, "verdict", diagnose_kind_name(v->kind));
    if (v->straggler >= 0)
        jsonl_int(&r, "straggler_rank", v->straggler);
    else
        jsonl_null(&r, "straggler_rank");
    jsonl_str(&r, "next", rp->next);
    metrics_write(mt, t, &r);
}

/* The gathered records to the verdict and the report (every rank computes
 * the same; rank 0 prints). */
static void report_(trainer_t *t, metrics_t *mt, const rank_rec_t *all, uint64_t bytes,
                    double *scratch)
{
    int n = t->ctl->size;
    report_t rp;
    memset(&rp, 0, sizeof rp);
    rp.nranks = n;
    rp.nbuckets = t->model.nbuckets;
    rp.steps = t->cfg->diagnose_steps;
    rp.rounds = rp.steps < DIAGNOSE_ROUNDS ? (int)rp.steps : DIAGNOSE_ROUNDS;
    rp.bytes = bytes;
    /* nccl-tests: the slowest rank's time */
    rp.allreduce_ms = NAN;
    for (int r = 0; r < n && n > 1; r++)
        if (!(all[r].allreduce_ms <= rp.allreduce_ms)) rp.allreduce_ms = all[r].allreduce_ms;
    diagnose_bandwidth((double)bytes, rp.allreduce_ms, n, &rp.algbw, &rp.busbw);
    double *compute = scratch + n;
    for (int r = 0; r < n; r++) compute[r] = all[r].mean[MODE_NORMAL][PART_COMPUTE];
    diagnose_numbers_t *x = &rp.num;
    x->nranks = n;
    x->compute_ms = compute;
    x->straggler_factor = t->cfg->straggler_factor;
    x->step_ms = step_over_ranks_(all, n, MODE_NORMAL);
    x->nocomm_step_ms = step_over_ranks_(all, n, MODE_NOCOMM);
    x->memory_step_ms = step_over_ranks_(all, n, MODE_MEMORY);
    /* a rank that waits for its input stalls every rank's step (the
     * others wait for it in the all-reduce): the most any rank waited; the
     * rank that reaches the all-reduce last waits for the communication
     * alone, the others for that rank too: the least any rank waited */
    x->data_wait_ms = over_ranks_(all, n, MODE_NORMAL, PART_DATA, 1);
    x->comm_exposed_ms = over_ranks_(all, n, MODE_NORMAL, PART_COMM, -1);
    diagnose_judge(x, scratch, &rp.verdict);
    double o = 1 - x->comm_exposed_ms / rp.allreduce_ms;
    rp.overlap = n > 1 ? (o < 0 ? 0 : o > 1 ? 1 : o) : NAN;
    int s = rp.verdict.straggler;
    diagnose_next(&rp.verdict, x, s >= 0 ? control_host(t->ctl, s) : "", rp.next, sizeof rp.next);
    if (t->ctl->rank != 0) return;
    print_(t, all, &rp);
    record_(mt, t, all, &rp);
}

static ddp_status_t run_(run_t *r)
{
    trainer_t *t = &r->t;
    const ddp_config_t *cfg = t->cfg;
    control_t *ctl = t->ctl;
    int n = ctl->size;
    int64_t nmeasured = cfg->diagnose_steps;
    int nmodes = n > 1 ? NMODES : NMODES - 1;
    int rounds = nmeasured < DIAGNOSE_ROUNDS ? (int)nmeasured : DIAGNOSE_ROUNDS;
    /* the steps this run takes, for the status line and the step statistics */
    t->total_steps = (int64_t)nmodes * (rounds * DIAGNOSE_WARMUP_STEPS + nmeasured);
    t->end_epoch = (t->total_steps + t->steps_per_epoch - 1) / t->steps_per_epoch;
    DDP_TRY(control_agree(ctl, metrics_init(&r->metrics, t, NULL)));
    t->compute->zero(t->loss_sums, 2 * sizeof(double));
    metrics_split_t *sp = malloc(NMODES * (size_t)nmeasured * sizeof *sp);
    double *scratch = malloc(2 * (size_t)n * sizeof *scratch);
    rank_rec_t *all = malloc((size_t)n * sizeof *all);
    ddp_status_t s = control_agree(
        ctl,
        sp && scratch && all ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory for --diagnose"));
    rank_rec_t me;
    memset(&me, 0, sizeof me);
    log_info(
        "diagnose: %d training modes, %lld measured steps each in %d rounds (each mode in turn, %d "
        "warm-up steps first)%s",
        nmodes, (long long)nmeasured, rounds, DIAGNOSE_WARMUP_STEPS,
        n > 1 ? "; then communication alone"
              : "; one rank: no-comm and communication alone are n/a");
    /* the modes take turns, so that a load that comes and goes on the node
     * (another job) falls on every mode alike */
    cursor_t c = {0, 0, 0};
    int64_t done[NMODES] = {0, 0, 0};
    for (int k = 0; k < rounds && s == DDP_OK; k++)
        for (int m = 0; m < NMODES && s == DDP_OK; m++) {
            if (m == MODE_NOCOMM && n == 1) continue;
            int64_t share = nmeasured * (k + 1) / rounds - nmeasured * k / rounds;
            s = mode_(r, m, &c, sp + (size_t)m * (size_t)nmeasured + done[m], share);
            done[m] += share;
        }
    for (int m = 0; m < NMODES && s == DDP_OK; m++)
        if (done[m]) summarise_(sp + (size_t)m * (size_t)nmeasured, nmeasured, &me, m);
    uint64_t bytes = 0;
    if (s == DDP_OK) {
        me.allreduce_ms = allreduce_alone_(t, nmeasured, &bytes);
        comm_desc_t d = {"diagnose", -1, -1};
        s = control_allgather(ctl, &me, all, sizeof me, &d);
        if (s != DDP_OK) control_abort(ctl, s);
        report_(t, &r->metrics, all, bytes, scratch);
    }
    activity_phase(PHASE_FINISHING);
    free(sp);
    free(scratch);
    free(all);
    return s;
}

ddp_status_t diagnose_run(run_t *r)
{
    DDP_TRY(run_guards_init(r));
    ddp_status_t s = run_(r);
    run_guards_free(r);
    return s;
}
