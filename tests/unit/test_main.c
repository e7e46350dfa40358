/* test_main.c -- main() of every Check test binary (see tests.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "h5util.h"
#include "log.h"
#include "tests.h"

static char tmpdir[512];

const char *test_srcdir(void)
{
    const char *s = getenv("srcdir");
    return s ? s : ".";
}

const char *test_tmpdir(void)
{
    return tmpdir;
}

void test_child_aborts(void (*body)(void *), void *arg, char *msg, size_t cap)
{
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        body(arg);
        _exit(0); /* not reached when the body aborts */
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(pipefd[0], msg + got, cap - 1 - got)) > 0) got += (size_t)r;
    msg[got] = '\0';
    close(pipefd[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "no abort (status 0x%x): %s",
                  status, msg);
}

double test_max_rel_diff(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)b[i]), floor);
        if (!(d <= worst)) worst = d; /* NaN propagates as a failure */
    }
    return worst;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    log_setup(rank, LOG_QUIET);
    h5_quiet();

    /* one temporary directory per run, created by rank 0, shared by all */
    if (rank == 0) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/ddptest.XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            MPI_Abort(MPI_COMM_WORLD, 99);
        }
    }
    MPI_Bcast(tmpdir, sizeof tmpdir, MPI_CHAR, 0, MPI_COMM_WORLD);

    SRunner *sr = srunner_create(test_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    if (rank != 0) {
        /* rank 0 reports; the others stay quiet unless they fail */
        srunner_run_all(sr, CK_SILENT);
    } else {
        srunner_run_all(sr, CK_NORMAL);
    }
    int failed = srunner_ntests_failed(sr);
    if (failed && rank != 0) {
        TestResult **res = srunner_failures(sr);
        for (int i = 0; i < failed; i++)
            fprintf(stderr, "rank %d: %s:%d: %s\n", rank, tr_lfile(res[i]), tr_lno(res[i]),
                    tr_msg(res[i]));
        free(res);
    }
    srunner_free(sr);

    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && !getenv("DDP_KEEP_TMP")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    MPI_Finalize();
    return any ? EXIT_FAILURE : EXIT_SUCCESS;
}
