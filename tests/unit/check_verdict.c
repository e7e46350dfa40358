/* check_verdict.c -- the watchdog's verdict (verdict.h) over made-up views
 * of the ranks, where the scripts cannot arrange them: the rank blocked
 * longest is not the first over --timeout, a rank vanished while another
 * waits, a rank fell silent, a desync, a rank ending the job itself.  The
 * report must name the right rank, collective and time. */
#include <stdio.h>
#include <string.h>

#include "tests.h"
#include "verdict.h"

enum { W = 4 };

static const char *host_(int r)
{
    static const char *names[W] = {"node-a", "node-b", "node-c", "node-d"};
    return r >= 0 && r < W ? names[r] : "?";
}

static verdict_ctx_t ctx_(void)
{
    return (verdict_ctx_t){.size = W, .timeout = 5, .beat = 1, .vanish_grace = 3, .list_max = 8,
                           .host = host_};
}

static activity_coll_t coll_(uint64_t number, const char *what, int index, int64_t step)
{
    activity_coll_t c = {.number = number, .bytes = 4096, .step = step, .index = index,
                         .plane = PLANE_GRADIENT};
    snprintf(c.what, sizeof c.what, "%s", what);
    snprintf(c.op, sizeof c.op, "all-reduce");
    return c;
}

/* Every rank known and in the backward pass of step 7, last collective #10. */
static void calm_(wd_view_t *v)
{
    memset(v, 0, W * sizeof *v);
    for (int r = 0; r < W; r++) {
        v[r].known = 1;
        v[r].rec.phase = PHASE_BACKWARD;
        v[r].rec.step = 7;
        v[r].rec.last = coll_(10, "gradient-bucket", 0, 7);
        v[r].phase_for = 0.5;
        v[r].silent_for = 0.2;
    }
}

/* Rank r waits in collective c (its last started) for `s` seconds. */
static void block_(wd_view_t *v, int r, activity_coll_t c, double s)
{
    v[r].rec.last = c;
    v[r].rec.blocked = c;
    v[r].blocked_for = s;
}

static const char *report_(const wd_view_t *v, verdict_t d)
{
    static jobreport_t t;
    memset(&t, 0, sizeof t);
    verdict_ctx_t c = ctx_();
    ck_assert_int_eq(verdict_report(&c, v, d, &t), 0);
    return t.buf;
}

static verdict_t decide_(const wd_view_t *v)
{
    verdict_ctx_t c = ctx_();
    return verdict_decide(&c, v);
}

/* The verdict must be `kind` on `rank`. */
static verdict_t expect_(const wd_view_t *v, verdict_kind_t kind, int rank)
{
    verdict_t d = decide_(v);
    ck_assert_int_eq(d.kind, kind);
    ck_assert_int_eq(d.rank, rank);
    return d;
}

#define ck_assert_has(text, needle)                                                                \
    ck_assert_msg(strstr((text), (needle)) != NULL, "the report lacks \"%s\":\n%s", (needle), (text))

START_TEST(all_well_no_verdict)
{
    wd_view_t v[W];
    calm_(v);
    block_(v, 2, coll_(11, "gradient-bucket", 1, 7), 4.9); /* under --timeout */
    ck_assert_int_eq(decide_(v).kind, VERDICT_NONE);
}
END_TEST

/* Ranks 0, 1 and 3 wait in #12 for 6 s; rank 2 has waited 9 s in #11, which
 * the others completed... as far as their records go (made up: what matters
 * is which rank is named).  The verdict is rank 2's collective and time,
 * not the first rank over the timeout. */
START_TEST(longest_blocked_not_first)
{
    wd_view_t v[W];
    calm_(v);
    block_(v, 0, coll_(12, "gradient-bucket", 3, 7), 6.0);
    block_(v, 1, coll_(12, "gradient-bucket", 3, 7), 6.2);
    block_(v, 2, coll_(11, "syncbn-stats", 2, 7), 9.0);
    block_(v, 3, coll_(12, "gradient-bucket", 3, 7), 6.1);
    verdict_t d = expect_(v, VERDICT_STUCK, 2);
    const char *t = report_(v, d);
    ck_assert_has(t, "watchdog: syncbn-stats 2 all-reduce (4096 bytes) at step 7 (collective #11) "
                     "has not completed in 9.0 s (--timeout 5): every rank started it");
    ck_assert_has(t, "arrived (4 of 4): 0-3");
}
END_TEST

/* The longest wait is on the last rank, and one rank never arrived: it is
 * named as missing, with its host and what it is doing. */
START_TEST(longest_blocked_last_rank_one_missing)
{
    wd_view_t v[W];
    calm_(v);
    block_(v, 0, coll_(14, "gradient-bucket", 5, 7), 5.5);
    block_(v, 3, coll_(14, "gradient-bucket", 5, 7), 8.25);
    block_(v, 2, coll_(14, "gradient-bucket", 5, 7), 7.0);
    v[1].rec.phase = PHASE_DATA_WAIT;
    v[1].phase_for = 8.5;
    verdict_t d = expect_(v, VERDICT_STUCK, 3);
    const char *t = report_(v, d);
    ck_assert_has(t, "(collective #14) has not completed in 8.2 s (--timeout 5): rank 1 (node-b) "
                     "did not arrive");
    ck_assert_has(t, "arrived (3 of 4): 0,2-3");
    ck_assert_has(t, "ddptrain:   rank 1 (node-b): in ");
    ck_assert_has(t, " of step 7 for 8.5 s; its last collective was gradient-bucket 0 all-reduce");
    ck_assert_has(t, "find out what the missing rank is doing on its host");
}
END_TEST

/* Two ranks in different collectives of the same number: a desync, both
 * sides named. */
