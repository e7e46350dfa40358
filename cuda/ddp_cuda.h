/* ddp_cuda.h -- the C face of the CUDA compute backend: extern "C" launchers
 * only.  src/compute/compute_cuda.c builds the compute ops table (compute.h) over
 * them; nothing else of CUDA crosses into the C code.
 *
 * One device per process: ddp_cuda_init binds it and creates the compute
 * stream, the copy stream and the cuBLAS handle; every launcher queues its
 * work on the compute stream (as compute.h's "Ordering" asks: ops run in
 * call order, as on one stream).  All pointers are device pointers unless
 * named host_*.  Dimensions and semantics are exactly those of the op of
 * the same name in compute.h.
 *
 * Errors: every launcher returns 0, or -1 after a CUDA or cuBLAS call failed
 * (checked at the call: the launch itself, or a kernel error of earlier work
 * that the runtime reports now).  ddp_cuda_last_error() then says which call,
 * where and why: "cublasSgemm: CUBLAS_STATUS_EXECUTION_FAILED (linear.cu:57)".
 * The first failure sticks until ddp_cuda_clear_error: later failures do not
 * overwrite it.
 *
 * The same sources build two ways (cuda/Makefile.am): with nvcc against the
 * CUDA toolkit (libddpcuda.a, the real backend), and with the C++ compiler
 * against the CPU emulation of the runtime, cuBLAS and NCCL in tests/emu
 * (libddpcuda_emu.a, for the tests on machines without a GPU). */
#ifndef DDP_CUDA_H
#define DDP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime, devices, errors (runtime.cu) ----------------------------- */

/* "runtime X.Y, driver X.Y" (or "..., no driver"). */
void ddp_cuda_version_string(char *buf, size_t n);
/* Number of visible GPUs (0 when none or no driver). */
int ddp_cuda_device_count(void);
/* A short message for a cudaError_t value. */
const char *ddp_cuda_error_string(int err);
/* The first failure since the last clear ("" when none). */
const char *ddp_cuda_last_error(void);
void ddp_cuda_clear_error(void);

typedef struct ddp_cuda_device_info {
    char name[96];   /* "NVIDIA H200" */
    char pci[32];    /* "0000:19:00.0" */
    size_t mem_total; /* bytes */
    size_t mem_free;  /* bytes, now (0 when not bound yet) */
    int sm_major, sm_minor, sm_count;
} ddp_cuda_device_info_t;
int ddp_cuda_device_info(int device, ddp_cuda_device_info_t *info);
/* Free and total memory of the bound device now (cudaMemGetInfo). */
int ddp_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* Bind `device` (cudaSetDevice), then create the streams and the cuBLAS
 * handle.  Call once, before any other launcher and before NCCL.  cuBLAS
 * is loaded here (dlopen, cuda/blas.h), not linked. */
int ddp_cuda_init(int device);
/* Load cuBLAS now, as ddp_cuda_init does (no GPU needed): 0, or -1 with why
 * in why[n].  For the tests: the library and every entry point found. */
int ddp_cuda_load_blas(char *why, size_t n);
int ddp_cuda_bound_device(void); /* -1 before ddp_cuda_init */
/* GEMM inputs in bf16 (fp32 accumulation, fp32 weights kept) when on. */
int ddp_cuda_set_bf16_gemm(int on);
/* 1 when cuBLASLt was loaded and its handle made at ddp_cuda_init: dense
 * layers' forwards then run their bias and ReLU in the GEMM's epilogue. */
int ddp_cuda_lt_loaded(void);
/* Forget the cuBLASLt plans kept for dense layers' forwards (linear.cu):
 * each shape asks cuBLASLt for its algorithm again at its next forward.
 * For tests (with DDP_EMU_FAIL making that heuristic fail). */
void ddp_cuda_lt_forget(void);
/* 1 when cuDNN was loaded and its handle made at ddp_cuda_init (cuda/dnn.h):
 * convolutions then run through it where it has a deterministic algorithm
 * for them, else as im2col + GEMM.  DDP_CUDA_CONV=im2col in the environment
 * at ddp_cuda_init leaves cuDNN unloaded. */
int ddp_cuda_dnn_loaded(void);
/* 1 when convolution nets' activations may be kept in bf16 under bf16
 * GEMMs (ddp_cuda_act_bf16): cuDNN was loaded, its operands and results
 * are bf16 as they lie, and DDP_CUDA_CONV_ACTS=fp32 is not in the
 * environment (which keeps them in fp32, rounded and widened around each
 * cuDNN call as before). */
