// check_emu.cc -- the CPU emulation of the CUDA runtime and cuBLAS
// (tests/emu): fibers and __syncthreads (block reductions exact, a missing
// barrier shows, a divergent barrier aborts), warp shuffles and votes
// against CUDA's rules (and divergent ones abort), dynamic shared memory
// (poisoned per block, the 48 KiB limit), launch configuration errors,
// device memory poison and tracking, devices from the environment, the
// stream queues (DDP_EMU_STREAMS lazy and lazy-first), fault injection, and
// cuBLAS against naive column-major loops (and TF32's rounding).
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "ddp_cuda_rt.h"
#include <cuda_bf16.h>
#include <cudnn.h>

extern "C" Suite *test_suite(void);
extern "C" void test_child_aborts(void (*body)(void *), void *arg, char *msg, size_t cap); // tests.h

// ---- helpers ---------------------------------------------------------------

// Back to the default emulated machine: one GPU, 16 GiB, no injection.
static void emu_defaults()
{
    unsetenv("DDP_EMU_GPUS");
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("DDP_EMU_GPU_MEM_MB");
    unsetenv("DDP_EMU_FAIL");
    ddp_emu_reload_env();
    (void)cudaGetLastError();
}

static float *dev_floats(size_t n)
{
    void *p = nullptr;
    ck_assert_int_eq(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
    return (float *)p;
}

static void upload(float *dst, const std::vector<float> &src)
{
    ck_assert_int_eq(
        cudaMemcpy(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice),
        cudaSuccess);
}

static std::vector<float> download(const float *src, size_t n)
{
    std::vector<float> out(n);
    ck_assert_int_eq(cudaMemcpy(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    return out;
}

// A deterministic pseudo-random float in [-1, 1).
static float urand(unsigned &s)
{
    s = s * 1664525u + 1013904223u;
    return (float)((s >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

// ---- kernels -----------------------------------------------------------------

// out[block] = sum of x over the block's grid-stride share: a tree in
// __shared__ memory, one barrier per level (or none, to show the race).
template <bool kBarrier> __global__ void block_sum(const float *x, float *out, int n)
{
    __shared__ float buf[1024];
    unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
    float s = 0;
    for (unsigned i = b * nt + t; i < (unsigned)n; i += nt * gridDim.x * gridDim.y) s += x[i];
    buf[t] = s;
    __syncthreads();
    for (unsigned w = nt / 2; w > 0; w /= 2) {
        if (t < w) buf[t] += buf[t + w];
        if (kBarrier) __syncthreads();
    }
    if (t == 0) out[b] = buf[0];
}

__global__ void mark(int *flag)
{
    *flag = 1;
}

__global__ void where_am_i(unsigned *out)
{
    unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    out[b * nt + t] = (threadIdx.x << 24) | (threadIdx.y << 16) | (threadIdx.z << 12) |
                      (blockIdx.x << 8) | (blockIdx.y << 4) | blockIdx.z;
}

__global__ void add_one(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

__global__ void copy_floats(const float *src, float *dst, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

// Every warp operation once per thread, results in out[t * 10 + k]: shuffle
// idx/up/down/xor with `width`, ballot, any, all, and two chained shuffles
// (a lane that goes on to its next shuffle must not change what the others
// read of the first).
__global__ void warp_ops(int *out, int width)
{
    unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int v = 1000 + (int)t;
    int *o = out + t * 10;
    o[0] = __shfl_sync(0xffffffffu, v, 5, width);
    o[1] = __shfl_up_sync(0xffffffffu, v, 3, width);
    o[2] = __shfl_down_sync(0xffffffffu, v, 3, width);
    o[3] = __shfl_xor_sync(0xffffffffu, v, 6, width);
    o[4] = (int)__ballot_sync(0xffffffffu, t % 3 == 0);
    o[5] = __any_sync(0xffffffffu, t % 32 == 7);
    o[6] = __all_sync(0xffffffffu, t % 32 != 7);
    __syncwarp();
    int a = __shfl_xor_sync(0xffffffffu, v, 1);
    o[7] = __shfl_xor_sync(0xffffffffu, a * 10, 2);
    double d = __shfl_down_sync(0xffffffffu, (double)v + 0.5, 1);
    o[8] = (int)(d * 2);
    o[9] = __all_sync(0xffffffffu, 1);
}

// out[b] = the sum of x over block b's share, by warp shuffles (a fixed
// tree) and dynamic shared memory across the warps; poison[b] = the bits
// the block's dynamic shared memory held before it wrote them.
__global__ void shfl_block_sum(const float *x, int n, float *out, unsigned *poison)
{
    DDP_DYNAMIC_SHARED(float, part);
    unsigned t = threadIdx.x, nt = blockDim.x;
    if (t == 0) memcpy(&poison[blockIdx.x], &part[nt / 32 - 1], sizeof(unsigned));
    __syncthreads();
    float s = 0;
    for (unsigned i = blockIdx.x * nt + t; i < (unsigned)n; i += nt * gridDim.x) s += x[i];
    for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
    if (t % 32 == 0) part[t / 32] = s;
    __syncthreads();
    if (t == 0) {
        float r = 0;
        for (unsigned w = 0; w < nt / 32; w++) r += part[w];
        out[blockIdx.x] = r;
    }
}

// The divergent warp operations the emulation must refuse (kind):
// 0 a lane returns before the shuffle, 1 half a warp waits at
// __syncthreads while the other half shuffles, 2 a mask without every
// lane, 3 a width that is no power of 2.
__global__ void bad_warp_op(int *out, int kind)
{
    unsigned t = threadIdx.x;
    int v = (int)t;
    if (kind == 0 && t == 3) return;
    if (kind == 1 && t < 16) {
        __syncthreads();
        return;
    }
    unsigned mask = kind == 2 ? 0x0000ffffu : 0xffffffffu;
    int width = kind == 3 ? 12 : 32;
    out[t] = __shfl_down_sync(mask, v, 1, width);
    if (kind == 1) __syncthreads();
}

__global__ void divergent_barrier(float *x)
{
    if (threadIdx.x == 3) return;
    __syncthreads();
    x[threadIdx.x] = 1.0f;
}

// ---- fibers and barriers --------------------------------------------------------

// The sum of 0, 1, 2, ... n-1 (exact in float for these sizes) over 3 blocks.
static double reduce(unsigned bx, unsigned by, unsigned bz, bool barrier)
{
    const int n = 5000;
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)(i % 64);
    float *x = dev_floats(n), *out = dev_floats(6);
    upload(x, h);
    dim3 grid(3, 2), block(bx, by, bz);
    if (barrier)
        DDP_LAUNCH(block_sum<true>, grid, block, 0, x, out, n);
    else
        DDP_LAUNCH(block_sum<false>, grid, block, 0, x, out, n);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    std::vector<float> r = download(out, 6);
    cudaFree(x);
    cudaFree(out);
    double s = 0;
    for (float v : r) s += v;
    return s;
}

START_TEST(test_block_reduction)
{
    emu_defaults();
    double want = 0;
    for (int i = 0; i < 5000; i++) want += i % 64;
    const unsigned sizes[][3] = {{1, 1, 1},    {2, 1, 1}, {32, 1, 1},  {64, 1, 1}, {256, 1, 1},
                                 {1024, 1, 1}, {8, 4, 2}, {16, 16, 4}, {1, 1, 64}};
    for (auto &s : sizes) {
        double got = reduce(s[0], s[1], s[2], true);
        ck_assert_msg(got == want, "block (%u,%u,%u): sum %.1f, expected %.1f", s[0], s[1], s[2],
                      got, want);
    }
}
END_TEST

START_TEST(test_missing_barrier_shows)
{
    emu_defaults();
    double want = 0;
    for (int i = 0; i < 5000; i++) want += i % 64;
    // without the barrier in the tree, thread 0 adds partial sums the other
    // threads have not written yet
    for (unsigned bx : {64u, 256u}) {
        double got = reduce(bx, 1, 1, false);
        ck_assert_msg(got != want, "block %u: the race did not show (sum %.1f)", bx, got);
    }
}
END_TEST

START_TEST(test_launches_from_threads)
{
    emu_defaults();
    double want = 0;
    for (int i = 0; i < 5000; i++) want += i % 64;
    // two OS threads launching block reductions at once: the launches take
    // turns, so the __shared__ tree of one is not the other's
    double got[2][8];
    auto work = [&](int t) {
        for (int r = 0; r < 8; r++) got[t][r] = reduce(256, 1, 1, true);
    };
    std::thread a(work, 0), b(work, 1);
    a.join();
    b.join();
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 8; r++)
            ck_assert_msg(got[t][r] == want, "thread %d round %d: %.1f, expected %.1f", t, r,
                          got[t][r], want);
}
END_TEST

START_TEST(test_thread_indices)
{
    emu_defaults();
    dim3 grid(3, 2, 2), block(4, 3, 2);
    const unsigned n = 12 * 24;
    unsigned *out = nullptr;
    ck_assert_int_eq(cudaMalloc((void **)&out, n * sizeof(unsigned)), cudaSuccess);
    unsigned long long before = ddp_emu_launch_count();
    DDP_LAUNCH(where_am_i, grid, block, 0, out);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 1);
    std::vector<unsigned> h(n);
    cudaMemcpy(h.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    unsigned k = 0;
    for (unsigned bz = 0; bz < 2; bz++)
        for (unsigned by = 0; by < 2; by++)
            for (unsigned bx = 0; bx < 3; bx++)
                for (unsigned tz = 0; tz < 2; tz++)
                    for (unsigned ty = 0; ty < 3; ty++)
                        for (unsigned tx = 0; tx < 4; tx++, k++)
                            ck_assert_uint_eq(h[k], (tx << 24) | (ty << 16) | (tz << 12) |
                                                        (bx << 8) | (by << 4) | bz);
    cudaFree(out);
}
END_TEST

// Run `launch` in a child process (test_child_aborts); it must abort with
// every string of `want` in its message.
template <class F> static void expect_abort(F launch, std::vector<const char *> want)
{
    char msg[2048];
    test_child_aborts(
        [](void *p) {
            (*static_cast<F *>(p))();
            cudaDeviceSynchronize();
        },
        &launch, msg, sizeof msg);
    for (const char *w : want) ck_assert_msg(strstr(msg, w), "'%s' not in: %s", w, msg);
}

// y[i] = x[i] over n floats; x NULL: y[i] = 1 (writes only)
__global__ void copy_or_fill(const float *x, float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x ? x[i] : 1.0f;
}

// DDP_EMU_COST_CHECK (emu_cost.cc), in a child process: a declaration that
// matches the pages touched passes, a wrong one aborts with the launch
// site, reads and writes are told apart, an undeclared launch aborts; and
// DDP_EMU_DRY runs no kernel and no GEMM.
static void cost_env(const char *check, const char *dry)
{
    emu_defaults();
    setenv("DDP_EMU_COST_CHECK", check, 1);
    setenv("DDP_EMU_DRY", dry, 1);
    ddp_emu_reload_env();
}

START_TEST(test_cost_check)
{
#if !defined(__x86_64__)
    return; // the check is off there (a warning says so)
#endif
    const size_t n = 1 << 18; // 1 MiB a tensor: 256 pages
    // right: 1 MiB read, 1 MiB written; then a GEMM with its operands
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        cost_env("1", "0");
        float *x = dev_floats(n), *y = dev_floats(n);
        DDP_COST(4.0 * n, 4.0 * n, 0);
        DDP_LAUNCH(copy_or_fill, 64, 256, 0, x, y, n);
        DDP_COST(0, 4.0 * n, 0);
        DDP_LAUNCH(copy_or_fill, 64, 256, 0, (const float *)nullptr, y, n);
        cublasHandle_t h;
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) _exit(3);
        const float one = 1.0f, zero = 0.0f;
        const int m = 512; // x as [512, 512], y = x x (beta 0: y not read)
        DDP_COST(4.0 * m * m, 4.0 * m * m, 2.0 * m * m * m);
        if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, x, m, x, m, &zero, y, m))
            _exit(4);
        cudaDeviceSynchronize();
        _exit(cudaGetLastError() == cudaSuccess ? 0 : 5);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "right declarations: 0x%x",
                  status);
    float *x = nullptr, *y = nullptr;
    // half the reads declared
    expect_abort(
        [&] {
            cost_env("1", "0");
            x = dev_floats(n);
            y = dev_floats(n);
            DDP_COST(2.0 * n, 4.0 * n, 0);
            DDP_LAUNCH(copy_or_fill, 64, 256, 0, x, y, n);
        },
        {"cost check: copy_or_fill at ", "check_emu.cc:", "declared 524288 bytes read",
         "touched 1048576 read"});
    // a fill declared as reading what it writes
    expect_abort(
        [&] {
            cost_env("1", "0");
            y = dev_floats(n);
            DDP_COST(4.0 * n, 4.0 * n, 0);
            DDP_LAUNCH(copy_or_fill, 64, 256, 0, (const float *)nullptr, y, n);
        },
        {"cost check: copy_or_fill", "touched 0 read"});
    // no declaration
    expect_abort(
        [&] {
            cost_env("1", "0");
            y = dev_floats(n);
            DDP_LAUNCH(copy_or_fill, 64, 256, 0, (const float *)nullptr, y, n);
        },
        {"copy_or_fill", "no cost declared"});
    // a GEMM that declares no read of C although beta is 1
    expect_abort(
        [&] {
            cost_env("1", "0");
            x = dev_floats(n);
            y = dev_floats(n);
            cublasHandle_t h;
            cublasCreate(&h);
            const float one = 1.0f;
            DDP_COST(4.0 * n, 4.0 * n, 0);
            cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 512, 512, 512, &one, x, 512, x, 512, &one, y,
                        512);
        },
        {"cost check: cublasSgemm", "declared 1048576 bytes read", "touched 2097152 read"});
    // the dry run: device memory reads as zeros and nothing runs
    cost_env("0", "1");
    x = dev_floats(n);
    DDP_LAUNCH(copy_or_fill, 64, 256, 0, (const float *)nullptr, x, n);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got = download(x, n);
    for (size_t i = 0; i < n; i += 4099) ck_assert_float_eq(got[i], 0.0f);
    cudaFree(x);
    cost_env("0", "0");
    unsetenv("DDP_EMU_COST_CHECK");
    unsetenv("DDP_EMU_DRY");
    ddp_emu_reload_env();
}
END_TEST

START_TEST(test_divergent_barrier_aborts)
{
    emu_defaults();
    float *x = dev_floats(32);
    expect_abort([&] { DDP_LAUNCH(divergent_barrier, 1, 32, 0, x); },
                 {"divergent __syncthreads", "check_emu.cc:", "31 wait"});
    cudaFree(x);
}
END_TEST

// What a warp operation gives lane l of a warp of L lanes (CUDA's rules).
static int shfl_want(int op, const std::vector<int> &v, unsigned w0, unsigned l, unsigned L,
                     int p, int width)
{
    unsigned seg = l & ~(unsigned)(width - 1), pos = l & (unsigned)(width - 1), src = l;
    if (op == 0) src = seg + ((unsigned)p & (unsigned)(width - 1));
    if (op == 1) src = pos < (unsigned)p ? l : l - p;
    if (op == 2) src = pos + p >= (unsigned)width ? l : l + p;
    if (op == 3) src = (l ^ (unsigned)p) >= seg + width ? l : (l ^ (unsigned)p);
    ck_assert_uint_lt(src, L);
    return v[w0 + src];
}

START_TEST(test_warp_operations)
{
    emu_defaults();
    const dim3 blocks[] = {dim3(32), dim3(64), dim3(256), dim3(16, 4), dim3(8, 4, 2)};
    for (const dim3 &bd : blocks)
        for (int width : {32, 16, 8, 4}) {
            const unsigned n = bd.x * bd.y * bd.z;
            int *d = nullptr;
            ck_assert_int_eq(cudaMalloc((void **)&d, n * 10 * sizeof(int)), cudaSuccess);
            DDP_LAUNCH(warp_ops, 2, bd, 0, d, width);
            ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
            std::vector<int> h(n * 10);
            cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
            cudaFree(d);
            std::vector<int> v(n);
            for (unsigned t = 0; t < n; t++) v[t] = 1000 + (int)t;
            for (unsigned t = 0; t < n; t++) {
                const unsigned w0 = t & ~31u, l = t % 32, L = 32;
                const int *o = &h[t * 10];
                const char *names[] = {"idx", "up", "down", "xor"};
                const int params[] = {5, 3, 3, 6};
                for (int op = 0; op < 4; op++)
                    ck_assert_msg(o[op] == shfl_want(op, v, w0, l, L, params[op], width),
                                  "block (%u,%u,%u) width %d thread %u: shfl %s gave %d, want %d",
                                  bd.x, bd.y, bd.z, width, t, names[op], o[op],
                                  shfl_want(op, v, w0, l, L, params[op], width));
                unsigned ballot = 0;
                for (unsigned k = 0; k < 32; k++)
                    if ((w0 + k) % 3 == 0) ballot |= 1u << k;
                ck_assert_uint_eq((unsigned)o[4], ballot);
                ck_assert_int_eq(o[5], 1);
                ck_assert_int_eq(o[6], 0);
                const int a2 = 10 * (1000 + (int)(w0 + ((l ^ 2) ^ 1)));
                ck_assert_int_eq(o[7], a2);
                const unsigned dsrc = l + 1 < 32 ? t + 1 : t;
                ck_assert_int_eq(o[8], 2 * (1000 + (int)dsrc) + 1);
                ck_assert_int_eq(o[9], 1);
            }
        }
}
END_TEST

START_TEST(test_warp_reduction_dynamic_shared)
{
    emu_defaults();
    const int n = 5000;
    std::vector<float> h(n);
    double want = 0;
    for (int i = 0; i < n; i++) want += h[i] = (float)(i % 64);
    float *x = dev_floats(n), *out = dev_floats(4);
    unsigned *poison = nullptr;
    ck_assert_int_eq(cudaMalloc((void **)&poison, 4 * sizeof(unsigned)), cudaSuccess);
    upload(x, h);
    for (unsigned nt : {32u, 64u, 256u, 1024u}) {
        DDP_LAUNCH_SMEM(shfl_block_sum, 4, nt, nt / 32 * sizeof(float), 0, x, n, out, poison);
        ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
        std::vector<float> r = download(out, 4);
        std::vector<unsigned> pz(4);
        cudaMemcpy(pz.data(), poison, sizeof(unsigned) * 4, cudaMemcpyDeviceToHost);
        double got = 0;
        for (int b = 0; b < 4; b++) {
            got += r[b];
            // every block starts from poisoned shared memory, not the last block's
            ck_assert_msg(pz[b] == 0xffffffffu, "block %d of %u threads: shared memory 0x%08x",
                          b, nt, pz[b]);
        }
        ck_assert_msg(got == want, "%u threads: sum %.1f, expected %.1f", nt, got, want);
    }
    // beyond 48 KiB: the launch fails and nothing runs
    DDP_LAUNCH_SMEM(shfl_block_sum, 1, 32, (48u << 10) + 4, 0, x, n, out, poison);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    static_assert(alignof(float4) == 16 && alignof(float2) == 8 && alignof(int4) == 16 &&
                      alignof(__nv_bfloat162) == 4 && sizeof(__nv_bfloat162) == 4,
                  "CUDA's vector alignment");
    cudaFree(x);
    cudaFree(out);
    cudaFree(poison);
}
END_TEST

START_TEST(test_divergent_warp_operations_abort)
{
    emu_defaults();
    int *d = nullptr;
    ck_assert_int_eq(cudaMalloc((void **)&d, 64 * sizeof(int)), cudaSuccess);
    expect_abort([&] { DDP_LAUNCH(bad_warp_op, 1, 32, 0, d, 0); },
                 {"divergent __shfl_down_sync", "1 lanes returned", "check_emu.cc:",
                  "bad_warp_op"});
    expect_abort([&] { DDP_LAUNCH(bad_warp_op, 1, 32, 0, d, 1); },
                 {"divergent __shfl_down_sync", "wait at __syncthreads"});
    expect_abort([&] { DDP_LAUNCH(bad_warp_op, 1, 32, 0, d, 2); },
                 {"mask 0x0000ffff", "whole warps"});
    expect_abort([&] { DDP_LAUNCH(bad_warp_op, 1, 32, 0, d, 3); }, {"width 12"});
    // a block of 48 threads: lane 15 of the second warp reads lane 16, which it does not have
    expect_abort([&] { DDP_LAUNCH(bad_warp_op, 1, 48, 0, d, 4); },
                 {"reads lane 16, which the block does not have"});
    cudaFree(d);
}
END_TEST

START_TEST(test_launch_configuration)
{
    emu_defaults();
    int *flag = nullptr;
    ck_assert_int_eq(cudaMalloc((void **)&flag, sizeof(int)), cudaSuccess);
    struct {
        dim3 grid, block;
    } bad[] = {
        {dim3(1), dim3(0)},           {dim3(0), dim3(32)},          {dim3(1), dim3(1025)},
        {dim3(1), dim3(32, 33)},      {dim3(1), dim3(1, 1, 65)},    {dim3(1, 65536), dim3(1)},
        {dim3(1, 1, 65536), dim3(1)}, {dim3(0x80000000u), dim3(1)}, {dim3(1, 0), dim3(1)}};
    for (auto &c : bad) {
        ck_assert_int_eq(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
        DDP_LAUNCH(mark, c.grid, c.block, 0, flag);
        ck_assert_int_eq(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
        ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
        ck_assert_int_eq(cudaGetLastError(), cudaSuccess); // cleared
        int h = -1;
        cudaMemcpy(&h, flag, sizeof h, cudaMemcpyDeviceToHost);
        ck_assert_int_eq(h, 0); // did not run
    }
    // the limits themselves are fine
    dim3 good[][2] = {{dim3(1), dim3(1024)},
                      {dim3(1), dim3(1, 1, 64)},
                      {dim3(2, 65535), dim3(1)},
                      {dim3(1, 1, 65535), dim3(1)}};
    for (auto &c : good) {
        DDP_LAUNCH(mark, c[0], c[1], 0, flag);
        ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    }
    // a destroyed stream
    cudaStream_t s;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    DDP_LAUNCH(mark, 1, 1, s, flag);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
    DDP_LAUNCH(mark, 1, 1, s, flag);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    cudaFree(flag);
}
END_TEST

START_TEST(test_big_launch)
{
    emu_defaults();
    // a million threads without barriers (one fiber reused), then with
    const int n = 1 << 20;
    float *x = dev_floats(n), *out = dev_floats(4096);
    std::vector<float> h(n, 1.0f);
    upload(x, h);
    DDP_LAUNCH(block_sum<true>, n / 256, 256, 0, x, out, n);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    std::vector<float> r = download(out, n / 256);
    for (float v : r) ck_assert_float_eq(v, 256.0f);
    cudaFree(x);
    cudaFree(out);
}
END_TEST

// ---- memory, devices, errors ------------------------------------------------------

START_TEST(test_malloc_poison_and_tracking)
{
    emu_defaults();
    const size_t n = 1000;
    float *d = dev_floats(n);
    std::vector<float> h = download(d, n);
    for (float v : h) ck_assert(isnan(v)); // 0xFF bytes, as real cudaMalloc does not zero
    unsigned char raw[4];
    cudaMemcpy(raw, d, 4, cudaMemcpyDefault);
    ck_assert_uint_eq(raw[0], 0xff);
    ck_assert_int_eq(ddp_emu_device_range(d, n * 4), 1);
    ck_assert_int_eq(ddp_emu_device_range(d + 1, n * 4), 0);
    ck_assert_int_eq(ddp_emu_device_range(h.data(), 4), 0);

    std::vector<float> host(n + 1, 2.0f);
    // copies that stay inside the allocation
    ck_assert_int_eq(cudaMemcpy(d, host.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(d + 10, host.data(), (n - 10) * 4, cudaMemcpyDefault), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(host.data(), d, n * 4, cudaMemcpyDeviceToHost, 0),
                     cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(d, d + 500, 500 * 4, cudaMemcpyDeviceToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemset(d, 0, n * 4), cudaSuccess);
    // one byte past the end, or the wrong kind of pointer
    ck_assert_int_eq(cudaMemcpy(d, host.data(), n * 4 + 1, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(d + 1, host.data(), n * 4, cudaMemcpyDefault),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(host.data(), d, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(d, host.data(), 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(host.data(), host.data() + 1, 4, cudaMemcpyDeviceToDevice),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(d, d, 4, cudaMemcpyHostToHost), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemset(d + 1, 0, n * 4), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemset(host.data(), 0, 4), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemsetAsync(d, 0, 4, (cudaStream_t)host.data()),
                     cudaErrorInvalidResourceHandle);
    // frees: unknown, interior, host, pinned-as-device, twice
    ck_assert_int_eq(cudaFree(host.data()), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaFree(d + 1), cudaErrorInvalidValue);
    void *pinned = nullptr;
    ck_assert_int_eq(cudaMallocHost(&pinned, 64), cudaSuccess);
    ck_assert_int_eq(cudaFree(pinned), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(d, pinned, 64, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaFreeHost(d), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaFreeHost(pinned), cudaSuccess);
    ck_assert_int_eq(cudaFree(d), cudaSuccess);
    ck_assert_int_eq(cudaFree(d), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaFree(nullptr), cudaSuccess);
    ck_assert_int_eq(ddp_emu_device_range(d, 4), 0);
    (void)cudaGetLastError();
}
END_TEST

START_TEST(test_memory_accounting)
{
    emu_defaults();
    setenv("DDP_EMU_GPU_MEM_MB", "64", 1);
    ddp_emu_reload_env();
    size_t free0, total;
    ck_assert_int_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
    ck_assert_uint_eq(total, (size_t)64 << 20);
    void *a = nullptr, *b = nullptr;
    ck_assert_int_eq(cudaMalloc(&a, (size_t)40 << 20), cudaSuccess);
    size_t free1;
    cudaMemGetInfo(&free1, &total);
    ck_assert_uint_eq(free0 - free1, (size_t)40 << 20);
    ck_assert_int_eq(cudaMalloc(&b, (size_t)30 << 20), cudaErrorMemoryAllocation);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    ck_assert_int_eq(cudaFree(a), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&b, (size_t)30 << 20), cudaSuccess);
    ck_assert_int_eq(cudaFree(b), cudaSuccess);
    cudaMemGetInfo(&free1, &total);
    ck_assert_uint_eq(free1, free0);
    emu_defaults();
}
END_TEST

START_TEST(test_devices)
{
    emu_defaults();
    int n = -1;
    ck_assert_int_eq(cudaGetDeviceCount(&n), cudaSuccess);
    ck_assert_int_eq(n, 1);
    cudaDeviceProp p;
    ck_assert_int_eq(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    ck_assert_str_eq(p.name, "ddptrain CUDA emulation");
    ck_assert_uint_eq(p.totalGlobalMem, (size_t)16 << 30);
    ck_assert_int_eq(p.pciBusID, 0x10);

    setenv("DDP_EMU_GPUS", "3", 1);
    setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
    ddp_emu_reload_env();
    ck_assert_int_eq(cudaGetDeviceCount(&n), cudaSuccess);
    ck_assert_int_eq(n, 2);
    char bus[32];
    ck_assert_int_eq(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), cudaSuccess);
    ck_assert_str_eq(bus, "0000:12:00.0");
    ck_assert_int_eq(cudaDeviceGetPCIBusId(bus, sizeof bus, 1), cudaSuccess);
    ck_assert_str_eq(bus, "0000:10:00.0");
    ck_assert_int_eq(cudaSetDevice(2), cudaErrorInvalidDevice);
    ck_assert_int_eq(cudaSetDevice(1), cudaSuccess);
    int d = -1;
    ck_assert_int_eq(cudaGetDevice(&d), cudaSuccess);
    ck_assert_int_eq(d, 1);
    // memory is per device
    void *a = nullptr;
    size_t f0, f0_after, f1, f1_after, t;
    cudaMemGetInfo(&f1, &t);
    cudaSetDevice(0);
    cudaMemGetInfo(&f0, &t);
    cudaSetDevice(1);
    ck_assert_int_eq(cudaMalloc(&a, 1 << 20), cudaSuccess);
    cudaMemGetInfo(&f1_after, &t);
    cudaSetDevice(0);
    cudaMemGetInfo(&f0_after, &t);
    ck_assert_uint_eq(f1 - f1_after, 1 << 20);
    ck_assert_uint_eq(f0_after, f0);
    cudaFree(a);

    // the list stops at the first entry that is no device
    setenv("CUDA_VISIBLE_DEVICES", "1,7,0", 1);
    ddp_emu_reload_env();
    cudaGetDeviceCount(&n);
    ck_assert_int_eq(n, 1);
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ddp_emu_reload_env();
    ck_assert_int_eq(cudaGetDeviceCount(&n), cudaErrorNoDevice);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(cudaMalloc(&a, 4), cudaErrorNoDevice);
    ck_assert_int_eq(cudaSetDevice(0), cudaErrorNoDevice);
    emu_defaults();
    int v = 0;
    ck_assert_int_eq(cudaRuntimeGetVersion(&v), cudaSuccess);
    ck_assert_int_ge(v, 12000);
    ck_assert_str_eq(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
    ck_assert_str_eq(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
}
END_TEST

START_TEST(test_streams_events)
{
    emu_defaults();
    cudaStream_t s;
    cudaEvent_t a, b, c;
    ck_assert_int_eq(cudaStreamCreate(&s), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&a), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&b), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&c, cudaEventDisableTiming), cudaSuccess);
    float ms = -1;
    ck_assert_int_eq(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
    ck_assert_int_eq(cudaEventRecord(a, s), cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(a), cudaSuccess); // complete once recorded
    ck_assert_int_eq(cudaEventRecord(b, 0), cudaSuccess);
    ck_assert_int_eq(cudaEventRecord(c, s), cudaSuccess);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
    ck_assert(ms >= 0);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, a, c), cudaErrorInvalidResourceHandle);
    ck_assert_int_eq(cudaStreamWaitEvent(s, c, 0), cudaSuccess);
    ck_assert_int_eq(cudaStreamQuery(s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
    ck_assert_int_eq(cudaEventSynchronize(b), cudaSuccess);
    ck_assert_int_eq(cudaEventDestroy(c), cudaSuccess);
    ck_assert_int_eq(cudaEventDestroy(c), cudaErrorInvalidResourceHandle);
    ck_assert_int_eq(cudaStreamWaitEvent(s, c, 0), cudaErrorInvalidResourceHandle);
    ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    (void)cudaGetLastError();
}
END_TEST

// Every element of the device buffer x (n floats) equals v.
static void expect_all(const float *x, int n, float v, const char *what)
{
    std::vector<float> h = download(x, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(h[i] == v, "%s: [%d] = %g, expected %g", what, i, (double)h[i], (double)v);
}

static void expect_all_async(const float *x, int n, float v, cudaStream_t s, const char *what)
{
    std::vector<float> h(n, -1.0f);
    // into pageable memory: complete when it returns (after s's work)
    ck_assert_int_eq(cudaMemcpyAsync(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                     cudaSuccess);
    for (int i = 0; i < n; i++)
        ck_assert_msg(h[i] == v, "%s: [%d] = %g, expected %g", what, i, (double)h[i], (double)v);
}

START_TEST(test_stream_queues_lazy)
{
    setenv("DDP_EMU_STREAMS", "lazy", 1);
    emu_defaults();
    const int n = 8;
    float *x = dev_floats(n), *y = dev_floats(n);
    ck_assert_int_eq(cudaMemset(x, 0, n * sizeof(float)), cudaSuccess);
    ck_assert_int_eq(cudaMemset(y, 0, n * sizeof(float)), cudaSuccess);
    cudaStream_t p, q;
    cudaEvent_t e, t0, t1;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&p, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&t0), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&t1), cudaSuccess);
    unsigned long long before = ddp_emu_launch_count();
    // queued: nothing runs until something waits for it
    ck_assert_int_eq(cudaEventRecord(t0, p), cudaSuccess);
    float *arg = x;
    int count = n;
    DDP_LAUNCH(add_one, 1, n, p, arg, count);
    arg = nullptr, count = 0; // the launch copied its arguments
    ck_assert_int_eq(cudaEventRecord(t1, p), cudaSuccess);
    ck_assert_uint_eq(ddp_emu_launch_count(), before);
    float ms = -1;
    ck_assert_int_eq(cudaEventElapsedTime(&ms, t0, t1), cudaErrorNotReady);
    (void)cudaGetLastError();
    // q reads x without waiting for p: the old contents
    DDP_LAUNCH(copy_floats, 1, n, q, x, y, n);
    expect_all_async(y, n, 0.0f, q, "a reader that did not wait");
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 1);
    // with the wait: p runs up to the record first
    DDP_LAUNCH(add_one, 1, n, p, x, n);
    ck_assert_int_eq(cudaEventRecord(e, p), cudaSuccess);
    DDP_LAUNCH(add_one, 1, n, p, x, n); // after the record: not waited for
    ck_assert_int_eq(cudaStreamWaitEvent(q, e, 0), cudaSuccess);
    DDP_LAUNCH(copy_floats, 1, n, q, x, y, n);
    ck_assert_int_eq(cudaStreamSynchronize(q), cudaSuccess);
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 4);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
    expect_all_async(y, n, 2.0f, q, "a reader after the wait");
    // a synchronous copy waits for every stream
    expect_all(x, n, 3.0f, "cudaMemcpy after all streams");
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 5);
    // a query runs what it asks about; the legacy stream runs at once
    DDP_LAUNCH(add_one, 1, n, p, x, n);
    ck_assert_int_eq(cudaEventRecord(e, p), cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(e), cudaSuccess);
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 6);
    DDP_LAUNCH(add_one, 1, n, 0, x, n);
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 7);
    // an event destroyed with its record pending still orders its waiter
    DDP_LAUNCH(add_one, 1, n, p, x, n);
    ck_assert_int_eq(cudaEventRecord(e, p), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(q, e, 0), cudaSuccess);
    ck_assert_int_eq(cudaEventDestroy(e), cudaSuccess);
    DDP_LAUNCH(copy_floats, 1, n, q, x, y, n);
    expect_all_async(y, n, 6.0f, q, "a waiter of a destroyed event");
    // cudaFree waits for the work queued on the memory
    DDP_LAUNCH(add_one, 1, n, p, x, n);
    ck_assert_int_eq(cudaFree(y), cudaSuccess);
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 10);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaStreamDestroy(p);
    cudaStreamDestroy(q);
    cudaFree(x);
    unsetenv("DDP_EMU_STREAMS");
    emu_defaults();
}
END_TEST

START_TEST(test_stream_queues_lazy_first)
{
    setenv("DDP_EMU_STREAMS", "lazy-first", 1);
    emu_defaults();
    const int n = 8;
    float *x = dev_floats(n), *y = dev_floats(n);
    ck_assert_int_eq(cudaMemset(x, 0, n * sizeof(float)), cudaSuccess);
    cudaStream_t first, side;
    cudaEvent_t e;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    unsigned long long before = ddp_emu_launch_count();
    DDP_LAUNCH(add_one, 1, n, first, x, n); // lazy: queued
    ck_assert_uint_eq(ddp_emu_launch_count(), before);
    DDP_LAUNCH(add_one, 1, n, side, x, n); // eager: runs now, before the first stream's
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 1);
    // the side stream waits for the first one: blocked until that runs
    ck_assert_int_eq(cudaEventRecord(e, first), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(side, e, 0), cudaSuccess);
    DDP_LAUNCH(copy_floats, 1, n, side, x, y, n);
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 1);
    ck_assert_int_eq(cudaStreamSynchronize(first), cudaSuccess);
    ck_assert_uint_eq(ddp_emu_launch_count(), before + 3); // the side stream went on
    expect_all(y, n, 2.0f, "the side stream after the first");
    cudaEventDestroy(e);
    cudaStreamDestroy(first);
    cudaStreamDestroy(side);
    cudaFree(x);
    cudaFree(y);
    unsetenv("DDP_EMU_STREAMS");
    emu_defaults();
}
END_TEST

