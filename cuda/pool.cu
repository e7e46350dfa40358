// pool.cu -- max pooling (square window, -inf padding, floor mode),
// average pooling (no padding) and the global average pool.  Forward: a
// thread per output.  Backward: a thread per input pixel gathering the
// windows that cover it in row-major window order (the CPU backend's order
// of additions, no atomics).  Max pooling's window scan and gather, and
// its argmax, are pool_window.h's.  Its output may be kept in bf16 (act16.h:
// where only a convolution reads it), the rounding of the maximum, and so
// its gradient, which its backward reads as such.
#include "ddp_cuda_rt.h"

#include <math.h>

#include "act16.h"
#include "pool_window.h"

namespace
{

#define GRID_STRIDE(i, count)                                                                      \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (count);                    \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void maxpool_fwd_kernel(ddp_cuda_pool_t d, const float *x, ddp_act_out y,
                                   int32_t *argmax)
{
    const size_t ohw = (size_t)d.oh * d.ow, hw = (size_t)d.h * d.w;
    const size_t count = (size_t)d.n * d.c * ohw;
    GRID_STRIDE(idx, count)
    {
        size_t pl = idx / ohw;
        const float *xp = x + pl * hw;
        int32_t best;
        float v = ddp_pool_max(d, (int)(idx % ohw), [xp](int i) { return xp[i]; }, &best);
        y.put(idx, v);
        argmax[idx] = best;
    }
}

__global__ void maxpool_bwd_kernel(ddp_cuda_pool_t d, ddp_act_in dy, const int32_t *argmax,
                                   float *dx)
{
    const size_t ohw = (size_t)d.oh * d.ow, hw = (size_t)d.h * d.w;
    const size_t count = (size_t)d.n * d.c * hw;
    GRID_STRIDE(idx, count)
    {
        size_t pl = idx / hw;
        const int32_t *ap = argmax + pl * ohw;
        dx[idx] = ddp_pool_grad(d, dy, pl * ohw, [ap](int o) { return ap[o]; }, (int)(idx % hw));
    }
}

// Average pooling has no padding (pool_dims_t: d.pad is 0).
__global__ void avgpool_fwd_kernel(ddp_cuda_pool_t d, const float *x, float *y)
{
    const size_t ohw = (size_t)d.oh * d.ow, hw = (size_t)d.h * d.w;
    const size_t count = (size_t)d.n * d.c * ohw;
    const float inv = 1.0f / (float)(d.k * d.k);
    GRID_STRIDE(idx, count)
    {
        size_t pl = idx / ohw;
        int o = (int)(idx % ohw), oy = o / d.ow, ox = o % d.ow;
        const float *win = x + pl * hw + (size_t)oy * d.stride * d.w + (size_t)ox * d.stride;
        float s = 0.0f;
        for (int ky = 0; ky < d.k; ky++)
            for (int kx = 0; kx < d.k; kx++) s += win[ky * d.w + kx];
        y[idx] = s * inv;
    }
}

__global__ void avgpool_bwd_kernel(ddp_cuda_pool_t d, const float *dy, float *dx)
{
    const size_t ohw = (size_t)d.oh * d.ow, hw = (size_t)d.h * d.w;
    const size_t count = (size_t)d.n * d.c * hw;
    const float inv = 1.0f / (float)(d.k * d.k);
    GRID_STRIDE(idx, count)
    {
        size_t pl = idx / hw;
        int i = (int)(idx % hw), iy = i / d.w, ix = i % d.w;
        int ylo, yhi, xlo, xhi;
        ddp_pool_covering(iy, d.k, d.stride, d.oh, &ylo, &yhi);
        ddp_pool_covering(ix, d.k, d.stride, d.ow, &xlo, &xhi);
        const float *dyp = dy + pl * ohw;
        float acc = 0.0f;
        for (int oy = ylo; oy <= yhi; oy++)
            for (int ox = xlo; ox <= xhi; ox++) acc += dyp[oy * d.ow + ox] * inv;
        dx[idx] = acc;
    }
}

