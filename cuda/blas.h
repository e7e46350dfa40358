// blas.h -- cuBLAS as the backend calls it: through a table of the nine
// entry points it uses, filled by ddp_blas_load_ (blas.cu) when a process
// binds a GPU (ddp_cuda_init), with dlopen of libcublas.so.<CUDA major>.
// Linking cuBLAS into ddptrain would load it, and cuBLASLt behind it, into
// every process, GPU or not: 25,000 page faults of relocations, about 0.1 s
// of system time a process, for nothing on --device cpu.  On the CPU
// emulation the table holds the emulated functions from the start.
//
// cuBLASLt (libcublasLt.so.<CUDA major>, which cuBLAS loads anyway) fills
// the table's lt_* entries when it can be loaded; a process without them
// runs the GEMMs and their epilogues as separate passes (linear.cu).
//
// After this header, the cuBLAS names the backend calls (cublasCreate,
// cublasSgemm, cublasLtMatmul, ...) are macros for the table's entries, so
// the calls read as cuBLAS's and DDP_CUBLAS still names them in its
// messages.
#ifndef DDP_CUDA_BLAS_H
#define DDP_CUDA_BLAS_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <stddef.h>

#ifdef DDP_CUDA_EMU
#define DDP_BLAS_REAL_(name) name
#else
#define DDP_BLAS_REAL_(name) name##_v2
#endif

struct ddp_blas_api {
    decltype(&DDP_BLAS_REAL_(cublasCreate)) create;
    decltype(&DDP_BLAS_REAL_(cublasDestroy)) destroy;
    decltype(&DDP_BLAS_REAL_(cublasSetStream)) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&DDP_BLAS_REAL_(cublasSgemm)) sgemm;
    // the C entry (C++ also sees an inline overload taking a cudaDataType)
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
    cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                              int, int, int, const void *, const void *,
                                              cudaDataType, int, long long, const void *,
                                              cudaDataType, int, long long, const void *, void *,
                                              cudaDataType, int, long long, int,
                                              cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&cublasGetStatusString) status_string;
    // cuBLASLt: all NULL when it was not loaded
    decltype(&cublasLtCreate) lt_create;
    decltype(&cublasLtDestroy) lt_destroy;
    decltype(&cublasLtMatmulDescCreate) lt_desc_create;
    decltype(&cublasLtMatmulDescDestroy) lt_desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) lt_desc_set;
    decltype(&cublasLtMatrixLayoutCreate) lt_layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) lt_layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) lt_pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) lt_pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) lt_pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) lt_heuristic;
    decltype(&cublasLtMatmul) lt_matmul;
};
extern ddp_blas_api ddp_blas_;

// An entry point to find in a dlopen'ed library, and where its address goes.
struct ddp_sym {
    const char *name;
    void **slot;
};
// Fills every slot from lib: NULL, or the name of the first one lib lacks
// (blas.cu; builds with CUDA only).  dnn.cu uses it for cuDNN.
const char *ddp_find_syms_(void *lib, const ddp_sym *syms, size_t count);

// Fills ddp_blas_ (once; a no-op on the emulation): 0, or -1 with why in
// why[n] (the library or a symbol not found, and what to do); the caller
// records it (runtime.cu, ddp_cuda_init).
int ddp_blas_load_(char *why, size_t n);

#ifndef DDP_BLAS_DEFINE
#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#undef cublasSgemm
#define cublasCreate ddp_blas_.create
#define cublasDestroy ddp_blas_.destroy
#define cublasSetStream ddp_blas_.set_stream
#define cublasSetMathMode ddp_blas_.set_math_mode
#define cublasSgemm ddp_blas_.sgemm
#define cublasGemmEx ddp_blas_.gemm_ex
#define cublasSgemmStridedBatched ddp_blas_.sgemm_strided_batched
#define cublasGemmStridedBatchedEx ddp_blas_.gemm_strided_batched_ex
#define cublasGetStatusString ddp_blas_.status_string
#define cublasLtCreate ddp_blas_.lt_create
#define cublasLtDestroy ddp_blas_.lt_destroy
#define cublasLtMatmulDescCreate ddp_blas_.lt_desc_create
#define cublasLtMatmulDescDestroy ddp_blas_.lt_desc_destroy
#define cublasLtMatmulDescSetAttribute ddp_blas_.lt_desc_set
#define cublasLtMatrixLayoutCreate ddp_blas_.lt_layout_create
#define cublasLtMatrixLayoutDestroy ddp_blas_.lt_layout_destroy
#define cublasLtMatmulPreferenceCreate ddp_blas_.lt_pref_create
#define cublasLtMatmulPreferenceDestroy ddp_blas_.lt_pref_destroy
#define cublasLtMatmulPreferenceSetAttribute ddp_blas_.lt_pref_set
#define cublasLtMatmulAlgoGetHeuristic ddp_blas_.lt_heuristic
#define cublasLtMatmul ddp_blas_.lt_matmul
#endif

#endif
