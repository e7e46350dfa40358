/* activity.c -- the per-rank activity record (see activity.h).  A sequence
 * lock: the main thread is the only writer; a reader retries while a write
 * is under way. */
#include "activity.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"

static activity_record_t rec_ = {.phase = PHASE_STARTUP};
static _Atomic uint64_t version_;
static uint64_t numbered_;            /* collectives started (main thread only) */
static double waited_;                /* seconds blocked so far (main thread only) */
/* the gradient-plane collective started last, and the newest one known
 * complete on the device (a device wait returned after it) */
static activity_coll_t last_gradient_;
static uint64_t device_done_;
static int device_blocked_; /* the block is activity_device_wait_begin's */
static int device_only_;    /* a device wait with no collective pending (device_since) */
static double in_phase_[PHASE_COUNT]; /* seconds spent in each phase, up to the last change */
static activity_hook_t hook_;
/* activity_trace: the profiler's range calls and the current phase's range */
static uint64_t (*trace_start_)(const char *name);
static void (*trace_end_)(uint64_t id);
static uint64_t trace_id_;

static void trace_open_(int phase)
{
    char name[64];
    snprintf(name, sizeof name, "ddptrain %s", activity_phase_name(phase));
    trace_id_ = trace_start_(name);
}

void activity_trace(uint64_t (*start)(const char *name), void (*end)(uint64_t id))
{
    if (trace_start_) trace_end_(trace_id_);
    trace_start_ = start && end ? start : NULL;
    trace_end_ = start && end ? end : NULL;
    if (trace_start_) trace_open_(rec_.phase);
}
static void *hook_arg_;

static void write_begin_(void)
{
    atomic_fetch_add_explicit(&version_, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void write_end_(void)
{
    atomic_fetch_add_explicit(&version_, 1, memory_order_release);
}

void activity_snapshot(activity_record_t *out)
{
    for (;;) {
        uint64_t v = atomic_load_explicit(&version_, memory_order_acquire);
        if (v & 1) continue;
        memcpy(out, (const void *)&rec_, sizeof *out);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&version_, memory_order_relaxed) == v) return;
    }
}

void activity_begin(void)
{
    write_begin_();
    rec_.phase = PHASE_STARTUP;
    rec_.phase_since = clock_seconds();
    write_end_();
}

void activity_phase(activity_phase_t p)
{
    if (rec_.phase == (int32_t)p) return;
    double now = clock_seconds();
    if (rec_.phase >= 0 && rec_.phase < PHASE_COUNT)
        in_phase_[rec_.phase] += now - rec_.phase_since;
    write_begin_();
    rec_.phase = (int32_t)p;
    rec_.phase_since = now;
    write_end_();
    if (trace_start_) {
        trace_end_(trace_id_);
        trace_open_(p);
    }
}

void activity_phase_seconds(double out[PHASE_COUNT])
{
    memcpy(out, in_phase_, sizeof in_phase_);
    if (rec_.phase >= 0 && rec_.phase < PHASE_COUNT)
        out[rec_.phase] += clock_seconds() - rec_.phase_since;
}

void activity_step(int64_t step)
{
    write_begin_();
    rec_.step = step;
    write_end_();
}

void activity_set_start_hook(activity_hook_t fn, void *arg)
{
    hook_ = fn;
    hook_arg_ = arg;
}

/* Every collective name in the program, with its plane (activity.h). */
static const struct {
    const char *what;
    activity_plane_t plane;
} planes_[] = {
    /* gradient plane: comm.h */
    {"gradient-bucket", PLANE_GRADIENT},
    {"syncbn-forward", PLANE_GRADIENT},
    {"syncbn-backward", PLANE_GRADIENT},
    {"average-bn-statistics", PLANE_GRADIENT},
    {"shared-memory-check", PLANE_GRADIENT},
    {"barrier", PLANE_GRADIENT},
    {"allreduce-alone", PLANE_GRADIENT}, /* --diagnose: the buckets, no compute */
    {"parameter-gather", PLANE_GRADIENT}, /* --zero: the updated parameters from their owners */
    /* control plane: control.h */
    {"agreement", PLANE_CONTROL},
    {"broadcast-parameters", PLANE_CONTROL},
    {"startup-check", PLANE_CONTROL},
    {"resume", PLANE_CONTROL},
    {"resume-optimizer", PLANE_CONTROL},
    {"checkpoint-bn", PLANE_CONTROL},
    {"checkpoint-optimizer", PLANE_CONTROL}, /* --zero: the optimizer shards to rank 0 */
    {"gradient-norm", PLANE_CONTROL},        /* --zero: the pieces of the clipping norm */
    {"nonfinite-gradients", PLANE_CONTROL},  /* --zero: --on-nonfinite skip's answer */
    {"metrics", PLANE_CONTROL},
    {"summary", PLANE_CONTROL},
    {"evaluation", PLANE_CONTROL},
    {"evaluation-nonfinite", PLANE_CONTROL},
    {"replica-check", PLANE_CONTROL},
    {"replica-check-tensors", PLANE_CONTROL},
    {"step-boundary", PLANE_CONTROL},
    {"watchdog-address", PLANE_CONTROL},
    {"watchdog-connect", PLANE_CONTROL},
    {"diagnose", PLANE_CONTROL},
    {"startup-devices", PLANE_CONTROL}, /* every rank's GPU (startup.c) */
};