START_TEST(test_fault_injection)
{
    emu_defaults();
    setenv("DDP_EMU_FAIL", "cudaMalloc:2,kernel:1,cudaMemcpyAsync:2,cublasSgemm:1", 1);
    ddp_emu_reload_env();
    void *a = nullptr, *b = nullptr, *c = nullptr;
    ck_assert_int_eq(cudaMalloc(&a, 16), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&b, 16), cudaErrorMemoryAllocation);
    ck_assert_int_eq(cudaMalloc(&c, 16), cudaSuccess);
    int *flag = (int *)c, h = 0;
    cudaMemset(flag, 0, sizeof(int));
    DDP_LAUNCH(mark, 1, 1, 0, flag);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorLaunchFailure);
    cudaMemcpy(&h, flag, sizeof h, cudaMemcpyDeviceToHost);
    ck_assert_int_eq(h, 0);
    DDP_LAUNCH(mark, 1, 1, 0, flag);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    cudaMemcpy(&h, flag, sizeof h, cudaMemcpyDeviceToHost);
    ck_assert_int_eq(h, 1);
    ck_assert_int_eq(cudaMemcpyAsync(&h, flag, 4, cudaMemcpyDeviceToHost, 0), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(&h, flag, 4, cudaMemcpyDeviceToHost, 0),
                     cudaErrorLaunchFailure);
    ck_assert_int_eq(cudaMemcpyAsync(&h, flag, 4, cudaMemcpyDeviceToHost, 0), cudaSuccess);
    cublasHandle_t blas;
    ck_assert_int_eq(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
    float one = 1, zero = 0;
    float *m = (float *)a; // 4 floats: a 2x2 matrix
    ck_assert_int_eq(
        cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, m, 2, m, 2, &zero, m, 2),
        CUBLAS_STATUS_EXECUTION_FAILED);
    ck_assert_int_eq(
        cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, m, 2, m, 2, &zero, m, 2),
        CUBLAS_STATUS_SUCCESS);
    cublasDestroy(blas);
    cudaFree(a);
    cudaFree(c);
    emu_defaults();
}
END_TEST

