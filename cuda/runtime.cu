// runtime.cu -- the runtime part of the CUDA backend (ddp_cuda.h): version
// and device queries, the sticky first-failure record behind DDP_CU and
// DDP_CUBLAS, the backend state (device, compute and copy streams, cuBLAS
// handle), device and pinned memory, the synchronous and asynchronous
// copies and the events that order the host and the copy stream after the
// compute stream.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bf16.h"
#include "ddp_cuda_rt.h"
#include "dnn.h"
#include "gemm.h"

#include <nvtx3/nvToolsExt.h>

struct ddp_cuda_state ddp_cuda_state_ = {-1, nullptr, nullptr, nullptr, nullptr, 0, 0};

// The first failure since the last clear; "" when none.
static char g_last_error[512];

struct ddp_cuda_event {
    cudaEvent_t ev;
};

int ddp_cuda_fail_(const char *call, const char *file, int line, const char *why)
{
    if (g_last_error[0] != '\0') return -1; // the first failure sticks
    const char *base = file ? strrchr(file, '/') : nullptr;
    base = base ? base + 1 : (file ? file : "?");
    // The call's name without its arguments: "cudaMemcpy(dst, ...)" -> "cudaMemcpy".
    size_t len = strcspn(call ? call : "?", "(");
    snprintf(g_last_error, sizeof g_last_error, "%.*s: %s (%s:%d)", (int)len, call ? call : "?",
             why ? why : "unknown error", base, line);
    return -1;
}

// A failure that is not a CUDA call's status (a bad argument, no init).
#define DDP_FAIL(call, why) ddp_cuda_fail_((call), __FILE__, __LINE__, (why))

static int not_bound(const char *call)
{
    if (ddp_cuda_state_.device >= 0) return 0;
    DDP_FAIL(call, "the backend is not initialised (ddp_cuda_init first)");
    return 1;
}

extern "C" {

void ddp_cuda_version_string(char *buf, size_t n)
{
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaError_t e = cudaDriverGetVersion(&drv);
    if (e != cudaSuccess || drv == 0)
        snprintf(buf, n, "runtime %d.%d, no driver", rt / 1000, (rt % 1000) / 10);
    else
        snprintf(buf, n, "runtime %d.%d, driver %d.%d", rt / 1000, (rt % 1000) / 10, drv / 1000,
                 (drv % 1000) / 10);
}

int ddp_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
    return n;
}

const char *ddp_cuda_error_string(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}

const char *ddp_cuda_last_error(void)
{
    return g_last_error;
}

void ddp_cuda_clear_error(void)
{
    g_last_error[0] = '\0';
    cudaGetLastError(); // and the runtime's, so the next launch check does not see it
}

int ddp_cuda_device_info(int device, ddp_cuda_device_info_t *info)
{
    memset(info, 0, sizeof *info);
    cudaDeviceProp prop;
    DDP_CU(cudaGetDeviceProperties(&prop, device));
    snprintf(info->name, sizeof info->name, "%.95s", prop.name);
    DDP_CU(cudaDeviceGetPCIBusId(info->pci, (int)sizeof info->pci, device));
    info->mem_total = prop.totalGlobalMem;
    info->sm_major = prop.major;
    info->sm_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    if (ddp_cuda_state_.device == device) {
        size_t free_b = 0, total_b = 0;
        DDP_CU(cudaMemGetInfo(&free_b, &total_b));
        info->mem_free = free_b;
    }
    return 0;
}

int ddp_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    if (not_bound("ddp_cuda_mem_info")) return -1;
    DDP_CU(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

int ddp_cuda_init(int device)
{
    if (ddp_cuda_state_.device >= 0) return DDP_FAIL("ddp_cuda_init", "called twice");
    char why[640];
    if (ddp_blas_load_(why, sizeof why) != 0) // cuBLAS, loaded by the processes that bind a GPU
        return ddp_cuda_fail_("dlopen cuBLAS", __FILE__, __LINE__, why);
    DDP_CU(cudaSetDevice(device));
    cudaStream_t s = nullptr, cs = nullptr;
    cublasHandle_t h = nullptr;
    DDP_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DDP_CU(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    DDP_CUBLAS(cublasCreate(&h));
    DDP_CUBLAS(cublasSetStream(h, s));
    DDP_CUBLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH)); // fp32 stays fp32 (no TF32)
    ddp_cuda_state_.device = device;
    ddp_cuda_state_.stream = s;
    ddp_cuda_state_.copy_stream = cs;
    ddp_cuda_state_.blas = h;
    // cuBLASLt, for GEMMs with their epilogue (linear.cu): optional
    cublasLtHandle_t lt = nullptr;
    if (ddp_blas_.lt_create && cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) lt = nullptr;
    ddp_cuda_state_.lt = lt;
    ddp_dnn_init_(); // cuDNN, for the convolutions (conv.cu): optional
    return 0;
}

