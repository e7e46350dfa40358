/* cuda_runtime.h -- the CPU emulation of the CUDA runtime (tests/emu/emu_*.cc):
 * the subset of the real API that the backend may use, with the real names,
 * types, enum names and semantics (the ABI values need not match).  C and
 * C++; the kernel side (dim3 constructors, threadIdx, __syncthreads,
 * ddp_emu_launch, device math) is C++ only.
 *
 * What differs from a GPU, on purpose:
 * - Streams are queues that run on the thread that waits, deterministically,
 *   when something waits for them (DDP_EMU_STREAMS below): a kernel launch,
 *   a cudaMemcpyAsync between device and pinned memory, a cudaMemsetAsync,
 *   a cuBLAS call and an NCCL result are queued on their stream; the host
 *   waits in cudaStreamSynchronize, cudaEventSynchronize, the queries,
 *   cudaFree, cudaFreeHost, cudaDeviceSynchronize, the synchronous copies
 *   and a cudaMemcpyAsync into pageable memory (which CUDA also completes
 *   before returning; one from pageable memory is staged at the call).  A
 *   stream reaching a cudaStreamWaitEvent runs the event's stream up to the
 *   record first.  A query answers cudaSuccess after running the work it
 *   asks about.  So a missing cudaStreamWaitEvent or synchronisation gives
 *   stale data here, as on a GPU; what the emulation cannot show is a race
 *   whose outcome depends on timing alone, nor any overlap (speed).
 *   Work on the legacy default stream (0) runs at once, after all queued
 *   work.  Kernel arguments are evaluated and copied at the launch.
 * - Device memory is host memory, but tracked: every cudaMalloc'd range is
 *   in a table, so cudaFree of an unknown pointer, cudaMemcpy/cudaMemset or a
 *   cuBLAS/NCCL operand outside a device allocation, or a host pointer where
 *   a device pointer is due, fail with cudaErrorInvalidValue (or the
 *   library's error).  New device memory holds 0xFF bytes (NaN as float):
 *   real cudaMalloc does not zero.  Kernels index device memory unchecked,
 *   but it is heap memory: the sanitizer build (--enable-sanitizers) finds
 *   a kernel's out-of-bounds access.
 * - Kernels: every block runs in order (x fastest, then y, z), every thread
 *   of a block as a fiber on the OS thread running the stream, switched
 *   only at __syncthreads(), so __shared__ (which expands to `static`) is
 *   shared by the block's threads and a missing barrier shows as a wrong
 *   result.  A barrier that some threads of a block skip by returning
 *   aborts the process with the launch site (undefined behaviour on a GPU).
 * - Warps: 32 consecutive linear thread ids of a block.  The shuffles
 *   (__shfl_sync, _up, _down, _xor, with width), the votes (__ballot_sync,
 *   __any_sync, __all_sync) and __syncwarp park the lane until every lane
 *   of its warp is at the same operation with the same arguments; the
 *   results are computed from the values all lanes brought, then the lanes
 *   resume in order.  Whole warps only: the mask must name every lane the
 *   warp has.  A warp operation that some lanes skip by returning or by
 *   waiting at __syncthreads, a mask or width the emulation does not run,
 *   or a shuffle from a lane the block does not have aborts the process
 *   with the launch site.  No atomics.
 * - Dynamic shared memory: DDP_LAUNCH_SMEM's byte count (at most 48 KiB,
 *   DDP_EMU_DYN_SMEM_MAX, what a kernel gets without cudaFuncSetAttribute:
 *   more fails the launch with cudaErrorInvalidValue) is allocated for the
 *   launch, exactly that size (the sanitizer build sees an access past
 *   it), filled with 0xFF bytes before every block; kernels reach it
 *   through DDP_DYNAMIC_SHARED (ddp_cuda_rt.h).
 * - Vector types (float2, float4, int2, int4; __nv_bfloat162 in
 *   cuda_bf16.h) have CUDA's alignment, so the sanitizer build's alignment
 *   check finds a misaligned vector load, a fault on a GPU.
 * - A configuration error (threads per block outside 1..1024, block.z > 64,
 *   grid.x >= 2^31, grid.y/z > 65535, a zero dimension) sets the launch
 *   error: cudaGetLastError returns it once and clears it.  Any failing
 *   runtime call also sets it, as CUDA does.  Errors are never sticky.
 * - Launches may come from any OS thread (the current device and the last
 *   error are per thread, as in CUDA); they run one at a time in the
 *   process, on the thread that makes the stream run.  Fiber stacks are 64 KiB
 *   (DDP_EMU_STACK_KB), with a guard page below.
 *
 * Environment (read at the first runtime call; ddp_emu_reload_env() reads
 * it again, for tests):
 *   DDP_EMU_GPUS=N          emulated GPUs (default 1)
 *   CUDA_VISIBLE_DEVICES    comma list of indices into the emulated GPUs
 *                           (stops at the first invalid entry; "" = none)
 *   DDP_EMU_GPU_MEM_MB=M    memory per GPU (default 16384 MiB): cudaMalloc
 *                           beyond it fails, cudaMemGetInfo reports it
 *   DDP_EMU_MEM_REPORT=1    at exit, one line on stderr per GPU the process
 *                           allocated on: "ddp_emu: GPU I peak B bytes (pid
 *                           P)", the most device memory it held at once
 *   DDP_EMU_STREAMS=MODE    when queued work runs: lazy (the default) only
 *                           when the host or another stream waits for it
 *                           (a consumer that does not wait reads before its
 *                           producer wrote); lazy-first: the first stream
 *                           created on a device is lazy, the others run as
 *                           soon as the events they wait for are complete
 *                           (a producer that does not wait overwrites what
 *                           the first stream has still to read); sync: when
 *                           called, as if every call synchronised
 *   DDP_EMU_FAIL=NAME:N[,NAME:N...]   the N-th call (1-based, counted from
 *                           the (re)load) of NAME fails: cudaMalloc
 *                           (cudaErrorMemoryAllocation), cudaMallocHost,
 *                           cudaMemcpy, cudaMemcpyAsync, cudaMemset,
 *                           cudaMemsetAsync (cudaErrorLaunchFailure, as an
 *                           earlier kernel's fault reported late),
 *                           cudaStreamCreate, cudaEventCreate,
 *                           cudaEventRecord, kernel (the launch sets
 *                           cudaErrorLaunchFailure and does not run),
 *                           cublasCreate (ALLOC_FAILED), cublasSgemm,
 *                           cublasSgemmStridedBatched, cublasGemmEx,
 *                           cublasSgemv (EXECUTION_FAILED); NCCL's names
 *                           in nccl.h.
 *   DDP_EMU_HANG=NAME:N[,...]   the N-th call of cudaStreamSynchronize or
 *                           cudaEventSynchronize never returns (a host
 *                           waiting for a GPU whose collective hangs)
 *   DDP_EMU_COST_CHECK=1    every kernel launch and cuBLAS call must have
 *                           declared its cost (ddp_emu_declare_cost), and
 *                           the declaration must match the device pages it
 *                           touches, read and written, within the pages'
 *                           rounding and 3%; else the process aborts with
 *                           the launch site.  Device memory is whole pages.
 *                           x86-64 only; run one process, one stream at a
 *                           time (tests/emu/emu_cost.cc)
 *   DDP_EMU_DRY=1           launches, cuBLAS calls, fills and copies into
 *                           device memory are checked but not run: device
 *                           memory is zero pages, never written (a model of
 *                           a full-size step in seconds: bench_gpu --model)
 * Device i (after CUDA_VISIBLE_DEVICES) is named "ddptrain CUDA emulation",
 * sm 8.0, PCI bus id "0000:%02x:00.0" with bus 0x10 + its physical index.
 *
 * Helpers beyond the CUDA API (emu.h has the internal ones):
 *   ddp_emu_launch(grid, block, smem, stream, name, body)   C++: what
 *                           DDP_LAUNCH and DDP_LAUNCH_SMEM expand to (with
 *                           ddp_emu_bind)
 *   ddp_emu_reload_env()    re-read the environment above, reset counters
 *   ddp_emu_device_range(p, bytes)   1 when [p, p+bytes) lies in one device
 *                           allocation (what NCCL's checks use)
 *   ddp_emu_launch_count()  kernel launches so far that ran
 *   ddp_emu_declare_cost(read, written)   the bytes of device memory the
 *                           thread's next kernel launch or cuBLAS call
 *                           reads and writes (the backend's DDP_COST)
 *   ddp_emu_stream_check(stream, body)   C++: body() in the stream's order,
 *                           not a device operation (the backend's checks
 *                           of its caches); nothing under DDP_EMU_DRY
 */
