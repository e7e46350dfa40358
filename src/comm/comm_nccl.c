/* comm_nccl.c -- the "nccl" comm backend (comm_nccl.h): collectives of
 * device memory on a comm stream, ordered against the compute stream of the
 * cuda backend by events; bootstrapped over MPI. */
#include "comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_cuda.h"
#include "activity.h"

struct comm_req {
    ddp_cuda_event_t *done; /* recorded on the comm stream after the collective */
    struct comm_req *next;  /* the free list */
    /* ireduce_scatter's update of this rank's block, queued on the compute
     * stream by wait (has_apply 0: none) */
    int has_apply;
    comm_apply_t apply;
    size_t first, n;
};

typedef struct nccl_impl {
    ncclComm_t nccl;
    int have_nccl;
    cudaStream_t stream;     /* the comm stream */
    cudaStream_t compute;    /* the cuda backend's compute stream */
    ddp_cuda_event_t *ready; /* recorded on the compute stream before a collective */
    void *scratch;           /* device, 8 bytes: the barrier's all-reduce */
    struct comm_req *free_reqs;
    int failed;         /* an error was seen: abort, do not destroy */
    atomic_int aborted; /* ncclCommAbort called */
} nccl_impl_t;

/* ---- errors ---------------------------------------------------------------- */

static const char *base_(const char *file)
{
    const char *s = strrchr(file, '/');
    return s ? s + 1 : file;
}

static ddp_status_t nccl_fail_(comm_t *c, const char *call, const char *file, int line,
                               ncclResult_t r)
{
    nccl_impl_t *m = c ? c->impl : NULL;
    if (m) m->failed = 1;
    const char *last = m && m->have_nccl ? ncclGetLastError(m->nccl) : ncclGetLastError(NULL);
    return ddp_fail(DDP_ERR_COMM,
                    "%s failed: %s%s%s (%s:%d); run with NCCL_DEBUG=WARN for NCCL's own report, "
                    "and check the GPUs and the network between the nodes",
                    call, ncclGetErrorString(r), last && last[0] ? "; NCCL: " : "",
                    last ? last : "", base_(file), line);
}

static ddp_status_t cuda_fail_(comm_t *c, const char *call, const char *file, int line,
                               cudaError_t e)
{
    nccl_impl_t *m = c ? c->impl : NULL;
    if (m) m->failed = 1;
    return ddp_fail(DDP_ERR_DEVICE,
                    "%s failed: %s (%s:%d); the GPU is in a bad state: check nvidia-smi and the "
                    "node's logs",
                    call, cudaGetErrorString(e), base_(file), line);
}

/* A launcher of ddp_cuda.h failed: its message names the call. */
static ddp_status_t launcher_fail_(comm_t *c, const char *what)
{
    nccl_impl_t *m = c ? c->impl : NULL;
    if (m) m->failed = 1;
    return ddp_fail(DDP_ERR_DEVICE, "%s: %s", what, ddp_cuda_last_error());
}

