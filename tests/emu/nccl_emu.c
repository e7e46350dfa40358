/* nccl_emu.c -- the CPU emulation of NCCL over MPI: communicators as MPI
 * sub-communicators of MPI_COMM_WORLD (split by the unique id), the
 * duplicate-GPU check of ncclCommInitRank, deterministic all-reduce (gather
 * to rank 0, reduce in rank order, broadcast), broadcast and all-gather on
 * tracked device memory, and the injected asynchronous error of
 * DDP_EMU_NCCL_ASYNC_ERROR.  The contract is in include/nccl.h.
 *
 * With queued streams (DDP_EMU_STREAMS) a collective exchanges its data
 * when it is called, in the order every rank calls it (so ranks never wait
 * on each other's queues): it first runs the work queued on its stream (what
 * it reads), and its result reaches recvbuff as an operation of the stream,
 * queued.  A stream that reads recvbuff without waiting for the collective's
 * stream reads the old contents. */
#include <nccl.h>

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

#define NCCL_EMU_MAGIC 0x6e63636cu /* "nccl" */

struct ncclComm {
    unsigned magic;
    MPI_Comm comm;
    int rank, nranks;
    int device;
    long collectives; /* collectives called so far */
    long async_at;    /* DDP_EMU_NCCL_ASYNC_ERROR, 0 = off */
    ncclResult_t async_error;
    char last_error[512];
};

static char nccl_emu_last_error_[512];
static int nccl_emu_group_depth_;

static ncclResult_t nccl_emu_fail_(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ncclResult_t nccl_emu_fail_(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nccl_emu_last_error_, sizeof nccl_emu_last_error_, fmt, ap);
    va_end(ap);
    if (comm && comm->magic == NCCL_EMU_MAGIC)
        snprintf(comm->last_error, sizeof comm->last_error, "%s", nccl_emu_last_error_);
    return r;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclNumResults: break;
    }
    return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm)
{
    if (comm && comm->magic == NCCL_EMU_MAGIC) return comm->last_error;
    return nccl_emu_last_error_;
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id) return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f)
        return nccl_emu_fail_(NULL, ncclSystemError,
                              "ncclGetUniqueId: cannot open /dev/urandom: %s", strerror(errno));
    size_t got = fread(id->internal, 1, sizeof id->internal, f);
    fclose(f);
    if (got != sizeof id->internal)
        return nccl_emu_fail_(NULL, ncclSystemError,
                              "ncclGetUniqueId: short read from /dev/urandom");
    return ncclSuccess;
}

/* The MPI_Comm_split colour of an id (FNV-1a, non-negative). */
static int nccl_emu_colour_(const ncclUniqueId *id)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof id->internal; i++) {
        h ^= (unsigned char)id->internal[i];
        h *= 16777619u;
    }
    return (int)(h & 0x3fffffffu);
}