#ifndef DDP_EMU_CUDA_RUNTIME_H
#define DDP_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#define DDP_CUDA_EMULATION 1
#define CUDART_VERSION     13000
#define CUDA_VERSION       13000

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#define cudaStreamDefault      0x00u
#define cudaStreamNonBlocking  0x01u
#define cudaEventDefault       0x00u
#define cudaEventBlockingSync  0x01u
#define cudaEventDisableTiming 0x02u
#define cudaHostAllocDefault   0x00u

struct uint3 {
    unsigned int x, y, z;
};
typedef struct uint3 uint3;

/* CUDA's vector types, with CUDA's alignment. */
typedef struct __attribute__((aligned(8))) float2 {
    float x, y;
} float2;
typedef struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
} float4;
typedef struct __attribute__((aligned(8))) int2 {
    int x, y;
} int2;
typedef struct __attribute__((aligned(16))) int4 {
    int x, y, z, w;
} int4;
static inline float2 make_float2(float x, float y)
{
    float2 r = {x, y};
    return r;
}
static inline float4 make_float4(float x, float y, float z, float w)
{
    float4 r = {x, y, z, w};
    return r;
}

struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz)
    {
    }
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const
    {
        return uint3{x, y, z};
    }
#endif
};
typedef struct dim3 dim3;

typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int integrated;
    int concurrentKernels;
    int unifiedAddressing;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
} cudaDeviceProp;

const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaDriverGetVersion(int *version);

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamQuery(cudaStream_t stream);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* ---- emulation only ---------------------------------------------------- */
void ddp_emu_reload_env(void);
int ddp_emu_device_range(const void *p, size_t bytes);
unsigned long long ddp_emu_launch_count(void);
void ddp_emu_declare_cost(double bytes_read, double bytes_written);

#ifdef __cplusplus
} /* extern "C" */

/* ---- the kernel side (C++) --------------------------------------------- */
#include <math.h>
#include <string.h>

#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__    __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__   static
#define __constant__ static

/* What a kernel reads as threadIdx, blockIdx, blockDim, gridDim: the state of
 * the fiber that runs now (set by the scheduler before it resumes one). */
struct ddp_emu_ctx_t {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
    void *dyn_smem; /* the launch's dynamic shared memory, or null */
};
extern thread_local ddp_emu_ctx_t ddp_emu_ctx_;
#define threadIdx (static_cast<const uint3 &>(ddp_emu_ctx_.thread_idx))
#define blockIdx  (static_cast<const uint3 &>(ddp_emu_ctx_.block_idx))
#define blockDim  (static_cast<const dim3 &>(ddp_emu_ctx_.block_dim))
#define gridDim   (static_cast<const dim3 &>(ddp_emu_ctx_.grid_dim))
static constexpr int warpSize = 32;

/* The block barrier: suspends this thread's fiber until every thread of the
 * block has reached a barrier. */
extern "C" void __syncthreads(void);
inline void __threadfence(void) {}
inline void __threadfence_block(void) {}

/* The warp operations (see the file comment): every lane parks with its
 * value; the result for this lane comes back when the whole warp is there. */
enum {
    DDP_EMU_SHFL_IDX,
    DDP_EMU_SHFL_UP,
    DDP_EMU_SHFL_DOWN,
    DDP_EMU_SHFL_XOR,
    DDP_EMU_BALLOT,
    DDP_EMU_ANY,
    DDP_EMU_ALL,
    DDP_EMU_SYNCWARP
};
extern "C" uint64_t ddp_emu_warp_op_(int op, const char *name, unsigned mask, uint64_t v,
                                     int param, int width);
