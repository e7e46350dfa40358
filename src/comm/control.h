/* control.h -- the control plane: small collectives on host memory over an
 * MPI communicator of its own.
 *
 * Two planes carry a job's communication.  The gradient plane (comm.h) moves
 * what lives in compute memory and must be summed -- gradient buckets,
 * SyncBatchNorm statistics, the --no-sync-bn average of the running
 * statistics -- on the selected backend (MPI or shared memory for host
 * memory; NCCL for device memory).  The control plane moves everything
 * else, always over MPI on host memory: agreement on errors, the start-up
 * consistency check and the broadcast of rank 0's model, metrics and the
 * summary, evaluation sums, replica hashes, checkpoint and resume
 * agreement, the watchdog's set-up.  Keeping them apart means a control
 * collective never waits behind, or drives, a gradient all-reduce, and a
 * device backend never has to carry host bookkeeping.
 *
 * The rule: a collective on host values the trainer computed on the host
 * goes through control_*; one on compute memory through comm_* (after the
 * event that says the memory is written, compute.h).  Control values that
 * live in compute memory are downloaded first (the model broadcast, the
 * evaluation sums).  Each descriptor name belongs to one plane (the table
 * in activity.c); --debug-collectives stops a job that breaks the rule
 * (tests/e2e/test_planes.sh).
 *
 * Every collective carries a descriptor (comm_desc_t) and is numbered (seq),
 * so a rank's position in the job can be named when something hangs.  All
 * calls block; every rank makes the same calls in the same order.  After an
 * error the job cannot go on: report it with control_abort.
 */
#ifndef DDP_CONTROL_H
#define DDP_CONTROL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "status.h"

typedef struct control {
    MPI_Comm mpi; /* duplicate of the communicator given to control_init */
    int rank, size;
    uint64_t seq;     /* collectives started so far (the same on every rank) */
    comm_desc_t last; /* the most recent one */
    char *hosts;      /* [size][CONTROL_HOST_MAX]: every rank's host name */
} control_t;

#define CONTROL_HOST_MAX 64 /* bytes of a host name in the table */

/* Over a duplicate of `world` (collective); learns every rank's host name. */
ddp_status_t control_init(control_t *c, MPI_Comm world);
void control_free(control_t *c);
/* Rank r's host name, for messages that name a rank ("?" if unknown).
 * Read-only after control_init: any thread may call it. */
const char *control_host(const control_t *c, int r);

/* Agree on a status that each rank reached on its own: every rank learns
 * whether any rank failed and returns the same status, with the message of
 * the lowest failing rank (prefixed "rank R: " unless R is 0), so the job
 * stops with one clear line and no rank is left waiting. */
ddp_status_t control_agree(control_t *c, ddp_status_t s);

/* End the whole job for a failure that the other ranks may not share (they
 * may be waiting in a collective): print the message and MPI_Abort with the
 * status's exit code.  When every rank fails at once rank 0's line is the
 * one printed: the other ranks give it a moment first. */
_Noreturn void control_abort(control_t *c, ddp_status_t s);

/* Sum all-reduce in place (COMM_DOUBLE or COMM_INT64). */
ddp_status_t control_allreduce(control_t *c, void *buf, size_t count, comm_dtype_t t,
                               const comm_desc_t *d);
/* Broadcast `bytes` from rank `root` (any size: sent in pieces). */
ddp_status_t control_bcast(control_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d);
/* recv holds size * bytes; rank r's `send` lands at recv + r * bytes. */
ddp_status_t control_allgather(control_t *c, const void *send, void *recv, size_t bytes,
                               const comm_desc_t *d);
/* Floats of different counts per rank, to or from `root`: rank r's
 * counts[r] floats are at recv (send) + the counts of the ranks before it
 * (ZeRO's optimizer shards, zero.h).  send/recv are only read on the root
 * side that has them (recv: root of the gather; send: root of the
 * scatter). */
ddp_status_t control_gatherv(control_t *c, const float *send, float *recv, const size_t *counts,
                             int root, const comm_desc_t *d);
ddp_status_t control_scatterv(control_t *c, const float *send, float *recv, const size_t *counts,
                              int root, const comm_desc_t *d);

#endif
