/* check_comm_np2.c -- the MPI comm backend on 2 ranks: all-reduce (all
 * dtypes, chunked and empty buffers, several in flight), broadcast,
 * allgather, node topology, counters. */
#include <stdint.h>
#include <stdlib.h>

#include "comm.h"
#include "half.h"
#include "tests.h"

static comm_t c;

static void setup_(void) { ck_assert_int_eq(comm_init_mpi(&c, MPI_COMM_WORLD), DDP_OK); }
static void teardown_(void) { comm_free(&c); }

START_TEST(topology)
{
    ck_assert_int_ge(c.size, 2);
    ck_assert_int_ge(c.nnodes, 1);
    ck_assert_int_ge(c.local_size, 1);
    ck_assert_int_lt(c.local_rank, c.local_size);
    ck_assert_ptr_nonnull(c.ops);
    ck_assert_str_eq(c.ops->name, "mpi");
}
END_TEST

START_TEST(allreduce_float_large_chunks)
{
    /* 40 MB: more than one chunk; every element checked */
    size_t n = (size_t)10 << 20;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i % 1000) * (c.rank + 1));
    comm_desc_t d = {"test", 0, -1};
    uint64_t before = c.allreduce_bytes, seq = c.seq;
    ck_assert_int_eq(comm_allreduce(&c, x, n, COMM_FLOAT, &d), DDP_OK);
    double factor = c.size * (c.size + 1) / 2.0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != (float)((i % 1000) * factor)) ck_abort_msg("element %zu = %g", i, x[i]);
    ck_assert_uint_eq(c.allreduce_bytes - before, n * sizeof(float));
    ck_assert_uint_eq(c.seq, seq + 1);
    ck_assert_str_eq(c.last.what, "test");
    free(x);
}
END_TEST

START_TEST(allreduce_several_in_flight)
{
    double a[3] = {1, 2, 3};
    int64_t b[2] = {c.rank, 10};
    float e[1] = {0};
    comm_req_t *ra, *rb, *re;
    comm_desc_t d = {"test", 1, -1};
    ck_assert_int_eq(c.ops->iallreduce(&c, a, 3, COMM_DOUBLE, &d, &ra), DDP_OK);
    ck_assert_int_eq(c.ops->iallreduce(&c, b, 2, COMM_INT64, &d, &rb), DDP_OK);
    ck_assert_int_eq(c.ops->iallreduce(&c, e, 0, COMM_FLOAT, &d, &re), DDP_OK);
    int done = 0;
    for (int i = 0; i < 1000000 && !done; i++) ck_assert_int_eq(c.ops->test(&c, rb, &done), DDP_OK);
    ck_assert_int_eq(c.ops->wait(&c, re), DDP_OK);
    ck_assert_int_eq(c.ops->wait(&c, rb), DDP_OK);
    ck_assert_int_eq(c.ops->wait(&c, ra), DDP_OK);
    ck_assert_double_eq(a[2], 3.0 * c.size);
    ck_assert_int_eq(b[0], (int64_t)c.size * (c.size - 1) / 2);
    ck_assert_int_eq(b[1], 10 * c.size);
}
END_TEST

START_TEST(allreduce_half)
{
    enum { N = 1000 };
    uint16_t hb[N], hf[N];
    for (int i = 0; i < N; i++) {
        float v = (i - 500) * 0.01f + c.rank;
        hb[i] = ddp_f32_to_bf16(v);
        hf[i] = ddp_f32_to_f16(v);
    }
    comm_desc_t d = {"test", 2, -1};
    ck_assert_int_eq(comm_allreduce(&c, hb, N, COMM_BF16, &d), DDP_OK);
    ck_assert_int_eq(comm_allreduce(&c, hf, N, COMM_FP16, &d), DDP_OK);
    for (int i = 0; i < N; i++) {
        double want = 0;
        for (int r = 0; r < c.size; r++) want += (i - 500) * 0.01 + r;
        ck_assert_double_le(fabs(ddp_bf16_to_f32(hb[i]) - want), fabs(want) * 0.02 + 0.02);
        ck_assert_double_le(fabs(ddp_f16_to_f32(hf[i]) - want), fabs(want) * 0.003 + 0.003);
    }
}
END_TEST

START_TEST(bcast_and_allgather)
{
    char buf[64];
    snprintf(buf, sizeof buf, "from rank %d", c.rank);
    comm_desc_t d = {"test", 3, -1};
    ck_assert_int_eq(c.ops->bcast(&c, buf, sizeof buf, 0, &d), DDP_OK);
    ck_assert_str_eq(buf, "from rank 0");
    int mine = 100 + c.rank, *all = calloc((size_t)c.size, sizeof(int));
    ck_assert_int_eq(c.ops->allgather(&c, &mine, all, sizeof mine, &d), DDP_OK);
    for (int r = 0; r < c.size; r++) ck_assert_int_eq(all[r], 100 + r);
    free(all);
    ck_assert_int_eq(c.ops->barrier(&c), DDP_OK);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *t = tcase_create("mpi");
    tcase_add_checked_fixture(t, setup_, teardown_);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, topology);
    tcase_add_test(t, allreduce_float_large_chunks);
    tcase_add_test(t, allreduce_several_in_flight);
    tcase_add_test(t, allreduce_half);
    tcase_add_test(t, bcast_and_allgather);
    suite_add_tcase(s, t);
    return s;
}
