// emu.cc -- the CPU emulation of the CUDA runtime and cuBLAS: devices from
// the environment, tracked device memory, streams as queues that run when
// something waits for them (DDP_EMU_STREAMS), events as their markers,
// kernel launches that run every GPU thread as a fiber (so __syncthreads
// works), cuBLAS over the host CBLAS (column-major), and the
// fault injection of DDP_EMU_FAIL.  The contracts are in include/
// cuda_runtime.h and include/cublas_v2.h; nccl_emu.c uses emu.h.
#include "emu.h"

// before the CUDA headers: libstdc++ spells __noinline__, a macro there
#include <deque>
#include <functional>
#include <memory>


#include <cblas.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__) || defined(DDP_EMU_UCONTEXT)
#define EMU_UCONTEXT 1
#include <ucontext.h>
#endif

// ---- environment, errors, fault injection --------------------------------

namespace
{

const unsigned kBusBase = 0x10;

struct FailRule {
    std::string name;
    long at;    // the call that fails (1-based)
    long count; // calls so far
};

struct Config {
    bool loaded = false;
    int physical = 1;         // DDP_EMU_GPUS
    std::vector<int> visible; // visible ordinal -> physical index
    size_t mem_total = (size_t)16384 << 20;
    std::vector<FailRule> fail;
    std::vector<FailRule> hang; // DDP_EMU_HANG
    int streams = 1; // DDP_EMU_STREAMS: 0 sync, 1 lazy (the default), 2 lazy-first
};

enum { kStreamsSync, kStreamsLazy, kStreamsLazyFirst };

std::mutex g_mu; // the configuration and the tables below
Config g_cfg;

struct Alloc {
    size_t size;
    int device; // physical
};
std::map<uintptr_t, Alloc> g_dev;   // device allocations by base
std::map<uintptr_t, size_t> g_host; // cudaMallocHost allocations
std::vector<size_t> g_used;         // bytes allocated per physical device
std::set<const void *> g_streams;   // live streams
std::set<const void *> g_events;    // live events
std::set<const void *> g_handles;   // live cuBLAS handles
unsigned long long g_launches;
std::recursive_mutex g_qmu;                 // the stream queues (taken before g_mu)
std::vector<CUstream_st *> g_stream_order; // live streams, in creation order
std::vector<int> g_streams_made;           // streams created per physical device since the load

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0; // visible ordinal

long env_long(const char *name, long dflt, long lo, long hi)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        ddp_emu_warn("%s=\"%s\" is not an integer in [%ld, %ld]; using %ld", name, s, lo, hi, dflt);
        return dflt;
    }
    return v;
}

// NAME:N[,NAME:N...] from the environment variable `var`.
void parse_rules(const char *var, std::vector<FailRule> &out)
{
    const char *env = getenv(var);
    if (!env || !*env) return;
    std::string s(env);
    size_t pos = 0;
    while (pos < s.size()) {
        size_t comma = s.find(',', pos);
        std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        size_t colon = item.find(':');
        char *end = nullptr;
        long at = colon == std::string::npos ? 0 : strtol(item.c_str() + colon + 1, &end, 10);
        if (colon == std::string::npos || colon == 0 || at < 1 || *end)
            ddp_emu_warn("%s: \"%s\" is not NAME:N (N >= 1); ignored", var, item.c_str());
        else
            out.push_back(FailRule{item.substr(0, colon), at, 0});
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
}

void load_locked()
{
    Config c;
    c.physical = (int)env_long("DDP_EMU_GPUS", 1, 0, 64);
    c.mem_total = (size_t)env_long("DDP_EMU_GPU_MEM_MB", 16384, 1, 1L << 24) << 20;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis) {
        for (int i = 0; i < c.physical; i++) c.visible.push_back(i);
    } else {
        // like CUDA: the list ends at the first entry that names no device
        std::string s(vis);
        size_t pos = 0;
        while (pos <= s.size() && !s.empty()) {
            size_t comma = s.find(',', pos);
            std::string item =
                s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
            while (!item.empty() && item[0] == ' ') item.erase(0, 1);
            while (!item.empty() && item.back() == ' ') item.pop_back();
            char *end;
            long v = strtol(item.c_str(), &end, 10);
            if (item.empty() || *end || v < 0 || v >= c.physical) break;
            bool dup = false;
            for (int d : c.visible) dup = dup || d == v;
            if (dup) break;
            c.visible.push_back((int)v);
            if (comma == std::string::npos) break;
            pos = comma + 1;
        }
    }
    parse_rules("DDP_EMU_FAIL", c.fail);
    parse_rules("DDP_EMU_HANG", c.hang);
    const char *streams = getenv("DDP_EMU_STREAMS");
    if (streams && *streams) {
        if (!strcmp(streams, "sync"))
            c.streams = kStreamsSync;
        else if (!strcmp(streams, "lazy"))
            c.streams = kStreamsLazy;
        else if (!strcmp(streams, "lazy-first"))
            c.streams = kStreamsLazyFirst;
        else
            ddp_emu_warn("DDP_EMU_STREAMS=\"%s\" is not sync, lazy or lazy-first; using lazy",
                         streams);
    }
    c.loaded = true;
    g_cfg = c;
    if (g_used.size() < (size_t)c.physical) g_used.resize(c.physical, 0);
}

