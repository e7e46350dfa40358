// optim.cu -- the optimizer launchers of ddp_cuda.h: SGD (momentum,
// Nesterov, weight decay) and AdamW over flat buffers, PyTorch semantics.
//
// Each element is updated by one thread of a grid-stride loop (four
// elements a thread, in float4 loads and stores, where every array is
// 16-byte aligned) with the CPU backend's float operations in its order (SGD: cpu_optim.c sgd_mom_;
// AdamW: the CPU backend's very element function, ddp_adamw_elem of
// backend_math.h); AdamW's step constants (bias corrections, decay, step
// size) are computed on the host in double by the CPU backend's
// ddp_adamw_consts.  Under --precision bf16, where p lies in the
// parameters' mirror (bf16.h), each kernel also stores the rounding of
// every value it writes into h, the copy the next forward's GEMM reads.
// So the results agree with the CPU backend's to float
// rounding: bit for bit where the compiler does not contract a multiply
// and an add into one fused operation (the emulation build), to an ulp or
// two per step where it does (nvcc's default).  p, g, buf, m, v are
// distinct arrays.
#include "ddp_cuda_rt.h"

#include "backend_math.h"
#include "bf16.h"
#include "half.h"

#include <math.h>
#include <stdint.h>

namespace
{

// Every element once, in float4s where all the arrays are 16-byte aligned
// (vec: the launcher checked), the tail and unaligned arrays one float at a
// time; f(i, ...) updates element i through pointers to its values, the
// same function for both, so the vector path changes no bit.
__device__ inline size_t tid_()
{
    return blockIdx.x * (size_t)blockDim.x + threadIdx.x;
}
__device__ inline size_t stride_()
{
    return (size_t)gridDim.x * blockDim.x;
}

// h[0..3] = the roundings of v (h: the mirror's copy, or NULL)
__device__ inline void store_bf16x4_(uint16_t *h, float4 v)
{
    if (!h) return;
    h[0] = ddp_f32_to_bf16(v.x);
    h[1] = ddp_f32_to_bf16(v.y);
    h[2] = ddp_f32_to_bf16(v.z);
    h[3] = ddp_f32_to_bf16(v.w);
}

// p -= lr (g + wd p)
__device__ inline void sgd_plain_elem(float *p, float g, float lr, float wd)
{
    *p -= lr * (g + wd * *p);
}

// d = g + wd p; buf = m buf + d (buf read as 0 on the first step, as the
// CPU's zero fill: m * 0 + d); p -= lr (nesterov ? d + m buf : buf)
__device__ inline void sgd_mom_elem(float *p, float g, float *buf, float lr, float m, float wd,
                                    int nesterov, int first)
{
    const float old = first ? 0.0f : *buf;
    if (nesterov) {
        float d = g + wd * *p;
        float b = m * old + d;
        *buf = b;
        *p -= lr * (d + m * b);
    } else {
        float b = m * old + (g + wd * *p);
        *buf = b;
        *p -= lr * b;
    }
}

__global__ void sgd_plain_k(size_t count, float *p, const float *g, float lr, float wd, int vec,
                            uint16_t *h)
{
    size_t i = tid_();
    if (vec) {
        float4 *p4 = reinterpret_cast<float4 *>(p);
        const float4 *g4 = reinterpret_cast<const float4 *>(g);
        for (size_t q = i; q < count / 4; q += stride_()) {
            float4 pv = p4[q], gv = g4[q];
            sgd_plain_elem(&pv.x, gv.x, lr, wd);
            sgd_plain_elem(&pv.y, gv.y, lr, wd);
            sgd_plain_elem(&pv.z, gv.z, lr, wd);
            sgd_plain_elem(&pv.w, gv.w, lr, wd);
            p4[q] = pv;
            store_bf16x4_(h ? h + 4 * q : nullptr, pv);
        }
        i += count / 4 * 4;
    }
    for (; i < count; i += stride_()) {
        sgd_plain_elem(p + i, g[i], lr, wd);
        if (h) h[i] = ddp_f32_to_bf16(p[i]);
    }
}

__global__ void sgd_mom_k(size_t count, float *p, const float *g, float *buf, float lr, float m,
                          float wd, int nesterov, int first, int vec, uint16_t *h)
{
    size_t i = tid_();
    if (vec) {
        float4 *p4 = reinterpret_cast<float4 *>(p), *b4 = reinterpret_cast<float4 *>(buf);
        const float4 *g4 = reinterpret_cast<const float4 *>(g);
        for (size_t q = i; q < count / 4; q += stride_()) {
            float4 pv = p4[q], gv = g4[q], bv = first ? make_float4(0, 0, 0, 0) : b4[q];
            sgd_mom_elem(&pv.x, gv.x, &bv.x, lr, m, wd, nesterov, first);
            sgd_mom_elem(&pv.y, gv.y, &bv.y, lr, m, wd, nesterov, first);
            sgd_mom_elem(&pv.z, gv.z, &bv.z, lr, m, wd, nesterov, first);
            sgd_mom_elem(&pv.w, gv.w, &bv.w, lr, m, wd, nesterov, first);
            p4[q] = pv;
            b4[q] = bv;
            store_bf16x4_(h ? h + 4 * q : nullptr, pv);
        }
        i += count / 4 * 4;
    }
    for (; i < count; i += stride_()) {
        sgd_mom_elem(p + i, g[i], buf + i, lr, m, wd, nesterov, first);
        if (h) h[i] = ddp_f32_to_bf16(p[i]);
    }
}

// m = b1 m + c1 g; v = b2 v + c2 g^2; p = p decay - step (m / (sqrt(v)/bc2_sqrt + eps))
__global__ void adamw_k(size_t count, float *p, const float *g, float *m, float *v, float decay,
                        float b1, float c1, float b2, float c2, float step_size, float bc2_sqrt,
                        float eps, int vec, uint16_t *h)
{
    size_t i = tid_();
    if (vec) {
        float4 *p4 = reinterpret_cast<float4 *>(p), *m4 = reinterpret_cast<float4 *>(m),
               *v4 = reinterpret_cast<float4 *>(v);
        const float4 *g4 = reinterpret_cast<const float4 *>(g);
        for (size_t q = i; q < count / 4; q += stride_()) {
            float4 pv = p4[q], gv = g4[q], mv = m4[q], vv = v4[q];
            ddp_adamw_elem(&pv.x, &mv.x, &vv.x, gv.x, decay, b1, c1, b2, c2, step_size, bc2_sqrt,
                           eps);
            ddp_adamw_elem(&pv.y, &mv.y, &vv.y, gv.y, decay, b1, c1, b2, c2, step_size, bc2_sqrt,
                           eps);
            ddp_adamw_elem(&pv.z, &mv.z, &vv.z, gv.z, decay, b1, c1, b2, c2, step_size, bc2_sqrt,
                           eps);
            ddp_adamw_elem(&pv.w, &mv.w, &vv.w, gv.w, decay, b1, c1, b2, c2, step_size, bc2_sqrt,
                           eps);
            p4[q] = pv;
            m4[q] = mv;
            v4[q] = vv;
            store_bf16x4_(h ? h + 4 * q : nullptr, pv);
        }
        i += count / 4 * 4;
    }
    for (; i < count; i += stride_()) {
        ddp_adamw_elem(p + i, m + i, v + i, g[i], decay, b1, c1, b2, c2, step_size, bc2_sqrt, eps);
        if (h) h[i] = ddp_f32_to_bf16(p[i]);
    }
}

// 1 when every pointer is 16-byte aligned (float4 loads and stores)
inline int aligned16(const void *a, const void *b, const void *c = nullptr,
                     const void *d = nullptr)
{
    return ((((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15) == 0);
}

// blocks for count elements, a float4 a thread when vec
inline unsigned blocks_(size_t count, int vec)
{
    return ddp_blocks_for(vec ? (count + 3) / 4 : count);
}

} // namespace

extern "C" int ddp_cuda_sgd_step(size_t count, float *p, const float *g, float *buf, float lr,
                                 float momentum, int nesterov, float wd, int first)
{
    if (count == 0) return 0;
    cudaStream_t st = ddp_cuda_state_.stream;
    uint16_t *h = ddp_bf16_mirror_at_(p, count);
    const double hw = h ? 2.0 * count : 0.0; // the mirror's copy written
    if (momentum == 0.0f || !buf) {
        const int vec = aligned16(p, g);
        DDP_COST(8.0 * count, 4.0 * count + hw, 3.0 * count);
        DDP_LAUNCH(sgd_plain_k, blocks_(count, vec), kDdpThreads, st, count, p, g, lr, wd, vec, h);
    } else {
        const int vec = aligned16(p, g, buf);
        // the first step sets buf = g without reading it
        DDP_COST((first ? 8.0 : 12.0) * count, 8.0 * count + hw, 5.0 * count);
        DDP_LAUNCH(sgd_mom_k, blocks_(count, vec), kDdpThreads, st, count, p, g, buf, lr,
                   momentum, wd, nesterov, first, vec, h);
    }
    DDP_CU_LAUNCHED();
    ddp_bf16_mirror_wrote_(p, count);
    return 0;
}

// PyTorch 1.13 AdamW: p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr/bc1 m / (sqrt(v)/sqrt(bc2) + eps), bc_i = 1 - beta_i^t (in double).
extern "C" int ddp_cuda_adamw_step(size_t count, float *p, const float *g, float *m, float *v,
                                   float lr, float beta1, float beta2, float eps, float wd,
                                   int64_t t)
{
    if (count == 0) return 0;
    const ddp_adamw_consts_t a = ddp_adamw_consts(lr, beta1, beta2, wd, t);
    const int vec = aligned16(p, g, m, v);
    uint16_t *h = ddp_bf16_mirror_at_(p, count);
    // p, g, m, v read; p, m, v written (and the mirror's copy of p)
    DDP_COST(16.0 * count, 12.0 * count + (h ? 2.0 * count : 0.0), 15.0 * count);
    DDP_LAUNCH(adamw_k, blocks_(count, vec), kDdpThreads, ddp_cuda_state_.stream, count, p, g, m,
               v, a.decay, beta1, a.c1, beta2, a.c2, a.step_size, a.bc2_sqrt, eps, vec, h);
    DDP_CU_LAUNCHED();
    ddp_bf16_mirror_wrote_(p, count);
    return 0;
}
