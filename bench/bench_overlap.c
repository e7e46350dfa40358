/* bench_overlap.c -- how should gradient all-reduces progress and overlap
 * with backward on CPU ranks?  Simulates one training step of the MLP
 * 784-1024-1024-10 with BatchNorm (batch 64 per rank, one BLAS thread per
 * rank): forward and backward sgemms of the real shapes, SyncBatchNorm's small
 * blocking all-reduces, ~7.47 MB of float32 gradients in buckets that become
 * ready where the real backward finishes them, wait, SGD update.  Compares
 * ways to communicate, interleaved step by step so noise hits all alike:
 *
 *   compute       no communication at all (the reference)
 *   compute+bn    only SyncBatchNorm's small all-reduces
 *   serial-mpi    (d) no overlap: MPI_Allreduce of each bucket after backward
 *   serial-ring   (d) no overlap: the backend's ring after backward
 *   serial-shm    (d) no overlap: the backend's shared-memory all-reduce
 *   nbc-poll      (a) MPI_Iallreduce at bucket ready, MPI_Test between pieces
 *   thread-mpi    (b) a comm thread runs blocking MPI_Allreduce from a queue
 *   ring-poll     (c) the backend's ring, comm progress between pieces
 *   ring-thread   (c) the backend's ring, progressed by a thread that polls
 *                 every --sleep-us microseconds (0: spins, yielding)
 *   comm-thread   (c) the backend's ring with its own progress thread
 *                 (comm_mpi_set_thread, --comm-thread on; polls every
 *                 --sleep-us) and comm progress between pieces, as the
 *                 trainer runs it; its CPU time per step is reported
 *   shm-poll      (e) the backend's shared-memory all-reduce (the gradient
 *                 buffer from comm_mem_alloc), comm progress between pieces
 *
 * The gradient buffer comes from comm_mem_alloc for every strategy (shared
 * memory on one node), so all see the same memory.  MPI runs at
 * MPI_THREAD_MULTIPLE (the backend's progress thread needs it; the older
 * thread strategies make every MPI call under a mutex or while the main
 * thread makes none).
 *
 * Reported per strategy: the step time (median and p10/p90 over iterations
 * of the slowest rank), the exposed communication (step - compute step), the
 * tail (from the end of backward's compute until every bucket is reduced),
 * the communication alone (same collectives without compute) and the overlap
 * fraction 1 - exposed / alone; and whether the gradients came out
 * bit-identical on every rank.
 *
 *   mpirun -np 2 ./bench_overlap [--iters N] [--warmup N] [--buckets 2|3]
 *       [--pieces P] [--sleep-us U] [--only name,name]
 */
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "comm_mpi.h"

/* ---- the model ----------------------------------------------------------------- */

enum { BATCH = 64, IN = 784, HID = 1024, OUT = 10 };

/* gradient (and parameter) buffer, laid out in bucket order (backward order):
 * W3 b3 bn2 b2 | W2 | bn1 b1 W1 */
enum {
    O_W3 = 0,
    O_B3 = O_W3 + OUT * HID,
    O_BN2 = O_B3 + OUT,
    O_B2 = O_BN2 + 2 * HID,
    O_W2 = O_B2 + HID,
    O_BN1 = O_W2 + HID * HID,
    O_B1 = O_BN1 + 2 * HID,
    O_W1 = O_B1 + HID,
    NPARAM = O_W1 + HID * IN
};

typedef struct bucket {
    size_t off, count;
} bucket_t;

typedef struct model {
    float *param, *grad;     /* NPARAM each */
    float *x0, *h1, *h2, *y; /* activations [B,IN] [B,HID] [B,HID] [B,OUT] */
    float *dy, *dh2, *dh1;   /* gradients of activations */
    double *bnstat;          /* SyncBN payload: sum, sumsq, count */
    bucket_t bucket[3];
    int nbuckets;
} model_t;

static float *falloc_(size_t n, float v)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < n; i++) p[i] = v * (float)((i % 17) + 1);
    return p;
}

static void die_(ddp_status_t s, const char *what);