Config &cfg_locked()
{
    if (!g_cfg.loaded) load_locked();
    return g_cfg;
}

cudaError_t fail(cudaError_t e)
{
    if (e != cudaSuccess) t_last_error = e;
    return e;
}

// The physical index of the current device, or -1 (none visible).
int current_physical_locked()
{
    Config &c = cfg_locked();
    if (t_device < 0 || t_device >= (int)c.visible.size()) return -1;
    return c.visible[t_device];
}

// The allocation holding p, or g_dev.end().
std::map<uintptr_t, Alloc>::iterator find_dev_locked(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_dev.upper_bound(a);
    if (it == g_dev.begin()) return g_dev.end();
    --it;
    if (a >= it->first && a < it->first + it->second.size) return it;
    return g_dev.end();
}

bool dev_range_locked(const void *p, size_t bytes)
{
    auto it = find_dev_locked(p);
    if (it == g_dev.end()) return false;
    return bytes <= it->first + it->second.size - (uintptr_t)p;
}

bool is_dev_locked(const void *p)
{
    return find_dev_locked(p) != g_dev.end();
}

// p inside a cudaMallocHost allocation?
bool is_pinned_locked(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_host.upper_bound(a);
    if (it == g_host.begin()) return false;
    --it;
    return a >= it->first && a < it->first + std::max<size_t>(it->second, 1);
}

bool stream_ok_locked(cudaStream_t s)
{
    return s == nullptr || s == (cudaStream_t)0x1 || s == (cudaStream_t)0x2 ||
           g_streams.count(s) != 0;
}

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

} // namespace

extern "C" void ddp_emu_warn(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ddptrain CUDA emulation: %s\n", buf);
}

extern "C" int ddp_emu_inject(const char *name)
{
    std::lock_guard<std::mutex> lock(g_mu);
    Config &c = cfg_locked();
    int hit = 0;
    for (FailRule &r : c.fail)
        if (r.name == name && ++r.count == r.at) hit = 1;
    return hit;
}

// DDP_EMU_HANG: the N-th call of `name` never returns, as a host wait for a
// GPU whose collective never completes (a peer gone, a mismatched NCCL call).
static void hang_point(const char *name)
{
    bool hit = false;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        for (FailRule &r : cfg_locked().hang)
            if (r.name == name && ++r.count == r.at) hit = true;
    }
    if (!hit) return;
    ddp_emu_warn("%s hangs here (DDP_EMU_HANG)", name);
    for (;;) pause();
}

extern "C" void ddp_emu_reload_env(void)
{
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    std::lock_guard<std::mutex> lock(g_mu);
    load_locked();
    g_streams_made.clear(); // lazy-first: the next stream is a first one again
    t_device = 0;
}

extern "C" int ddp_emu_device_range(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> lock(g_mu);
    return dev_range_locked(p, bytes) ? 1 : 0;
}

extern "C" long ddp_emu_current_busid(void)
{
    std::lock_guard<std::mutex> lock(g_mu);
    int phys = current_physical_locked();
    return phys < 0 ? -1 : (long)(kBusBase + phys) << 12; // hex digits of "0000:10:00.0"
}

extern "C" unsigned long long ddp_emu_launch_count(void)
{
    std::lock_guard<std::mutex> lock(g_mu);
    return g_launches;
}

// ---- errors ----------------------------------------------------------------

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
    }
    return "unrecognized error code";
}

extern "C" const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define EMU_NAME(x)                                                                                \
    case x: return #x;
        EMU_NAME(cudaSuccess)
        EMU_NAME(cudaErrorInvalidValue)
        EMU_NAME(cudaErrorMemoryAllocation)
        EMU_NAME(cudaErrorInitializationError)
        EMU_NAME(cudaErrorInvalidConfiguration)
        EMU_NAME(cudaErrorInvalidDevicePointer)
        EMU_NAME(cudaErrorInvalidMemcpyDirection)
        EMU_NAME(cudaErrorNoDevice)
        EMU_NAME(cudaErrorInvalidDevice)
        EMU_NAME(cudaErrorInvalidResourceHandle)
        EMU_NAME(cudaErrorNotReady)
        EMU_NAME(cudaErrorIllegalAddress)
        EMU_NAME(cudaErrorLaunchFailure)
        EMU_NAME(cudaErrorNotSupported)
        EMU_NAME(cudaErrorUnknown)
#undef EMU_NAME
    }
    return "cudaErrorUnknown";
}

extern "C" cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void)
{
    return t_last_error;
}

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

