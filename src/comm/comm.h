/* comm.h -- the communication backend: an ops table over a communicator.
 *
 * Collectives are started asynchronously and return a handle (comm_req_t)
 * that is waited on explicitly, so the reducer can overlap them with
 * backward.  Every collective carries a descriptor saying what it is; the
 * communicator numbers them (seq), so diagnostics can tell which collective
 * each rank is in.  All ranks must start the same collectives in the same
 * order (as in MPI).  The MPI backend works on host memory; the NCCL backend
 * (GPU builds) on device memory and is bootstrapped over MPI.
 *
 * Memory: the comm backend works on buffers it is given and never hands
 * out the memory a trainer computes on, except as an explicit capability
 * (comm_caps).  Every buffer the gradient plane moves (the gradient buffer,
 * its 16-bit copy, BatchNorm statistics) is registered first with its kind
 * (comm_register): a backend refuses a kind it cannot move, at start-up,
 * with a message, instead of failing in the first step.
 *
 * What a trainer does with the MPI backend (CPU ranks):
 *   - MPI_Init_thread with at least COMM_MPI_THREAD_LEVEL, and every comm
 *     call from that thread (comm_init_mpi fails if MPI provides less);
 *   - with COMM_CAP_NODE_SHARED_MEMORY (more than one rank, room in
 *     /dev/shm; each node's ranks share theirs) allocate the gradient
 *     buffer with comm_mem_alloc (collective) and all-reduce buckets as
 *     slices of it, at the same offset on every rank: they are then summed
 *     in place through shared memory, about twice as fast as message
 *     passing, and across nodes each node's sums go between the nodes once
 *     (the hierarchical algorithm); otherwise take the
 *     buffer from the compute backend and register it: the ring is used;
 *   - start a bucket's iallreduce as soon as its gradients are written,
 *     call ops->progress between layers during backward, wait for every
 *     bucket before the optimizer.  Without a progress thread
 *     (set_progress_thread) an in-flight all-reduce advances only inside
 *     comm calls (progress, test, wait and the other collectives), and each
 *     progress call does all the work that is ready without waiting for
 *     another rank; with one (MPI_THREAD_MULTIPLE), collectives that move
 *     messages also advance while the caller computes;
 *   - a blocking all-reduce (comm_allreduce, e.g. SyncBatchNorm) may run
 *     while buckets are in flight; it drives them too.
 * After an error the communicator is unusable: report and abort the job.
 *
 * Results are bit-identical on every rank by construction: every element's
 * sum is computed once, by one rank, in a fixed order, and then copied to
 * the others (see comm_mpi.c).
 */
/* (iallreduce_apply: the same, followed by the optimizer update of the
 * bucket; on shared memory each rank updates the block it summed and copies
 * the updated parameters and optimizer state of the other blocks, so every
 * element is updated once on the node instead of once per rank.) */
#ifndef DDP_COMM_H
#define DDP_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"
#include "memkind.h"
#include "status.h"

typedef enum comm_dtype {
    COMM_FLOAT,  /* float32 */
    COMM_DOUBLE, /* float64 */
    COMM_BF16,   /* bfloat16, summed in float32 and rounded */
    COMM_FP16,   /* IEEE binary16, summed in float32 and rounded */
    COMM_INT64
} comm_dtype_t;

size_t comm_dtype_size(comm_dtype_t t);

typedef struct comm comm_t;
typedef struct comm_req comm_req_t; /* an in-flight collective (backend-defined) */

/* An update applied to an all-reduced float buffer (see iallreduce_apply):
 * the optimizer step of a gradient bucket. */
#define COMM_APPLY_MAX 3
typedef struct comm_apply {
    /* Update elements [first, first + count) of the collective: reads the
     * sums there, writes the same range of every extra buffer. */
    void (*fn)(void *arg, size_t first, size_t count);
    void *arg;
    int nextra;                   /* 1 .. COMM_APPLY_MAX */
    float *extra[COMM_APPLY_MAX]; /* element e of the collective is extra[i][e] */
} comm_apply_t;

/* Capabilities of a communicator (comm_caps), a bit each.
 * NODE_SHARED_MEMORY: mem_alloc hands out node-shared host memory, which
 * iallreduce sums in place and iallreduce_apply updates once per node. */
