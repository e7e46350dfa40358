/* log.c -- rank-aware messages. */
#include "log.h"

#include <stdarg.h>

static int g_rank;
static log_level_t g_level = LOG_INFO;

void log_setup(int rank, log_level_t level)
{
    g_rank = rank;
    g_level = level;
}

int log_rank(void)
{
    return g_rank;
}

void log_info(const char *fmt, ...)
{
    if (g_rank != 0 || g_level < LOG_INFO) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void log_result(const char *fmt, ...)
{
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void log_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (g_rank == 0)
        fprintf(stderr, "ddptrain: warning: ");
    else
        fprintf(stderr, "ddptrain: rank %d: warning: ", g_rank);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

void log_stopped(const char *msg)
{
    if (g_rank != 0) return;
    fflush(stdout);
    fprintf(stderr, "ddptrain: stopped: %s\n", msg);
    fflush(stderr);
}

void log_error(const char *msg)
{
    fflush(stdout);
    if (g_rank == 0)
        fprintf(stderr, "ddptrain: error: %s\n", msg);
    else
        fprintf(stderr, "ddptrain: rank %d: error: %s\n", g_rank, msg);
    fflush(stderr);
}
