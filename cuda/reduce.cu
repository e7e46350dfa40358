// reduce.cu -- the reduction launchers of ddp_cuda.h: sumsq (the squared
// norm for --clip-grad-norm, in double; sumsq_many: many of them, one wait
// for the device) and all_finite (the non-finite guard), both returning to
// the host.
//
// sumsq is deterministic without atomics: a first pass of
// ddp_blocks_for(count) blocks, each thread summing (double)x^2 over its
// grid-stride elements and the block reducing its threads' sums in a fixed
// tree in static shared memory (ddp_block_sum, block_reduce.h) into one
// partial per block; a second pass
// of one block sums the partials in a fixed tree.  The shape depends only
// on count, so the same input gives the same bits on every run; against
// the CPU backend (another summation order) it agrees to double rounding.
// all_finite: every thread that meets an Inf or NaN stores 1 into one flag
// (all writers store the same value, so the result does not depend on
// their order).
#include "ddp_cuda_rt.h"

#include "block_reduce.h"

#include <math.h>

namespace
{

// Device scratch: partials_[0, 4096) the first pass's partials,
// partials_[4096] the result; flag_ all_finite's flag.  Allocated at the
// first use on the bound device (again after ddp_cuda_init bound another
// one; the old scratch, 32 KiB, is left to the process's end).
double *partials_ = nullptr;
int *flag_ = nullptr;
int scratch_device_ = -1;
// sumsq_many's results on the device: results_cap_ doubles (grown; the old
// array freed after the work that used it, the stream synchronized)
double *results_ = nullptr;
int results_cap_ = 0;
constexpr size_t kMaxBlocks = 4096; // ddp_blocks_for's cap

int scratch()
{
    if (scratch_device_ != ddp_cuda_state_.device) {
        partials_ = nullptr;
        flag_ = nullptr;
        results_ = nullptr;
        results_cap_ = 0;
        scratch_device_ = ddp_cuda_state_.device;
    }
    if (!partials_) DDP_CU(cudaMalloc((void **)&partials_, (kMaxBlocks + 1) * sizeof(double)));
    if (!flag_) DDP_CU(cudaMalloc((void **)&flag_, sizeof(int)));
    return 0;
}

__global__ void sumsq_k(size_t count, const float *x, double *part)
{
    __shared__ double sh[kDdpThreads];
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = ddp_block_sum(sh, s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// out = sum of part[0, blocks), one block
__global__ void sum_partials_k(unsigned blocks, const double *part, double *out)
{
    __shared__ double sh[kDdpThreads];
    double s = 0;
    for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) s += part[b];
    s = ddp_block_sum(sh, s);
    if (threadIdx.x == 0) *out = s;
}

__global__ void all_finite_k(size_t count, const float *x, int *bad)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        if (!isfinite(x[i])) *bad = 1;
}

// The sum of x[0, count) squared into *out on the device (count > 0).
int sumsq_into(size_t count, const float *x, double *out)
{
    cudaStream_t st = ddp_cuda_state_.stream;
    const unsigned blocks = ddp_blocks_for(count);
    DDP_COST(4.0 * count, 8.0 * blocks, 2.0 * count);
    DDP_LAUNCH(sumsq_k, blocks, kDdpThreads, st, count, x, partials_);
    DDP_CU_LAUNCHED();
    DDP_COST(8.0 * blocks, 8, (double)blocks);
    DDP_LAUNCH(sum_partials_k, 1, kDdpThreads, st, blocks, (const double *)partials_, out);
    DDP_CU_LAUNCHED();
    return 0;
}

} // namespace

extern "C" int ddp_cuda_sumsq(size_t count, const float *x, double *host_result)
{
    *host_result = 0;
    cudaStream_t st = ddp_cuda_state_.stream;
    if (count == 0) { // still waits for the work before it (compute.h)
        DDP_CU(cudaStreamSynchronize(st));
        return 0;
    }
    if (scratch() || sumsq_into(count, x, partials_ + kMaxBlocks) != 0) return -1;
    double r;
    DDP_CU(cudaMemcpyAsync(&r, partials_ + kMaxBlocks, sizeof r, cudaMemcpyDeviceToHost, st));
    DDP_CU(cudaStreamSynchronize(st));
    *host_result = r;
    return 0;
}

extern "C" int ddp_cuda_sumsq_many(int n, const float *const *x, const size_t *count,
                                   double *host_result)
{
    cudaStream_t st = ddp_cuda_state_.stream;
    for (int i = 0; i < n; i++) host_result[i] = 0;
    if (scratch()) return -1;
    if (n > results_cap_) {
        if (results_) {
            DDP_CU(cudaStreamSynchronize(st)); // the old array's last reader
            DDP_CU(cudaFree(results_));
            results_ = nullptr;
            results_cap_ = 0;
        }
        DDP_CU(cudaMalloc((void **)&results_, (size_t)n * sizeof(double)));
        results_cap_ = n;
    }
    int k = 0; // results written on the device, in order: pieces of count 0 are 0
    for (int i = 0; i < n; i++)
        if (count[i] > 0 && sumsq_into(count[i], x[i], results_ + k++) != 0) return -1;
    double *got = k ? (double *)malloc((size_t)k * sizeof(double)) : nullptr;
    if (k && !got)
        return ddp_cuda_fail_("ddp_cuda_sumsq_many", __FILE__, __LINE__, "out of host memory");
    // one wait for all of them (got freed on every path)
    const char *call = "cudaMemcpyAsync";
    cudaError_t e = k ? cudaMemcpyAsync(got, results_, (size_t)k * sizeof(double),
                                        cudaMemcpyDeviceToHost, st)
                      : cudaSuccess;
    if (e == cudaSuccess) call = "cudaStreamSynchronize", e = cudaStreamSynchronize(st);
    for (int i = 0, j = 0; i < n && e == cudaSuccess; i++)
        if (count[i] > 0) host_result[i] = got[j++];
    free(got);
    if (e != cudaSuccess)
        return ddp_cuda_fail_(call, __FILE__, __LINE__, cudaGetErrorString(e));
    return 0;
}

extern "C" int ddp_cuda_all_finite(size_t count, const float *x, int *host_result)
{
    *host_result = 1;
    cudaStream_t st = ddp_cuda_state_.stream;
    if (count == 0) {
        DDP_CU(cudaStreamSynchronize(st));
        return 0;
    }
    if (scratch()) return -1;
    DDP_CU(cudaMemsetAsync(flag_, 0, sizeof *flag_, st));
    DDP_COST(4.0 * count, 0, (double)count); // the flag is written only on a non-finite value
    DDP_LAUNCH(all_finite_k, ddp_blocks_for(count), kDdpThreads, st, count, x, flag_);
    DDP_CU_LAUNCHED();
    int bad;
    DDP_CU(cudaMemcpyAsync(&bad, flag_, sizeof bad, cudaMemcpyDeviceToHost, st));
    DDP_CU(cudaStreamSynchronize(st));
    *host_result = !bad;
    return 0;
}
