/* check_pathclash.c -- outputs over inputs (pathclash.h): the same file
 * through a hard link, a symbolic link, a relative and an absolute name, ../
 * and ./ components; names not there yet in the same directory, also
 * through a dangling link; FIFOs and directories refused unopened; names a
 * directory's owner writes (checkpoints in --ckpt-dir); the checkpoint
 * name pattern. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pathclash.h"
#include "tests.h"

static char dir_[4096];

/* a fresh directory for each test, with in.h5 (a regular file) in it */
static const char *setup_(const char *name)
{
    snprintf(dir_, sizeof dir_, "%s/%s", test_tmpdir(), name);
    ck_assert_int_eq(mkdir(dir_, 0777), 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/in.h5", dir_);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("data\n", f);
    fclose(f);
    return dir_;
}

/* <dir>/rel; each call's own buffer (a test makes fewer than 64 names) */
static char *at_(const char *rel)
{
    static char buf[64][4200];
    static int k;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir_, rel);
    return buf[k];
}

/* status of one output against one input */
static ddp_status_t pair_(const char *in, const char *out)
{
    pathclash_file_t f[2] = {{"--init", in, PATHCLASH_IN, NULL, 0},
                             {"--save", out, PATHCLASH_OUT, NULL, 0}};
    return pathclash_check(f, 2);
}

START_TEST(same_file_through_links)
{
    setup_("links");
    ck_assert_int_eq(link(at_("in.h5"), at_("hard.h5")), 0);
    ck_assert_int_eq(symlink("in.h5", at_("soft.h5")), 0);
    ck_assert_int_eq(pair_(at_("in.h5"), at_("hard.h5")), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--save"));
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--init"));
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "the same file"));
    ddp_clear_error();
    ck_assert_int_eq(pair_(at_("in.h5"), at_("soft.h5")), DDP_ERR_USAGE);
    ddp_clear_error();
    ck_assert_int_eq(pair_(at_("soft.h5"), at_("in.h5")), DDP_ERR_USAGE);
    ddp_clear_error();
    /* another file, and a new name beside it: no clash */
    ck_assert_int_eq(pair_(at_("in.h5"), at_("new.h5")), DDP_OK);
    /* two inputs may be one file (the tools judge that) */
    pathclash_file_t f[2] = {{"input file 1", at_("in.h5"), PATHCLASH_IN, NULL, 0},
                             {"input file 2", at_("hard.h5"), PATHCLASH_IN, NULL, 0}};
    ck_assert_int_eq(pathclash_check(f, 2), DDP_OK);
}
END_TEST

START_TEST(relative_absolute_and_dotdot)
{
    setup_("rel");
    ck_assert_int_eq(mkdir(at_("sub"), 0777), 0);
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(at_("sub")), 0);
    /* existing: ../in.h5 from sub/ is <dir>/in.h5 */
    ddp_status_t s1 = pair_(at_("in.h5"), "../in.h5");
    ddp_clear_error();
    /* not there yet: ./new.h5 in sub/ and <dir>/sub/../sub/new.h5 */
    pathclash_file_t f[2] = {{"-o", "./new.h5", PATHCLASH_OUT, NULL, 0},
                             {"--metrics", at_("sub/../sub/new.h5"), PATHCLASH_OUT, NULL, 0}};
    ddp_status_t s2 = pathclash_check(f, 2);
    ddp_clear_error();
    f[1].path = at_("new.h5"); /* the same name one directory up: another file */
    ddp_status_t s3 = pathclash_check(f, 2);
    ddp_clear_error();
    /* a name under a directory not there yet, and .. out of it */
    f[0].path = "nodir/../n.h5";
    f[1].path = at_("sub/n.h5");
    ddp_status_t s4 = pathclash_check(f, 2);
    ddp_clear_error();
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_int_eq(s1, DDP_ERR_USAGE);
    ck_assert_int_eq(s2, DDP_ERR_USAGE);
    ck_assert_int_eq(s3, DDP_OK);
    ck_assert_int_eq(s4, DDP_ERR_USAGE);
}
END_TEST

START_TEST(new_names_and_dangling_links)
{
    setup_("new");
    /* two outputs not there yet under one name */
    pathclash_file_t f[3] = {{"-o", at_("out.png"), PATHCLASH_OUT, NULL, 0},
                             {"--keep", at_("./out.png"), PATHCLASH_OUT, NULL, 0},
                             {"input file 1", at_("in.h5"), PATHCLASH_IN, NULL, 0}};
    ck_assert_int_eq(pathclash_check(f, 3), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "-o"));
    ddp_clear_error();
    /* a dangling link writes its target: the same as the target's name */
    ck_assert_int_eq(symlink("out.png", at_("dangling")), 0);
    f[1].path = at_("dangling");
    ck_assert_int_eq(pathclash_check(f, 3), DDP_ERR_USAGE);
    ddp_clear_error();
    f[1].path = at_("other.png");
    ck_assert_int_eq(pathclash_check(f, 3), DDP_OK);
    /* empty and NULL entries are skipped */
    f[1].path = "";
    f[0].path = NULL;
    ck_assert_int_eq(pathclash_check(f, 3), DDP_OK);
}
END_TEST

