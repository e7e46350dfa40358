// act16.h -- a layer's output as the kernels that read or write it see it:
// fp32, or bf16 where the layer's output is kept in bf16 only (bf16.h,
// ddp_bf16_act_*: under --precision bf16 a convolution's output that only a
// BatchNorm reads, and a BatchNorm's, or its fused ReLU's, that only a
// convolution reads).  The choice is the buffer's, the same for every
// thread of a launch (no divergence); a kernel computes in fp32 either way,
// so the values it computes from a bf16 input are those it computes from
// the same values held in fp32, and a bf16 output is the rounding (to
// nearest even) of the fp32 one.  A convolution's output with a bias that
// only a BatchNorm reads is kept in bf16 without the bias, which the
// BatchNorm kernels add as they read it (ddp_act_in::at).  An fp32 output
// may have a bf16 copy beside it (ddp_bf16_copy_set_: a block's output the
// next block's convolutions read), which ddp_act_out::put writes with each
// value, its rounding.
#ifndef DDP_CUDA_ACT16_H
#define DDP_CUDA_ACT16_H

#include <stdint.h>

#include "bf16.h"
#include "half.h"

struct ddp_act_in {
    const float *f;       // fp32, or
    const uint16_t *h;    // bf16 (f unused)
    const float *bias;    // a convolution's bias it was written without (bf16 only; NULL: none)
    __device__ float operator[](size_t i) const { return h ? ddp_bf16_to_f32(h[i]) : f[i]; }
    // value i of channel ch with its bias: what the convolution's fp32
    // output would hold (the BatchNorm kernels read their x so)
    __device__ float at(size_t i, int ch) const
    {
        const float v = (*this)[i];
        return bias ? v + bias[ch] : v;
    }
    double bytes() const { return h ? 2.0 : 4.0; } // a value's (DDP_COST)
    double bias_bytes(int c) const { return bias ? 4.0 * c : 0.0; } // the bias's, c channels
};

struct ddp_act_out {
    float *f;
    uint16_t *h;
    uint16_t *copy; // fp32 f's bf16 copy, written beside it (ddp_bf16_copy_out_; NULL: none)
    __device__ void put(size_t i, float v) const
    {
        if (h) {
            h[i] = ddp_f32_to_bf16(v);
        } else {
            f[i] = v;
            if (copy) copy[i] = ddp_f32_to_bf16(v);
        }
    }
    double bytes() const { return h ? 2.0 : copy ? 6.0 : 4.0; }
};

// The buffer at p as the kernels read or write it.
inline ddp_act_in ddp_act_in_(const float *p)
{
    return ddp_act_in{p, ddp_bf16_act_at_(p), ddp_bf16_act_bias_(p)};
}
inline ddp_act_out ddp_act_out_(float *p)
{
    uint16_t *h = (uint16_t *)ddp_bf16_act_at_(p);
    return ddp_act_out{p, h, h ? nullptr : ddp_bf16_copy_out_(p)};
}

#endif
