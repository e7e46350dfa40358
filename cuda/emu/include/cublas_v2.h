/* cublas_v2.h -- the CPU emulation's cuBLAS (to be written). */
#ifndef DDP_EMU_CUBLAS_V2_H
#define DDP_EMU_CUBLAS_V2_H
#include "cuda_runtime.h"
typedef int cublasStatus_t;
#define CUBLAS_STATUS_SUCCESS 0
typedef struct ddp_emu_blas *cublasHandle_t;
const char *cublasGetStatusString(cublasStatus_t s);
#endif
