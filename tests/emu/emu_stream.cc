// emu_stream.cc -- streams and events in the CPU emulation of the CUDA
// runtime: a stream is a queue of operations (kernels, copies, fills, cuBLAS
// calls, NCCL results) that runs when something waits for it, as
// DDP_EMU_STREAMS says (below); an event record is a marker in its stream's
// queue, and cudaStreamWaitEvent makes a stream run the marked stream up to
// the record first.  The contract is in include/cuda_runtime.h; the other
// parts queue their work with submit() (emu_internal.h).
//
// DDP_EMU_DRAIN_REPORT=1 prints at exit how many host waits left the device
// idle (every stream's queue empty after the wait, where some work was
// queued before it), by the call that waited: on a GPU the device then
// idles until the host queues more.  A trainer whose host keeps ahead of the
// device adds none per step (tests/e2e/test_gpu_model.sh).
#include "emu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

using namespace emu;

// ---- stream queues ---------------------------------------------------------
//
// DDP_EMU_STREAMS says when work queued on a stream runs:
//   sync        when it is called;
//   lazy        (the default) only when something waits for it: the host (a synchronize,
//               a query, cudaFree, a synchronous copy, a copy into pageable
//               memory) or another stream reaching a cudaStreamWaitEvent on
//               it;
//   lazy-first  the first stream created on each device is lazy; the later
//               ones run their work as soon as the events they wait for
//               have completed.
// A missing cudaStreamWaitEvent then shows as a wrong result: under lazy a
// consumer runs before its producer has written (read after write); under
// lazy-first a side stream overwrites what the first stream has not yet
// read (write after read).  Work on the legacy default stream runs at once,
// after everything queued anywhere.  The queues are taken one at a time in
// the process (g_qmu, before g_mu).

namespace
{

struct Marker { // one cudaEventRecord
    CUstream_st *stream;
    bool done;
    double t_ms;
};

struct StreamOp {
    std::function<void()> run;    // may be empty
    std::shared_ptr<Marker> wait; // run the marker's stream up to it first
    std::shared_ptr<Marker> mark; // complete once reached
};

} // namespace

struct CUstream_st {
    unsigned flags;
    bool queued; // false: sync mode, work runs when called
    bool lazy;   // queued and run only when waited for
    std::deque<StreamOp> queue;
};

struct CUevent_st {
    unsigned flags;
    std::shared_ptr<Marker> last; // the latest record; null: never recorded
};

namespace emu
{

std::recursive_mutex g_qmu;
std::vector<int> g_streams_made;

} // namespace emu

