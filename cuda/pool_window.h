// pool_window.h -- max pooling's window scan (the forward) and its
// gradient's gather (the backward), for pool.cu's kernels and for the
// BatchNorm kernels that max-pool their output or read the pooled
// gradient (bn.cu, ddp_cuda_bn_maxpool_*): one definition, so that the
// fused kernels give maxpool_fwd's and maxpool_bwd's bits.
// argmax is the index in the unpadded input plane (iy*w + ix) of the first
// maximum in row-major window order; a NaN wins (of several NaNs the last);
// a padded cell never wins (the scan covers the window's cells inside the
// plane, from -inf); a window with no cell inside (pad >= k) gives -inf and
// argmax -1: as the CPU backend.
#ifndef DDP_CUDA_POOL_WINDOW_H
#define DDP_CUDA_POOL_WINDOW_H

#include <math.h>
#include <stdint.h>

#include "ddp_cuda.h"

// Output o (oy*ow + ox) of a plane: the max of v(i) over its window's cells
// i inside the plane, and where it is (*argmax).
template <class V>
__device__ inline float ddp_pool_max(const ddp_cuda_pool_t &d, int o, const V &v, int32_t *argmax)
{
    const int oy = o / d.ow, ox = o % d.ow;
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
            float val = v(i);
            if (val > bv || val != val) {
                bv = val;
                best = i;
            }
        }
    *argmax = best;
    return bv;
}

// The output windows covering coordinate i of the padded input (the input's
// coordinate + pad): o in [lo, hi].
__device__ inline void ddp_pool_covering(int i, int k, int stride, int on, int *lo, int *hi)
{
    // o*stride <= i < o*stride + k  <=>  (i - k)/stride < o <= i/stride
    int h = i / stride;
    int l = i - k + 1 <= 0 ? 0 : (i - k + stride) / stride;
    *lo = l;
    *hi = h < on - 1 ? h : on - 1;
}

// The gradient at cell i of a plane: the sum of the plane's gradient (dy[base + o]
// for its output o; DY: a float pointer or act16.h's ddp_act_in) over the
// windows whose argmax is i, in row-major window order from 0.  am(o): the
// argmax of the plane's window o (maxpool_fwd's, read back; or found again
// by ddp_pool_max over the values it scanned).
template <class DY, class AM>
__device__ inline float ddp_pool_grad(const ddp_cuda_pool_t &d, const DY &dy, size_t base,
                                      const AM &am, int i)
{
    const int iy = i / d.w, ix = i % d.w;
    int ylo, yhi, xlo, xhi;
    ddp_pool_covering(iy + d.pad, d.k, d.stride, d.oh, &ylo, &yhi);
    ddp_pool_covering(ix + d.pad, d.k, d.stride, d.ow, &xlo, &xhi);
    float acc = 0.0f;
    for (int oy = ylo; oy <= yhi; oy++)
        for (int ox = xlo; ox <= xhi; ox++) {
            int o = oy * d.ow + ox;
            if (am(o) == i) acc += dy[base + o];
        }
    return acc;
}

#endif
