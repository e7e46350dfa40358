/* check_jsonl.c -- JSON Lines records: key order, escaping of strings
 * (quotes, backslashes, control characters), non-finite numbers as null,
 * nested objects and arrays, whole lines written and flushed. */
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "tests.h"

START_TEST(types_and_order)
{
    jsonl_rec_t r;
    jsonl_begin(&r, "step");
    jsonl_int(&r, "step", 12);
    jsonl_num(&r, "lr", 0.05);
    jsonl_num(&r, "big", 1e300);
    jsonl_bool(&r, "on", 1);
    jsonl_null(&r, "none");
    ck_assert_str_eq(jsonl_finish(&r),
                     "{\"type\":\"step\",\"step\":12,\"lr\":0.05,\"big\":1e+300,\"on\":true,"
                     "\"none\":null}\n");
    jsonl_free(&r);
}
END_TEST

START_TEST(nonfinite_is_null)
{
    jsonl_rec_t r;
    jsonl_begin(&r, "x");
    jsonl_num(&r, "a", NAN);
    jsonl_num(&r, "b", INFINITY);
    jsonl_num(&r, "c", -INFINITY);
    ck_assert_str_eq(jsonl_finish(&r), "{\"type\":\"x\",\"a\":null,\"b\":null,\"c\":null}\n");
    jsonl_free(&r);
}
END_TEST

START_TEST(strings_escaped)
{
    jsonl_rec_t r;
    jsonl_begin(&r, "x");
    jsonl_str(&r, "s",
              "a\"b\\c\nd\te\x01"
              "f\x7f");
    jsonl_str(&r, "k\"ey", "");
    jsonl_str(&r, "n", NULL);
    ck_assert_str_eq(jsonl_finish(&r),
                     "{\"type\":\"x\",\"s\":\"a\\\"b\\\\c\\nd\\te\\u0001f\\u007f\","
                     "\"k\\\"ey\":\"\",\"n\":\"\"}\n");
    jsonl_free(&r);
}
END_TEST

START_TEST(nested)
{
    jsonl_rec_t r;
    jsonl_begin(&r, "config");
    jsonl_array(&r, "hosts");
    jsonl_str(&r, NULL, "a");
    jsonl_str(&r, NULL, "b");
    jsonl_close(&r, ']');
    jsonl_array(&r, "empty");
    jsonl_close(&r, ']');
    jsonl_object(&r, "options");
    jsonl_int(&r, "batch", 64);
    jsonl_str(&r, "model", "linear:10");
    jsonl_close(&r, '}');
    jsonl_int(&r, "after", 1);
    ck_assert_str_eq(jsonl_finish(&r),
                     "{\"type\":\"config\",\"hosts\":[\"a\",\"b\"],\"empty\":[],\"options\":{"
                     "\"batch\":64,\"model\":\"linear:10\"},\"after\":1}\n");
    jsonl_free(&r);
}
END_TEST

START_TEST(write_appends_whole_lines)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/j.jsonl", test_tmpdir());
    remove(path);
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(path, "a");
        ck_assert_ptr_nonnull(f);
        jsonl_rec_t r;
        jsonl_begin(&r, "step");
        jsonl_int(&r, "step", i);
        /* a long record: the buffer grows */
        char big[3000];
        memset(big, 'x', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        jsonl_str(&r, "pad", big);
        ck_assert_int_eq(jsonl_write(&r, f), 0);
        ck_assert_ptr_null(r.buf);
        fclose(f);
    }
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char want[32];
        snprintf(want, sizeof want, "{\"type\":\"step\",\"step\":%d,", n);
        ck_assert_int_eq(strncmp(line, want, strlen(want)), 0);
        ck_assert_int_eq(line[strlen(line) - 1], '\n');
        n++;
    }
    fclose(f);
    ck_assert_int_eq(n, 2);
    remove(path);
}
END_TEST

/* the file's whole text (at most 8 KiB) */
static const char *slurp_(const char *path)
{
    static char text[8192];
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

START_TEST(torn_tail_cut_on_append)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/torn.jsonl", test_tmpdir());
    /* a whole record, then a torn one (a full disk mid-write) */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"type\":\"step\",\"step\":1}\n{\"type\":\"step\",\"st", f);
    fclose(f);
    f = fopen(path, "a+");
    ck_assert_ptr_nonnull(f);
    long long removed = -1;
    ck_assert_int_eq(jsonl_cut_torn(f, &removed), 0);
    ck_assert_int_eq(removed, 18);
    jsonl_rec_t r;
    jsonl_begin(&r, "step");
    jsonl_int(&r, "step", 2);
    ck_assert_int_eq(jsonl_write(&r, f), 0);
    /* a whole file is left alone */
    ck_assert_int_eq(jsonl_cut_torn(f, &removed), 0);
    ck_assert_int_eq(removed, 0);
    fclose(f);
    ck_assert_str_eq(slurp_(path), "{\"type\":\"step\",\"step\":1}\n"
                                   "{\"type\":\"step\",\"step\":2}\n");
    /* no '\n' at all, longer than one block read: cut to empty */
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 5000; i++) fputc('x', f);
    fclose(f);
    f = fopen(path, "a+");
    ck_assert_int_eq(jsonl_cut_torn(f, &removed), 0);
    ck_assert_int_eq(removed, 5000);
    fclose(f);
    ck_assert_str_eq(slurp_(path), "");
    remove(path);
}
END_TEST

START_TEST(failed_write_leaves_whole_records)
{
    /* a file of at most 100 bytes (RLIMIT_FSIZE, SIGXFSZ ignored): the
     * second record fails part-way and is cut back */
    char path[4096];
    snprintf(path, sizeof path, "%s/full.jsonl", test_tmpdir());
    remove(path);
    FILE *f = fopen(path, "a+");
    ck_assert_ptr_nonnull(f);
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 100;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc[2];
    for (int i = 0; i < 2; i++) {
        jsonl_rec_t r;
        jsonl_begin(&r, "step");
        jsonl_str(&r, "pad", "0123456789012345678901234567890123456789012345");
        rc[i] = jsonl_write(&r, f);
    }
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    fclose(f);
    ck_assert_int_eq(rc[0], 0);
    ck_assert_int_eq(rc[1], -1);
    ck_assert_str_eq(slurp_(path),
                     "{\"type\":\"step\",\"pad\":\"0123456789012345678901234567890123456789012345\"}\n");
    remove(path);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("jsonl");
    TCase *t = tcase_create("jsonl");
    tcase_add_test(t, types_and_order);
    tcase_add_test(t, nonfinite_is_null);
    tcase_add_test(t, strings_escaped);
    tcase_add_test(t, nested);
    tcase_add_test(t, write_appends_whole_lines);
    tcase_add_test(t, torn_tail_cut_on_append);
    tcase_add_test(t, failed_write_leaves_whole_records);
    suite_add_tcase(s, t);
    return s;
}
