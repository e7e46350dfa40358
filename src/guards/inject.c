/* inject.c -- fault injection (see inject.h). */
#define _POSIX_C_SOURCE 200809L
#include "inject.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const kind_names_[INJECT_NKINDS] = {
    [INJECT_HANG] = "hang",         [INJECT_EXIT] = "exit",       [INJECT_KILL] = "kill",
    [INJECT_SLOW] = "slow",         [INJECT_BITFLIP] = "bitflip", [INJECT_NAN] = "nan",
    [INJECT_SKIPGRAD] = "skipgrad", [INJECT_DESYNC] = "desync",
};

static inject_fault_t faults_[INJECT_MAX];
static int nfaults_;

static ddp_status_t bad_(const char *entry, const char *why)
{
    return ddp_fail(DDP_ERR_USAGE,
                    "--inject '%s': %s; the form is KIND:RANK:STEP[:ARG] with KIND one of "
                    "hang, exit, kill, slow, bitflip, nan, skipgrad, desync, RANK a number or '*' "
                    "and STEP >= 1 (see ddptrain --help)",
                    entry, why);
}

static ddp_status_t parse_one_(const char *entry, inject_fault_t *f)
{
    char buf[256];
    if (strlen(entry) >= sizeof buf) return bad_(entry, "too long");
    strcpy(buf, entry);
    char *kind = buf, *rank = strchr(kind, ':');
    if (!rank) return bad_(entry, "missing RANK and STEP");
    *rank++ = '\0';
    char *step = strchr(rank, ':');
    if (!step) return bad_(entry, "missing STEP");
    *step++ = '\0';
    char *arg = strchr(step, ':');
    if (arg) *arg++ = '\0';
    memset(f, 0, sizeof *f);
    f->kind = INJECT_NKINDS;
    for (int k = 0; k < INJECT_NKINDS; k++)
        if (strcmp(kind, kind_names_[k]) == 0) f->kind = (inject_kind_t)k;
    if (f->kind == INJECT_NKINDS) return bad_(entry, "unknown kind");
    char *end;
    if (strcmp(rank, "*") == 0) {
        f->rank = -1;
    } else {
        errno = 0;
        long r = strtol(rank, &end, 10);
        if (errno || end == rank || *end || r < 0 || r > 1 << 24) return bad_(entry, "bad RANK");
        f->rank = (int)r;
    }
    errno = 0;
    long long s = strtoll(step, &end, 10);
    if (errno || end == step || *end || s < 1) return bad_(entry, "bad STEP");
    f->step = s;
    if (arg) {
        if (strlen(arg) >= INJECT_ARG_MAX) return bad_(entry, "ARG too long");
        strcpy(f->arg, arg);
    }
    if (f->kind == INJECT_EXIT || f->kind == INJECT_SLOW) {
        if (f->arg[0]) {
            errno = 0;
            long v = strtol(f->arg, &end, 10);
            if (errno || *end || v < 0 || v > (f->kind == INJECT_EXIT ? 255 : 3600000))
                return bad_(entry, f->kind == INJECT_EXIT ? "ARG must be an exit code 0..255"
                                                          : "ARG must be milliseconds");
        }
    }
    return DDP_OK;
}

ddp_status_t inject_parse(const char *list, inject_fault_t *out, int *n)
{
    int count = 0;
    const char *p = list;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char entry[256];
        if (len >= sizeof entry) return bad_(p, "too long");
        memcpy(entry, p, len);
        entry[len] = '\0';
        if (len) {
            if (count == INJECT_MAX)
                return ddp_fail(DDP_ERR_USAGE, "--inject: at most %d faults", INJECT_MAX);
            inject_fault_t f;
            DDP_TRY(parse_one_(entry, &f));
            if (out) out[count] = f;
            count++;
        }
        p = comma ? comma + 1 : NULL;
    }
    if (n) *n = count;
    return DDP_OK;
}

ddp_status_t inject_setup(const char *list, int rank, int size)
{
    inject_fault_t all[INJECT_MAX];
    int n = 0;
    nfaults_ = 0;
    DDP_TRY(inject_parse(list, all, &n));
    /* a fault for a rank the job does not have would silently never fire */
    for (int i = 0; i < n; i++)
        if (all[i].rank >= size)
            return ddp_fail(DDP_ERR_USAGE,
                            "--inject names rank %d, but the job has %d rank%s (0-%d); aim it "
                            "at one of those, or at '*'",
                            all[i].rank, size, size == 1 ? "" : "s", size - 1);
    for (int i = 0; i < n; i++)
        if (all[i].rank < 0 || all[i].rank == rank) faults_[nfaults_++] = all[i];
    return DDP_OK;
}

const inject_fault_t *inject_due(inject_kind_t kind, int64_t step)
{
    for (int i = 0; i < nfaults_; i++) {
        inject_fault_t *f = &faults_[i];
        if (f->kind != kind) continue;
        if (kind == INJECT_SLOW) {
            if (step >= f->step) return f;
            continue;
        }
        if (f->fired || f->step != step) continue;
        f->fired = 1;
        return f;
    }
    return NULL;
}

void inject_step_begin(int64_t step)
{
    if (!nfaults_) return;
    const inject_fault_t *f;
    if ((f = inject_due(INJECT_HANG, step))) {
        /* stop responding: no more collectives, no more progress; the
         * watchdog thread (and signal handlers) still run */
        for (;;) pause();
    }
    if ((f = inject_due(INJECT_EXIT, step))) {
        fflush(stdout);
        _exit(f->arg[0] ? atoi(f->arg) : 1);
    }
    if (inject_due(INJECT_KILL, step)) {
        fflush(stdout);
        signal(SIGKILL, SIG_DFL);
        raise(SIGKILL);
    }
    if ((f = inject_due(INJECT_SLOW, step))) {
        long ms = f->arg[0] ? atol(f->arg) : 100;
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}
