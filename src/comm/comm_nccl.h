/* comm_nccl.h -- the "nccl" comm backend: the gradient plane on device
 * memory, for the cuda compute backend (comm.h).
 *
 * Bootstrap over MPI: rank 0 calls ncclGetUniqueId, MPI_Bcast sends the id
 * over (a duplicate of) the communicator comm_init_nccl is given -- the
 * control plane's -- and every rank calls ncclCommInitRank.  The compute
 * backend must have bound this rank's GPU first (ddp_cuda_init): the
 * communicator belongs to the device current at init.
 *
 * Ordering (COMM_CAP_STREAM_ORDERED): collectives run on a comm stream of
 * their own.  iallreduce records an event after the compute stream's work
 * so far, makes the comm stream wait on it, queues ncclAllReduce and records
 * a second event after it; wait makes the compute stream wait on that event
 * (so the optimizer, queued on the compute stream, runs after the
 * reduction) without blocking the host; test asks cudaEventQuery.  The host
 * blocks only in barrier and free, and there it polls ncclCommGetAsyncError
 * so a broken peer ends the job instead of hanging it.
 *
 * Memory: device memory only; mem_register refuses host memory.
 * Errors: every CUDA and NCCL call is checked; the message names the call,
 * file and line and NCCL's last error (DDP_ERR_COMM for NCCL, DDP_ERR_DEVICE
 * for CUDA).  After an error the communicator is unusable; abort (comm.h)
 * calls ncclCommAbort. */
#ifndef DDP_COMM_NCCL_H
#define DDP_COMM_NCCL_H

#include "comm.h"

/* The backend's ops table (comm_init_nccl sets it on the communicator). */
extern const comm_ops_t comm_nccl_ops;

/* Its registry entry, comm_nccl_backend, is comm.h's: in the registry of a
 * GPU build; a test program linked with the emulation registers it. */

/* NCCL backend over (a duplicate of) `world`, bootstrapped over it after
 * the compute backend has bound this rank's GPU. */
ddp_status_t comm_init_nccl(comm_t *c, MPI_Comm world);

#endif
