/* sum_kernels.c -- the element-wise sums of the all-reduces (see
 * sum_kernels.h): float32, float64 and int64 with vector extensions, and
 * bf16 / fp16 widened to float32 eight values at a time. */
#include "sum_kernels.h"

#include <string.h>

#include "half.h"

#define SUM_CHUNK 1024 /* elements per pass of sum_sources (the accumulator stays in L1) */

/* ---- vectors ------------------------------------------------------------ */

/* The sums are memory-bound; written with vector extensions (GCC, Clang)
 * because -O2 does not vectorize plain loops.  Lane i of a vector holds
 * element i, so the result is the same as the scalar loop's. */
typedef float f32x8_t __attribute__((vector_size(32)));
typedef double f64x4_t __attribute__((vector_size(32)));
typedef int64_t i64x4_t __attribute__((vector_size(32)));

/* bfloat16 <-> float32, 8 values at a time as 4 pairs in 32-bit lanes of a
 * 16-byte vector (SSE2 has every operation used; wider generic vectors get
 * their comparisons split into scalar code): in a little-endian pair the
 * even value is the low half, the odd value the high half.  Rounding as
 * ddp_f32_to_bf16: to nearest even, NaN stays a quiet NaN.  Vectors go
 * through pointers: passing them by value may change the ABI. */
typedef float f32x4_t __attribute__((vector_size(16)));
typedef uint32_t u32x4_t __attribute__((vector_size(16)));
typedef int32_t i32x4_t __attribute__((vector_size(16)));

static inline void bf16x8_load_(f32x4_t *even, f32x4_t *odd, const uint16_t *p)
{
    u32x4_t w, e, o;
    memcpy(&w, p, sizeof w);
    e = w << 16;
    o = w & 0xffff0000u;
    memcpy(even, &e, sizeof e);
    memcpy(odd, &o, sizeof o);
}

/* f rounded to bfloat16, in the high 16 bits of each lane */
static inline u32x4_t bf16x4_round_(const f32x4_t *f)
{
    u32x4_t u;
    memcpy(&u, f, sizeof u);
    u32x4_t nan = (u32x4_t)((i32x4_t)(u & 0x7fffffffu) > 0x7f800000);
    u32x4_t rne = u + 0x7fffu + ((u >> 16) & 1u);
    return ((u | 0x00400000u) & nan) | (rne & ~nan);
}

static inline void bf16x8_store_(uint16_t *p, const f32x4_t *even, const f32x4_t *odd)
{
    u32x4_t w = (bf16x4_round_(even) >> 16) | (bf16x4_round_(odd) & 0xffff0000u);
    memcpy(p, &w, sizeof w);
}

/* IEEE binary16 <-> float32 in the same layout, branch-free (after
 * F. Giesen's half_to_float / float_to_half_fast3_rtne), exactly as
 * ddp_f16_to_f32 and ddp_f32_to_f16: round to nearest even, overflow to
 * infinity, NaN to the quiet NaN 0x7e00 (with the sign). */
static inline void f16x4_widen_(f32x4_t *f, u32x4_t h) /* h: 16 bits per lane */
{
    const f32x4_t magic = {0x1p-14f, 0x1p-14f, 0x1p-14f, 0x1p-14f}; /* 113 << 23 */
    u32x4_t o = (h & 0x7fffu) << 13, e = o & 0x0f800000u;
    u32x4_t inf = (u32x4_t)((i32x4_t)e == 0x0f800000), sub = (u32x4_t)((i32x4_t)e == 0);
    o += (127 - 15) << 23;
    o += inf & ((128 - 16) << 23);
    u32x4_t os = o + (1u << 23), r;
    f32x4_t fs;
    memcpy(&fs, &os, sizeof fs);
    fs = fs - magic; /* zero and subnormals: exact */
    memcpy(&r, &fs, sizeof r);
    o = (r & sub) | (o & ~sub);
    o |= (h & 0x8000u) << 16;
    memcpy(f, &o, sizeof o);
}

