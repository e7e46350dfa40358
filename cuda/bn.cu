// bn.cu -- batch normalisation over x[n, c, hw] (hw = 1: BatchNorm1d).  The
// per-channel sums (bn_stats, bn_bwd_stats) are two passes: blocks of
// (channel, chunk of samples), each thread adding its share in double and
// the block a fixed tree through static shared memory, then each channel's
// chunks added in order: deterministic (no atomics, no dependence on block
// order), and enough blocks for the GPU when channels are few.
// For hw = 1 a channel is a strided column of x[n, c]: there a block takes
// 32 channels at a time with 32 lanes of rows, so that a warp reads 32
// consecutive floats of one row.
// finalize (the CPU backend's ddp_bn_finalize_ch, backend_math.h), eval
// params and the coefficients in double, as the CPU backend.  A ReLU fused
// after the BatchNorm (compute.h): the forward writes relu(y), the backward
// kernels mask dy where y, recomputed from x (ddp_bn_ab), is <= 0.
// x and y may be kept in bf16 (act16.h: a convolution's output that only
// the BatchNorm reads; the output where only a convolution reads it), and
// so their gradients dx and dy: the kernels read and write them as such
// and compute in fp32 as ever.  An x kept in bf16 may carry its
// convolution's bias (ddp_cuda_act_bias), which the kernels add to each
// value as they read it (ddp_act_in::at): the value the convolution's fp32
// output would hold.
// A BatchNorm whose only reader is a max pooling (ddp_cuda_bn_maxpool_*):
// the forward pools the output it computes (pool_window.h's scan) and
// writes the pooled values and argmax, never the BatchNorm's output; the
// backward kernels read the pooled gradient and gather each cell's dy as
// maxpool_bwd does, never writing it: the bits of the two layers run alone.
// The argmax may be left unwritten (NULL): the backward then finds each
// window's maximum again from x as the forward found it (bn_out, the same
// expression), instead of reading 4 bytes per window twice.
#include "ddp_cuda_rt.h"

#include <stdlib.h>
#include <string.h>

#include "act16.h"
#include "block_reduce.h"
#include "pool_window.h"

#include "backend_math.h"

namespace
{

#define GRID_STRIDE(i, count)                                                                      \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (count);                    \
         i += (size_t)gridDim.x * blockDim.x)

// Sums a1 and a2 of the block's threads into a[0], b[0]; every thread must call.
__device__ inline void block_sum2(double *a, double *b, double a1, double a2)
{
    a[threadIdx.x] = a1;
    b[threadIdx.x] = a2;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) {
            a[threadIdx.x] += a[threadIdx.x + h];
            b[threadIdx.x] += b[threadIdx.x + h];
        }
        __syncthreads();
    }
}

// The gradient a fused ReLU passes back at x: dy where the BatchNorm's output
// x a + b (ddp_bn_ab, as bn_fwd_kernel computed it) is kept; relu false: dy.
__device__ inline float relu_dy(bool relu, float x, float a, float b, float dy)
{
    return !relu || ddp_relu_keep(x * a + b) ? dy : 0.0f;
}

// The BatchNorm's output at a value xv of x: x a + b (ddp_bn_ab), and its
// fused ReLU's where relu (bn_fwd_kernel's expression: the same bits).
__device__ inline float bn_out(float xv, float a, float b, int relu)
{
    const float u = xv * a + b;
    return relu && u < 0.0f ? 0.0f : u;
}

// What the backward under a max pooling reads of the forward
// (ddp_cuda_bn_maxpool_*): the pooling d; its argmax, or NULL where the
// forward kept none; the BatchNorm's gamma and beta_ and whether a ReLU
// follows it (to find each window's maximum again without the argmax).
struct pool_fwd {
    const ddp_cuda_pool_t *d;
    const int32_t *argmax;
    const float *gamma, *beta_;
    int relu;
};

// dy as the backward kernels read it, at element off of x (plane pl,
// cell k): the gradient buffer's (plain_dy), or the gradient of the max
// pooling of the BatchNorm's output gathered as maxpool_bwd does
// (pooled_dy: d, the pooling; dy its output's gradient; argmax its
// forward's, or NULL: each window's found again as bn_maxpool_fwd_kernel
// found it, from x and the statistics and parameters the forward used).
struct plain_dy {
    ddp_act_in v;
    __device__ float operator()(size_t off, size_t, int) const { return v[off]; }
};
struct pooled_dy {
    ddp_cuda_pool_t d;
    ddp_act_in dy;
    const int32_t *argmax;
    ddp_act_in x;
    const float *mean, *invstd, *gamma, *beta_;
    int relu;
    __device__ float operator()(size_t, size_t pl, int k) const
    {
        const size_t ohw = (size_t)d.oh * d.ow;
        if (argmax) {
            const int32_t *ap = argmax + pl * ohw;
            return ddp_pool_grad(d, dy, pl * ohw, [ap](int o) { return ap[o]; }, k);
        }
        const int ch = (int)(pl % (size_t)d.c);
        float fa, fb; // the forward's a, b
        ddp_bn_ab(mean[ch], invstd[ch], gamma[ch], beta_[ch], &fa, &fb);
        const size_t base = pl * (size_t)d.h * d.w;
        const auto v = [&](int i) { return bn_out(x.at(base + (size_t)i, ch), fa, fb, relu); };
        return ddp_pool_grad(d, dy, pl * ohw, [&](int o) {
            int32_t best;
            ddp_pool_max(d, o, v, &best);
            return best;
        }, k);
    }
};
pooled_dy pooled_(const pool_fwd &p, ddp_act_in dy, ddp_act_in x, const float *mean,
                  const float *invstd)
{
    return pooled_dy{*p.d, dy, p.argmax, x, mean, invstd, p.gamma, p.beta_, p.relu};
}