int ddp_cuda_bound_device(void)
{
    return ddp_cuda_state_.device;
}

int ddp_cuda_set_bf16_gemm(int on)
{
    ddp_cuda_state_.bf16_gemm = on ? 1 : 0;
    ddp_bf16_memo_forget_();
    ddp_bf16_mirror_forget_();
    return 0;
}

uint64_t ddp_cuda_range_start(const char *name)
{
    ddp_cost_phase_(name);
    return (uint64_t)nvtxRangeStartA(name);
}

void ddp_cuda_range_end(uint64_t id)
{
    nvtxRangeEnd((nvtxRangeId_t)id);
}

int ddp_cuda_set_tf32(int on)
{
    if (ddp_cuda_state_.device < 0) return DDP_FAIL("ddp_cuda_set_tf32", "before ddp_cuda_init");
    DDP_CUBLAS(cublasSetMathMode(ddp_cuda_state_.blas,
                                 on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    ddp_cuda_state_.tf32 = on != 0;
    return 0;
}

void *ddp_cuda_compute_stream(void)
{
    return (void *)ddp_cuda_state_.stream;
}

void ddp_cuda_shutdown(void)
{
    if (ddp_cuda_state_.device < 0) return;
    cudaStreamSynchronize(ddp_cuda_state_.stream);
    cudaStreamSynchronize(ddp_cuda_state_.copy_stream);
    ddp_bf16_release_();
    ddp_lt_release_();
    ddp_dnn_shutdown_();
    if (ddp_cuda_state_.lt) cublasLtDestroy(ddp_cuda_state_.lt);
    if (ddp_cuda_state_.blas) cublasDestroy(ddp_cuda_state_.blas);
    ddp_cuda_state_.lt = nullptr;
    cudaStreamDestroy(ddp_cuda_state_.copy_stream);
    cudaStreamDestroy(ddp_cuda_state_.stream);
    ddp_cuda_state_.blas = nullptr;
    ddp_cuda_state_.stream = nullptr;
    ddp_cuda_state_.copy_stream = nullptr;
    ddp_cuda_state_.device = -1;
}

// ---- memory and ordering ---------------------------------------------------

// The scratch of two-pass sums (ddp_cuda_rt.h) on the bound device, grown
// as needed (cudaFree waits for the kernels still using the old one).
static double *part_ = nullptr;
static size_t part_cap_ = 0;
static int part_device_ = -1;

int ddp_cuda_partials_(size_t doubles, double **out)
{
    if (part_device_ != ddp_cuda_state_.device) {
        part_ = nullptr;
        part_cap_ = 0;
        part_device_ = ddp_cuda_state_.device;
    }
    if (doubles > part_cap_) {
        if (part_) DDP_CU(cudaFree(part_));
        part_ = nullptr;
        part_cap_ = 0;
        DDP_CU(cudaMalloc((void **)&part_, doubles * sizeof(double)));
        part_cap_ = doubles;
    }
    *out = part_;
    return 0;
}

int ddp_cuda_malloc(void **p, size_t bytes)
{
    *p = nullptr;
    if (not_bound("ddp_cuda_malloc")) return -1;
    void *q = nullptr;
    DDP_CU(cudaMalloc(&q, bytes ? bytes : 1));
    // cudaMalloc does not zero; the contract (compute.h alloc) does.  Done on
    // the compute stream and waited for, so the memory is zero for every
    // user: later ops on the stream, the copy stream and NCCL.
    cudaError_t e = cudaMemsetAsync(q, 0, bytes ? bytes : 1, ddp_cuda_state_.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ddp_cuda_state_.stream);
    if (e != cudaSuccess) {
        cudaFree(q);
        return ddp_cuda_fail_("cudaMemsetAsync", __FILE__, __LINE__, cudaGetErrorString(e));
    }
    *p = q;
    return 0;
}

int ddp_cuda_free(void *p)
{
    if (!p) return 0;
    // Work queued on the streams may still use p; cudaFree waits for the
    // device, as the contract's "free" expects.
    // the parameters' buffer goes: its mirror with it
    if (p == ddp_bf16_mirror_base_() && ddp_bf16_mirror_set_(nullptr, 0) != 0) return -1;
    DDP_CU(cudaFree(p));
    ddp_bf16_memo_forget_(); // p's addresses may come back with other data
    ddp_bf16_act_drop_(p);
    return 0;
}

int ddp_cuda_host_alloc(void **p, size_t bytes)
{
    *p = nullptr;
    // Running out of pinned memory is not the backend's failure (the caller
    // falls back to pageable memory): returned, not recorded, and the
    // runtime's last error cleared so the next launch check does not see it.
    if (cudaMallocHost(p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        *p = nullptr;
        return -1;
    }
    return 0;
}

int ddp_cuda_host_free(void *p)
{
    if (!p) return 0;
    DDP_CU(cudaFreeHost(p));
    return 0;
}

int ddp_cuda_upload(void *dst, const void *host_src, size_t bytes)
{
    if (bytes == 0) return 0;
    if (not_bound("ddp_cuda_upload")) return -1;
    cudaStream_t s = ddp_cuda_state_.stream;
    DDP_CU(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s));
    DDP_CU(cudaStreamSynchronize(s));
    ddp_bf16_mirror_stale_(dst, bytes);
    return 0;
}

int ddp_cuda_bf16_params(const float *params, size_t count)
{
    if (params && count && not_bound("ddp_cuda_bf16_params")) return -1;
    return ddp_bf16_mirror_set_(params, count);
}

int ddp_cuda_act_bf16(float *y, size_t count)
{
    if (not_bound("ddp_cuda_act_bf16")) return -1;
    if (!ddp_cuda_state_.bf16_gemm)
        return DDP_FAIL("ddp_cuda_act_bf16", "a bf16 layer output without --precision bf16");
    ddp_bf16_act_set_(y, count);
    return 0;
}

int ddp_cuda_act_bias(float *y, const float *b)
{
    if (not_bound("ddp_cuda_act_bias")) return -1;
    if (ddp_bf16_act_carry_(y, b) != 0)
        return DDP_FAIL("ddp_cuda_act_bias", "a carried bias for an output not kept in bf16");
    return 0;
}

int ddp_cuda_act_copy16(float *y, size_t count)
{
    if (not_bound("ddp_cuda_act_copy16")) return -1;
    if (count && ddp_bf16_act_at_(y))
        return DDP_FAIL("ddp_cuda_act_copy16", "a bf16 copy of an output kept in bf16");
    return ddp_bf16_copy_set_(y, count);
}

int ddp_cuda_grad_bf16(float *g, size_t count)
{
    if (not_bound("ddp_cuda_grad_bf16")) return -1;
    if (count && !ddp_cuda_state_.bf16_gemm)
        return DDP_FAIL("ddp_cuda_grad_bf16", "a bf16 gradient without --precision bf16");
    ddp_bf16_act_set_(g, count);
    return 0;
}

int ddp_cuda_params_written(const float *p, size_t count)
{
    ddp_bf16_mirror_stale_(p, count * sizeof(float));
    return 0;
}

int ddp_cuda_download(void *host_dst, const void *src, size_t bytes)
{
    if (bytes == 0) return 0;
    if (not_bound("ddp_cuda_download")) return -1;
    cudaStream_t s = ddp_cuda_state_.stream;
    DDP_CU(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s));
    DDP_CU(cudaStreamSynchronize(s));
    return 0;
}

int ddp_cuda_download_async(void *host_dst, const void *src, size_t bytes, ddp_cuda_event_t *done)
{
    if (not_bound("ddp_cuda_download_async")) return -1;
    cudaStream_t s = ddp_cuda_state_.stream;
    if (bytes) DDP_CU(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s));
    if (done) DDP_CU(cudaEventRecord(done->ev, s));
    return 0;
}

