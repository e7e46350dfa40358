/* check_memlimit.c -- the memory limits read from /proc and the cgroup
 * tree (v2, v1, limits on an ancestor, a cgroup namespace, "no limit"),
 * over fake trees in a temporary directory; and the start-up check's
 * verdicts and messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memlimit.h"
#include "tests.h"

#define MIB ((uint64_t)1 << 20)

/* Write text to ROOT/rel, creating the directories on the way. */
static void put_(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A fresh fake root per case: ROOT/proc and ROOT/cg. */
static const char *root_(const char *name, char *proc, char *cg)
{
    static char root[1024];
    snprintf(root, sizeof root, "%s/%s", test_tmpdir(), name);
    mkdir(root, 0755);
    sprintf(proc, "%s/proc", root);
    sprintf(cg, "%s/cg", root);
    put_(root, "proc/self/status", "Name:\tddptrain\nVmPeak:\t 700000 kB\nVmSize:\t  409600 kB\n");
    put_(root, "proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable:    2097152 kB\n");
    return root;
}

START_TEST(v2_leaf_and_ancestor)
{
    char proc[1100], cg[1100];
    const char *r = root_("v2", proc, cg);
    put_(r, "proc/self/cgroup", "0::/job_7/step_0\n");
    put_(r, "cg/job_7/memory.max", "4294967296\n");
    put_(r, "cg/job_7/memory.current", "1073741824\n");
    put_(r, "cg/job_7/step_0/memory.max", "max\n");
    put_(r, "cg/job_7/step_0/memory.current", "536870912\n");
    memlimit_t l;
    memlimit_probe(&l, proc, cg);
    ck_assert_uint_eq(l.as_used, 409600 * 1024ull);
    ck_assert_uint_eq(l.available, 2097152 * 1024ull);
    /* the step has no limit of its own: the job's applies */
    ck_assert_uint_eq(l.cg_limit, 4096 * MIB);
    ck_assert_uint_eq(l.cg_used, 1024 * MIB);
    ck_assert_ptr_nonnull(strstr(l.cg_file, "job_7/memory.max"));
    /* a tighter limit on the leaf wins */
    put_(r, "cg/job_7/step_0/memory.max", "1073741824\n");
    memlimit_probe(&l, proc, cg);
    ck_assert_uint_eq(l.cg_limit, 1024 * MIB);
    ck_assert_uint_eq(l.cg_used, 512 * MIB);
    ck_assert_ptr_nonnull(strstr(l.cg_file, "step_0/memory.max"));
}
END_TEST

START_TEST(v1_namespace_and_unlimited)
{
    char proc[1100], cg[1100];
    const char *r = root_("v1", proc, cg);
    /* in a cgroup namespace the path is not under the mount: the mount's
     * root is the process's group */
    put_(r, "proc/self/cgroup", "5:cpu:/\n4:memory:/process_api/abc\n0::/\n");
    put_(r, "cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put_(r, "cg/memory/memory.usage_in_bytes", "53526528\n");
    memlimit_t l;
    memlimit_probe(&l, proc, cg);
    ck_assert_uint_eq(l.cg_limit, MEMLIMIT_NONE); /* v1's "no limit" */
    put_(r, "cg/memory/memory.limit_in_bytes", "268435456\n");
    memlimit_probe(&l, proc, cg);
    ck_assert_uint_eq(l.cg_limit, 256 * MIB);
    ck_assert_uint_eq(l.cg_used, 53526528);
}
END_TEST

START_TEST(nothing_readable)
{
    memlimit_t l;
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/none", test_tmpdir());
    memlimit_probe(&l, missing, missing);
    ck_assert_uint_eq(l.cg_limit, MEMLIMIT_NONE);
    ck_assert_uint_eq(l.available, MEMLIMIT_NONE);
    mem_need_t need = {1000 * MIB, 200 * MIB};
    char warn[256];
    l.as_limit = MEMLIMIT_NONE;
    ck_assert_int_eq(memlimit_check(&l, &need, 4, warn, sizeof warn), DDP_OK);
    ck_assert_str_eq(warn, "");
}
END_TEST

START_TEST(check_verdicts)
{
    memlimit_t l = {.as_limit = 800 * MIB,
                    .as_used = 400 * MIB,
                    .cg_limit = MEMLIMIT_NONE,
                    .available = MEMLIMIT_NONE};
    char warn[512];
    mem_need_t need = {200 * MIB, 150 * MIB}; /* 750 of 800 */
    ck_assert_int_eq(memlimit_check(&l, &need, 1, warn, sizeof warn), DDP_OK);
    need.address = 250 * MIB; /* 850 of 800 */
    ck_assert_int_eq(memlimit_check(&l, &need, 1, warn, sizeof warn), DDP_ERR_NOMEM);
    const char *msg = ddp_error_message();
    ck_assert_msg(strstr(msg, "850 MiB of address space") && strstr(msg, "800 MiB") &&
                      strstr(msg, "ulimit -v"),
                  "%s", msg);

    /* the cgroup's room is shared by the node's ranks */
    ddp_clear_error();
    l.as_limit = MEMLIMIT_NONE;
    l.cg_limit = 1000 * MIB;
    l.cg_used = 100 * MIB;
    snprintf(l.cg_file, sizeof l.cg_file, "/sys/fs/cgroup/job/memory.max");
    need = (mem_need_t){200 * MIB, 150 * MIB};
    ck_assert_int_eq(memlimit_check(&l, &need, 4, warn, sizeof warn), DDP_OK); /* 800 of 900 */
    ck_assert_int_eq(memlimit_check(&l, &need, 5, warn, sizeof warn), DDP_ERR_NOMEM);
    msg = ddp_error_message();
    ck_assert_msg(strstr(msg, "5 ranks on this node") && strstr(msg, "1000.0 MiB more") &&
                      strstr(msg, "leaves 900.0 MiB") && strstr(msg, "job/memory.max"),
                  "%s", msg);

    /* beyond MemAvailable but within swap: a warning, not a refusal */
    l.cg_limit = MEMLIMIT_NONE;
    l.available = 500 * MIB;
    l.swap_free = 400 * MIB;
    ck_assert_int_eq(memlimit_check(&l, &need, 4, warn, sizeof warn), DDP_OK);
    ck_assert_msg(strstr(warn, "800.0 MiB") && strstr(warn, "MemAvailable"), "%s", warn);
    /* beyond MemAvailable and swap: refused (an absurd model overflows no
     * counter on the way) */
    l.swap_free = 200 * MIB;
    ddp_clear_error();
    ck_assert_int_eq(memlimit_check(&l, &need, 4, warn, sizeof warn), DDP_ERR_NOMEM);
    msg = ddp_error_message();
    ck_assert_msg(strstr(msg, "4 ranks on this node need about 800.0 MiB") &&
                      strstr(msg, "500.0 MiB MemAvailable + 200.0 MiB free swap"),
                  "%s", msg);
    ddp_clear_error();
    need.resident = (uint64_t)1 << 62;
    ck_assert_int_eq(memlimit_check(&l, &need, 4, warn, sizeof warn), DDP_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "TiB"));

    /* the least of the limits, and its name */
    const char *what;
    memlimit_t m = {.as_limit = 1000 * MIB, .as_used = 700 * MIB, .cg_limit = MEMLIMIT_NONE,
                    .available = 2000 * MIB};
    ck_assert_uint_eq(memlimit_available(&m, &what), 300 * MIB);
    ck_assert_str_eq(what, "ulimit -v");
    m.cg_limit = 1000 * MIB;
    m.cg_used = 900 * MIB;
    ck_assert_uint_eq(memlimit_available(&m, &what), 100 * MIB);
    ck_assert_str_eq(what, "the cgroup memory limit");
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("memlimit");
    TCase *t = tcase_create("memlimit");
    tcase_add_test(t, v2_leaf_and_ancestor);
    tcase_add_test(t, v1_namespace_and_unlimited);
    tcase_add_test(t, nothing_readable);
    tcase_add_test(t, check_verdicts);
    suite_add_tcase(s, t);
    return s;
}