START_TEST(not_regular_files)
{
    setup_("kinds");
    ck_assert_int_eq(mkfifo(at_("fifo"), 0600), 0);
    ck_assert_int_eq(pair_(at_("fifo"), at_("w.h5")), DDP_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--init"));
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "FIFO"));
    ddp_clear_error();
    ck_assert_int_eq(pair_(at_("in.h5"), at_("fifo")), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--save"));
    ddp_clear_error();
    ck_assert_int_eq(pair_(at_("in.h5"), dir_), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "directory"));
    ddp_clear_error();
    ck_assert_int_eq(pair_(at_("in.h5"), "/dev/null"), DDP_ERR_USAGE);
    ddp_clear_error();
    /* a PATHCLASH_DIR must be a directory */
    pathclash_file_t d = {"--ckpt-dir", at_("in.h5"), PATHCLASH_DIR, pathclash_is_ckpt_name, 0};
    ck_assert_int_eq(pathclash_check(&d, 1), DDP_ERR_USAGE);
    ddp_clear_error();
    /* still a FIFO: nothing was opened or replaced */
    struct stat st;
    ck_assert_int_eq(stat(at_("fifo"), &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));
}
END_TEST

START_TEST(names_a_directory_owner_writes)
{
    setup_("ckpt");
    ck_assert_int_eq(mkdir(at_("ck"), 0777), 0);
    pathclash_file_t f[3] = {{"--ckpt-dir", at_("ck"), PATHCLASH_DIR, pathclash_is_ckpt_name, 0},
                             {"--metrics", at_("ck/ckpt_00000005.h5"), PATHCLASH_OUT, NULL, 0},
                             {"--resume", at_("ck/ckpt_00000004.h5"), PATHCLASH_IN, NULL, 1}};
    ck_assert_int_eq(pathclash_check(f, 3), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--metrics"));
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--ckpt-dir"));
    ddp_clear_error();
    /* through ../ and a symbolic link to the directory */
    ck_assert_int_eq(symlink("ck", at_("cklink")), 0);
    f[1].path = at_("cklink/../ck/ckpt_7.h5");
    ck_assert_int_eq(pathclash_check(f, 3), DDP_ERR_USAGE);
    ddp_clear_error();
    f[1].path = at_("cklink/ckpt_7.h5");
    ck_assert_int_eq(pathclash_check(f, 3), DDP_ERR_USAGE);
    ddp_clear_error();
    /* other names in it, and checkpoint names elsewhere, are fine; so is
     * --resume reading one of its checkpoints (dir_ok) */
    f[1].path = at_("ck/metrics.jsonl");
    ck_assert_int_eq(pathclash_check(f, 3), DDP_OK);
    f[1].path = at_("ckpt_00000005.h5");
    ck_assert_int_eq(pathclash_check(f, 3), DDP_OK);
    /* an input deck there is not fine: --keep would remove it */
    f[2].dir_ok = 0;
    ck_assert_int_eq(pathclash_check(f, 3), DDP_ERR_USAGE);
    ddp_clear_error();
    /* a directory not made yet */
    f[0].path = at_("newck");
    f[1].path = at_("newck/ckpt_1.h5");
    f[2].path = at_("in.h5");
    ck_assert_int_eq(pathclash_check(f, 3), DDP_ERR_USAGE);
    ddp_clear_error();
}
END_TEST

START_TEST(checkpoint_names)
{
    ck_assert_int_eq(pathclash_ckpt_step("ckpt_00000012.h5"), 12);
    ck_assert_int_eq(pathclash_ckpt_step("ckpt_0.h5"), 0);
    ck_assert_int_eq(pathclash_ckpt_step("ckpt_.h5"), -1);
    ck_assert_int_eq(pathclash_ckpt_step("ckpt_1x.h5"), -1);
    ck_assert_int_eq(pathclash_ckpt_step("ckpt_1.h5.tmp"), -1);
    ck_assert_int_eq(pathclash_ckpt_step("xckpt_1.h5"), -1);
    ck_assert_int_eq(pathclash_ckpt_step("ckpt_99999999999999999999.h5"), -1);
    ck_assert(pathclash_is_ckpt_name("ckpt_3.h5"));
    ck_assert(!pathclash_is_ckpt_name("metrics.jsonl"));
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("pathclash");
    TCase *t = tcase_create("pathclash");
    tcase_add_test(t, same_file_through_links);
    tcase_add_test(t, relative_absolute_and_dotdot);
    tcase_add_test(t, new_names_and_dangling_links);
    tcase_add_test(t, not_regular_files);
    tcase_add_test(t, names_a_directory_owner_writes);
    tcase_add_test(t, checkpoint_names);
    suite_add_tcase(s, t);
    return s;
}