int activity_plane_of(const char *what)
{
    for (size_t i = 0; what && i < sizeof planes_ / sizeof planes_[0]; i++)
        if (strcmp(planes_[i].what, what) == 0) return (int)planes_[i].plane;
    return -1;
}

const char *activity_plane_name(int plane)
{
    return plane == PLANE_CONTROL ? "control" : plane == PLANE_GRADIENT ? "gradient" : "no";
}

uint64_t activity_collective_start(const comm_desc_t *d, activity_plane_t plane, const char *op,
                                   uint64_t bytes)
{
    activity_coll_t c;
    memset(&c, 0, sizeof c);
    c.number = ++numbered_;
    c.bytes = bytes;
    c.step = d ? d->step : -1;
    c.index = d ? d->index : -1;
    c.plane = (int32_t)plane;
    snprintf(c.what, sizeof c.what, "%s", d && d->what ? d->what : "unnamed");
    snprintf(c.op, sizeof c.op, "%s", op ? op : "collective");
    if (hook_) hook_(hook_arg_, &c);
    write_begin_();
    rec_.last = c;
    write_end_();
    if (plane == PLANE_GRADIENT) last_gradient_ = c;
    return c.number;
}

void activity_device_wait_begin(void)
{
    if (rec_.blocked.number || device_only_) return;
    if (last_gradient_.number <= device_done_) {
        write_begin_();
        rec_.device_since = clock_seconds();
        write_end_();
        device_only_ = 1;
        return;
    }
    write_begin_();
    rec_.blocked = last_gradient_;
    rec_.blocked_since = clock_seconds();
    rec_.on_device = 1;
    write_end_();
    device_blocked_ = 1;
}

void activity_device_wait_end(void)
{
    device_done_ = last_gradient_.number;
    if (device_only_) {
        device_only_ = 0;
        write_begin_();
        rec_.device_since = 0;
        write_end_();
    }
    if (!device_blocked_) return;
    device_blocked_ = 0;
    write_begin_();
    rec_.blocked.number = 0;
    rec_.on_device = 0;
    write_end_();
}

double activity_wait_seconds(void)
{
    return waited_;
}

activity_coll_t activity_last(void)
{
    return rec_.last;
}

void activity_block(uint64_t number, const activity_coll_t *c)
{
    write_begin_();
    rec_.blocked = c ? *c : rec_.last;
    rec_.blocked.number = number;
    rec_.blocked_since = clock_seconds();
    write_end_();
}

void activity_unblock(void)
{
    if (rec_.blocked.number) waited_ += clock_seconds() - rec_.blocked_since;
    write_begin_();
    rec_.blocked.number = 0;
    write_end_();
}

const char *activity_phase_name(int phase)
{
    static const char *names[PHASE_COUNT] = {
        [PHASE_STARTUP] = "start-up",
        [PHASE_DATA_WAIT] = "data wait",
        [PHASE_FORWARD] = "forward",
        [PHASE_BACKWARD] = "backward",
        [PHASE_OPTIMIZER] = "optimizer",
        [PHASE_STEP_END] = "end-of-step work",
        [PHASE_EVALUATION] = "evaluation",
        [PHASE_CHECKPOINT] = "checkpoint",
        [PHASE_SAVE] = "save",
        [PHASE_FINISHING] = "finishing",
        [PHASE_ABORTING] = "aborting",
    };
    return phase >= 0 && phase < PHASE_COUNT ? names[phase] : "unknown";
}

void activity_coll_format(const activity_coll_t *c, char *buf, size_t n)
{
    char idx[24] = "", size[32] = "", step[32] = "";
    if (c->index >= 0) snprintf(idx, sizeof idx, " %d", (int)c->index);
    if (c->bytes >= (1u << 20))
        snprintf(size, sizeof size, " (%.1f MB)", (double)c->bytes / 1e6);
    else if (c->bytes > 0)
        snprintf(size, sizeof size, " (%llu bytes)", (unsigned long long)c->bytes);
    if (c->step >= 0) snprintf(step, sizeof step, " at step %lld", (long long)c->step);
    snprintf(buf, n, "%s%s %s%s%s (collective #%llu)", c->what, idx, c->op, size, step,
             (unsigned long long)c->number);
}