#define NCCL_TRY(c, call)                                                                          \
    do {                                                                                           \
        ncclResult_t nccl_r_ = (call);                                                             \
        if (nccl_r_ != ncclSuccess) return nccl_fail_((c), #call, __FILE__, __LINE__, nccl_r_);    \
    } while (0)

#define CUDA_TRY(c, call)                                                                          \
    do {                                                                                           \
        cudaError_t cuda_e_ = (call);                                                              \
        if (cuda_e_ != cudaSuccess) return cuda_fail_((c), #call, __FILE__, __LINE__, cuda_e_);    \
    } while (0)

/* An error NCCL met in the background (a peer that failed, the network). */
static ddp_status_t async_check_(comm_t *c)
{
    nccl_impl_t *m = c->impl;
    ncclResult_t a = ncclSuccess;
    NCCL_TRY(c, ncclCommGetAsyncError(m->nccl, &a));
    if (a == ncclSuccess || a == ncclInProgress) return DDP_OK;
    m->failed = 1;
    const char *last = ncclGetLastError(m->nccl);
    return ddp_fail(DDP_ERR_COMM,
                    "NCCL reported an asynchronous error during %s %d (step %lld): %s%s%s "
                    "(ncclCommGetAsyncError, %s:%d); a peer rank or the network failed: run with "
                    "NCCL_DEBUG=WARN and check the other ranks' output and the network",
                    c->last.what ? c->last.what : "a collective", c->last.index,
                    (long long)c->last.step, ncclGetErrorString(a),
                    last && last[0] ? "; NCCL: " : "", last ? last : "", base_(__FILE__), __LINE__);
}

static ncclDataType_t nccl_type_(comm_dtype_t t)
{
    switch (t) {
    case COMM_FLOAT: return ncclFloat32;
    case COMM_DOUBLE: return ncclFloat64;
    case COMM_BF16: return ncclBfloat16;
    case COMM_FP16: return ncclFloat16;
    case COMM_INT64: return ncclInt64;
    }
    return ncclFloat32;
}

/* ---- requests and ordering ---------------------------------------------- */

static ddp_status_t req_get_(comm_t *c, comm_req_t **out)
{
    nccl_impl_t *m = c->impl;
    comm_req_t *q = m->free_reqs;
    if (q) {
        m->free_reqs = q->next;
    } else {
        q = calloc(1, sizeof *q);
        if (!q) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
        if (ddp_cuda_event_create(&q->done) != 0) {
            free(q);
            return launcher_fail_(c, "creating an event of the nccl comm backend");
        }
    }
    q->next = NULL;
    q->has_apply = 0;
    *out = q;
    return DDP_OK;
}

static void req_put_(comm_t *c, comm_req_t *q)
{
    nccl_impl_t *m = c->impl;
    q->next = m->free_reqs;
    m->free_reqs = q;
}

/* The comm stream waits for the compute stream's work so far. */
static ddp_status_t after_compute_(comm_t *c)
{
    nccl_impl_t *m = c->impl;
    if (ddp_cuda_event_record(m->ready) != 0)
        return launcher_fail_(c, "recording the compute stream before a collective");
    CUDA_TRY(c, cudaStreamWaitEvent(m->stream, (cudaEvent_t)ddp_cuda_event_handle(m->ready), 0));
    return DDP_OK;
}

static ddp_status_t record_done_(comm_t *c, comm_req_t *q)
{
    nccl_impl_t *m = c->impl;
    CUDA_TRY(c, cudaEventRecord((cudaEvent_t)ddp_cuda_event_handle(q->done), m->stream));
    return DDP_OK;
}

/* The compute stream waits for q (the host does not). */
static ddp_status_t compute_after_(comm_t *c, comm_req_t *q)
{
    nccl_impl_t *m = c->impl;
    CUDA_TRY(c, cudaStreamWaitEvent(m->compute, (cudaEvent_t)ddp_cuda_event_handle(q->done), 0));
    return DDP_OK;
}

/* The host waits for q, watching for NCCL's asynchronous errors. */
static ddp_status_t host_wait_(comm_t *c, comm_req_t *q, uint64_t number)
{
    activity_block(number, NULL);
    for (;;) {
        cudaError_t e = cudaEventQuery((cudaEvent_t)ddp_cuda_event_handle(q->done));
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) return cuda_fail_(c, "cudaEventQuery", __FILE__, __LINE__, e);
        DDP_TRY(async_check_(c));
        sched_yield();
    }
    activity_unblock();
    return async_check_(c);
}

/* ---- the ops ------------------------------------------------------------- */

static unsigned nccl_caps_(const comm_t *c)
{
    return COMM_CAP_STREAM_ORDERED;
}

static ddp_status_t nccl_register_(comm_t *c, void *p, size_t bytes, ddp_mem_kind_t kind)
{
    if (kind == DDP_MEM_DEVICE) return DDP_OK;
    return ddp_fail(DDP_ERR_USAGE,
                    "the nccl comm backend moves device memory only, not a %zu-byte buffer of %s "
                    "memory; run with --device cuda (or --device cpu, which uses the mpi backend)",
                    bytes, ddp_mem_kind_name(kind));
}

static ddp_status_t nccl_iallreduce_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                     const comm_desc_t *d, comm_req_t **req)
{
    nccl_impl_t *m = c->impl;
    *req = NULL;
    comm_req_t *q;
    DDP_TRY(req_get_(c, &q));
    comm_note_start(c, d, "all-reduce", count * comm_dtype_size(t));
    ddp_status_t s = after_compute_(c);
    if (s == DDP_OK) {
        ncclResult_t r = ncclAllReduce(buf, buf, count, nccl_type_(t), ncclSum, m->nccl, m->stream);
        if (r != ncclSuccess) s = nccl_fail_(c, "ncclAllReduce", __FILE__, __LINE__, r);
    }
    if (s == DDP_OK) s = record_done_(c, q);
    if (s != DDP_OK) {
        req_put_(c, q);
        return s;
    }
    *req = q;
    return DDP_OK;
}

