/* comm_mpi_algo.h -- inside the MPI comm backend: the request every
 * algorithm advances, the backend's state, and the algorithm table.
 * Private to comm_mpi.c and its algorithms, one file each:
 *   comm_mpi_shm.c      shared memory (one node, buffers of comm_mem_alloc
 *                       memory): each rank sums its block straight from
 *                       every rank's buffer, in rank order; and the
 *                       hierarchical algorithm "hier" (several nodes, the
 *                       same node-shared buffers on each): summed within
 *                       the node the same way, each local rank's slices
 *                       all-reduced between the nodes by a ring of their
 *                       owners (one per node), the result shared in the
 *                       node
 *   comm_mpi_ring.c     ring: reduce-scatter then all-gather over
 *                       MPI_Isend/MPI_Irecv, in pieces
 *   comm_mpi_chunked.c  "mpi": Open MPI's own nonblocking collectives, in
 *                       chunks (for comparison)
 * An algorithm runs every collective of the gradient plane the backend
 * starts -- all-reduce, reduce-scatter, all-gather -- or says it cannot
 * (usable); comm_mpi.c chooses one per collective, the same on every rank,
 * and drives every request in flight in start order from its progress
 * engine, inside comm calls and, with --comm-thread, on the progress
 * thread too (comm_mpi_thread.h: one lock; the optimizer update never runs
 * there). */
#ifndef DDP_COMM_MPI_ALGO_H
#define DDP_COMM_MPI_ALGO_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "activity.h"
#include "comm.h"

typedef enum coll_op { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER } coll_op_t;

typedef struct mpi_algo mpi_algo_t;
typedef struct ring_run ring_run_t;

/* A collective in flight (called q in these files: c is the communicator,
 * m its mpi_impl_t). */
struct comm_req {
    struct comm_req *next, *prev; /* in-flight list, oldest first */
    const mpi_algo_t *algo;
    coll_op_t op;
    comm_desc_t desc;
    uint64_t seq;        /* collective number (comm_t.seq) */
    activity_coll_t job; /* what the watchdog knows it as (activity.h) */
    int done;
    ddp_status_t err; /* sticky failure */
    char *buf;
    size_t count, esz;
    comm_dtype_t type;
    /* the update after the sums: iallreduce_apply (whole range, or fused:
     * each owner its block, the others copy the extras), ireduce_scatter
     * with an apply (the owner's block) */
    int has_apply;
    int applied; /* fn has run (or is run block by block by the algorithm: fused) */
    comm_apply_t apply;
    void *state; /* the algorithm's, freed by its release */
};

typedef struct mpi_shm mpi_shm_t;
typedef struct mpi_ring mpi_ring_t;
typedef struct mpi_chunked mpi_chunked_t;
typedef struct mpi_thread mpi_thread_t;

typedef struct mpi_impl {
    const mpi_algo_t *forced; /* comm_mpi_set_algorithm; NULL: "auto" */
    comm_req_t *head, *tail;
    int oversubscribed; /* more ranks on this node than cores: yield while waiting */
    /* each algorithm's state for this communicator */
    mpi_shm_t *shm;
    mpi_ring_t *ring;
    mpi_chunked_t *chunked;
    uint64_t used[4]; /* collectives started per algorithm (comm_mpi.c's table order) */
    mpi_thread_t *thread; /* the progress thread (comm_mpi_thread.h); NULL: none */
} mpi_impl_t;

struct mpi_algo {
    const char *name;
    /* The algorithm's state on a new communicator (collective: every rank
     * calls it; shared memory maps its control blocks), and its end. */
    ddp_status_t (*init)(comm_t *c);
    void (*fini)(comm_t *c);
    /* Can it run q (op, buffer, the communicator's shape)?  The same answer
     * on every rank for the same collective. */
    int (*usable)(comm_t *c, const comm_req_t *q);
    /* Start q (its state in q->state) and advance it as far as it goes
     * without waiting; q->done = 1 once complete.  The fused apply of
     * iallreduce_apply is the algorithm's to claim (q->applied). */
    ddp_status_t (*start)(comm_t *c, comm_req_t *q);
    ddp_status_t (*progress)(comm_t *c, comm_req_t *q);
    /* Free q->state; cancel what is still pending (a request never waited
     * for, at the communicator's end). */
    void (*release)(comm_t *c, comm_req_t *q);
};

extern const mpi_algo_t mpi_algo_shm, mpi_algo_hier, mpi_algo_ring, mpi_algo_chunked;

/* An MPI call failed during q's collective d (number seq): DDP_ERR_COMM
 * naming both. */
ddp_status_t comm_mpi_error(int rc, const char *what, const comm_desc_t *d, uint64_t seq);
/* Drive every collective in flight (comm_mpi.c): for an algorithm that
 * must let earlier collectives finish before it can start. */
ddp_status_t comm_mpi_progress(comm_t *c);

/* Node-shared memory (comm_mpi_shm.c), behind the backend's memory ops and
 * COMM_CAP_NODE_SHARED_MEMORY. */
int mpi_shm_available(const comm_t *c);
ddp_status_t mpi_shm_plan(comm_t *c, size_t bytes, int nbuffers);
ddp_status_t mpi_shm_alloc(comm_t *c, size_t bytes, void **p);
/* 1 when p was node-shared memory (now freed), 0 when it is not ours. */
int mpi_shm_free(comm_t *c, void *p);

/* The ring (comm_mpi_ring.c) as an engine, for the ring algorithm (every
 * rank of c) and the hierarchical one (the owners of a slice, one per
 * node): a reduce-scatter and/or all-gather of count elements at buf among
 * W members of comm, this rank the me-th, its neighbours left and right
 * (ranks in comm).  A run posts at most RING_MAXDEPTH tags from tagbase on. */
#define RING_MAXDEPTH 16 /* most slices in flight (tags per run) */
typedef struct ring_geo {
    MPI_Comm comm;
    int W, me, left, right;
    char *buf;
    size_t count;
} ring_geo_t;
/* Start a run of q's elements (type, size, descriptor) over geo: op's
 * steps (an all-reduce is both halves); *out is set (free it) even on
 * failure. */
ddp_status_t ring_run_start(comm_t *c, const comm_req_t *q, const ring_geo_t *geo, coll_op_t op,
                            int tagbase, ring_run_t **out);
/* Advance without waiting; *done = 1 once this rank's part is complete. */
ddp_status_t ring_run_progress(const comm_req_t *q, ring_run_t *rq, int *done);
void ring_run_free(comm_t *c, ring_run_t *rq);

/* Ring tuning (comm_mpi_set_ring). */
ddp_status_t mpi_ring_set(comm_t *c, size_t piece_bytes, int depth);
void mpi_ring_get(const comm_t *c, size_t *piece_bytes, int *depth);

#endif
