/* check_metrics.c -- the status line's text (metrics_status_format): the
 * fields, "-" for what is not known yet, the ETA as H:MM:SS. */
#include <math.h>
#include <string.h>

#include "metrics.h"
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

Suite *test_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *t = tcase_create("metrics");
    tcase_add_test(t, status_text);
    suite_add_tcase(s, t);
    return s;
}
