/* emu.h -- what the parts of the CPU emulation share (emu_*.cc for the CUDA
 * runtime and cuBLAS, nccl_emu.c for NCCL).  C and C++; not for the backend
 * (which sees only the CUDA, cuBLAS and NCCL headers in include/).  What
 * only the C++ files share is in emu_internal.h. */
#ifndef DDP_EMU_H
#define DDP_EMU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when [p, p + bytes) lies inside one live cudaMalloc allocation (bytes 0:
 * p itself inside one), else 0. */
int ddp_emu_device_range(const void *p, size_t bytes);
/* The current device's PCI bus id as NCCL prints it (the hex digits of
 * "0000:10:00.0" as one number: 0x10000 for bus 0x10); -1 when there is no
 * device. */
long ddp_emu_current_busid(void);
/* Runs everything queued on `stream` (a cudaStream_t; DDP_EMU_STREAMS), as
 * the host waiting for it would: the emulated NCCL reading its buffers,
 * which on a GPU its kernels do in the stream (no host wait, not counted by
 * DDP_EMU_DRAIN_REPORT). */
void ddp_emu_stream_sync(void *stream);
/* 1 when `stream` is a live stream or the default one; runs nothing. */
int ddp_emu_stream_live(void *stream);
/* Copies `bytes` from `src` to `dst` as an operation of `stream`: now, or
 * queued behind the stream's work; `src` (from malloc) is freed after. */
void ddp_emu_stream_deliver(void *stream, void *dst, void *src, size_t bytes);
/* Counts a call of `name` against DDP_EMU_FAIL; 1 when this call must fail. */
int ddp_emu_inject(const char *name);
/* The algorithm (cudnn.h's enum value) of the last cuDNN convolution queued
 * for pass 0 forward, 1 backward data, 2 backward filter; -1 before any. */
int ddp_emu_cudnn_last_algo(int pass);
/* One line "ddptrain CUDA emulation: <what>" on stderr. */
void ddp_emu_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif

#endif
