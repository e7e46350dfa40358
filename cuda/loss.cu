// loss.cu -- the loss launchers of ddp_cuda.h: softmax cross-entropy with
// label smoothing (xent) and mean squared error (mse).
//
// xent: the row is spread over a warp (up to kXentWarpMax classes; eight
// rows in a block of 256) or over a whole block (wider rows: the benchmark
// MLP's 8192 classes, a 32 KB row), each thread reading every G-th float4
// (every G-th float where the row is not 16-byte aligned).  Three passes
// over the row: the max, first argmax and sum of the logits; the sum of
// expf(z - max) in double (the CPU's very terms; the second read comes
// from L1/L2, so DRAM sees the row once, as an online max/sum would, whose
// rescaled terms would no longer be the CPU's); and the gradient.  The
// reductions are fixed trees of warp shuffles (and, for a block row, of
// the warps' results in shared memory), so the results depend only on the
// shapes: the loss and gradient agree with cpu_loss.c's ddp_xent_row
// (backend_math.h's ddp_xent_loss and ddp_xent_grad are shared) to the
// order of the double sums and the device's expf/log.  mse: one thread per
// element.  The sums over rows (elements) are deterministic, without
// atomics: each block reduces its rows' (threads') partial sums in a fixed
// tree and writes them to a scratch array, then one block adds the
// partials in a fixed tree and adds the result to acc.  The partials' shape
// depends only on n (n * k), so the same inputs give the same bits on
// every run.
#include "ddp_cuda_rt.h"

#include "bf16.h"

#include "backend_math.h"
#include "block_reduce.h"
#include "half.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>

namespace
{

// Partial sums of the first pass: two per block (xent: loss and hits), on
// the bound device (allocated at the first use there, as reduce.cu's).
double *partials_ = nullptr;
int partials_device_ = -1;
constexpr size_t kMaxPartials = 2 * 4096; // ddp_blocks_for's cap, twice

int partials(double **out)
{
    if (partials_device_ != ddp_cuda_state_.device) {
        partials_ = nullptr;
        partials_device_ = ddp_cuda_state_.device;
    }
    if (!partials_) DDP_CU(cudaMalloc((void **)&partials_, kMaxPartials * sizeof(double)));
    *out = partials_;
    return 0;
}

constexpr unsigned kFull = 0xffffffffu;
constexpr int kXentWarpMax = 1024;  // classes up to which a warp takes a row
constexpr int kXentRowsWarp = kDdpThreads / 32;

// The row's max and first argmax (a candidate at a lower index wins ties;
// arg == INT_MAX: none yet, which any non-NaN value replaces).
__device__ inline void argmax_take(float &m, int &a, float v, int j)
{
    if (v > m || (v == m && j < a) || (a == INT_MAX && v == v)) {
        m = v;
        a = j;
    }
}

// Sums down the warp's fixed tree: lane 0 gets the total.
__device__ inline double warp_sum(double v)
{
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(kFull, v, d);
    return v;
}
__device__ inline void warp_argmax(float &m, int &a)
{
    for (int d = 16; d > 0; d >>= 1) {
        float om = __shfl_down_sync(kFull, m, d);
        int oa = __shfl_down_sync(kFull, a, d);
        argmax_take(m, a, om, oa);
    }
}

// The group's (a warp's or the block's) reductions, the result in every
// thread of the group.  sh: the block's scratch, one slot per warp.
template <bool kBlock> __device__ inline double group_sum(double v, double *sh)
{
    v = warp_sum(v);
    if (kBlock) {
        const int w = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) sh[w] = v;
        __syncthreads();
        v = 0;
        for (int k = 0; k < kDdpThreads / 32; k++) v += sh[k];
        __syncthreads(); // sh may be reused at once
        return v;
    }
    return __shfl_sync(kFull, v, 0);
}
template <bool kBlock> __device__ inline void group_argmax(float &m, int &a, float *shm, int *sha)
{
    warp_argmax(m, a);
    if (kBlock) {
        const int w = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) {
            shm[w] = m;
            sha[w] = a;
        }
        __syncthreads();
        m = shm[0];
        a = sha[0];
        for (int k = 1; k < kDdpThreads / 32; k++) argmax_take(m, a, shm[k], sha[k]);
        __syncthreads();
        return;
    }
    m = __shfl_sync(kFull, m, 0);
    a = __shfl_sync(kFull, a, 0);
}

