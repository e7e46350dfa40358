// emu_launch.cc -- kernel launches in the CPU emulation of the CUDA
// runtime: the launch checks (configuration, dynamic shared memory, device,
// stream), the grid run as an operation of the launch's stream, block by
// block, every GPU thread of a block a fiber on the running OS thread so
// that __syncthreads and the warp operations (shuffles, votes, __syncwarp)
// work (stack switching in assembly on x86-64, ucontext elsewhere; ASan told
// of every switch), and the diagnostics of a divergent barrier or warp
// operation and of a launch from inside a kernel.  The contract is in
// include/cuda_runtime.h.
#include "emu_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

using namespace emu;

// ---- kernel launches: fibers -------------------------------------------------
//
// Every thread of a block is a fiber on the launching OS thread.  A fiber
// runs the kernel body in a loop: when the body returns, the fiber goes
// back to the scheduler marked done and is reused for the next thread
// without a new stack set-up.  A thread that calls __syncthreads or a warp
// operation is parked (its fiber kept, with what it waits for) and the
// scheduler starts the next thread.  Once every thread of the block is
// parked or done, the scheduler resumes, in thread order, the lanes of each
// warp (32 consecutive linear thread ids) that all wait at a warp
// operation, after computing every lane's result from the values the lanes
// brought (so a lane that goes on to its next shuffle cannot change what
// the others read); when no warp can go on, every thread must wait at
// __syncthreads, and they all resume.  Kernels without barriers or warp
// operations therefore use one fiber for the whole grid.  Stacks come from a per-OS-thread pool (mmap with a guard page),
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
enum WaitKind { kBlockBarrier, kWarpOp };

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
    // what a parked thread waits at; for a warp operation, its arguments
    // and (set by the scheduler before the lane resumes) its result
    WaitKind wait = kBlockBarrier;
    int op = 0, param = 0, width = 32;
    unsigned mask = 0;
    uint64_t in = 0, out = 0;
    const char *op_name = nullptr;
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
    // the launch running now: for the diagnostics of warp operations
    const char *file = nullptr, *what = nullptr;
    int line = 0;
    void *fake_stack = nullptr;         // ASan: the scheduler's
    const void *sched_bottom = nullptr; // ASan: the scheduler's stack
    size_t sched_size = 0;
    size_t stack_bytes = 64 << 10;
};

thread_local Sched *t_sched = nullptr;
std::mutex g_launch_mu;        // held while a launch runs (see ddp_emu_launch_)
unsigned long long g_launches; // launches that ran (g_mu; ddp_emu_launch_count)

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