// BatchNorm2d's sums in two passes over many blocks: the samples of a
// channel are cut into S chunks (bn_chunks: enough blocks to fill the GPU
// when there are few channels), block (ch, s) sums its chunk's values --
// threads over the chunk's (sample, pixel) pairs, consecutive threads on
// consecutive pixels -- in a fixed tree, and one thread per channel adds
// the S partials in order.  The order depends only on the shapes.
// kBwd false: the partials of x and x^2; true: of dy and dy (x - mean), dy
// masked by a fused ReLU where rb (its BatchNorm's beta_, with invstd and
// gamma rg) is given (relu_dy: the mask recomputed from x).
template <bool kBwd, class Dy>
__device__ void bn_partials(int n, int c, int hw, int chunks, ddp_act_in x, const Dy &dy,
                            const float *mean, const float *invstd, const float *rg,
                            const float *rb, double *part)
{
    __shared__ double s1[kDdpThreads], s2[kDdpThreads];
    const int s = blockIdx.y;
    const int i0 = (int)((long long)n * s / chunks), i1 = (int)((long long)n * (s + 1) / chunks);
    const unsigned per = (unsigned)(i1 - i0) * (unsigned)hw; // < 2^31 (the launcher checks)
    for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
        const float m = kBwd ? mean[ch] : 0.0f;
        float ra = 0.0f, rbc = 0.0f;
        if (kBwd && rb) ddp_bn_ab(m, invstd[ch], rg[ch], rb[ch], &ra, &rbc);
        double a1 = 0.0, a2 = 0.0;
        for (unsigned e = threadIdx.x; e < per; e += blockDim.x) {
            const unsigned i = e / (unsigned)hw, k = e - i * (unsigned)hw;
            const size_t pl = (size_t)(i0 + i) * c + ch, off = pl * hw + k;
            const float xv = x.at(off, ch);
            if (kBwd) {
                float g = relu_dy(rb != nullptr, xv, ra, rbc, dy(off, pl, (int)k));
                a1 += (double)g;
                a2 += (double)(g * (xv - m));
            } else {
                double v = xv;
                a1 += v;
                a2 += v * v;
            }
        }
        block_sum2(s1, s2, a1, a2);
        if (threadIdx.x == 0) {
            part[2 * ((size_t)ch * chunks + s)] = s1[0];
            part[2 * ((size_t)ch * chunks + s) + 1] = s2[0];
        }
        __syncthreads(); // s1[0], s2[0] read before the next channel
    }
}

template <bool kBwd>
__global__ void bn_partials_kernel(int n, int c, int hw, int chunks, ddp_act_in x, plain_dy dy,
                                   const float *mean, const float *invstd, const float *rg,
                                   const float *rb, double *part)
{
    bn_partials<kBwd>(n, c, hw, chunks, x, dy, mean, invstd, rg, rb, part);
}

// the backward's partials under a max pooling (pooled_dy)
__global__ void bn_maxpool_partials_kernel(int n, int c, int hw, int chunks, ddp_act_in x,
                                           pooled_dy dy, const float *mean, const float *invstd,
                                           const float *rg, const float *rb, double *part)
{
    bn_partials<true>(n, c, hw, chunks, x, dy, mean, invstd, rg, rb, part);
}

// Channel ch's partials (bn_partials: two per chunk) added in order.
__device__ inline void combine_ch(size_t ch, int chunks, const double *part, double *a1,
                                  double *a2)
{
    double s1 = 0.0, s2 = 0.0;
    for (int s = 0; s < chunks; s++) {
        s1 += part[2 * (ch * chunks + s)];
        s2 += part[2 * (ch * chunks + s) + 1];
    }
    *a1 = s1, *a2 = s2;
}

// stats[ch] = sum x, stats[c + ch] = sum x^2: channel ch's partials in order.
__global__ void bn_stats_combine_kernel(int c, int chunks, const double *part, double *stats)
{
    GRID_STRIDE(ch, (size_t)c)
    {
        double a1, a2;
        combine_ch(ch, chunks, part, &a1, &a2);
        stats[ch] = a1;
        stats[c + ch] = a2;
    }
}

// BatchNorm1d's sums: kColTile channels per block, kColLanes lanes of rows
// each (lane r adds rows r, r + kColLanes, ... in order), then a fixed tree
// over the lanes.
constexpr int kColTile = 32, kColLanes = 32;
typedef double lane_sums_t[kColLanes][kColTile + 1]; // +1: no bank conflicts

