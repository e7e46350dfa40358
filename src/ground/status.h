/* status.h -- status codes and the one error message a failing call leaves behind.
 *
 * Library code never prints or exits on error: it records one message with
 * ddp_fail() and returns the status up the stack.  Two places report it and
 * end the job with the exit code of the status: job_end (job.c, at the end
 * of main()) for a status every rank returns alike -- agreed with
 * control_agree -- and control_abort (control.h: print, then MPI_Abort of
 * the whole job) for a failure the other ranks may not share, where they
 * may be waiting in a collective; the trainer's rooms call it where a
 * collective has already begun (a failed start-up broadcast, a read that
 * failed on one rank during a step, a device failure after a step).
 */
#ifndef DDP_STATUS_H
#define DDP_STATUS_H

#include <stdarg.h>
#include <stddef.h>

typedef enum ddp_status {
    DDP_OK = 0,
    DDP_ERR_USAGE,    /* bad option, config file or model spec        exit 2 */
    DDP_ERR_INPUT,    /* bad input deck or weights file               exit 3 */
    DDP_ERR_IO,       /* cannot write/read a file (disk, permissions) exit 4 */
    DDP_ERR_NOMEM,    /* out of host or device memory                 exit 5 */
    DDP_ERR_MISMATCH, /* ranks disagree (config, layout, weights)     exit 6 */
    DDP_ERR_COMM,     /* a collective failed or timed out             exit 7 */
    DDP_ERR_NUMERIC,  /* non-finite loss or gradient                  exit 8 */
    DDP_ERR_DEVICE,   /* CUDA / NCCL failure                          exit 9 */
    DDP_ERR_TIMEOUT,  /* watchdog: a collective did not complete in
                         --timeout, or a rank vanished               exit 10 */
    DDP_ERR_INTERNAL, /* a bug in ddptrain                            exit 70 */
    /* not failures: training stopped early on a signal (signals.h) */
    DDP_STOP_REQUEUE,  /* checkpointed on SIGUSR1/SIGTERM: resume me  exit 75 */
    DDP_STOP_INTERRUPT /* stopped on a signal, nothing to resume from exit 130 */
} ddp_status_t;

/* Record a message for status s and return s (so `return ddp_fail(...)`).
 * The message should say what failed, where (file, dataset, option, layer)
 * and what to do.  Only the first failure is kept until ddp_clear_error(). */
ddp_status_t ddp_fail(ddp_status_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Replace the recorded message (used to add context on the way up). */
ddp_status_t ddp_fail_override(ddp_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *ddp_error_message(void);
void ddp_clear_error(void);

/* Exit code for a status (0 for DDP_OK). */
int ddp_exit_code(ddp_status_t s);
const char *ddp_status_name(ddp_status_t s);

/* Out-of-memory helpers: NULL-checked allocation with a message naming what. */
void *ddp_malloc(size_t bytes, const char *what);
void *ddp_calloc(size_t n, size_t size, const char *what);

/* What to do about a DDP_ERR_NUMERIC (non-finite loss, gradient norm or
 * weights), for the end of its message. */
#define DDP_DIVERGED_ADVICE                                                                        \
    "training diverged; lower --lr, use --clip-grad-norm, or check the input with --check-data"

#define DDP_TRY(call)                                                                              \
    do {                                                                                           \
        ddp_status_t ddp_try_s_ = (call);                                                          \
        if (ddp_try_s_ != DDP_OK) return ddp_try_s_;                                               \
    } while (0)

#endif