int ddp_cuda_conv_acts_bf16(void);
/* For tests: convolutions through cuDNN (1, as loaded) or never (0); and
 * forget the kept plans (each shape asks cuDNN's heuristics again). */
void ddp_cuda_dnn_enable(int on);
void ddp_cuda_dnn_forget(void);
/* GEMM inputs rounded to TF32 on the tensor cores when on: the cuBLAS
 * handle's math mode (CUBLAS_TF32_TENSOR_OP_MATH; off: CUBLAS_DEFAULT_MATH,
 * fp32 throughout); after init. */
int ddp_cuda_set_tf32(int on);
/* Profiler ranges (NVTX): a named range and its id, and its end (the
 * compute ops' range_start/range_end). */
uint64_t ddp_cuda_range_start(const char *name);
void ddp_cuda_range_end(uint64_t id);
/* The compute stream (a cudaStream_t), for the NCCL backend. */
void *ddp_cuda_compute_stream(void);
void ddp_cuda_shutdown(void);

/* ---- memory and ordering (runtime.cu) ---------------------------------- */
int ddp_cuda_malloc(void **p, size_t bytes); /* zero-filled */
int ddp_cuda_free(void *p);
/* Pinned host memory (cudaMallocHost); a failure is returned, not recorded
 * as the sticky first failure (the caller falls back to pageable memory). */
int ddp_cuda_host_alloc(void **p, size_t bytes);
int ddp_cuda_host_free(void *p);
/* Complete when they return (compute.h). */
int ddp_cuda_upload(void *dst, const void *host_src, size_t bytes);
int ddp_cuda_download(void *host_dst, const void *src, size_t bytes);
/* Device to device, queued on the compute stream like every op (compute.h):
 * the host does not wait for them. */
int ddp_cuda_copy(void *dst, const void *src, size_t bytes);
int ddp_cuda_zero(void *p, size_t bytes);
int ddp_cuda_sync(void);
typedef struct ddp_cuda_event ddp_cuda_event_t;
/* Queued on the copy stream after the work marked by `reuse` (its last
 * record on the compute stream; NULL: after all compute queued so far);
 * `done` (may be NULL) is recorded on the copy stream after the copy, and
 * the compute stream waits for the copy before its next op (compute.h,
 * "Ordering"). */
int ddp_cuda_upload_async(void *dst, const void *host_src, size_t bytes,
                          const ddp_cuda_event_t *reuse, ddp_cuda_event_t *done);