START_TEST(test_bf16)
{
    // round to nearest even, NaN stays NaN, infinities and exact values stay
    ck_assert_uint_eq(__float2bfloat16(1.0f).__x, 0x3f80);
    ck_assert_uint_eq(__float2bfloat16(1.0f + 1.0f / 256).__x, 0x3f80);         // tie -> even
    ck_assert_uint_eq(__float2bfloat16(1.0f + 3.0f / 256).__x, 0x3f82);         // tie -> even
    ck_assert_uint_eq(__float2bfloat16(1.0f + 1.0f / 256 + 1e-6f).__x, 0x3f81); // above tie
    ck_assert_uint_eq(__float2bfloat16(-2.0f).__x, 0xc000);
    ck_assert(isnan(__bfloat162float(__float2bfloat16(nanf("")))));
    ck_assert(isinf(__bfloat162float(__float2bfloat16(INFINITY))));
    ck_assert_float_eq(__bfloat162float(__float2bfloat16(3.5f)), 3.5f);
    __nv_bfloat16 b(0.15625f);
    ck_assert_float_eq((float)b, 0.15625f);
}
END_TEST

// ---- cuBLAS ------------------------------------------------------------------------

// C = alpha op(A) op(B) + beta C, column-major, in double
static void naive_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       const std::vector<float> &A, int lda, const std::vector<float> &B, int ldb,
                       float beta, std::vector<float> &C, int ldc)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double a = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
                double b = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
                s += a * b;
            }
            double c = beta == 0 ? 0.0 : beta * (double)C[i + (size_t)j * ldc];
            C[i + (size_t)j * ldc] = (float)(alpha * s + c);
        }
}

