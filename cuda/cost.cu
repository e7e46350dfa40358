// cost.cu -- the cost log of ddp_cuda.h: what each kernel launch, GEMM and
// device copy or fill moves and computes, as its launcher declares it
// (DDP_COST, ddp_cuda_rt.h), logged in order while recording is on.  Built
// with nvcc and against the CPU emulation alike; on the emulation each
// declaration also goes to the emulated runtime, whose cost check
// (DDP_EMU_COST_CHECK) holds it against the pages the operation touches.
#include "ddp_cuda_rt.h"

#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>
#include <utility>

namespace
{

struct Pending {
    bool set;
    double read, written, flops;
};
thread_local Pending t_pending;

// A growing array of entries.
struct Log {
    ddp_cuda_cost_t *e = nullptr;
    size_t count = 0, cap = 0;
    void push(const ddp_cuda_cost_t &x)
    {
        if (count == cap) {
            size_t c = cap ? 2 * cap : 256;
            void *q = realloc(e, c * sizeof *e);
            if (!q) return; // the log stops growing; the model then undercounts
            e = (ddp_cuda_cost_t *)q;
            cap = c;
        }
        e[count++] = x;
    }
};

std::mutex g_mu;
// either log on: a launch takes the lock only then (one relaxed load else)
std::atomic<bool> g_any{false};
bool g_on = false; // ddp_cuda_cost_record
Log g_log;
// ddp_cuda_cost_steps: the step running and the last complete one; g_open:
// a step's first phase was entered and its "end-of-step work" not yet
bool g_steps = false, g_in_step = false, g_open = false;
Log g_cur, g_last;
long g_nsteps = 0;

// Takes the pending declaration into e; appends e where it is recorded.
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
    if (!g_any.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_on) g_log.push(e);
    if (g_steps && g_in_step) g_cur.push(e);
}

// An entry of kind and math named name, its numbers zero.
ddp_cuda_cost_t entry_(const char *name, ddp_cuda_cost_kind_t kind, ddp_cuda_math_t math)
{
    ddp_cuda_cost_t e;
    memset(&e, 0, sizeof e);
    e.name = name;
    e.kind = kind;
    e.math = math;
    return e;
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
    ddp_cuda_cost_t e = entry_(kernel, DDP_COST_KERNEL, DDP_MATH_FP32);
    e.blocks = (unsigned long long)grid.x * grid.y * grid.z;
    e.threads = block.x * block.y * block.z;
    log_(e);
}

// A GEMM's parallelism: its 128x128 output tiles, times the slices of k
// (512 long) that cuBLAS's split-K can give them when the tiles alone are
// too few for the SMs (a weight gradient: C small, k the batch's pixels);
// a strided batch has its GEMMs' tiles side by side.
void ddp_cost_gemm_(const char *name, ddp_cuda_math_t math, long long m, long long n, long long k,
                    long long batch)
{
    ddp_cuda_cost_t e = entry_(name, DDP_COST_GEMM, math);
    unsigned long long tiles =
        (unsigned long long)((m + 127) / 128) * (unsigned long long)((n + 127) / 128);
    e.blocks = tiles * (unsigned long long)(k > 512 ? k / 512 : 1) *
               (unsigned long long)(batch > 1 ? batch : 1);
    log_(e);
}

void ddp_cost_copy_(const char *name, double read, double written)
{
    t_pending = Pending{true, read, written, 0}; // not the emulation's: copies are not checked
    log_(entry_(name, DDP_COST_COPY, DDP_MATH_FP32));
}

extern "C" {

void ddp_cuda_cost_record(int on)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (on) g_log.count = 0;
    g_on = on != 0;
    g_any.store(g_on || g_steps, std::memory_order_relaxed);
}

size_t ddp_cuda_cost_log(const ddp_cuda_cost_t **entries)
{
    std::lock_guard<std::mutex> lock(g_mu);
    *entries = g_log.e;
    return g_log.count;
}

void ddp_cuda_cost_steps(int on)
{
    std::lock_guard<std::mutex> lock(g_mu);
    g_steps = on != 0;
    g_cur.count = g_last.count = 0;
    g_nsteps = 0;
    g_in_step = g_open = false;
    g_any.store(g_on || g_steps, std::memory_order_relaxed);
}

size_t ddp_cuda_cost_last_step(const ddp_cuda_cost_t **entries, long *steps)
{
    std::lock_guard<std::mutex> lock(g_mu);
    *entries = g_last.e;
    if (steps) *steps = g_nsteps;
    return g_last.count;
}

} // extern "C"

// A profiler range opened (ddp_cuda_range_start): the trainer's phase.
void ddp_cost_phase_(const char *range)
{
    // the trainer's phases (activity.c, "ddptrain " + the phase's name);
    // a bucket's collective range leaves the phase as it is
    static const char *const kStep[] = {"data wait", "forward", "backward", "optimizer",
                                        "end-of-step work"};
    static const char *const kOther[] = {"start-up", "evaluation", "checkpoint", "save",
                                         "finishing", "aborting"};
    if (!g_any.load(std::memory_order_relaxed)) return; // no lock on every range while off
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_steps || !range || strncmp(range, "ddptrain ", 9) != 0) return;
    const char *phase = range + 9;
    // A step opens with its first data wait or forward and closes with its
    // end-of-step work (or anything not a step's): the next batch's read and
    // upload inside the optimizer's phase (trainer_prefetch) and a step's
    // further micro-batches stay in the step
    // (a bucket's collective range is neither)
    bool step = false, other = false;
    for (const char *s : kStep) step = step || strcmp(phase, s) == 0;
    for (const char *s : kOther) other = other || strcmp(phase, s) == 0;
    if (!g_open && (strcmp(phase, "data wait") == 0 || strcmp(phase, "forward") == 0)) {
        if (g_cur.count) {
            std::swap(g_cur, g_last);
            g_cur.count = 0;
            g_nsteps++;
        }
        g_open = true;
    }
    if (other || strcmp(phase, "end-of-step work") == 0) g_open = false;
    if (step) g_in_step = true;
    if (other) g_in_step = false;
}
