/* comm_mpi.c -- the MPI comm backend (comm_mpi.h; host memory): the
 * collectives of the gradient plane, each run by one algorithm of the
 * table in comm_mpi_algo.h (shared memory, ring, Open MPI's own), in flight
 * together and advanced by a progress engine that runs inside comm calls
 * (progress, test, wait, the blocking collectives) and, with --comm-thread,
 * on the progress thread of comm_mpi_thread.c, which drives the collectives
 * that move messages while the caller computes; every entry takes that
 * file's lock.  docs/parallelism.md ("The all-reduce") has the details.
 * Every rank ends with the same bits: each block's sum is computed once, on
 * its owner, in an order fixed by the algorithm and W, and the other ranks
 * only copy it.  The additions themselves are in sum_kernels.c. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activity.h"
#include "comm_mpi.h"
#include "comm_mpi_algo.h"
#include "comm_mpi_thread.h"
#include "log.h"

/* Largest MPI_Bcast of the broadcast op (MPI counts are ints). */
#define BCAST_CHUNK ((size_t)8 << 20)

/* The algorithms comm_mpi_set_algorithm names (shared memory is "auto"'s
 * choice on one node, never forced; "hier" on one node is shared memory). */
static const mpi_algo_t *const algos_[] = {&mpi_algo_shm, &mpi_algo_hier, &mpi_algo_ring,
                                           &mpi_algo_chunked};
#define NALGOS ((int)(sizeof algos_ / sizeof algos_[0]))
_Static_assert(NALGOS <= (int)(sizeof((mpi_impl_t *)0)->used / sizeof(uint64_t)),
               "mpi_impl_t.used counts every algorithm");

/* ---- errors ------------------------------------------------------------- */

ddp_status_t comm_mpi_error(int rc, const char *what, const comm_desc_t *d, uint64_t seq)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ddp_fail(DDP_ERR_COMM,
                    "MPI %s failed during %s %d (step %lld, collective #%llu): %s; "
                    "check that every rank is alive and reachable",
                    what, d && d->what ? d->what : "collective", d ? d->index : -1,
                    d ? (long long)d->step : -1LL, (unsigned long long)seq, msg);
}

/* ---- in-flight list ------------------------------------------------------- */

static void link_(mpi_impl_t *m, comm_req_t *q)
{
    q->next = NULL;
    q->prev = m->tail;
    if (m->tail)
        m->tail->next = q;
    else
        m->head = q;
    m->tail = q;
}

static void unlink_(mpi_impl_t *m, comm_req_t *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        m->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        m->tail = q->prev;
    q->next = q->prev = NULL;
}

static void req_free_(comm_t *c, comm_req_t *q)
{
    if (q->algo) q->algo->release(c, q);
    free(q);
}

/* ---- the progress engine ---------------------------------------------------- */

static ddp_status_t req_progress_(comm_t *c, comm_req_t *q)
{
    if (q->err) return q->err;
    if (!q->done) {
        ddp_status_t s = q->algo->progress(c, q);
        if (s != DDP_OK) return q->err = s;
    }
    /* the update after the sums, where the algorithm did not fuse it: on
     * every rank over the whole range (all-reduce), or the owner's block
     * (reduce-scatter); always on the main thread (the optimizer calls the
     * compute backend), never on the progress thread */
    if (q->done && q->has_apply && !q->applied && !mpi_thread_self()) {
        q->applied = 1;
        size_t first = 0, n = q->count;
        if (q->op == COLL_REDUCE_SCATTER) comm_block(q->count, c->size, c->rank, &first, &n);
        if (n) q->apply.fn(q->apply.arg, first, n);
    }
    return DDP_OK;
}

ddp_status_t comm_mpi_progress(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    ddp_status_t first = DDP_OK;
    for (comm_req_t *q = m->head; q; q = q->next) {
        ddp_status_t s = req_progress_(c, q);
        if (s != DDP_OK && first == DDP_OK) first = s;
    }
    return first;
}

/* The algorithm of q: the forced one where it can run q; else shared
 * memory (one node) or the hierarchical algorithm (several nodes) where
 * the buffer is node-shared, and the ring otherwise.  The same on every
 * rank. */
