// blas.cu -- the table of blas.h: cuBLAS's entry points from dlopen of
// libcublas.so.<CUDA major> (DDP_CUBLAS_SONAME, from configure) at the first
// ddp_cuda_init, cuBLASLt's from libcublasLt.so.<CUDA major>
// (DDP_CUBLASLT_SONAME) when it loads, or the emulated functions on the CPU
// emulation.
#define DDP_BLAS_DEFINE 1
#include "blas.h"
#include "ddp_cuda.h"

#ifdef DDP_CUDA_EMU

ddp_blas_api ddp_blas_ = {&cublasCreate,
                          &cublasDestroy,
                          &cublasSetStream,
                          &cublasSetMathMode,
                          &cublasSgemm,
                          cublasGemmEx,
                          &cublasSgemmStridedBatched,
                          cublasGemmStridedBatchedEx,
                          &cublasGetStatusString,
                          &cublasLtCreate,
                          &cublasLtDestroy,
                          &cublasLtMatmulDescCreate,
                          &cublasLtMatmulDescDestroy,
                          &cublasLtMatmulDescSetAttribute,
                          &cublasLtMatrixLayoutCreate,
                          &cublasLtMatrixLayoutDestroy,
                          &cublasLtMatmulPreferenceCreate,
                          &cublasLtMatmulPreferenceDestroy,
                          &cublasLtMatmulPreferenceSetAttribute,
                          &cublasLtMatmulAlgoGetHeuristic,
                          &cublasLtMatmul};

int ddp_blas_load_(char *why, size_t n)
{
    (void)why, (void)n;
    return 0;
}

#else

#include <dlfcn.h>
#include <stdio.h>

#include "ddp_build.h"

ddp_blas_api ddp_blas_;

const char *ddp_find_syms_(void *lib, const ddp_sym *syms, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!(*syms[i].slot = dlsym(lib, syms[i].name))) return syms[i].name;
    return nullptr;
}

int ddp_blas_load_(char *why, size_t n)
{
    static void *lib = nullptr;
    if (lib) return 0;
    // the soname the build was made with, then the unversioned name
    const char *names[] = {DDP_CUBLAS_SONAME, "libcublas.so"};
    char first[512] = "";
    void *h = nullptr;
    for (const char *name : names) {
        if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
        const char *e = dlerror();
        if (!first[0]) snprintf(first, sizeof first, "%s", e ? e : name);
    }
    if (!h) {
        snprintf(why, n,
                 "cannot load cuBLAS (%s); put the CUDA toolkit's lib64 on LD_LIBRARY_PATH "
                 "(module load cuda) or run with --device cpu",
                 first);
        return -1;
    }
    ddp_blas_api t = {};
    const ddp_sym syms[] = {{"cublasCreate_v2", (void **)&t.create},
                            {"cublasDestroy_v2", (void **)&t.destroy},
                            {"cublasSetStream_v2", (void **)&t.set_stream},
                            {"cublasSetMathMode", (void **)&t.set_math_mode},
                            {"cublasSgemm_v2", (void **)&t.sgemm},
                            {"cublasGemmEx", (void **)&t.gemm_ex},
                            {"cublasSgemmStridedBatched", (void **)&t.sgemm_strided_batched},
                            {"cublasGemmStridedBatchedEx", (void **)&t.gemm_strided_batched_ex},
                            {"cublasGetStatusString", (void **)&t.status_string}};
    if (const char *missing = ddp_find_syms_(h, syms, sizeof syms / sizeof *syms)) {
        snprintf(why, n, "the cuBLAS loaded has no %s: not the %s the build was made with", missing,
                 DDP_CUBLAS_SONAME);
        dlclose(h);
        return -1;
    }
    // cuBLASLt: optional (its entries stay NULL when it or a symbol is missing)
    if (void *lt = dlopen(DDP_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL)) {
        const ddp_sym lsyms[] = {{"cublasLtCreate", (void **)&t.lt_create},
                                 {"cublasLtDestroy", (void **)&t.lt_destroy},
                                 {"cublasLtMatmulDescCreate", (void **)&t.lt_desc_create},
                                 {"cublasLtMatmulDescDestroy", (void **)&t.lt_desc_destroy},
                                 {"cublasLtMatmulDescSetAttribute", (void **)&t.lt_desc_set},
                                 {"cublasLtMatrixLayoutCreate", (void **)&t.lt_layout_create},
                                 {"cublasLtMatrixLayoutDestroy", (void **)&t.lt_layout_destroy},
                                 {"cublasLtMatmulPreferenceCreate", (void **)&t.lt_pref_create},
                                 {"cublasLtMatmulPreferenceDestroy", (void **)&t.lt_pref_destroy},
                                 {"cublasLtMatmulPreferenceSetAttribute", (void **)&t.lt_pref_set},
                                 {"cublasLtMatmulAlgoGetHeuristic", (void **)&t.lt_heuristic},
                                 {"cublasLtMatmul", (void **)&t.lt_matmul}};
        if (ddp_find_syms_(lt, lsyms, sizeof lsyms / sizeof *lsyms)) {
            for (const ddp_sym &s : lsyms) *s.slot = nullptr;
            dlclose(lt);
        }
    }
    ddp_blas_ = t;
    lib = h;
    return 0;
}

#endif

extern "C" int ddp_cuda_load_blas(char *why, size_t n)
{
    return ddp_blas_load_(why, n);
}
