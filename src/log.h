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
