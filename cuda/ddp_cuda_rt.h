// ddp_cuda_rt.h -- what every .cu file of the backend includes: the CUDA
// runtime and cuBLAS headers, the kernel launch macro, and the checks that
// turn a failed call into ddp_cuda_last_error()'s message.
//
// The sources compile two ways (see ddp_cuda.h): with nvcc, where the
// headers are the toolkit's, and with the C++ compiler and
// -I tests/emu/include -DDDP_CUDA_EMU, where <cuda_runtime.h>, <cublas_v2.h>
// and <nccl.h> are the CPU emulation (tests/emu/emu_*.cc).  So the backend may
// use only what the emulation provides (listed in tests/emu/include/
// cuda_runtime.h and cublas_v2.h): whole-warp shuffles and votes, vector
// loads (float4, __nv_bfloat162), dynamic shared memory through
// DDP_DYNAMIC_SHARED, and no atomics on floating point (results must not
// depend on the order blocks run in).  Launch every kernel with DDP_LAUNCH,
// or DDP_LAUNCH_SMEM with dynamic shared memory.
#ifndef DDP_CUDA_RT_H
#define DDP_CUDA_RT_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "blas.h" // cuBLAS through the table of blas.cu (the cublas* names are its macros)

#include "ddp_cuda.h"

// What the next launch or GEMM of this thread costs: the bytes of device
// memory it reads and writes (each byte once, as the DRAM sees a streaming
// kernel) and the FLOPs it does, from its sizes.  Write it on the line
// before every DDP_LAUNCH and GEMM: the cost log (ddp_cuda.h) takes it, and
// the emulation's cost check (DDP_EMU_COST_CHECK) holds it against the
// pages the operation touches.
#define DDP_COST(read, written, flops)                                                             \
    ddp_cost_declare_((double)(read), (double)(written), (double)(flops))
void ddp_cost_declare_(double read, double written, double flops);
// The log entries of a launch, a GEMM (C[m, n] over k; `batch` of them in
// one strided batched call) and a copy or fill (cost.cu); each takes the
// pending DDP_COST.
void ddp_cost_launch_(const char *kernel, dim3 grid, dim3 block);
void ddp_cost_gemm_(const char *name, ddp_cuda_math_t math, long long m, long long n, long long k,
                    long long batch = 1);
void ddp_cost_copy_(const char *name, double read, double written);
// A profiler range opened (the trainer's phase, ddp_cuda.h's cost steps).
void ddp_cost_phase_(const char *range);

#ifdef DDP_CUDA_EMU
// The emulation runs every thread of the grid on the CPU (tests/emu/emu_launch.cc);
// the arguments are evaluated at the launch, as with <<<...>>>.
#define DDP_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)                                    \
    do {                                                                                           \
        ddp_cost_launch_(#kernel, dim3(grid), dim3(block));                                        \
        ddp_emu_launch((grid), (block), (smem), (stream), #kernel,                                 \
                       ddp_emu_bind([](auto... a_) { kernel(a_...); }, __VA_ARGS__));              \
    } while (0)
// T *name: the launch's dynamic shared memory (DDP_LAUNCH_SMEM's bytes)
#define DDP_DYNAMIC_SHARED(T, name) T *name = static_cast<T *>(ddp_emu_ctx_.dyn_smem)
#else
#define DDP_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)                                    \
    do {                                                                                           \
        ddp_cost_launch_(#kernel, dim3(grid), dim3(block));                                        \
        kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__);                                \
    } while (0)
#define DDP_DYNAMIC_SHARED(T, name)                                                                \
    extern __shared__ __align__(16) unsigned char ddp_dyn_smem_[];                                 \
    T *name = reinterpret_cast<T *>(ddp_dyn_smem_)
#endif
// A launch without dynamic shared memory.
#define DDP_LAUNCH(kernel, grid, block, stream, ...)                                               \
    DDP_LAUNCH_SMEM(kernel, grid, block, 0, stream, __VA_ARGS__)
// An element kernel templated on its index type (DDP_GRID_STRIDE): 32-bit
// indices when count < 2^31 (i plus the grid's stride then never wraps), so
// the per-element divisions into coordinates are 32-bit, not the long
// 64-bit division routine; size_t beyond.
#define DDP_LAUNCH_IDX(kernel, count, grid, block, stream, ...)                                    \
    do {                                                                                           \
        if ((size_t)(count) < ((size_t)1 << 31))                                                   \
            DDP_LAUNCH(kernel<uint32_t>, grid, block, stream, __VA_ARGS__);                        \
        else                                                                                       \
            DDP_LAUNCH(kernel<size_t>, grid, block, stream, __VA_ARGS__);                          \
    } while (0)
// for (I i = this thread's first; i < count; i += the grid's threads)
#define DDP_GRID_STRIDE(I, i, count)                                                               \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)(count);                           \
         i += (I)gridDim.x * blockDim.x)

// The scratch of a two-pass sum on the compute stream (runtime.cu), for
// bn.cu's per-chunk partials and conv.cu's bias gradient's per-sample sums:
// at least `doubles` doubles on the bound device, until the next call (each
// user's second pass runs before the next first pass: one stream).
extern "C" int ddp_cuda_partials_(size_t doubles, double **out);

// Record the first failure (runtime.cu): call name, file:line and the
// library's message.  Returns -1 so a launcher can `return ddp_cuda_fail_(...)`.
int ddp_cuda_fail_(const char *call, const char *file, int line, const char *why);

// Check a CUDA runtime call: `DDP_CU(cudaMemcpyAsync(...));` returns -1 from
// the enclosing launcher on failure.
#define DDP_CU(call)                                                                               \
    do {                                                                                           \
        cudaError_t ddp_e_ = (call);                                                               \
        if (ddp_e_ != cudaSuccess)                                                                 \
            return ddp_cuda_fail_(#call, __FILE__, __LINE__, cudaGetErrorString(ddp_e_));          \
    } while (0)

// The same for cuBLAS calls.
#define DDP_CUBLAS(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t ddp_s_ = (call);                                                            \
        if (ddp_s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return ddp_cuda_fail_(#call, __FILE__, __LINE__, cublasGetStatusString(ddp_s_));       \
    } while (0)

// After a DDP_LAUNCH: the launch itself failed (bad configuration), or an
// earlier kernel failed and the runtime says so now.
#define DDP_CU_LAUNCHED() DDP_CU(cudaGetLastError())

// The backend's state (runtime.cu), for the other .cu files.
struct ddp_cuda_state {
    int device;                 // -1 before ddp_cuda_init
    cudaStream_t stream;        // the compute stream: every op
    cudaStream_t copy_stream;   // upload_async
    cublasHandle_t blas;        // on `stream`
    cublasLtHandle_t lt;        // cuBLASLt's, NULL without it (blas.h)
    int bf16_gemm;              // --precision bf16
    int tf32;                   // --precision tf32 (the handle's math mode)
};
extern struct ddp_cuda_state ddp_cuda_state_;

// Grid-stride launches over `count` elements.
constexpr int kDdpThreads = 256;
inline unsigned ddp_blocks_for(size_t count)
{
    size_t b = (count + kDdpThreads - 1) / kDdpThreads;
    const size_t cap = 4096; // grid-stride loops cover the rest
    return (unsigned)(b == 0 ? 1 : b < cap ? b : cap);
}

#endif
