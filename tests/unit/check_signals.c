/* check_signals.c -- the stop requests of signals.h: the first SIGUSR1,
 * SIGTERM or SIGINT is recorded and the process goes on; a SIGTERM or SIGINT
 * after a SIGTERM or SIGINT ends it at once by that signal (a second Ctrl-C
 * kills); a SIGTERM after a SIGUSR1 is no second request (Slurm sends one
 * after the other).  Each case runs in a child process of its own. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "signals.h"
#include "tests.h"

/* Run signals a then b (b 0: none) in a child with the handlers installed.
 * The child exits 0 when it survives with `a` pending, 2 when `a` was not
 * recorded, 3 when b changed what is pending.  Returns its wait status. */
static int deliver_(int a, int b)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signals_install();
        raise(a);
        if (signals_pending() != a) _exit(2);
        if (b) raise(b);
        _exit(signals_pending() == a ? 0 : 3);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return st;
}

static void expect_killed_(int a, int b)
{
    int st = deliver_(a, b);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == b,
                  "%s then %s: the process %s %d, expected to be killed by %s", signals_name(a),
                  signals_name(b), WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), signals_name(b));
}

static void expect_survives_(int a, int b)
{
    int st = deliver_(a, b);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s then %s: the process %s %d, expected to go on with %s pending",
                  signals_name(a), b ? signals_name(b) : "nothing",
                  WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), signals_name(a));
}

START_TEST(first_request_recorded)
{
    expect_survives_(SIGINT, 0);
    expect_survives_(SIGTERM, 0);
    expect_survives_(SIGUSR1, 0);
}
END_TEST

START_TEST(second_ctrl_c_kills)
{
    expect_killed_(SIGINT, SIGINT);
}
END_TEST

START_TEST(second_sigterm_kills)
{
    expect_killed_(SIGTERM, SIGTERM);
}
END_TEST

START_TEST(mixed_requests_kill)
{
    expect_killed_(SIGINT, SIGTERM);
    expect_killed_(SIGTERM, SIGINT);
}
END_TEST

START_TEST(slurm_usr1_then_term_is_one_request)
{
    expect_survives_(SIGUSR1, SIGTERM);
    expect_survives_(SIGUSR1, SIGINT);
    expect_survives_(SIGUSR1, SIGUSR1);
    expect_survives_(SIGTERM, SIGUSR1);
}
END_TEST

START_TEST(restore_gives_back_the_handlers)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGINT, SIG_IGN);
        signals_install();
        signals_restore();
        raise(SIGINT); /* ignored again: not recorded, not killed */
        _exit(signals_pending() == 0 ? 0 : 4);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "after signals_restore: status %d", st);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("signals");
    TCase *t = tcase_create("signals");
    tcase_add_test(t, first_request_recorded);
    tcase_add_test(t, second_ctrl_c_kills);
    tcase_add_test(t, second_sigterm_kills);
    tcase_add_test(t, mixed_requests_kill);
    tcase_add_test(t, slurm_usr1_then_term_is_one_request);
    tcase_add_test(t, restore_gives_back_the_handlers);
    suite_add_tcase(s, t);
    return s;
}
