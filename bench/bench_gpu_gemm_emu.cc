// bench_gpu_gemm_emu.cc -- the emulation build of bench_gpu_gemm.cu (see bench/Makefile.am)
#include "bench_gpu_gemm.cu"
