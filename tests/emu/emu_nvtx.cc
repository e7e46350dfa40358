// emu_nvtx.cc -- the CPU emulation of NVTX's ranges (include/nvtx3/
// nvToolsExt.h): every range started and ended is counted by its name, and
// DDP_EMU_NVTX_REPORT=1 prints the counts at exit, so a test can check that
// the ranges a profiler would show are there and closed.
#include "emu_internal.h"

#include <nvtx3/nvToolsExt.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <string>

namespace
{

struct Counts {
    unsigned long long started = 0, ended = 0;
};

std::mutex g_nvtx_mu;
std::map<std::string, Counts> g_ranges;             // by name (g_nvtx_mu)
std::map<nvtxRangeId_t, std::string> g_open;         // open ranges by id
nvtxRangeId_t g_next = 1;

// Without the lock: a thread that exits holding it must not hang the exit.
void report()
{
    for (const auto &r : g_ranges)
        fprintf(stderr, "ddp_emu: nvtx range \"%s\" started %llu ended %llu (pid %ld)\n",
                r.first.c_str(), r.second.started, r.second.ended, (long)getpid());
}

} // namespace

extern "C" nvtxRangeId_t nvtxRangeStartA(const char *message)
{
    std::lock_guard<std::mutex> lock(g_nvtx_mu);
    static bool registered = false;
    if (!registered) {
        registered = true;
        if (emu::env_long("DDP_EMU_NVTX_REPORT", 0, 0, 1)) atexit(report);
    }
    std::string name = message ? message : "";
    g_ranges[name].started++;
    g_open[g_next] = name;
    return g_next++;
}

extern "C" void nvtxRangeEnd(nvtxRangeId_t id)
{
    std::lock_guard<std::mutex> lock(g_nvtx_mu);
    auto it = g_open.find(id);
    if (it == g_open.end()) {
        ddp_emu_warn("nvtxRangeEnd(%llu): no such range is open", (unsigned long long)id);
        return;
    }
    g_ranges[it->second].ended++;
    g_open.erase(it);
}
