/* comm_mpi.h -- the "mpi" comm backend: the gradient plane on host memory,
 * over each node's shared memory and MPI point-to-point messages between
 * the nodes (comm.h).  Its own settings live here, not in the
 * generic comm.h: the thread level it needs and the algorithm choice. */
#ifndef DDP_COMM_MPI_H
#define DDP_COMM_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"

/* MPI thread level the MPI backend needs: main() passes it (or more) to
 * MPI_Init_thread and makes every comm call from that thread. */
#define COMM_MPI_THREAD_LEVEL MPI_THREAD_FUNNELED
/* The level the progress thread needs (comm_mpi_set_thread): it makes MPI
 * calls while the main thread makes its own (the control plane's).  The
 * trainer asks for it and runs without the thread where MPI gives less. */
#define COMM_MPI_THREAD_WANTED MPI_THREAD_MULTIPLE
/* The progress thread's default polling interval (microseconds between
 * passes over the collectives in flight; bench/findings.md). */
#define COMM_MPI_THREAD_SLEEP_US 20

/* Its ops table (the registry entry comm_mpi_backend is comm.h's). */
extern const comm_ops_t comm_mpi_ops;

/* MPI backend over (a duplicate of) `world`.  Computes rank, size, the local
 * rank (ranks sharing a node) and the number of nodes.  Host memory only;
 * COMM_CAP_NODE_SHARED_MEMORY when W > 1 and /dev/shm has room (each
 * node's ranks share their memory). */
ddp_status_t comm_init_mpi(comm_t *c, MPI_Comm world);

/* All-reduce algorithm of the MPI backend, set on every rank alike before
 * the first collective:
 *   "auto" (default)  shared memory for a slice of comm_mem_alloc memory
 *                     when all ranks are on one node: every rank sums its
 *                     block straight from the others' buffers and copies
 *                     the other blocks from their owners (about 2x faster
 *                     than message passing here); across nodes "hier" for
 *                     such slices; "ring" for everything else (other
 *                     buffers).  Every rank must
 *                     then pass the same slice (offset and count) of its
 *                     comm-allocated buffer -- checked, DDP_ERR_MISMATCH --
 *                     or all ranks a buffer of their own.
 *   "hier"            across nodes (comm_mpi_algo.h): a node-shared slice
 *                     summed within each node, each local rank's slices
 *                     all-reduced between the nodes by a ring of their
 *                     owners, shared in the node; on one node shared
 *                     memory, for other buffers the ring.
 *   "ring"            reduce-scatter + allgather over MPI_Isend/Irecv in
 *                     pieces of at most 4 MB, progressed by comm calls.
 *   "mpi"             MPI_Iallreduce in pieces of at most 8 MB (Open MPI's
 *                     own algorithms; identical results in practice but
 *                     not by construction).  For comparison.
 * DDP_ERR_USAGE for another name. */
ddp_status_t comm_mpi_set_algorithm(comm_t *c, const char *name);
/* Ring tuning (benchmarks): piece = bytes one ring message carries at most
 * (rounded down to whole elements; default 4 MB), depth = slices (a piece
 * of every block) in flight per collective (1..16; default 2).  0 keeps the
 * current value. */
ddp_status_t comm_mpi_set_ring(comm_t *c, size_t piece_bytes, int depth);
/* The ring's current piece (bytes) and depth. */
void comm_mpi_get_ring(const comm_t *c, size_t *piece_bytes, int *depth);

/* The progress thread (--comm-thread): on = 1 starts a thread that drives
 * the collectives that move messages (ring, mpi; not shared memory) while
 * they are in flight, polling every sleep_us microseconds (-1: the default;
 * 0: sched_yield between passes), and sleeps otherwise; 0 stops it.
 * Updates (iallreduce_apply) still run on the calling thread, at its next
 * comm call.  Where MPI was initialised below MPI_THREAD_MULTIPLE no thread
 * starts and `why` (when given) says so in one line.  Not collective; call
 * it before the first collective or between collectives. */
ddp_status_t comm_mpi_set_thread(comm_t *c, int on, int sleep_us, char *why, size_t whylen);
/* The thread's CPU time so far and the passes it made (zeros: none). */
void comm_mpi_thread_usage(const comm_t *c, double *cpu_s, uint64_t *passes);
/* How often the thread went to wait for work (mpi_thread_sleeps). */
uint64_t comm_mpi_thread_sleeps(const comm_t *c);

#endif