namespace
{

std::set<const void *> g_streams;          // live streams (g_mu)
std::set<const void *> g_events;           // live events (g_mu)
std::vector<CUstream_st *> g_stream_order; // live streams, in creation order

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

bool legacy_stream(cudaStream_t s)
{
    return s == nullptr || s == (cudaStream_t)0x1 || s == (cudaStream_t)0x2;
}

void run_op(StreamOp &op);

void run_head(CUstream_st *s)
{
    StreamOp op = std::move(s->queue.front());
    s->queue.pop_front();
    run_op(op);
}

void run_to(const std::shared_ptr<Marker> &m)
{
    while (!m->done) {
        if (m->stream->queue.empty()) {
            ddp_emu_warn("an event record was lost from its stream's queue; abort");
            abort();
        }
        run_head(m->stream);
    }
}

void run_op(StreamOp &op)
{
    if (op.wait) run_to(op.wait);
    if (op.run) op.run();
    if (op.mark) {
        op.mark->done = true;
        op.mark->t_ms = now_ms();
    }
}

void drain(CUstream_st *s)
{
    while (!s->queue.empty()) run_head(s);
}

void drain_all()
{
    for (size_t i = 0; i < g_stream_order.size(); i++) drain(g_stream_order[i]);
}

// ---- drains: host waits after which the device has nothing to do (g_qmu)

std::map<std::string, long> g_drains; // by the call that waited

bool work_queued()
{
    for (const CUstream_st *s : g_stream_order)
        if (!s->queue.empty()) return true;
    return false;
}

void report_drains()
{
    long n = 0;
    std::string by;
    for (const auto &d : g_drains) {
        n += d.second;
        by += (by.empty() ? "" : ", ") + d.first + " " + std::to_string(d.second);
    }
    fprintf(stderr, "ddp_emu: host waits that left the device idle: %ld%s%s%s (pid %ld)\n", n,
            by.empty() ? "" : " (", by.c_str(), by.empty() ? "" : ")", (long)getpid());
}

// After a host wait that ran queued work (had: work was queued before it;
// call: the waiting call, nullptr for the emulation's own).
void note_wait(bool had, const char *call)
{
    if (!call) return;
    static bool registered = false;
    if (!registered) {
        registered = true;
        if (emu::env_long("DDP_EMU_DRAIN_REPORT", 0, 0, 1)) atexit(report_drains);
    }
    if (had && !work_queued()) g_drains[call]++;
}

// The eager streams run every operation whose wait has completed.
void pump()
{
    for (bool progress = true; progress;) {
        progress = false;
        for (CUstream_st *s : g_stream_order) {
            if (s->lazy) continue;
            while (!s->queue.empty() && (!s->queue.front().wait || s->queue.front().wait->done)) {
                run_head(s);
                progress = true;
            }
        }
    }
}

} // namespace

namespace emu
{

bool stream_ok_locked(cudaStream_t s)
{
    return s == nullptr || s == (cudaStream_t)0x1 || s == (cudaStream_t)0x2 ||
           g_streams.count(s) != 0;
}

// Run op on stream s: now (sync mode, the legacy stream) or queued.
void submit(cudaStream_t s, StreamOp op)
{
    std::lock_guard<std::recursive_mutex> lock(g_qmu);
    if (legacy_stream(s) || !s->queued) {
        if (legacy_stream(s)) {
            bool had = work_queued();
            drain_all();
            note_wait(had, "the legacy stream");
        }
        run_op(op);
    } else {
        s->queue.push_back(std::move(op));
    }
    pump();
}

void submit(cudaStream_t s, std::function<void()> run)
{
    submit(s, StreamOp{std::move(run), nullptr, nullptr});
}

// What the host waits for: one stream (the legacy one: all), or every one.
void host_wait(cudaStream_t s, const char *call)
{
    std::lock_guard<std::recursive_mutex> lock(g_qmu);
    bool had = work_queued();
    if (legacy_stream(s))
        drain_all();
    else
        drain(s);
    pump();
    note_wait(had, call);
}

void host_wait_all(const char *call)
{
    host_wait(nullptr, call);
}

} // namespace emu

extern "C" void ddp_emu_stream_sync(void *stream)
{
    host_wait((cudaStream_t)stream, nullptr);
}

extern "C" int ddp_emu_stream_live(void *stream)
{
    std::lock_guard<std::mutex> lock(g_mu);
    return stream_ok_locked((cudaStream_t)stream) ? 1 : 0;
}

extern "C" void ddp_emu_stream_deliver(void *stream, void *dst, void *src, size_t bytes)
{
    submit((cudaStream_t)stream, [=]() {
        memmove(dst, src, bytes);
        free(src);
    });
}

extern "C" void ddp_emu_stream_check_(cudaStream_t stream, void (*run)(void *),
                                      void (*destroy)(void *), void *arg)
{
    bool dry;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        dry = cfg_locked().dry;
    }
    if (dry) {
        destroy(arg);
        return;
    }
    submit(stream, [=]() {
        run(arg);
        destroy(arg);
    });
}