int ddp_cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return 0;
    if (not_bound("ddp_cuda_copy")) return -1;
    cudaStream_t s = ddp_cuda_state_.stream;
    ddp_cost_copy_("cudaMemcpyAsync", (double)bytes, (double)bytes);
    DDP_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    ddp_bf16_mirror_stale_(dst, bytes);
    return 0;
}

int ddp_cuda_zero(void *p, size_t bytes)
{
    if (bytes == 0) return 0;
    if (not_bound("ddp_cuda_zero")) return -1;
    cudaStream_t s = ddp_cuda_state_.stream;
    ddp_cost_copy_("cudaMemsetAsync", 0, (double)bytes);
    DDP_CU(cudaMemsetAsync(p, 0, bytes, s));
    ddp_bf16_mirror_stale_(p, bytes);
    return 0;
}

int ddp_cuda_sync(void)
{
    if (ddp_cuda_state_.device < 0) return 0;
    DDP_CU(cudaStreamSynchronize(ddp_cuda_state_.stream));
    DDP_CU(cudaStreamSynchronize(ddp_cuda_state_.copy_stream));
    return 0;
}

int ddp_cuda_upload_async(void *dst, const void *host_src, size_t bytes,
                          const ddp_cuda_event_t *reuse, ddp_cuda_event_t *done)
{
    if (not_bound("ddp_cuda_upload_async")) return -1;
    ddp_bf16_mirror_stale_(dst, bytes);
    cudaStream_t cs = ddp_cuda_state_.copy_stream;
    if (bytes == 0) {
        // nothing to copy; `done` still marks the uploads before it
        if (done) DDP_CU(cudaEventRecord(done->ev, cs));
        return 0;
    }
    // The copy stream waits for the work that last used dst (reuse: its last
    // record on the compute stream; an event never recorded is complete), or
    // without one for all compute queued so far; then it copies, and the
    // compute stream waits for the copy before its next op.  With reuse the
    // copy overlaps the compute queued after reuse's record (the previous
    // micro-batch, on the other device batch).
    cudaEvent_t before = nullptr, after = nullptr;
    cudaError_t e = cudaSuccess;
    const char *call = "cudaEventCreateWithFlags";
    if (!reuse) e = cudaEventCreateWithFlags(&before, cudaEventDisableTiming);
    if (e == cudaSuccess && !done) e = cudaEventCreateWithFlags(&after, cudaEventDisableTiming);
    cudaEvent_t wait_for = reuse ? reuse->ev : before, mark = done ? done->ev : after;
    if (e == cudaSuccess && !reuse) {
        call = "cudaEventRecord";
        e = cudaEventRecord(before, ddp_cuda_state_.stream);
    }
    if (e == cudaSuccess) {
        call = "cudaStreamWaitEvent";
        e = cudaStreamWaitEvent(cs, wait_for, 0);
    }
    if (e == cudaSuccess) {
        call = "cudaMemcpyAsync";
        e = cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cs);
    }
    if (e == cudaSuccess) {
        call = "cudaEventRecord";
        e = cudaEventRecord(mark, cs);
    }
    if (e == cudaSuccess) {
        call = "cudaStreamWaitEvent";
        e = cudaStreamWaitEvent(ddp_cuda_state_.stream, mark, 0);
    }
    // Destroying an event whose record is pending is allowed: its resources
    // are released once it completes.
    if (before) cudaEventDestroy(before);
    if (after) cudaEventDestroy(after);
    if (e != cudaSuccess) return ddp_cuda_fail_(call, __FILE__, __LINE__, cudaGetErrorString(e));
    return 0;
}

