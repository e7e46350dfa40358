/* check_metrics.c -- the status line's text (metrics_status_format): the
 * fields, "-" for what is not known yet, the ETA as H:MM:SS; and which ranks
 * a straggler warning names (straggler_pick) on made-up times, where more
 * ranks are slow than are named and the slowest is not the first. */
#include <math.h>
#include <string.h>

#include "metrics.h"
#include "straggler.h"
#include "tests.h"

START_TEST(status_text)
{
    char b[256];
    metrics_status_format(b, sizeof b, 0, 5, 120, 780, 0.478971, 112071.4, 3725.4);
    ck_assert_str_eq(b, "epoch 1/5  step 120/780  loss 0.47897  112071 samples/s  ETA 1:02:05");
    metrics_status_format(b, sizeof b, 4, 5, 1, 780, NAN, NAN, NAN);
    ck_assert_str_eq(b, "epoch 5/5  step 1/780  loss -  - samples/s  ETA -");
    metrics_status_format(b, sizeof b, 0, 1, 10, 10, 1.5, 10, 0);
    ck_assert_str_eq(b, "epoch 1/1  step 10/10  loss 1.50000  10 samples/s  ETA 0:00:00");
    metrics_status_format(b, sizeof b, 0, 1, 1, 10, INFINITY, 1, -1);
    ck_assert_str_eq(b, "epoch 1/1  step 1/10  loss -  1 samples/s  ETA -");
    /* a small buffer is cut, not overrun */
    char small[8];
    metrics_status_format(small, sizeof small, 0, 1, 1, 10, 1, 1, 1);
    ck_assert_str_eq(small, "epoch 1");
}
END_TEST

/* pick over busy[n] with factor 1.3, 1 ms excess, 10 lines between namings */
static straggler_pick_t pick_(const double *busy, int n, int64_t *named_at, int64_t line)
{
    double scratch[16];
    straggler_rule_t rule = {1.3, 1e-3, 10};
    straggler_pick_t p;
    straggler_pick(busy, n, &rule, named_at, line, scratch, &p);
    return p;
}

START_TEST(stragglers_slowest_named_first)
{
    /* 8 ranks, lower median 0.010 s; ranks 3, 4, 6 and 7 over 1.3x: the
     * three slowest by name, slowest first (7, 3, then 4 before 6: a tie
     * goes to the lower rank), 4 due in all */
    double busy[8] = {0.010, 0.010, 0.010, 0.050, 0.030, 0.009, 0.030, 0.080};
    int64_t named[8];
    for (int r = 0; r < 8; r++) named[r] = -1;
    straggler_pick_t p = pick_(busy, 8, named, 0);
    ck_assert_double_eq_tol(p.median, 0.010, 1e-12);
    ck_assert_int_eq(p.ndue, 4);
    ck_assert_int_eq(p.ntop, 3);
    ck_assert_int_eq(p.top[0], 7);
    ck_assert_int_eq(p.top[1], 3);
    ck_assert_int_eq(p.top[2], 4);
    /* named now: not again within 10 lines, then again */
    p = pick_(busy, 8, named, 5);
    ck_assert_int_eq(p.ndue, 0);
    p = pick_(busy, 8, named, 10);
    ck_assert_int_eq(p.ndue, 4);
}
END_TEST

START_TEST(stragglers_thresholds)
{
    int64_t named[4] = {-1, -1, -1, -1};
    /* 2 ranks: the lower median is the fast rank, so the slow one is named */
    double two[2] = {0.100, 0.020};
    straggler_pick_t p = pick_(two, 2, named, 0);
    ck_assert_int_eq(p.ndue, 1);
    ck_assert_int_eq(p.top[0], 0);
    /* 1.3x of the median is not over it; nor is a tiny model's 0.5 ms excess */
    double edge[3] = {0.010, 0.013, 0.010};
    for (int r = 0; r < 4; r++) named[r] = -1;
    ck_assert_int_eq(pick_(edge, 3, named, 0).ndue, 0);
    double tiny[3] = {0.0010, 0.0015, 0.0010};
    ck_assert_int_eq(pick_(tiny, 3, named, 0).ndue, 0);
    /* all equal: nobody */
    double same[4] = {0.02, 0.02, 0.02, 0.02};
    ck_assert_int_eq(pick_(same, 4, named, 0).ndue, 0);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *t = tcase_create("metrics");
    tcase_add_test(t, status_text);
    tcase_add_test(t, stragglers_slowest_named_first);
    tcase_add_test(t, stragglers_thresholds);
    suite_add_tcase(s, t);
    return s;
}