template <class T> inline T ddp_emu_shfl_(int op, const char *name, unsigned mask, T v, int p,
                                          int width)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "a shuffle moves at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    b = ddp_emu_warp_op_(op, name, mask, b, p, width);
    T r;
    memcpy(&r, &b, sizeof r);
    return r;
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return ddp_emu_shfl_(DDP_EMU_SHFL_IDX, "__shfl_sync", mask, v, src, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return ddp_emu_shfl_(DDP_EMU_SHFL_UP, "__shfl_up_sync", mask, v, (int)delta, width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return ddp_emu_shfl_(DDP_EMU_SHFL_DOWN, "__shfl_down_sync", mask, v, (int)delta, width);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    return ddp_emu_shfl_(DDP_EMU_SHFL_XOR, "__shfl_xor_sync", mask, v, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return (unsigned)ddp_emu_warp_op_(DDP_EMU_BALLOT, "__ballot_sync", mask, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred)
{
    return (int)ddp_emu_warp_op_(DDP_EMU_ANY, "__any_sync", mask, pred != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int pred)
{
    return (int)ddp_emu_warp_op_(DDP_EMU_ALL, "__all_sync", mask, pred != 0, 0, 32);
}
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)ddp_emu_warp_op_(DDP_EMU_SYNCWARP, "__syncwarp", mask, 0, 0, 32);
}

/* The most dynamic shared memory a launch may ask for (bytes). */
#define DDP_EMU_DYN_SMEM_MAX (48u << 10)

/* Runs `run(arg)` once for every thread of the grid (see the file comment),
 * with smem bytes of dynamic shared memory.  file, line and what name the
 * launch site in diagnostics. */
/* arg: a heap copy of the kernel's body (its arguments, by value, as a
 * launch copies them), run by run() and freed by destroy() after it ran or
 * when the launch fails. */
extern "C" void ddp_emu_launch_(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                void (*run)(void *), void (*destroy)(void *), void *arg,
                                const char *file, int line, const char *what);

/* A launch of `kernel` (its name) whose body calls it with the arguments
 * evaluated and copied now, as <<<...>>> does: the body may run later (a
 * queued stream, DDP_EMU_STREAMS). */
template <class F>
inline void ddp_emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                           const char *kernel, F body, const char *file = __builtin_FILE(),
                           int line = __builtin_LINE())
{
    ddp_emu_launch_(
        grid, block, smem, stream, [](void *p) { (*static_cast<F *>(p))(); },
        [](void *p) { delete static_cast<F *>(p); }, new F(body), file, line, kernel);
}

/* Emulation only: runs `run(arg)` as an operation of stream s, in its
 * order (after what was queued on it before), neither checked nor counted
 * as a device operation, and not at all under DDP_EMU_DRY; destroy(arg)
 * after.  For the backend's checks of its own caches against device memory
 * (cuda/bf16.cu), which only the emulation can read from the host. */
extern "C" void ddp_emu_stream_check_(cudaStream_t stream, void (*run)(void *),
                                      void (*destroy)(void *), void *arg);
template <class F> inline void ddp_emu_stream_check(cudaStream_t stream, F body)
{
    ddp_emu_stream_check_(
        stream, [](void *p) { (*static_cast<F *>(p))(); },
        [](void *p) { delete static_cast<F *>(p); }, new F(body));
}

/* A body calling k with copies of a... (what DDP_LAUNCH passes). */
template <class K, class... A>
inline auto ddp_emu_bind(K k, A... a)
{
    return [=]() { k(a...); };
}

/* Device math: <math.h>'s functions, and CUDA's intrinsics as the exact
 * functions. */
inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
inline double rsqrt(double x)
{
    return 1.0 / sqrt(x);
}
inline float __expf(float x)
{
    return expf(x);
}
inline float __logf(float x)
{
    return logf(x);
}
inline float __powf(float x, float y)
{
    return powf(x, y);
}
inline float __fdividef(float x, float y)
{
    return x / y;
}
inline float __saturatef(float x)
{
    return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
}
inline float __fmaf_rn(float x, float y, float z)
{
    return fmaf(x, y, z);
}
inline unsigned int __float_as_uint(float x)
{
    unsigned int u;
    memcpy(&u, &x, sizeof u);
    return u;
}
inline float __uint_as_float(unsigned int u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
inline int __float_as_int(float x)
{
    int u;
    memcpy(&u, &x, sizeof u);
    return u;
}
inline float __int_as_float(int u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
template <class T> inline T __ldg(const T *p)
{
    return *p;
}

/* min/max of CUDA's device code, for integers and floats of mixed types. */
template <class A, class B, class C = typename std::common_type<A, B>::type>
inline constexpr C min(A a, B b)
{
    return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B, class C = typename std::common_type<A, B>::type>
inline constexpr C max(A a, B b)
{
    return (C)a < (C)b ? (C)b : (C)a;
}
#endif /* __cplusplus */

#endif
