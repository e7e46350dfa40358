/* log.c -- rank-aware messages. */
#include "log.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

static int g_rank;
static char g_host[64];
static log_level_t g_level = LOG_INFO;

void log_setup(int rank, log_level_t level)
{
    g_rank = rank;
    g_level = level;
    if (!g_host[0] && gethostname(g_host, sizeof g_host - 1) != 0) strcpy(g_host, "?");
}

const char *log_host(void)
{
    return g_host[0] ? g_host : "?";
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
    /* one write: a launcher that merges the ranks' streams keeps it whole */
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (g_rank == 0)
        fprintf(stderr, "ddptrain: warning: %s\n", msg);
    else
        fprintf(stderr, "ddptrain: rank %d (%s): warning: %s\n", g_rank, log_host(), msg);
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
        fprintf(stderr, "ddptrain: rank %d (%s): error: %s\n", g_rank, log_host(), msg);
    fflush(stderr);
}
