/* status.c -- status codes and the recorded error message. */
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One message per thread: the loader thread records its own failure and the
 * main thread picks it up with the batch (see loader.c). */
static _Thread_local char err_msg[1024];
static _Thread_local int err_set;

static ddp_status_t record(ddp_status_t s, int override, const char *fmt, va_list ap)
{
    if (!err_set || override) {
        /* format aside first: an override often quotes the message it replaces */
        char buf[sizeof err_msg];
        vsnprintf(buf, sizeof buf, fmt, ap);
        memcpy(err_msg, buf, sizeof err_msg);
        err_set = 1;
    }
    return s;
}

ddp_status_t ddp_fail(ddp_status_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(s, 0, fmt, ap);
    va_end(ap);
    return s;
}

ddp_status_t ddp_fail_override(ddp_status_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(s, 1, fmt, ap);
    va_end(ap);
    return s;
}

const char *ddp_error_message(void)
{
    return err_set ? err_msg : "unknown error (no message recorded)";
}

void ddp_clear_error(void)
{
    err_set = 0;
    err_msg[0] = '\0';
}

int ddp_exit_code(ddp_status_t s)
{
    switch (s) {
    case DDP_OK: return 0;
    case DDP_ERR_USAGE: return 2;
    case DDP_ERR_INPUT: return 3;
    case DDP_ERR_IO: return 4;
    case DDP_ERR_NOMEM: return 5;
    case DDP_ERR_MISMATCH: return 6;
    case DDP_ERR_COMM: return 7;
    case DDP_ERR_NUMERIC: return 8;
    case DDP_ERR_DEVICE: return 9;
    case DDP_ERR_TIMEOUT: return 10;
    case DDP_ERR_INTERNAL: return 70;
    case DDP_STOP_REQUEUE: return 75; /* EX_TEMPFAIL: try again */
    case DDP_STOP_INTERRUPT: return 130;
    }
    return 70;
}

const char *ddp_status_name(ddp_status_t s)
{
    switch (s) {
    case DDP_OK: return "ok";
    case DDP_ERR_USAGE: return "usage error";
    case DDP_ERR_INPUT: return "input error";
    case DDP_ERR_IO: return "I/O error";
    case DDP_ERR_NOMEM: return "out of memory";
    case DDP_ERR_MISMATCH: return "rank mismatch";
    case DDP_ERR_COMM: return "communication error";
    case DDP_ERR_NUMERIC: return "numerical error";
    case DDP_ERR_DEVICE: return "device error";
    case DDP_ERR_TIMEOUT: return "timeout";
    case DDP_ERR_INTERNAL: return "internal error";
    case DDP_STOP_REQUEUE: return "checkpointed on a signal";
    case DDP_STOP_INTERRUPT: return "interrupted";
    }
    return "internal error";
}

void *ddp_malloc(size_t bytes, const char *what)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        ddp_fail(DDP_ERR_NOMEM,
                 "out of memory allocating %zu bytes for %s; "
                 "reduce --batch or the model size, or run fewer ranks per node",
                 bytes, what);
    return p;
}

void *ddp_calloc(size_t n, size_t size, const char *what)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        ddp_fail(DDP_ERR_NOMEM,
                 "out of memory allocating %zu x %zu bytes for %s; "
                 "reduce --batch or the model size, or run fewer ranks per node",
                 n, size, what);
    return p;
}
