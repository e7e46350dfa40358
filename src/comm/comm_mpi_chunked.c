/* comm_mpi_chunked.c -- the "mpi" algorithm of the MPI comm backend
 * (comm_mpi_algo.h): Open MPI's own nonblocking collectives --
 * MPI_Iallreduce in chunks of at most CHUNK_BYTES (Open MPI 4.1's default
 * all-reduce collapses above about 32 MB: bench/README.md),
 * MPI_Ireduce_scatter and MPI_Iallgatherv over comm_block's blocks --
 * advanced by MPI_Test from the progress engine.  Identical results on
 * every rank in practice, but not by construction (MPI chooses the order
 * of the sums); for comparison with ddptrain's own algorithms. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm_mpi_algo.h"
#include "sum_kernels.h"

#define CHUNK_BYTES ((size_t)8 << 20)

struct mpi_chunked {
    MPI_Datatype half_dt; /* 2 contiguous bytes: bf16 and fp16 */
    MPI_Op op_bf16, op_fp16;
};

typedef struct chunked_req {
    int n;
    MPI_Request *req;       /* [n] */
    int *counts, *displs;   /* [W] reduce-scatter and all-gather: the blocks, in elements */
} chunked_req_t;

static void op_sum_bf16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    sum_accumulate_bf16(inout, in, (size_t)*len);
}

static void op_sum_fp16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    sum_accumulate_fp16(inout, in, (size_t)*len);
}

static void type_op_(const mpi_chunked_t *g, comm_dtype_t t, MPI_Datatype *dt, MPI_Op *op)
{
    *op = MPI_SUM;
    switch (t) {
    case COMM_FLOAT: *dt = MPI_FLOAT; break;
    case COMM_DOUBLE: *dt = MPI_DOUBLE; break;
    case COMM_INT64: *dt = MPI_INT64_T; break;
    case COMM_BF16: *dt = g->half_dt, *op = g->op_bf16; break;
    case COMM_FP16: *dt = g->half_dt, *op = g->op_fp16; break;
    }
}

/* The blocks of comm_block as MPI counts and displacements (elements). */
static ddp_status_t blocks_(comm_t *c, comm_req_t *q, chunked_req_t *k)
{
    k->counts = malloc((size_t)c->size * sizeof *k->counts);
    k->displs = malloc((size_t)c->size * sizeof *k->displs);
    if (!k->counts || !k->displs)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
    for (int r = 0; r < c->size; r++) {
        size_t first, n;
        comm_block(q->count, c->size, r, &first, &n);
        if (first + n > (size_t)INT_MAX)
            return ddp_fail(DDP_ERR_USAGE,
                            "%s %d: %zu elements are more than the \"mpi\" algorithm takes in "
                            "one reduce-scatter or all-gather; use the default algorithm",
                            q->desc.what, q->desc.index, q->count);
        k->counts[r] = (int)n;
        k->displs[r] = (int)first;
    }
    return DDP_OK;
}

static ddp_status_t chunked_start_(comm_t *c, comm_req_t *q)
{
    const mpi_chunked_t *g = ((mpi_impl_t *)c->impl)->chunked;
    chunked_req_t *k = calloc(1, sizeof *k);
    if (!k) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
    q->state = k;
    MPI_Datatype dt = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    type_op_(g, q->type, &dt, &op);
    if (q->op != COLL_ALLREDUCE) {
        k->req = malloc(sizeof *k->req);
        if (!k->req) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
        DDP_TRY(blocks_(c, q, k));
        int rc = q->op == COLL_REDUCE_SCATTER
                     ? MPI_Ireduce_scatter(MPI_IN_PLACE, q->buf, k->counts, dt, op, c->mpi, k->req)
                     : MPI_Iallgatherv(MPI_IN_PLACE, 0, dt, q->buf, k->counts, k->displs, dt,
                                       c->mpi, k->req);
        if (rc != MPI_SUCCESS)
            return comm_mpi_error(rc,
                                  q->op == COLL_REDUCE_SCATTER ? "MPI_Ireduce_scatter"
                                                               : "MPI_Iallgatherv",
                                  &q->desc, q->seq);
        k->n = 1;
        return DDP_OK;
    }
    size_t chunk_len = CHUNK_BYTES / q->esz;
    int n = q->count == 0 ? 0 : (int)((q->count + chunk_len - 1) / chunk_len);
    k->req = malloc((size_t)(n ? n : 1) * sizeof(MPI_Request));
    if (!k->req) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * chunk_len;
        size_t len = q->count - off < chunk_len ? q->count - off : chunk_len;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, q->buf + off * q->esz, (int)len, dt, op, c->mpi,
                                &k->req[i]);
        if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Iallreduce", &q->desc, q->seq);
        k->n = i + 1;
    }
    if (n == 0) q->done = 1;
    return DDP_OK;
}

static ddp_status_t chunked_progress_(comm_t *c, comm_req_t *q)
{
    chunked_req_t *k = q->state;
    int flag = 1;
    int rc = MPI_Testall(k->n, k->req, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Testall", &q->desc, q->seq);
    if (!flag) return DDP_OK;
    /* in place, MPI_Reduce_scatter leaves this rank's block at the start of
     * the buffer: move it to where comm_block puts it */
    if (q->op == COLL_REDUCE_SCATTER && k->displs[c->rank])
        memmove(q->buf + (size_t)k->displs[c->rank] * q->esz, q->buf,
                (size_t)k->counts[c->rank] * q->esz);
    q->done = 1;
    return DDP_OK;
}

static void chunked_release_(comm_t *c, comm_req_t *q)
{
    chunked_req_t *k = q->state;
    if (!k) return;
    for (int i = 0; i < k->n; i++)
        if (k->req[i] != MPI_REQUEST_NULL) MPI_Request_free(&k->req[i]);
    free(k->req);
    free(k->counts);
    free(k->displs);
    free(k);
    q->state = NULL;
}

static int chunked_usable_(comm_t *c, const comm_req_t *q)
{
    return 1;
}

static ddp_status_t chunked_init_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    mpi_chunked_t *g = calloc(1, sizeof *g);
    if (!g) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    MPI_Type_contiguous(2, MPI_BYTE, &g->half_dt);
    MPI_Type_commit(&g->half_dt);
    MPI_Op_create(op_sum_bf16_, 1, &g->op_bf16);
    MPI_Op_create(op_sum_fp16_, 1, &g->op_fp16);
    m->chunked = g;
    return DDP_OK;
}

static void chunked_fini_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    mpi_chunked_t *g = m->chunked;
    if (!g) return;
    MPI_Op_free(&g->op_bf16);
    MPI_Op_free(&g->op_fp16);
    MPI_Type_free(&g->half_dt);
    free(g);
    m->chunked = NULL;
}

const mpi_algo_t mpi_algo_chunked = {
    .name = "mpi",
    .init = chunked_init_,
    .fini = chunked_fini_,
    .usable = chunked_usable_,
    .start = chunked_start_,
    .progress = chunked_progress_,
    .release = chunked_release_,
};
