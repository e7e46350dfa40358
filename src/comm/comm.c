/* comm.c -- backend-independent parts of the communicator, and the
 * registry of comm backends built into this binary. */
#include "comm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "activity.h"

/* One line per backend, under the configure condition that builds it. */
static const comm_backend_t backends_[] = {
    {"mpi", comm_init_mpi},
#ifdef HAVE_NCCL
    {"nccl", comm_init_nccl},
#endif
};

int comm_backend_count(void)
{
    return (int)(sizeof backends_ / sizeof backends_[0]);
}

const comm_backend_t *comm_backend(int i)
{
    return i >= 0 && i < comm_backend_count() ? &backends_[i] : NULL;
}

const comm_backend_t *comm_find(const char *name)
{
    for (int i = 0; i < comm_backend_count(); i++)
        if (strcmp(backends_[i].name, name) == 0) return &backends_[i];
    return NULL;
}

ddp_status_t comm_attach(comm_t *c, MPI_Comm world)
{
    MPI_Comm dup;
    if (MPI_Comm_dup(world, &dup) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_dup failed");
    c->mpi = dup;
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    MPI_Comm node;
    MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    int leader = c->local_rank == 0;
    MPI_Allreduce(&leader, &c->nnodes, 1, MPI_INT, MPI_SUM, c->mpi);
    MPI_Comm_free(&node);
    return DDP_OK;
}

unsigned comm_caps(const comm_t *c)
{
    return c->ops && c->ops->caps ? c->ops->caps(c) : 0u;
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

/* Tracked communicators (comm_track); read by comm_abort_all from any
 * thread, so slots are atomic pointers. */
#define COMM_TRACK_MAX 4
static _Atomic(comm_t *) tracked_[COMM_TRACK_MAX];

void comm_track(comm_t *c)
{
    for (int i = 0; i < COMM_TRACK_MAX; i++) {
        comm_t *expect = NULL;
        if (atomic_compare_exchange_strong(&tracked_[i], &expect, c)) return;
    }
}

static void untrack_(comm_t *c)
{
    for (int i = 0; i < COMM_TRACK_MAX; i++) {
        comm_t *expect = c;
        atomic_compare_exchange_strong(&tracked_[i], &expect, NULL);
    }
}

void comm_abort_all(void)
{
    for (int i = 0; i < COMM_TRACK_MAX; i++) {
        comm_t *c = atomic_exchange(&tracked_[i], NULL);
        if (c && c->ops && c->ops->abort) c->ops->abort(c);
    }
}

void comm_free(comm_t *c)
{
    untrack_(c);
    if (c->ops && c->ops->free) c->ops->free(c);
    memset(c, 0, sizeof *c);
}
