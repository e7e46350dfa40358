/* cpu_reduce.c -- the reductions of the CPU backend (as cuda/reduce.cu):
 * sumsq (the squared norm for --clip-grad-norm, in double, in VB lanes)
 * and all_finite (the non-finite guard, chunk by chunk, stopping early). */
#include <stddef.h>

#include "cpu_kernels.h"

double cpu_sumsq(size_t count, const float *x)
{
    double acc[VB] = {0}, s = 0;
    size_t i = 0;
    for (; i + VB <= count; i += VB)
        for (int q = 0; q < VB; q++) acc[q] += (double)x[i + q] * x[i + q];
    for (; i < count; i++) s += (double)x[i] * x[i];
    for (int q = 0; q < VB; q++) s += acc[q];
    return s;
}

/* x * 0 is 0 for finite x and NaN for Inf or NaN: one NaN poisons the sum */
int cpu_all_finite(size_t count, const float *x)
{
    const size_t chunk = 4096; /* stop early on a bad chunk */
    for (size_t c0 = 0; c0 < count; c0 += chunk) {
        size_t end = MIN(count, c0 + chunk), i = c0;
        float acc[VB] = {0}, s = 0;
        for (; i + VB <= end; i += VB)
            for (int q = 0; q < VB; q++) acc[q] += x[i + q] * 0.0f;
        for (; i < end; i++) s += x[i] * 0.0f;
        for (int q = 0; q < VB; q++) s += acc[q];
        if (s != 0.0f) return 0;
    }
    return 1;
}