typedef struct nccl_emu_peer {
    int rank;      /* as given to ncclCommInitRank */
    int nranks;    /* as given */
    long busid;    /* ddp_emu_current_busid(), -1 = none */
    char host[64]; /* DDP_EMU_HOSTNAME, else gethostname */
} nccl_emu_peer_t;

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return nccl_emu_fail_(NULL, ncclSystemError,
                              "ncclCommInitRank: the NCCL emulation runs over MPI; call MPI_Init "
                              "first");
    if (!out) return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *out = NULL;
    if (ddp_emu_inject("ncclCommInitRank"))
        return nccl_emu_fail_(NULL, ncclSystemError,
                              "ncclCommInitRank: failure injected by DDP_EMU_FAIL");

    MPI_Comm sub;
    if (MPI_Comm_split(MPI_COMM_WORLD, nccl_emu_colour_(&id), rank, &sub) != MPI_SUCCESS)
        return nccl_emu_fail_(NULL, ncclSystemError, "ncclCommInitRank: MPI_Comm_split failed");
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    int size, me;
    MPI_Comm_size(sub, &size);
    MPI_Comm_rank(sub, &me);

    nccl_emu_peer_t mine;
    memset(&mine, 0, sizeof mine);
    mine.rank = rank;
    mine.nranks = nranks;
    mine.busid = ddp_emu_current_busid();
    const char *host = getenv("DDP_EMU_HOSTNAME");
    if (host && *host)
        snprintf(mine.host, sizeof mine.host, "%s", host);
    else if (gethostname(mine.host, sizeof mine.host - 1) != 0)
        snprintf(mine.host, sizeof mine.host, "localhost");
    nccl_emu_peer_t *peers = calloc((size_t)size, sizeof *peers);
    if (!peers) {
        MPI_Comm_free(&sub);
        return nccl_emu_fail_(NULL, ncclSystemError, "ncclCommInitRank: out of host memory");
    }
    if (MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, peers, (int)sizeof mine, MPI_BYTE, sub) !=
        MPI_SUCCESS) {
        free(peers);
        MPI_Comm_free(&sub);
        return nccl_emu_fail_(NULL, ncclSystemError, "ncclCommInitRank: MPI_Allgather failed");
    }

    /* every member judges the same table, so all return the same result */
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < size && r == ncclSuccess; i++) {
        if (peers[i].nranks != size)
            r = nccl_emu_fail_(NULL, ncclInvalidArgument,
                               "ncclCommInitRank: rank %d passed nranks = %d, but %d ranks called "
                               "with this unique id",
                               peers[i].rank, peers[i].nranks, size);
        else if (peers[i].rank != i) /* sorted by rank: 0..size-1 exactly once */
            r = nccl_emu_fail_(NULL, ncclInvalidArgument,
                               "ncclCommInitRank: the ranks passed are not 0..%d, each once (rank "
                               "%d is %s)",
                               size - 1, i, peers[i].rank == i - 1 ? "given twice" : "missing");
        else if (peers[i].busid < 0)
            r = nccl_emu_fail_(NULL, ncclUnhandledCudaError,
                               "ncclCommInitRank: rank %d has no current CUDA device", i);
    }
    for (int i = 0; i < size && r == ncclSuccess; i++)
        for (int j = i + 1; j < size && r == ncclSuccess; j++)
            if (peers[i].busid == peers[j].busid && strcmp(peers[i].host, peers[j].host) == 0)
                r = nccl_emu_fail_(NULL, ncclInvalidUsage,
                                   "Duplicate GPU detected: rank %d and rank %d both on CUDA "
                                   "device %lx",
                                   i, j, peers[i].busid);
    free(peers);
    if (r != ncclSuccess) {
        MPI_Comm_free(&sub);
        return r;
    }

    ncclComm_t c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Comm_free(&sub);
        return nccl_emu_fail_(NULL, ncclSystemError, "ncclCommInitRank: out of host memory");
    }
    c->magic = NCCL_EMU_MAGIC;
    c->comm = sub;
    c->rank = me;
    c->nranks = size;
    if (cudaGetDevice(&c->device) != cudaSuccess) c->device = -1;
    const char *at = getenv("DDP_EMU_NCCL_ASYNC_ERROR");
    if (at && *at) {
        char *end;
        long v = strtol(at, &end, 10);
        if (*end || v < 1)
            ddp_emu_warn("DDP_EMU_NCCL_ASYNC_ERROR=\"%s\" is not a count >= 1; ignored", at);
        else
            c->async_at = v;
    }
    *out = c;
    return ncclSuccess;
}

static int nccl_emu_comm_ok_(ncclComm_t comm)
{
    return comm && comm->magic == NCCL_EMU_MAGIC;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    if (!nccl_emu_comm_ok_(comm))
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommDestroy: not a communicator");
    MPI_Comm_free(&comm->comm);
    comm->magic = 0;
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    if (!nccl_emu_comm_ok_(comm))
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommFinalize: not a communicator");
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    if (!nccl_emu_comm_ok_(comm))
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommAbort: not a communicator");
    /* the MPI communicator is left alone: the peers may be gone or stuck */
    comm->magic = 0;
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!nccl_emu_comm_ok_(comm) || !count)
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommCount: bad argument");
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!nccl_emu_comm_ok_(comm) || !rank)
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommUserRank: bad argument");
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!nccl_emu_comm_ok_(comm) || !device)
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommCuDevice: bad argument");
    *device = comm->device;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!nccl_emu_comm_ok_(comm) || !asyncError)
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: bad argument");
    *asyncError = comm->async_error;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    nccl_emu_group_depth_++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (nccl_emu_group_depth_ == 0)
        return nccl_emu_fail_(NULL, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart open");
    nccl_emu_group_depth_--;
    return ncclSuccess;
}

