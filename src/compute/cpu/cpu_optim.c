/* cpu_optim.c -- the optimizers of the CPU backend (as cuda/optim.cu) over
 * flat buffers, PyTorch semantics: SGD (momentum, Nesterov, weight decay)
 * and AdamW (its constants and element update from backend_math.h, shared
 * with the GPU), in blocks of VB elements with software prefetch.  p, g,
 * buf, m, v are distinct arrays. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "backend_math.h"
#include "cpu_kernels.h"

/* Software prefetch PF_DIST floats (4 KiB) ahead in the kernels that stream
 * several large arrays (optimizers): from L3 or memory the hardware
 * prefetchers alone leave one core at about half its bandwidth (sgd_step
 * over 1.9M parameters, caches cold: 1.45 ms without, 0.80 ms with). */
#if defined(__GNUC__)
#define PREFETCH(addr, rw) __builtin_prefetch((addr), (rw), 3)
#else
#define PREFETCH(addr, rw) ((void)0)
#endif
#define PF_DIST 1024

/* p -= lr (g + wd p) */
static inline void sgd_plain_(size_t len, float *restrict p, const float *restrict g, float lr,
                              float wd)
{
    for (size_t k = 0; k < len; k++) p[k] -= lr * (g[k] + wd * p[k]);
}

/* buf = m buf + d; p -= lr (nesterov ? d + m buf : buf), d = g + wd p */
static inline void sgd_mom_(size_t len, float *restrict p, const float *restrict g,
                            float *restrict buf, float lr, float m, float wd, int nesterov)
{
    if (nesterov) {
        for (size_t k = 0; k < len; k++) {
            float d = g[k] + wd * p[k];
            float b = m * buf[k] + d;
            buf[k] = b;
            p[k] -= lr * (d + m * b);
        }
    } else {
        for (size_t k = 0; k < len; k++) {
            float b = m * buf[k] + (g[k] + wd * p[k]);
            buf[k] = b;
            p[k] -= lr * b;
        }
    }
}

void cpu_sgd_step(size_t count, float *p, const float *g, float *buf, float lr, float momentum,
                  int nesterov, float wd, int first)
{
    if (count == 0) return;
    size_t i = 0;
    if (momentum == 0.0f || !buf) {
        for (; i + VB <= count; i += VB) {
            if (i + PF_DIST < count) {
                PREFETCH(p + i + PF_DIST, 1);
                PREFETCH(g + i + PF_DIST, 0);
            }
            sgd_plain_(VB, p + i, g + i, lr, wd);
        }
        sgd_plain_(count - i, p + i, g + i, lr, wd);
        return;
    }
    /* first step: buf = d exactly (m * 0 + d) */
    if (first) memset(buf, 0, count * sizeof *buf);
    for (; i + VB <= count; i += VB) {
        if (i + PF_DIST < count) {
            PREFETCH(p + i + PF_DIST, 1);
            PREFETCH(g + i + PF_DIST, 0);
            PREFETCH(buf + i + PF_DIST, 1);
        }
        sgd_mom_(VB, p + i, g + i, buf + i, lr, momentum, wd, nesterov);
    }
    sgd_mom_(count - i, p + i, g + i, buf + i, lr, momentum, wd, nesterov);
}

static inline void adamw_span_(size_t len, float *restrict p, const float *restrict g,
                               float *restrict m, float *restrict v, float decay, float b1,
                               float c1, float b2, float c2, float step_size, float bc2_sqrt,
                               float eps)
{
    size_t k = 0;
#ifdef __SSE2__
    /* sqrtf keeps GCC from vectorising (errno): the same operations, in the
     * same order, four at a time (sqrtps rounds exactly as sqrtss) */
    const __m128 vb1 = _mm_set1_ps(b1), vc1 = _mm_set1_ps(c1), vb2 = _mm_set1_ps(b2);
    const __m128 vc2 = _mm_set1_ps(c2), vdecay = _mm_set1_ps(decay);
    const __m128 vstep = _mm_set1_ps(step_size), vbc2 = _mm_set1_ps(bc2_sqrt);
    const __m128 veps = _mm_set1_ps(eps);
    for (const size_t n4 = len / 4 * 4; k < n4; k += 4) {
        __m128 gk = _mm_loadu_ps(g + k);
        __m128 mk = _mm_add_ps(_mm_mul_ps(vb1, _mm_loadu_ps(m + k)), _mm_mul_ps(vc1, gk));
        __m128 vk =
            _mm_add_ps(_mm_mul_ps(vb2, _mm_loadu_ps(v + k)), _mm_mul_ps(vc2, _mm_mul_ps(gk, gk)));
        __m128 den = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vk), vbc2), veps);
        __m128 pk = _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(p + k), vdecay),
                               _mm_mul_ps(vstep, _mm_div_ps(mk, den)));
        _mm_storeu_ps(m + k, mk);
        _mm_storeu_ps(v + k, vk);
        _mm_storeu_ps(p + k, pk);
    }
#endif
    for (; k < len; k++)
        ddp_adamw_elem(p + k, m + k, v + k, g[k], decay, b1, c1, b2, c2, step_size, bc2_sqrt, eps);
}

/* PyTorch 1.13 AdamW: p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr/bc1 m / (sqrt(v)/sqrt(bc2) + eps), bc_i = 1 - beta_i^t (in double).
 * The constants and the scalar element update are backend_math.h's
 * (ddp_adamw_consts, ddp_adamw_elem), shared with cuda/optim.cu. */
void cpu_adamw_step(size_t count, float *p, const float *g, float *m, float *v, float lr,
                    float beta1, float beta2, float eps, float wd, int64_t t)
{
    if (count == 0) return;
    const ddp_adamw_consts_t a = ddp_adamw_consts(lr, beta1, beta2, wd, t);
    const float decay = a.decay, step_size = a.step_size, bc2_sqrt = a.bc2_sqrt, c1 = a.c1,
                c2 = a.c2;
    size_t i = 0;
    for (; count - i >= VB; i += VB) {
        if (i + PF_DIST < count) {
            PREFETCH(p + i + PF_DIST, 1);
            PREFETCH(g + i + PF_DIST, 0);
            PREFETCH(m + i + PF_DIST, 1);
            PREFETCH(v + i + PF_DIST, 1);
        }
        adamw_span_(VB, p + i, g + i, m + i, v + i, decay, beta1, c1, beta2, c2, step_size,
                    bc2_sqrt, eps);
    }
    adamw_span_(count - i, p + i, g + i, m + i, v + i, decay, beta1, c1, beta2, c2, step_size,
                bc2_sqrt, eps);
}