/* The blocks of comm_block reduced to, or sent from, their owners: one
 * ncclReduceScatter / ncclAllGather in place when the blocks are equal
 * (count a multiple of the ranks), else one ncclReduce / ncclBroadcast per
 * block, rooted at its owner, in one group (NCCL's reduce-scatter and
 * all-gather take equal blocks only). */
static ddp_status_t blocks_(comm_t *c, void *buf, size_t count, comm_dtype_t t, int reduce)
{
    nccl_impl_t *m = c->impl;
    size_t esz = comm_dtype_size(t), W = (size_t)c->size;
    char *b = buf;
    ncclDataType_t type = nccl_type_(t);
    if (count % W == 0) {
        size_t n = count / W;
        char *mine = b + (size_t)c->rank * n * esz;
        if (reduce)
            NCCL_TRY(c, ncclReduceScatter(b, mine, n, type, ncclSum, m->nccl, m->stream));
        else
            NCCL_TRY(c, ncclAllGather(mine, b, n, type, m->nccl, m->stream));
        return DDP_OK;
    }
    NCCL_TRY(c, ncclGroupStart());
    ncclResult_t r = ncclSuccess;
    for (int k = 0; k < c->size && r == ncclSuccess; k++) {
        size_t first, n;
        comm_block(count, c->size, k, &first, &n);
        char *p = b + first * esz;
        if (n == 0) continue; /* the same blocks are empty on every rank */
        r = reduce ? ncclReduce(p, p, n, type, ncclSum, k, m->nccl, m->stream)
                   : ncclBroadcast(p, p, n, type, k, m->nccl, m->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r != ncclSuccess)
        return nccl_fail_(c, reduce ? "ncclReduce" : "ncclBroadcast", __FILE__, __LINE__, r);
    if (e != ncclSuccess) return nccl_fail_(c, "ncclGroupEnd", __FILE__, __LINE__, e);
    return DDP_OK;
}

static ddp_status_t start_blocks_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                  const comm_apply_t *a, const comm_desc_t *d, int reduce,
                                  comm_req_t **req)
{
    *req = NULL;
    comm_req_t *q;
    DDP_TRY(req_get_(c, &q));
    comm_note_start(c, d, reduce ? "reduce-scatter" : "all-gather", count * comm_dtype_size(t));
    ddp_status_t s = after_compute_(c);
    if (s == DDP_OK) s = blocks_(c, buf, count, t, reduce);
    if (s == DDP_OK) s = record_done_(c, q);
    if (s != DDP_OK) {
        req_put_(c, q);
        return s;
    }
    if (a) {
        q->has_apply = 1;
        q->apply = *a;
        comm_block(count, c->size, c->rank, &q->first, &q->n);
    }
    *req = q;
    return DDP_OK;
}

static ddp_status_t nccl_ireduce_scatter_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                          const comm_apply_t *a, const comm_desc_t *d,
                                          comm_req_t **req)
{
    return start_blocks_(c, buf, count, t, a, d, 1, req);
}

static ddp_status_t nccl_iallgather_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                     const comm_desc_t *d, comm_req_t **req)
{
    return start_blocks_(c, buf, count, t, NULL, d, 0, req);
}

static ddp_status_t nccl_test_(comm_t *c, comm_req_t *req, int *done)
{
    *done = 0;
    DDP_TRY(async_check_(c));
    cudaError_t e = cudaEventQuery((cudaEvent_t)ddp_cuda_event_handle(req->done));
    if (e == cudaSuccess)
        *done = 1;
    else if (e != cudaErrorNotReady)
        return cuda_fail_(c, "cudaEventQuery", __FILE__, __LINE__, e);
    return DDP_OK;
}