/* ---- collectives ---------------------------------------------------------- */

static size_t nccl_emu_type_size_(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    case ncclNumTypes: break;
    }
    return 0;
}

/* The checks every collective shares, then the injected asynchronous
 * error.  *skip = 1: return the result without moving data. */
static ncclResult_t nccl_emu_begin_(const char *call, ncclComm_t comm, ncclDataType_t type,
                                    cudaStream_t stream, int *skip)
{
    *skip = 1;
    if (!nccl_emu_comm_ok_(comm))
        return nccl_emu_fail_(NULL, ncclInvalidArgument, "%s: comm is not a live communicator",
                              call);
    if (nccl_emu_type_size_(type) == 0)
        return nccl_emu_fail_(comm, ncclInvalidArgument, "%s: unknown data type %d", call,
                              (int)type);
    if (!ddp_emu_stream_live(stream)) {
        return nccl_emu_fail_(comm, ncclUnhandledCudaError, "%s: the stream is not a live stream",
                              call);
    }
    comm->collectives++;
    if (ddp_emu_inject(call))
        return nccl_emu_fail_(comm, ncclUnhandledCudaError, "%s: failure injected by DDP_EMU_FAIL",
                              call);
    if (comm->async_at && comm->collectives >= comm->async_at) {
        int first = comm->async_error == ncclSuccess;
        comm->async_error = ncclRemoteError;
        nccl_emu_fail_(comm, ncclRemoteError,
                       "%s: remote error injected by DDP_EMU_NCCL_ASYNC_ERROR=%ld (collective %ld)",
                       call, comm->async_at, comm->collectives);
        return first ? ncclSuccess : ncclRemoteError;
    }
    *skip = 0;
    return ncclSuccess;
}

static ncclResult_t nccl_emu_buffer_(const char *call, ncclComm_t comm, const char *name,
                                     const void *p, size_t bytes)
{
    if (bytes == 0 || ddp_emu_device_range(p, bytes)) return ncclSuccess;
    return nccl_emu_fail_(comm, ncclInvalidArgument,
                          "%s: %s = %p (%zu bytes) is not inside one device allocation (host "
                          "memory, or past its end)",
                          call, name, p, bytes);
}

