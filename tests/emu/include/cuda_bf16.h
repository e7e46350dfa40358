/* cuda_bf16.h -- the CPU emulation's bfloat16: __nv_bfloat16 (the upper 16
 * bits of an IEEE float, stored in an unsigned short) and its conversions,
 * usable from C, C++ host code and kernels.  __float2bfloat16 rounds to
 * nearest even; a NaN stays a (quiet) NaN of the same sign.  In C++ the
 * type converts from and to float like CUDA's (explicit constructor,
 * implicit operator float).  __nv_bfloat162: two of them in one 4-byte
 * word, with the pair conversions. */
#ifndef DDP_EMU_CUDA_BF16_H
#define DDP_EMU_CUDA_BF16_H

#include <string.h>

#include "cuda_runtime.h" /* float2 */

typedef struct __nv_bfloat16 {
    unsigned short __x;
#ifdef __cplusplus
    __nv_bfloat16() = default;
    explicit __nv_bfloat16(float f);
    operator float() const;
#endif
} __nv_bfloat16;
typedef __nv_bfloat16 nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16(float f)
{
    unsigned int u;
    __nv_bfloat16 r;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.__x = (unsigned short)((u >> 16) | 0x0040u); /* quiet NaN, same sign */
    } else {
        u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
        r.__x = (unsigned short)(u >> 16);
    }
    return r;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    return __float2bfloat16(f);
}
static inline float __bfloat162float(__nv_bfloat16 h)
{
    unsigned int u = (unsigned int)h.__x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x)
{
    __nv_bfloat16 r;
    r.__x = x;
    return r;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h)
{
    return h.__x;
}

/* Two bfloat16 values, 4-byte aligned as CUDA's (one 32-bit load). */
typedef struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
} __nv_bfloat162;
typedef __nv_bfloat162 nv_bfloat162;

static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    __nv_bfloat162 r;
    r.x = __float2bfloat16(a);
    r.y = __float2bfloat16(b);
    return r;
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 v)
{
    return __floats2bfloat162_rn(v.x, v.y);
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    float2 r;
    r.x = __bfloat162float(h.x);
    r.y = __bfloat162float(h.y);
    return r;
}

#ifdef __cplusplus
inline __nv_bfloat16::__nv_bfloat16(float f) : __x(__float2bfloat16(f).__x) {}
inline __nv_bfloat16::operator float() const
{
    return __bfloat162float(*this);
}
#endif

#endif