namespace
{


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

// Run op on stream s: now (sync mode, the legacy stream) or queued.
void submit(cudaStream_t s, StreamOp op)
{
    std::lock_guard<std::recursive_mutex> lock(g_qmu);
    if (legacy_stream(s) || !s->queued) {
        if (legacy_stream(s)) drain_all();
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
void host_wait(cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> lock(g_qmu);
    if (legacy_stream(s))
        drain_all();
    else
        drain(s);
    pump();
}

void host_wait_all()
{
    host_wait(nullptr);
}

} // namespace

extern "C" void ddp_emu_stream_sync(void *stream)
{
    host_wait((cudaStream_t)stream);
}

extern "C" void ddp_emu_stream_deliver(void *stream, void *dst, void *src, size_t bytes)
{
    submit((cudaStream_t)stream, [=]() {
        memmove(dst, src, bytes);
        free(src);
    });
}

// ---- devices ---------------------------------------------------------------

extern "C" cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(g_mu);
    *count = (int)cfg_locked().visible.size();
    return *count ? cudaSuccess : fail(cudaErrorNoDevice);
}

extern "C" cudaError_t cudaSetDevice(int device)
{
    std::lock_guard<std::mutex> lock(g_mu);
    Config &c = cfg_locked();
    if (c.visible.empty()) return fail(cudaErrorNoDevice);
    if (device < 0 || device >= (int)c.visible.size()) return fail(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device)
{
    if (!device) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(g_mu);
    if (current_physical_locked() < 0) return fail(cudaErrorNoDevice);
    *device = t_device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device)
{
    if (!prop) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(g_mu);
    Config &c = cfg_locked();
    if (c.visible.empty()) return fail(cudaErrorNoDevice);
    if (device < 0 || device >= (int)c.visible.size()) return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "ddptrain CUDA emulation");
    prop->totalGlobalMem = c.mem_total;
    prop->sharedMemPerBlock = 48 << 10;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->clockRate = 1000000;
    prop->totalConstMem = 64 << 10;
    prop->major = 8;
    prop->minor = 0;
    prop->multiProcessorCount = 4;
    prop->pciDomainID = 0;
    prop->pciBusID = (int)(kBusBase + c.visible[device]);
    prop->pciDeviceID = 0;
    prop->concurrentKernels = 1;
    prop->unifiedAddressing = 1;
    prop->l2CacheSize = 4 << 20;
    prop->maxThreadsPerMultiProcessor = 2048;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceGetPCIBusId(char *pci, int len, int device)
{
    if (!pci || len <= 0) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(g_mu);
    Config &c = cfg_locked();
    if (c.visible.empty()) return fail(cudaErrorNoDevice);
    if (device < 0 || device >= (int)c.visible.size()) return fail(cudaErrorInvalidDevice);
    snprintf(pci, (size_t)len, "0000:%02x:00.0", kBusBase + c.visible[device]);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(g_mu);
    int phys = current_physical_locked();
    if (phys < 0) return fail(cudaErrorNoDevice);
    *total_bytes = g_cfg.mem_total;
    *free_bytes = g_cfg.mem_total - std::min(g_cfg.mem_total, g_used[phys]);
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void)
{
    host_wait_all();
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceReset(void)
{
    return cudaSuccess;
}

extern "C" cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (!version) return fail(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDriverGetVersion(int *version)
{
    if (!version) return fail(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

// ---- memory ----------------------------------------------------------------

extern "C" cudaError_t cudaMalloc(void **p, size_t size)
{
    if (!p) return fail(cudaErrorInvalidValue);
    bool inject = ddp_emu_inject("cudaMalloc");
    std::lock_guard<std::mutex> lock(g_mu);
    int phys = current_physical_locked();
    if (phys < 0) return fail(cudaErrorNoDevice);
    if (size == 0) {
        *p = nullptr;
        return cudaSuccess;
    }
    if (inject || size > g_cfg.mem_total - std::min(g_cfg.mem_total, g_used[phys]))
        return fail(cudaErrorMemoryAllocation);
    void *mem = nullptr;
    if (posix_memalign(&mem, 256, size) != 0) return fail(cudaErrorMemoryAllocation);
    memset(mem, 0xff, size); // real cudaMalloc does not zero: NaN shows it
    g_dev[(uintptr_t)mem] = Alloc{size, phys};
    g_used[phys] += size;
    *p = mem;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    host_wait_all(); // cudaFree waits for the device
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_dev.find((uintptr_t)p);
    if (it == g_dev.end()) return fail(cudaErrorInvalidValue);
    g_used[it->second.device] -= it->second.size;
    g_dev.erase(it);
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void **p, size_t size)
{
    if (!p) return fail(cudaErrorInvalidValue);
    if (ddp_emu_inject("cudaMallocHost")) return fail(cudaErrorMemoryAllocation);
    void *mem = nullptr;
    if (posix_memalign(&mem, 256, size ? size : 1) != 0) return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(g_mu);
    g_host[(uintptr_t)mem] = size;
    *p = mem;
    return cudaSuccess;
}

extern "C" cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    return cudaMallocHost(p, size);
}

extern "C" cudaError_t cudaFreeHost(void *p)
{
    if (!p) return cudaSuccess;
    host_wait_all();
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_host.find((uintptr_t)p);
    if (it == g_host.end()) return fail(cudaErrorInvalidValue);
    g_host.erase(it);
    free(p);
    return cudaSuccess;
}

namespace
{

cudaError_t memcpy_checked(const char *name, void *dst, const void *src, size_t count,
                           cudaMemcpyKind kind, cudaStream_t stream, bool async)
{
    bool inject = ddp_emu_inject(name);
    bool dst_pageable, src_pageable;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (async && !stream_ok_locked(stream)) return fail(cudaErrorInvalidResourceHandle);
        if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
            return fail(cudaErrorInvalidMemcpyDirection);
        if (count == 0) return cudaSuccess;
        if (!dst || !src) return fail(cudaErrorInvalidValue);
        bool dst_dev = is_dev_locked(dst), src_dev = is_dev_locked(src);
        if (kind != cudaMemcpyDefault) {
            bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
            bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
            if (dst_dev != want_dst || src_dev != want_src) return fail(cudaErrorInvalidValue);
        }
        if (dst_dev && !dev_range_locked(dst, count)) return fail(cudaErrorInvalidValue);
        if (src_dev && !dev_range_locked(src, count)) return fail(cudaErrorInvalidValue);
        dst_pageable = !dst_dev && !is_pinned_locked(dst);
        src_pageable = !src_dev && !is_pinned_locked(src);
    }
    if (inject) return fail(cudaErrorLaunchFailure);
    if (!async || dst_pageable) {
        // A synchronous copy, or one into pageable memory, has finished when
        // it returns (after the work before it).
        host_wait(async ? stream : nullptr);
        memmove(dst, src, count);
    } else if (src_pageable) {
        // From pageable memory the source is staged before the call returns.
        auto staged = std::make_shared<std::vector<char>>((const char *)src,
                                                          (const char *)src + count);
        submit(stream, [=]() { memmove(dst, staged->data(), count); });
    } else {
        submit(stream, [=]() { memmove(dst, src, count); });
    }
    return cudaSuccess;
}

cudaError_t memset_checked(const char *name, void *p, int value, size_t count, cudaStream_t stream,
                           bool async)
{
    bool inject = ddp_emu_inject(name);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (async && !stream_ok_locked(stream)) return fail(cudaErrorInvalidResourceHandle);
        if (count == 0) return cudaSuccess;
        if (!dev_range_locked(p, count)) return fail(cudaErrorInvalidValue);
    }
    if (inject) return fail(cudaErrorLaunchFailure);
    submit(async ? stream : nullptr, [=]() { memset(p, value, count); });
    return cudaSuccess;
}

} // namespace

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind)
{
    return memcpy_checked("cudaMemcpy", dst, src, count, kind, nullptr, false);
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                       cudaMemcpyKind kind, cudaStream_t stream)
{
    return memcpy_checked("cudaMemcpyAsync", dst, src, count, kind, stream, true);
}

extern "C" cudaError_t cudaMemset(void *p, int value, size_t count)
{
    return memset_checked("cudaMemset", p, value, count, nullptr, false);
}

extern "C" cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t stream)
{
    return memset_checked("cudaMemsetAsync", p, value, count, stream, true);
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
    cudaStream_t s = new CUstream_st{flags, mode != kStreamsSync,
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

static cudaError_t stream_wait(cudaStream_t stream)
{
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!stream_ok_locked(stream)) return fail(cudaErrorInvalidResourceHandle);
    }
    host_wait(stream);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    hang_point("cudaStreamSynchronize");
    return stream_wait(stream);
}

// A query runs the work it asks about, then answers that it is complete.
extern "C" cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    return stream_wait(stream);
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
static cudaError_t event_wait(cudaEvent_t event)
{
    std::lock_guard<std::recursive_mutex> qlock(g_qmu);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!g_events.count(event)) return fail(cudaErrorInvalidResourceHandle);
    }
    if (event->last) run_to(event->last);
    pump();
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t event)
{
    return event_wait(event);
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    hang_point("cudaEventSynchronize");
    return event_wait(event);
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

// ---- kernel launches: fibers -------------------------------------------------
//
// Every thread of a block is a fiber on the launching OS thread.  A fiber
// runs the kernel body in a loop: when the body returns, the fiber goes
// back to the scheduler marked done and is reused for the next thread
// without a new stack set-up.  A thread that calls __syncthreads is parked
// (its fiber kept) and the scheduler starts the next thread; once every
// thread of the block is parked or done, the parked ones resume in thread
// order.  Kernels without barriers therefore use one fiber for the whole
// grid.  Stacks come from a per-OS-thread pool (mmap with a guard page),
// grown to the largest block seen and kept.

thread_local ddp_emu_ctx_t ddp_emu_ctx_;

#ifndef EMU_UCONTEXT
// x86-64: switch stacks saving the callee-saved registers, MXCSR and the
// x87 control word (what the SysV ABI says survives a call).
extern "C" void ddp_emu_switch_(void **save_sp, void *load_sp);
extern "C" void ddp_emu_fiber_start_(void);
asm(R"(
    .text
    .globl ddp_emu_switch_
    .type ddp_emu_switch_, @function
ddp_emu_switch_:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size ddp_emu_switch_, .-ddp_emu_switch_

    .globl ddp_emu_fiber_start_
    .type ddp_emu_fiber_start_, @function
ddp_emu_fiber_start_:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size ddp_emu_fiber_start_, .-ddp_emu_fiber_start_
)");
#endif

namespace
{

enum FiberState { kRunning, kParked, kDone };

struct Fiber {
    char *map = nullptr; // mmap'd region (guard page first)
    size_t map_size = 0;
    char *stack_lo = nullptr; // usable stack
    size_t stack_size = 0;
#ifdef EMU_UCONTEXT
    ucontext_t uc;
#else
    void *sp = nullptr;
#endif
    void *fake_stack = nullptr; // ASan
    uint3 tid{0, 0, 0};
    FiberState state = kDone;
};

struct Sched {
    std::vector<Fiber *> pool; // every fiber made on this OS thread
    std::vector<Fiber *> free_list;
    std::vector<Fiber *> parked;
    Fiber *cur = nullptr; // the fiber running now, or null (scheduler)
    void (*run)(void *) = nullptr;
    void *arg = nullptr;
#ifdef EMU_UCONTEXT
    ucontext_t uc;
#else
    void *sp = nullptr;
#endif
    void *fake_stack = nullptr;         // ASan: the scheduler's
    const void *sched_bottom = nullptr; // ASan: the scheduler's stack
    size_t sched_size = 0;
    size_t stack_bytes = 64 << 10;
};

thread_local Sched *t_sched = nullptr;
std::mutex g_launch_mu; // held while a launch runs (see ddp_emu_launch_)

#ifdef EMU_ASAN
inline void asan_start(void **save, const void *bottom, size_t size)
{
    __sanitizer_start_switch_fiber(save, bottom, size);
}
inline void asan_finish(void *save, const void **old_bottom, size_t *old_size)
{
    __sanitizer_finish_switch_fiber(save, old_bottom, old_size);
}
#else
inline void asan_start(void **, const void *, size_t) {}
inline void asan_finish(void *, const void **, size_t *) {}
#endif

// The body of every fiber (never returns).
void fiber_main(void *)
{
    Sched *s = t_sched;
    asan_finish(nullptr, &s->sched_bottom, &s->sched_size);
    for (;;) {
        s->run(s->arg);
        Fiber *f = s->cur;
        f->state = kDone;
        asan_start(&f->fake_stack, s->sched_bottom, s->sched_size);
#ifdef EMU_UCONTEXT
        swapcontext(&f->uc, &s->uc);
#else
        ddp_emu_switch_(&f->sp, s->sp);
#endif
        asan_finish(f->fake_stack, &s->sched_bottom, &s->sched_size);
    }
}

#ifdef EMU_UCONTEXT
void fiber_entry_uc()
{
    fiber_main(nullptr);
}
#endif

Fiber *fiber_new(Sched *s)
{
    Fiber *f = new Fiber;
    long page = sysconf(_SC_PAGESIZE);
    f->stack_size = s->stack_bytes;
    f->map_size = f->stack_size + (size_t)page;
    void *m =
        mmap(nullptr, f->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        ddp_emu_warn("cannot map a %zu-byte fiber stack (%s); abort", f->map_size, strerror(errno));
        abort();
    }
    f->map = (char *)m;
    mprotect(f->map, (size_t)page, PROT_NONE); // overflow faults instead of corrupting
    f->stack_lo = f->map + page;
#ifdef EMU_UCONTEXT
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, fiber_entry_uc, 0);
#else
    // the frame ddp_emu_switch_ pops: MXCSR/x87 word, r15, r14, r13 (the
    // function), r12 (its argument), rbx, rbp, and the return address
    uintptr_t top = ((uintptr_t)(f->stack_lo + f->stack_size)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 64);
    uint32_t mx;
    uint16_t cw;
    asm volatile("stmxcsr %0" : "=m"(mx));
    asm volatile("fnstcw %0" : "=m"(cw));
    sp[0] = (uint64_t)mx | ((uint64_t)cw << 32);
    sp[1] = 0;                     // r15
    sp[2] = 0;                     // r14
    sp[3] = (uint64_t)&fiber_main; // r13
    sp[4] = 0;                     // r12
    sp[5] = 0;                     // rbx
    sp[6] = 0;                     // rbp
    sp[7] = (uint64_t)&ddp_emu_fiber_start_;
    f->sp = sp;
#endif
    s->pool.push_back(f);
    return f;
}

// Run f until it parks or finishes.
inline void fiber_resume(Sched *s, Fiber *f)
{
    s->cur = f;
    f->state = kRunning;
    ddp_emu_ctx_.thread_idx = f->tid;
    asan_start(&s->fake_stack, f->stack_lo, f->stack_size);
#ifdef EMU_UCONTEXT
    swapcontext(&s->uc, &f->uc);
#else
    ddp_emu_switch_(&s->sp, f->sp);
#endif
    asan_finish(s->fake_stack, nullptr, nullptr);
    s->cur = nullptr;
}

Sched *sched_get()
{
    if (!t_sched) {
        t_sched = new Sched;
        long kb = env_long("DDP_EMU_STACK_KB", 64, 16, 1 << 20);
        t_sched->stack_bytes = (size_t)kb << 10;
    }
    return t_sched;
}


[[noreturn]] void divergent(const char *file, int line, const char *what, uint3 b, unsigned done,
                            unsigned parked)
{
    ddp_emu_warn("divergent __syncthreads in the kernel launched at %s:%d (%s): in block "
                 "(%u,%u,%u) %u threads returned while %u wait at a barrier (undefined on a "
                 "GPU); abort",
                 file, line, what, b.x, b.y, b.z, done, parked);
    abort();
}

} // namespace