// Calls f(j, z[j]) for this thread's share of the row: every G-th float4
// from thread g when the row is 16-byte aligned, else every G-th float.
template <class F> __device__ inline void row_each(const float *z, int classes, int g, int G, F f)
{
    if (classes % 4 == 0 && ((uintptr_t)z & 15) == 0) {
        const float4 *z4 = reinterpret_cast<const float4 *>(z);
        for (int q = g; q < classes / 4; q += G) {
            float4 v = z4[q];
            f(4 * q, v.x);
            f(4 * q + 1, v.y);
            f(4 * q + 2, v.z);
            f(4 * q + 3, v.w);
        }
    } else {
        for (int j = g; j < classes; j += G) f(j, z[j]);
    }
}

// Softmax cross-entropy, a row per warp (kBlock false: kXentRowsWarp rows
// per block) or per block (kBlock).  dlogits may alias logits: a row is
// read in the first two passes by its own group before the third writes
// it, each element by the thread that reads it.  part[2b] = the block's sum
// of losses, part[2b+1] = its hits (rows in a fixed order).
// kDense (xent_dense_k: with kBlock, classes a multiple of 4 up to
// kDenseCols, the rows 16-byte aligned): the gradient goes to d16 in bf16
// (the rounding of what dlogits would hold) instead of dlogits, and
// cols[block * classes + j] =
// the sum of the block's rows' gradients of column j, in row order (each
// thread keeps the columns of its float4s in registers).
constexpr int kDenseQ = 8, kDenseCols = kDenseQ * 4 * kDdpThreads;
template <bool kBlock, bool kDense>
__device__ inline void xent_rows_(int n, int classes, const float *logits, const int32_t *labels,
                                  float smoothing, float grad_scale, float *dlogits, double *part,
                                  uint16_t *d16, float *cols)
{
    float csum[kDense ? 4 * kDenseQ : 1] = {};
    __shared__ double shd[kDdpThreads / 32];
    __shared__ float shm[kDdpThreads / 32];
    __shared__ int sha[kDdpThreads / 32];
    const int G = kBlock ? kDdpThreads : 32, rows = kBlock ? 1 : kXentRowsWarp;
    const int g = kBlock ? (int)threadIdx.x : (int)threadIdx.x % 32;
    const int group = kBlock ? 0 : (int)threadIdx.x / 32;
    // the indices read once, before the warp operations: the sanitizer
    // build (GCC 12, UBSan) reported the emulation's thread-local launch
    // context as a null pointer when blockIdx was read after them
    const unsigned block = blockIdx.x, first = threadIdx.x == 0;
    const double eps = smoothing;
    double loss = 0, hits = 0; // the group's rows, in the group's first thread
    for (size_t i = (size_t)block * rows + group; i < (size_t)n;
         i += (size_t)gridDim.x * rows) {
        const float *z = logits + i * classes;
        const int y = labels[i];
        const bool valid = y >= 0 && y < classes;
        float zmax = -INFINITY;
        int arg = INT_MAX;
        double zsum = 0;
        row_each(z, classes, g, G, [&](int j, float v) {
            argmax_take(zmax, arg, v, j);
            zsum += v;
        });
        group_argmax<kBlock>(zmax, arg, shm, sha);
        zsum = group_sum<kBlock>(zsum, shd);
        if (z[0] != z[0]) { // the CPU's rule: a NaN first logit is the max
            zmax = z[0];
            arg = 0;
        }
        double s = 0;
        row_each(z, classes, g, G, [&](int, float v) { s += expf(v - zmax); });
        s = group_sum<kBlock>(s, shd);
        if (g == 0 && valid) {
            loss += ddp_xent_loss(zmax, s, z[y], zsum, eps, classes);
            hits += arg == y;
        }
        const float inv = (float)(1.0 / s), off = (float)(eps / classes);
        const float gy = (float)(1.0 - eps) * grad_scale;
        auto grad = [&](int j, float v) {
            float d = valid ? ddp_xent_grad(expf(v - zmax), inv, off, grad_scale) : 0.0f;
            return valid && j == y ? d - gy : d;
        };
        if (kDense) {
            const float4 *z4 = reinterpret_cast<const float4 *>(z);
            uint16_t *h = d16 + i * classes;
            for (int k = 0, q = g; k < kDenseQ && q < classes / 4; k++, q += G) {
                const float4 v = z4[q];
                const float zv[4] = {v.x, v.y, v.z, v.w};
                for (int e = 0; e < 4; e++) {
                    const float d = grad(4 * q + e, zv[e]);
                    h[4 * q + e] = ddp_f32_to_bf16(d);
                    csum[4 * k + e] += d;
                }
            }
        } else if (dlogits) {
            float *dl = dlogits + i * classes;
            if (classes % 4 == 0 && (((uintptr_t)z | (uintptr_t)dl) & 15) == 0) {
                const float4 *z4 = reinterpret_cast<const float4 *>(z);
                float4 *d4 = reinterpret_cast<float4 *>(dl);
                for (int q = g; q < classes / 4; q += G) {
                    float4 v = z4[q];
                    d4[q] = make_float4(grad(4 * q, v.x), grad(4 * q + 1, v.y),
                                        grad(4 * q + 2, v.z), grad(4 * q + 3, v.w));
                }
            } else {
                for (int j = g; j < classes; j += G) dl[j] = grad(j, z[j]);
            }
        }
    }
    // the block's sums: the groups' in group order
    if (!kBlock) {
        __syncthreads();
        if (g == 0) {
            shd[group] = loss;
            shm[group] = (float)hits; // at most 2^24 rows per group: exact
        }
        __syncthreads();
        if (first) {
            loss = hits = 0;
            for (int k = 0; k < rows; k++) {
                loss += shd[k];
                hits += shm[k];
            }
        }
    }
    if (first) {
        part[2 * block] = loss;
        part[2 * block + 1] = hits;
    }
    if (kDense)
        for (int k = 0, q = g; k < kDenseQ && q < classes / 4; k++, q += G)
            for (int e = 0; e < 4; e++) cols[(size_t)block * classes + 4 * q + e] = csum[4 * k + e];
}