// y[pl] = mean of plane pl (double sum): one block per plane.
__global__ void gap_fwd_kernel(size_t planes, int hw, const float *x, float *y)
{
    __shared__ double part[kDdpThreads];
    const double inv = hw > 0 ? 1.0 / hw : 0.0;
    for (size_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const float *xp = x + pl * hw;
        double s = 0.0;
        for (int k = threadIdx.x; k < hw; k += blockDim.x) s += (double)xp[k];
        part[threadIdx.x] = s;
        __syncthreads();
        for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
            if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
            __syncthreads();
        }
        if (threadIdx.x == 0) y[pl] = (float)(part[0] * inv);
        __syncthreads(); // part[0] read before the next plane overwrites it
    }
}

__global__ void gap_bwd_kernel(size_t planes, int hw, const float *dy, float *dx)
{
    const float inv = hw > 0 ? 1.0f / (float)hw : 0.0f;
    const size_t count = planes * hw;
    GRID_STRIDE(idx, count) dx[idx] = dy[idx / hw] * inv;
}

size_t planes_of(int n, int c)
{
    return (size_t)(n > 0 ? n : 0) * (size_t)(c > 0 ? c : 0);
}

} // namespace

extern "C" {

int ddp_cuda_maxpool_fwd(const ddp_cuda_pool_t *d, const float *x, float *y, int32_t *argmax)
{
    size_t count = planes_of(d->n, d->c) * d->oh * d->ow;
    if (count == 0) return 0;
    const double in_b = 4.0 * planes_of(d->n, d->c) * d->h * d->w; // every cell under a window
    const ddp_act_out yout = ddp_act_out_(y);
    DDP_COST(in_b, (yout.bytes() + 4.0) * count, (double)count * d->k * d->k);
    DDP_LAUNCH(maxpool_fwd_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, *d,
               x, yout, argmax);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_maxpool_bwd(const ddp_cuda_pool_t *d, const float *dy, const int32_t *argmax,
                         float *dx)
{
    size_t count = planes_of(d->n, d->c) * d->h * d->w;
    if (count == 0) return 0;
    const double out_n = (double)planes_of(d->n, d->c) * d->oh * d->ow;
    const ddp_act_in dyin = ddp_act_in_(dy);
    DDP_COST((dyin.bytes() + 4.0) * out_n, 4.0 * count, (double)count);
    DDP_LAUNCH(maxpool_bwd_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, *d,
               dyin, argmax, dx);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_avgpool_fwd(const ddp_cuda_pool_t *d, const float *x, float *y)
{
    size_t count = planes_of(d->n, d->c) * d->oh * d->ow;
    if (count == 0) return 0;
    const double in_b = 4.0 * planes_of(d->n, d->c) * d->h * d->w;
    DDP_COST(in_b, 4.0 * count, (double)count * d->k * d->k);
    DDP_LAUNCH(avgpool_fwd_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, *d,
               x, y);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_avgpool_bwd(const ddp_cuda_pool_t *d, const float *dy, float *dx)
{
    size_t count = planes_of(d->n, d->c) * d->h * d->w;
    if (count == 0) return 0;
    const double out_n = (double)planes_of(d->n, d->c) * d->oh * d->ow;
    DDP_COST(4.0 * out_n, 4.0 * count, (double)count);
    DDP_LAUNCH(avgpool_bwd_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, *d,
               dy, dx);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_gap_fwd(int n, int c, int hw, const float *x, float *y)
{
    size_t planes = planes_of(n, c);
    if (planes == 0) return 0;
    unsigned blocks = (unsigned)(planes < 4096 ? planes : 4096);
    DDP_COST(4.0 * planes * hw, 4.0 * planes, (double)planes * hw);
    DDP_LAUNCH(gap_fwd_kernel, blocks, kDdpThreads, ddp_cuda_state_.stream, planes, hw, x, y);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_gap_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    size_t count = planes_of(n, c) * (size_t)(hw > 0 ? hw : 0);
    if (count == 0) return 0;
    DDP_COST(4.0 * planes_of(n, c), 4.0 * count, (double)count);
    DDP_LAUNCH(gap_bwd_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream,
               planes_of(n, c), hw, dy, dx);
    DDP_CU_LAUNCHED();
    return 0;
}

} // extern "C"
