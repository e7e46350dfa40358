// block_reduce.h -- the block reduction of the kernels (loss.cu, reduce.cu):
// the sum of one double per thread over the block, in a fixed tree through
// static shared memory (no atomics: the same bits on every run, on a GPU
// and in the CPU emulation).  Device code only; include after
// ddp_cuda_rt.h.
#ifndef DDP_CUDA_BLOCK_REDUCE_H
#define DDP_CUDA_BLOCK_REDUCE_H

// The sum of every thread's `v` over the block, returned in every thread.
// sh: the caller's __shared__ double[kDdpThreads]; blockDim.x ==
// kDdpThreads; every thread of the block must call it.  sh may be reused
// as soon as it returns.
__device__ inline double ddp_block_sum(double *sh, double v)
{
    const int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = kDdpThreads / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); // sh may be reused at once
    return r;
}

#endif
