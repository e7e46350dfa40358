/* bench_gpu_gemm.h -- cuBLAS alone on the GEMMs of an MLP training step
 * (bench_gpu_gemm.cu), the reference bench_gpu measures the step against.
 * Every function returns 0, or -1 with bench_gpu_gemm_error() saying which
 * call failed and why. */
#ifndef DDP_BENCH_GPU_GEMM_H
#define DDP_BENCH_GPU_GEMM_H

#ifdef __cplusplus
extern "C" {
#endif

/* The cuBLAS handle and operands large enough for any layer of at most
 * max_dim inputs and outputs at this batch (random values in (-1, 1),
 * finite read as bf16 or as fp32). */
int bench_gpu_gemm_init(int max_dim, int batch);
void bench_gpu_gemm_free(void);
/* `steps` times the GEMMs of one training step of the MLP with layer
 * widths dims[0..layers]: forward and weight gradient of every layer, input
 * gradient of layers 2..L (the first layer's is not needed), fp32
 * (cublasSgemm, the default math mode) or bf16 inputs with fp32
 * accumulation and output (cublasGemmEx); returns when they are done. */
int bench_gpu_gemm_steps(int layers, const int *dims, int batch, int bf16, int steps);
const char *bench_gpu_gemm_error(void);

#ifdef __cplusplus
}
#endif

#endif