static inline u32x4_t f16x4_narrow_(const f32x4_t *f) /* 16 bits per lane */
{
    const f32x4_t half = {0.5f, 0.5f, 0.5f, 0.5f}; /* 126 << 23: subnormal rounding */
    u32x4_t u;
    memcpy(&u, f, sizeof u);
    u32x4_t sign = u & 0x80000000u;
    u ^= sign;
    i32x4_t a = (i32x4_t)u;
    u32x4_t big = (u32x4_t)(a >= (127 + 16) << 23), nan = (u32x4_t)(a > 0x7f800000);
    u32x4_t small = (u32x4_t)(a < 113 << 23);
    u32x4_t ob = (nan & 0x7e00u) | (~nan & 0x7c00u);
    f32x4_t fs;
    memcpy(&fs, &u, sizeof fs);
    fs = fs + half;
    u32x4_t os;
    memcpy(&os, &fs, sizeof os);
    os -= 126u << 23;
    u32x4_t on = (u + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    u32x4_t o = (ob & big) | (os & small & ~big) | (on & ~small & ~big);
    return o | (sign >> 16);
}

static inline void f16x8_load_(f32x4_t *even, f32x4_t *odd, const uint16_t *p)
{
    u32x4_t w;
    memcpy(&w, p, sizeof w);
    f16x4_widen_(even, w & 0xffffu);
    f16x4_widen_(odd, w >> 16);
}

static inline void f16x8_store_(uint16_t *p, const f32x4_t *even, const f32x4_t *odd)
{
    u32x4_t w = f16x4_narrow_(even) | (f16x4_narrow_(odd) << 16);
    memcpy(p, &w, sizeof w);
}

/* ---- sum_accumulate: acc = in + acc ---------------------------------- */

/* acc = in + acc */
#define DEFINE_ACCUMULATE_(name, T, V, L)                                                          \
    static void name(T *restrict acc, const T *restrict in, size_t n)                              \
    {                                                                                              \
        size_t i = 0;                                                                              \
        for (; i + 2 * (L) <= n; i += 2 * (L)) {                                                   \
            V a0, a1, b0, b1;                                                                      \
            memcpy(&a0, acc + i, sizeof a0), memcpy(&a1, acc + i + (L), sizeof a1);                \
            memcpy(&b0, in + i, sizeof b0), memcpy(&b1, in + i + (L), sizeof b1);                  \
            a0 = b0 + a0, a1 = b1 + a1;                                                            \
            memcpy(acc + i, &a0, sizeof a0), memcpy(acc + i + (L), &a1, sizeof a1);                \
        }                                                                                          \
        for (; i < n; i++) acc[i] = in[i] + acc[i];                                                \
    }

DEFINE_ACCUMULATE_(accumulate_f32_, float, f32x8_t, 8)
DEFINE_ACCUMULATE_(accumulate_f64_, double, f64x4_t, 4)
DEFINE_ACCUMULATE_(accumulate_i64_, int64_t, i64x4_t, 4)

void sum_accumulate_bf16(uint16_t *restrict acc, const uint16_t *restrict in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x4_t ae, ao, be, bo;
        bf16x8_load_(&ae, &ao, in + i);
        bf16x8_load_(&be, &bo, acc + i);
        ae = ae + be, ao = ao + bo;
        bf16x8_store_(acc + i, &ae, &ao);
    }
    for (; i < n; i++) acc[i] = ddp_f32_to_bf16(ddp_bf16_to_f32(in[i]) + ddp_bf16_to_f32(acc[i]));
}

void sum_accumulate_fp16(uint16_t *restrict acc, const uint16_t *restrict in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x4_t ae, ao, be, bo;
        f16x8_load_(&ae, &ao, in + i);
        f16x8_load_(&be, &bo, acc + i);
        ae = ae + be, ao = ao + bo;
        f16x8_store_(acc + i, &ae, &ao);
    }
    for (; i < n; i++) acc[i] = ddp_f32_to_f16(ddp_f16_to_f32(in[i]) + ddp_f16_to_f32(acc[i]));
}

void sum_accumulate(comm_dtype_t t, void *acc, const void *in, size_t n)
{
    switch (t) {
    case COMM_FLOAT: accumulate_f32_(acc, in, n); break;
    case COMM_DOUBLE: accumulate_f64_(acc, in, n); break;
    case COMM_INT64: accumulate_i64_(acc, in, n); break;
    case COMM_BF16: sum_accumulate_bf16(acc, in, n); break;
    case COMM_FP16: sum_accumulate_fp16(acc, in, n); break;
    }
}

/* ---- sum_sources: out = src[0] + src[1] + ... ------------------------- */

/* out = a + b; out may be a or b (each element is loaded before it is
 * stored). */
#define DEFINE_ADD_(name, T, V, L)                                                                 \
    static void name(T *out, const T *a, const T *b, size_t n)                                     \
    {                                                                                              \
        size_t i = 0;                                                                              \
        for (; i + (L) <= n; i += (L)) {                                                           \
            V x, y;                                                                                \
            memcpy(&x, a + i, sizeof x), memcpy(&y, b + i, sizeof y);                              \
            x = x + y;                                                                             \
            memcpy(out + i, &x, sizeof x);                                                         \
        }                                                                                          \
        for (; i < n; i++) out[i] = a[i] + b[i];                                                   \
    }

