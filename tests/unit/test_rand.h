/* test_rand.h -- the random inputs of the kernel tests (check_kernels*.c,
 * check_cuda_ops.c): a xorshift64 generator and float vectors drawn from
 * it.  Each test file including it has its own generator; the sequence for
 * a seed is fixed (the tests' expectations and tolerances assume it). */
#ifndef DDP_TEST_RAND_H
#define DDP_TEST_RAND_H

#include <stdint.h>
#include <stdlib.h>

#include "tests.h"

static uint64_t test_rng_state_ = 88172645463325252ull;

/* Restart the sequence: the same s, the same numbers. */
static inline void test_seed(uint64_t s)
{
    test_rng_state_ = s * 2654435761ull + 88172645463325252ull;
}

/* the next 64 random bits */
static inline uint64_t test_bits(void)
{
    test_rng_state_ ^= test_rng_state_ << 13;
    test_rng_state_ ^= test_rng_state_ >> 7;
    test_rng_state_ ^= test_rng_state_ << 17;
    return test_rng_state_;
}

/* uniform in [-1, 1) */
static inline float test_urand(void)
{
    return (float)((test_bits() >> 40) * (1.0 / 8388608.0) - 1.0);
}

/* n floats scale * test_urand() (calloc'ed, at least one element; free()
 * it); asserts the allocation. */
static inline float *test_fvec(size_t n, float scale)
{
    float *a = calloc(n ? n : 1, sizeof *a);
    ck_assert_ptr_nonnull(a);
    for (size_t i = 0; i < n; i++) a[i] = scale * test_urand();
    return a;
}

#endif