// Sums a1 and a2 over the lanes into a[0][x], b[0][x]; every thread must call.
__device__ inline void lane_sum2(lane_sums_t &a, lane_sums_t &b, double a1, double a2)
{
    const int col = threadIdx.x, lane = threadIdx.y;
    a[lane][col] = a1;
    b[lane][col] = a2;
    __syncthreads();
    for (int w = kColLanes / 2; w > 0; w /= 2) {
        if (lane < w) {
            a[lane][col] += a[lane + w][col];
            b[lane][col] += b[lane + w][col];
        }
        __syncthreads();
    }
}

// the sums for hw = 1
__global__ void bn1d_stats_kernel(int n, int c, ddp_act_in x, double *stats)
{
    __shared__ lane_sums_t s1, s2;
    // the loop bound is the same for every thread of the block (barriers)
    for (size_t c0 = (size_t)blockIdx.x * kColTile; c0 < (size_t)c;
         c0 += (size_t)gridDim.x * kColTile) {
        const size_t ch = c0 + threadIdx.x;
        double a1 = 0.0, a2 = 0.0;
        if (ch < (size_t)c)
            for (int i = threadIdx.y; i < n; i += kColLanes) {
                double v = x.at((size_t)i * c + ch, (int)ch);
                a1 += v;
                a2 += v * v;
            }
        lane_sum2(s1, s2, a1, a2);
        if (threadIdx.y == 0 && ch < (size_t)c) {
            stats[ch] = s1[0][threadIdx.x];
            stats[c + ch] = s2[0][threadIdx.x];
        }
        __syncthreads(); // s1[0], s2[0] read before the next channels
    }
}

__global__ void bn_finalize_kernel(int c, const double *stats, double count, float eps,
                                   float momentum, int update_running, float *mean, float *invstd,
                                   float *running_mean, float *running_var)
{
    GRID_STRIDE(ch, (size_t)c)
    ddp_bn_finalize_ch((int)ch, c, stats, count, eps, momentum, update_running, mean, invstd,
                       running_mean, running_var);
}

// bn_stats_combine_kernel then bn_finalize_kernel, a thread per channel:
// the statistics in their order, then the parameters from them (the same
// thread reads what it wrote).
__global__ void bn_stats_finalize_kernel(int c, int chunks, const double *part, double *stats,
                                         double count, float eps, float momentum,
                                         int update_running, float *mean, float *invstd,
                                         float *running_mean, float *running_var)
{
    GRID_STRIDE(ch, (size_t)c)
    {
        double a1, a2;
        combine_ch(ch, chunks, part, &a1, &a2);
        stats[ch] = a1;
        stats[c + ch] = a2;
        ddp_bn_finalize_ch((int)ch, c, stats, count, eps, momentum, update_running, mean, invstd,
                           running_mean, running_var);
    }
}

__global__ void bn_eval_params_kernel(int c, const float *running_mean, const float *running_var,
                                      float eps, float *mean, float *invstd)
{
    GRID_STRIDE(ch, (size_t)c)
    {
        mean[ch] = running_mean[ch];
        invstd[ch] = (float)(1.0 / sqrt((double)running_var[ch] + (double)eps));
    }
}

// y = x a + b with a = invstd gamma, b = beta_ - mean a (ddp_bn_ab); res:
// y + res, as add_k (a block's add the BatchNorm is fused into); relu:
// relu(y), as relu_fwd_k.  I: the index type (DDP_LAUNCH_IDX).
template <class I>
__global__ void bn_fwd_kernel(int n, int c, int hw, ddp_act_in x, const float *mean,
                              const float *invstd, const float *gamma, const float *beta_,
                              ddp_act_out y, int relu, const float *res)
{
    const I count = (I)n * c * hw;
    DDP_GRID_STRIDE(I, idx, count)
    {
        int ch = (int)((idx / (I)hw) % (I)c);
        float a, b;
        ddp_bn_ab(mean[ch], invstd[ch], gamma[ch], beta_[ch], &a, &b);
        float v = x.at(idx, ch) * a + b;
        if (res) v = v + res[idx];
        y.put(idx, relu && v < 0.0f ? 0.0f : v);
    }
}

// bn_fwd_kernel's output (no res) max-pooled over d (d's n, c, h, w are
// the BatchNorm's): y and argmax (unless NULL) as maxpool_fwd_kernel's of
// that output, a thread per pooled output computing the BatchNorm of its
// window's cells.  I: the index type (DDP_LAUNCH_IDX).
template <class I>
__global__ void bn_maxpool_fwd_kernel(ddp_cuda_pool_t d, ddp_act_in x, const float *mean,
                                      const float *invstd, const float *gamma,
                                      const float *beta_, int relu, ddp_act_out y,
                                      int32_t *argmax)
{
    const I ohw = (I)d.oh * d.ow, hw = (I)d.h * d.w;
    const I count = (I)d.n * d.c * ohw;
    DDP_GRID_STRIDE(I, idx, count)
    {
        const I pl = idx / ohw;
        const int ch = (int)(pl % (I)d.c);
        float a, b;
        ddp_bn_ab(mean[ch], invstd[ch], gamma[ch], beta_[ch], &a, &b);
        const I base = pl * hw;
        int32_t best;
        float v = ddp_pool_max(d, (int)(idx - pl * ohw), [&](int i) {
            return bn_out(x.at(base + (I)i, ch), a, b, relu);
        }, &best);
        y.put(idx, v);
        if (argmax) argmax[idx] = best;
    }
}