START_TEST(desync_named)
{
    wd_view_t v[W];
    calm_(v);
    for (int r = 0; r < W; r++) block_(v, r, coll_(20, "gradient-bucket", 1, 8), 6.0 + r * 0.1);
    block_(v, 1, coll_(20, "bn-average", -1, 8), 6.0);
    verdict_t d = expect_(v, VERDICT_STUCK, 3);
    const char *t = report_(v, d);
    ck_assert_has(t, "every rank started it, but not every rank is in the same collective");
    ck_assert_has(t, "desync: rank 3 (node-d) waits in gradient-bucket 1 all-reduce");
    ck_assert_has(t, "rank 1 (node-b) in bn-average all-reduce");
    ck_assert_has(t, "--debug-collectives");
}
END_TEST

/* A rank whose connection closed is the news while a collective is stuck,
 * even inside its grace period; without a stuck collective, only after it. */
START_TEST(vanished_rank_first)
{
    wd_view_t v[W];
    calm_(v);
    block_(v, 0, coll_(12, "gradient-bucket", 3, 7), 6.0);
    v[2].closed_for = 1.0; /* within the 3 s grace */
    verdict_t d = expect_(v, VERDICT_VANISHED, 2);
    const char *t = report_(v, d);
    ck_assert_has(t, "watchdog: rank 2 (node-c) vanished: its connection closed 1.0 s ago");
    ck_assert_has(t, "rank 2 (node-c): its last report: in ");
    v[0].blocked_for = 0, v[0].rec.blocked.number = 0;
    ck_assert_int_eq(decide_(v).kind, VERDICT_NONE);
    v[2].closed_for = 3.5;
    expect_(v, VERDICT_VANISHED, 2);
    /* a rank that said goodbye did not vanish */
    v[2].bye = 1;
    ck_assert_int_eq(decide_(v).kind, VERDICT_NONE);
}
END_TEST

START_TEST(silent_rank_named)
{
    wd_view_t v[W];
    calm_(v);
    v[3].silent_for = 6.5;
    v[1].silent_for = 5.5;
    verdict_t d = expect_(v, VERDICT_SILENT, 1);
    const char *t = report_(v, d);
    ck_assert_has(t, "watchdog: nothing heard from rank 1 (node-b) for 5.5 s (--timeout 5)");
    ck_assert_has(t, "look at rank 1's host");
}
END_TEST

/* No collective pending: ranks 0 and 2 wait for their GPUs, rank 2 beyond
 * the timeout (a kernel that never ends); under it nothing is said, and a
 * stuck collective (here rank 1's) is reported before it. */
START_TEST(gpu_wait_without_collective_named)
{
    wd_view_t v[W];
    calm_(v);
    v[0].device_for = 4.0;
    v[2].device_for = 4.9;
    ck_assert_int_eq(decide_(v).kind, VERDICT_NONE);
    v[2].device_for = 6.5;
    v[2].rec.phase = PHASE_STEP_END;
    v[2].rec.step = 85;
    v[3].rec.phase = PHASE_FORWARD;
    verdict_t d = expect_(v, VERDICT_DEVICE, 2);
    const char *t = report_(v, d);
    ck_assert_has(t, "watchdog: rank 2 (node-c) has waited 6.5 s for its GPU (--timeout 5) in "
                     "end-of-step work of step 85 with no collective pending");
    ck_assert_has(t, "waiting for their GPUs (2 of 4): 0,2");
    ck_assert_has(t, "rank 3 (node-d): in forward of step 7");
    ck_assert_has(t, "look at the GPU of rank 2's host");
    block_(v, 1, coll_(12, "gradient-bucket", 3, 7), 5.5);
    expect_(v, VERDICT_STUCK, 1);
    t = report_(v, (verdict_t){VERDICT_STUCK, 1});
    ck_assert_has(t, "rank 2 (node-c): waiting for its GPU in end-of-step work of step 85 for "
                     "6.5 s, no collective pending");
}
END_TEST

/* A rank ending the job with its own error: no second report. */
START_TEST(aborting_rank_left_alone)
{
    wd_view_t v[W];
    calm_(v);
    block_(v, 0, coll_(12, "gradient-bucket", 3, 7), 60.0);
    v[2].rec.phase = PHASE_ABORTING;
    ck_assert_int_eq(decide_(v).kind, VERDICT_NONE);
}
END_TEST

/* Ranks that never reached the watchdog are missing, with that said. */
START_TEST(unknown_rank_missing)
{
    wd_view_t v[W];
    calm_(v);
    memset(&v[3], 0, sizeof v[3]);
    block_(v, 0, coll_(2, "start-up", -1, -1), 7.0);
    block_(v, 1, coll_(2, "start-up", -1, -1), 7.0);
    block_(v, 2, coll_(2, "start-up", -1, -1), 7.0);
    verdict_t d = expect_(v, VERDICT_STUCK, 0);
    const char *t = report_(v, d);
    ck_assert_has(t, "rank 3 (node-d) did not arrive");
    ck_assert_has(t, "rank 3 (node-d): state unknown (it never reached the watchdog)");
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("verdict");
    TCase *t = tcase_create("verdict");
    tcase_add_test(t, all_well_no_verdict);
    tcase_add_test(t, longest_blocked_not_first);
    tcase_add_test(t, longest_blocked_last_rank_one_missing);
    tcase_add_test(t, desync_named);
    tcase_add_test(t, vanished_rank_first);
    tcase_add_test(t, silent_rank_named);
    tcase_add_test(t, aborting_rank_left_alone);
    tcase_add_test(t, unknown_rank_missing);
    tcase_add_test(t, gpu_wait_without_collective_named);
    suite_add_tcase(s, t);
    return s;
}