template <bool kBlock>
__global__ void xent_k(int n, int classes, const float *logits, const int32_t *labels,
                       float smoothing, float grad_scale, float *dlogits, double *part)
{
    xent_rows_<kBlock, false>(n, classes, logits, labels, smoothing, grad_scale, dlogits, part,
                              nullptr, nullptr);
}

__global__ void xent_dense_k(int n, int classes, const float *logits, const int32_t *labels,
                             float smoothing, float grad_scale, double *part, uint16_t *d16,
                             float *cols)
{
    xent_rows_<true, true>(n, classes, logits, labels, smoothing, grad_scale, nullptr, part, d16,
                           cols);
}

// dpred = 2 grad_scale (pred - target); part[b] = the block's sum of squares
__global__ void mse_k(size_t count, const float *pred, const float *target, float two, float *dpred,
                      double *part)
{
    __shared__ double sh[kDdpThreads];
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float t = pred[i] - target[i];
        s += (double)t * t;
        if (dpred) dpred[i] = two * t;
    }
    s = ddp_block_sum(sh, s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// acc[a] += sum over b < blocks of part[b * width + a], for a < width (one
// block; each thread sums a fixed stride of the partials, then the tree).
__global__ void add_partials_k(unsigned blocks, int width, const double *part, double *acc)
{
    __shared__ double sh[kDdpThreads];
    for (int a = 0; a < width; a++) {
        double s = 0;
        for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x)
            s += part[(size_t)b * width + a];
        s = ddp_block_sum(sh, s);
        if (threadIdx.x == 0) acc[a] += s;
    }
}

} // namespace