// gstats[ch] = sum dy, gstats[c + ch] = invstd sum dy (x - mean); dgamma,
// dbeta with beta: channel ch's partials (bn_partials_kernel<true>) in order.
__global__ void bn_bwd_stats_combine_kernel(int c, int chunks, const double *part,
                                            const float *invstd, double *gstats, float *dgamma,
                                            float *dbeta, float beta)
{
    GRID_STRIDE(ch, (size_t)c)
    {
        double a1, a2;
        combine_ch(ch, chunks, part, &a1, &a2);
        double g1 = a1, g2 = a2 * (double)invstd[ch];
        gstats[ch] = g1;
        gstats[c + ch] = g2;
        if (dgamma) dgamma[ch] = (float)(beta == 0.0f ? g2 : beta * dgamma[ch] + g2);
        if (dbeta) dbeta[ch] = (float)(beta == 0.0f ? g1 : beta * dbeta[ch] + g1);
    }
}

// the backward sums for hw = 1
__global__ void bn1d_bwd_stats_kernel(int n, int c, ddp_act_in x, ddp_act_in dy,
                                      const float *mean, const float *invstd, double *gstats,
                                      float *dgamma, float *dbeta, float beta, const float *rg,
                                      const float *rb)
{
    __shared__ lane_sums_t s1, s2;
    for (size_t c0 = (size_t)blockIdx.x * kColTile; c0 < (size_t)c;
         c0 += (size_t)gridDim.x * kColTile) {
        const size_t ch = c0 + threadIdx.x;
        double a1 = 0.0, a2 = 0.0;
        if (ch < (size_t)c) {
            const float m = mean[ch];
            float ra = 0.0f, rbc = 0.0f;
            if (rb) ddp_bn_ab(m, invstd[ch], rg[ch], rb[ch], &ra, &rbc);
            for (int i = threadIdx.y; i < n; i += kColLanes) {
                size_t off = (size_t)i * c + ch;
                const float xv = x.at(off, (int)ch);
                float g = relu_dy(rb != nullptr, xv, ra, rbc, dy[off]);
                a1 += (double)g;
                a2 += (double)(g * (xv - m));
            }
        }
        lane_sum2(s1, s2, a1, a2);
        if (threadIdx.y == 0 && ch < (size_t)c) {
            double g1 = s1[0][threadIdx.x], g2 = s2[0][threadIdx.x] * (double)invstd[ch];
            gstats[ch] = g1;
            gstats[c + ch] = g2;
            if (dgamma) dgamma[ch] = (float)(beta == 0.0f ? g2 : beta * dgamma[ch] + g2);
            if (dbeta) dbeta[ch] = (float)(beta == 0.0f ? g1 : beta * dbeta[ch] + g1);
        }
        __syncthreads();
    }
}

// dx = A dy + B (x - mean) + C per channel: A = gamma invstd,
// B = -A invstd mdyx, C = -A mdy (coefficients in double, as the CPU
// backend); dy masked by a fused ReLU where rb is given (relu_dy).
__device__ inline void bn_dx_coefs(int c, int ch, const float *invstd, const float *gamma,
                                   const double *gstats, double count, float *A, float *B,
                                   float *C)
{
    double a = (double)gamma[ch] * invstd[ch];
    double mdy = count > 0 ? gstats[ch] / count : 0;
    double mdyx = count > 0 ? gstats[c + ch] / count : 0;
    *A = (float)a, *B = (float)(-a * invstd[ch] * mdyx), *C = (float)(-a * mdy);
}
// one element (one expression for every kernel: the same contraction)
__device__ inline float bn_dx(float A, float B, float C, float g, float xv, float m)
{
    return A * g + B * (xv - m) + C;
}

template <class I, class Dy>
__device__ void bn_bwd_data(int n, int c, int hw, ddp_act_in x, const Dy &dy, const float *mean,
                            const float *invstd, const float *gamma, const double *gstats,
                            double count, ddp_act_out dx, const float *rb)
{
    const I total = (I)n * c * hw;
    DDP_GRID_STRIDE(I, idx, total)
    {
        const I pl = idx / (I)hw;
        const int ch = (int)(pl % (I)c);
        float A, B, C;
        bn_dx_coefs(c, ch, invstd, gamma, gstats, count, &A, &B, &C);
        float ra = 0.0f, rbc = 0.0f;
        if (rb) ddp_bn_ab(mean[ch], invstd[ch], gamma[ch], rb[ch], &ra, &rbc);
        const float xv = x.at(idx, ch);
        float g = relu_dy(rb != nullptr, xv, ra, rbc, dy(idx, pl, (int)(idx - pl * (I)hw)));
        dx.put(idx, bn_dx(A, B, C, g, xv, mean[ch]));
    }
}

