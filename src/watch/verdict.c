/* verdict.c -- the watchdog's verdict and its report (see verdict.h). */
#include "verdict.h"

#include <stdlib.h>
#include <string.h>

/* Nothing heard from the rank for longer than a few heartbeats. */
static int silent_(const verdict_ctx_t *c, const wd_view_t *v)
{
    return !v->closed_for && v->silent_for > 2 * c->beat + 1;
}

void verdict_add_rank(const verdict_ctx_t *c, jobreport_t *t, int r, const wd_view_t *v,
                      int stale)
{
    char last[192];
    jobreport_add(t, "ddptrain:   rank %d (%s): %s", r, c->host(r), stale ? "its last report: " : "");
    if (!v->known) {
        jobreport_add(t, "state unknown (it never reached the watchdog)\n");
        return;
    }
    if (v->rec.blocked.number) {
        activity_coll_format(&v->rec.blocked, last, sizeof last);
        jobreport_add(t, "waiting in %s%s for %.1f s", last,
                      v->rec.on_device ? " (for its GPU)" : "", v->blocked_for);
    } else if (v->device_for > 0) {
        jobreport_add(t, "waiting for its GPU in %s", activity_phase_name(v->rec.phase));
        if (v->rec.step > 0) jobreport_add(t, " of step %lld", (long long)v->rec.step);
        jobreport_add(t, " for %.1f s, no collective pending", v->device_for);
    } else {
        jobreport_add(t, "in %s", activity_phase_name(v->rec.phase));
        if (v->rec.step > 0) jobreport_add(t, " of step %lld", (long long)v->rec.step);
        jobreport_add(t, " for %.1f s", v->phase_for);
        if (v->rec.last.number) {
            activity_coll_format(&v->rec.last, last, sizeof last);
            jobreport_add(t, "; its last collective was %s", last);
        } else {
            jobreport_add(t, "; no collective started yet");
        }
    }
    if (v->closed_for > 0)
        jobreport_add(
            t,
            "; its connection closed %.1f s ago without a goodbye: the process exited or was "
            "killed",
            v->closed_for);
    else if (silent_(c, v))
        jobreport_add(t,
                      "; nothing heard from it for %.1f s: its process is stopped or its node is "
                      "unreachable",
                      v->silent_for);
    jobreport_add(t, "\n");
}

verdict_t verdict_decide(const verdict_ctx_t *c, const wd_view_t *v)
{
    int W = c->size, stuck = -1, silent = -1, vanished = -1, device = -1;
    for (int r = 1; r < W; r++) {
        if (!v[r].known || v[r].bye) continue;
        if (v[r].rec.phase == PHASE_ABORTING) return (verdict_t){VERDICT_NONE, -1};
        if (v[r].closed_for >= c->vanish_grace && v[r].closed_for > 0 && vanished < 0) vanished = r;
        if (!v[r].closed_for && v[r].silent_for >= c->timeout && silent < 0) silent = r;
    }
    for (int r = 0; r < W; r++)
        if (v[r].known && !v[r].closed_for && v[r].blocked_for >= c->timeout &&
            (stuck < 0 || v[r].blocked_for > v[stuck].blocked_for))
            stuck = r;
    for (int r = 0; r < W; r++)
        if (v[r].known && !v[r].closed_for && v[r].device_for >= c->timeout &&
            (device < 0 || v[r].device_for > v[device].device_for))
            device = r;
    /* a collective stuck while a rank is gone: the rank that vanished is the
     * news, whether or not its grace period is over */
    for (int r = 1; r < W && (stuck >= 0 || silent >= 0) && vanished < 0; r++)
        if (v[r].known && !v[r].bye && v[r].closed_for > 0) vanished = r;
    if (vanished >= 0) return (verdict_t){VERDICT_VANISHED, vanished};
    if (stuck >= 0) return (verdict_t){VERDICT_STUCK, stuck};
    if (silent >= 0) return (verdict_t){VERDICT_SILENT, silent};
    if (device >= 0) return (verdict_t){VERDICT_DEVICE, device};
    return (verdict_t){VERDICT_NONE, -1};
}