static ddp_status_t nccl_wait_(comm_t *c, comm_req_t *req)
{
    if (!req) return DDP_OK;
    ddp_status_t s = compute_after_(c, req);
    if (s == DDP_OK) s = async_check_(c);
    /* the owner's update, queued on the compute stream after the sums */
    if (s == DDP_OK && req->has_apply && req->n) req->apply.fn(req->apply.arg, req->first, req->n);
    req_put_(c, req);
    return s;
}

static ddp_status_t nccl_progress_(comm_t *c)
{
    return async_check_(c);
}

static ddp_status_t nccl_bcast_(comm_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d)
{
    nccl_impl_t *m = c->impl;
    comm_req_t *q;
    DDP_TRY(req_get_(c, &q));
    comm_note_start(c, d, "broadcast", bytes);
    ddp_status_t s = after_compute_(c);
    if (s == DDP_OK) {
        ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclInt8, root, m->nccl, m->stream);
        if (r != ncclSuccess) s = nccl_fail_(c, "ncclBroadcast", __FILE__, __LINE__, r);
    }
    if (s == DDP_OK) s = record_done_(c, q);
    if (s == DDP_OK) s = compute_after_(c, q);
    req_put_(c, q);
    return s == DDP_OK ? async_check_(c) : s;
}

static ddp_status_t nccl_allgather_(comm_t *c, const void *send, void *recv, size_t bytes,
                                    const comm_desc_t *d)
{
    nccl_impl_t *m = c->impl;
    comm_req_t *q;
    DDP_TRY(req_get_(c, &q));
    comm_note_start(c, d, "all-gather", bytes);
    ddp_status_t s = after_compute_(c);
    if (s == DDP_OK) {
        ncclResult_t r = ncclAllGather(send, recv, bytes, ncclInt8, m->nccl, m->stream);
        if (r != ncclSuccess) s = nccl_fail_(c, "ncclAllGather", __FILE__, __LINE__, r);
    }
    if (s == DDP_OK) s = record_done_(c, q);
    if (s == DDP_OK) s = compute_after_(c, q);
    req_put_(c, q);
    return s == DDP_OK ? async_check_(c) : s;
}

/* Every rank has reached it, and the work queued before it is done. */
static ddp_status_t nccl_barrier_(comm_t *c)
{
    nccl_impl_t *m = c->impl;
    comm_req_t *q;
    DDP_TRY(req_get_(c, &q));
    comm_desc_t d = {"barrier", -1, -1};
    uint64_t number = comm_note_start(c, &d, "barrier", 0);
    ddp_status_t s = after_compute_(c);
    if (s == DDP_OK) {
        ncclResult_t r =
            ncclAllReduce(m->scratch, m->scratch, 1, ncclInt64, ncclSum, m->nccl, m->stream);
        if (r != ncclSuccess) s = nccl_fail_(c, "ncclAllReduce", __FILE__, __LINE__, r);
    }
    if (s == DDP_OK) s = record_done_(c, q);
    if (s == DDP_OK) s = host_wait_(c, q, number);
    req_put_(c, q);
    return s;
}

static void nccl_abort_(comm_t *c)
{
    nccl_impl_t *m = c->impl;
    if (!m || !m->have_nccl || atomic_exchange(&m->aborted, 1)) return;
    ncclCommAbort(m->nccl); /* the job is ending: nothing to report */
}

static void nccl_free_(comm_t *c)
{
    nccl_impl_t *m = c->impl;
    if (!m) return;
    if (m->have_nccl && !atomic_load(&m->aborted)) {
        /* the comm stream's work first, watching for errors: a failed peer
         * would leave ncclCommDestroy waiting forever */
        int ok = !m->failed;
        while (ok) {
            cudaError_t e = cudaStreamQuery(m->stream);
            if (e == cudaSuccess) break;
            ok = e == cudaErrorNotReady && async_check_(c) == DDP_OK;
            if (ok) sched_yield();
        }
        if (ok)
            ncclCommDestroy(m->nccl);
        else
            nccl_abort_(c);
    }
    while (m->free_reqs) {
        comm_req_t *q = m->free_reqs;
        m->free_reqs = q->next;
        ddp_cuda_event_destroy(q->done);
        free(q);
    }
    if (m->ready) ddp_cuda_event_destroy(m->ready);
    if (m->scratch) ddp_cuda_free(m->scratch);
    if (m->stream) cudaStreamDestroy(m->stream);
    free(m);
    c->impl = NULL;
    comm_detach(c);
}