template <class I>
__global__ void bn_bwd_data_kernel(int n, int c, int hw, ddp_act_in x, plain_dy dy,
                                   const float *mean, const float *invstd, const float *gamma,
                                   const double *gstats, double count, ddp_act_out dx,
                                   const float *rb)
{
    bn_bwd_data<I>(n, c, hw, x, dy, mean, invstd, gamma, gstats, count, dx, rb);
}

// dx under a max pooling (pooled_dy)
template <class I>
__global__ void bn_maxpool_bwd_data_kernel(int n, int c, int hw, ddp_act_in x, pooled_dy dy,
                                           const float *mean, const float *invstd,
                                           const float *gamma, const double *gstats,
                                           double count, ddp_act_out dx, const float *rb)
{
    bn_bwd_data<I>(n, c, hw, x, dy, mean, invstd, gamma, gstats, count, dx, rb);
}

// dx where x carries its convolution's bias and dx is kept in bf16 for that
// convolution (ddp_bf16_bias_sums_put_): a block per (sample i, channel ch)
// plane, which also sums the plane's fp32 dx into part[ch n + i] as
// conv.cu's conv_bias_planes_kernel sums a plane of the fp32 gradient
// (thread t the elements t, t + blockDim, ..., then ddp_block_sum's tree):
// the bias gradient's sums without dx in fp32.
template <class Dy>
__global__ void bn_bwd_data_planes_kernel(int n, int c, int hw, ddp_act_in x, Dy dy,
                                          const float *mean, const float *invstd,
                                          const float *gamma, const double *gstats,
                                          double count, ddp_act_out dx, const float *rb,
                                          double *part)
{
    __shared__ double sum[kDdpThreads];
    for (int i = blockIdx.y; i < n; i += gridDim.y)
        for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
            float A, B, C;
            bn_dx_coefs(c, ch, invstd, gamma, gstats, count, &A, &B, &C);
            float ra = 0.0f, rbc = 0.0f;
            if (rb) ddp_bn_ab(mean[ch], invstd[ch], gamma[ch], rb[ch], &ra, &rbc);
            const size_t pl = (size_t)i * c + ch;
            double t = 0.0;
            for (size_t k = threadIdx.x; k < (size_t)hw; k += blockDim.x) {
                const size_t idx = pl * hw + k;
                const float xv = x.at(idx, ch);
                float g = relu_dy(rb != nullptr, xv, ra, rbc, dy(idx, pl, (int)k));
                const float v = bn_dx(A, B, C, g, xv, mean[ch]);
                dx.put(idx, v);
                t += (double)v;
            }
            const double total = ddp_block_sum(sum, t); // sum reusable after it
            if (threadIdx.x == 0) part[(size_t)ch * n + i] = total;
        }
}

unsigned channel_blocks(int c)
{
    return (unsigned)(c < 4096 ? c : 4096);
}

unsigned column_blocks(int c)
{
    size_t tiles = ((size_t)c + kColTile - 1) / kColTile;
    return (unsigned)(tiles < 65535 ? tiles : 65535);
}

const dim3 kColBlock(kColTile, kColLanes);

// The chunks of a channel's samples (bn_partials_kernel): about 4 blocks
// per SM of an H200 (132) over all channels, at most one per sample, and a
// chunk's (sample, pixel) pairs within 32 bits.
int bn_chunks(int n, int c, int hw)
{
    long long want = (528 + (long long)c - 1) / c;
    if (want > n) want = n;
    if (want > 65535) want = 65535;
    while (want < n && (long long)((n + want - 1) / want) * hw >= (1LL << 31)) want++;
    return want < 1 ? 1 : (int)want;
}

// The bytes the backward kernels read of dy over n x c planes of hw: its
// own, or under a max pooling (pool) the pooled gradient's and argmax's,
// every window's once (no argmax: gamma and beta_ to find it again).
double dy_bytes(const ddp_act_in &dy, const pool_fwd *pool, int n, int c, int hw)
{
    if (!pool) return dy.bytes() * n * c * (double)hw;
    return (dy.bytes() + (pool->argmax ? 4.0 : 0)) * n * c * pool->d->oh * pool->d->ow +
           (pool->argmax ? 0 : 8.0 * c);
}

// The FLOPs of finding each window's argmax again (pool without one): a
// window's cells scanned (bn_out: up to 3 each) once for each of them.
double refind_flops(const pool_fwd *pool, int n, int c)
{
    if (!pool || pool->argmax) return 0;
    const double kk = (double)pool->d->k * pool->d->k;
    return 3.0 * kk * kk * n * c * pool->d->oh * pool->d->ow;
}