static const mpi_algo_t *choose_(comm_t *c, const comm_req_t *q)
{
    const mpi_impl_t *m = c->impl;
    if (m->forced && m->forced->usable(c, q)) return m->forced;
    if (m->forced && m->forced != &mpi_algo_hier) return m->forced;
    if (mpi_algo_shm.usable(c, q)) return &mpi_algo_shm;
    if (mpi_algo_hier.usable(c, q)) return &mpi_algo_hier;
    return &mpi_algo_ring;
}

/* Start a collective; a: the update after it (NULL: none). */
static ddp_status_t start_locked_(comm_t *c, coll_op_t op, void *buf, size_t count,
                                  comm_dtype_t t, const comm_apply_t *a, const comm_desc_t *d,
                                  comm_req_t **req)
{
    static const char *const names[] = {"all-reduce", "reduce-scatter", "all-gather"};
    mpi_impl_t *m = c->impl;
    *req = NULL;
    DDP_TRY(mpi_thread_error(c));
    comm_req_t *q = calloc(1, sizeof *q);
    if (!q) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
    size_t esz = comm_dtype_size(t);
    comm_note_start(c, d, names[op], count * esz);
    q->job = activity_last();
    q->op = op;
    q->desc = c->last;
    q->seq = c->seq;
    q->buf = buf;
    q->count = count;
    q->esz = esz;
    q->type = t;
    if (a) {
        q->has_apply = 1;
        q->apply = *a;
    }
    q->algo = choose_(c, q);
    for (int i = 0; i < NALGOS; i++)
        if (algos_[i] == q->algo) m->used[i]++;
    ddp_status_t s = q->algo->start(c, q);
    if (s == DDP_OK) link_(m, q);
    if (s == DDP_OK) s = req_progress_(c, q);
    if (s == DDP_OK) mpi_thread_wake(c);
    if (s != DDP_OK) {
        /* the communicator is unusable after a failed start; the caller aborts */
        if (q->next || q->prev || m->head == q) unlink_(m, q);
        req_free_(c, q);
        return s;
    }
    *req = q;
    return DDP_OK;
}

static ddp_status_t start_(comm_t *c, coll_op_t op, void *buf, size_t count, comm_dtype_t t,
                           const comm_apply_t *a, const comm_desc_t *d, comm_req_t **req)
{
    mpi_lock(c);
    ddp_status_t s = start_locked_(c, op, buf, count, t, a, d, req);
    mpi_unlock(c);
    return s;
}

static ddp_status_t mpi_iallreduce_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                    const comm_desc_t *d, comm_req_t **req)
{
    return start_(c, COLL_ALLREDUCE, buf, count, t, NULL, d, req);
}

static ddp_status_t mpi_iallreduce_apply_(comm_t *c, float *buf, size_t count,
                                          const comm_apply_t *a, const comm_desc_t *d,
                                          comm_req_t **req)
{
    return start_(c, COLL_ALLREDUCE, buf, count, COMM_FLOAT, a, d, req);
}

static ddp_status_t mpi_ireduce_scatter_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                         const comm_apply_t *a, const comm_desc_t *d,
                                         comm_req_t **req)
{
    return start_(c, COLL_REDUCE_SCATTER, buf, count, t, a, d, req);
}

static ddp_status_t mpi_iallgather_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                    const comm_desc_t *d, comm_req_t **req)
{
    return start_(c, COLL_ALLGATHER, buf, count, t, NULL, d, req);
}

static ddp_status_t mpi_test_(comm_t *c, comm_req_t *req, int *done)
{
    *done = 0;
    mpi_lock(c);
    ddp_status_t s = mpi_thread_error(c);
    if (s == DDP_OK) s = comm_mpi_progress(c);
    /* done once its update has run too (the main thread's) */
    if (s == DDP_OK) *done = req->done && (!req->has_apply || req->applied);
    mpi_unlock(c);
    return s;
}

/* The progress op: the engine under the lock. */
static ddp_status_t mpi_progress_(comm_t *c)
{
    mpi_lock(c);
    ddp_status_t s = mpi_thread_error(c);
    if (s == DDP_OK) s = comm_mpi_progress(c);
    mpi_unlock(c);
    return s;
}

