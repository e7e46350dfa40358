/* log.c -- rank-aware messages, and rank 0's status line on a terminal. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int g_rank;
static char g_host[64];
static log_level_t g_level = LOG_INFO;
static int g_status;              /* the status line is in use */
static int g_stdout_tty;          /* stdout is a terminal */
static atomic_int g_status_shown; /* a status line is on screen without its newline */

void log_setup(int rank, log_level_t level)
{
    g_rank = rank;
    g_level = level;
    if (!g_host[0] && gethostname(g_host, sizeof g_host - 1) != 0) strcpy(g_host, "?");
    const char *term = getenv("TERM");
    g_stdout_tty = isatty(STDOUT_FILENO);
    g_status = rank == 0 && level >= LOG_INFO && isatty(STDERR_FILENO) &&
               !(term && strcmp(term, "dumb") == 0);
}

int log_status_active(void)
{
    return g_status;
}

int log_progress_plain(void)
{
    return !(g_status && g_stdout_tty);
}

void log_status_end(void)
{
    if (atomic_exchange(&g_status_shown, 0)) {
        fputc('\n', stderr);
        fflush(stderr);
    }
}

/* before a message to stdout: the status line ends only if both streams
 * share the terminal */
static void status_end_stdout_(void)
{
    if (g_stdout_tty) log_status_end();
}

void log_status(const char *line)
{
    if (!g_status) return;
    /* cut to the terminal's width: a wrapped line cannot be redrawn by \r */
    struct winsize ws;
    int cols = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 79;
    fprintf(stderr, "\r%.*s\033[K", cols, line);
    fflush(stderr);
    atomic_store(&g_status_shown, 1);
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
    status_end_stdout_();
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
    status_end_stdout_();
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
    log_status_end();
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
    log_status_end();
    fprintf(stderr, "ddptrain: stopped: %s\n", msg);
    fflush(stderr);
}

void log_error(const char *msg)
{
    fflush(stdout);
    log_status_end();
    if (g_rank == 0)
        fprintf(stderr, "ddptrain: error: %s\n", msg);
    else
        fprintf(stderr, "ddptrain: rank %d (%s): error: %s\n", g_rank, log_host(), msg);
    fflush(stderr);
}