static int same_coll_(const activity_coll_t *a, const activity_coll_t *b)
{
    return a->step == b->step && a->index == b->index && a->plane == b->plane &&
           strcmp(a->what, b->what) == 0 && strcmp(a->op, b->op) == 0;
}

static void report_silent_(const verdict_ctx_t *c, const wd_view_t *v, int silent, jobreport_t *t)
{
    jobreport_add(
        t,
        "watchdog: nothing heard from rank %d (%s) for %.1f s (--timeout %g): its process is "
        "stopped or its node is unreachable\n",
        silent, c->host(silent), v[silent].silent_for, c->timeout);
    verdict_add_rank(c, t, silent, &v[silent], 0);
    jobreport_add(
        t,
        "ddptrain:   what to do: look at rank %d's host (is the process stopped, the node "
        "down, the network partitioned?)\n",
        silent);
}

static void report_vanished_(const verdict_ctx_t *c, const wd_view_t *v, int r, jobreport_t *t)
{
    jobreport_add(
        t,
        "watchdog: rank %d (%s) vanished: its connection closed %.1f s ago without a goodbye (the "
        "process exited or was killed; the launcher's message, if any, says how)\n",
        r, c->host(r), v[r].closed_for);
    wd_view_t last = v[r];
    last.closed_for = last.silent_for = 0; /* said in the line above */
    verdict_add_rank(c, t, r, &last, 1);
    jobreport_add(
        t,
        "ddptrain:   what to do: look for rank %d's own error, a crash or the out-of-memory "
        "killer in its host's log\n",
        r);
}

/* `stuck` waited too long in its collective S: who arrived at S, who did
 * not, who fell silent inside it, and whether another rank waits in a
 * different collective of the same number (a desync). */
static int report_stuck_(const verdict_ctx_t *c, const wd_view_t *v, int stuck, jobreport_t *t)
{
    int W = c->size;
    unsigned char *arrived = calloc((size_t)W, 1), *missing = calloc((size_t)W, 1);
    if (!arrived || !missing) {
        free(arrived);
        free(missing);
        return -1;
    }
    char what[192];
    const activity_coll_t *S = &v[stuck].rec.blocked;
    int nmissing = 0, narrived = 0, desync = -1, nsilent = 0, first_silent = -1;
    for (int r = 0; r < W; r++) {
        /* an arrived rank may have stopped inside the collective */
        if (v[r].known && silent_(c, &v[r])) {
            nsilent++;
            if (first_silent < 0) first_silent = r;
        }
        if (v[r].known && v[r].rec.last.number >= S->number) {
            arrived[r] = 1, narrived++;
            if (desync < 0 && v[r].rec.blocked.number == S->number &&
                !same_coll_(&v[r].rec.blocked, S))
                desync = r;
        } else {
            missing[r] = 1, nmissing++;
        }
    }
    activity_coll_format(S, what, sizeof what);
    jobreport_add(t, "watchdog: %s has not completed in %.1f s (--timeout %g): ", what,
                  v[stuck].blocked_for, c->timeout);
    if (nmissing == 0 && nsilent)
        jobreport_add(t, "every rank started it, but %d fell silent inside it\n", nsilent);
    else if (nmissing == 0)
        jobreport_add(t, "every rank started it%s\n",
                      desync >= 0 ? ", but not every rank is in the same collective" : "");
    else if (nmissing == 1)
        for (int r = 0; r < W; r++) {
            if (missing[r]) jobreport_add(t, "rank %d (%s) did not arrive\n", r, c->host(r));
        }
    else {
        jobreport_add(t, "%d of %d ranks did not arrive: ", nmissing, W);
        jobreport_add_ranks(t, missing, W);
        jobreport_add(t, "\n");
    }
    jobreport_add(t, "ddptrain:   arrived (%d of %d): ", narrived, W);
    jobreport_add_ranks(t, arrived, W);
    jobreport_add(t, "\n");
    int listed = 0;
    for (int r = 0; r < W && listed < c->list_max; r++)
        if (missing[r]) verdict_add_rank(c, t, r, &v[r], 0), listed++;
    if (nmissing > listed)
        jobreport_add(t, "ddptrain:   ... and %d more missing ranks\n", nmissing - listed);
    for (int r = 0; r < W && listed < c->list_max; r++)
        if (arrived[r] && v[r].known && silent_(c, &v[r]))
            verdict_add_rank(c, t, r, &v[r], 0), listed++;
    if (desync >= 0) {
        char other[192];
        activity_coll_format(&v[desync].rec.blocked, other, sizeof other);
        jobreport_add(
            t,
            "ddptrain:   desync: rank %d (%s) waits in %s, rank %d (%s) in %s: the ranks called "
            "different collectives\n",
            stuck, c->host(stuck), what, desync, c->host(desync), other);
        jobreport_add(t,
                      "ddptrain:   what to do: rerun with --debug-collectives to stop at the first "
                      "collective where the ranks differ\n");
    } else if (nmissing == 0 && nsilent) {
        jobreport_add(
            t,
            "ddptrain:   what to do: look at rank %d's host (is the process stopped, the node "
            "down, the network partitioned?)\n",
            first_silent);
    } else if (nmissing) {
        jobreport_add(
            t,
            "ddptrain:   what to do: find out what the missing rank%s doing on %s host "
            "(a stuck file system, swapping, a debugger; py-spy or gdb -p shows the stack); "
            "if that work legitimately takes longer, raise --timeout\n",
            nmissing > 1 ? "s are" : " is", nmissing > 1 ? "their" : "its");
    } else {
        jobreport_add(t,
                      "ddptrain:   what to do: every rank is in the collective but it does not "
                      "complete: check the network between the hosts (and the launcher's transport "
                      "settings)\n");
    }
    if (v[stuck].rec.on_device)
        jobreport_add(
            t,
            "ddptrain:   rank %d waits for its GPU, where NCCL runs the collective (it is the "
            "last one queued there): a GPU or NCCL fault, or a peer that left it; "
            "NCCL_DEBUG=WARN shows NCCL's view\n",
            stuck);
    free(arrived);
    free(missing);
    return 0;
}