#define COMM_CAP_NODE_SHARED_MEMORY 1u
/* STREAM_ORDERED: collectives are ordered after the compute backend's work
 * queued before them (the NCCL backend waits on the compute stream on the
 * device), and wait() orders the compute work queued after it behind the
 * collective: the caller must not wait on the host for a compute event
 * before starting one (reducer.c, model.c), and the host may read the
 * result only through the compute backend (download waits). */
#define COMM_CAP_STREAM_ORDERED 2u

typedef struct comm_ops {
    const char *name;
    /* COMM_CAP_* bits that hold for this communicator now (the same on every
     * rank).  NULL: none. */
    unsigned (*caps)(const comm_t *c);
    /* The gradient plane will move `bytes` at p, memory of `kind`: refuse
     * (DDP_ERR_USAGE, saying why) a kind this backend cannot move.  Not
     * collective.  NULL: host memory only. */
    ddp_status_t (*mem_register)(comm_t *c, void *p, size_t bytes, ddp_mem_kind_t kind);
    void (*mem_deregister)(comm_t *c, void *p); /* NULL: nothing to undo */
    /* In-place sum all-reduce of count elements of buf. */
    ddp_status_t (*iallreduce)(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                               const comm_desc_t *d, comm_req_t **req);
    /* Sum all-reduce of a float buffer followed by an update: when req
     * completes, every rank holds in each extra buffer the values fn computes
     * from the sums.  A backend may split the work: the rank that sums a block
     * applies fn to that block only and the other ranks copy the extra
     * buffers' block from it, so each element is updated once, by one rank
     * (bit-identical everywhere, one update pass in total instead of one per
     * rank).  Afterwards the reduced buffer holds the sums only in the blocks
     * this rank summed: do not read it.  NULL in a backend without it: use
     * iallreduce, then fn over the whole range on every rank. */
    ddp_status_t (*iallreduce_apply)(comm_t *c, float *buf, size_t count, const comm_apply_t *a,
                                     const comm_desc_t *d, comm_req_t **req);
    /* Reduce-scatter, in place, the first half of ZeRO's exchange: count
     * elements of buf on every rank; when req completes, this rank's block
     * of buf (comm_block) holds the sum over the ranks of that block, the
     * rest of buf is scratch.  With a != NULL the owner then applies
     * a->fn(a->arg, first, n) to its block [first, first + n) -- the
     * optimizer step of the shard it owns (a->extra is not used).  Each
     * block's sum is computed by its owner in an order fixed by the
     * algorithm and the number of ranks. */
    ddp_status_t (*ireduce_scatter)(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                    const comm_apply_t *a, const comm_desc_t *d, comm_req_t **req);
    /* All-gather, in place, the second half: every rank's block of buf
     * (comm_block) goes to every rank; when req completes, buf holds every
     * block, bit for bit as its owner had it. */
    ddp_status_t (*iallgather)(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                               const comm_desc_t *d, comm_req_t **req);
    /* Drive progress of every in-flight collective; *done = 1 when req has
     * completed (req stays valid until wait). */
    ddp_status_t (*test)(comm_t *c, comm_req_t *req, int *done);
    /* Wait for req to complete and release it (drives every in-flight
     * collective while waiting). */
    ddp_status_t (*wait)(comm_t *c, comm_req_t *req);
    /* Drive every in-flight collective as far as it goes without waiting for
     * another rank, then return; cheap when nothing is in flight.  Call it
     * between compute pieces (layers) while all-reduces are in flight. */
    ddp_status_t (*progress)(comm_t *c);
    ddp_status_t (*bcast)(comm_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d);
    /* Blocking, of one record per rank: recv holds size * bytes; rank r's
     * `send` lands at recv + r * bytes. */
    ddp_status_t (*allgather)(comm_t *c, const void *send, void *recv, size_t bytes,
                              const comm_desc_t *d);
    ddp_status_t (*barrier)(comm_t *c);
    /* COMM_CAP_NODE_SHARED_MEMORY: memory for a buffer that is all-reduced
     * in place: the gradient buffer (each bucket a slice of it), and the
     * parameters and optimizer state the fused update writes.  Collective:
     * every rank calls it in the same order with the same size.
     * Zero-filled, 64-byte aligned host memory.  Release it with mem_free
     * (collective too) before comm_free.  NULL in a backend without the
     * capability; use comm_mem_alloc / comm_mem_free. */
    ddp_status_t (*mem_alloc)(comm_t *c, size_t bytes, void **p);
    /* Before the first mem_alloc: the run will take `bytes` per rank in
     * `nbuffers` allocations.  A backend whose special memory is limited
     * (node-shared memory) checks now and, where it will not fit, says so
     * and hands out plain memory instead, alike on every rank.  Collective.
     * NULL: nothing to check. */
    ddp_status_t (*mem_plan)(comm_t *c, size_t bytes, int nbuffers);
    void (*mem_free)(comm_t *c, void *p);
    void (*free)(comm_t *c);
    /* The job is ending on a fatal error: cancel what is in flight without
     * waiting for other ranks (ncclCommAbort), so the process can exit.
     * May be called from another thread (the watchdog).  NULL: nothing to
     * do. */
    void (*abort)(comm_t *c);
    /* Force the all-reduce algorithm by name (--allreduce; "auto": the
     * backend's own choice per collective), alike on every rank.  NULL: the
     * backend chooses and takes no name. */
    ddp_status_t (*set_algorithm)(comm_t *c, const char *name);
    /* The algorithms that ran this communicator's gradient-plane
     * collectives so far, with their counts ("hier 40, ring 12"), into buf
     * (always terminated).  NULL: the backend's name says it. */
    void (*algorithms)(const comm_t *c, char *buf, size_t len);
    /* Measure the link between the nodes: the leaders of the nodes (local
     * rank 0) exchange `bytes` with both neighbours of a ring of the nodes,
     * a few times; *gbps = the slowest leader's bytes per second each way,
     * in GB/s, the same on every rank (0 on one node).  Collective.  NULL:
     * not measured (comm_probe_link gives 0). */
    ddp_status_t (*probe_link)(comm_t *c, size_t bytes, double *gbps);
    /* Progress in the background (--comm-thread): on = 1 starts a thread of
     * the backend's own that drives the collectives in flight while the
     * caller computes, 0 stops it; *running says whether one runs now.
     * Where the backend cannot (MPI below MPI_THREAD_MULTIPLE) it returns
     * DDP_OK with *running = 0 and `why` says why in one line.  Not
     * collective; before the first collective.  NULL: the backend needs no
     * thread (NCCL progresses on the device). */
    ddp_status_t (*set_progress_thread)(comm_t *c, int on, int *running, char *why,
                                        size_t whylen);
} comm_ops_t;