static std::vector<float> random_vec(size_t n, unsigned seed)
{
    std::vector<float> v(n);
    for (float &x : v) x = urand(seed);
    return v;
}

START_TEST(test_sgemm)
{
    emu_defaults();
    cublasHandle_t h;
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    cudaStream_t s;
    cudaStreamCreate(&s);
    ck_assert_int_eq(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
    cudaStream_t got;
    ck_assert_int_eq(cublasGetStream(h, &got), CUBLAS_STATUS_SUCCESS);
    ck_assert_ptr_eq(got, s);
    const int shapes[][3] = {{5, 7, 3}, {17, 13, 9}, {1, 1, 1}, {33, 2, 65}};
    const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T};
    for (auto &sh : shapes)
        for (cublasOperation_t ta : ops)
            for (cublasOperation_t tb : ops)
                for (float beta : {0.0f, 0.5f}) {
                    int m = sh[0], n = sh[1], k = sh[2];
                    int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
                    int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
                    int lda = ra + 2, ldb = rb + 1, ldc = m + 3;
                    std::vector<float> A = random_vec((size_t)lda * ca, 1 + m),
                                       B = random_vec((size_t)ldb * cb, 2 + n),
                                       C = random_vec((size_t)ldc * n, 3 + k);
                    if (beta == 0)
                        for (float &x : C) x = nanf(""); // beta 0 must not read C
                    float *dA = dev_floats(A.size()), *dB = dev_floats(B.size()),
                          *dC = dev_floats(C.size());
                    upload(dA, A);
                    upload(dB, B);
                    upload(dC, C);
                    float alpha = 1.5f;
                    ck_assert_int_eq(
                        cublasSgemm(h, ta, tb, m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc),
                        CUBLAS_STATUS_SUCCESS);
                    naive_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
                    std::vector<float> r = download(dC, C.size());
                    for (int j = 0; j < n; j++)
                        for (int i = 0; i < m; i++) {
                            float want = C[i + (size_t)j * ldc], have = r[i + (size_t)j * ldc];
                            ck_assert_msg(fabsf(want - have) <= 1e-5f * (1 + fabsf(want)),
                                          "%dx%dx%d op %d%d beta %g: C(%d,%d) = %g, want %g", m, n,
                                          k, ta, tb, beta, i, j, have, want);
                        }
                    cudaFree(dA);
                    cudaFree(dB);
                    cudaFree(dC);
                }
    // argument checks
    float *d = dev_floats(100), one = 1, zero = 0;
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 3, d, 4, &zero, d, 4),
        CUBLAS_STATUS_INVALID_VALUE); // lda < m
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 5, &one, d, 4, d, 5, &zero, d, 4),
        CUBLAS_STATUS_INVALID_VALUE); // lda < k for OP_T
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 4, 4, 4, &one, d, 4, d, 3, &zero, d, 4),
        CUBLAS_STATUS_INVALID_VALUE); // ldb < n for OP_T
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &zero, d, 3),
        CUBLAS_STATUS_INVALID_VALUE); // ldc < m
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, d, 4, d, 4, &zero, d, 4),
        CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(
        cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &zero, d, 4),
        CUBLAS_STATUS_NOT_INITIALIZED);
    // extents: 10x10 with ld 10 is exactly the 100 floats; 10x11 runs past
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 10, 10, 10, &one, d, 10, d, 10, &zero, d, 10),
        CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 10, 10, 11, &one, d, 10, d, 11, &zero, d, 10),
        CUBLAS_STATUS_EXECUTION_FAILED); // A is 10 x 11
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 10, 10, 10, &one, d, 10, d + 1, 10, &zero, d, 10),
        CUBLAS_STATUS_EXECUTION_FAILED); // B one float past the end
    std::vector<float> host(100);
    ck_assert_int_eq(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 10, 10, 10, &one, d, 10, d, 10, &zero,
                                 host.data(), 10),
                     CUBLAS_STATUS_EXECUTION_FAILED); // C in host memory
    // nothing to do: m = 0 or n = 0 touches nothing
    ck_assert_int_eq(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 10, 10, &one, nullptr, 1, nullptr,
                                 10, &zero, nullptr, 1),
                     CUBLAS_STATUS_SUCCESS);
    cudaFree(d);
    ck_assert_int_eq(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasDestroy(h), CUBLAS_STATUS_NOT_INITIALIZED);
    ck_assert_str_eq(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE),
                     "CUBLAS_STATUS_INVALID_VALUE");
    cudaStreamDestroy(s);
}
END_TEST

