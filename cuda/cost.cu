// cost.cu -- the cost log of ddp_cuda.h: what each kernel launch, GEMM and
// device copy or fill moves and computes, as its launcher declares it
// (DDP_COST, ddp_cuda_rt.h), logged in order while recording is on.  Built
// with nvcc and against the CPU emulation alike; on the emulation each
// declaration also goes to the emulated runtime, whose cost check
// (DDP_EMU_COST_CHECK) holds it against the pages the operation touches.
#include "ddp_cuda_rt.h"

#include <stdlib.h>
#include <string.h>

#include <mutex>

namespace
{

struct Pending {
    bool set;
    double read, written, flops;
};
thread_local Pending t_pending;

std::mutex g_mu;
bool g_on = false;
ddp_cuda_cost_t *g_log = nullptr;
size_t g_count = 0, g_cap = 0;

// Takes the pending declaration into e; appends e when recording.
void log_(ddp_cuda_cost_t e)
{
    Pending p = t_pending;
    t_pending = Pending{};
    e.declared = p.set ? 1 : 0;
    if (p.set) {
        e.read = p.read;
        e.written = p.written;
        e.flops = p.flops;
    }
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_on) return;
    if (g_count == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 256;
        void *q = realloc(g_log, cap * sizeof *g_log);
        if (!q) return; // the log stops growing; the model then undercounts
        g_log = (ddp_cuda_cost_t *)q;
        g_cap = cap;
    }
    g_log[g_count++] = e;
}

} // namespace

void ddp_cost_declare_(double read, double written, double flops)
{
    t_pending = Pending{true, read, written, flops};
#ifdef DDP_CUDA_EMU
    ddp_emu_declare_cost(read, written);
#endif
}

void ddp_cost_launch_(const char *kernel, dim3 grid, dim3 block)
{
    ddp_cuda_cost_t e;
    memset(&e, 0, sizeof e);
    e.name = kernel;
    e.kind = DDP_COST_KERNEL;
    e.math = DDP_MATH_FP32;
    e.blocks = (unsigned long long)grid.x * grid.y * grid.z;
    e.threads = block.x * block.y * block.z;
    log_(e);
}

void ddp_cost_gemm_(const char *name, ddp_cuda_math_t math, long long m, long long n)
{
    ddp_cuda_cost_t e;
    memset(&e, 0, sizeof e);
    e.name = name;
    e.kind = DDP_COST_GEMM;
    e.math = math;
    e.blocks = (unsigned long long)((m + 127) / 128) * (unsigned long long)((n + 127) / 128);
    log_(e);
}

void ddp_cost_copy_(const char *name, double read, double written)
{
    t_pending = Pending{true, read, written, 0}; // not the emulation's: copies are not checked
    ddp_cuda_cost_t e;
    memset(&e, 0, sizeof e);
    e.name = name;
    e.kind = DDP_COST_COPY;
    e.math = DDP_MATH_FP32;
    log_(e);
}

extern "C" {

void ddp_cuda_cost_record(int on)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (on) g_count = 0;
    g_on = on != 0;
}

size_t ddp_cuda_cost_log(const ddp_cuda_cost_t **entries)
{
    std::lock_guard<std::mutex> lock(g_mu);
    *entries = g_log;
    return g_count;
}

} // extern "C"
