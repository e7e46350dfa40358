/* nccl.h -- the CPU emulation of NCCL over MPI (tests/emu/nccl_emu.c): the
 * subset of the real API the backend may use, with NCCL's names, types and
 * enum values.  C and C++.
 *
 * Semantics, and where they differ from NCCL:
 * - ncclCommInitRank(comm, nranks, id, rank) is collective over ALL ranks of
 *   MPI_COMM_WORLD (MPI_Comm_split by a colour derived from the id, key
 *   rank): every world rank must call it, the ranks with the same id form
 *   one communicator.  MPI must be initialised (else ncclSystemError).  Its
 *   size must equal nranks and the ranks 0..nranks-1 must each appear once
 *   (else ncclInvalidArgument on every member).  Like NCCL it refuses two
 *   ranks on the same GPU of the same host (host name + the PCI bus id of
 *   the current device): ncclInvalidUsage on every member, and
 *   ncclGetLastError says "Duplicate GPU detected: rank 0 and rank 1 both on
 *   CUDA device 10000".  DDP_EMU_HOSTNAME=NAME replaces the host name
 *   there (to emulate ranks on several hosts).
 * - Collectives exchange their data on the calling thread when called
 *   (MPI, blocking), in the order the ranks call them, after running the
 *   work queued on their stream (what they read); the result reaches
 *   recvbuff as an operation queued on the stream (cuda_runtime.h,
 *   DDP_EMU_STREAMS), so a stream that reads it without waiting for the
 *   collective's stream sees the old contents.  ncclGroupStart/End only
 *   nest (the calls inside run at once, in order).
 * - ncclAllReduce is deterministic and bit-identical on every rank: rank 0
 *   gathers the inputs, reduces them in rank order (float in float, double
 *   in double, bf16/fp16 in float rounded once, int64 in int64), ncclAvg
 *   divides the sum by nranks, and broadcasts the result.  In place when
 *   sendbuff == recvbuff.  ncclAllGather is in place when
 *   sendbuff == recvbuff + rank * sendcount elements.
 * - ncclReduce and ncclReduceScatter reduce the same way, each block on its
 *   root (ncclReduceScatter: rank r's block, recvcount elements, on rank r;
 *   in place when recvbuff == sendbuff + rank * recvcount elements).
 * - Every buffer must lie in a tracked device allocation (cudaMalloc) over
 *   its whole extent, else ncclInvalidArgument (NCCL cannot move host
 *   memory); a rank that fails such a check returns at once, so the others
 *   block, as with NCCL.
 * - Fault injection: DDP_EMU_NCCL_ASYNC_ERROR=N (set on every rank): from
 *   the N-th collective (1-based, counted per communicator; all-reduce,
 *   broadcast, bcast, all-gather) on, the collective moves no data,
 *   ncclCommGetAsyncError reports ncclRemoteError, and the collectives after
 *   the N-th return ncclRemoteError at once (the N-th returns ncclSuccess:
 *   the error is asynchronous).  ncclCommAbort then works without the peers.
 * - DDP_EMU_FAIL (cuda_runtime.h) also takes ncclCommInitRank (the N-th
 *   call returns ncclSystemError before any MPI), ncclAllReduce,
 *   ncclBroadcast (ncclBcast counts as one), ncclAllGather, ncclReduce and
 *   ncclReduceScatter (the N-th
 *   call returns ncclUnhandledCudaError and moves no data).  Set it alike
 *   on every rank, or the others block.
 * ncclGetLastError(NULL) is the last error of any communicator.
 */
#ifndef DDP_EMU_NCCL_H
#define DDP_EMU_NCCL_H

#include <stddef.h>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

#define NCCL_MAJOR        2
#define NCCL_MINOR        28
#define NCCL_PATCH        9
#define NCCL_SUFFIX       ""
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z)                                                                      \
    (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclNumTypes = 10
} ncclDataType_t;

const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