static ddp_status_t mpi_wait_(comm_t *c, comm_req_t *req)
{
    mpi_impl_t *m = c->impl;
    mpi_lock(c);
    ddp_status_t s = mpi_thread_error(c);
    if (s == DDP_OK) s = comm_mpi_progress(c);
    if (!req->done && s == DDP_OK) {
        /* the watchdog thread sees this wait (activity.h) and ends the job
         * when it outlasts --timeout */
        activity_block(req->job.number, &req->job);
        for (long spin = 0; !req->done && s == DDP_OK; spin++) {
            s = comm_mpi_progress(c);
            if (req->err) s = req->err;
            /* with more ranks than cores, let the rank we wait for run */
            if (m->oversubscribed && spin % 64 == 63) sched_yield();
        }
        activity_unblock();
    }
    if (req->err) s = req->err;
    unlink_(m, req);
    req_free_(c, req);
    mpi_unlock(c);
    return s;
}

/* Before a blocking collective: drive what is in flight (under the lock,
 * which the blocking MPI call then runs without, so the progress thread
 * keeps the ring going meanwhile). */
static ddp_status_t before_blocking_(comm_t *c)
{
    mpi_lock(c);
    ddp_status_t s = mpi_thread_error(c);
    if (s == DDP_OK) s = comm_mpi_progress(c);
    mpi_unlock(c);
    return s;
}

static ddp_status_t mpi_bcast_(comm_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d)
{
    DDP_TRY(before_blocking_(c));
    activity_block(comm_note_start(c, d, "broadcast", bytes), NULL);
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += BCAST_CHUNK) {
        size_t len = bytes - off < BCAST_CHUNK ? bytes - off : BCAST_CHUNK;
        int rc = MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, c->mpi);
        if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Bcast", &c->last, c->seq);
        if (bytes == 0) break;
    }
    activity_unblock();
    return DDP_OK;
}

static ddp_status_t mpi_allgather_(comm_t *c, const void *send, void *recv, size_t bytes,
                                   const comm_desc_t *d)
{
    DDP_TRY(before_blocking_(c));
    activity_block(comm_note_start(c, d, "all-gather", bytes), NULL);
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi);
    if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Allgather", &c->last, c->seq);
    activity_unblock();
    return DDP_OK;
}

static ddp_status_t mpi_barrier_(comm_t *c)
{
    DDP_TRY(before_blocking_(c));
    comm_desc_t d = {"barrier", -1, -1};
    activity_block(comm_note_start(c, &d, "barrier", 0), NULL);
    int rc = MPI_Barrier(c->mpi);
    if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Barrier", &d, c->seq);
    activity_unblock();
    return DDP_OK;
}

/* The link between the nodes (comm_ops_t.probe_link): the node leaders
 * (cross_comm of local rank 0) send to the next node and receive from the
 * previous one at once, PROBE_REPS times after one untimed round. */
#define PROBE_REPS 4
static ddp_status_t mpi_probe_link_(comm_t *c, size_t bytes, double *gbps)
{
    *gbps = 0;
    if (c->nnodes < 2) return DDP_OK;
    DDP_TRY(comm_mpi_progress(c));
    if (bytes > ((size_t)1 << 30)) bytes = (size_t)1 << 30;
    comm_desc_t d = {"link-probe", -1, -1};
    activity_block(comm_note_start(c, &d, "send-receive", bytes), NULL);
    double mine = 1e300;
    int rc = MPI_SUCCESS;
    if (c->local_rank == 0) {
        char *s = calloc(bytes ? bytes : 1, 1), *r = malloc(bytes ? bytes : 1);
        int N = 0, me = 0;
        MPI_Comm_size(c->cross_comm, &N);
        MPI_Comm_rank(c->cross_comm, &me);
        double t0 = 0;
        for (int k = 0; s && r && k <= PROBE_REPS && rc == MPI_SUCCESS; k++) {
            if (k == 1) t0 = MPI_Wtime();
            rc = MPI_Sendrecv(s, (int)bytes, MPI_BYTE, (me + 1) % N, 7, r, (int)bytes, MPI_BYTE,
                              (me + N - 1) % N, 7, c->cross_comm, MPI_STATUS_IGNORE);
        }
        double dt = MPI_Wtime() - t0;
        if (s && r && dt > 0) mine = (double)bytes * PROBE_REPS / dt / 1e9;
        free(s);
        free(r);
    }
    if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Sendrecv", &d, c->seq);
    rc = MPI_Allreduce(&mine, gbps, 1, MPI_DOUBLE, MPI_MIN, c->mpi);
    if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Allreduce", &d, c->seq);
    if (*gbps >= 1e300) *gbps = 0;
    activity_unblock();
    return DDP_OK;
}

