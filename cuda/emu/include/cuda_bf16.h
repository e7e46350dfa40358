/* cuda_bf16.h -- the CPU emulation's bfloat16 (to be written). */
