// emu_internal.h -- what the C++ files of the CPU emulation of the CUDA
// runtime and cuBLAS share (namespace emu): the configuration read from the
// environment and the thread's device (emu_device.cc), the table of device
// memory (emu_memory.cc), the entry points of the stream queues
// (emu_stream.cc), and the locks over them; the kernel launches
// (emu_launch.cc) and cuBLAS (emu_cublas.cc) use them.  C++ only and private
// to those files: nccl_emu.c sees emu.h, the backend include/.
#ifndef DDP_EMU_INTERNAL_H
#define DDP_EMU_INTERNAL_H

#include "emu.h"

// before the CUDA headers: libstdc++ spells __noinline__, a macro there
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace emu
{

// ---- the configuration and the devices (emu_device.cc) --------------------

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
    int streams = 1;            // DDP_EMU_STREAMS: 0 sync, 1 lazy (the default), 2 lazy-first
    bool cost_check = false;    // DDP_EMU_COST_CHECK (emu_cost.cc)
    bool dry = false;           // DDP_EMU_DRY (emu_cost.cc)
};

enum { kStreamsSync, kStreamsLazy, kStreamsLazyFirst };

// the configuration and the tables of live objects (device and pinned
// memory, streams, events, cuBLAS handles, the launch count)
extern std::mutex g_mu;
extern Config g_cfg;

// The integer environment variable `name` in [lo, hi], dflt when unset (a
// warning and dflt when invalid).
long env_long(const char *name, long dflt, long lo, long hi);
// The configuration, read from the environment at the first call.
Config &cfg_locked();
// Records a failure as the thread's last error (cudaGetLastError); returns e.
cudaError_t fail(cudaError_t e);
// The physical index of the current device, or -1 (none visible).
int current_physical_locked();
// DDP_EMU_HANG: the N-th call of `name` never returns.
void hang_point(const char *name);

// ---- device memory (emu_memory.cc) ------------------------------------------

extern std::vector<size_t> g_used; // bytes allocated per physical device
extern std::vector<size_t> g_peak; // the most g_used has been (DDP_EMU_MEM_REPORT)

// [p, p + bytes) inside one device allocation (bytes 0: p inside one)?
bool dev_range_locked(const void *p, size_t bytes);
// A library call's operand `name` at p, whose accesses span [base, base +
// bytes), inside one device allocation?  Else one line on stderr (not
// device memory, or running past its allocation) and false.  Takes g_mu.
bool dev_operand_ok(const char *call, const char *name, const void *p, const void *base,
                    size_t bytes);
// fp32 rounded to TF32's 10 mantissa bits, to nearest with ties away from
// zero (PTX cvt.rna.tf32.f32), Inf and NaN kept.
float tf32_round(float v);
// p inside a device allocation?
bool is_dev_locked(const void *p);
// fn(base, bytes) for every device allocation made by dev_map.
void dev_pages_locked(const std::function<void(void *, size_t)> &fn);

// ---- what device operations cost (emu_cost.cc) -----------------------------

// Device memory as whole pages from mmap (the cost check and the dry run),
// filled with 0xFF bytes when `fill`; nullptr when the mapping fails.
void *dev_map(size_t size, bool fill);
void dev_unmap(void *p, size_t size);
// What a stream runs for a kernel's grid or a cuBLAS call `what` (launched
// at file:line; file may be ""): `run`, with the calling thread's declared
// cost (ddp_emu_declare_cost) checked against the pages it touches under
// DDP_EMU_COST_CHECK, or nothing under DDP_EMU_DRY.  Takes the declaration:
// call it once per operation, at the launch or call.
std::function<void()> device_op(const char *what, const char *file, int line,
                                std::function<void()> run);

// ---- the stream queues (emu_stream.cc) --------------------------------------

extern std::recursive_mutex g_qmu;      // the stream queues (taken before g_mu)
extern std::vector<int> g_streams_made; // streams created per physical device since the load

// s a live stream, or the default stream (0, and CUDA's special handles 0x1
// and 0x2)?
bool stream_ok_locked(cudaStream_t s);
// Run `run` as an operation of stream s: now (sync mode, the legacy stream)
// or queued.
void submit(cudaStream_t s, std::function<void()> run);
// What the host waits for: one stream (the legacy one: all), or every one;
// `call` names the waiting call for DDP_EMU_DRAIN_REPORT (emu_stream.cc).
void host_wait(cudaStream_t s, const char *call);
void host_wait_all(const char *call);

// The live objects one emulated library handed out (its handles and
// descriptors, emu_cublas.cc, emu_cudnn.cc): a NULL, destroyed or foreign
// pointer is not live.  Takes g_mu.
class Registry
{
  public:
    template <class T> T *make(const T &init)
    {
        T *p = new T(init);
        std::lock_guard<std::mutex> lock(g_mu);
        live_.insert(p);
        return p;
    }
    // false when p is not live
    template <class T> bool destroy(T *p)
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!p || !live_.erase(p)) return false;
        delete p;
        return true;
    }
    bool live(const void *p)
    {
        std::lock_guard<std::mutex> lock(g_mu);
        return p && live_.count(p);
    }

  private:
    std::set<const void *> live_;
};

} // namespace emu

#endif
