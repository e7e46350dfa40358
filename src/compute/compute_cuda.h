/* compute_cuda.h -- the "cuda" compute backend: compute.h's ops table over
 * the launchers of cuda/ddp_cuda.h, on the GPU of the local rank
 * (local_rank modulo the visible GPUs).  Buffers are device memory
 * (DDP_MEM_DEVICE); ops queue on one compute stream and report failures
 * through `check` (the first one sticks, DDP_ERR_DEVICE, or DDP_ERR_NOMEM
 * for a failed allocation, with the message "cuda: " + the failed call).
 * Built into CUDA builds (libddp.a) and into the emulation library
 * cuda/libddpcuda_emu.a of the builds without CUDA (for the tests). */
#ifndef DDP_COMPUTE_CUDA_H
#define DDP_COMPUTE_CUDA_H

#include "compute.h"

extern const compute_ops_t compute_cuda_ops;

#endif
