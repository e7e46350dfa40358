/* check_nccl_emu.c -- the CPU emulation of NCCL over MPI (tests/emu/nccl_emu.c),
 * on 2 and 3 ranks (check_nccl_emu_np2, _np3; on 3 the order of the
 * additions shows in the float sums): bootstrap by MPI_Bcast of the unique id,
 * all-reduce sum and average for float, double and bf16 (in place and not)
 * bit-identical on every rank and equal to the rank-order sums, broadcast,
 * all-gather, the duplicate-GPU refusal, the injected asynchronous error and
 * the refusal of host memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "tests.h"

static int rank_, size_;

/* An emulated machine of `gpus` GPUs, bound to `device`. */
static void emu_machine(int gpus, int device)
{
    char n[16];
    snprintf(n, sizeof n, "%d", gpus);
    setenv("DDP_EMU_GPUS", n, 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("DDP_EMU_NCCL_ASYNC_ERROR");
    unsetenv("DDP_EMU_HOSTNAME");
    ddp_emu_reload_env();
    ck_assert_int_eq(cudaSetDevice(device), cudaSuccess);
}

/* Rank 0 makes the id, MPI_Bcast shares it, every rank joins. */
static ncclResult_t comm_init(ncclComm_t *comm)
{
    ncclUniqueId id;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (rank_ == 0) ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    return ncclCommInitRank(comm, size_, id, rank_);
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(cudaMalloc(&p, bytes), cudaSuccess);
    return p;
}

/* The value rank r contributes at i: not exactly representable, so the
 * order of the additions shows in the last bits. */
static double value(int r, size_t i)
{
    return 0.1 * (double)(i % 97 + 1) * (r + 1.3) + 1e-3 * (double)r;
}

/* Every rank holds the same `bytes` at p (host copy)? */
static void assert_same_everywhere(const void *host, size_t bytes)
{
    char *all = malloc(bytes * (size_t)size_);
    MPI_Allgather(host, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 1; r < size_; r++)
        ck_assert_msg(memcmp(all, all + (size_t)r * bytes, bytes) == 0,
                      "rank %d's result differs from rank 0's", r);
    free(all);
}

START_TEST(test_init_and_queries)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    int n = -1, r = -1, d = -1, v = 0;
    ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
    ck_assert_int_eq(n, size_);
    ck_assert_int_eq(ncclCommUserRank(comm, &r), ncclSuccess);
    ck_assert_int_eq(r, rank_);
    ck_assert_int_eq(ncclCommCuDevice(comm, &d), ncclSuccess);
    ck_assert_int_eq(d, rank_);
    ncclResult_t async = ncclInternalError;
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    ck_assert_int_eq(async, ncclSuccess);
    ck_assert_int_eq(ncclGetVersion(&v), ncclSuccess);
    ck_assert_int_eq(v, NCCL_VERSION_CODE);
    ck_assert_int_ge(v, NCCL_VERSION(2, 18, 0));
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_allreduce_float_double)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    cudaStream_t stream;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const size_t n = 1000003; /* over one 4 MiB chunk of floats */
    float *hf = malloc(n * sizeof *hf), *want = malloc(n * sizeof *want);
    double *hd = malloc(n * sizeof *hd), *wantd = malloc(n * sizeof *wantd);
    for (size_t i = 0; i < n; i++) {
        hf[i] = (float)value(rank_, i);
        hd[i] = value(rank_, i);
        float s = 0;
        double sd = 0;
        for (int r = 0; r < size_; r++) {
            s = r == 0 ? (float)value(r, i) : s + (float)value(r, i);
            sd = r == 0 ? value(r, i) : sd + value(r, i);
        }
        want[i] = s;
        wantd[i] = sd;
    }
    float *send = dev_alloc(n * sizeof(float)), *recv = dev_alloc(n * sizeof(float));
    double *dd = dev_alloc(n * sizeof(double));
    cudaMemcpy(send, hf, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dd, hd, n * sizeof(double), cudaMemcpyHostToDevice);

    /* float sum, out of place */
    ck_assert_int_eq(ncclAllReduce(send, recv, n, ncclFloat32, ncclSum, comm, stream), ncclSuccess);
    cudaMemcpy(hf, recv, n * sizeof(float), cudaMemcpyDeviceToHost);
    ck_assert_msg(memcmp(hf, want, n * sizeof(float)) == 0, "float sum differs from rank order");
    assert_same_everywhere(hf, n * sizeof(float));
    /* float average, in place */
    ck_assert_int_eq(ncclAllReduce(send, send, n, ncclFloat, ncclAvg, comm, stream), ncclSuccess);
    cudaMemcpy(hf, send, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(hf[i] == want[i] / (float)size_, "avg[%zu] = %.9g, want %.9g", i, hf[i],
                      want[i] / (float)size_);
    assert_same_everywhere(hf, n * sizeof(float));
    /* double sum, in place */
    ck_assert_int_eq(ncclAllReduce(dd, dd, n, ncclDouble, ncclSum, comm, 0), ncclSuccess);
    cudaMemcpy(hd, dd, n * sizeof(double), cudaMemcpyDeviceToHost);
    ck_assert(memcmp(hd, wantd, n * sizeof(double)) == 0);
    assert_same_everywhere(hd, n * sizeof(double));
    /* max of int64 */
    int64_t hi[3] = {rank_, -rank_, 7}, *di = dev_alloc(sizeof hi);
    cudaMemcpy(di, hi, sizeof hi, cudaMemcpyHostToDevice);
    ck_assert_int_eq(ncclAllReduce(di, di, 3, ncclInt64, ncclMax, comm, stream), ncclSuccess);
    cudaMemcpy(hi, di, sizeof hi, cudaMemcpyDeviceToHost);
    ck_assert(hi[0] == size_ - 1 && hi[1] == 0 && hi[2] == 7);

    cudaFree(di);
    cudaFree(send);
    cudaFree(recv);
    cudaFree(dd);
    free(hf);
    free(want);
    free(hd);
    free(wantd);
    cudaStreamDestroy(stream);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_allreduce_bf16)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    const size_t n = 4099;
    __nv_bfloat16 *h = malloc(n * sizeof *h), *want = malloc(n * sizeof *want),
                  *wavg = malloc(n * sizeof *wavg);
    for (size_t i = 0; i < n; i++) {
        h[i] = __float2bfloat16((float)value(rank_, i));
        float s = 0;
        for (int r = 0; r < size_; r++) s += __bfloat162float(__float2bfloat16((float)value(r, i)));
        want[i] = __float2bfloat16(s); /* rounded once */
        wavg[i] = __float2bfloat16(s / (float)size_);
    }
    __nv_bfloat16 *d = dev_alloc(n * 2), *o = dev_alloc(n * 2);
    cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice);
    ck_assert_int_eq(ncclAllReduce(d, o, n, ncclBfloat16, ncclSum, comm, 0), ncclSuccess);
    ck_assert_int_eq(ncclAllReduce(d, d, n, ncclBfloat16, ncclAvg, comm, 0), ncclSuccess);
    cudaMemcpy(h, o, n * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(h[i].__x == want[i].__x, "bf16 sum[%zu] = 0x%04x, want 0x%04x", i, h[i].__x,
                      want[i].__x);
    assert_same_everywhere(h, n * 2);
    cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(h[i].__x, wavg[i].__x);
    assert_same_everywhere(h, n * 2);
    cudaFree(d);
    cudaFree(o);
    free(h);
    free(want);
    free(wavg);
    ncclCommDestroy(comm);
}
END_TEST