DEFINE_ADD_(add_f32_, float, f32x8_t, 8)
DEFINE_ADD_(add_f64_, double, f64x4_t, 4)
DEFINE_ADD_(add_i64_, int64_t, i64x4_t, 4)

/* out = ((src[0] + src[1]) + src[2]) + ... (nsrc >= 2 sources, in this
 * order), through an accumulator of SUM_CHUNK elements on the stack; out may
 * be one of the sources. */
#define DEFINE_SUM_SOURCES_(name, T, add)                                                          \
    static void name(T *out, const char *const *src, int nsrc, size_t n)                           \
    {                                                                                              \
        if (nsrc == 2) {                                                                           \
            add(out, (const T *)src[0], (const T *)src[1], n);                                     \
            return;                                                                                \
        }                                                                                          \
        T acc[SUM_CHUNK];                                                                          \
        for (size_t o = 0; o < n; o += SUM_CHUNK) {                                                \
            size_t len = n - o < SUM_CHUNK ? n - o : SUM_CHUNK;                                    \
            add(acc, (const T *)src[0] + o, (const T *)src[1] + o, len);                           \
            for (int q = 2; q < nsrc; q++) add(acc, acc, (const T *)src[q] + o, len);              \
            memcpy(out + o, acc, len * sizeof(T));                                                 \
        }                                                                                          \
    }

DEFINE_SUM_SOURCES_(sum_sources_f32_, float, add_f32_)
DEFINE_SUM_SOURCES_(sum_sources_f64_, double, add_f64_)
DEFINE_SUM_SOURCES_(sum_sources_i64_, int64_t, add_i64_)

static void sum_sources_half_(comm_dtype_t t, uint16_t *out, const char *const *src, int nsrc,
                              size_t n)
{
    size_t i0 = 0;
    const uint16_t *s0 = (const uint16_t *)src[0], *s1 = (const uint16_t *)src[1];
    void (*load)(f32x4_t *, f32x4_t *, const uint16_t *) =
        t == COMM_BF16 ? bf16x8_load_ : f16x8_load_;
    void (*store)(uint16_t *, const f32x4_t *, const f32x4_t *) =
        t == COMM_BF16 ? bf16x8_store_ : f16x8_store_;
    if (t == COMM_BF16 && nsrc == 2) { /* the common case, with the calls inlined */
        for (; i0 + 8 <= n; i0 += 8) {
            f32x4_t ae, ao, be, bo;
            bf16x8_load_(&ae, &ao, s0 + i0);
            bf16x8_load_(&be, &bo, s1 + i0);
            ae = ae + be, ao = ao + bo;
            bf16x8_store_(out + i0, &ae, &ao);
        }
    }
    for (; i0 + 8 <= n; i0 += 8) {
        f32x4_t ae, ao, be, bo;
        load(&ae, &ao, s0 + i0);
        for (int q = 1; q < nsrc; q++) {
            load(&be, &bo, (const uint16_t *)src[q] + i0);
            ae = ae + be, ao = ao + bo;
        }
        store(out + i0, &ae, &ao);
    }
    float acc[SUM_CHUNK];
    for (size_t o = i0; o < n; o += SUM_CHUNK) {
        size_t len = n - o < SUM_CHUNK ? n - o : SUM_CHUNK;
        for (int q = 0; q < nsrc; q++) {
            const uint16_t *x = (const uint16_t *)src[q] + o;
            for (size_t i = 0; i < len; i++) {
                float v = t == COMM_BF16 ? ddp_bf16_to_f32(x[i]) : ddp_f16_to_f32(x[i]);
                acc[i] = q ? acc[i] + v : v;
            }
        }
        for (size_t i = 0; i < len; i++)
            out[o + i] = t == COMM_BF16 ? ddp_f32_to_bf16(acc[i]) : ddp_f32_to_f16(acc[i]);
    }
}

void sum_sources(comm_dtype_t t, void *out, const char *const *src, int nsrc, size_t n)
{
    switch (t) {
    case COMM_FLOAT: sum_sources_f32_(out, src, nsrc, n); break;
    case COMM_DOUBLE: sum_sources_f64_(out, src, nsrc, n); break;
    case COMM_INT64: sum_sources_i64_(out, src, nsrc, n); break;
    case COMM_BF16:
    case COMM_FP16: sum_sources_half_(t, out, src, nsrc, n); break;
    }
}