/* `r` waited longest for its GPU with no collective pending; the others'
 * states say whether they wait for it (in a collective, or for their own
 * GPUs). */
static void report_device_(const verdict_ctx_t *c, const wd_view_t *v, int r, jobreport_t *t)
{
    jobreport_add(t, "watchdog: rank %d (%s) has waited %.1f s for its GPU (--timeout %g) in %s", r,
                  c->host(r), v[r].device_for, c->timeout, activity_phase_name(v[r].rec.phase));
    if (v[r].rec.step > 0) jobreport_add(t, " of step %lld", (long long)v[r].rec.step);
    jobreport_add(t, " with no collective pending: its work on the GPU does not finish\n");
    int W = c->size, nwaiting = 0, listed = 0;
    unsigned char *waiting = calloc((size_t)W, 1);
    if (waiting) {
        for (int k = 0; k < W; k++)
            if (v[k].known && v[k].device_for > 0) waiting[k] = 1, nwaiting++;
        jobreport_add(t, "ddptrain:   waiting for their GPUs (%d of %d): ", nwaiting, W);
        jobreport_add_ranks(t, waiting, W);
        jobreport_add(t, "\n");
    }
    for (int k = 0; k < W && listed < c->list_max; k++)
        if (!waiting || !waiting[k]) verdict_add_rank(c, t, k, &v[k], 0), listed++;
    free(waiting);
    jobreport_add(t,
                  "ddptrain:   what to do: look at the GPU of rank %d's host (nvidia-smi; Xid "
                  "lines in the kernel log, dmesg, name a device fault); a kernel that "
                  "legitimately takes longer needs a larger --timeout\n",
                  r);
}

int verdict_report(const verdict_ctx_t *c, const wd_view_t *v, verdict_t d, jobreport_t *t)
{
    switch (d.kind) {
    case VERDICT_STUCK: return report_stuck_(c, v, d.rank, t);
    case VERDICT_SILENT: report_silent_(c, v, d.rank, t); return 0;
    case VERDICT_VANISHED: report_vanished_(c, v, d.rank, t); return 0;
    case VERDICT_DEVICE: report_device_(c, v, d.rank, t); return 0;
    case VERDICT_NONE: break;
    }
    return 0;
}