START_TEST(test_allreduce_fp16)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    /* 1 + (size - 1) 2^-11: a tie on 2 ranks (to even: 1), 1 + 2^-10 on 3
     * (rounding after every addition would give 1 again); subnormals;
     * overflow to infinity; negatives */
    uint16_t h[4] = {rank_ == 0 ? 0x3c00 : 0x1000, 0x0001, 0x7bff, 0xc000};
    uint16_t want2[4] = {0x3c00, 0x0002, 0x7c00, 0xc400},
             want3[4] = {0x3c01, 0x0003, 0x7c00, 0xc600};
    uint16_t *d = dev_alloc(sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    ck_assert_int_eq(ncclAllReduce(d, d, 4, ncclHalf, ncclSum, comm, 0), ncclSuccess);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    if (size_ == 2 || size_ == 3)
        for (int i = 0; i < 4; i++)
            ck_assert_msg(h[i] == (size_ == 2 ? want2 : want3)[i], "fp16 sum[%d] = 0x%04x", i,
                          h[i]);
    assert_same_everywhere(h, sizeof h);
    cudaFree(d);
    ncclCommDestroy(comm);
}
END_TEST

START_TEST(test_broadcast_allgather)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    const size_t n = 777;
    float h[777], *src = dev_alloc(n * 4), *dst = dev_alloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = (float)(rank_ * 1000 + (int)i);
    cudaMemcpy(src, h, sizeof h, cudaMemcpyHostToDevice);
    int root = size_ - 1;
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclBroadcast(src, dst, n, ncclFloat, root, comm, 0), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    cudaMemcpy(h, dst, sizeof h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(h[i], (float)(root * 1000 + (int)i));
    /* in place from rank 0 */
    ck_assert_int_eq(ncclBcast(src, n, ncclFloat, 0, comm, 0), ncclSuccess);
    cudaMemcpy(h, src, sizeof h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(h[i], (float)i);
    ck_assert_int_eq(ncclBcast(src, n, ncclFloat, size_, comm, 0), ncclInvalidArgument);

    /* all-gather, out of place and in place */
    double mine[5], *one = dev_alloc(sizeof mine), *all = dev_alloc(sizeof mine * size_);
    double got[5 * 8];
    for (int i = 0; i < 5; i++) mine[i] = rank_ + 0.25 * i;
    cudaMemcpy(one, mine, sizeof mine, cudaMemcpyHostToDevice);
    ck_assert_int_eq(ncclAllGather(one, all, 5, ncclDouble, comm, 0), ncclSuccess);
    cudaMemcpy(got, all, sizeof mine * size_, cudaMemcpyDeviceToHost);
    for (int r = 0; r < size_; r++)
        for (int i = 0; i < 5; i++) ck_assert(got[r * 5 + i] == r + 0.25 * i);
    cudaMemset(all, 0, sizeof mine * size_);
    cudaMemcpy(all + 5 * rank_, mine, sizeof mine, cudaMemcpyHostToDevice);
    ck_assert_int_eq(ncclAllGather(all + 5 * rank_, all, 5, ncclDouble, comm, 0), ncclSuccess);
    cudaMemcpy(got, all, sizeof mine * size_, cudaMemcpyDeviceToHost);
    for (int r = 0; r < size_; r++)
        for (int i = 0; i < 5; i++) ck_assert(got[r * 5 + i] == r + 0.25 * i);
    ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage); /* none open */
    cudaFree(src);
    cudaFree(dst);
    cudaFree(one);
    cudaFree(all);
    ncclCommDestroy(comm);
}
END_TEST

