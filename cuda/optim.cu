// optim.cu -- the optimizer launchers of ddp_cuda.h: SGD (momentum,
// Nesterov, weight decay) and AdamW over flat buffers, PyTorch semantics.
//
// Each element is updated by one thread of a grid-stride loop with the CPU
// backend's float operations in its order (SGD: cpu_optim.c sgd_mom_;
// AdamW: the CPU backend's very element function, ddp_adamw_elem of
// backend_math.h); AdamW's step constants (bias corrections, decay, step
// size) are computed on the host in double by the CPU backend's
// ddp_adamw_consts.  So the results agree with the CPU backend's to float
// rounding: bit for bit where the compiler does not contract a multiply
// and an add into one fused operation (the emulation build), to an ulp or
// two per step where it does (nvcc's default).  p, g, buf, m, v are
// distinct arrays.
#include "ddp_cuda_rt.h"

#include "backend_math.h"

#include <math.h>

namespace
{

// p -= lr (g + wd p)
__global__ void sgd_plain_k(size_t count, float *p, const float *g, float lr, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] -= lr * (g[i] + wd * p[i]);
}

// d = g + wd p; buf = m buf + d (buf read as 0 on the first step, as the
// CPU's zero fill: m * 0 + d); p -= lr (nesterov ? d + m buf : buf)
__global__ void sgd_mom_k(size_t count, float *p, const float *g, float *buf, float lr, float m,
                          float wd, int nesterov, int first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const float old = first ? 0.0f : buf[i];
        if (nesterov) {
            float d = g[i] + wd * p[i];
            float b = m * old + d;
            buf[i] = b;
            p[i] -= lr * (d + m * b);
        } else {
            float b = m * old + (g[i] + wd * p[i]);
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
}

// m = b1 m + c1 g; v = b2 v + c2 g^2; p = p decay - step (m / (sqrt(v)/bc2_sqrt + eps))
__global__ void adamw_k(size_t count, float *p, const float *g, float *m, float *v, float decay,
                        float b1, float c1, float b2, float c2, float step_size, float bc2_sqrt,
                        float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        ddp_adamw_elem(p + i, m + i, v + i, g[i], decay, b1, c1, b2, c2, step_size, bc2_sqrt, eps);
    }
}

} // namespace

extern "C" int ddp_cuda_sgd_step(size_t count, float *p, const float *g, float *buf, float lr,
                                 float momentum, int nesterov, float wd, int first)
{
    if (count == 0) return 0;
    cudaStream_t st = ddp_cuda_state_.stream;
    if (momentum == 0.0f || !buf)
        DDP_LAUNCH(sgd_plain_k, ddp_blocks_for(count), kDdpThreads, st, count, p, g, lr, wd);
    else
        DDP_LAUNCH(sgd_mom_k, ddp_blocks_for(count), kDdpThreads, st, count, p, g, buf, lr,
                   momentum, wd, nesterov, first);
    DDP_CU_LAUNCHED();
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
    DDP_LAUNCH(adamw_k, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, p, g, m,
               v, a.decay, beta1, a.c1, beta2, a.c2, a.step_size, a.bc2_sqrt, eps);
    DDP_CU_LAUNCHED();
    return 0;
}
