// elementwise.cu -- the elementwise launchers of ddp_cuda.h: the sum of two
// tensors (residual connections), ReLU and GELU (erf form) forward and
// backward, dropout forward and backward, scale, and the 16-bit casts of
// gradient compression.
//
// Every kernel is a grid-stride loop over ddp_blocks_for(count) blocks of
// kDdpThreads threads, computing each element with the same float
// operations as the CPU backend (src/compute/cpu/cpu_elementwise.c):
//   - add, ReLU, scale, the casts and dropout give the CPU's bits: the
//     casts are half.h's functions and the dropout mask is rng.h's Philox
//     draw, both compiled for the device (DDP_HD), so CPU and GPU keep the
//     same elements (keyed by seed, step, layer, global sample, element);
//   - GELU calls the device's erff/expf, which differ from the host's by a
//     few ulp at most.
// In place (y == x, dx == dy; y == a or b) is fine: each element is read,
// then written, by one thread.
#include "ddp_cuda_rt.h"

#include <math.h>

#include "act16.h"
#include "half.h"
#include "rng.h"

namespace
{

// y = a + b; relu: relu(a + b), as relu_fwd_k; y's bf16 copy beside it
// where it has one (act16.h)
__global__ void add_k(size_t count, const float *a, const float *b, ddp_act_out y, int relu)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = a[i] + b[i];
        y.put(i, relu && v < 0.0f ? 0.0f : v);
    }
}

// NaN passes through (PyTorch)
__global__ void relu_fwd_k(size_t count, const float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

// dx = x > 0 ? dy : 0 (x the input or the output: same mask); dy2 (h or
// f NULL: none): of dy2 + dy (as add_k(dy2, dy)).  dy and dy2 may be
// gradients a convolution wrote in bf16 (act16.h), widened as read.
__global__ void relu_bwd_k(size_t count, const float *x, ddp_act_in dy, float *dx, ddp_act_in dy2)
{
    const bool two = dy2.f || dy2.h;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = two ? dy2[i] + dy[i] : dy[i];
        dx[i] = x[i] <= 0.0f ? 0.0f : g;
    }
}

// 1/sqrt(2) as the CPU backend's (float)M_SQRT1_2
constexpr float kSqrtHalf = 0.70710678118654752440f;

__global__ void gelu_fwd_k(size_t count, const float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * kSqrtHalf));
    }
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x)
__global__ void gelu_bwd_k(size_t count, const float *x, const float *dy, float *dx)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * kSqrtHalf));
        float pdf = expf(-0.5f * v * v) * inv_sqrt_2pi;
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

// out[i, j] = keep(i, j) ? in[i, j] * scale : 0 with keep(i, j) exactly
// ddp_dropout_keep(seed, step, layer, sample_idx[i], j, p): one thread per
// group of four elements of a row, one Philox call per group, as that
// function draws them (key = ddp_key(seed, DDP_STREAM_DROPOUT, ...) from
// the host).
__global__ void dropout_k(size_t rows, size_t features, const float *in, float *out, float p,
                          float scale, uint64_t key, const int64_t *sample_idx)
{
    const size_t groups = (features + 3) / 4; // per row
    const size_t total = rows * groups;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < total;
         g += (size_t)gridDim.x * blockDim.x) {
        const size_t i = g / groups, j = (g - i * groups) * 4;
        ddp_u32x4_t r = ddp_rand4(key, (uint64_t)sample_idx[i], j >> 2);
        const size_t m = features - j < 4 ? features - j : 4;
        const float *a = in + i * features + j;
        float *b = out + i * features + j;
        for (size_t q = 0; q < m; q++) b[q] = ddp_u01(r.v[q]) >= p ? a[q] * scale : 0.0f;
    }
}

__global__ void scale_k(size_t count, float *x, float alpha)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= alpha;
}

__global__ void to_half_k(size_t count, const float *x, uint16_t *h, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        h[i] = bf16 ? ddp_f32_to_bf16(x[i]) : ddp_f32_to_f16(x[i]);
}

__global__ void from_half_k(size_t count, const uint16_t *h, float *x, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = bf16 ? ddp_bf16_to_f32(h[i]) : ddp_f16_to_f32(h[i]);
}

