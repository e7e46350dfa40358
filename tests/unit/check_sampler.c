/* check_sampler.c -- the distributed sampler: a real bijection for many N,
 * ranks disjoint and covering, the union of batch t independent of the world
 * size, reshuffling per epoch, --no-shuffle order, drop_last and uneven
 * counts. */
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "tests.h"

/* perm of an epoch is a bijection on [0, n) */
static void check_bijection_(int64_t n, uint64_t seed, int64_t epoch)
{
    sampler_t s;
    sampler_init(&s, n, 1, 0, 1, seed, 1, 0);
    sampler_set_epoch(&s, epoch);
    unsigned char *seen = calloc((size_t)n, 1);
    for (int64_t p = 0; p < n; p++) {
        int64_t v = sampler_perm(&s, p);
        ck_assert_msg(v >= 0 && v < n, "n=%lld: perm(%lld) = %lld", (long long)n, (long long)p,
                      (long long)v);
        ck_assert_msg(!seen[v], "n=%lld: %lld hit twice", (long long)n, (long long)v);
        seen[v] = 1;
    }
    free(seen);
}

START_TEST(bijection_many_n)
{
    static const int64_t ns[] = {1,    2,    3,    4,    5,     7,     13,    16,    17,  31,
                                 63,   64,   65,   97,   100,   127,   255,   256,   257, 1000,
                                 1021, 4093, 4096, 4099, 10007, 65521, 65536, 100003};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int e = 0; e < 2; e++) check_bijection_(ns[i], 42 + i, e);
    for (int64_t n = 1; n <= 300; n++) check_bijection_(n, (uint64_t)n, 3);
}
END_TEST

START_TEST(shuffles_and_reshuffles)
{
    int64_t n = 1000;
    sampler_t s;
    sampler_init(&s, n, 1, 0, 10, 7, 1, 0);
    int64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (int64_t p = 0; p < n; p++) a[p] = sampler_perm(&s, p);
    int fixed = 0;
    for (int64_t p = 0; p < n; p++) fixed += a[p] == p;
    ck_assert_int_lt(fixed, 20); /* not the identity */
    sampler_set_epoch(&s, 1);
    int same = 0;
    for (int64_t p = 0; p < n; p++) same += (b[p] = sampler_perm(&s, p)) == a[p];
    ck_assert_int_lt(same, 20); /* epoch 1 differs from epoch 0 */
    /* deterministic: the same (seed, epoch) gives the same order */
    sampler_t s2;
    sampler_init(&s2, n, 3, 2, 5, 7, 1, 1);
    sampler_set_epoch(&s2, 1);
    for (int64_t p = 0; p < n; p++) ck_assert_int_eq(sampler_perm(&s2, p), b[p]);
    /* a different seed differs */
    sampler_init(&s2, n, 1, 0, 10, 8, 1, 0);
    same = 0;
    for (int64_t p = 0; p < n; p++) same += sampler_perm(&s2, p) == a[p];
    ck_assert_int_lt(same, 20);
    /* --no-shuffle: the identity in every epoch */
    sampler_init(&s2, n, 2, 1, 4, 7, 0, 0);
    sampler_set_epoch(&s2, 5);
    int64_t idx[4];
    ck_assert_int_eq(sampler_batch(&s2, 3, idx), 4);
    for (int j = 0; j < 4; j++) ck_assert_int_eq(idx[j], (3 * 4 + j) * 2 + 1);
    free(a);
    free(b);
}
END_TEST

/* For world sizes 1..4: ranks are disjoint and cover the epoch (minus the
 * dropped tail), and the union of batch t is perm[t*B*W, (t+1)*B*W). */
