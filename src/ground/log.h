/* log.h -- messages to the user.  Rank 0 speaks for the job; other ranks
 * only report their own failures (prefixed with their rank). */
#ifndef DDP_LOG_H
#define DDP_LOG_H

#include <stdio.h>

typedef enum log_level { LOG_QUIET = 0, LOG_INFO = 1 } log_level_t;

void log_setup(int rank, log_level_t level);
int log_rank(void);
/* This process's host name (for messages that come from one rank). */
const char *log_host(void);
/* The status line: on rank 0, when stderr is a terminal (and not --quiet),
 * one line on stderr redrawn in place ("\r", the text, clear to the end of
 * the line).  Every other message first ends it with a newline (those to
 * stdout only when stdout is a terminal too), so lines never interleave. */
int log_status_active(void);
void log_status(const char *line);
/* End the status line (a newline) if one is shown. */
void log_status_end(void);
/* Whether the periodic progress lines go to stdout: not when the status
 * line shows them and stdout is the terminal too. */
int log_progress_plain(void);
/* rank 0 only, unless quiet */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* rank 0 only, always (evaluation lines and results scripts read) */
void log_result(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* any rank, always, to stderr: "ddptrain: warning: ..." (rank 0) or
 * "ddptrain: rank R (HOST): warning: ..." */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* rank 0 only, always, to stderr: "ddptrain: stopped: <msg>" (training
 * ended early on a signal; not an error) */
void log_stopped(const char *msg);
/* "ddptrain: error: <msg>" (rank 0) or "ddptrain: rank R (HOST): error: <msg>" */
void log_error(const char *msg);

#endif
