// emu.h -- the CPU emulation of the CUDA runtime, cuBLAS and NCCL (to be written).
#ifndef DDP_EMU_H
#define DDP_EMU_H
#endif
