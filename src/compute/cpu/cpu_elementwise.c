/* cpu_elementwise.c -- the elementwise ops of the CPU backend (as
 * cuda/elementwise.cu): the sum of two tensors (residual connections),
 * ReLU and GELU (erf form) forward and backward,
 * dropout forward and backward (the keep decision is rng.h's Philox draw,
 * keyed by seed, step, layer, global sample and element), scale, and the
 * 16-bit casts of gradient compression (half.h). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_kernels.h"
#include "half.h"
#include "rng.h"

/* y = a + b, relu: relu(a + b) (as cpu_relu_fwd); in place (y == a or
 * y == b) is fine */
static inline void add_(int relu, size_t count, const float *a, const float *b, float *y)
{
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) {
            float v = a[i + q] + b[i + q];
            t[q] = relu && v < 0.0f ? 0.0f : v;
        }
        UNROLL_VB
        for (int q = 0; q < VB; q++) y[i + q] = t[q];
    }
    for (; i < count; i++) {
        float v = a[i] + b[i];
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

void cpu_add(size_t count, const float *a, const float *b, float *y, int relu)
{
    if (relu)
        add_(1, count, a, b, y);
    else
        add_(0, count, a, b, y);
}

/* NaN passes through (PyTorch); in place is fine */
void cpu_relu_fwd(size_t count, const float *x, float *y)
{
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        float t[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) t[q] = x[i + q] < 0.0f ? 0.0f : x[i + q];
        UNROLL_VB
        for (int q = 0; q < VB; q++) y[i + q] = t[q];
    }
    for (; i < count; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* dx = x > 0 ? dy : 0 (x the input or the output: same mask); sum: of
 * dy2 + dy (as cpu_add(dy2, dy)).  Inlined with a constant sum. */
static inline void relu_bwd_(int sum, size_t count, const float *x, const float *dy,
                             const float *dy2, float *dx)
{
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        float t[VB];
        float g[VB];
        UNROLL_VB
        for (int q = 0; q < VB; q++) /* unconditional loads vectorise */
            g[q] = sum ? dy2[i + q] + dy[i + q] : dy[i + q];
        UNROLL_VB
        for (int q = 0; q < VB; q++) t[q] = x[i + q] <= 0.0f ? 0.0f : g[q];
        UNROLL_VB
        for (int q = 0; q < VB; q++) dx[i + q] = t[q];
    }
    for (; i < count; i++) dx[i] = x[i] <= 0.0f ? 0.0f : sum ? dy2[i] + dy[i] : dy[i];
}

void cpu_relu_bwd(size_t count, const float *x, const float *dy, float *dx, const float *dy2)
{
    if (dy2)
        relu_bwd_(1, count, x, dy, dy2, dx);
    else
        relu_bwd_(0, count, x, dy, NULL, dx);
}

void cpu_gelu_fwd(size_t count, const float *x, float *y)
{
    for (size_t i = 0; i < count; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
    }
}

/* d/dx [x Phi(x)] = Phi(x) + x phi(x) */
void cpu_gelu_bwd(size_t count, const float *x, const float *dy, float *dx)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = 0; i < count; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * (float)M_SQRT1_2));
        float pdf = expf(-0.5f * v * v) * inv_sqrt_2pi;
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

/* out[i, j] = keep(i, j) ? in[i, j] / (1 - p) : 0, the keep decision being
 * exactly ddp_dropout_keep(seed, step, layer, sample_idx[i], j, p), computed
 * four elements per Philox call as that function does. */
static void dropout_apply_(int n, size_t features, const float *in, float *out, float p,
                           uint64_t seed, uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    if (n <= 0 || features == 0) return;
    if (p <= 0.0f) { /* u01 >= 0 always: everything kept, scale 1 */
        cpu_copy(out, in, (size_t)n * features * sizeof *out);
        return;
    }
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    const uint64_t key = ddp_key(seed, DDP_STREAM_DROPOUT, (step << 16) ^ layer);
    for (int i = 0; i < n; i++) {
        const float *a = in + (size_t)i * features;
        float *b = out + (size_t)i * features;
        const uint64_t sample = (uint64_t)sample_idx[i];
        for (size_t j = 0; j < features; j += 4) {
            ddp_u32x4_t r = ddp_rand4(key, sample, j >> 2);
            size_t m = MIN((size_t)4, features - j);
            for (size_t q = 0; q < m; q++)
                b[j + q] = ddp_u01(r.v[q]) >= p ? a[j + q] * scale : 0.0f;
        }
    }
}

void cpu_dropout_fwd(int n, size_t features, const float *x, float *y, float p, uint64_t seed,
                     uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    dropout_apply_(n, features, x, y, p, seed, step, layer, sample_idx);
}

void cpu_dropout_bwd(int n, size_t features, const float *dy, float *dx, float p, uint64_t seed,
                     uint64_t step, uint32_t layer, const int64_t *sample_idx)
{
    dropout_apply_(n, features, dy, dx, p, seed, step, layer, sample_idx);
}

void cpu_scale(size_t count, float *x, float alpha)
{
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        UNROLL_VB
        for (int q = 0; q < VB; q++) x[i + q] *= alpha;
    }
    for (; i < count; i++) x[i] *= alpha;
}

void cpu_to_half(size_t count, const float *x, uint16_t *h, int bf16)
{
    if (bf16)
        for (size_t i = 0; i < count; i++) h[i] = ddp_f32_to_bf16(x[i]);
    else
        for (size_t i = 0; i < count; i++) h[i] = ddp_f32_to_f16(x[i]);
}

void cpu_from_half(size_t count, const uint16_t *h, float *x, int bf16)
{
    if (bf16)
        for (size_t i = 0; i < count; i++) x[i] = ddp_bf16_to_f32(h[i]);
    else
        for (size_t i = 0; i < count; i++) x[i] = ddp_f16_to_f32(h[i]);
}
