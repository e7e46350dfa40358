/* check_config.c -- the option table: defaults, parsing, precedence, errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tests.h"

static char *argv_[32];
static int argc_;

static ddp_config_t last_cfg_;

/* parse into c, releasing the previous parse's input list */
static ddp_status_t parse_(ddp_config_t *c, config_input_hook_t hook, config_action_t *act)
{
    config_free(&last_cfg_);
    ddp_status_t s = config_parse_args(c, argc_, argv_, hook, act);
    last_cfg_.inputs = c->inputs;
    return s;
}

static void args_(const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    argc_ = 0;
    argv_[argc_++] = (char *)"ddptrain";
    for (const char *a = first; a; a = va_arg(ap, const char *)) argv_[argc_++] = (char *)a;
    argv_[argc_] = NULL;
    va_end(ap);
}

START_TEST(defaults_are_valid)
{
    ddp_config_t c;
    config_defaults(&c);
    /* every default parses (config_defaults ignores errors: check each) */
    for (int i = 0; i < ddp_noptions; i++) {
        ddp_status_t s = config_set(&c, ddp_options[i].name, ddp_options[i].def, SRC_DEFAULT, "t");
        ck_assert_msg(s == DDP_OK, "default of %s: %s", ddp_options[i].name, ddp_error_message());
    }
    ck_assert_int_eq(c.batch, 64);
    ck_assert_int_eq(c.shuffle, 1);
    ck_assert_int_eq(c.sync_bn, -1);
    ck_assert_int_eq(c.optimizer, OPTIM_SGD);
    ck_assert_double_eq(c.bucket_cap_mb, 0); /* auto */
    char buf[64];
    const ddp_option_t *o = config_find("bucket-cap-mb");
    config_format(&c, o, buf, sizeof buf);
    ck_assert_str_eq(buf, "auto");
    ck_assert_int_eq(config_set(&c, "bucket-cap-mb", "2.5", SRC_CMDLINE, "t"), DDP_OK);
    ck_assert_double_eq(c.bucket_cap_mb, 2.5);
    config_format(&c, o, buf, sizeof buf);
    ck_assert_str_eq(buf, "2.5");
    ck_assert_int_eq(config_set(&c, "bucket-cap-mb", "auto", SRC_CMDLINE, "t"), DDP_OK);
    ck_assert_double_eq(c.bucket_cap_mb, 0);
    ck_assert_int_eq(config_set(&c, "bucket-cap-mb", "0", SRC_CMDLINE, "t"), DDP_ERR_USAGE);
    ck_assert_int_eq(config_set(&c, "lr", "auto", SRC_CMDLINE, "t"), DDP_ERR_USAGE);
    ck_assert_ptr_null(strstr(ddp_error_message(), "or auto"));
    ddp_clear_error();
}
END_TEST

START_TEST(cmdline_forms)
{
    ddp_config_t c;
    config_action_t act;
    args_("--batch", "32", "--lr=0.5", "--no-shuffle", "--nesterov", "--optimizer", "sgd", "in.h5",
          "--sync-bn=false", "more.h5", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_OK);
    ck_assert_int_eq(act, CONFIG_RUN);
    ck_assert_int_eq(c.batch, 32);
    ck_assert_double_eq_tol(c.lr, 0.5, 1e-12);
    ck_assert_int_eq(c.shuffle, 0);
    ck_assert_int_eq(c.nesterov, 1);
    ck_assert_int_eq(c.sync_bn, 0);
    ck_assert_int_eq(c.ninputs, 2);
    ck_assert_str_eq(c.inputs[0], "in.h5");
    ck_assert_str_eq(c.inputs[1], "more.h5");
    ck_assert_int_eq(c.source[config_find("batch") - ddp_options], SRC_CMDLINE);
    ck_assert_int_eq(c.source[config_find("epochs") - ddp_options], SRC_DEFAULT);
}
END_TEST