const comm_ops_t comm_nccl_ops = {
    .name = "nccl",
    .caps = nccl_caps_,
    .mem_register = nccl_register_,
    .iallreduce = nccl_iallreduce_,
    .ireduce_scatter = nccl_ireduce_scatter_,
    .iallgather = nccl_iallgather_,
    .test = nccl_test_,
    .wait = nccl_wait_,
    .progress = nccl_progress_,
    .bcast = nccl_bcast_,
    .allgather = nccl_allgather_,
    .barrier = nccl_barrier_,
    .free = nccl_free_,
    .abort = nccl_abort_,
};

/* ---- bootstrap ----------------------------------------------------------- */

/* This rank's part before ncclCommInitRank: the comm stream, the events,
 * the barrier's scratch word. */
static ddp_status_t local_setup_(comm_t *c)
{
    nccl_impl_t *m = c->impl;
    m->compute = (cudaStream_t)ddp_cuda_compute_stream();
    CUDA_TRY(c, cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    if (ddp_cuda_event_create(&m->ready) != 0)
        return launcher_fail_(c, "creating an event of the nccl comm backend");
    if (ddp_cuda_malloc(&m->scratch, sizeof(int64_t)) != 0)
        return launcher_fail_(c, "allocating the nccl comm backend's scratch memory");
    return DDP_OK;
}

/* The id from rank 0, with rank 0's verdict: the others must not wait in
 * ncclCommInitRank for a rank 0 that could not make one. */
typedef struct nccl_boot {
    int ok;
    ncclUniqueId id;
} nccl_boot_t;

static ddp_status_t bootstrap_(comm_t *c)
{
    nccl_impl_t *m = c->impl;
    /* every rank's local part, agreed, before the collective init */
    ddp_status_t s = local_setup_(c);
    int ok = s == DDP_OK, all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->mpi) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Allreduce failed starting the nccl comm backend");
    if (s != DDP_OK) return s;
    if (!all_ok)
        return ddp_fail(DDP_ERR_DEVICE, "another rank could not prepare its GPU for NCCL (see "
                                        "its message)");
    nccl_boot_t boot;
    memset(&boot, 0, sizeof boot);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&boot.id);
        boot.ok = r == ncclSuccess;
        if (!boot.ok) s = nccl_fail_(c, "ncclGetUniqueId", __FILE__, __LINE__, r);
    }
    if (MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, c->mpi) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Bcast of the NCCL unique id failed");
    if (s != DDP_OK) return s;
    if (!boot.ok)
        return ddp_fail(DDP_ERR_COMM, "rank 0 could not create the NCCL unique id (see its "
                                      "message)");
    NCCL_TRY(c, ncclCommInitRank(&m->nccl, c->size, boot.id, c->rank));
    m->have_nccl = 1;
    return DDP_OK;
}

ddp_status_t comm_init_nccl(comm_t *c, MPI_Comm world)
{
    memset(c, 0, sizeof *c);
    c->mpi = MPI_COMM_NULL;
    if (ddp_cuda_bound_device() < 0)
        return ddp_fail(DDP_ERR_INTERNAL, "the nccl comm backend needs the cuda compute backend "
                                          "initialised first (its GPU bound)");
    ddp_status_t s = comm_attach(c, world);
    if (s != DDP_OK) return s;
    nccl_impl_t *m = calloc(1, sizeof *m);
    if (!m) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the NCCL communicator");
    c->impl = m;
    c->ops = &comm_nccl_ops;
    s = bootstrap_(c);
    if (s != DDP_OK) {
        nccl_free_(c);
        c->ops = NULL;
    }
    return s;
}

const comm_backend_t comm_nccl_backend = {
    .name = "nccl",
    .moves = COMM_MOVES(DDP_MEM_DEVICE),
    .ops = &comm_nccl_ops,
    .init = comm_init_nccl,
};