/* ---- memory ---------------------------------------------------------------- */

static ddp_status_t mpi_mem_plan_(comm_t *c, size_t bytes, int nbuffers)
{
    return mpi_shm_plan(c, bytes, nbuffers);
}

/* Shared memory on one node (when the ranks share it and there is room),
 * plain memory otherwise; see comm.h. */
static ddp_status_t mpi_mem_alloc_(comm_t *c, size_t bytes, void **p)
{
    return mpi_shm_alloc(c, bytes, p);
}

static void mpi_mem_free_(comm_t *c, void *p)
{
    if (p && !mpi_shm_free(c, p)) free(p);
}

static void mpi_free_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    if (m) {
        mpi_thread_stop(c); /* joined before the requests it drives go */
        /* requests never waited for: cancel what is pending, release */
        while (m->head) {
            comm_req_t *q = m->head;
            unlink_(m, q);
            req_free_(c, q);
        }
        for (int i = NALGOS - 1; i >= 0; i--) algos_[i]->fini(c);
        free(m);
        c->impl = NULL;
    }
    comm_detach(c);
}

/* The watchdog's or control_abort's end of the job (any thread): the
 * progress thread makes no more MPI calls; comm_free joins it. */
static void mpi_abort_(comm_t *c)
{
    mpi_thread_abort(c);
}

/* ---- the progress thread ---------------------------------------------------- */

ddp_status_t comm_mpi_set_thread(comm_t *c, int on, int sleep_us, char *why, size_t whylen)
{
    if (!c->impl || c->ops != &comm_mpi_ops)
        return ddp_fail(DDP_ERR_INTERNAL, "comm_mpi_set_thread on a non-MPI communicator");
    if (why && whylen) why[0] = 0;
    if (!on) {
        mpi_thread_stop(c);
        return DDP_OK;
    }
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (why && whylen)
            snprintf(why, whylen,
                     "MPI provides thread level %s, not MPI_THREAD_MULTIPLE: all-reduces advance "
                     "only between layers (use an MPI built with thread support for overlap "
                     "across nodes)",
                     provided == MPI_THREAD_SERIALIZED ? "SERIALIZED"
                     : provided == MPI_THREAD_FUNNELED ? "FUNNELED"
                                                       : "SINGLE");
        return DDP_OK;
    }
    if (sleep_us < 0) sleep_us = COMM_MPI_THREAD_SLEEP_US;
    return mpi_thread_start(c, sleep_us);
}

static ddp_status_t mpi_set_progress_thread_(comm_t *c, int on, int *running, char *why,
                                             size_t whylen)
{
    ddp_status_t s = comm_mpi_set_thread(c, on, -1, why, whylen);
    *running = mpi_thread_running(c);
    return s;
}

void comm_mpi_thread_usage(const comm_t *c, double *cpu_s, uint64_t *passes)
{
    mpi_thread_usage(c, cpu_s, passes);
}

uint64_t comm_mpi_thread_sleeps(const comm_t *c)
{
    return mpi_thread_sleeps(c);
}

/* ---- capabilities and registration -------------------------------------- */

static unsigned mpi_caps_(const comm_t *c)
{
    const mpi_impl_t *m = c->impl;
    return m && mpi_shm_available(c) ? COMM_CAP_NODE_SHARED_MEMORY : 0u;
}

/* MPI moves host memory; device memory needs a backend that takes it. */
static ddp_status_t mpi_mem_register_(comm_t *c, void *p, size_t bytes, ddp_mem_kind_t kind)
{
    (void)c;
    (void)p;
    (void)bytes;
    if (kind == DDP_MEM_HOST) return DDP_OK;
    return ddp_fail(DDP_ERR_USAGE,
                    "the mpi comm backend cannot all-reduce %s memory (%zu bytes of gradients "
                    "or BatchNorm statistics); this build has no comm backend for %s memory: "
                    "use the cpu compute backend",
                    ddp_mem_kind_name(kind), bytes, ddp_mem_kind_name(kind));
}