// The copy to the host after the work queued so far on the compute stream,
// then `done` recorded there: host_dst (pinned, for it to be asynchronous)
// holds the bytes once the host has waited for `done`.
int ddp_cuda_download_async(void *host_dst, const void *src, size_t bytes, ddp_cuda_event_t *done);
// --precision bf16: [params, params + count) is the trainer's parameter
// buffer; the optimizer keeps a bf16 copy of it that the forwards' GEMMs
// read (cuda/bf16.h, the mirror; count 0: none).  A write into it other
// than by upload, copy, zero and the optimizer launchers (a collective's,
// another launcher's) is reported with ddp_cuda_params_written, so the copy
// of that range is made again.
int ddp_cuda_bf16_params(const float *params, size_t count);
int ddp_cuda_params_written(const float *p, size_t count);
// Under bf16 GEMMs: [y, y + 2 count bytes) is a dense layer's output that
// only dense layers read (as their input, and its own backward as the
// fused ReLU's mask): ddp_cuda_linear_fwd writes it as count bf16 values
// (the fp32 result rounded once, as the reader's GEMM would round it) and
// ddp_cuda_linear_fwd / _bwd read it as such where it is x or relu_y (the
// ReLU's mask then that of the bf16 value).  Or a convolution's output
// (no bias) that only a BatchNorm reads, or a BatchNorm's that only a
// convolution reads (ddp_cuda_conv_acts_bf16): the conv and BatchNorm
// launchers write and read it as bf16 (act16.h).  Forgotten when y is freed.
int ddp_cuda_act_bf16(float *y, size_t count);
// y, such a convolution's output that only a BatchNorm reads, is written by
// ddp_cuda_conv_fwd without the convolution's bias b, which the BatchNorm
// launchers add to each value as they read it, in fp32 (act16.h): the
// values the convolution's fp32 output would hold (its bf16 result
// widened, plus the bias).  b NULL: none.  After ddp_cuda_act_bf16(y).
// Where the gradient for y is kept in bf16 too (ddp_cuda_grad_bf16), the
// BatchNorm's ddp_cuda_bn_bwd_data (or _maxpool_bwd_data) that writes it
// also sums its fp32 values per plane, which the convolution's
// ddp_cuda_conv_bwd, the next to read it, takes for its bias gradient.
int ddp_cuda_act_bias(float *y, const float *b);
// The gradient of such a convolution net's output: from now [g, g + 2 count
// bytes) holds count bf16 values, which the convolution or BatchNorm
// backward that computes it writes and the one that reads it as dy reads;
// count 0: g holds fp32 again (the reader ran).  g is a gradient buffer of
// the trainer's, reused for other layers' fp32 gradients after.
int ddp_cuda_grad_bf16(float *g, size_t count);
// y, an fp32 layer output of count values that convolutions read (and
// other layers, as fp32), gets a bf16 copy beside it (count * 2 bytes
// allocated here), which the launcher that writes y through act16.h
// (ddp_cuda_bn_fwd, _bn_maxpool_fwd, _maxpool_fwd, _add) writes too, the
// rounding of each value; ddp_cuda_conv_fwd and _conv_bwd then take it as
// their bf16 input under bf16 GEMMs instead of rounding y for each
// convolution.  count 0: none (freed).  Forgotten when y is freed.
int ddp_cuda_act_copy16(float *y, size_t count);
int ddp_cuda_event_create(ddp_cuda_event_t **e);
int ddp_cuda_event_destroy(ddp_cuda_event_t *e);
int ddp_cuda_event_record(ddp_cuda_event_t *e); /* on the compute stream */
int ddp_cuda_event_wait(ddp_cuda_event_t *e);   /* the host waits */
/* The raw cudaEvent_t, for the NCCL backend's stream waits. */
void *ddp_cuda_event_handle(ddp_cuda_event_t *e);

/* ---- dense layers and convolution (linear.cu, conv.cu) ------------------ */
int ddp_cuda_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                        float *y, int relu);
int ddp_cuda_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float *db, float beta, const float *relu_y,
                        void *ws);
/* linear_bwd's ws with relu_y: n * out floats, 0 under bf16 GEMMs (the
 * masked gradient goes into the bf16 copy, bf16.h's scratch) */
size_t ddp_cuda_linear_ws_bytes(int n, int out);
/* Convolution dims as compute.h's conv_dims_t (same field order). */
typedef struct ddp_cuda_conv {
    int n, c, h, w, oc, k, stride, pad, oh, ow;
} ddp_cuda_conv_t;
size_t ddp_cuda_conv_ws_bytes(const ddp_cuda_conv_t *d);
/* The most samples a convolution's forward or backward takes at once (a
 * group of cuDNN's, or of im2col's where cuDNN is not loaded): a group
 * cuDNN refuses widens that many samples of an input, output or gradient
 * kept in bf16 into fp32 scratch. */
int ddp_cuda_conv_group_samples(const ddp_cuda_conv_t *d);
int ddp_cuda_conv_fwd(const ddp_cuda_conv_t *d, const float *x, const float *w, const float *b,
                      float *y, void *ws);
int ddp_cuda_conv_bwd(const ddp_cuda_conv_t *d, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, float beta, void *ws);

/* ---- pooling (pool.cu); dims as compute.h's pool_dims_t (same field order) */
typedef struct ddp_cuda_pool {
    int n, c, h, w, k, stride, pad, oh, ow;
} ddp_cuda_pool_t;
int ddp_cuda_maxpool_fwd(const ddp_cuda_pool_t *d, const float *x, float *y, int32_t *argmax);
int ddp_cuda_maxpool_bwd(const ddp_cuda_pool_t *d, const float *dy, const int32_t *argmax,
                         float *dx);
int ddp_cuda_avgpool_fwd(const ddp_cuda_pool_t *d, const float *x, float *y);
int ddp_cuda_avgpool_bwd(const ddp_cuda_pool_t *d, const float *dy, float *dx);
int ddp_cuda_gap_fwd(int n, int c, int hw, const float *x, float *y);
int ddp_cuda_gap_bwd(int n, int c, int hw, const float *dy, float *dx);

/* ---- batch normalisation (bn.cu); stats and gstats are device doubles --- */
int ddp_cuda_bn_stats(int n, int c, int hw, const float *x, double *stats);
int ddp_cuda_bn_finalize(int c, const double *stats, double count, float eps, float momentum,
                         int update_running, float *mean, float *invstd, float *running_mean,
                         float *running_var);
