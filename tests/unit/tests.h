/* tests.h -- shared helpers of the Check test binaries.
 *
 * Every test binary defines `Suite *test_suite(void)`; test_main.c supplies
 * main(): MPI_Init once, run the suite with CK_NOFORK (forking breaks MPI),
 * agree on the result across ranks.  Binaries named *_npN are started by
 * tests/run-test with mpirun -np N; the others run as one process.
 */
#ifndef DDP_TESTS_H
#define DDP_TESTS_H

#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stddef.h>

Suite *test_suite(void);

/* Directory holding the test sources (fixtures), from $srcdir. */
const char *test_srcdir(void);
/* A fresh temporary directory for this test binary (same path on all ranks). */
const char *test_tmpdir(void);

/* Runs body(arg) in a child process, its stderr read into msg[cap] (NUL-
 * terminated); the test fails unless the child was killed by SIGABRT (a
 * check that aborts the process).  The caller looks for its message in msg. */
void test_child_aborts(void (*body)(void *), void *arg, char *msg, size_t cap);

/* max_i |a_i - b_i| / max(|b_i|, floor) */
double test_max_rel_diff(const float *a, const float *b, size_t n, double floor);

#define ck_assert_close(a, b, tol)                                                                 \
    ck_assert_msg(fabs((double)(a) - (double)(b)) <= (tol)*fmax(1.0, fabs((double)(b))),           \
                  "%s = %.9g, expected %s = %.9g (tol %g)", #a, (double)(a), #b, (double)(b),      \
                  (double)(tol))

#endif