static void mpi_algorithms_(const comm_t *c, char *buf, size_t len)
{
    const mpi_impl_t *m = c->impl;
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; m && i < NALGOS && at < len; i++) {
        if (!m->used[i]) continue;
        int k = snprintf(buf + at, len - at, "%s%s %llu", at ? ", " : "", algos_[i]->name,
                         (unsigned long long)m->used[i]);
        if (k < 0) break;
        at += (size_t)k;
    }
    if (!buf[0]) snprintf(buf, len, "none yet");
}

const comm_ops_t comm_mpi_ops = {
    .name = "mpi",
    .caps = mpi_caps_,
    .mem_register = mpi_mem_register_,
    .iallreduce = mpi_iallreduce_,
    .iallreduce_apply = mpi_iallreduce_apply_,
    .ireduce_scatter = mpi_ireduce_scatter_,
    .iallgather = mpi_iallgather_,
    .test = mpi_test_,
    .wait = mpi_wait_,
    .progress = mpi_progress_,
    .bcast = mpi_bcast_,
    .allgather = mpi_allgather_,
    .barrier = mpi_barrier_,
    .mem_plan = mpi_mem_plan_,
    .mem_alloc = mpi_mem_alloc_,
    .mem_free = mpi_mem_free_,
    .free = mpi_free_,
    .abort = mpi_abort_,
    .set_algorithm = comm_mpi_set_algorithm,
    .algorithms = mpi_algorithms_,
    .probe_link = mpi_probe_link_,
    .set_progress_thread = mpi_set_progress_thread_,
};

ddp_status_t comm_mpi_set_algorithm(comm_t *c, const char *name)
{
    mpi_impl_t *m = c->impl;
    if (!m || c->ops != &comm_mpi_ops)
        return ddp_fail(DDP_ERR_INTERNAL, "comm_mpi_set_algorithm on a non-MPI communicator");
    if (!strcmp(name, "auto")) {
        m->forced = NULL;
        return DDP_OK;
    }
    for (int i = 0; i < NALGOS; i++)
        if (algos_[i] != &mpi_algo_shm && !strcmp(name, algos_[i]->name)) {
            m->forced = algos_[i];
            return DDP_OK;
        }
    return ddp_fail(DDP_ERR_USAGE,
                    "unknown all-reduce algorithm '%s' (use auto, hier, ring or mpi)", name);
}

ddp_status_t comm_mpi_set_ring(comm_t *c, size_t piece_bytes, int depth)
{
    if (!c->impl || c->ops != &comm_mpi_ops)
        return ddp_fail(DDP_ERR_INTERNAL, "comm_mpi_set_ring on a non-MPI communicator");
    return mpi_ring_set(c, piece_bytes, depth);
}

void comm_mpi_get_ring(const comm_t *c, size_t *piece_bytes, int *depth)
{
    mpi_ring_get(c, piece_bytes, depth);
}

ddp_status_t comm_init_mpi(comm_t *c, MPI_Comm world)
{
    memset(c, 0, sizeof *c);
    c->mpi = MPI_COMM_NULL;
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < COMM_MPI_THREAD_LEVEL)
        return ddp_fail(DDP_ERR_INTERNAL,
                        "MPI was initialised with thread level %d; the MPI comm backend needs "
                        "COMM_MPI_THREAD_LEVEL (%d): call MPI_Init_thread with it",
                        provided, COMM_MPI_THREAD_LEVEL);
    ddp_status_t s = comm_attach(c, world);
    if (s != DDP_OK) return s;
    mpi_impl_t *m = calloc(1, sizeof *m);
    if (!m) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    m->oversubscribed = ncpu > 0 && c->host_size > ncpu;
    c->impl = m;
    c->ops = &comm_mpi_ops;
    /* every algorithm's state, in the table's order on every rank (shared
     * memory's init is collective) */
    for (int i = 0; i < NALGOS && s == DDP_OK; i++) s = algos_[i]->init(c);
    return s;
}

const comm_backend_t comm_mpi_backend = {
    .name = "mpi",
    .moves = COMM_MOVES(DDP_MEM_HOST),
    .ops = &comm_mpi_ops,
    .init = comm_init_mpi,
};