int ddp_cuda_bn_eval_params(int c, const float *running_mean, const float *running_var, float eps,
                            float *mean, float *invstd);
/* ddp_cuda_bn_stats then ddp_cuda_bn_finalize on these statistics (no
 * SyncBatchNorm between), the same values, the second pass of the sums and
 * the parameters in one launch. */
int ddp_cuda_bn_stats_finalize(int n, int c, int hw, const float *x, double *stats, double count,
                               float eps, float momentum, int update_running, float *mean,
                               float *invstd, float *running_mean, float *running_var);
/* relu, relu_gamma, relu_beta: a ReLU fused after the BatchNorm (compute.h) */
int ddp_cuda_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                    const float *gamma, const float *beta_, float *y, int relu, const float *res);
int ddp_cuda_bn_bwd_stats(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                          const float *invstd, double *gstats, float *dgamma, float *dbeta,
                          float beta, const float *relu_gamma, const float *relu_beta);
int ddp_cuda_bn_bwd_data(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                         const float *invstd, const float *gamma, const double *gstats,
                         double count, float *dx, const float *relu_beta);
/* A BatchNorm (with its fused ReLU: relu) whose only reader is a max
 * pooling over d (d's n, c, h, w are the BatchNorm's, h * w > 1): the
 * pooled output y and argmax of its output, which is never written (as
 * bn_fwd then maxpool_fwd, the same bits); and its backward with dy the
 * gradient of the pooled output (as maxpool_bwd then bn_bwd_stats and
 * bn_bwd_data, the same bits, without maxpool_bwd's dx).  argmax NULL:
 * the forward writes none and the backward finds each window's maximum
 * again from x, mean, invstd, gamma, beta_ and relu (the forward's): the
 * same bits, for 4 bytes a window less written and twice less read, and
 * a scan of the window for each cell (cheap where windows do not
 * overlap: stride >= k). */
int ddp_cuda_bn_maxpool_fwd(const ddp_cuda_pool_t *d, const float *x, const float *mean,
                            const float *invstd, const float *gamma, const float *beta_, int relu,
                            float *y, int32_t *argmax);
int ddp_cuda_bn_maxpool_bwd_stats(const ddp_cuda_pool_t *d, const int32_t *argmax,
                                  const float *x, const float *dy, const float *mean,
                                  const float *invstd, const float *gamma, const float *beta_,
                                  int relu, double *gstats, float *dgamma, float *dbeta,
                                  float beta);
int ddp_cuda_bn_maxpool_bwd_data(const ddp_cuda_pool_t *d, const int32_t *argmax,
                                 const float *x, const float *dy, const float *mean,
                                 const float *invstd, const float *gamma, const float *beta_,
                                 int relu, const double *gstats, double count, float *dx);
/* 1 unless DDP_CUDA_BN_MAXPOOL=0 is in the environment: whether the model
 * runs a BatchNorm and the max pooling after it as the three above (0:
 * each layer alone, as before; for comparisons). */
int ddp_cuda_bn_maxpool(void);

/* ---- elementwise, dropout, casts (elementwise.cu) ----------------------- */
int ddp_cuda_add(size_t count, const float *a, const float *b, float *y, int relu);
int ddp_cuda_relu_fwd(size_t count, const float *x, float *y);
int ddp_cuda_relu_bwd(size_t count, const float *x, const float *dy, float *dx, const float *dy2);
int ddp_cuda_gelu_fwd(size_t count, const float *x, float *y);
int ddp_cuda_gelu_bwd(size_t count, const float *x, const float *dy, float *dx);
int ddp_cuda_dropout_fwd(int n, size_t features, const float *x, float *y, float p, uint64_t seed,
                         uint64_t step, uint32_t layer, const int64_t *sample_idx);
int ddp_cuda_dropout_bwd(int n, size_t features, const float *dy, float *dx, float p,
                         uint64_t seed, uint64_t step, uint32_t layer, const int64_t *sample_idx);
int ddp_cuda_scale(size_t count, float *x, float alpha);
int ddp_cuda_to_half(size_t count, const float *x, uint16_t *h, int bf16);
int ddp_cuda_from_half(size_t count, const uint16_t *h, float *x, int bf16);

