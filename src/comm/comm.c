/* comm.c -- backend-independent parts of the communicator, and the
 * registry of comm backends (see comm.h). */
#include "comm.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activity.h"
#include "ddp_build.h"
#include "opstable.h"

/* The builtins, one line per backend under the configure condition that
 * builds it ("mpi" first). */
static const comm_backend_t *const builtin_[] = {
    &comm_mpi_backend,
#ifdef HAVE_NCCL
    &comm_nccl_backend,
#endif
};

#define REGISTRY_MAX 8
static const comm_backend_t *registry_[REGISTRY_MAX];
static int nregistry_ = -1;                   /* -1: the builtins not registered yet */
static ddp_status_t builtin_failed_ = DDP_OK; /* a builtin refused at registration */

/* The ops every backend must have (comm.h marks the optional ones). */
#define REQUIRED(f) OPS_FIELD(comm_ops_t, f)
static const ops_field_t required_[] = {
    REQUIRED(iallreduce), REQUIRED(ireduce_scatter), REQUIRED(iallgather),
    REQUIRED(test),       REQUIRED(wait),            REQUIRED(progress),
    REQUIRED(bcast),      REQUIRED(allgather),       REQUIRED(barrier),
    REQUIRED(free),
};

static void builtins_(void);

ddp_status_t comm_register_backend(const comm_backend_t *b)
{
    builtins_();
    if (!b || !b->name || !b->name[0] || !b->ops || !b->init || !b->moves)
        return ddp_fail(DDP_ERR_INTERNAL,
                        "comm backend registered without a name, ops table, init or memory kind");
    const char *missing = ops_missing(b->ops, required_, sizeof required_ / sizeof required_[0]);
    if (missing)
        return ddp_fail(DDP_ERR_INTERNAL,
                        "comm backend '%s' has no %s op: every op but the optional ones of "
                        "comm.h is required",
                        b->name, missing);
    int at = 0;
    while (at < nregistry_ && strcmp(registry_[at]->name, b->name) != 0) at++;
    if (at == REGISTRY_MAX)
        return ddp_fail(DDP_ERR_INTERNAL, "more than %d comm backends registered", REGISTRY_MAX);
    registry_[at] = b;
    if (at == nregistry_) nregistry_++;
    return DDP_OK;
}

static void builtins_(void)
{
    if (nregistry_ >= 0) return;
    nregistry_ = 0;
    for (size_t i = 0; i < sizeof builtin_ / sizeof builtin_[0]; i++) {
        ddp_status_t s = comm_register_backend(builtin_[i]);
        if (s != DDP_OK && builtin_failed_ == DDP_OK) builtin_failed_ = s;
    }
}

int comm_backend_count(void)
{
    builtins_();
    return nregistry_;
}

const comm_backend_t *comm_backend(int i)
{
    return i >= 0 && i < comm_backend_count() ? registry_[i] : NULL;
}

const comm_backend_t *comm_find(const char *name)
{
    for (int i = 0; i < comm_backend_count(); i++)
        if (strcmp(registry_[i]->name, name) == 0) return registry_[i];
    return NULL;
}

ddp_status_t comm_pick(const char *name, ddp_mem_kind_t kind, const char *compute_name,
                       const comm_backend_t **out)
{
    *out = NULL;
    builtins_();
    if (builtin_failed_ != DDP_OK) return builtin_failed_;
    if (strcmp(name, "auto") == 0) {
        for (int i = 0; i < nregistry_ && !*out; i++)
            if (registry_[i]->moves & COMM_MOVES(kind)) *out = registry_[i];
        if (*out) return DDP_OK;
        return ddp_fail(DDP_ERR_USAGE,
                        "the %s compute backend computes in %s memory and this ddptrain has no "
                        "comm backend for it (built without NCCL?); rebuild with ./configure "
                        "--with-cuda --with-nccl, or use --device cpu",
                        compute_name, ddp_mem_kind_name(kind));
    }
    const comm_backend_t *b = comm_find(name);
    if (!b)
        return ddp_fail(DDP_ERR_USAGE,
                        "--comm %s: this ddptrain has no %s comm backend (ddptrain --version "
                        "lists them); use --comm auto",
                        name, name);
    if (!(b->moves & COMM_MOVES(kind)))
        return ddp_fail(DDP_ERR_USAGE,
                        "--comm %s cannot move %s memory, and the %s compute backend computes "
                        "there; use --comm auto (it picks the backend for the compute memory)",
                        name, ddp_mem_kind_name(kind), compute_name);
    *out = b;
    return DDP_OK;
}

/* DDP_SIM_NODES=2,1 (tests): the ranks, in order, split into nodes of 2
 * and 1 rank, as if on two machines, although they share this one: the
 * multi-node algorithms then run without a cluster.  Each simulated node
 * must lie on one real machine (its memory is shared).  Every rank reads
 * the same variable (mpirun passes the environment). */
