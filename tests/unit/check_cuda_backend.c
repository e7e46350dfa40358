/* check_cuda_backend.c -- the "cuda" compute backend's host logic
 * (compute_cuda.c) on the CPU emulation, with its fault injection
 * (tests/emu/include/cuda_runtime.h, DDP_EMU_FAIL): init with no GPU
 * visible, the device of a local rank (local_rank modulo the GPUs), the
 * start-up description and PCI id, and a failed launcher's sticky status
 * and message.  The status sticks for the whole process, so the two kinds
 * are two programs: check_cuda_backend (DDP_ERR_DEVICE from an injected
 * cuBLAS failure, then an allocation failure that must not replace it) and
 * check_cuda_backend_nomem (-DCHECK_NOMEM: DDP_ERR_NOMEM from an injected
 * cudaMalloc failure, and mem_info's free and total memory of an emulated
 * GPU of DDP_EMU_GPU_MEM_MB). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute_cuda.h"
#include "ddp_cuda.h"
#include "tests.h"

void ddp_emu_reload_env(void); /* the emulation: re-read its environment */

static void *dev_alloc_(size_t bytes)
{
    void *p = compute_cuda_ops.alloc(bytes);
    ck_assert_msg(p != NULL, "alloc: %s", ddp_error_message());
    return p;
}

#ifndef CHECK_NOMEM
START_TEST(no_gpu_then_rank_device_then_sticky_device_error)
{
    const compute_ops_t *C = &compute_cuda_ops;
    char describe[256];
    /* no GPU visible: DDP_ERR_DEVICE saying what to do */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ddp_emu_reload_env();
    ck_assert_int_eq(ddp_cuda_device_count(), 0);
    ck_assert_int_eq(C->init(0, 1, describe, sizeof describe), DDP_ERR_DEVICE);
    const char *msg = ddp_error_message();
    ck_assert_msg(strstr(msg, "no GPU visible") && strstr(msg, "CUDA_VISIBLE_DEVICES") &&
                      strstr(msg, "nvidia-smi") && strstr(msg, "--device cpu"),
                  "%s", msg);
    ddp_clear_error();
    /* two GPUs, local rank 3 of 4: GPU 1 (no refusal of local_size > count) */
    unsetenv("CUDA_VISIBLE_DEVICES");
    setenv("DDP_EMU_GPUS", "2", 1);
    setenv("DDP_EMU_FAIL", "cublasLtMatmul:1,cudaMalloc:5", 1);
    ddp_emu_reload_env();
    ck_assert_int_eq(C->init(3, 4, describe, sizeof describe), DDP_OK);
    ck_assert_int_eq(ddp_cuda_bound_device(), 1);
    ck_assert_str_eq(C->device_id(), "0000:11:00.0");
    ck_assert_msg(strncmp(describe, "cuda: GPU 1 ddptrain CUDA emulation (0000:11:00.0, ", 51) ==
                          0 &&
                      strstr(describe, " GiB), cuBLASLt epilogues, cuDNN convolutions"),
                  "%s", describe);
    ck_assert_int_eq(C->mem_kind, DDP_MEM_DEVICE);
    ck_assert_int_eq(C->check(), DDP_OK);
    /* a launcher fails (the first cublasLtMatmul, a dense layer's forward):
     * DDP_ERR_DEVICE, the call named */
    float *x = dev_alloc_(6 * sizeof *x), *w = dev_alloc_(6 * sizeof *w);
    float *y = dev_alloc_(4 * sizeof *y);
    C->linear_fwd(2, 3, 2, x, w, NULL, y, 0);
    ck_assert_int_eq(C->check(), DDP_ERR_DEVICE);
    char first[512];
    snprintf(first, sizeof first, "%s", ddp_error_message());
    ck_assert_msg(strncmp(first, "cuda: cublasLtMatmul: ", 22) == 0 && strstr(first, "(linear.cu:"),
                  "%s", first);
    /* a later failure (the 5th cudaMalloc) does not replace it */
    void *ok = dev_alloc_(16);
    ck_assert_ptr_null(C->alloc(16));
    ck_assert_int_eq(C->check(), DDP_ERR_DEVICE);
    ck_assert_str_eq(ddp_error_message(), first);
    C->free(ok), C->free(x), C->free(w), C->free(y);
}
END_TEST
#else
START_TEST(alloc_failure_is_nomem)
{
    const compute_ops_t *C = &compute_cuda_ops;
    char describe[256];
    setenv("DDP_EMU_FAIL", "cudaMalloc:1", 1);
    setenv("DDP_EMU_GPU_MEM_MB", "64", 1);
    ddp_emu_reload_env();
    ck_assert_int_eq(C->init(0, 1, describe, sizeof describe), DDP_OK);
    /* the device's memory: its size, and free less what is allocated */
    size_t free0 = 0, total = 0, free1 = 0, total1 = 0;
    ck_assert_int_eq(C->mem_info(&free0, &total), DDP_OK);
    ck_assert_uint_eq(total, (size_t)64 << 20);
    ck_assert_uint_le(free0, total);
    ck_assert_str_eq(C->device_id(), "0000:10:00.0");
    ck_assert_ptr_null(C->alloc(1024));
    ck_assert_int_eq(C->check(), DDP_ERR_NOMEM);
    const char *msg = ddp_error_message();
    ck_assert_msg(strncmp(msg, "cuda: cudaMalloc: ", 18) == 0 && strstr(msg, "(runtime.cu:"), "%s",
                  msg);
    /* the next allocation works; the status stays */
    void *p = dev_alloc_(1024);
    ck_assert_int_eq(C->check(), DDP_ERR_NOMEM);
    ck_assert_int_eq(C->mem_info(&free1, &total1), DDP_OK);
    ck_assert_uint_eq(total1, total);
    ck_assert_uint_eq(free1, free0 - 1024);
    C->free(p);
}
END_TEST
#endif

Suite *test_suite(void)
{
    Suite *s = suite_create("cuda_backend");
    TCase *t = tcase_create("emulation");
#ifndef CHECK_NOMEM
    tcase_add_test(t, no_gpu_then_rank_device_then_sticky_device_error);
#else
    tcase_add_test(t, alloc_failure_is_nomem);
#endif
    suite_add_tcase(s, t);
    return s;
}