extern "C" int ddp_cuda_xent(int n, int classes, const float *logits, const int32_t *labels,
                             float smoothing, float grad_scale, float *dlogits, double *acc)
{
    if (n <= 0 || classes <= 0) return 0;
    double *part;
    if (partials(&part)) return -1;
    cudaStream_t st = ddp_cuda_state_.stream;
    unsigned blocks;
    // the logits and labels read, dlogits and the blocks' partials written;
    // per logit: max, sum, exp, and the gradient's exp and scale
    const double zb = 4.0 * n * classes, dl = dlogits ? zb : 0, flops = 6.0 * n * classes;
    if (classes <= kXentWarpMax) {
        blocks = ddp_blocks_for((size_t)n * 32); // a warp per row
        DDP_COST(zb + 4.0 * n, dl + 16.0 * blocks, flops);
        DDP_LAUNCH(xent_k<false>, blocks, kDdpThreads, st, n, classes, logits, labels, smoothing,
                   grad_scale, dlogits, part);
    } else {
        blocks = ddp_blocks_for((size_t)n * kDdpThreads); // a block per row
        DDP_COST(zb + 4.0 * n, dl + 16.0 * blocks, flops);
        DDP_LAUNCH(xent_k<true>, blocks, kDdpThreads, st, n, classes, logits, labels, smoothing,
                   grad_scale, dlogits, part);
    }
    DDP_CU_LAUNCHED();
    DDP_COST(16.0 * blocks + 16, 16, 2.0 * blocks);
    DDP_LAUNCH(add_partials_k, 1, kDdpThreads, st, blocks, 2, (const double *)part, acc);
    DDP_CU_LAUNCHED();
    return 0;
}

// The loss's gradient for a dense last layer under bf16 GEMMs (ddp_cuda.h):
// xent_k<true, true> over at most kDenseBlocks blocks, each taking every
// kDenseBlocks-th row, the gradient in bf16 into the scratch the layer's
// backward rounds its output gradient into, the blocks' column sums kept
// for its bias gradient (bf16.h, ddp_bf16_dy_set_).  Other shapes: xent.
constexpr int kDenseBlocks = 128;
extern "C" int ddp_cuda_xent_dense(int n, int classes, const float *logits, const int32_t *labels,
                                   float smoothing, float grad_scale, float *dlogits, double *acc)
{
    if (!ddp_cuda_state_.bf16_gemm || !dlogits || n <= 0 || classes <= kXentWarpMax ||
        classes % 4 != 0 || classes > kDenseCols || ((uintptr_t)logits & 15) != 0)
        return ddp_cuda_xent(n, classes, logits, labels, smoothing, grad_scale, dlogits, acc);
    double *part;
    if (partials(&part)) return -1;
    const unsigned blocks = n < kDenseBlocks ? (unsigned)n : kDenseBlocks;
    const size_t count = (size_t)n * classes;
    uint16_t *d16 = (uint16_t *)ddp_bf16_scratch_(DDP_BF16_DY, count * sizeof(uint16_t));
    float *cols = (float *)ddp_bf16_scratch_(DDP_BF16_COLS, (size_t)blocks * classes * 4);
    if (!d16 || !cols) return -1;
    cudaStream_t st = ddp_cuda_state_.stream;
    DDP_COST(4.0 * count + 4.0 * n, 2.0 * count + 4.0 * blocks * classes + 16.0 * blocks,
             7.0 * count);
    DDP_LAUNCH(xent_dense_k, blocks, kDdpThreads, st, n, classes, logits, labels, smoothing,
               grad_scale, part, d16, cols);
    DDP_CU_LAUNCHED();
    DDP_COST(16.0 * blocks + 16, 16, 2.0 * blocks);
    DDP_LAUNCH(add_partials_k, 1, kDdpThreads, st, blocks, 2, (const double *)part, acc);
    DDP_CU_LAUNCHED();
    ddp_bf16_dy_set_(dlogits, n, classes, (int)blocks, d16, cols);
    return 0;
}

extern "C" int ddp_cuda_mse(int n, int k, const float *pred, const float *target, float grad_scale,
                            float *dpred, double *acc)
{
    if (n <= 0 || k <= 0) return 0;
    double *part;
    if (partials(&part)) return -1;
    const size_t count = (size_t)n * k;
    const unsigned blocks = ddp_blocks_for(count);
    cudaStream_t st = ddp_cuda_state_.stream;
    DDP_COST(8.0 * count, (dpred ? 4.0 * count : 0) + 8.0 * blocks, 4.0 * count);
    DDP_LAUNCH(mse_k, blocks, kDdpThreads, st, count, pred, target, 2.0f * grad_scale, dpred, part);
    DDP_CU_LAUNCHED();
    DDP_COST(8.0 * blocks + 8, 8, (double)blocks);
    DDP_LAUNCH(add_partials_k, 1, kDdpThreads, st, blocks, 1, (const double *)part, acc);
    DDP_CU_LAUNCHED();
    return 0;
}