extern "C" void __syncthreads(void)
{
    Sched *s = t_sched;
    if (!s || !s->cur) {
        ddp_emu_warn("__syncthreads() called outside a kernel; abort");
        abort();
    }
    Fiber *f = s->cur;
    f->state = kParked;
    asan_start(&f->fake_stack, s->sched_bottom, s->sched_size);
#ifdef EMU_UCONTEXT
    swapcontext(&f->uc, &s->uc);
#else
    ddp_emu_switch_(&f->sp, s->sp);
#endif
    asan_finish(f->fake_stack, &s->sched_bottom, &s->sched_size);
}

namespace
{

// Every block of one launch, in order (what ddp_emu_launch_ queues).
void run_grid(dim3 grid, dim3 block, void (*run)(void *), void *arg, const char *file, int line,
              const char *what)
{
    Sched *s = sched_get();
    {
        std::lock_guard<std::mutex> lock(g_mu);
        g_launches++;
    }
    // one launch at a time in the process: __shared__ variables are statics
    std::lock_guard<std::mutex> one_at_a_time(g_launch_mu);
    ddp_emu_ctx_t saved = ddp_emu_ctx_;
    s->run = run;
    s->arg = arg;
    ddp_emu_ctx_.block_dim = block;
    ddp_emu_ctx_.grid_dim = grid;
    const unsigned n = block.x * block.y * block.z;
    s->parked.clear();
    s->parked.reserve(n);
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                ddp_emu_ctx_.block_idx = uint3{bx, by, bz};
                unsigned done = 0;
                // first pass: every thread runs until its first barrier or its end
                for (unsigned t = 0; t < n; t++) {
                    Fiber *f;
                    if (!s->free_list.empty()) {
                        f = s->free_list.back();
                        s->free_list.pop_back();
                    } else {
                        f = fiber_new(s);
                    }
                    f->tid = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                    fiber_resume(s, f);
                    if (f->state == kDone) {
                        done++;
                        s->free_list.push_back(f);
                    } else {
                        s->parked.push_back(f);
                    }
                }
                // then barrier by barrier, in thread order
                while (!s->parked.empty()) {
                    if (done)
                        divergent(file, line, what, ddp_emu_ctx_.block_idx, done,
                                  (unsigned)s->parked.size());
                    size_t k = 0;
                    for (size_t i = 0; i < s->parked.size(); i++) {
                        Fiber *f = s->parked[i];
                        fiber_resume(s, f);
                        if (f->state == kDone) {
                            done++;
                            s->free_list.push_back(f);
                        } else {
                            s->parked[k++] = f;
                        }
                    }
                    s->parked.resize(k);
                }
            }
    s->run = nullptr;
    s->arg = nullptr;
    ddp_emu_ctx_ = saved;
}

} // namespace