int dropout_apply(int n, size_t features, const float *in, float *out, float p, uint64_t seed,
                  uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    if (n <= 0 || features == 0) return 0;
    const size_t count = (size_t)n * features;
    if (p <= 0.0f) { // u01 >= 0 always: everything kept, scale 1 (the CPU copies)
        if (out != in) {
            ddp_cost_copy_("cudaMemcpyAsync", 4.0 * count, 4.0 * count);
            DDP_CU(cudaMemcpyAsync(out, in, count * sizeof *out, cudaMemcpyDeviceToDevice,
                                   ddp_cuda_state_.stream));
        }
        return 0;
    }
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    const uint64_t key = ddp_key(seed, DDP_STREAM_DROPOUT, (step << 16) ^ layer);
    const size_t groups = (size_t)n * ((features + 3) / 4);
    DDP_COST(8.0 * n + 4.0 * count, 4.0 * count, 2.0 * count);
    DDP_LAUNCH(dropout_k, ddp_blocks_for(groups), kDdpThreads, ddp_cuda_state_.stream, (size_t)n,
               features, in, out, p, scale, key, sample_idx);
    DDP_CU_LAUNCHED();
    return 0;
}

} // namespace

extern "C" int ddp_cuda_add(size_t count, const float *a, const float *b, float *y, int relu)
{
    if (count == 0) return 0;
    const ddp_act_out yo = {y, nullptr, ddp_bf16_copy_out_(y)}; // fp32, maybe a copy
    DDP_COST(8.0 * count, yo.bytes() * count, (relu ? 2.0 : 1.0) * count);
    DDP_LAUNCH(add_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, a, b, yo,
               relu);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_relu_fwd(size_t count, const float *x, float *y)
{
    if (count == 0) return 0;
    DDP_COST(4.0 * count, 4.0 * count, (double)count);
    DDP_LAUNCH(relu_fwd_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, x, y);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_relu_bwd(size_t count, const float *x, const float *dy, float *dx,
                                 const float *dy2)
{
    if (count == 0) return 0;
    const ddp_act_in g = ddp_act_in_(dy), g2 = ddp_act_in_(dy2);
    DDP_COST((4.0 + g.bytes() + (dy2 ? g2.bytes() : 0)) * count, 4.0 * count,
             (dy2 ? 2.0 : 1.0) * count);
    DDP_LAUNCH(relu_bwd_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, x, g,
               dx, g2);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_gelu_fwd(size_t count, const float *x, float *y)
{
    if (count == 0) return 0;
    DDP_COST(4.0 * count, 4.0 * count, 20.0 * count); // erff: about 15 FLOPs
    DDP_LAUNCH(gelu_fwd_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, x, y);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_gelu_bwd(size_t count, const float *x, const float *dy, float *dx)
{
    if (count == 0) return 0;
    DDP_COST(8.0 * count, 4.0 * count, 30.0 * count);
    DDP_LAUNCH(gelu_bwd_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, x, dy,
               dx);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_dropout_fwd(int n, size_t features, const float *x, float *y, float p,
                                    uint64_t seed, uint64_t step, uint32_t layer,
                                    const int64_t *sample_idx)
{
    return dropout_apply(n, features, x, y, p, seed, step, layer, sample_idx);
}

extern "C" int ddp_cuda_dropout_bwd(int n, size_t features, const float *dy, float *dx, float p,
                                    uint64_t seed, uint64_t step, uint32_t layer,
                                    const int64_t *sample_idx)
{
    return dropout_apply(n, features, dy, dx, p, seed, step, layer, sample_idx);
}

extern "C" int ddp_cuda_scale(size_t count, float *x, float alpha)
{
    if (count == 0) return 0;
    DDP_COST(4.0 * count, 4.0 * count, (double)count);
    DDP_LAUNCH(scale_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, x,
               alpha);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_to_half(size_t count, const float *x, uint16_t *h, int bf16)
{
    if (count == 0) return 0;
    DDP_COST(4.0 * count, 2.0 * count, 0);
    DDP_LAUNCH(to_half_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, x, h,
               bf16);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_from_half(size_t count, const uint16_t *h, float *x, int bf16)
{
    if (count == 0) return 0;
    DDP_COST(2.0 * count, 4.0 * count, 0);
    DDP_LAUNCH(from_half_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, h, x,
               bf16);
    DDP_CU_LAUNCHED();
    return 0;
}
