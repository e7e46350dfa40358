// pool.cu -- max pooling (square window, -inf padding, floor mode),
// average pooling (no padding) and the global average pool.  Forward: a
// thread per output.  Backward: a thread per input pixel gathering the
// windows that cover it in row-major window order (the CPU backend's order
// of additions, no atomics).  argmax is the index in the unpadded input
// plane (iy*w + ix) of the first maximum in row-major window order; a NaN
// wins (of several NaNs the last); a padded cell never wins (the scan
// covers the window's cells inside the plane, from -inf); a window with no
// cell inside (pad >= k) gives -inf and argmax -1: as the CPU backend.
#include "ddp_cuda_rt.h"

#include <math.h>

namespace
{

#define GRID_STRIDE(i, count)                                                                      \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (count);                    \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void maxpool_fwd_kernel(ddp_cuda_pool_t d, const float *x, float *y, int32_t *argmax)
{
    const size_t ohw = (size_t)d.oh * d.ow, hw = (size_t)d.h * d.w;
    const size_t count = (size_t)d.n * d.c * ohw;
    GRID_STRIDE(idx, count)
    {
        size_t pl = idx / ohw;
        int o = (int)(idx % ohw), oy = o / d.ow, ox = o % d.ow;
        const float *xp = x + pl * hw;
        // the window's top-left corner, maybe in the padding, and its cells
        // inside the plane: ky in [ky0, ky1), kx in [kx0, kx1)
        const int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
        const int ky0 = y0 < 0 ? -y0 : 0, ky1 = d.h - y0 < d.k ? d.h - y0 : d.k;
        const int kx0 = x0 < 0 ? -x0 : 0, kx1 = d.w - x0 < d.k ? d.w - x0 : d.k;
        int best = ky0 < ky1 && kx0 < kx1 ? (y0 + ky0) * d.w + x0 + kx0 : -1;
        float bv = -INFINITY;
        for (int ky = ky0; ky < ky1; ky++)
            for (int kx = kx0; kx < kx1; kx++) {
                int i = (y0 + ky) * d.w + x0 + kx;
                float v = xp[i];
                if (v > bv || v != v) {
                    bv = v;
                    best = i;
                }
            }
        y[idx] = bv;
        argmax[idx] = best;
    }
}

// The output windows covering coordinate i of the padded input (the input's
// coordinate + pad): o in [lo, hi].
__device__ inline void covering(int i, int k, int stride, int on, int *lo, int *hi)
{
    // o*stride <= i < o*stride + k  <=>  (i - k)/stride < o <= i/stride
    int h = i / stride;
    int l = i - k + 1 <= 0 ? 0 : (i - k + stride) / stride;
    *lo = l;
    *hi = h < on - 1 ? h : on - 1;
}

__global__ void maxpool_bwd_kernel(ddp_cuda_pool_t d, const float *dy, const int32_t *argmax,
                                   float *dx)
{
    const size_t ohw = (size_t)d.oh * d.ow, hw = (size_t)d.h * d.w;
    const size_t count = (size_t)d.n * d.c * hw;
    GRID_STRIDE(idx, count)
    {
        size_t pl = idx / hw;
        int i = (int)(idx % hw), iy = i / d.w, ix = i % d.w;
        int ylo, yhi, xlo, xhi;
        covering(iy + d.pad, d.k, d.stride, d.oh, &ylo, &yhi);
        covering(ix + d.pad, d.k, d.stride, d.ow, &xlo, &xhi);
        const float *dyp = dy + pl * ohw;
        const int32_t *ap = argmax + pl * ohw;
        float acc = 0.0f;
        for (int oy = ylo; oy <= yhi; oy++)
            for (int ox = xlo; ox <= xhi; ox++) {
                int o = oy * d.ow + ox;
                if (ap[o] == i) acc += dyp[o];
            }
        dx[idx] = acc;
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
        covering(iy, d.k, d.stride, d.oh, &ylo, &yhi);
        covering(ix, d.k, d.stride, d.ow, &xlo, &xhi);
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
    DDP_COST(in_b, 8.0 * count, (double)count * d->k * d->k);
    DDP_LAUNCH(maxpool_fwd_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, *d,
               x, y, argmax);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_maxpool_bwd(const ddp_cuda_pool_t *d, const float *dy, const int32_t *argmax,
                         float *dx)
{
    size_t count = planes_of(d->n, d->c) * d->h * d->w;
    if (count == 0) return 0;
    const double out_n = (double)planes_of(d->n, d->c) * d->oh * d->ow;
    DDP_COST(8.0 * out_n, 4.0 * count, (double)count);
    DDP_LAUNCH(maxpool_bwd_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, *d,
               dy, argmax, dx);
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