extern "C" void ddp_emu_launch_(dim3 grid, dim3 block, cudaStream_t stream, void (*run)(void *),
                                void (*destroy)(void *), void *arg, const char *file, int line,
                                const char *what)
{
    bool inject = ddp_emu_inject("kernel");
    cudaError_t e = cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (current_physical_locked() < 0)
            e = cudaErrorNoDevice;
        else if (!stream_ok_locked(stream))
            e = cudaErrorInvalidResourceHandle;
    }
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (e == cudaSuccess &&
        (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 ||
         grid.z == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
         grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535))
        e = cudaErrorInvalidConfiguration;
    if (e == cudaSuccess && inject) e = cudaErrorLaunchFailure;
    if (e != cudaSuccess) {
        destroy(arg);
        fail(e);
        return;
    }
    Sched *s = sched_get();
    if (s->run) {
        ddp_emu_warn("kernel launched from inside a kernel at %s:%d (%s); abort", file, line,
                     what);
        abort();
    }
    submit(stream, [=]() {
        run_grid(grid, block, run, arg, file, line, what);
        destroy(arg);
    });
}

// ---- cuBLAS ------------------------------------------------------------------

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t mode;
};

extern "C" const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
#define EMU_NAME(x)                                                                                \
    case x: return #x;
        EMU_NAME(CUBLAS_STATUS_SUCCESS)
        EMU_NAME(CUBLAS_STATUS_NOT_INITIALIZED)
        EMU_NAME(CUBLAS_STATUS_ALLOC_FAILED)
        EMU_NAME(CUBLAS_STATUS_INVALID_VALUE)
        EMU_NAME(CUBLAS_STATUS_ARCH_MISMATCH)
        EMU_NAME(CUBLAS_STATUS_MAPPING_ERROR)
        EMU_NAME(CUBLAS_STATUS_EXECUTION_FAILED)
        EMU_NAME(CUBLAS_STATUS_INTERNAL_ERROR)
        EMU_NAME(CUBLAS_STATUS_NOT_SUPPORTED)
