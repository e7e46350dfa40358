// emu_device.cc -- the emulated machine of the CPU emulation of the CUDA
// runtime: the configuration read from the environment (DDP_EMU_GPUS,
// CUDA_VISIBLE_DEVICES, DDP_EMU_GPU_MEM_MB, DDP_EMU_MEM_REPORT,
// DDP_EMU_STREAMS), the fault
// injection of DDP_EMU_FAIL and DDP_EMU_HANG, the error codes and the
// thread's last error, and the devices (count, current device, properties,
// PCI bus id, memory info, versions).  The contract is in include/
// cuda_runtime.h; the other parts are emu_memory.cc, emu_stream.cc,
// emu_launch.cc and emu_cublas.cc (emu_internal.h).
#include "emu_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

using namespace emu;

// ---- environment, errors, fault injection --------------------------------

namespace emu
{

std::mutex g_mu;
Config g_cfg;

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

} // namespace emu

namespace
{

const unsigned kBusBase = 0x10;

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0; // visible ordinal

// NAME:N[,NAME:N...] from the environment variable `var`.
void parse_rules(const char *var, std::vector<FailRule> &out)
{
    const char *env = getenv(var);
    if (!env || !*env) return;
    std::string s(env);
    size_t pos = 0;
    while (pos < s.size()) {
        size_t comma = s.find(',', pos);
        std::string item =
            s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
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

// DDP_EMU_MEM_REPORT=1: at exit, the most device memory the process held
// at once on each emulated GPU it allocated on.  Without the lock: a
// thread that exits while holding it must not hang the exit.
void report_peak()
{
    for (size_t d = 0; d < g_peak.size(); d++)
        if (g_peak[d])
            fprintf(stderr, "ddp_emu: GPU %zu peak %zu bytes (pid %ld)\n", d, g_peak[d],
                    (long)getpid());
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
    c.cost_check = env_long("DDP_EMU_COST_CHECK", 0, 0, 1) != 0;
    c.dry = env_long("DDP_EMU_DRY", 0, 0, 1) != 0;
#if !defined(__x86_64__)
    if (c.cost_check) {
        ddp_emu_warn("DDP_EMU_COST_CHECK needs x86-64 (the page fault says read or write); off");
        c.cost_check = false;
    }
#endif
    c.loaded = true;
    g_cfg = c;
    if (g_used.size() < (size_t)c.physical) g_used.resize(c.physical, 0);
    if (g_peak.size() < (size_t)c.physical) g_peak.resize(c.physical, 0);
    static bool report_registered = false;
    if (env_long("DDP_EMU_MEM_REPORT", 0, 0, 1) && !report_registered) {
        report_registered = true;
        atexit(report_peak);
    }
}

} // namespace

namespace emu
{

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

} // namespace emu

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
void emu::hang_point(const char *name)
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

extern "C" long ddp_emu_current_busid(void)
{
    std::lock_guard<std::mutex> lock(g_mu);
    int phys = current_physical_locked();
    return phys < 0 ? -1 : (long)(kBusBase + phys) << 12; // hex digits of "0000:10:00.0"
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
    host_wait_all("cudaDeviceSynchronize");
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