static void model_init(model_t *m, int nbuckets, comm_t *c)
{
    int rank = c->rank;
    m->param = falloc_(NPARAM, 0.01f);
    void *g = NULL;
    die_(comm_mem_alloc(c, NPARAM * sizeof(float), &g), "gradient buffer");
    m->grad = g;
    m->x0 = falloc_(BATCH * IN, 0.05f * (float)(rank + 1));
    m->h1 = falloc_(BATCH * HID, 0);
    m->h2 = falloc_(BATCH * HID, 0);
    m->y = falloc_(BATCH * OUT, 0);
    m->dy = falloc_(BATCH * OUT, 0.001f);
    m->dh2 = falloc_(BATCH * HID, 0);
    m->dh1 = falloc_(BATCH * HID, 0);
    m->bnstat = calloc(2 * HID + 1, sizeof(double));
    m->nbuckets = nbuckets;
    if (nbuckets == 3) {
        /* the last layers (~57 kB), then W2 (4 MB), then the first layer (3.2 MB) */
        m->bucket[0] = (bucket_t){O_W3, O_W2 - O_W3};
        m->bucket[1] = (bucket_t){O_W2, O_BN1 - O_W2};
        m->bucket[2] = (bucket_t){O_BN1, NPARAM - O_BN1};
    } else {
        /* PyTorch's rule: the first bucket closes once it holds >= 1 MB */
        m->bucket[0] = (bucket_t){O_W3, O_BN1 - O_W3};
        m->bucket[1] = (bucket_t){O_BN1, NPARAM - O_BN1};
    }
}

static void model_free(model_t *m, comm_t *c)
{
    comm_mem_free(c, m->grad);
    free(m->param), free(m->x0), free(m->h1), free(m->h2), free(m->y);
    free(m->dy), free(m->dh2), free(m->dh1), free(m->bnstat);
}

/* ---- strategies ------------------------------------------------------------------ */

typedef enum strat {
    S_COMPUTE,
    S_COMPUTE_BN,
    S_SERIAL_MPI,
    S_SERIAL_RING,
    S_SERIAL_SHM,
    S_NBC_POLL,
    S_THREAD_MPI,
    S_RING_POLL,
    S_RING_THREAD,
    S_SHM_POLL,
    S_COMM_THREAD,
    NSTRAT
} strat_t;

static const char *strat_name[NSTRAT] = {"compute",     "compute+bn", "serial-mpi", "serial-ring",
                                         "serial-shm",  "nbc-poll",   "thread-mpi", "ring-poll",
                                         "ring-thread", "shm-poll",   "comm-thread"};
static const char *strat_kind[NSTRAT] = {
    "reference",    "reference",       "(d) no overlap", "(d) no overlap",  "(d) no overlap",
    "(a) MPI_Test", "(b) comm thread", "(c) ring+poll",  "(c) ring+thread", "(e) shm+poll",
    "(c) ring+backend"};

/* A comm thread.  mode 0: runs blocking MPI_Allreduce jobs from a queue
 * (thread-mpi).  mode 1: calls comm progress in a loop while enabled
 * (ring-thread).  Every MPI call of either thread is made under `mu`, so
 * MPI_THREAD_SERIALIZED suffices. */
typedef struct job {
    void *buf;
    size_t count;
    MPI_Datatype dt;
    int done;
} job_t;

typedef struct cthread {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    job_t *queue[16];
    int head, tail, stop, enabled, sleep_us, mode;
    comm_t *c;
    ddp_status_t err;
} cthread_t;

static void allreduce_pieces_(void *buf, size_t count, MPI_Datatype dt, MPI_Comm comm)
{
    int esz;
    MPI_Type_size(dt, &esz);
    size_t per = ((size_t)8 << 20) / (size_t)esz; /* never above 8 MB: no >32 MB collapse */
    for (size_t off = 0; off < count; off += per) {
        size_t n = count - off < per ? count - off : per;
        MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * (size_t)esz, (int)n, dt, MPI_SUM, comm);
    }
}