/* ---- losses (loss.cu); acc is device doubles ---------------------------- */
int ddp_cuda_xent(int n, int classes, const float *logits, const int32_t *labels, float smoothing,
                  float grad_scale, float *dlogits, double *acc);
/* The same for a dense last layer under bf16 GEMMs: the gradient is not
 * written to dlogits but kept, as bf16, for that layer's next
 * ddp_cuda_linear_bwd (dy = dlogits), with its column sums for the bias
 * gradient (cuda/bf16.h, ddp_bf16_dy): one pass less over the gradient
 * each way.  Shapes it does not cover (classes up to 1024 or above 8192, not a
 * multiple of 4, unaligned logits) run ddp_cuda_xent. */
int ddp_cuda_xent_dense(int n, int classes, const float *logits, const int32_t *labels,
                        float smoothing, float grad_scale, float *dlogits, double *acc);
int ddp_cuda_mse(int n, int k, const float *pred, const float *target, float grad_scale,
                 float *dpred, double *acc);

/* ---- optimizers and reductions (optim.cu, reduce.cu) -------------------- */
int ddp_cuda_sgd_step(size_t count, float *p, const float *g, float *buf, float lr,
                      float momentum, int nesterov, float wd, int first);
int ddp_cuda_adamw_step(size_t count, float *p, const float *g, float *m, float *v, float lr,
                        float beta1, float beta2, float eps, float wd, int64_t t);
/* Results to the host (they wait for the work before them). */
int ddp_cuda_sumsq(size_t count, const float *x, double *host_result);
/* host_result[i] = the sumsq of x[i][0, count[i]) for i < n, the same bits
 * as ddp_cuda_sumsq of each, with one wait for the device for all of them
 * (the gradient norm's pieces, --clip-grad-norm). */
int ddp_cuda_sumsq_many(int n, const float *const *x, const size_t *count, double *host_result);
int ddp_cuda_all_finite(size_t count, const float *x, int *host_result);

/* ---- what the device operations cost (cost.cu) ------------------------- */
/* Every kernel launch and GEMM declares the bytes of device memory it reads
 * and writes and the FLOPs it does (DDP_COST, ddp_cuda_rt.h), from its
 * sizes.  While recording is on, each launch, GEMM and device copy or fill
 * of the launchers above adds one entry to a log, in order; bench_gpu
 * models a step on an H200 from it (src/compute/gpu_model.h).  On the CPU
 * emulation, DDP_EMU_COST_CHECK=1 holds every declaration against the
 * pages the operation really touches (tests/emu/emu_cost.cc). */
typedef enum { DDP_COST_KERNEL, DDP_COST_GEMM, DDP_COST_COPY } ddp_cuda_cost_kind_t;
/* The units the FLOPs run on: CUDA cores in fp32, tensor cores in TF32 or bf16. */
typedef enum { DDP_MATH_FP32, DDP_MATH_TF32, DDP_MATH_BF16 } ddp_cuda_math_t;
typedef struct ddp_cuda_cost {
    const char *name; /* the kernel, "cublasSgemm", "cublasGemmEx", "cudaMemcpyAsync", ... */
    ddp_cuda_cost_kind_t kind;
    ddp_cuda_math_t math;
    int declared;              /* 0: launched without a DDP_COST (a bug) */
    unsigned long long blocks; /* the grid's blocks; a GEMM's 128x128 output tiles x k/512 */
    unsigned threads;          /* per block (0 for a GEMM or a copy) */
    double read, written;      /* bytes of device memory */
    double flops;
} ddp_cuda_cost_t;
/* on: empty the log and record from now; 0: stop recording (the log stays). */
void ddp_cuda_cost_record(int on);
/* The log's entries (valid until the next ddp_cuda_cost_record(1)). */
size_t ddp_cuda_cost_log(const ddp_cuda_cost_t **entries);
/* Steps (DDP_CUDA_MODEL): with on, the operations of each training step
 * are kept apart, a step being what runs in the phases data wait, forward,
 * backward, optimizer and end-of-step work (the profiler ranges of
 * ddp_cuda_range_start: the trainer's phases; not evaluation, checkpoints
 * or start-up) from its first data wait or forward to its end-of-step
 * work: its micro-batches, and the next step's batch read and uploaded
 * inside its optimizer phase, are one step. */
void ddp_cuda_cost_steps(int on);
/* The last complete step's entries, and how many steps have completed. */
size_t ddp_cuda_cost_last_step(const ddp_cuda_cost_t **entries, long *steps);

#ifdef __cplusplus
}
#endif

#endif
