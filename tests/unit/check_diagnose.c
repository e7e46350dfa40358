/* check_diagnose.c -- --diagnose's verdict (diagnose_judge) on hand-made
 * numbers: each threshold just below and just above, the priority order
 * when several hold (straggler, input-bound, communication-bound,
 * compute-bound), one rank; the next-step line; the nccl-tests bandwidths. */
#include <math.h>
#include <string.h>

#include "diagnose.h"
#include "tests.h"

/* A healthy 2-rank job: 10 ms steps, compute 9 ms on both ranks, no data
 * wait, 0.5 ms exposed communication, no-comm and in-memory as fast. */
static double compute_[8];
static diagnose_numbers_t healthy_(void)
{
    compute_[0] = compute_[1] = 9.0;
    return (diagnose_numbers_t){.nranks = 2,
                                .compute_ms = compute_,
                                .straggler_factor = 1.3,
                                .step_ms = 10.0,
                                .data_wait_ms = 0.0,
                                .comm_exposed_ms = 0.5,
                                .nocomm_step_ms = 10.0,
                                .memory_step_ms = 10.0};
}

static diagnose_kind_t judge_(const diagnose_numbers_t *n, diagnose_verdict_t *v)
{
    double scratch[8];
    diagnose_judge(n, scratch, v);
    return v->kind;
}

START_TEST(healthy)
{
    diagnose_numbers_t n = healthy_();
    diagnose_verdict_t v;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    ck_assert_int_eq(v.straggler, -1);
    ck_assert_close(v.comm_fraction, 0.05, 1e-12);
    ck_assert_close(v.compute_ratio, 1.0, 1e-12);
    ck_assert_str_eq(diagnose_kind_name(v.kind), "compute-bound (healthy)");
    char next[512];
    diagnose_next(&v, &n, "", next, sizeof next);
    ck_assert_str_eq(next, "scaling is limited by compute: raise the --batch or add ranks");
}
END_TEST

START_TEST(straggler)
{
    diagnose_numbers_t n = healthy_();
    diagnose_verdict_t v;
    /* 1.3 x 9 = 11.7: just under the factor it is not a straggler, just
     * over it is */
    compute_[1] = 11.69;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    compute_[1] = 11.71;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_STRAGGLER);
    ck_assert_int_eq(v.straggler, 1);
    ck_assert_close(v.straggler_times, 11.71 / 9.0, 1e-12);
    ck_assert_close(v.median_compute_ms, 9.0, 1e-12);
    char next[512];
    diagnose_next(&v, &n, "node07", next, sizeof next);
    ck_assert_msg(strstr(next, "rank 1 on host node07 is 1.3 times the median") == next, "%s",
                  next);
    /* the excess must also be over DIAGNOSE_STRAGGLER_MIN_MS: 0.2 vs 0.1 ms
     * is 2x the median but only 0.1 ms more */
    compute_[0] = 0.1;
    compute_[1] = 0.2;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    compute_[1] = 0.1 + DIAGNOSE_STRAGGLER_MIN_MS + 0.01;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_STRAGGLER);
    /* ... and over DIAGNOSE_STRAGGLER_MIN_FRACTION of the step: 1.33x the
     * median, 2.2 ms more, in a step of 300 ms of communication is not what
     * limits the job */
    compute_[0] = 6.6;
    compute_[1] = 8.8;
    n.step_ms = 300;
    n.nocomm_step_ms = 7;
    n.memory_step_ms = 300;
    n.comm_exposed_ms = 290;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMM_BOUND);
    n.step_ms = 20;
    n.nocomm_step_ms = n.memory_step_ms = 20;
    n.comm_exposed_ms = 0.5;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_STRAGGLER);
    n = healthy_();
    /* --straggler-factor decides: 2x the median, named with 1.5, not with 3 */
    compute_[0] = 9.0;
    compute_[1] = 18.0;
    n.straggler_factor = 1.5;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_STRAGGLER);
    n.straggler_factor = 3;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    /* the lower median of 4 ranks, the slowest one named */
    n.straggler_factor = 1.3;
    n.nranks = 4;
    double c4[4] = {9.0, 30.0, 9.5, 20.0};
    n.compute_ms = c4;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_STRAGGLER);
    ck_assert_int_eq(v.straggler, 1);
    ck_assert_close(v.median_compute_ms, 9.5, 1e-12);
    /* a straggler needs company: one rank is never one */
    n.nranks = 1;
    ck_assert_int_ne(judge_(&n, &v), DIAGNOSE_STRAGGLER);
}
END_TEST