static void check_world_(int64_t n, int batch, int world, int drop_last, int shuffle)
{
    uint64_t seed = 99;
    sampler_t ref;
    sampler_init(&ref, n, 1, 0, 1, seed, shuffle, 0);
    sampler_set_epoch(&ref, 2);
    int64_t global = (int64_t)batch * world;
    int64_t steps = drop_last ? n / global : (n + global - 1) / global;
    int64_t used = drop_last ? steps * global : n;
    unsigned char *seen = calloc((size_t)n, 1);
    int64_t *idx = malloc((size_t)batch * sizeof *idx);
    for (int r = 0; r < world; r++) {
        sampler_t s;
        sampler_init(&s, n, world, r, batch, seed, shuffle, drop_last);
        sampler_set_epoch(&s, 2);
        ck_assert_int_eq(s.steps, steps);
        ck_assert_int_eq(sampler_batch(&s, steps, idx), 0); /* past the end */
        for (int64_t t = 0; t < steps; t++) {
            int got = sampler_batch(&s, t, idx);
            int64_t lo = t * global, hi = lo + global < used ? lo + global : used;
            int64_t gcount = sampler_global_count(&s, t);
            ck_assert_int_eq(gcount, hi - lo);
            /* this rank's count: positions lo + r + W*j below hi */
            int want = 0;
            for (int64_t p = lo + r; p < hi; p += world) want++;
            ck_assert_int_eq(got, want);
            if (drop_last) ck_assert_int_eq(got, batch);
            for (int j = 0; j < got; j++) {
                int64_t v = idx[j];
                ck_assert_msg(!seen[v], "W=%d rank %d step %lld: sample %lld twice", world, r,
                              (long long)t, (long long)v);
                seen[v] = 1;
                /* the same sample as position lo + r + W*j of the reference */
                ck_assert_int_eq(v, sampler_perm(&ref, lo + r + (int64_t)world * j));
            }
        }
    }
    int64_t covered = 0;
    for (int64_t i = 0; i < n; i++) covered += seen[i];
    ck_assert_int_eq(covered, used);
    free(seen);
    free(idx);
}

START_TEST(world_size_invariant)
{
    for (int w = 1; w <= 4; w++) {
        check_world_(1000, 8, w, 0, 1);
        check_world_(1000, 8, w, 1, 1);
        check_world_(997, 7, w, 0, 1); /* uneven: short and empty ranks at the end */
        check_world_(997, 7, w, 1, 1);
        check_world_(101, 5, w, 0, 0);
        check_world_(1, 1, w, 0, 1);
    }
}
END_TEST

START_TEST(uneven_last_step)
{
    /* N = 10, B = 2, W = 4: steps 2; step 1 holds positions 8, 9 only */
    sampler_t s;
    int64_t idx[2];
    for (int r = 0; r < 4; r++) {
        sampler_init(&s, 10, 4, r, 2, 1, 0, 0);
        ck_assert_int_eq(s.steps, 2);
        ck_assert_int_eq(sampler_global_count(&s, 1), 2);
        int got = sampler_batch(&s, 1, idx);
        ck_assert_int_eq(got, r < 2 ? 1 : 0);
        if (got) ck_assert_int_eq(idx[0], 8 + r);
    }
    sampler_init(&s, 10, 4, 0, 2, 1, 0, 1);
    ck_assert_int_eq(s.steps, 1);
    ck_assert_int_eq(sampler_global_count(&s, 0), 8);
    sampler_init(&s, 7, 4, 0, 2, 1, 1, 1);
    ck_assert_int_eq(s.steps, 0);
}
END_TEST

START_TEST(memory_independent_of_n)
{
    /* huge N: no allocation, permutation still in range and injective on a sample */
    sampler_t s;
    int64_t n = (int64_t)3e12 + 17;
    sampler_init(&s, n, 8, 3, 256, 5, 1, 0);
    int64_t idx[256];
    ck_assert_int_eq(sampler_batch(&s, 12345, idx), 256);
    for (int j = 0; j < 256; j++) {
        ck_assert(idx[j] >= 0 && idx[j] < n);
        for (int k = 0; k < j; k++) ck_assert(idx[k] != idx[j]);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *t = tcase_create("sampler");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, bijection_many_n);
    tcase_add_test(t, shuffles_and_reshuffles);
    tcase_add_test(t, world_size_invariant);
    tcase_add_test(t, uneven_last_step);
    tcase_add_test(t, memory_independent_of_n);
    suite_add_tcase(s, t);
    return s;
}