// Launches bn_partials_kernel<kBwd> over n x hw samples of c channels into
// the partials buffer: *part and *chunks are what the combine kernel reads.
// pool (kBwd only; NULL: none): dy is the gradient of the max pooling of
// the BatchNorm's output over pool->d (bn_maxpool_partials_kernel).
template <bool kBwd>
int launch_partials(int n, int c, int hw, const float *x_, const float *dy_, const pool_fwd *pool,
                    const float *mean, const float *invstd, const float *rg, const float *rb,
                    cudaStream_t s, const double **part, int *chunks)
{
    *chunks = bn_chunks(n, c, hw);
    double *p;
    if (ddp_cuda_partials_(2 * (size_t)c * *chunks, &p)) return -1; // two per (channel, chunk)
    const double count = (double)n * c * hw;
    const ddp_act_in x = ddp_act_in_(x_), dy = ddp_act_in_(dy_);
    const double dy_b = kBwd ? dy_bytes(dy, pool, n, c, hw) : 0;
    DDP_COST(x.bytes() * count + x.bias_bytes(c) + dy_b + (kBwd ? 4.0 * c : 0) +
                 (rb ? 12.0 * c : 0),
             16.0 * c * *chunks, (rb ? 5.0 : 3.0) * count + refind_flops(pool, n, c));
    if (pool)
        DDP_LAUNCH(bn_maxpool_partials_kernel, dim3(channel_blocks(c), *chunks), kDdpThreads, s,
                   n, c, hw, *chunks, x, pooled_(*pool, dy, x, mean, invstd), mean, invstd, rg,
                   rb, p);
    else
        DDP_LAUNCH(bn_partials_kernel<kBwd>, dim3(channel_blocks(c), *chunks), kDdpThreads, s, n,
                   c, hw, *chunks, x, plain_dy{dy}, mean, invstd, rg, rb, p);
    DDP_CU_LAUNCHED();
    *part = p;
    return 0;
}

// bn_bwd_stats of compute.h; pool (NULL: none): as launch_partials
int bwd_stats(int n, int c, int hw, const float *x, const float *dy, const pool_fwd *pool,
              const float *mean, const float *invstd, double *gstats, float *dgamma, float *dbeta,
              float beta, const float *relu_gamma, const float *relu_beta)
{
    if (c <= 0) return 0;
    // n == 0 or hw == 0: the block sums are 0 (no element), dgamma and dbeta
    // still take beta.
    int nn = n > 0 && hw > 0 ? n : 0, hh = hw > 0 ? hw : 1;
    cudaStream_t s = ddp_cuda_state_.stream;
    // dgamma and dbeta: read with beta, written when given
    const double gb = (dgamma ? 4.0 * c : 0) + (dbeta ? 4.0 * c : 0);
    if (hh == 1 && !pool) {
        const ddp_act_in xin = ddp_act_in_(x), dyin = ddp_act_in_(dy);
        DDP_COST((xin.bytes() + dyin.bytes()) * nn * c + xin.bias_bytes(c) + 8.0 * c +
                     (beta != 0.0f ? gb : 0) + (relu_beta ? 8.0 * c : 0),
                 16.0 * c + gb, (relu_beta ? 6.0 : 4.0) * nn * c);
        DDP_LAUNCH(bn1d_bwd_stats_kernel, column_blocks(c), kColBlock, s, nn, c, xin, dyin, mean,
                   invstd, gstats, dgamma, dbeta, beta, relu_gamma, relu_beta);
        DDP_CU_LAUNCHED();
        return 0;
    }
    const double *part = nullptr;
    int chunks = 0;
    if (launch_partials<true>(nn, c, hh, x, dy, pool, mean, invstd, relu_gamma, relu_beta, s, &part,
                              &chunks))
        return -1;
    DDP_COST(16.0 * c * chunks + 4.0 * c + (beta != 0.0f ? gb : 0), 16.0 * c + gb,
             2.0 * c * chunks);
    DDP_LAUNCH(bn_bwd_stats_combine_kernel, ddp_blocks_for((size_t)c), kDdpThreads, s, c, chunks,
               part, invstd, gstats, dgamma, dbeta, beta);
    DDP_CU_LAUNCHED();
    return 0;
}