START_TEST(input_bound)
{
    diagnose_numbers_t n = healthy_();
    diagnose_verdict_t v;
    n.memory_step_ms = 8.0; /* 1.25x faster from memory */
    n.data_wait_ms = 0.99;  /* just under 10%: not yet */
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    n.data_wait_ms = 1.01;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_INPUT_BOUND);
    ck_assert_close(v.input_fraction, 0.101, 1e-12);
    ck_assert_close(v.memory_gain, 1.25, 1e-12);
    /* data wait alone is not enough: memory must be faster by more than 10% */
    n.data_wait_ms = 5.0;
    n.memory_step_ms = 10.0 / 1.09;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    n.memory_step_ms = 10.0 / 1.11;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_INPUT_BOUND);
    char next[512];
    diagnose_next(&v, &n, "", next, sizeof next);
    ck_assert_msg(strstr(next, "--prefetch") && strstr(next, "ddptrain-prep"), "%s", next);
    /* no data wait, but 1.5x faster from memory: the loader's work slows
     * the ranks down */
    n.data_wait_ms = 0;
    n.memory_step_ms = 10.0 / 1.49;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    n.memory_step_ms = 10.0 / 1.51;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_INPUT_BOUND);
    diagnose_next(&v, &n, "", next, sizeof next);
    ck_assert_msg(strstr(next, "taking CPU time from the ranks"), "%s", next);
    /* one rank: judged the same */
    n.nranks = 1;
    n.nocomm_step_ms = NAN;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_INPUT_BOUND);
}
END_TEST

START_TEST(comm_bound)
{
    diagnose_numbers_t n = healthy_();
    diagnose_verdict_t v;
    n.comm_exposed_ms = 0.99; /* just under 10%: not yet */
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    n.comm_exposed_ms = 1.01;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMM_BOUND);
    /* or the step is more than 1.15 x the no-comm step */
    n.comm_exposed_ms = 0.5;
    n.nocomm_step_ms = 10.0 / 1.14;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    n.nocomm_step_ms = 10.0 / 1.16;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMM_BOUND);
    ck_assert_close(v.compute_ratio, 1.16, 1e-12);
    char next[512];
    diagnose_next(&v, &n, "", next, sizeof next);
    ck_assert_msg(strstr(next, "--bucket-cap-mb") && strstr(next, "--grad-compress bf16"), "%s",
                  next);
    /* one rank: no communication to be bound by */
    n.nranks = 1;
    n.comm_exposed_ms = 5.0;
    n.nocomm_step_ms = NAN;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMPUTE_BOUND);
    ck_assert(isnan(v.compute_ratio) && isnan(v.comm_fraction));
}
END_TEST

START_TEST(priority)
{
    diagnose_numbers_t n = healthy_();
    diagnose_verdict_t v;
    /* all three problems at once: straggler first */
    compute_[1] = 20.0;
    n.data_wait_ms = 3.0;
    n.memory_step_ms = 5.0;
    n.comm_exposed_ms = 4.0;
    n.nocomm_step_ms = 5.0;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_STRAGGLER);
    /* no straggler: input-bound before communication-bound (a rank waiting
     * for data makes the others wait in the all-reduce) */
    compute_[1] = 9.0;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_INPUT_BOUND); /* 2x from memory */
    n.memory_step_ms = 8.0;                                 /* 1.25x from memory, 30% data wait */
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_INPUT_BOUND);
    n.data_wait_ms = 0;
    ck_assert_int_eq(judge_(&n, &v), DIAGNOSE_COMM_BOUND);
}
END_TEST

START_TEST(bandwidth)
{
    double alg, bus;
    /* 1 GB in 100 ms: 10 GB/s; busbw 2(n-1)/n of it */
    diagnose_bandwidth(1e9, 100, 2, &alg, &bus);
    ck_assert_close(alg, 10.0, 1e-12);
    ck_assert_close(bus, 10.0, 1e-12);
    diagnose_bandwidth(1e9, 100, 4, &alg, &bus);
    ck_assert_close(bus, 15.0, 1e-12);
    diagnose_bandwidth(4481040, 0.572, 8, &alg, &bus);
    ck_assert_close(alg, 4481040 / 0.572e-3 / 1e9, 1e-12);
    ck_assert_close(bus, alg * 14.0 / 8.0, 1e-12);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("diagnose");
    TCase *t = tcase_create("diagnose");
    tcase_add_test(t, healthy);
    tcase_add_test(t, straggler);
    tcase_add_test(t, input_bound);
    tcase_add_test(t, comm_bound);
    tcase_add_test(t, priority);
    tcase_add_test(t, bandwidth);
    suite_add_tcase(s, t);
    return s;
}