/* fp16 <-> float, exact and round to nearest even */
static float nccl_emu_half_to_float_(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t nccl_emu_float_to_half_(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        if (a < 0x33000000u) return sign;                    /* below half the least */
        uint32_t exp = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
        int shift = (int)(126 - exp); /* 14 .. 24 */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
    return (uint16_t)(sign | (r >> 13));
}

/* recv[i] = op over ranks r in order of in[r * n + i] */
static void nccl_emu_reduce_(void *recv, const void *in, size_t n, int nranks, ncclDataType_t type,
                             ncclRedOp_t op)
{
#define NCCL_EMU_REDUCE(T, ACC, LOAD, STORE)                                                       \
    do {                                                                                           \
        const T *src = (const T *)in;                                                              \
        T *dst = (T *)recv;                                                                        \
        for (size_t i = 0; i < n; i++) {                                                           \
            ACC acc = LOAD(src[i]);                                                                \
            for (int r = 1; r < nranks; r++) {                                                     \
                ACC v = LOAD(src[(size_t)r * n + i]);                                              \
                switch (op) {                                                                      \
                case ncclProd: acc = (ACC)(acc * v); break;                                        \
                case ncclMax: acc = v > acc ? v : acc; break;                                      \
                case ncclMin: acc = v < acc ? v : acc; break;                                      \
                default: acc = (ACC)(acc + v); break;                                              \
                }                                                                                  \
            }                                                                                      \
            if (op == ncclAvg) acc = (ACC)(acc / (ACC)nranks);                                     \
            dst[i] = STORE(acc);                                                                   \
        }                                                                                          \
    } while (0)
#define NCCL_EMU_ID(x)         (x)
#define NCCL_EMU_BF16_LOAD(x)  __bfloat162float(__ushort_as_bfloat16(x))
#define NCCL_EMU_BF16_STORE(x) __bfloat16_as_ushort(__float2bfloat16(x))
    switch (type) {
    case ncclInt8: NCCL_EMU_REDUCE(int8_t, int8_t, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclUint8: NCCL_EMU_REDUCE(uint8_t, uint8_t, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclInt32: NCCL_EMU_REDUCE(int32_t, int32_t, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclUint32: NCCL_EMU_REDUCE(uint32_t, uint32_t, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclInt64: NCCL_EMU_REDUCE(int64_t, int64_t, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclUint64: NCCL_EMU_REDUCE(uint64_t, uint64_t, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclFloat32: NCCL_EMU_REDUCE(float, float, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclFloat64: NCCL_EMU_REDUCE(double, double, NCCL_EMU_ID, NCCL_EMU_ID); break;
    case ncclFloat16:
        NCCL_EMU_REDUCE(uint16_t, float, nccl_emu_half_to_float_, nccl_emu_float_to_half_);
        break;
    case ncclBfloat16:
        NCCL_EMU_REDUCE(uint16_t, float, NCCL_EMU_BF16_LOAD, NCCL_EMU_BF16_STORE);
        break;
    case ncclNumTypes: break;
    }
#undef NCCL_EMU_REDUCE
#undef NCCL_EMU_ID
#undef NCCL_EMU_BF16_LOAD
#undef NCCL_EMU_BF16_STORE
}

#define NCCL_EMU_CHUNK ((size_t)4 << 20) /* bytes per rank and step */

/* Every rank says whether it has the memory it needs (ok), so that none
 * goes on into an exchange that another has left. */
static ncclResult_t nccl_emu_agree_(ncclComm_t comm, const char *call, int ok)
{
    int all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm->comm) != MPI_SUCCESS)
        return nccl_emu_fail_(comm, ncclSystemError, "%s: MPI_Allreduce failed", call);
    if (!all_ok) return nccl_emu_fail_(comm, ncclSystemError, "%s: out of host memory", call);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    const char *call = "ncclAllReduce";
    int skip;
    ncclResult_t r = nccl_emu_begin_(call, comm, datatype, stream, &skip);
    if (skip) return r;
    if ((int)op < 0 || op >= ncclNumOps)
        return nccl_emu_fail_(comm, ncclInvalidArgument, "%s: unknown reduction %d", call, (int)op);
    size_t es = nccl_emu_type_size_(datatype), bytes = count * es;
    if ((r = nccl_emu_buffer_(call, comm, "sendbuff", sendbuff, bytes)) ||
        (r = nccl_emu_buffer_(call, comm, "recvbuff", recvbuff, bytes)))
        return r;
    if (count == 0) return ncclSuccess;
    size_t chunk = NCCL_EMU_CHUNK / es; /* elements */
    char *tmp = NULL, *out = malloc(bytes);
    if (comm->rank == 0) {
        size_t n = count < chunk ? count : chunk;
        tmp = malloc(n * es * (size_t)comm->nranks);
    }
    if ((r = nccl_emu_agree_(comm, call, out && (comm->rank != 0 || tmp))) != ncclSuccess) {
        free(tmp);
        free(out);
        return r;
    }
    ddp_emu_stream_sync(stream);
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        int nb = (int)(n * es);
        const char *src = (const char *)sendbuff + off * es;
        char *dst = out + off * es;
        if (MPI_Gather(src, nb, MPI_BYTE, tmp, nb, MPI_BYTE, 0, comm->comm) != MPI_SUCCESS) {
            free(tmp);
            free(out);
            return nccl_emu_fail_(comm, ncclSystemError, "%s: MPI_Gather failed", call);
        }
        if (comm->rank == 0) nccl_emu_reduce_(dst, tmp, n, comm->nranks, datatype, op);
        if (MPI_Bcast(dst, nb, MPI_BYTE, 0, comm->comm) != MPI_SUCCESS) {
            free(tmp);
            free(out);
            return nccl_emu_fail_(comm, ncclSystemError, "%s: MPI_Bcast failed", call);
        }
    }
    free(tmp);
    ddp_emu_stream_deliver(stream, recvbuff, out, bytes);
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    const char *call = "ncclBroadcast";
    int skip;
    ncclResult_t r = nccl_emu_begin_(call, comm, datatype, stream, &skip);
    if (skip) return r;
    if (root < 0 || root >= comm->nranks)
        return nccl_emu_fail_(comm, ncclInvalidArgument, "%s: root %d is not a rank of 0..%d", call,
                              root, comm->nranks - 1);
    size_t bytes = count * nccl_emu_type_size_(datatype);
    if ((comm->rank == root && (r = nccl_emu_buffer_(call, comm, "sendbuff", sendbuff, bytes))) ||
        (r = nccl_emu_buffer_(call, comm, "recvbuff", recvbuff, bytes)))
        return r;
    if (bytes == 0) return ncclSuccess;
    char *out = malloc(bytes);
    if ((r = nccl_emu_agree_(comm, call, out != NULL)) != ncclSuccess) {
        free(out);
        return r;
    }
    ddp_emu_stream_sync(stream);
    if (comm->rank == root) memcpy(out, sendbuff, bytes);
    for (size_t off = 0; off < bytes; off += NCCL_EMU_CHUNK) {
        size_t n = bytes - off < NCCL_EMU_CHUNK ? bytes - off : NCCL_EMU_CHUNK;
        if (MPI_Bcast(out + off, (int)n, MPI_BYTE, root, comm->comm) != MPI_SUCCESS) {
            free(out);
            return nccl_emu_fail_(comm, ncclSystemError, "%s: MPI_Bcast failed", call);
        }
    }
    ddp_emu_stream_deliver(stream, recvbuff, out, bytes);
    return ncclSuccess;
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    const char *call = "ncclAllGather";
    int skip;
    ncclResult_t r = nccl_emu_begin_(call, comm, datatype, stream, &skip);
    if (skip) return r;
    size_t bytes = sendcount * nccl_emu_type_size_(datatype);
    if ((r = nccl_emu_buffer_(call, comm, "sendbuff", sendbuff, bytes)) ||
        (r = nccl_emu_buffer_(call, comm, "recvbuff", recvbuff, bytes * (size_t)comm->nranks)))
        return r;
    if (bytes == 0) return ncclSuccess;
    if (bytes > INT_MAX)
        return nccl_emu_fail_(comm, ncclInvalidArgument,
                              "%s: the emulation moves at most %d bytes per rank", call, INT_MAX);
    size_t total = bytes * (size_t)comm->nranks;
    char *out = malloc(total);
    if ((r = nccl_emu_agree_(comm, call, out != NULL)) != ncclSuccess) {
        free(out);
        return r;
    }
    ddp_emu_stream_sync(stream);
    if (MPI_Allgather(sendbuff, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, comm->comm) !=
        MPI_SUCCESS) {
        free(out);
        return nccl_emu_fail_(comm, ncclSystemError, "%s: MPI_Allgather failed", call);
    }
    ddp_emu_stream_deliver(stream, recvbuff, out, total);
    return ncclSuccess;
}

/* Block [first, first + n) (elements) of every rank's sendbuff, reduced in
 * rank order on `root` into out (root only): gathered there in chunks. */
static ncclResult_t nccl_emu_reduce_block_(const char *call, const char *sendbuff, char *out,
                                           size_t n, ncclDataType_t datatype, ncclRedOp_t op,
                                           int root, ncclComm_t comm)
{
    size_t es = nccl_emu_type_size_(datatype), chunk = NCCL_EMU_CHUNK / es;
    char *tmp = NULL;
    if (comm->rank == root && n) tmp = malloc((n < chunk ? n : chunk) * es * (size_t)comm->nranks);
    ncclResult_t r = nccl_emu_agree_(comm, call, comm->rank != root || !n || tmp);
    for (size_t off = 0; off < n && r == ncclSuccess; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        int nb = (int)(k * es);
        if (MPI_Gather(sendbuff + off * es, nb, MPI_BYTE, tmp, nb, MPI_BYTE, root, comm->comm) !=
            MPI_SUCCESS)
            r = nccl_emu_fail_(comm, ncclSystemError, "%s: MPI_Gather failed", call);
        else if (comm->rank == root)
            nccl_emu_reduce_(out + off * es, tmp, k, comm->nranks, datatype, op);
    }
    free(tmp);
    return r;
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    const char *call = "ncclReduce";
    int skip;
    ncclResult_t r = nccl_emu_begin_(call, comm, datatype, stream, &skip);
    if (skip) return r;
    if ((int)op < 0 || op >= ncclNumOps)
        return nccl_emu_fail_(comm, ncclInvalidArgument, "%s: unknown reduction %d", call, (int)op);
    if (root < 0 || root >= comm->nranks)
        return nccl_emu_fail_(comm, ncclInvalidArgument, "%s: root %d is not a rank of 0..%d", call,
                              root, comm->nranks - 1);
    size_t bytes = count * nccl_emu_type_size_(datatype);
    if ((r = nccl_emu_buffer_(call, comm, "sendbuff", sendbuff, bytes)) ||
        (comm->rank == root && (r = nccl_emu_buffer_(call, comm, "recvbuff", recvbuff, bytes))))
        return r;
    if (bytes == 0) return ncclSuccess;
    char *out = comm->rank == root ? malloc(bytes) : NULL;
    if ((r = nccl_emu_agree_(comm, call, comm->rank != root || out)) != ncclSuccess) {
        free(out);
        return r;
    }
    ddp_emu_stream_sync(stream);
    r = nccl_emu_reduce_block_(call, sendbuff, out, count, datatype, op, root, comm);
    if (r == ncclSuccess && comm->rank == root) {
        ddp_emu_stream_deliver(stream, recvbuff, out, bytes); /* frees out */
        out = NULL;
    }
    free(out);
    return r;
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    const char *call = "ncclReduceScatter";
    int skip;
    ncclResult_t r = nccl_emu_begin_(call, comm, datatype, stream, &skip);
    if (skip) return r;
    if ((int)op < 0 || op >= ncclNumOps)
        return nccl_emu_fail_(comm, ncclInvalidArgument, "%s: unknown reduction %d", call, (int)op);
    size_t es = nccl_emu_type_size_(datatype), bytes = recvcount * es;
    if ((r = nccl_emu_buffer_(call, comm, "sendbuff", sendbuff, bytes * (size_t)comm->nranks)) ||
        (r = nccl_emu_buffer_(call, comm, "recvbuff", recvbuff, bytes)))
        return r;
    if (bytes == 0) return ncclSuccess;
    if (bytes > INT_MAX)
        return nccl_emu_fail_(comm, ncclInvalidArgument,
                              "%s: the emulation moves at most %d bytes per rank", call, INT_MAX);
    char *out = malloc(bytes);
    if ((r = nccl_emu_agree_(comm, call, out != NULL)) != ncclSuccess) {
        free(out);
        return r;
    }
    ddp_emu_stream_sync(stream);
    /* block k of every rank to rank k, in rank order */
    for (int k = 0; k < comm->nranks && r == ncclSuccess; k++)
        r = nccl_emu_reduce_block_(call, (const char *)sendbuff + (size_t)k * bytes, out, recvcount,
                                   datatype, op, k, comm);
    if (r == ncclSuccess) {
        ddp_emu_stream_deliver(stream, recvbuff, out, bytes); /* frees out */
        out = NULL;
    }
    free(out);
    return r;
}