#undef EMU_NAME
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

extern "C" const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    if (ddp_emu_inject("cublasCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    std::lock_guard<std::mutex> lock(g_mu);
    if (current_physical_locked() < 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasHandle_t h = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
    g_handles.insert(h);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (!handle || !g_handles.erase(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

namespace
{

bool handle_ok(cublasHandle_t h)
{
    std::lock_guard<std::mutex> lock(g_mu);
    return h && g_handles.count(h);
}

bool op_ok(cublasOperation_t op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// An operand of `rows` x `cols` elements of `elem` bytes, leading dimension
// ld, `batch` copies `stride` elements apart: inside one device allocation?
bool operand_ok(const char *call, const char *name, const void *p, long rows, long cols, long ld,
                size_t elem, long long stride = 0, long batch = 1)
{
    if (rows == 0 || cols == 0 || batch == 0) return true;
    long long extent = (long long)(cols - 1) * ld + rows;
    long long last = (long long)(batch - 1) * stride;
    long long lo = last < 0 ? last : 0;
    long long hi = (last > 0 ? last : 0) + extent;
    const char *base = (const char *)p + lo * (long long)elem;
    size_t bytes = (size_t)(hi - lo) * elem;
    std::lock_guard<std::mutex> lock(g_mu);
    if (p && dev_range_locked(base, bytes)) return true;
    if (!p || !is_dev_locked(p))
        ddp_emu_warn("%s: %s = %p is not device memory (a GPU would fault)", call, name, p);
    else
        ddp_emu_warn("%s: %s = %p: %lld bytes from %p run past its device allocation "
                     "(a GPU would fault)",
                     call, name, p, (long long)bytes, (const void *)base);
    return false;
}

CBLAS_TRANSPOSE cblas_op(cublasOperation_t op)
{
    return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

// C = alpha op(A) op(B) + beta C on checked operands; beta == 0 never reads C.
void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (m == 0 || n == 0) return;
    if (beta == 0.0f) {
        for (int j = 0; j < n; j++) memset(C + (size_t)j * ldc, 0, (size_t)m * sizeof(float));
    } else if ((k == 0 || alpha == 0.0f) && beta != 1.0f) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) C[(size_t)j * ldc + i] *= beta;
    }
    if (k == 0 || alpha == 0.0f) return;
    cblas_sgemm(CblasColMajor, cblas_op(ta), cblas_op(tb), m, n, k, alpha, A, lda, B, ldb,
                beta == 0.0f ? 0.0f : beta, C, ldc);
}

// The checks every GEMM shares; 0 when they pass.
cublasStatus_t gemm_check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                          int n, int k, const void *alpha, const void *beta, int lda, int ldb,
                          int ldc)
{
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(ta) || !op_ok(tb) || m < 0 || n < 0 || k < 0 || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
    if (lda < std::max(1, rows_a) || ldb < std::max(1, rows_b) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    std::lock_guard<std::mutex> lock(g_mu);
    if (!stream_ok_locked(stream)) return CUBLAS_STATUS_INVALID_VALUE;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
        base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                                      cublasOperation_t transb, int m, int n, int k,
                                      const float *alpha, const float *A, int lda, const float *B,
                                      int ldb, const float *beta, float *C, int ldc)
{
    const char *call = "cublasSgemm";
    bool inject = ddp_emu_inject(call);
    cublasStatus_t st = gemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st) return st;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    bool use_ab = k > 0 && *alpha != 0.0f;
    if (use_ab && (!operand_ok(call, "A", A, transa == CUBLAS_OP_N ? m : k,
                               transa == CUBLAS_OP_N ? k : m, lda, sizeof(float)) ||
                   !operand_ok(call, "B", B, transb == CUBLAS_OP_N ? k : n,
                               transb == CUBLAS_OP_N ? n : k, ldb, sizeof(float))))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!operand_ok(call, "C", C, m, n, ldc, sizeof(float))) return CUBLAS_STATUS_EXECUTION_FAILED;
    float al = *alpha, be = *beta; // host pointer mode: read at the call
    submit(handle->stream,
           [=]() { gemm_run(transa, transb, m, n, k, al, A, lda, B, ldb, be, C, ldc); });
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                    cublasOperation_t transb, int m, int n, int k,
                                                    const float *alpha, const float *A, int lda,
                                                    long long int strideA, const float *B, int ldb,
                                                    long long int strideB, const float *beta,
                                                    float *C, int ldc, long long int strideC,
                                                    int batchCount)
{
    const char *call = "cublasSgemmStridedBatched";
    bool inject = ddp_emu_inject(call);
    cublasStatus_t st = gemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st) return st;
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    bool use_ab = k > 0 && *alpha != 0.0f;
    if (use_ab &&
        (!operand_ok(call, "A", A, transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m,
                     lda, sizeof(float), strideA, batchCount) ||
         !operand_ok(call, "B", B, transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k,
                     ldb, sizeof(float), strideB, batchCount)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!operand_ok(call, "C", C, m, n, ldc, sizeof(float), strideC, batchCount))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    float al = *alpha, be = *beta;
    submit(handle->stream, [=]() {
        for (int b = 0; b < batchCount; b++)
            gemm_run(transa, transb, m, n, k, al, A + b * strideA, lda, B + b * strideB, ldb, be,
                     C + b * strideC, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}

namespace
{

// A bf16 operand as floats, with the same leading dimension.
std::vector<float> bf16_to_float(const void *p, long rows, long cols, long ld)
{
    std::vector<float> out;
    if (rows == 0 || cols == 0) return out;
    size_t extent = (size_t)(cols - 1) * ld + rows;
    out.resize(extent);
    const __nv_bfloat16 *src = (const __nv_bfloat16 *)p;
    for (size_t i = 0; i < extent; i++) out[i] = __bfloat162float(src[i]);
    return out;
}

} // namespace

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                       cublasOperation_t transb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType Atype,
                                       int lda, const void *B, cudaDataType Btype, int ldb,
                                       const void *beta, void *C, cudaDataType Ctype, int ldc,
                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    const char *call = "cublasGemmEx";
    bool inject = ddp_emu_inject(call);
    cublasStatus_t st = gemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st) return st;
    if (!((algo >= CUBLAS_GEMM_DEFAULT && algo <= 23) ||
          (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= 115)))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool f32 = Atype == CUDA_R_32F && Btype == CUDA_R_32F;
    bool bf16 = Atype == CUDA_R_16BF && Btype == CUDA_R_16BF;
    bool compute_ok =
        computeType == CUBLAS_COMPUTE_32F || computeType == CUBLAS_COMPUTE_32F_PEDANTIC ||
        computeType == CUBLAS_COMPUTE_32F_FAST_TF32 || computeType == CUBLAS_COMPUTE_32F_FAST_16BF;
    if (!(f32 || bf16) || Ctype != CUDA_R_32F || !compute_ok) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    float a = *(const float *)alpha, b = *(const float *)beta;
    size_t elem = bf16 ? 2 : 4;
    long ra = transa == CUBLAS_OP_N ? m : k, ca = transa == CUBLAS_OP_N ? k : m;
    long rb = transb == CUBLAS_OP_N ? k : n, cb = transb == CUBLAS_OP_N ? n : k;
    bool use_ab = k > 0 && a != 0.0f;
    if (use_ab && (!operand_ok(call, "A", A, ra, ca, lda, elem) ||
                   !operand_ok(call, "B", B, rb, cb, ldb, elem)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!operand_ok(call, "C", C, m, n, ldc, sizeof(float))) return CUBLAS_STATUS_EXECUTION_FAILED;
    submit(handle->stream, [=]() {
        if (bf16 && use_ab) {
            std::vector<float> fa = bf16_to_float(A, ra, ca, lda),
                               fb = bf16_to_float(B, rb, cb, ldb);
            gemm_run(transa, transb, m, n, k, a, fa.data(), lda, fb.data(), ldb, b, (float *)C,
                     ldc);
        } else {
            gemm_run(transa, transb, m, n, k, a, (const float *)A, lda, (const float *)B, ldb, b,
                     (float *)C, ldc);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                                      const float *alpha, const float *A, int lda, const float *x,
                                      int incx, const float *beta, float *y, int incy)
{
    const char *call = "cublasSgemv";
    bool inject = ddp_emu_inject(call);
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(trans) || m < 0 || n < 0 || lda < std::max(1, m) || incx == 0 || incy == 0 ||
        !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    long lx = trans == CUBLAS_OP_N ? n : m, ly = trans == CUBLAS_OP_N ? m : n;
    long ax = incx < 0 ? -(long)incx : incx, ay = incy < 0 ? -(long)incy : incy;
    if (!operand_ok(call, "A", A, m, n, lda, sizeof(float)) ||
        !operand_ok(call, "x", x, 1, lx, ax, sizeof(float)) ||
        !operand_ok(call, "y", y, 1, ly, ay, sizeof(float)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    float al = *alpha, be = *beta;
    submit(handle->stream, [=]() {
        if (be == 0.0f)
            for (long i = 0; i < ly; i++) y[i * ay] = 0.0f;
        cblas_sgemv(CblasColMajor, cblas_op(trans), m, n, al, A, lda, x, incx, be, y, incy);
    });
    return CUBLAS_STATUS_SUCCESS;
}
