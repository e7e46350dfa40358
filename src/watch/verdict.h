/* verdict.h -- the watchdog's verdict: from what the hub last heard of
 * every rank (its views), which rank to report and why, and the report's
 * text.  No clock, no sockets, no MPI: the watchdog thread (watchdog.c)
 * turns its connections into views and ends the job with the report;
 * tests/unit/check_verdict.c hands it made-up views.
 *
 * The order of the verdicts: a rank that is ending the job itself (phase
 * aborting) is left to do so (no verdict); a rank whose connection closed
 * without a goodbye is the news (vanished) once its grace period is over,
 * or at once when a collective is stuck or a rank silent meanwhile;
 * otherwise the rank blocked longest in a collective beyond the timeout
 * (stuck: its collective is the one named), else the first rank silent
 * beyond the timeout, else the rank that waited longest for its GPU beyond
 * the timeout with no collective pending (device: a kernel that never ends
 * or a device fault). */
#ifndef DDP_VERDICT_H
#define DDP_VERDICT_H

#include "activity.h"
#include "jobreport.h"

/* One rank's state as the watchdog saw it (seconds). */
typedef struct wd_view {
    int known; /* it said hello (else nothing else here is set) */
    int bye;   /* it finished normally */
    activity_record_t rec;
    double blocked_for, phase_for; /* in its blocked collective, in its phase */
    double device_for;             /* in a wait for its device, no collective pending */
    double silent_for;             /* since its last message */
    double closed_for; /* its connection closed this long ago without a goodbye (0: open) */
} wd_view_t;

typedef struct verdict_ctx {
    int size;               /* ranks (views) */
    double timeout, beat;   /* --timeout, the heartbeat period */
    double vanish_grace;    /* a closed connection is reported after this */
    int list_max;           /* ranks described one by one in a report */
    const char *(*host)(int rank);
} verdict_ctx_t;

typedef enum verdict_kind {
    VERDICT_NONE,     /* all is well, or a rank is ending the job itself */
    VERDICT_STUCK,    /* rank `rank` waited in a collective beyond the timeout */
    VERDICT_SILENT,   /* nothing heard from rank `rank` beyond the timeout */
    VERDICT_VANISHED, /* rank `rank`'s connection closed without a goodbye */
    VERDICT_DEVICE,   /* rank `rank` waited for its GPU, no collective pending, beyond the
                       * timeout */
} verdict_kind_t;

typedef struct verdict {
    verdict_kind_t kind;
    int rank;
} verdict_t;

/* The verdict over v[0 .. size) (v[0]: the hub itself). */
verdict_t verdict_decide(const verdict_ctx_t *c, const wd_view_t *v);
/* Write verdict d's report (its error line, then "ddptrain:   " lines) into
 * t.  Returns 0, or -1 when out of memory (t then holds less). */
int verdict_report(const verdict_ctx_t *c, const wd_view_t *v, verdict_t d, jobreport_t *t);
/* One "ddptrain:   rank R (host): ..." line on what rank r is doing;
 * `stale`: the rank is gone, v is its last report. */
void verdict_add_rank(const verdict_ctx_t *c, jobreport_t *t, int r, const wd_view_t *v,
                      int stale);

#endif