static void *cthread_main_(void *arg)
{
    cthread_t *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (t->stop) break;
        if (t->mode == 0) {
            if (t->head == t->tail) {
                pthread_cond_wait(&t->cv_work, &t->mu);
                continue;
            }
            job_t *j = t->queue[t->head % 16];
            /* the main thread makes no MPI call while jobs are queued, so
             * the MPI calls stay serialized without holding the lock */
            pthread_mutex_unlock(&t->mu);
            allreduce_pieces_(j->buf, j->count, j->dt, t->c->mpi);
            pthread_mutex_lock(&t->mu);
            t->head++;
            j->done = 1;
            pthread_cond_broadcast(&t->cv_done);
        } else {
            if (!t->enabled) {
                pthread_cond_wait(&t->cv_work, &t->mu);
                continue;
            }
            ddp_status_t s = t->c->ops->progress(t->c);
            if (s != DDP_OK) t->err = s;
            pthread_mutex_unlock(&t->mu);
            if (t->sleep_us > 0) {
                struct timespec ts = {0, t->sleep_us * 1000L};
                nanosleep(&ts, NULL);
            } else {
                sched_yield();
            }
            pthread_mutex_lock(&t->mu);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void cthread_submit_(cthread_t *t, job_t *j)
{
    pthread_mutex_lock(&t->mu);
    j->done = 0;
    t->queue[t->tail++ % 16] = j;
    pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
}

static void cthread_wait_(cthread_t *t, job_t *j)
{
    pthread_mutex_lock(&t->mu);
    while (!j->done) pthread_cond_wait(&t->cv_done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

static void cthread_enable_(cthread_t *t, int on)
{
    pthread_mutex_lock(&t->mu);
    t->enabled = on;
    pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
}

/* ---- one step --------------------------------------------------------------------- */

typedef struct run {
    strat_t s;
    comm_t *c;
    cthread_t *th; /* thread-mpi: th[0]; ring-thread: th[1] */
    int pieces;
    comm_req_t *req[3];
    job_t job[3], bnjob;
    double tail_s; /* from the end of backward's compute to all buckets reduced */
} run_t;

static void die_(ddp_status_t s, const char *what)
{
    if (s == DDP_OK) return;
    fprintf(stderr, "bench_overlap: %s: %s\n", what, ddp_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void poll_(run_t *r)
{
    if (r->s == S_RING_POLL || r->s == S_NBC_POLL || r->s == S_SHM_POLL || r->s == S_COMM_THREAD)
        die_(r->c->ops->progress(r->c), "progress");
}

/* C[M,N] = op(A) op(B); in backward (bwd = 1) cut into `pieces` row blocks
 * of C with a poll between them. */
static void gemm_(run_t *r, int bwd, int ta, int tb, int M, int N, int K, const float *A, int lda,
                  const float *B, int ldb, float *C)
{
    int P = bwd && r->pieces > 1 ? r->pieces : 1;
    for (int p = 0; p < P; p++) {
        int m0 = M * p / P, m1 = M * (p + 1) / P;
        if (m1 == m0) continue;
        const float *Ap = ta ? A + m0 : A + (size_t)m0 * lda;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m1 - m0, N, K, 1.0f, Ap, lda, B, ldb, 0.0f, C + (size_t)m0 * N, N);
        if (p + 1 < P) poll_(r);
    }
}

/* SyncBatchNorm's small blocking all-reduce (2 * 1024 + 1 doubles). */
static void syncbn_(run_t *r, model_t *m, int layer, int64_t step)
{
    comm_desc_t d = {"syncbn", layer, step};
    for (int i = 0; i < 2 * HID + 1; i++) m->bnstat[i] = 0.5 * i + layer;
    switch (r->s) {
    case S_COMPUTE: break;
    case S_COMPUTE_BN:
    case S_SERIAL_MPI:
        MPI_Allreduce(MPI_IN_PLACE, m->bnstat, 2 * HID + 1, MPI_DOUBLE, MPI_SUM, r->c->mpi);
        break;
    case S_THREAD_MPI:
        r->bnjob = (job_t){m->bnstat, 2 * HID + 1, MPI_DOUBLE, 0};
        cthread_submit_(r->th, &r->bnjob);
        cthread_wait_(r->th, &r->bnjob);
        break;
    case S_RING_THREAD:
        pthread_mutex_lock(&r->th[1].mu);
        die_(comm_allreduce(r->c, m->bnstat, 2 * HID + 1, COMM_DOUBLE, &d), "syncbn");
        pthread_mutex_unlock(&r->th[1].mu);
        break;
    default: die_(comm_allreduce(r->c, m->bnstat, 2 * HID + 1, COMM_DOUBLE, &d), "syncbn");
    }
}

/* Bucket b's gradients are all written. */
static void bucket_ready_(run_t *r, model_t *m, int b, int64_t step)
{
    bucket_t *k = &m->bucket[b];
    comm_desc_t d = {"bucket", b, step};
    switch (r->s) {
    case S_NBC_POLL:
    case S_RING_POLL:
    case S_SHM_POLL:
    case S_COMM_THREAD:
        die_(r->c->ops->iallreduce(r->c, m->grad + k->off, k->count, COMM_FLOAT, &d, &r->req[b]),
             "iallreduce");
        break;
    case S_RING_THREAD:
        pthread_mutex_lock(&r->th[1].mu);
        die_(r->c->ops->iallreduce(r->c, m->grad + k->off, k->count, COMM_FLOAT, &d, &r->req[b]),
             "iallreduce");
        pthread_mutex_unlock(&r->th[1].mu);
        break;
    case S_THREAD_MPI:
        r->job[b] = (job_t){m->grad + k->off, k->count, MPI_FLOAT, 0};
        cthread_submit_(r->th, &r->job[b]);
        break;
    default: break;
    }
}

static void wait_all_(run_t *r, model_t *m, int64_t step)
{
    for (int b = 0; b < m->nbuckets; b++) {
        bucket_t *k = &m->bucket[b];
        comm_desc_t d = {"bucket", b, step};
        switch (r->s) {
        case S_SERIAL_MPI:
            allreduce_pieces_(m->grad + k->off, k->count, MPI_FLOAT, r->c->mpi);
            break;
        case S_SERIAL_RING:
        case S_SERIAL_SHM:
            die_(comm_allreduce(r->c, m->grad + k->off, k->count, COMM_FLOAT, &d), "allreduce");
            break;
        case S_NBC_POLL:
        case S_RING_POLL:
        case S_SHM_POLL:
        case S_COMM_THREAD: die_(r->c->ops->wait(r->c, r->req[b]), "wait"); break;
        case S_RING_THREAD:
            pthread_mutex_lock(&r->th[1].mu);
            die_(r->c->ops->wait(r->c, r->req[b]), "wait");
            pthread_mutex_unlock(&r->th[1].mu);
            break;
        case S_THREAD_MPI: cthread_wait_(r->th, &r->job[b]); break;
        default: break;
        }
    }
}

/* One training step (the timing loop times it). */
static void step_(run_t *r, model_t *m, int64_t step)
{
    float *g = m->grad, *p = m->param;
    /* forward */
    gemm_(r, 0, 0, 1, BATCH, HID, IN, m->x0, IN, p + O_W1, IN, m->h1);
    syncbn_(r, m, 1, step);
    gemm_(r, 0, 0, 1, BATCH, HID, HID, m->h1, HID, p + O_W2, HID, m->h2);
    syncbn_(r, m, 2, step);
    gemm_(r, 0, 0, 1, BATCH, OUT, HID, m->h2, HID, p + O_W3, HID, m->y);
    /* backward: layer 3, BN 2 -> bucket 0 (3 buckets) */
    gemm_(r, 1, 1, 0, OUT, HID, BATCH, m->dy, OUT, m->h2, HID, g + O_W3);
    gemm_(r, 1, 0, 0, BATCH, HID, OUT, m->dy, OUT, p + O_W3, HID, m->dh2);
    syncbn_(r, m, 2, step);
    for (int i = 0; i < OUT; i++) g[O_B3 + i] = 0.01f * (float)i;
    for (int i = 0; i < 2 * HID; i++) g[O_BN2 + i] = (float)m->bnstat[i] * 1e-3f;
    for (int i = 0; i < HID; i++) g[O_B2 + i] = m->dh2[i];
    if (m->nbuckets == 3) bucket_ready_(r, m, 0, step);
    poll_(r);
    /* layer 2: dW2 -> bucket 1 (3 buckets) or 0 (2 buckets) */
    gemm_(r, 1, 1, 0, HID, HID, BATCH, m->dh2, HID, m->h1, HID, g + O_W2);
    bucket_ready_(r, m, m->nbuckets == 3 ? 1 : 0, step);
    poll_(r);
    gemm_(r, 1, 0, 0, BATCH, HID, HID, m->dh2, HID, p + O_W2, HID, m->dh1);
    poll_(r);
    syncbn_(r, m, 1, step);
    for (int i = 0; i < 2 * HID; i++) g[O_BN1 + i] = (float)m->bnstat[i] * 1e-3f;
    for (int i = 0; i < HID; i++) g[O_B1 + i] = m->dh1[i];
    poll_(r);
    /* layer 1: dW1 -> the last bucket */
    gemm_(r, 1, 1, 0, HID, IN, BATCH, m->dh1, HID, m->x0, IN, g + O_W1);
    double t1 = MPI_Wtime();
    bucket_ready_(r, m, m->nbuckets - 1, step);
    wait_all_(r, m, step);
    r->tail_s = MPI_Wtime() - t1;
    /* SGD: p -= lr g / W */
    float lr = 1e-6f;
    for (size_t i = 0; i < NPARAM; i++) p[i] -= lr * g[i];
}

/* The same collectives without compute (the denominator of the overlap). */
static void comm_alone_(run_t *r, model_t *m, int64_t step)
{
    for (int l = 0; l < 4; l++) syncbn_(r, m, l, step);
    for (int b = 0; b < m->nbuckets; b++) bucket_ready_(r, m, b, step);
    wait_all_(r, m, step);
}

/* ---- the timed cases (bench_common.h) --------------------------------------------- */

/* A strategy's step, then (unless it is a reference) the same collectives
 * alone. */
typedef struct strat_run {
    run_t r;
    model_t *m;
    int64_t *step; /* the step counter all strategies share */
    double *tail;  /* [iters] r.tail_s of the timed steps */
    int alone;     /* the communication-alone case follows the step */
} strat_run_t;

/* Before the step (outside the clock): ring-thread's thread polls. */
static void strat_begin_(void *arg)
{
    strat_run_t *x = arg;
    if (x->r.s == S_RING_THREAD) cthread_enable_(&x->r.th[1], 1);
}

/* After the step and its communication alone (outside the clock). */
static void strat_end_(void *arg)
{
    strat_run_t *x = arg;
    if (x->r.s == S_RING_THREAD) cthread_enable_(&x->r.th[1], 0);
    die_(x->r.th[1].err, "progress thread");
    (*x->step)++;
}

/* comm-thread: the progress thread's CPU time over the timed steps */
static double thread_cpu_s_;
static long thread_steps_;

static void step_case_(void *arg, long it)
{
    strat_run_t *x = arg;
    double cpu0 = 0, cpu1 = 0;
    uint64_t passes;
    if (x->r.s == S_COMM_THREAD) comm_mpi_thread_usage(x->r.c, &cpu0, &passes);
    step_(&x->r, x->m, *x->step);
    if (x->r.s == S_COMM_THREAD && it >= 0) {
        comm_mpi_thread_usage(x->r.c, &cpu1, &passes);
        thread_cpu_s_ += cpu1 - cpu0;
        thread_steps_++;
    }
    if (it >= 0) x->tail[it] = x->r.tail_s;
}

static void alone_case_(void *arg, long it)
{
    strat_run_t *x = arg;
    comm_alone_(&x->r, x->m, *x->step);
}

/* ---- main -------------------------------------------------------------------------- */

static uint64_t fnv1a_(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void usage_(void)
{
    fprintf(stderr, "usage: bench_overlap [--iters N] [--warmup N] [--buckets 2|3] [--pieces P]\n"
                    "                     [--sleep-us U] [--only name,name,...]\n");
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int iters = 100, warmup = 10, nbuckets = 3, pieces = 1, sleep_us = 50;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--buckets") && i + 1 < argc)
            nbuckets = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pieces") && i + 1 < argc)
            pieces = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc)
            sleep_us = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            usage_();
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (iters < 1 || warmup < 0 || (nbuckets != 2 && nbuckets != 3) || pieces < 1) {
        usage_();
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* one communicator per algorithm, so the strategies can interleave */
    comm_t c, cring, cnbc, cthr;
    die_(comm_init_mpi(&c, MPI_COMM_WORLD), "comm_init_mpi"); /* "auto": shared memory */
    die_(comm_init_mpi(&cring, MPI_COMM_WORLD), "comm_init_mpi");
    die_(comm_mpi_set_algorithm(&cring, "ring"), "algorithm");
    die_(comm_init_mpi(&cnbc, MPI_COMM_WORLD), "comm_init_mpi");
    die_(comm_mpi_set_algorithm(&cnbc, "mpi"), "algorithm");
    die_(comm_init_mpi(&cthr, MPI_COMM_WORLD), "comm_init_mpi");
    die_(comm_mpi_set_algorithm(&cthr, "ring"), "algorithm");
    char why[256] = "";
    die_(comm_mpi_set_thread(&cthr, 1, sleep_us, why, sizeof why), "progress thread");
    if (why[0]) {
        fprintf(stderr, "bench_overlap: comm-thread: %s\n", why);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    model_t m;
    model_init(&m, nbuckets, &c);
    int on[NSTRAT];
    for (int s = 0; s < NSTRAT; s++) on[s] = !only || strstr(only, strat_name[s]) != NULL;
    on[S_COMPUTE] = 1; /* the reference is always measured */

    cthread_t th[2];
    for (int k = 0; k < 2; k++) {
        memset(&th[k], 0, sizeof th[k]);
        pthread_mutex_init(&th[k].mu, NULL);
        pthread_cond_init(&th[k].cv_work, NULL);
        pthread_cond_init(&th[k].cv_done, NULL);
        th[k].mode = k;
        th[k].sleep_us = sleep_us;
        th[k].c = k == 0 ? &cnbc : &cring;
        pthread_create(&th[k].th, NULL, cthread_main_, &th[k]);
    }

    double *t[NSTRAT], *tw[NSTRAT], *ta[NSTRAT];
    uint64_t hash[NSTRAT];
    int nt = iters;
    for (int s = 0; s < NSTRAT; s++) {
        t[s] = calloc((size_t)nt, sizeof(double));
        tw[s] = calloc((size_t)nt, sizeof(double));
        ta[s] = calloc((size_t)nt, sizeof(double));
    }
    /* every strategy's step, then its collectives alone, in turn, each
     * after a barrier; the slowest rank's time per iteration */
    int64_t step = 0;
    strat_run_t runs[NSTRAT];
    bench_case_t cases[2 * NSTRAT];
    int ncases = 0;
    for (int s = 0; s < NSTRAT; s++) {
        if (!on[s]) continue;
        strat_t st = (strat_t)s;
        comm_t *use = st == S_COMM_THREAD                                               ? &cthr
                      : st == S_NBC_POLL || st == S_THREAD_MPI                          ? &cnbc
                      : st == S_SERIAL_RING || st == S_RING_POLL || st == S_RING_THREAD ? &cring
                                                                                        : &c;
        runs[s] = (strat_run_t){.r = {.s = st, .c = use, .th = th, .pieces = pieces},
                                .m = &m,
                                .step = &step,
                                .tail = tw[s],
                                .alone = s > S_COMPUTE_BN};
        int alone = runs[s].alone;
        cases[ncases++] = (bench_case_t){.run = step_case_,
                                         .arg = &runs[s],
                                         .warmup = warmup,
                                         .t = t[s],
                                         .prepare = strat_begin_,
                                         .finish = alone ? NULL : strat_end_};
        if (alone)
            cases[ncases++] = (bench_case_t){.run = alone_case_,
                                             .arg = &runs[s],
                                             .warmup = warmup,
                                             .t = ta[s],
                                             .finish = strat_end_};
    }
    bench_loop_t loop = {
        .samples = iters, .before = bench_mpi_barrier, .combine = bench_mpi_slowest};
    bench_loop_run(&loop, cases, ncases);
    for (int s = 0; s < NSTRAT; s++)
        if (on[s]) bench_mpi_slowest(tw[s], nt, NULL);
    /* gradients after one more step: identical on every rank? */
    for (int s = 0; s < NSTRAT; s++) {
        if (!on[s]) continue;
        MPI_Barrier(MPI_COMM_WORLD);
        step_(&runs[s].r, &m, step);
        hash[s] = fnv1a_(m.grad, NPARAM * sizeof(float));
    }
    int identical[NSTRAT];
    for (int s = 0; s < NSTRAT; s++) {
        uint64_t h0 = hash[s];
        MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        int same = h0 == hash[s];
        MPI_Allreduce(&same, &identical[s], 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    }

    if (c.rank == 0) {
        size_t bytes = 0;
        for (int b = 0; b < nbuckets; b++) bytes += m.bucket[b].count * sizeof(float);
        const char *cma = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
        printf("# bench_overlap: %d ranks, MLP %d-%d-%d-%d + BN, batch %d per rank, "
               "%.2f MB of gradients in %d buckets (",
               c.size, IN, HID, HID, OUT, BATCH, bytes / 1e6, nbuckets);
        for (int b = 0; b < nbuckets; b++)
            printf("%s%.3f MB", b ? ", " : "", m.bucket[b].count * 4 / 1e6);
        printf(")\n# %d iterations after %d warm-up, strategies interleaved; polls between "
               "backward pieces: %d per sgemm; ring-thread sleep %d us; vader single copy: %s\n",
               iters, warmup, pieces, sleep_us, cma ? cma : "default");
        printf("# times: median (p10-p90) over iterations of the slowest rank\n");
        printf("%-12s %-16s %9s %17s %9s %9s %9s %8s %9s\n", "strategy", "kind", "step",
               "step p10-p90", "exposed", "tail", "alone", "overlap", "identical");
        printf("%-12s %-16s %9s %17s %9s %9s %9s %8s %9s\n", "", "", "(ms)", "(ms)", "(ms)", "(ms)",
               "(ms)", "(%)", "");
        double ref = 0;
        for (int s = 0; s < NSTRAT; s++) {
            if (!on[s]) continue;
            double med = bench_quantile(t[s], nt, 0.5), p10 = bench_quantile(t[s], nt, 0.1),
                   p90 = bench_quantile(t[s], nt, 0.9), w = bench_quantile(tw[s], nt, 0.5),
                   a = bench_quantile(ta[s], nt, 0.5);
            if (s == S_COMPUTE) ref = med;
            char ov[16] = "-", ex[16] = "-", al[16] = "-", ws[16] = "-";
            if (s != S_COMPUTE) snprintf(ex, sizeof ex, "%.3f", (med - ref) * 1e3);
            if (s > S_COMPUTE_BN) {
                snprintf(al, sizeof al, "%.3f", a * 1e3);
                snprintf(ov, sizeof ov, "%.0f", 100.0 * (1.0 - (med - ref) / a));
                snprintf(ws, sizeof ws, "%.3f", w * 1e3);
            }
            char range[32];
            snprintf(range, sizeof range, "%.3f-%.3f", p10 * 1e3, p90 * 1e3);
            printf("%-12s %-16s %9.3f %17s %9s %9s %9s %8s %9s\n", strat_name[s], strat_kind[s],
                   med * 1e3, range, ex, ws, al, ov,
                   s == S_COMPUTE ? "-"
                   : identical[s] ? "yes"
                                  : "NO");
        }
        if (on[S_COMM_THREAD] && thread_steps_)
            printf("# comm-thread: the progress thread used %.3f ms of CPU per step (rank 0, "
                   "%ld timed steps, polling every %d us)\n",
                   thread_cpu_s_ / (double)thread_steps_ * 1e3, thread_steps_, sleep_us);
    }

    for (int k = 0; k < 2; k++) {
        pthread_mutex_lock(&th[k].mu);
        th[k].stop = 1;
        pthread_cond_signal(&th[k].cv_work);
        pthread_mutex_unlock(&th[k].mu);
        pthread_join(th[k].th, NULL);
    }
    for (int s = 0; s < NSTRAT; s++) free(t[s]), free(tw[s]), free(ta[s]);
    model_free(&m, &c);
    comm_free(&cthr);
    comm_free(&cnbc);
    comm_free(&cring);
    comm_free(&c);
    MPI_Finalize();
    return 0;
}