// ---- streams and events ------------------------------------------------------

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    if (!stream || (flags & ~cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
    if (ddp_emu_inject("cudaStreamCreate")) return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    std::lock_guard<std::mutex> lock(g_mu);
    int phys = current_physical_locked();
    if (phys < 0) return fail(cudaErrorNoDevice);
    if (g_streams_made.size() <= (size_t)phys) g_streams_made.resize(phys + 1, 0);
    int mode = g_cfg.streams;
    bool first = g_streams_made[phys]++ == 0;
    cudaStream_t s = new CUstream_st{flags,
                                     mode != kStreamsSync,
                                     mode == kStreamsLazy || (mode == kStreamsLazyFirst && first),
                                     {}};
    g_streams.insert(s);
    g_stream_order.push_back(s);
    *stream = s;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!stream || !g_streams.count(stream)) return fail(cudaErrorInvalidResourceHandle);
    }
    drain(stream); // its work still completes, as on a GPU
    pump();
    std::lock_guard<std::mutex> lock(g_mu);
    g_streams.erase(stream);
    g_stream_order.erase(std::find(g_stream_order.begin(), g_stream_order.end(), stream));
    delete stream;
    return cudaSuccess;
}

static cudaError_t stream_wait(cudaStream_t stream, const char *call)
{
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!stream_ok_locked(stream)) return fail(cudaErrorInvalidResourceHandle);
    }
    host_wait(stream, call);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    hang_point("cudaStreamSynchronize");
    return stream_wait(stream, "cudaStreamSynchronize");
}

// A query runs the work it asks about, then answers that it is complete.
extern "C" cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    return stream_wait(stream, "cudaStreamQuery");
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                           unsigned int flags)
{
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!stream_ok_locked(stream) || !g_events.count(event))
            return fail(cudaErrorInvalidResourceHandle);
    }
    // the record current at the call; an event never recorded is complete
    if (event->last && !event->last->done) submit(stream, StreamOp{nullptr, event->last, nullptr});
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!event || (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming)))
        return fail(cudaErrorInvalidValue);
    if (ddp_emu_inject("cudaEventCreate")) return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(g_mu);
    cudaEvent_t e = new CUevent_st{flags, nullptr};
    g_events.insert(e);
    *event = e;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

// Destroying an event with a record pending is allowed: the record's marker
// lives on in the queue.
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    std::lock_guard<std::mutex> lock(g_mu);
    if (!event || !g_events.erase(event)) return fail(cudaErrorInvalidResourceHandle);
    delete event;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    bool inject = ddp_emu_inject("cudaEventRecord");
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!g_events.count(event) || !stream_ok_locked(stream))
            return fail(cudaErrorInvalidResourceHandle);
        if (inject) return fail(cudaErrorLaunchFailure);
    }
    auto m = std::make_shared<Marker>(Marker{legacy_stream(stream) ? nullptr : stream, false, 0});
    event->last = m;
    submit(stream, StreamOp{nullptr, nullptr, m});
    return cudaSuccess;
}

// Runs the work up to the event's record (a query, like a stream query,
// then answers that it is complete).
static cudaError_t event_wait(cudaEvent_t event, const char *call)
{
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!g_events.count(event)) return fail(cudaErrorInvalidResourceHandle);
    }
    bool had = work_queued();
    if (event->last) run_to(event->last);
    pump();
    note_wait(had, call);
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t event)
{
    return event_wait(event, "cudaEventQuery");
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    hang_point("cudaEventSynchronize");
    return event_wait(event, "cudaEventSynchronize");
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_events.count(start) || !g_events.count(end)) return fail(cudaErrorInvalidResourceHandle);
    if (!start->last || !end->last || (start->flags & cudaEventDisableTiming) ||
        (end->flags & cudaEventDisableTiming))
        return fail(cudaErrorInvalidResourceHandle);
    if (!start->last->done || !end->last->done) return fail(cudaErrorNotReady);
    *ms = (float)(end->last->t_ms - start->last->t_ms);
    return cudaSuccess;
}