START_TEST(test_sgemm_k0)
{
    emu_defaults();
    cublasHandle_t h;
    cublasCreate(&h);
    // k = 0: C = beta C, and beta = 0 writes zeros over NaN
    float *c = dev_floats(6);
    std::vector<float> C = {1, 2, 3, 4, 5, 6};
    upload(c, C);
    float one = 1, two = 2, zero = 0;
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 0, &one, nullptr, 2, nullptr, 1, &two, c, 2),
        CUBLAS_STATUS_SUCCESS);
    std::vector<float> r = download(c, 6);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(r[i], 2 * C[i]);
    cudaMemset(c, 0xff, 6 * sizeof(float));
    ck_assert_int_eq(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 0, &one, nullptr, 2, nullptr, 1,
                                 &zero, c, 2),
                     CUBLAS_STATUS_SUCCESS);
    r = download(c, 6);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(r[i], 0.0f);
    cudaFree(c);
    cublasDestroy(h);
}
END_TEST

// cublasGemmStridedBatchedEx in bf16: A shared (stride 0), B's instances
// interleaved (stride one instance's columns, ldb all of them: a gathered
// layout), C's apart; each instance against the naive loops; a B whose last
// instance runs past its allocation is refused.
START_TEST(test_gemm_strided_batched_ex)
{
    emu_defaults();
    cublasHandle_t h;
    cublasCreate(&h);
    const int m = 6, n = 5, k = 7, batch = 3, lda = m, ldb = k, ldc = m;
    // A [m, k] column-major; B: batch instances of [k, n] side by side in a
    // [k, batch * n] matrix, so instance i starts at column i * n
    std::vector<float> A = random_vec((size_t)lda * k, 9), B = random_vec((size_t)ldb * n * batch, 10);
    std::vector<__nv_bfloat16> Ab(A.size()), Bb(B.size());
    for (size_t i = 0; i < A.size(); i++) A[i] = __bfloat162float(Ab[i] = __float2bfloat16(A[i]));
    for (size_t i = 0; i < B.size(); i++) B[i] = __bfloat162float(Bb[i] = __float2bfloat16(B[i]));
    void *dA, *dB;
    cudaMalloc(&dA, Ab.size() * 2);
    cudaMalloc(&dB, Bb.size() * 2);
    cudaMemcpy(dA, Ab.data(), Ab.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, Bb.data(), Bb.size() * 2, cudaMemcpyHostToDevice);
    const long long sc = (long long)ldc * n;
    float *dC = dev_floats((size_t)sc * batch);
    float alpha = 1, beta = 0;
    ck_assert_int_eq(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA,
                                                CUDA_R_16BF, lda, 0, dB, CUDA_R_16BF, ldb,
                                                (long long)ldb * n, &beta, dC, CUDA_R_32F, ldc, sc,
                                                batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    std::vector<float> r = download(dC, (size_t)sc * batch);
    for (int i = 0; i < batch; i++) {
        std::vector<float> Bi(B.begin() + (size_t)i * ldb * n, B.begin() + (size_t)(i + 1) * ldb * n);
        std::vector<float> want((size_t)sc, 0.0f);
        naive_gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, A, lda, Bi, ldb, beta, want, ldc);
        for (long long j = 0; j < sc; j++)
            ck_assert_msg(fabsf(r[i * sc + j] - want[j]) <= 1e-5f * (1 + fabsf(want[j])),
                          "instance %d: C[%lld] = %g, want %g", i, j, r[i * sc + j], want[j]);
    }
    // one instance more runs past B
    ck_assert_int_eq(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA,
                                                CUDA_R_16BF, lda, 0, dB, CUDA_R_16BF, ldb,
                                                (long long)ldb * n, &beta, dC, CUDA_R_32F, ldc, 0,
                                                batch + 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cublasDestroy(h);
}
END_TEST

START_TEST(test_gemm_ex_bf16)
{
    emu_defaults();
    cublasHandle_t h;
    cublasCreate(&h);
    const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T};
    for (cublasOperation_t ta : ops)
        for (cublasOperation_t tb : ops) {
            int m = 7, n = 5, k = 11;
            int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
            int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
            int lda = ra + 1, ldb = rb, ldc = m;
            std::vector<float> A = random_vec((size_t)lda * ca, 7),
                               B = random_vec((size_t)ldb * cb, 8);
            std::vector<__nv_bfloat16> Ab(A.size()), Bb(B.size());
            for (size_t i = 0; i < A.size(); i++) {
                Ab[i] = __float2bfloat16(A[i]);
                A[i] = __bfloat162float(Ab[i]);
            }
            for (size_t i = 0; i < B.size(); i++) {
                Bb[i] = __float2bfloat16(B[i]);
                B[i] = __bfloat162float(Bb[i]);
            }
            void *dA, *dB;
            cudaMalloc(&dA, Ab.size() * 2);
            cudaMalloc(&dB, Bb.size() * 2);
            cudaMemcpy(dA, Ab.data(), Ab.size() * 2, cudaMemcpyHostToDevice);
            cudaMemcpy(dB, Bb.data(), Bb.size() * 2, cudaMemcpyHostToDevice);
            std::vector<float> C((size_t)ldc * n, nanf(""));
            float *dC = dev_floats(C.size());
            upload(dC, C);
            float alpha = 1, beta = 0;
            for (cublasGemmAlgo_t algo : {CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT_TENSOR_OP}) {
                ck_assert_int_eq(cublasGemmEx(h, ta, tb, m, n, k, &alpha, dA, CUDA_R_16BF, lda, dB,
                                              CUDA_R_16BF, ldb, &beta, dC, CUDA_R_32F, ldc,
                                              CUBLAS_COMPUTE_32F, algo),
                                 CUBLAS_STATUS_SUCCESS);
                std::vector<float> want = C;
                naive_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, want, ldc);
                std::vector<float> r = download(dC, C.size());
                for (size_t i = 0; i < r.size(); i++)
                    ck_assert_msg(fabsf(r[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])),
                                  "op %d%d: C[%zu] = %g, want %g", ta, tb, i, r[i], want[i]);
            }
            // the bf16 extent is in 2-byte elements: A ends one element
            // before its allocation (lda > rows), so 2 elements on runs past
            ck_assert_int_eq(cublasGemmEx(h, ta, tb, m, n, k, &alpha, dA, CUDA_R_16BF, lda, dB,
                                          CUDA_R_16BF, ldb, &beta, dC, CUDA_R_32F, ldc,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             CUBLAS_STATUS_SUCCESS);
            ck_assert_int_eq(cublasGemmEx(h, ta, tb, m, n, k, &alpha, (char *)dA + 4, CUDA_R_16BF,
                                          lda, dB, CUDA_R_16BF, ldb, &beta, dC, CUDA_R_32F, ldc,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             CUBLAS_STATUS_EXECUTION_FAILED);
            // mixed or unsupported types
            ck_assert_int_eq(cublasGemmEx(h, ta, tb, m, n, k, &alpha, dA, CUDA_R_16BF, lda, dB,
                                          CUDA_R_32F, ldb, &beta, dC, CUDA_R_32F, ldc,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             CUBLAS_STATUS_NOT_SUPPORTED);
            ck_assert_int_eq(cublasGemmEx(h, ta, tb, m, n, k, &alpha, dA, CUDA_R_16BF, lda, dB,
                                          CUDA_R_16BF, ldb, &beta, dC, CUDA_R_16BF, ldc,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             CUBLAS_STATUS_NOT_SUPPORTED);
            cudaFree(dA);
            cudaFree(dB);
            cudaFree(dC);
        }
    // fp32 through GemmEx equals Sgemm
    std::vector<float> A = random_vec(12, 3), B = random_vec(12, 4);
    float *dA = dev_floats(12), *dB = dev_floats(12), *dC = dev_floats(9), *dD = dev_floats(9);
    upload(dA, A);
    upload(dB, B);
    float one = 1, zero = 0;
    ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 3, 4, &one, dA, CUDA_R_32F, 4, dB,
                                  CUDA_R_32F, 4, &zero, dC, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 3, 4, &one, dA, 4, dB, 4, &zero, dD, 3),
        CUBLAS_STATUS_SUCCESS);
    std::vector<float> c1 = download(dC, 9), c2 = download(dD, 9);
    ck_assert(memcmp(c1.data(), c2.data(), 9 * sizeof(float)) == 0);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dD);
    cublasDestroy(h);
}
END_TEST