START_TEST(errors_name_the_option)
{
    ddp_config_t c;
    config_action_t act;
    args_("--bacth", "32", "in.h5", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "'bacth'"));
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "did you mean 'batch'"));
    ddp_clear_error();

    args_("--batch", "0", "in.h5", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "out of range"));
    ddp_clear_error();

    args_("--optimizer", "adam", "in.h5", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "sgd|adamw"));
    ddp_clear_error();

    args_("--lr", "fast", "in.h5", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_ERR_USAGE);
    ddp_clear_error();

    args_("in.h5", "--batch", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "needs a value"));
    ddp_clear_error();

    args_("--batch", "8", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "no input file"));
    ddp_clear_error();

    /* an empty name in --freeze is a slip, not "freeze nothing" */
    static const char *empty[] = {",", "layers.0,", ",layers.0", "layers.0,,layers.2"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        args_("--freeze", empty[i], "in.h5", NULL);
        ck_assert_msg(parse_(&c, NULL, &act) == DDP_ERR_USAGE, "--freeze '%s' accepted", empty[i]);
        ck_assert_ptr_nonnull(strstr(ddp_error_message(), "has an empty name"));
        ddp_clear_error();
    }
    args_("--freeze", "layers.0,layers.2.bias", "in.h5", NULL);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_OK);
}
END_TEST

static ddp_status_t fake_input_config_(const char *path, ddp_config_t *c)
{
    (void)path;
    DDP_TRY(config_set(c, "batch", "16", SRC_INPUT, "input"));
    DDP_TRY(config_set(c, "lr", "0.25", SRC_INPUT, "input"));
    return config_set(c, "epochs", "7", SRC_INPUT, "input");
}

START_TEST(precedence)
{
    char path[600];
    snprintf(path, sizeof path, "%s/run.cfg", test_tmpdir());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# a comment\nbatch = 24   # trailing comment\n\n  lr=0.125\nmomentum = 0\n");
    fclose(f);
    ddp_config_t c;
    config_action_t act;
    args_("in.h5", "--config", path, "--lr", "0.3", NULL);
    ck_assert_int_eq(parse_(&c, fake_input_config_, &act), DDP_OK);
    ck_assert_int_eq(c.epochs, 7);             /* input /config */
    ck_assert_int_eq(c.batch, 24);             /* config file beats input */
    ck_assert_double_eq_tol(c.lr, 0.3, 1e-12); /* command line beats both */
    ck_assert_double_eq_tol(c.momentum, 0, 1e-12);
    ck_assert_int_eq(c.source[config_find("epochs") - ddp_options], SRC_INPUT);
    ck_assert_int_eq(c.source[config_find("batch") - ddp_options], SRC_FILE);

    f = fopen(path, "w");
    fprintf(f, "batch = 24\nthis line is wrong\n");
    fclose(f);
    ck_assert_int_eq(parse_(&c, NULL, &act), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "line 2"));
    ddp_clear_error();
}
END_TEST

START_TEST(dump_roundtrip)
{
    ddp_config_t a, b;
    config_action_t act;
    args_("--batch", "8", "--optimizer", "adamw", "--model", "linear:3", "--sync-bn", "x.h5", NULL);
    ck_assert_int_eq(parse_(&a, NULL, &act), DDP_OK);
    char text[16384];
    size_t n = config_dump(&a, text, sizeof text);
    ck_assert_uint_lt(n, sizeof text);
    ck_assert_ptr_nonnull(strstr(text, "optimizer = adamw\n"));
    ck_assert_ptr_nonnull(strstr(text, "sync-bn = true\n"));
    /* every dumped line parses back to the same value */
    config_defaults(&b);
    char *save, *line = strtok_r(text, "\n", &save);
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strstr(line, " = ");
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        ck_assert_int_eq(config_set(&b, line, eq + 3, SRC_FILE, "dump"), DDP_OK);
    }
    char t1[16384], t2[16384];
    config_dump(&a, t1, sizeof t1);
    config_dump(&b, t2, sizeof t2);
    ck_assert_str_eq(t1, t2);
}
END_TEST

START_TEST(help_lists_every_option)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print_help(f, "ddptrain");
    fclose(f);
    for (int i = 0; i < ddp_noptions; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "--%s", ddp_options[i].name);
        ck_assert_msg(strstr(buf, needle) != NULL, "--help lacks %s", needle);
    }
    ck_assert_ptr_nonnull(strstr(buf, "[default: 64]"));
    free(buf);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("config");
    TCase *t = tcase_create("config");
    tcase_add_test(t, defaults_are_valid);
    tcase_add_test(t, cmdline_forms);
    tcase_add_test(t, errors_name_the_option);
    tcase_add_test(t, precedence);
    tcase_add_test(t, dump_roundtrip);
    tcase_add_test(t, help_lists_every_option);
    suite_add_tcase(s, t);
    return s;
}
