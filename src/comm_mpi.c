/* comm_mpi.c -- the MPI comm backend (host memory).
 *
 * All-reduces are MPI_Iallreduce calls progressed by comm_test/comm_wait.
 * Large buffers are cut into pieces of at most COMM_MPI_CHUNK bytes:
 * Open MPI 4.1's default all-reduce collapses above about 32 MB on our
 * machines (DESIGN.md), so no single MPI call ever gets that large.
 * 16-bit payloads are summed by user-defined operators in float32.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "half.h"

#define COMM_MPI_CHUNK ((size_t)8 << 20)

struct comm_req {
    int n;
    MPI_Request r[];
};

typedef struct mpi_impl {
    MPI_Datatype half_t; /* 2 contiguous bytes */
    MPI_Op op_bf16, op_fp16;
} mpi_impl_t;

static void sum_bf16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ddp_f32_to_bf16(ddp_bf16_to_f32(a[i]) + ddp_bf16_to_f32(b[i]));
}

static void sum_fp16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ddp_f32_to_f16(ddp_f16_to_f32(a[i]) + ddp_f16_to_f32(b[i]));
}

static ddp_status_t mpi_err_(int rc, const char *what, const comm_desc_t *d)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ddp_fail(DDP_ERR_COMM, "MPI %s failed during %s %d: %s", what,
                    d && d->what ? d->what : "collective", d ? d->index : -1, msg);
}

static void mpi_type_op_(comm_t *c, comm_dtype_t t, MPI_Datatype *dt, MPI_Op *op)
{
    mpi_impl_t *m = c->impl;
    *op = MPI_SUM;
    switch (t) {
    case COMM_FLOAT: *dt = MPI_FLOAT; break;
    case COMM_DOUBLE: *dt = MPI_DOUBLE; break;
    case COMM_INT64: *dt = MPI_INT64_T; break;
    case COMM_BF16: *dt = m->half_t, *op = m->op_bf16; break;
    case COMM_FP16: *dt = m->half_t, *op = m->op_fp16; break;
    }
}

static ddp_status_t mpi_iallreduce_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                    const comm_desc_t *d, comm_req_t **req)
{
    size_t esz = comm_dtype_size(t);
    size_t per = COMM_MPI_CHUNK / esz;
    int n = count == 0 ? 0 : (int)((count + per - 1) / per);
    comm_req_t *q = malloc(sizeof *q + (size_t)(n ? n : 1) * sizeof(MPI_Request));
    if (!q) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    MPI_Datatype dt = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    mpi_type_op_(c, t, &dt, &op);
    comm_note_start(c, d, count * esz);
    q->n = n;
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * per, len = count - off < per ? count - off : per;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * esz, (int)len, dt, op, c->mpi,
                                &q->r[i]);
        if (rc != MPI_SUCCESS) {
            free(q);
            return mpi_err_(rc, "MPI_Iallreduce", d);
        }
    }
    *req = q;
    return DDP_OK;
}

static ddp_status_t mpi_test_(comm_t *c, comm_req_t *req, int *done)
{
    int flag = 1;
    if (req->n > 0) {
        int rc = MPI_Testall(req->n, req->r, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Testall", &c->last);
    }
    *done = flag;
    return DDP_OK;
}

static ddp_status_t mpi_wait_(comm_t *c, comm_req_t *req)
{
    int rc = req->n > 0 ? MPI_Waitall(req->n, req->r, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
    free(req);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Waitall", &c->last);
    return DDP_OK;
}

static ddp_status_t mpi_bcast_(comm_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d)
{
    comm_note_start(c, d, 0);
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += COMM_MPI_CHUNK) {
        size_t len = bytes - off < COMM_MPI_CHUNK ? bytes - off : COMM_MPI_CHUNK;
        int rc = MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, c->mpi);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Bcast", d);
        if (bytes == 0) break;
    }
    return DDP_OK;
}

static ddp_status_t mpi_allgather_(comm_t *c, const void *send, void *recv, size_t bytes,
                                   const comm_desc_t *d)
{
    comm_note_start(c, d, 0);
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Allgather", d);
    return DDP_OK;
}

static ddp_status_t mpi_barrier_(comm_t *c)
{
    comm_desc_t d = {"barrier", -1, -1};
    comm_note_start(c, &d, 0);
    int rc = MPI_Barrier(c->mpi);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Barrier", &d);
    return DDP_OK;
}

static void mpi_free_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    if (m) {
        MPI_Op_free(&m->op_bf16);
        MPI_Op_free(&m->op_fp16);
        MPI_Type_free(&m->half_t);
        free(m);
    }
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
}

static const comm_ops_t comm_mpi_ops = {
    .name = "mpi",
    .iallreduce = mpi_iallreduce_,
    .test = mpi_test_,
    .wait = mpi_wait_,
    .bcast = mpi_bcast_,
    .allgather = mpi_allgather_,
    .barrier = mpi_barrier_,
    .free = mpi_free_,
};

ddp_status_t comm_init_mpi(comm_t *c, MPI_Comm world)
{
    memset(c, 0, sizeof *c);
    c->mpi = MPI_COMM_NULL;
    if (MPI_Comm_dup(world, &c->mpi) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_dup failed");
    /* errors come back as codes so they are reported with context */
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

    mpi_impl_t *m = calloc(1, sizeof *m);
    if (!m) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    MPI_Type_contiguous(2, MPI_BYTE, &m->half_t);
    MPI_Type_commit(&m->half_t);
    MPI_Op_create(sum_bf16_, 1, &m->op_bf16);
    MPI_Op_create(sum_fp16_, 1, &m->op_fp16);
    c->impl = m;
    c->ops = &comm_mpi_ops;
    return DDP_OK;
}