// bn_bwd_data of compute.h; pool (NULL: none): as launch_partials
int bwd_data(int n, int c, int hw, const float *x, const float *dy, const pool_fwd *pool,
             const float *mean, const float *invstd, const float *gamma, const double *gstats,
             double count, float *dx, const float *relu_beta)
{
    if (n <= 0 || c <= 0 || hw <= 0 || !dx) return 0;
    size_t total = (size_t)n * c * hw;
    const ddp_act_in xin = ddp_act_in_(x), dyin = ddp_act_in_(dy);
    const ddp_act_out dxout = ddp_act_out_(dx);
    const double dy_b = dy_bytes(dyin, pool, n, c, hw);
    // dx kept in bf16 for a convolution that carries its bias: its bias
    // gradient's plane sums too (bn_bwd_data_planes_kernel)
    const bool sums = xin.bias && dxout.h;
    double *part = nullptr;
    if (sums && !(part = ddp_bf16_bias_sums_put_(dx, n, c))) return -1;
    DDP_COST(xin.bytes() * total + xin.bias_bytes(c) + dy_b + 32.0 * c +
                 (relu_beta ? 4.0 * c : 0),
             dxout.bytes() * total + (sums ? 8.0 * n * c : 0),
             (relu_beta ? 7.0 : 5.0) * total + (sums ? 1.0 * total : 0) +
                 refind_flops(pool, n, c));
    cudaStream_t s = ddp_cuda_state_.stream;
    if (sums) {
        const dim3 planes((unsigned)(c < 4096 ? c : 4096), (unsigned)(n < 65535 ? n : 65535));
        if (pool)
            DDP_LAUNCH(bn_bwd_data_planes_kernel<pooled_dy>, planes, kDdpThreads, s, n, c, hw, xin,
                       pooled_(*pool, dyin, xin, mean, invstd), mean, invstd, gamma, gstats, count,
                       dxout, relu_beta, part);
        else
            DDP_LAUNCH(bn_bwd_data_planes_kernel<plain_dy>, planes, kDdpThreads, s, n, c, hw, xin,
                       plain_dy{dyin}, mean, invstd, gamma, gstats, count, dxout, relu_beta, part);
    } else if (pool)
        DDP_LAUNCH_IDX(bn_maxpool_bwd_data_kernel, total, ddp_blocks_for(total), kDdpThreads, s,
                       n, c, hw, xin, pooled_(*pool, dyin, xin, mean, invstd), mean, invstd,
                       gamma, gstats, count, dxout, relu_beta);
    else
        DDP_LAUNCH_IDX(bn_bwd_data_kernel, total, ddp_blocks_for(total), kDdpThreads, s, n, c, hw,
                       xin, plain_dy{dyin}, mean, invstd, gamma, gstats, count, dxout, relu_beta);
    DDP_CU_LAUNCHED();
    return 0;
}

// A pooling over the BatchNorm's output (ddp_cuda_bn_maxpool_*): its
// planes are the BatchNorm's, of more than one cell (a plane of one cell
// takes the BatchNorm1d kernels, whose sums are in another order); 0 when
// it is such a one.
int pool_refused(const char *fn, const ddp_cuda_pool_t *d)
{
    if (d->h * d->w > 1 && d->oh > 0 && d->ow > 0) return 0;
    return ddp_cuda_fail_(fn, __FILE__, __LINE__,
                          "max pooling fused into a BatchNorm needs planes of more than one "
                          "cell and a pooled output");
}

} // namespace

