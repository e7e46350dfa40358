// emu_memory.cc -- device memory in the CPU emulation of the CUDA runtime:
// cudaMalloc'd ranges as tracked host memory (filled with 0xFF bytes, NaN as
// float; within DDP_EMU_GPU_MEM_MB per device), pinned host memory
// (cudaMallocHost), and the copies and fills between them with the checks
// of direction and range (cudaMemcpy[Async], cudaMemset[Async]): now, or as
// operations of a stream (emu_stream.cc).  The contract is in include/
// cuda_runtime.h.
#include "emu_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

using namespace emu;

// ---- memory ----------------------------------------------------------------

namespace
{

struct Alloc {
    size_t size;
    int device;  // physical
    bool mapped; // dev_map (the cost check, the dry run) rather than the heap
};
std::map<uintptr_t, Alloc> g_dev;   // device allocations by base
std::map<uintptr_t, size_t> g_host; // cudaMallocHost allocations

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

// p inside a cudaMallocHost allocation?
bool is_pinned_locked(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_host.upper_bound(a);
    if (it == g_host.begin()) return false;
    --it;
    return a >= it->first && a < it->first + std::max<size_t>(it->second, 1);
}

} // namespace

namespace emu
{

std::vector<size_t> g_used;
std::vector<size_t> g_peak;

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

bool dev_operand_ok(const char *call, const char *name, const void *p, const void *base,
                    size_t bytes)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (p && dev_range_locked(base, bytes)) return true;
    if (!p || !is_dev_locked(p))
        ddp_emu_warn("%s: %s = %p is not device memory (a GPU would fault)", call, name, p);
    else
        ddp_emu_warn("%s: %s = %p: %zu bytes from %p run past its device allocation "
                     "(a GPU would fault)",
                     call, name, p, bytes, base);
    return false;
}

float tf32_round(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

void dev_pages_locked(const std::function<void(void *, size_t)> &fn)
{
    for (auto &kv : g_dev)
        if (kv.second.mapped) fn((void *)kv.first, kv.second.size);
}

} // namespace emu

extern "C" int ddp_emu_device_range(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> lock(g_mu);
    return dev_range_locked(p, bytes) ? 1 : 0;
}

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
    bool mapped = g_cfg.cost_check || g_cfg.dry;
    if (mapped) {
        // whole pages; the dry run's are never filled (zero pages)
        if (!(mem = dev_map(size, !g_cfg.dry))) return fail(cudaErrorMemoryAllocation);
    } else {
        if (posix_memalign(&mem, 256, size) != 0) return fail(cudaErrorMemoryAllocation);
        memset(mem, 0xff, size); // real cudaMalloc does not zero: NaN shows it
    }
    g_dev[(uintptr_t)mem] = Alloc{size, phys, mapped};
    g_used[phys] += size;
    g_peak[phys] = std::max(g_peak[phys], g_used[phys]);
    *p = mem;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    host_wait_all("cudaFree"); // cudaFree waits for the device
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_dev.find((uintptr_t)p);
    if (it == g_dev.end()) return fail(cudaErrorInvalidValue);
    g_used[it->second.device] -= it->second.size;
    if (it->second.mapped)
        dev_unmap(p, it->second.size);
    else
        free(p);
    g_dev.erase(it);
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
    host_wait_all("cudaFreeHost");
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
        // the dry run writes no device memory (it stays zero pages)
        if (dst_dev && g_cfg.dry) return inject ? fail(cudaErrorLaunchFailure) : cudaSuccess;
    }
    if (inject) return fail(cudaErrorLaunchFailure);
    if (!async || dst_pageable) {
        // A synchronous copy, or one into pageable memory, has finished when
        // it returns (after the work before it).
        host_wait(async ? stream : nullptr, name);
        memmove(dst, src, count);
    } else if (src_pageable) {
        // From pageable memory the source is staged before the call returns.
        auto staged =
            std::make_shared<std::vector<char>>((const char *)src, (const char *)src + count);
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
        if (g_cfg.dry) return inject ? fail(cudaErrorLaunchFailure) : cudaSuccess;
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