// TF32: the handle's math mode rounds SGEMM's and GemmEx's fp32 inputs to 10
// mantissa bits, to nearest with ties away (1 + 2^-11 becomes 1 + 2^-10,
// 1 + 2^-12 becomes 1); CUBLAS_COMPUTE_32F_FAST_TF32 does so in any mode,
// CUBLAS_COMPUTE_32F_PEDANTIC never.
START_TEST(test_tf32)
{
    emu_defaults();
    cublasHandle_t h;
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const float a2[2] = {1.0f + ldexpf(1, -11), 1.0f + ldexpf(1, -12)}, one[2] = {1.0f, 1.0f};
    float *dA = dev_floats(2), *dB = dev_floats(2), *dC = dev_floats(1);
    upload(dA, std::vector<float>(a2, a2 + 2));
    upload(dB, std::vector<float>(one, one + 2));
    const float al = 1.0f, be = 0.0f;
    // C[1x1] = A[1x2] B[2x1]
    auto sgemm = [&]() {
        ck_assert_int_eq(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &al, dA, 1, dB, 2, &be,
                                     dC, 1),
                         CUBLAS_STATUS_SUCCESS);
        return download(dC, 1)[0];
    };
    auto gemm_ex = [&](cublasComputeType_t ct) {
        ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &al, dA, CUDA_R_32F, 1,
                                      dB, CUDA_R_32F, 2, &be, dC, CUDA_R_32F, 1, ct,
                                      CUBLAS_GEMM_DEFAULT),
                         CUBLAS_STATUS_SUCCESS);
        return download(dC, 1)[0];
    };
    const float exact = a2[0] + a2[1], tf32 = (1.0f + ldexpf(1, -10)) + 1.0f;
    ck_assert_float_eq(sgemm(), exact);
    ck_assert_float_eq(gemm_ex(CUBLAS_COMPUTE_32F_FAST_TF32), tf32);
    ck_assert_int_eq(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    ck_assert_float_eq(sgemm(), tf32);
    ck_assert_float_eq(gemm_ex(CUBLAS_COMPUTE_32F), tf32);
    ck_assert_float_eq(gemm_ex(CUBLAS_COMPUTE_32F_PEDANTIC), exact);
    ck_assert_int_eq(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    ck_assert_float_eq(sgemm(), exact);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cublasDestroy(h);
}
END_TEST

START_TEST(test_strided_batched_and_gemv)
{
    emu_defaults();
    cublasHandle_t h;
    cublasCreate(&h);
    const int m = 4, n = 3, k = 5, batch = 3;
    const long long sA = m * k + 2, sB = k * n + 1, sC = m * n;
    std::vector<float> A = random_vec(sA * batch, 11), B = random_vec(sB * batch, 12),
                       C = random_vec(sC * batch, 13);
    float *dA = dev_floats(A.size()), *dB = dev_floats(B.size()), *dC = dev_floats(C.size());
    upload(dA, A);
    upload(dB, B);
    upload(dC, C);
    float alpha = 0.5f, beta = 2.0f;
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA, m,
                                               sA, dB, n, sB, &beta, dC, m, sC, batch),
                     CUBLAS_STATUS_SUCCESS);
    std::vector<float> r = download(dC, C.size());
    for (int b = 0; b < batch; b++) {
        std::vector<float> Ab(A.begin() + b * sA, A.begin() + (b + 1) * sA),
            Bb(B.begin() + b * sB, B.begin() + (b + 1) * sB),
            Cb(C.begin() + b * sC, C.begin() + (b + 1) * sC);
        naive_gemm(CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, alpha, Ab, m, Bb, n, beta, Cb, m);
        for (int i = 0; i < sC; i++)
            ck_assert_msg(fabsf(r[b * sC + i] - Cb[i]) <= 1e-5f * (1 + fabsf(Cb[i])),
                          "batch %d C[%d] = %g, want %g", b, i, r[b * sC + i], Cb[i]);
    }
    // one more batch runs past every operand
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA, m,
                                               sA, dB, n, sB, &beta, dC, m, sC, batch + 1),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA, m,
                                               sA, dB, n, sB, &beta, dC, m, sC, -1),
                     CUBLAS_STATUS_INVALID_VALUE);

    // gemv: y = alpha op(A) x + beta y, both ways, beta 0 over NaN
    for (cublasOperation_t t : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        int lx = t == CUBLAS_OP_N ? k : m, ly = t == CUBLAS_OP_N ? m : k;
        std::vector<float> x = random_vec(lx * 2, 21), y(ly, nanf(""));
        float *dx = dev_floats(x.size()), *dy = dev_floats(ly);
        upload(dx, x);
        upload(dy, y);
        float one = 1, zero = 0;
        ck_assert_int_eq(cublasSgemv(h, t, m, k, &one, dA, m, dx, 2, &zero, dy, 1),
                         CUBLAS_STATUS_SUCCESS);
        std::vector<float> got = download(dy, ly);
        for (int i = 0; i < ly; i++) {
            double s = 0;
            for (int p = 0; p < lx; p++)
                s += (double)(t == CUBLAS_OP_N ? A[i + p * m] : A[p + i * m]) * x[2 * p];
            ck_assert_msg(fabs(got[i] - s) <= 1e-5 * (1 + fabs(s)), "gemv %d: y[%d] = %g, want %g",
                          t, i, got[i], s);
        }
        ck_assert_int_eq(cublasSgemv(h, t, m, k, &one, dA, m, dx, 0, &zero, dy, 1),
                         CUBLAS_STATUS_INVALID_VALUE);
        ck_assert_int_eq(cublasSgemv(h, t, m, k, &one, dA, m, dx, 3, &zero, dy, 1),
                         CUBLAS_STATUS_EXECUTION_FAILED); // x runs past its allocation
        cudaFree(dx);
        cudaFree(dy);
    }
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cublasDestroy(h);
}
END_TEST

