/* half.h -- float <-> bfloat16 / IEEE fp16 conversions (round to nearest
 * even), one value at a time, for the CPU kernels (cpu_elementwise.c), the
 * all-reduce sums (sum_kernels.c, whose vector versions must give the same
 * bits), the CUDA kernels (cuda/elementwise.cu: the very same functions in
 * device code, DDP_HD) and the tests.  Inline: they run once per element in
 * hot loops.  Only integer operations and exact float operations (scaling
 * by powers of two, integer conversions), so every compiler and device
 * gives the same bits. */
#ifndef DDP_HALF_H
#define DDP_HALF_H

#include <stdint.h>
#include <string.h>

#include "hostdev.h"

/* The bits of a float and back: the CUDA intrinsics in device code (and in
 * the CPU emulation's C++ build of the kernels), memcpy elsewhere. */
DDP_HD uint32_t ddp_f2u_(float f)
{
#if defined(__CUDA_ARCH__) || (defined(DDP_CUDA_EMU) && defined(__cplusplus))
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

DDP_HD float ddp_u2f_(uint32_t u)
{
#if defined(__CUDA_ARCH__) || (defined(DDP_CUDA_EMU) && defined(__cplusplus))
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

DDP_HD uint16_t ddp_f32_to_bf16(float f)
{
    uint32_t u = ddp_f2u_(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

DDP_HD float ddp_bf16_to_f32(uint16_t h)
{
    return ddp_u2f_((uint32_t)h << 16);
}

DDP_HD uint16_t ddp_f32_to_f16(float f)
{
    uint32_t u = ddp_f2u_(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* Inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> Inf */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        /* scale to fp16 subnormal units (2^-24) and round to nearest even */
        float v = ddp_u2f_(a) * 16777216.0f;
        uint32_t q = (uint32_t)v;
        float rem = v - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = ((a >> 23) - 127 + 15) << 10;
    uint32_t m = (a >> 13) & 0x3ffu;
    uint32_t rest = a & 0x1fffu;
    uint32_t h = e | m;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

DDP_HD float ddp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31) return ddp_u2f_(sign | 0x7f800000u | (m << 13));
    return ddp_u2f_(sign | ((e - 15 + 127) << 23) | (m << 13));
}

#endif
