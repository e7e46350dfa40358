/* comm.h -- the communication backend: an ops table over a communicator.
 *
 * Collectives are started asynchronously and return a handle (comm_req_t)
 * that is waited on explicitly, so the reducer can overlap them with
 * backward.  Every collective carries a descriptor saying what it is; the
 * communicator numbers them (seq), so diagnostics can tell which collective
 * each rank is in.  All ranks must start the same collectives in the same
 * order (as in MPI).  The MPI backend works on host memory; the NCCL backend
 * (GPU builds) on device memory and is bootstrapped over MPI.
 */
#ifndef DDP_COMM_H
#define DDP_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum comm_dtype {
    COMM_FLOAT,  /* float32 */
    COMM_DOUBLE, /* float64 */
    COMM_BF16,   /* bfloat16, summed in float32 and rounded */
    COMM_FP16,   /* IEEE binary16, summed in float32 and rounded */
    COMM_INT64
} comm_dtype_t;

size_t comm_dtype_size(comm_dtype_t t);

/* What a collective is, for diagnostics and the start-up table. */
typedef struct comm_desc {
    const char *what; /* "bucket", "syncbn-fwd", "syncbn-bwd", "metrics", ... */
    int index;        /* bucket number or layer index; -1 if none */
    int64_t step;     /* training step; -1 outside the loop */
} comm_desc_t;

typedef struct comm comm_t;
typedef struct comm_req comm_req_t; /* an in-flight collective (backend-defined) */

typedef struct comm_ops {
    const char *name;
    /* In-place sum all-reduce of count elements of buf. */
    ddp_status_t (*iallreduce)(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                               const comm_desc_t *d, comm_req_t **req);
    /* Drive progress; *done = 1 when req has completed (req stays valid). */
    ddp_status_t (*test)(comm_t *c, comm_req_t *req, int *done);
    /* Wait for req to complete and release it. */
    ddp_status_t (*wait)(comm_t *c, comm_req_t *req);
    ddp_status_t (*bcast)(comm_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d);
    /* recv holds size * bytes; rank r's `send` lands at recv + r * bytes. */
    ddp_status_t (*allgather)(comm_t *c, const void *send, void *recv, size_t bytes,
                              const comm_desc_t *d);
    ddp_status_t (*barrier)(comm_t *c);
    void (*free)(comm_t *c);
} comm_ops_t;

struct comm {
    const comm_ops_t *ops;
    int rank, size;              /* in this communicator */
    int local_rank, local_size;  /* on this node */
    int nnodes;
    MPI_Comm mpi;                /* duplicate of the communicator given to comm_init_* */
    uint64_t seq;                /* collectives started so far (same on every rank) */
    comm_desc_t last;            /* the most recently started collective */
    uint64_t allreduce_bytes;    /* payload bytes all-reduced so far */
    uint64_t allreduce_calls;
    void *impl;                  /* backend state */
};

/* MPI backend over (a duplicate of) `world`.  Computes rank, size, the local
 * rank (ranks sharing a node) and the number of nodes. */
ddp_status_t comm_init_mpi(comm_t *c, MPI_Comm world);
void comm_free(comm_t *c);

/* Blocking all-reduce: start + wait. */
ddp_status_t comm_allreduce(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                            const comm_desc_t *d);

/* Bookkeeping every backend calls when it starts a collective. */
void comm_note_start(comm_t *c, const comm_desc_t *d, size_t allreduce_bytes);

#endif