START_TEST(test_duplicate_gpu)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    /* one GPU per host: both ranks on device 0 of the same host */
    emu_machine(1, 0);
    ncclComm_t comm = (ncclComm_t)&rank_;
    ck_assert_int_eq(comm_init(&comm), ncclInvalidUsage);
    ck_assert_ptr_null(comm);
    const char *why = ncclGetLastError(NULL);
    ck_assert_msg(strstr(why, "Duplicate GPU detected: rank 0 and rank 1 both on CUDA device "
                              "10000") != NULL,
                  "ncclGetLastError: %s", why);
    /* the same device index on different hosts is fine */
    char host[32];
    snprintf(host, sizeof host, "node%d", rank_);
    setenv("DDP_EMU_HOSTNAME", host, 1);
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    ncclCommDestroy(comm);
    unsetenv("DDP_EMU_HOSTNAME");
    /* two GPUs, one per rank */
    emu_machine(size_, rank_);
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    ncclCommDestroy(comm);
    /* nranks that does not match the ranks holding the id */
    ncclUniqueId id;
    if (rank_ == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ck_assert_int_eq(ncclCommInitRank(&comm, size_ + 1, id, rank_), ncclInvalidArgument);
}
END_TEST

START_TEST(test_async_error)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    setenv("DDP_EMU_NCCL_ASYNC_ERROR", "2", 1);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    float h[4] = {1, 2, 3, 4}, *d = dev_alloc(sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    ncclResult_t async;
    ck_assert_int_eq(ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comm, 0), ncclSuccess);
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    ck_assert_int_eq(async, ncclSuccess);
    /* the second collective fails asynchronously: no data moves */
    ck_assert_int_eq(ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comm, 0), ncclSuccess);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    ck_assert_float_eq(h[3], 4.0f * size_);
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    ck_assert_int_eq(async, ncclRemoteError);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "DDP_EMU_NCCL_ASYNC_ERROR"));
    ck_assert_int_eq(ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comm, 0), ncclRemoteError);
    ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
    unsetenv("DDP_EMU_NCCL_ASYNC_ERROR");
    cudaFree(d);
}
END_TEST