extern "C" {

int ddp_cuda_bn_stats(int n, int c, int hw, const float *x, double *stats)
{
    if (c <= 0) return 0;
    cudaStream_t s = ddp_cuda_state_.stream;
    if (n <= 0 || hw <= 0) {
        ddp_cost_copy_("cudaMemsetAsync", 0, 16.0 * c);
        DDP_CU(cudaMemsetAsync(stats, 0, 2 * (size_t)c * sizeof *stats, s));
        return 0;
    }
    if (hw == 1) {
        const ddp_act_in xin = ddp_act_in_(x);
        DDP_COST(xin.bytes() * n * c + xin.bias_bytes(c), 16.0 * c, 3.0 * n * c);
        DDP_LAUNCH(bn1d_stats_kernel, column_blocks(c), kColBlock, s, n, c, xin, stats);
        DDP_CU_LAUNCHED();
        return 0;
    }
    const double *part = nullptr;
    int chunks = 0;
    if (launch_partials<false>(n, c, hw, x, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                               s, &part, &chunks))
        return -1;
    DDP_COST(16.0 * c * chunks, 16.0 * c, 2.0 * c * chunks);
    DDP_LAUNCH(bn_stats_combine_kernel, ddp_blocks_for((size_t)c), kDdpThreads, s, c, chunks,
               part, stats);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_bn_finalize(int c, const double *stats, double count, float eps, float momentum,
                         int update_running, float *mean, float *invstd, float *running_mean,
                         float *running_var)
{
    if (c <= 0) return 0;
    DDP_COST(16.0 * c + (update_running ? 8.0 * c : 0), (update_running ? 16.0 : 8.0) * c,
             10.0 * c);
    DDP_LAUNCH(bn_finalize_kernel, ddp_blocks_for((size_t)c), kDdpThreads, ddp_cuda_state_.stream,
               c, stats, count, eps, momentum, update_running, mean, invstd, running_mean,
               running_var);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_bn_stats_finalize(int n, int c, int hw, const float *x, double *stats, double count,
                               float eps, float momentum, int update_running, float *mean,
                               float *invstd, float *running_mean, float *running_var)
{
    if (c <= 0) return 0;
    if (n <= 0 || hw <= 1) // a fill or BatchNorm1d's kernel: nothing to combine
        return ddp_cuda_bn_stats(n, c, hw, x, stats) != 0
                   ? -1
                   : ddp_cuda_bn_finalize(c, stats, count, eps, momentum, update_running, mean,
                                          invstd, running_mean, running_var);
    cudaStream_t s = ddp_cuda_state_.stream;
    const double *part = nullptr;
    int chunks = 0;
    if (launch_partials<false>(n, c, hw, x, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                               s, &part, &chunks))
        return -1;
    DDP_COST(16.0 * c * chunks + (update_running ? 8.0 * c : 0),
             16.0 * c + (update_running ? 16.0 : 8.0) * c, 2.0 * c * chunks + 10.0 * c);
    DDP_LAUNCH(bn_stats_finalize_kernel, ddp_blocks_for((size_t)c), kDdpThreads, s, c, chunks, part,
               stats, count, eps, momentum, update_running, mean, invstd, running_mean,
               running_var);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_bn_eval_params(int c, const float *running_mean, const float *running_var, float eps,
                            float *mean, float *invstd)
{
    if (c <= 0) return 0;
    DDP_COST(8.0 * c, 8.0 * c, 2.0 * c);
    DDP_LAUNCH(bn_eval_params_kernel, ddp_blocks_for((size_t)c), kDdpThreads,
               ddp_cuda_state_.stream, c, running_mean, running_var, eps, mean, invstd);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                    const float *gamma, const float *beta_, float *y, int relu, const float *res)
{
    if (n <= 0 || c <= 0 || hw <= 0) return 0;
    if (ddp_bf16_act_at_(res))
        return ddp_cuda_fail_("ddp_cuda_bn_fwd", __FILE__, __LINE__,
                              "the residual of a BatchNorm's add is kept in bf16");
    size_t count = (size_t)n * c * hw;
    const ddp_act_in xin = ddp_act_in_(x);
    const ddp_act_out yout = ddp_act_out_(y);
    DDP_COST((xin.bytes() + (res ? 4.0 : 0)) * count + xin.bias_bytes(c) + 16.0 * c,
             yout.bytes() * count,
             (2.0 + (relu ? 1 : 0) + (res ? 1 : 0)) * count);
    DDP_LAUNCH_IDX(bn_fwd_kernel, count, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream,
                   n, c, hw, xin, mean, invstd, gamma, beta_, yout, relu,
                   res);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_bn_bwd_stats(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                          const float *invstd, double *gstats, float *dgamma, float *dbeta,
                          float beta, const float *relu_gamma, const float *relu_beta)
{
    return bwd_stats(n, c, hw, x, dy, nullptr, mean, invstd, gstats, dgamma, dbeta, beta,
                     relu_gamma, relu_beta);
}

int ddp_cuda_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                         const float *invstd, const float *gamma, const double *gstats,
                         double count, float *dx, const float *relu_beta)
{
    return bwd_data(n, c, hw, x, dy, nullptr, mean, invstd, gamma, gstats, count, dx, relu_beta);
}

int ddp_cuda_bn_maxpool_fwd(const ddp_cuda_pool_t *d, const float *x, const float *mean,
                            const float *invstd, const float *gamma, const float *beta_, int relu,
                            float *y, int32_t *argmax)
{
    if (d->n <= 0 || d->c <= 0) return 0;
    if (pool_refused("ddp_cuda_bn_maxpool_fwd", d)) return -1;
    const size_t count = (size_t)d->n * d->c * d->oh * d->ow;
    const ddp_act_in xin = ddp_act_in_(x);
    const ddp_act_out yout = ddp_act_out_(y);
    // every cell under a window, once
    DDP_COST(xin.bytes() * d->n * d->c * d->h * d->w + xin.bias_bytes(d->c) + 16.0 * d->c,
             (yout.bytes() + (argmax ? 4.0 : 0)) * count,
             (3.0 + (relu ? 1 : 0)) * count * d->k * d->k);
    DDP_LAUNCH_IDX(bn_maxpool_fwd_kernel, count, ddp_blocks_for(count), kDdpThreads,
                   ddp_cuda_state_.stream, *d, xin, mean, invstd, gamma, beta_, relu, yout,
                   argmax);
    DDP_CU_LAUNCHED();
    return 0;
}

int ddp_cuda_bn_maxpool_bwd_stats(const ddp_cuda_pool_t *d, const int32_t *argmax,
                                  const float *x, const float *dy, const float *mean,
                                  const float *invstd, const float *gamma, const float *beta_,
                                  int relu, double *gstats, float *dgamma, float *dbeta,
                                  float beta)
{
    if (pool_refused("ddp_cuda_bn_maxpool_bwd_stats", d)) return -1;
    const pool_fwd p = {d, argmax, gamma, beta_, relu};
    return bwd_stats(d->n, d->c, d->h * d->w, x, dy, &p, mean, invstd, gstats, dgamma, dbeta,
                     beta, relu ? gamma : nullptr, relu ? beta_ : nullptr);
}

int ddp_cuda_bn_maxpool_bwd_data(const ddp_cuda_pool_t *d, const int32_t *argmax,
                                 const float *x, const float *dy, const float *mean,
                                 const float *invstd, const float *gamma, const float *beta_,
                                 int relu, const double *gstats, double count, float *dx)
{
    if (pool_refused("ddp_cuda_bn_maxpool_bwd_data", d)) return -1;
    const pool_fwd p = {d, argmax, gamma, beta_, relu};
    return bwd_data(d->n, d->c, d->h * d->w, x, dy, &p, mean, invstd, gamma, gstats, count, dx,
                    relu ? beta_ : nullptr);
}

int ddp_cuda_bn_maxpool(void)
{
    const char *e = getenv("DDP_CUDA_BN_MAXPOOL");
    return !(e && strcmp(e, "0") == 0);
}

} // extern "C"
