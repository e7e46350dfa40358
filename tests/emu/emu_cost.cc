// emu_cost.cc -- what a device operation costs, in the CPU emulation of the
// CUDA runtime and cuBLAS: the cost check and the dry run.
//
// Every kernel launch and cuBLAS call of the backend declares the bytes of
// device memory it reads and writes (ddp_emu_declare_cost, called by the
// backend's DDP_COST before the launch); the H200 step model of bench_gpu
// adds those up.  DDP_EMU_COST_CHECK=1 holds each declaration against the
// operation's real accesses: while a kernel's grid or a cuBLAS call runs,
// every device allocation is mapped with no access, so the first touch of
// each page faults; the handler notes the page as read or written (the
// fault's error code says which; a page read, then written, is both) and
// opens it.  A declaration that names no access, or that differs from the
// pages touched by more than the pages' rounding (two partial pages per
// run of touched pages) and 3%, aborts the process with the launch site, as
// the emulation's other misuse checks do.  Device memory is then whole
// pages from mmap; x86-64 only (where the fault says read or write).
//
// DDP_EMU_DRY=1 checks every launch and call as usual but runs none of them
// (nor a fill of or a copy into device memory, emu_memory.cc): device
// memory is zero pages, never written, so the model of a step at full size
// costs neither compute nor memory.
#include "emu_internal.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

using namespace emu;

namespace
{

constexpr size_t kPage = 4096;

struct Declared {
    bool set = false;
    double read = 0, written = 0;
};

thread_local Declared t_declared;

// The allocations open to the operation being counted: sorted by base,
// read by the fault handler (no locks, no allocation there).
struct Region {
    uintptr_t base;
    size_t pages;
    uint8_t *state; // per page: 1 read, 2 written (bits)
};
Region *g_regions = nullptr;
size_t g_nregions = 0;
std::mutex g_count_mu; // one counted operation at a time
struct sigaction g_old_segv;
bool g_handler_set = false;

void on_fault(int sig, siginfo_t *si, void *ctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    size_t lo = 0, hi = g_nregions;
    while (lo < hi) { // the last region with base <= a
        size_t mid = (lo + hi) / 2;
        if (g_regions[mid].base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0) {
        Region &r = g_regions[lo - 1];
        size_t page = (a - r.base) / kPage;
        if (page < r.pages) {
#if defined(__x86_64__)
            bool write = (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
            bool write = true;
#endif
            r.state[page] |= write ? 2 : 1;
            void *p = (void *)(r.base + page * kPage);
            mprotect(p, kPage, write ? PROT_READ | PROT_WRITE : PROT_READ);
            return;
        }
    }
    // not a counted page: what the fault would have done without us
    sigaction(SIGSEGV, &g_old_segv, nullptr);
    raise(sig);
}

struct Counted {
    double read = 0, written = 0;
    size_t runs_read = 0, runs_written = 0;
};

// Bytes in pages with `bit`, and the number of runs of such pages.
void tally(const Region &r, uint8_t bit, double *bytes, size_t *runs)
{
    bool in = false;
    for (size_t p = 0; p < r.pages; p++) {
        bool on = (r.state[p] & bit) != 0;
        if (on) *bytes += kPage;
        if (on && !in) ++*runs;
        in = on;
    }
}

// declared within what the touched pages allow?
bool agrees(double declared, double counted, size_t runs)
{
    double lo = counted - 2.0 * kPage * runs - 0.03 * counted - 256;
    double hi = counted * 1.03 + 256;
    return declared >= lo && declared <= hi;
}

[[noreturn]] void cost_abort(const char *what, const char *file, int line, const char *why)
{
    if (file && *file)
        ddp_emu_warn("cost check: %s at %s:%d: %s; abort", what, file, line, why);
    else
        ddp_emu_warn("cost check: %s: %s; abort", what, why);
    abort();
}

// Run `run` with the device allocations closed; the bytes it touched.
Counted count_run(const std::function<void()> &run)
{
    std::lock_guard<std::mutex> lock(g_count_mu);
    std::vector<Region> regions;
    std::vector<std::vector<uint8_t>> states;
    {
        std::lock_guard<std::mutex> glock(g_mu);
        dev_pages_locked([&](void *base, size_t bytes) {
            size_t pages = (bytes + kPage - 1) / kPage;
            states.emplace_back(pages, 0);
            regions.push_back(Region{(uintptr_t)base, pages, nullptr});
        });
    }
    for (size_t i = 0; i < regions.size(); i++) regions[i].state = states[i].data();
    std::sort(regions.begin(), regions.end(),
              [](const Region &x, const Region &y) { return x.base < y.base; });
    if (!g_handler_set) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_old_segv);
        g_handler_set = true;
    }
    g_regions = regions.data();
    g_nregions = regions.size();
    for (const Region &r : regions) mprotect((void *)r.base, r.pages * kPage, PROT_NONE);
    run();
    for (const Region &r : regions)
        mprotect((void *)r.base, r.pages * kPage, PROT_READ | PROT_WRITE);
    g_regions = nullptr;
    g_nregions = 0;
    Counted c;
    for (const Region &r : regions) {
        tally(r, 1, &c.read, &c.runs_read);
        tally(r, 2, &c.written, &c.runs_written);
    }
    return c;
}

} // namespace

namespace emu
{

bool cost_check_on()
{
    std::lock_guard<std::mutex> lock(g_mu);
    return cfg_locked().cost_check;
}

std::function<void()> device_op(const char *what, const char *file, int line,
                                std::function<void()> run)
{
    Declared d = t_declared;
    t_declared = Declared{};
    bool check, dry;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        check = cfg_locked().cost_check;
        dry = cfg_locked().dry;
    }
    if (dry) return [] {};
    if (!check) return run;
    if (!d.set) cost_abort(what, file, line, "no cost declared (DDP_COST before the launch)");
    std::string name = what, where = file ? file : "";
    return [=]() {
        Counted c = count_run(run);
        if (agrees(d.read, c.read, c.runs_read) && agrees(d.written, c.written, c.runs_written))
            return;
        char why[320];
        snprintf(why, sizeof why,
                 "declared %.0f bytes read and %.0f written; it touched %.0f read in %zu runs "
                 "of pages and %.0f written in %zu",
                 d.read, d.written, c.read, c.runs_read, c.written, c.runs_written);
        cost_abort(name.c_str(), where.c_str(), line, why);
    };
}

} // namespace emu

extern "C" void ddp_emu_declare_cost(double bytes_read, double bytes_written)
{
    t_declared = Declared{true, bytes_read, bytes_written};
}

namespace emu
{

void *dev_map(size_t size, bool fill)
{
    size_t bytes = (size + kPage - 1) / kPage * kPage;
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (fill) memset(p, 0xff, size);
    return p;
}

void dev_unmap(void *p, size_t size)
{
    munmap(p, (size + kPage - 1) / kPage * kPage);
}

} // namespace emu