int ddp_cuda_event_create(ddp_cuda_event_t **e)
{
    *e = nullptr;
    ddp_cuda_event_t *ev = (ddp_cuda_event_t *)malloc(sizeof *ev);
    if (!ev) return DDP_FAIL("ddp_cuda_event_create", "out of host memory");
    cudaError_t r = cudaEventCreateWithFlags(&ev->ev, cudaEventDisableTiming);
    if (r != cudaSuccess) {
        free(ev);
        return ddp_cuda_fail_("cudaEventCreateWithFlags", __FILE__, __LINE__,
                              cudaGetErrorString(r));
    }
    *e = ev;
    return 0;
}

int ddp_cuda_event_destroy(ddp_cuda_event_t *e)
{
    if (!e) return 0;
    cudaError_t r = cudaEventDestroy(e->ev);
    free(e);
    if (r != cudaSuccess)
        return ddp_cuda_fail_("cudaEventDestroy", __FILE__, __LINE__, cudaGetErrorString(r));
    return 0;
}

int ddp_cuda_event_record(ddp_cuda_event_t *e)
{
    DDP_CU(cudaEventRecord(e->ev, ddp_cuda_state_.stream));
    return 0;
}

int ddp_cuda_event_wait(ddp_cuda_event_t *e)
{
    DDP_CU(cudaEventSynchronize(e->ev));
    return 0;
}

void *ddp_cuda_event_handle(ddp_cuda_event_t *e)
{
    return e ? (void *)e->ev : nullptr;
}

} // extern "C"