START_TEST(test_injected_failures)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    setenv("DDP_EMU_FAIL", "ncclCommInitRank:1,ncclAllReduce:2", 1);
    ddp_emu_reload_env();
    cudaSetDevice(rank_);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSystemError);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "DDP_EMU_FAIL"));
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    float h[2] = {1, 2}, *d = dev_alloc(sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    ck_assert_int_eq(ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, 0), ncclSuccess);
    ck_assert_int_eq(ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, 0), ncclUnhandledCudaError);
    ck_assert_int_eq(ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, 0), ncclSuccess);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    ck_assert_float_eq(h[1], 2.0f * size_ * size_); /* two reductions ran */
    unsetenv("DDP_EMU_FAIL");
    ddp_emu_reload_env();
    cudaFree(d);
    ncclCommDestroy(comm);
}
END_TEST

START_TEST(test_host_memory_refused)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emu_machine(size_, rank_);
    ncclComm_t comm;
    ck_assert_int_eq(comm_init(&comm), ncclSuccess);
    float host[16] = {0}, *d = dev_alloc(16 * sizeof(float));
    ck_assert_int_eq(ncclAllReduce(host, host, 16, ncclFloat, ncclSum, comm, 0),
                     ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "not inside one device allocation"));
    ck_assert_int_eq(ncclAllReduce(d, host, 16, ncclFloat, ncclSum, comm, 0), ncclInvalidArgument);
    /* past the end of the allocation */
    ck_assert_int_eq(ncclAllReduce(d, d, 17, ncclFloat, ncclSum, comm, 0), ncclInvalidArgument);
    ck_assert_int_eq(ncclBroadcast(host, host, 16, ncclFloat, 0, comm, 0), ncclInvalidArgument);
    ck_assert_int_eq(ncclAllGather(d, host, 8, ncclFloat, comm, 0), ncclInvalidArgument);
    /* the communicator still works afterwards */
    ck_assert_int_eq(ncclAllReduce(d, d, 16, ncclFloat, ncclSum, comm, 0), ncclSuccess);
    cudaFree(d);
    ncclCommDestroy(comm);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("nccl_emu");
    TCase *tc = tcase_create("nccl");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_init_and_queries);
    tcase_add_test(tc, test_allreduce_float_double);
    tcase_add_test(tc, test_allreduce_bf16);
    tcase_add_test(tc, test_allreduce_fp16);
    tcase_add_test(tc, test_broadcast_allgather);
    tcase_add_test(tc, test_duplicate_gpu);
    tcase_add_test(tc, test_async_error);
    tcase_add_test(tc, test_injected_failures);
    tcase_add_test(tc, test_host_memory_refused);
    suite_add_tcase(s, tc);
    return s;
}