struct comm {
    const comm_ops_t *ops;
    int rank, size;             /* in this communicator */
    int local_rank, local_size; /* on this node */
    int host_size;              /* ranks on this machine: local_size, except under
                                 * DDP_SIM_NODES (several simulated nodes on it) */
    int nnodes;
    int node;                 /* this rank's node, 0 .. nnodes-1 (in the order of their first ranks) */
    MPI_Comm mpi;             /* duplicate of the communicator given to comm_init_* */
    MPI_Comm node_comm;       /* the ranks of this node, by rank (local_rank in it) */
    MPI_Comm cross_comm;      /* the ranks of this local_rank on every node that has one, by
                               * node; for local rank 0, the node leaders */
    uint64_t seq;             /* collectives started so far (same on every rank) */
    comm_desc_t last;         /* the most recently started collective */
    uint64_t allreduce_bytes; /* payload bytes all-reduced so far */
    uint64_t allreduce_calls;
    void *impl; /* backend state */
};

/* For backends' init: c->mpi = a duplicate of `world` (errors returned as
 * codes, so they are reported with context), and c's rank and size in it,
 * its local rank and size among the ranks sharing its node, the number of
 * nodes and this rank's node, and the per-node and cross-node
 * communicators (comm_free frees them).  Collective over world.
 * DDP_ERR_COMM when a communicator cannot be made (c->mpi stays as it
 * was). */
ddp_status_t comm_attach(comm_t *c, MPI_Comm world);
/* The frees of comm_attach (backends' free calls it). */
void comm_detach(comm_t *c);

/* The block of `count` elements that rank `rank` of `size` owns under
 * ireduce_scatter and iallgather: [*first, *first + *n); lengths differ by
 * at most one element, the first count % size blocks are the longer ones. */
void comm_block(size_t count, int size, int rank, size_t *first, size_t *n);

/* A comm backend: its name (--comm NAME), the kinds of memory its gradient
 * plane moves (COMM_MOVES bits), its ops table and its init, which sets
 * c->ops to that table.  init is collective over `world` (the control
 * plane's communicator). */