// cuDNN's convolutions (include/cudnn.h): what a call checks before it
// queues anything -- descriptors that disagree, types it has no kernel for,
// too little workspace, an operand outside device memory -- and the
// forward's result on a tiny case (a 2x2 input, a 1x1 filter of 3: y = 3x).
START_TEST(test_cudnn_checks)
{
    cudaSetDevice(0);
    cudnnHandle_t h;
    ck_assert_int_eq(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    cudnnTensorDescriptor_t xd, yd, bad;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&xd), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&yd), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&bad), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateFilterDescriptor(&wd), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateConvolutionDescriptor(&cd), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 2, 2),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 2, 2),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, 1, 1, 1),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetConvolution2dDescriptor(cd, 0, 0, 1, 1, 1, 1,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH), CUDNN_STATUS_SUCCESS);
    float *x, *y, *w;
    cudaMalloc((void **)&x, 4 * sizeof *x);
    cudaMalloc((void **)&y, 4 * sizeof *y);
    cudaMalloc((void **)&w, sizeof *w);
    const float hx[4] = {1, 2, -3, 0.5f}, three = 3, one = 1, zero = 0;
    cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
    cudaMemcpy(w, &three, sizeof three, cudaMemcpyHostToDevice);
    const auto fwd = [&](cudnnTensorDescriptor_t yy, const void *xp, void *yp, size_t ws_bytes,
                         cudnnConvolutionFwdAlgo_t algo) {
        return cudnnConvolutionForward(h, &one, xd, xp, wd, w, cd, algo, nullptr, ws_bytes, &zero,
                                       yy, yp);
    };
    ck_assert_int_eq(fwd(yd, x, y, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM),
                     CUDNN_STATUS_SUCCESS);
    float hy[4];
    cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(hy[i], 3 * hx[i]);
    // an output descriptor of the wrong size, or of another type
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 3, 2),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fwd(bad, x, y, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM),
                     CUDNN_STATUS_BAD_PARAM);
    ck_assert_int_eq(
        cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, 1, 1, 2, 2),
        CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fwd(bad, x, y, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM),
                     CUDNN_STATUS_NOT_SUPPORTED);
    // IMPLICIT_PRECOMP_GEMM needs a workspace; FFT the emulation has not
    ck_assert_int_eq(fwd(yd, x, y, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM),
                     CUDNN_STATUS_BAD_PARAM);
    ck_assert_int_eq(fwd(yd, x, y, 0, CUDNN_CONVOLUTION_FWD_ALGO_FFT),
                     CUDNN_STATUS_NOT_SUPPORTED);
    // operands: one float past the end, host memory
    ck_assert_int_eq(fwd(yd, x + 1, y, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM),
                     CUDNN_STATUS_EXECUTION_FAILED);
    ck_assert_int_eq(fwd(yd, x, hy, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM),
                     CUDNN_STATUS_EXECUTION_FAILED);
    // a destroyed descriptor
    ck_assert_int_eq(cudnnDestroyTensorDescriptor(bad), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fwd(bad, x, y, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM),
                     CUDNN_STATUS_BAD_PARAM);
    ck_assert_int_eq(cudnnDestroyTensorDescriptor(bad), CUDNN_STATUS_BAD_PARAM);
    cudaFree(x), cudaFree(y), cudaFree(w);
    cudnnDestroyConvolutionDescriptor(cd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    ck_assert_int_eq(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnDestroy(h), CUDNN_STATUS_NOT_INITIALIZED);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("emu");
    TCase *tc = tcase_create("runtime");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_block_reduction);
    tcase_add_test(tc, test_missing_barrier_shows);
    tcase_add_test(tc, test_launches_from_threads);
    tcase_add_test(tc, test_thread_indices);
    tcase_add_test(tc, test_divergent_barrier_aborts);
    tcase_add_test(tc, test_warp_operations);
    tcase_add_test(tc, test_warp_reduction_dynamic_shared);
    tcase_add_test(tc, test_divergent_warp_operations_abort);
    tcase_add_test(tc, test_launch_configuration);
    tcase_add_test(tc, test_big_launch);
    tcase_add_test(tc, test_malloc_poison_and_tracking);
    tcase_add_test(tc, test_memory_accounting);
    tcase_add_test(tc, test_devices);
    tcase_add_test(tc, test_streams_events);
    tcase_add_test(tc, test_stream_queues_lazy);
    tcase_add_test(tc, test_stream_queues_lazy_first);
    tcase_add_test(tc, test_fault_injection);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_cost_check);
    suite_add_tcase(s, tc);
    TCase *blas = tcase_create("cublas");
    tcase_set_timeout(blas, 120);
    tcase_add_test(blas, test_sgemm);
    tcase_add_test(blas, test_sgemm_k0);
    tcase_add_test(blas, test_gemm_ex_bf16);
    tcase_add_test(blas, test_gemm_strided_batched_ex);
    tcase_add_test(blas, test_strided_batched_and_gemv);
    tcase_add_test(blas, test_tf32);
    tcase_add_test(blas, test_cudnn_checks);
    suite_add_tcase(s, blas);
    return s;
}
