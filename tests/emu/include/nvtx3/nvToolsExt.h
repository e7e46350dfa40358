/* nvtx3/nvToolsExt.h -- the CPU emulation of NVTX's ranges (tests/emu/
 * emu_nvtx.cc): nvtxRangeStartA names a range and returns its id,
 * nvtxRangeEnd closes it (ranges need not nest; any thread may end one).
 * The emulation counts them per name; with DDP_EMU_NVTX_REPORT=1 it prints
 * at exit, on stderr, one line per name:
 *   ddp_emu: nvtx range "NAME" started S ended E (pid P)
 * and ending an id that is not open prints a line naming it.  C and C++. */
#ifndef DDP_EMU_NVTOOLSEXT_H
#define DDP_EMU_NVTOOLSEXT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t nvtxRangeId_t;
nvtxRangeId_t nvtxRangeStartA(const char *message);
void nvtxRangeEnd(nvtxRangeId_t id);

#ifdef __cplusplus
}
#endif

#endif