static ddp_status_t sim_nodes_(comm_t *c, const char *spec)
{
    int node = -1, first = 0, n = 0;
    const char *p = spec;
    while (*p) {
        char *end;
        long k = strtol(p, &end, 10);
        if (end == p || k < 1 || k > c->size || (*end && *end != ','))
            return ddp_fail(DDP_ERR_USAGE,
                            "DDP_SIM_NODES=%s: expected the ranks of each simulated node, "
                            "e.g. 2,1; unset it outside tests",
                            spec);
        if (node < 0 && c->rank < first + k) node = n;
        first += (int)k;
        n++;
        p = *end ? end + 1 : end;
    }
    if (first != c->size)
        return ddp_fail(DDP_ERR_USAGE,
                        "DDP_SIM_NODES=%s: %d ranks in the simulated nodes, but the job has %d; "
                        "unset it outside tests",
                        spec, first, c->size);
    if (MPI_Comm_split(c->mpi, node, c->rank, &c->node_comm) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_split (the ranks of a simulated node) failed");
    MPI_Comm real;
    int whole = 0, size = 0, all = 0;
    if (MPI_Comm_split_type(c->node_comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &real) ==
        MPI_SUCCESS) {
        int rs = 0;
        MPI_Comm_size(real, &rs);
        MPI_Comm_size(c->node_comm, &size);
        whole = rs == size;
        MPI_Comm_free(&real);
    }
    if (MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &real) ==
        MPI_SUCCESS) {
        MPI_Comm_size(real, &c->host_size);
        MPI_Comm_free(&real);
    }
    MPI_Allreduce(&whole, &all, 1, MPI_INT, MPI_MIN, c->mpi);
    if (!all)
        return ddp_fail(DDP_ERR_USAGE,
                        "DDP_SIM_NODES=%s: a simulated node's ranks run on different machines; "
                        "it simulates nodes on one machine only: unset it",
                        spec);
    return DDP_OK;
}

