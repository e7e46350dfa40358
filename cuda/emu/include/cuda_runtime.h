/* cuda_runtime.h -- the CPU emulation's CUDA runtime (to be written). */
#ifndef DDP_EMU_CUDA_RUNTIME_H
#define DDP_EMU_CUDA_RUNTIME_H
typedef int cudaError_t;
#define cudaSuccess 0
typedef struct ddp_emu_stream *cudaStream_t;
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
#endif
