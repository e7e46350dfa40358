/* check_jsonl.c -- JSON Lines records: key order, escaping of strings
 * (quotes, backslashes, control characters), non-finite numbers as null,
 * nested objects and arrays, whole lines written and flushed. */
#include <math.h>
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

Suite *test_suite(void)
{
    Suite *s = suite_create("jsonl");
    TCase *t = tcase_create("jsonl");
    tcase_add_test(t, types_and_order);
    tcase_add_test(t, nonfinite_is_null);
    tcase_add_test(t, strings_escaped);
    tcase_add_test(t, nested);
    tcase_add_test(t, write_appends_whole_lines);
    suite_add_tcase(s, t);
    return s;
}