ddp_status_t comm_attach(comm_t *c, MPI_Comm world)
{
    MPI_Comm dup;
    if (MPI_Comm_dup(world, &dup) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_dup failed");
    c->mpi = dup;
    c->node_comm = c->cross_comm = MPI_COMM_NULL;
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    const char *sim = getenv("DDP_SIM_NODES");
    if (sim && sim[0]) {
        DDP_TRY(sim_nodes_(c, sim));
    } else if (MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                   &c->node_comm) != MPI_SUCCESS) {
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_split_type (the ranks of a node) failed");
    }
    if (MPI_Comm_rank(c->node_comm, &c->local_rank) != MPI_SUCCESS ||
        MPI_Comm_size(c->node_comm, &c->local_size) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_rank/size (the ranks of a node) failed");
    if (!c->host_size) c->host_size = c->local_size;
    /* nodes are numbered in the order of their first ranks: a leader's
     * number is the count of leaders before it, which its node learns */
    int leader = c->local_rank == 0, before = 0;
    MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, c->mpi);
    if (c->rank == 0) before = 0; /* MPI_Exscan leaves rank 0's undefined */
    c->node = before;
    MPI_Bcast(&c->node, 1, MPI_INT, 0, c->node_comm);
    MPI_Allreduce(&leader, &c->nnodes, 1, MPI_INT, MPI_SUM, c->mpi);
    if (MPI_Comm_split(c->mpi, c->local_rank, c->node, &c->cross_comm) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_split (the ranks across nodes) failed");
    MPI_Comm_set_errhandler(c->node_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->cross_comm, MPI_ERRORS_RETURN);
    return DDP_OK;
}

void comm_detach(comm_t *c)
{
    if (c->cross_comm != MPI_COMM_NULL) MPI_Comm_free(&c->cross_comm);
    if (c->node_comm != MPI_COMM_NULL) MPI_Comm_free(&c->node_comm);
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
}

void comm_block(size_t count, int size, int rank, size_t *first, size_t *n)
{
    size_t base = count / (size_t)size, rem = count % (size_t)size, b = (size_t)rank;
    *first = b * base + (b < rem ? b : rem);
    *n = base + (b < rem ? 1 : 0);
}

unsigned comm_caps(const comm_t *c)
{
    return c->ops && c->ops->caps ? c->ops->caps(c) : 0u;
}

void comm_algorithms(const comm_t *c, char *buf, size_t len)
{
    if (!len) return;
    buf[0] = 0;
    if (c->ops && c->ops->algorithms)
        c->ops->algorithms(c, buf, len);
    else
        snprintf(buf, len, "%s", c->ops ? c->ops->name : "none");
}

ddp_status_t comm_probe_link(comm_t *c, size_t bytes, double *gbps)
{
    *gbps = 0;
    if (c->ops && c->ops->probe_link) return c->ops->probe_link(c, bytes, gbps);
    return DDP_OK;
}

ddp_status_t comm_register(comm_t *c, void *p, size_t bytes, ddp_mem_kind_t kind)
{
    if (c->ops && c->ops->mem_register) return c->ops->mem_register(c, p, bytes, kind);
    if (kind == DDP_MEM_HOST) return DDP_OK;
    return ddp_fail(DDP_ERR_USAGE, "the %s comm backend moves host memory only, not %s memory",
                    c->ops ? c->ops->name : "?", ddp_mem_kind_name(kind));
}

void comm_deregister(comm_t *c, void *p)
{
    if (p && c->ops && c->ops->mem_deregister) c->ops->mem_deregister(c, p);
}

size_t comm_dtype_size(comm_dtype_t t)
{
    switch (t) {
    case COMM_FLOAT: return 4;
    case COMM_DOUBLE: return 8;
    case COMM_BF16:
    case COMM_FP16: return 2;
    case COMM_INT64: return 8;
    }
    return 0;
}

uint64_t comm_note_start(comm_t *c, const comm_desc_t *d, const char *op, size_t bytes)
{
    c->seq++;
    if (d)
        c->last = *d;
    else
        c->last = (comm_desc_t){"unnamed", -1, -1};
    if (bytes && strcmp(op, "all-reduce") == 0) {
        c->allreduce_bytes += bytes;
        c->allreduce_calls++;
    }
    return activity_collective_start(&c->last, PLANE_GRADIENT, op, bytes);
}

ddp_status_t comm_allreduce(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                            const comm_desc_t *d)
{
    comm_req_t *req = NULL;
    DDP_TRY(c->ops->iallreduce(c, buf, count, t, d, &req));
    return c->ops->wait(c, req);
}

ddp_status_t comm_reduce_scatter(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                 const comm_apply_t *a, const comm_desc_t *d)
{
    comm_req_t *req = NULL;
    DDP_TRY(c->ops->ireduce_scatter(c, buf, count, t, a, d, &req));
    return c->ops->wait(c, req);
}

ddp_status_t comm_allgather_blocks(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                   const comm_desc_t *d)
{
    comm_req_t *req = NULL;
    DDP_TRY(c->ops->iallgather(c, buf, count, t, d, &req));
    return c->ops->wait(c, req);
}

ddp_status_t comm_mem_alloc(comm_t *c, size_t bytes, void **p)
{
    if (c->ops && c->ops->mem_alloc) return c->ops->mem_alloc(c, bytes, p);
    return comm_mem_alloc_host(bytes, p);
}

ddp_status_t comm_mem_plan(comm_t *c, size_t bytes, int nbuffers)
{
    if (c->ops && c->ops->mem_plan) return c->ops->mem_plan(c, bytes, nbuffers);
    return DDP_OK;
}

ddp_status_t comm_mem_alloc_host(size_t bytes, void **p)
{
    *p = NULL;
    if (posix_memalign(p, 64, bytes ? bytes : 1) != 0) {
        *p = NULL;
        return ddp_fail(DDP_ERR_NOMEM,
                        "out of memory allocating %zu bytes for parameters, gradients or optimizer "
                        "state; reduce the model size or run fewer ranks per node",
                        bytes);
    }
    memset(*p, 0, bytes);
    return DDP_OK;
}

void comm_mem_free(comm_t *c, void *p)
{
    if (c->ops && c->ops->mem_free)
        c->ops->mem_free(c, p);
    else
        free(p);
}

/* Tracked communicators (comm_track).  comm_abort_all runs on any thread
 * (the watchdog's, or the main thread's control_abort) while the main
 * thread may be in comm_free: the lock makes an abort and a free of one
 * communicator take turns, so a free waits for an abort in progress (the
 * backend's free then sees it aborted: NCCL must not destroy an aborted
 * communicator) and no abort starts on a communicator being freed. */
#define COMM_TRACK_MAX 4
static comm_t *tracked_[COMM_TRACK_MAX];
static pthread_mutex_t tracked_lock_ = PTHREAD_MUTEX_INITIALIZER;

void comm_track(comm_t *c)
{
    pthread_mutex_lock(&tracked_lock_);
    for (int i = 0; i < COMM_TRACK_MAX; i++)
        if (!tracked_[i]) {
            tracked_[i] = c;
            break;
        }
    pthread_mutex_unlock(&tracked_lock_);
}

static void untrack_(comm_t *c)
{
    pthread_mutex_lock(&tracked_lock_);
    for (int i = 0; i < COMM_TRACK_MAX; i++)
        if (tracked_[i] == c) tracked_[i] = NULL;
    pthread_mutex_unlock(&tracked_lock_);
}

void comm_abort_all(void)
{
    pthread_mutex_lock(&tracked_lock_);
    for (int i = 0; i < COMM_TRACK_MAX; i++) {
        comm_t *c = tracked_[i];
        tracked_[i] = NULL;
        if (c && c->ops && c->ops->abort) c->ops->abort(c);
    }
    pthread_mutex_unlock(&tracked_lock_);
}

void comm_free(comm_t *c)
{
    untrack_(c);
    if (c->ops && c->ops->free) c->ops->free(c);
    memset(c, 0, sizeof *c);
}
