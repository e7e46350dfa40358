// kernels.cu -- CUDA kernels of the compute backend and their launchers.
#include <cstdio>
#include <cuda_runtime.h>

#include "ddp_cuda.h"

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(size_t count)
{
    size_t b = (count + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535 * 32 ? (b ? b : 1) : 65535 * 32);
}

__global__ void relu_fwd_kernel(size_t count, const float *__restrict__ x, float *__restrict__ y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] > 0.f ? x[i] : 0.f;
}

__global__ void relu_bwd_kernel(size_t count, const float *__restrict__ x,
                                const float *__restrict__ dy, float *__restrict__ dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        dx[i] = x[i] > 0.f ? dy[i] : 0.f;
}

} // namespace

extern "C" {

void ddp_cuda_version_string(char *buf, size_t n)
{
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaError_t e = cudaDriverGetVersion(&drv);
    if (e != cudaSuccess || drv == 0)
        snprintf(buf, n, "runtime %d.%d, no driver", rt / 1000, (rt % 1000) / 10);
    else
        snprintf(buf, n, "runtime %d.%d, driver %d.%d", rt / 1000, (rt % 1000) / 10, drv / 1000,
                 (drv % 1000) / 10);
}

int ddp_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
    return n;
}

const char *ddp_cuda_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

int ddp_cuda_relu_fwd(size_t count, const float *x, float *y)
{
    if (count == 0) return 0;
    relu_fwd_kernel<<<blocks_for(count), kThreads>>>(count, x, y);
    return (int)cudaGetLastError();
}

int ddp_cuda_relu_bwd(size_t count, const float *x, const float *dy, float *dx)
{
    if (count == 0) return 0;
    relu_bwd_kernel<<<blocks_for(count), kThreads>>>(count, x, dy, dx);
    return (int)cudaGetLastError();
}

int ddp_cuda_malloc(void **p, size_t bytes) { return (int)cudaMalloc(p, bytes ? bytes : 1); }
int ddp_cuda_free(void *p) { return (int)cudaFree(p); }
int ddp_cuda_upload(void *dst, const void *src, size_t bytes)
{
    return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}
int ddp_cuda_download(void *dst, const void *src, size_t bytes)
{
    return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

} // extern "C"