#define COMM_MOVES(kind) (1u << (kind))
typedef struct comm_backend {
    const char *name;
    unsigned moves;
    const comm_ops_t *ops;
    ddp_status_t (*init)(comm_t *c, MPI_Comm world);
} comm_backend_t;

/* The registry (comm.c): the backends of this binary, "mpi" first, then
 * what configure built in; `ddptrain --version` lists them.  A program may
 * register another before it trains (a test program, the emulated "nccl"),
 * replacing an entry of the same name or adding one.  A backend whose table
 * lacks a required op (every op but the optional ones, marked "NULL: ..."
 * above) is refused with DDP_ERR_INTERNAL naming it. */
ddp_status_t comm_register_backend(const comm_backend_t *b);
/* The builtins' entries, each defined in its backend's file (comm_mpi.c;
 * comm_nccl.c in GPU builds and in the emulation). */
extern const comm_backend_t comm_mpi_backend;
extern const comm_backend_t comm_nccl_backend;
int comm_backend_count(void);
/* 0 <= i < comm_backend_count() */
const comm_backend_t *comm_backend(int i);
/* NULL when none is registered under `name` */
const comm_backend_t *comm_find(const char *name);
/* --comm: the backend named `name`, or for "auto" the first registered one
 * that moves `kind` (the compute backend's memory, compute_name).  A name
 * with no backend, or a backend that cannot move that kind, is
 * DDP_ERR_USAGE saying what to use instead.  Not collective. */
ddp_status_t comm_pick(const char *name, ddp_mem_kind_t kind, const char *compute_name,
                       const comm_backend_t **out);

/* See comm_ops_t.caps / mem_register / mem_deregister. */
unsigned comm_caps(const comm_t *c);
/* ops->algorithms, or the backend's name. */
void comm_algorithms(const comm_t *c, char *buf, size_t len);
/* ops->probe_link, or 0 (not measured). */
ddp_status_t comm_probe_link(comm_t *c, size_t bytes, double *gbps);
ddp_status_t comm_register(comm_t *c, void *p, size_t bytes, ddp_mem_kind_t kind);
void comm_deregister(comm_t *c, void *p);

void comm_free(comm_t *c);
/* Communicators to abort (ops->abort) when the job ends on a fatal error:
 * the trainer tracks its gradient plane after init; comm_free forgets it.
 * comm_abort_all runs from control_abort and the watchdog before
 * MPI_Abort, on either thread; an abort and comm_free of one communicator
 * never overlap (comm_free waits for an abort in progress, and once it has
 * begun no abort reaches the communicator). */
void comm_track(comm_t *c);
void comm_abort_all(void);

/* Host memory for the gradient buffer (see comm_ops_t.mem_alloc): the
 * backend's when it has COMM_CAP_NODE_SHARED_MEMORY, plain zero-filled
 * 64-byte-aligned memory otherwise (for tests and benchmarks: the trainer
 * asks only with the capability and host compute memory, and takes every
 * other buffer from the compute backend).  Collective. */
ddp_status_t comm_mem_alloc(comm_t *c, size_t bytes, void **p);
void comm_mem_free(comm_t *c, void *p);
/* See comm_ops_t.mem_plan.  Collective. */
ddp_status_t comm_mem_plan(comm_t *c, size_t bytes, int nbuffers);
/* The plain memory above (freed with free()), for backends to fall back on. */
ddp_status_t comm_mem_alloc_host(size_t bytes, void **p);

/* Blocking all-reduce: start + wait.  Drives the in-flight ones too. */
ddp_status_t comm_allreduce(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                            const comm_desc_t *d);
/* Blocking reduce-scatter and all-gather (start + wait; see the ops). */
ddp_status_t comm_reduce_scatter(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                 const comm_apply_t *a, const comm_desc_t *d);
ddp_status_t comm_allgather_blocks(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                   const comm_desc_t *d);

/* Bookkeeping every backend calls when it starts a collective: op is
 * "all-reduce", "reduce-scatter", "all-gather", "broadcast" or "barrier",
 * bytes this rank's payload.  Numbers it for the watchdog (activity.h): the job-wide number. */
uint64_t comm_note_start(comm_t *c, const comm_desc_t *d, const char *op, size_t bytes);

#endif