namespace
{

// Park the running thread (its wait already set) until the scheduler resumes it.
Fiber *park(const char *what)
{
    Sched *s = t_sched;
    if (!s || !s->cur) {
        ddp_emu_warn("%s called outside a kernel; abort", what);
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
    return f;
}

} // namespace

extern "C" void __syncthreads(void)
{
    if (t_sched && t_sched->cur) t_sched->cur->wait = kBlockBarrier;
    park("__syncthreads()");
}

extern "C" uint64_t ddp_emu_warp_op_(int op, const char *name, unsigned mask, uint64_t v, int param,
                                     int width)
{
    Sched *s = t_sched;
    if (s && s->cur) {
        Fiber *f = s->cur;
        f->wait = kWarpOp;
        f->op = op;
        f->op_name = name;
        f->mask = mask;
        f->in = v;
        f->param = param;
        f->width = width;
    }
    return park(name)->out;
}

namespace
{

[[noreturn]] void warp_abort(const Sched *s, uint3 b, unsigned warp, const char *why)
{
    ddp_emu_warn("%s in the kernel launched at %s:%d (%s): block (%u,%u,%u), warp %u "
                 "(undefined on a GPU); abort",
                 why, s->file, s->line, s->what, b.x, b.y, b.z, warp);
    abort();
}

// The results of the warp operation that lanes th[0..L) (one warp, all
// parked at a warp operation) wait at, into each lane's `out`.
void warp_results(const Sched *s, Fiber *const *th, unsigned L, uint3 b, unsigned warp)
{
    const unsigned existing = L == 32 ? 0xffffffffu : (1u << L) - 1u;
    char why[160];
    for (unsigned l = 0; l < L; l++) {
        const Fiber *f = th[l];
        if (f->op != th[0]->op || f->op_name != th[0]->op_name || f->param != th[0]->param ||
            f->width != th[0]->width || f->mask != th[0]->mask) {
            snprintf(why, sizeof why, "lanes 0 and %u of a warp at different warp operations "
                     "(%s and %s) or with different arguments", l, th[0]->op_name, f->op_name);
            warp_abort(s, b, warp, why);
        }
    }
    const Fiber *f0 = th[0];
    if ((f0->mask & existing) != existing) {
        snprintf(why, sizeof why, "%s with mask 0x%08x: the emulation runs whole warps only "
                 "(every lane of the warp in the mask, here 0x%08x)", f0->op_name, f0->mask,
                 existing);
        warp_abort(s, b, warp, why);
    }
    const int w = f0->width;
    if (w < 1 || w > 32 || (w & (w - 1))) {
        snprintf(why, sizeof why, "%s with width %d (a power of 2 up to 32)", f0->op_name, w);
        warp_abort(s, b, warp, why);
    }
    uint64_t ballot = 0;
    for (unsigned l = 0; l < L; l++)
        if (th[l]->in) ballot |= 1ull << l;
    for (unsigned l = 0; l < L; l++) {
        const unsigned seg = l & ~(unsigned)(w - 1), pos = l & (unsigned)(w - 1);
        const unsigned p = (unsigned)f0->param;
        long src = l;
        switch (f0->op) {
        case DDP_EMU_SHFL_IDX: src = seg + (p & (unsigned)(w - 1)); break;
        case DDP_EMU_SHFL_UP: src = pos < p ? l : l - p; break;
        case DDP_EMU_SHFL_DOWN: src = pos + p >= (unsigned)w ? l : l + p; break;
        case DDP_EMU_SHFL_XOR: src = (l ^ p) >= seg + (unsigned)w ? l : (l ^ p); break;
        case DDP_EMU_BALLOT: th[l]->out = ballot; continue;
        case DDP_EMU_ANY: th[l]->out = ballot != 0; continue;
        case DDP_EMU_ALL: th[l]->out = ballot == (uint64_t)existing; continue;
        case DDP_EMU_SYNCWARP: th[l]->out = 0; continue;
        default:
            snprintf(why, sizeof why, "unknown warp operation %d", f0->op);
            warp_abort(s, b, warp, why);
        }
        if (src >= (long)L) {
            snprintf(why, sizeof why, "%s: lane %u reads lane %ld, which the block does not have",
                     f0->op_name, l, src);
            warp_abort(s, b, warp, why);
        }
        th[l]->out = th[src]->in;
    }
}

// Every block of one launch, in order (what ddp_emu_launch_ queues).
void run_grid(dim3 grid, dim3 block, size_t smem, void (*run)(void *), void *arg,
              const char *file, int line, const char *what)
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
    s->file = file;
    s->line = line;
    s->what = what;
    ddp_emu_ctx_.block_dim = block;
    ddp_emu_ctx_.grid_dim = grid;
    // dynamic shared memory: exactly the bytes asked for (the sanitizer
    // build sees an access past them), 0xFF at the start of every block
    // (stale shared memory is no zero on a GPU either)
    void *dyn_mem = nullptr;
    if (smem) {
        dyn_mem = aligned_alloc(256, (smem + 255) & ~(size_t)255);
        if (!dyn_mem) {
            ddp_emu_warn("cannot allocate %zu bytes of dynamic shared memory; abort", smem);
            abort();
        }
    }
    ddp_emu_ctx_.dyn_smem = dyn_mem;
    const unsigned n = block.x * block.y * block.z;
    std::vector<Fiber *> th(n);
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                const uint3 b{bx, by, bz};
                ddp_emu_ctx_.block_idx = b;
                if (dyn_mem) memset(dyn_mem, 0xFF, smem);
                unsigned done = 0, parked = 0;
                auto resume = [&](unsigned t) {
                    fiber_resume(s, th[t]);
                    if (th[t]->state == kDone) {
                        s->free_list.push_back(th[t]);
                        th[t] = nullptr;
                        done++;
                        parked--;
                    }
                };
                // first pass: every thread runs until its first barrier,
                // warp operation or its end
                for (unsigned t = 0; t < n; t++) {
                    Fiber *f;
                    if (!s->free_list.empty()) {
                        f = s->free_list.back();
                        s->free_list.pop_back();
                    } else {
                        f = fiber_new(s);
                    }
                    f->tid = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                    th[t] = f;
                    parked++;
                    resume(t);
                }
                while (parked) {
                    // the warps whose lanes all wait at a warp operation go on
                    bool moved = false;
                    for (unsigned w0 = 0; w0 < n; w0 += 32) {
                        const unsigned L = n - w0 < 32 ? n - w0 : 32;
                        unsigned at = 0, gone = 0;
                        for (unsigned l = 0; l < L; l++) {
                            if (!th[w0 + l])
                                gone++;
                            else if (th[w0 + l]->wait == kWarpOp)
                                at++;
                        }
                        if (at == 0) continue;
                        if (gone) {
                            unsigned l = 0;
                            while (!th[w0 + l] || th[w0 + l]->wait != kWarpOp) l++;
                            char why[160];
                            snprintf(why, sizeof why, "divergent %s: %u lanes returned while %u "
                                     "wait at it", th[w0 + l]->op_name, gone, at);
                            warp_abort(s, b, w0 / 32, why);
                        }
                        if (at < L) continue; // the others are at __syncthreads: checked below
                        warp_results(s, &th[w0], L, b, w0 / 32);
                        for (unsigned l = 0; l < L; l++) resume(w0 + l);
                        moved = true;
                    }
                    if (moved || !parked) continue;
                    // no warp can go on: every live thread must be at __syncthreads
                    for (unsigned t = 0; t < n; t++)
                        if (th[t] && th[t]->wait == kWarpOp) {
                            char why[200];
                            snprintf(why, sizeof why, "divergent %s: thread %u waits at it while "
                                     "other lanes of its warp wait at __syncthreads",
                                     th[t]->op_name, t);
                            warp_abort(s, b, t / 32, why);
                        }
                    if (done) divergent(file, line, what, b, done, parked);
                    for (unsigned t = 0; t < n; t++)
                        if (th[t]) resume(t);
                }
            }
    free(dyn_mem);
    s->run = nullptr;
    s->arg = nullptr;
    ddp_emu_ctx_ = saved;
}

} // namespace

extern "C" void ddp_emu_launch_(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                void (*run)(void *), void (*destroy)(void *), void *arg,
                                const char *file, int line, const char *what)
{
    // the declared cost goes with this launch, whether or not it runs
    std::function<void()> op =
        device_op(what, file, line, [=]() { run_grid(grid, block, smem, run, arg, file, line, what); });
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
    // dynamic shared memory beyond the 48 KiB a kernel gets without
    // cudaFuncSetAttribute (which the emulation does not offer)
    if (e == cudaSuccess && smem > DDP_EMU_DYN_SMEM_MAX) e = cudaErrorInvalidValue;
    if (e == cudaSuccess && inject) e = cudaErrorLaunchFailure;
    if (e != cudaSuccess) {
        destroy(arg);
        fail(e);
        return;
    }
    Sched *s = sched_get();
    if (s->run) {
        ddp_emu_warn("kernel launched from inside a kernel at %s:%d (%s); abort", file, line, what);
        abort();
    }
    submit(stream, [=]() {
        op();
        destroy(arg);
    });
}

extern "C" unsigned long long ddp_emu_launch_count(void)
{
    std::lock_guard<std::mutex> lock(g_mu);
    return g_launches;
}
