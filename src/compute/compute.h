/* compute.h -- the compute backend: an ops table over device memory.
 *
 * Every layer, loss and optimizer kernel the trainer runs goes through one
 * of these tables, so the training loop never branches on the device.  The
 * CPU backend (cpu/compute_cpu.c) uses BLAS and plain loops; the CUDA
 * backend (compute_cuda.c) fills the same table over the kernels in cuda/.  All pointers are
 * device pointers of the backend (host memory for "cpu"); all tensors are
 * dense row-major float32, images NCHW.
 *
 * Memory: the backend allocates every buffer it computes on (parameters,
 * gradients, activations, optimizer state, batches) and says what kind of
 * memory that is (mem_kind, memkind.h).  The host reads and writes device
 * memory only through upload/download.  The one exception is a capability
 * of the comm backend: with host memory and COMM_CAP_NODE_SHARED_MEMORY
 * (comm.h) the trainer takes parameters, gradients and optimizer state from
 * the comm backend instead, so that the fused all-reduce + optimizer can
 * work on them in place; they are host memory like the backend's own.
 *
 * Ordering.  Ops run in the order they are called, as if on one stream: an
 * op sees everything the ops called before it wrote (the CPU backend does
 * each op before it returns; a GPU backend queues them on one stream).
 * Anything other than a later op -- the host, the loader, the comm backend
 * -- sees the backend's work only through events:
 *   - upload_async(dst, src, bytes, reuse, done) may return before it has
 *     read host_src, and it may write dst before the ops called before it
 *     are done -- as soon as the work marked by the last record of `reuse`
 *     is done (an event never recorded marks nothing; reuse == NULL: all
 *     work called before the upload).  So the caller records `reuse` after
 *     the last op that reads or writes dst, and passes the same event with
 *     every upload into dst; in between only ops that are complete when
 *     they return (download, below) may touch dst.  `done` (not NULL) is
 *     recorded after the copy: it completes when this upload and the
 *     uploads called before it are done, not waiting for any op.  Until
 *     `done`, or an event recorded after the upload, has been waited for
 *     (event_wait), host_src must stay as it is and no op may read dst:
 *     the trainer waits before it computes on a batch and before it hands
 *     the loader's buffer back (trainer_upload_wait, step.c and
 *     evaluate.c).  It computes on two device batches in turn, each with
 *     its `reuse` event, so the upload of a micro-batch overlaps the
 *     compute of the one before it on a GPU.
 *   - memory an op writes may be read other than by a later op (the
 *     all-reduce of a gradient bucket, a host read) only after an event
 *     recorded after the op has been waited for: the reducer records and
 *     waits for one before it starts the all-reduce of buckets whose
 *     gradients are complete (reducer.c).  download, sumsq and all_finite
 *     wait for everything before them themselves.
 *   - download_async(host_dst, src, bytes, done) reads src after the ops
 *     called before it, as an op does, into host_dst (staging memory,
 *     below, for it to be asynchronous on a GPU), and records `done` after
 *     the copy: host_dst holds the bytes once `done` has been waited for,
 *     not before (the non-finite guard reads each step's losses so, one
 *     step late, and the host never waits for the step it just queued).
 *   - upload and download are complete when they return; copy and zero
 *     (device to device) are ops like the others: later ops see them, the
 *     host and the comm backend through an event (on a GPU they do not
 *     make the host wait, so they cost nothing on the step's path).
 * On the CPU backend the events cost nothing (its ops are done when they
 * return); the test backend in tests/doubles/compute_lazy.c delays uploads and
 * gradient writes until the event is waited for, wipes a device batch once
 * its `reuse` event is recorded, and refuses an upload whose `reuse` was
 * recorded before dst's last upload landed, so a missing wait or a wrong
 * pairing of buffer and event changes the results there.
 *
 * Staging memory: host_alloc hands out host memory the device copies from
 * fast and asynchronously (CUDA: pinned, cudaMallocHost); the loader keeps
 * its batches in it (loader_opts_t).  NULL on the CPU backend: plain malloc.
 *
 * Gradient accumulation: every *_bwd that produces parameter gradients takes
 * `beta`: grad = beta * grad + new; beta = 0 overwrites (the first
 * micro-batch), beta = 1 accumulates.  Input gradients (dx) are always
 * overwritten; dx == NULL means "not needed" (the first layer).
 * Every op must accept n == 0 (a rank with no samples in a step).
 */
#ifndef DDP_COMPUTE_H
#define DDP_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "memkind.h"
#include "status.h"

typedef struct conv_dims {
    int n, c, h, w;  /* input  [n, c, h, w] */
    int oc, k;       /* weight [oc, c, k, k], bias [oc] */
    int stride, pad; /* zero padding on every side */
    int oh, ow;      /* output [n, oc, oh, ow] */
} conv_dims_t;

/* Pooling: square windows, floor mode (PyTorch's defaults), so
 * oh = (h + 2 pad - k) / stride + 1.  Max pooling pads with -inf, as
 * PyTorch's MaxPool2d: a padded cell never wins, and argmax indexes the
 * unpadded input plane (iy*w + ix).  PyTorch requires pad <= k/2, so every
 * window holds an input cell; the kernels stay inside the plane for any
 * pad (a window with no input cell, pad >= k: y = -inf, argmax = -1, which
 * backward skips).  Average pooling takes pad == 0 only (the model refuses
 * an avgpool with padding). */
typedef struct pool_dims {
    int n, c, h, w; /* input  [n, c, h, w] */
    int k, stride;  /* square window */
    int pad;        /* implicit -inf on every side (max pooling only) */
    int oh, ow;     /* output [n, c, oh, ow], floor mode */
} pool_dims_t;

typedef struct compute_event compute_event_t; /* backend-defined (see "Ordering") */

typedef struct compute_ops {
    const char *name;
    ddp_mem_kind_t mem_kind; /* what alloc hands out */
    /* Prepare the backend for this process: the CPU backend sets BLAS to one
     * thread unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS says otherwise
     * (one rank per core); a GPU backend picks the device of the local rank.
     * `describe` receives a short text for the start-up table. */
    ddp_status_t (*init)(int local_rank, int local_size, char *describe, size_t n);
    /* The first failure of an op since init, as a status whose message names
     * the call, file and line (a GPU backend learns of failures after the op
     * has returned, so ops cannot return them); DDP_OK when none.  The
     * trainer asks after every step and before it reads results.  NULL: ops
     * never fail (cpu). */
    ddp_status_t (*check)(void);
    /* The physical device this process computes on after init, as a PCI bus
     * id ("0000:19:00.0"), so start-up can refuse two ranks of a node on one
     * GPU; "" for host memory.  NULL: host memory. */
    const char *(*device_id)(void);
    /* Devices this backend can see (before init too); a device backend
     * with none cannot run (compute_pick).  NULL: a host backend, which
     * always can. */
    int (*device_count)(void);
    /* --precision bf16: GEMM and convolution inputs in bf16 with fp32
     * accumulation (on != 0), after init; 0 when it took effect.  NULL: the
     * backend has no bf16 path (--precision bf16 is refused). */
    int (*set_bf16)(int on);
    /* --precision tf32: fp32 GEMMs (and the convolutions' GEMMs) may round
     * their inputs to TF32 (10 mantissa bits) on the tensor cores, fp32
     * accumulation and outputs (on != 0), after init; 0 when it took
     * effect.  NULL: no TF32 path (--precision tf32 is refused). */
    int (*set_tf32)(int on);
    /* --precision bf16: [params, params + count) is the trainer's flat
     * parameter buffer (count 0: none), set after set_bf16; the backend may
     * keep a bf16 copy of it that its optimizer ops write as they update
     * and its GEMMs read, in place of rounding each weight in every forward.
     * 0 when done.  The copy follows upload, copy, zero and the optimizer
     * ops into the buffer; params_written: [p, p + count) of it was written
     * otherwise (a collective, another op), so such a copy of it is stale.
     * NULL: no such copy (both optional). */
    int (*bf16_params)(const float *params, size_t count);
    void (*params_written)(const float *p, size_t count);
    /* --precision bf16: y, of count values, is a dense layer's output that
     * only dense layers read, as their input (linear_fwd's and linear_bwd's
     * x) and its own backward as a fused ReLU's mask (linear_bwd's relu_y):
     * the backend keeps it as count bf16 values at y (count * 2 bytes
     * allocated), which linear_fwd writes (the fp32 result rounded once,
     * as the reader's GEMM would round it) and those ops read; nothing else
     * may read y (the ReLU's mask is then that of the bf16 value).  After
     * set_bf16; 0 when done.  NULL: no such outputs (optional). */
    int (*act_bf16)(float *y, size_t count);
    /* --precision bf16: 1 when the backend's convolutions keep a bf16 copy
     * of their whole input from forward to backward (the cuda backend's
     * through cuDNN, for the weight gradient), which the device plan
     * counts.  NULL: never (optional). */
    int (*conv_input_bf16)(void);
    /* --precision bf16: 1 when the backend's convolutions and BatchNorms
     * also take layer outputs kept in bf16 (act_bf16) as they lie: conv_fwd
     * and conv_bwd an input x that a BatchNorm (or its fused ReLU) or a max
     * pooling wrote, conv_fwd an output y (no bias, or one it carries:
     * act_bias) that only a BatchNorm reads, bn_stats, bn_fwd, bn_bwd_stats, bn_bwd_data and the
     * bn_maxpool ops such an x, bn_fwd, maxpool_fwd and bn_maxpool_fwd such
     * a y (the cuda backend through cuDNN: its convolutions' operands are
     * bf16 already).  NULL: never (optional). */
    int (*conv_acts_bf16)(void);
    /* With conv_acts_bf16: y, a convolution's output kept in bf16 (act_bf16)
     * that only a BatchNorm reads, is written by conv_fwd without the
     * convolution's bias b, which bn_stats, bn_fwd, bn_bwd_stats,
     * bn_bwd_data and the bn_maxpool ops add to each value of their x as
     * they read it, in fp32: the values an fp32 output would hold (its bf16
     * result widened, plus the bias).  The gradient for such an output may
     * be kept in bf16 too (grad_bf16): bn_bwd_data (or bn_maxpool_bwd_data)
     * writing it then also sums its fp32 values for the convolution's bias
     * gradient, which the convolution's conv_bwd, next, takes.  0 when
     * done.  NULL: an output with a bias stays fp32 (optional). */
    int (*act_bias)(float *y, const float *b);
    /* With conv_acts_bf16: g, a gradient buffer of count values, holds the
     * gradient of such an output kept in bf16 (count bf16 values), which
     * conv_bwd writes as its dx and bn_bwd_data (and bn_maxpool_bwd_data) as
     * its dx, and bn_bwd_stats, bn_bwd_data, maxpool_bwd, the bn_maxpool
     * ops and conv_bwd read as their dy; or the gradient conv_bwd computes
     * for a ReLU's output (after a block's add), which relu_bwd reads as
     * its dy or dy2; count 0: g holds fp32 again.  0 when done.  NULL:
     * never (optional). */
    int (*grad_bf16)(float *g, size_t count);
    /* With conv_acts_bf16 and conv_input_bf16: y, an fp32 layer output of
     * count values that convolutions read (as do other layers, in fp32),
     * gets a bf16 copy beside it (count * 2 bytes, allocated by the
     * backend), which bn_fwd, bn_maxpool_fwd, maxpool_fwd and add write with
     * y, the rounding of each value, and which conv_fwd and conv_bwd take as
     * the bf16 rounding of their input instead of rounding it again; count
     * 0: none.  0 when done.  NULL: never (optional). */
    int (*act_copy16)(float *y, size_t count);
    /* Profiler ranges (NVTX on the cuda backend: Nsight Systems shows them
     * on the host thread and projects them onto the GPU work launched
     * inside): range_start opens a range named `name` and returns its id,
     * range_end closes it; ranges need not nest.  NULL: no profiler ranges
     * (the cpu backend). */
    uint64_t (*range_start)(const char *name);
    void (*range_end)(uint64_t id);
    /* The device memory of this process's device after init: free and total
     * bytes now (CUDA: cudaMemGetInfo), which start-up checks its device
     * plan against before it allocates (memplan.h); a failed query is
     * DDP_ERR_DEVICE naming the call.  NULL: host memory (the host check
     * of memlimit.h covers it). */
    ddp_status_t (*mem_info)(size_t *free_bytes, size_t *total_bytes);

    /* ---- memory ---------------------------------------------------------- */
    void *(*alloc)(size_t bytes); /* zero-filled; NULL when out of memory */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    /* The copy to the host in the ops' order, complete when `done` (recorded
     * after it) has been waited for (see "Ordering"). */
    void (*download_async)(void *host_dst, const void *src, size_t bytes, compute_event_t *done);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void); /* wait for all queued work */
    /* The upload of a batch: may still read host_src after it returns, and
     * waits only for the work marked by `reuse` before it writes dst; `done`
     * is recorded after it (see "Ordering"; the CPU backend copies at once). */
    void (*upload_async)(void *dst, const void *host_src, size_t bytes,
                         const compute_event_t *reuse, compute_event_t *done);
    /* Staging memory for upload sources ("Staging memory"): NULL when out
     * of it, without a failure for `check` (the caller falls back to malloc);
     * host_free frees only what host_alloc returned.  NULL: none (malloc). */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);

    /* ---- ordering (see "Ordering" above) --------------------------------- */
    compute_event_t *(*event_create)(void); /* NULL when out of memory */
    void (*event_destroy)(compute_event_t *e);
    /* Mark the work called so far; the event completes when it is done. */
    void (*event_record)(compute_event_t *e);
    /* The host waits until the work marked by the last record is done. */
    void (*event_wait)(compute_event_t *e);

    /* ---- dense layers ---------------------------------------------------- */
    /* y[n,out] = x[n,in] w[out,in]^T + b[out]; relu: y = relu(that) (a
     * ReLU fused after the layer, as relu_fwd: NaN passes) */
    void (*linear_fwd)(int n, int in, int out, const float *x, const float *w, const float *b,
                       float *y, int relu);
    /* dw = beta dw + dy^T x ; db = beta db + sum_n dy ; dx = dy w.  A
     * layer's backward (here and conv_bwd) sees its x and w as its last
     * forward did: nothing writes them in between (the cuda backend keeps
     * the forward's bf16 copies for the backward, cuda/bf16.h; its
     * emulation aborts when they differ).  relu_y (the fused ReLU's output,
     * linear_fwd's y with relu; NULL: no ReLU): dy is the ReLU's gradient,
     * zeroed where relu_y is <= 0 (relu_bwd's mask) before all of the
     * above, into `ws`, a workspace of linear_ws_bytes(n, out) bytes owned
     * by the caller (dy itself is not written: another layer may read it);
     * the same bits as relu_bwd, then this. */
    void (*linear_bwd)(int n, int in, int out, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, float beta, const float *relu_y, void *ws);
    /* linear_bwd's workspace with a ReLU: n * out floats, or 0 where the
     * backend masks into memory of its own (cuda under --precision bf16:
     * the bf16 copy it makes anyway) */
    size_t (*linear_ws_bytes)(int n, int out);

    /* Convolution (cross-correlation, as PyTorch).  `ws` is a workspace of
     * conv_ws_bytes(d) bytes owned by the caller. */
    size_t (*conv_ws_bytes)(const conv_dims_t *d);
    /* The most samples of d one conv_fwd or conv_bwd works on at a time:
     * where the backend keeps layer outputs in bf16 (act_bf16), the fp32
     * scratch of a group it cannot run on them as they lie is that many
     * samples'.  NULL: d->n (optional). */
    int (*conv_group_samples)(const conv_dims_t *d);
    void (*conv_fwd)(const conv_dims_t *d, const float *x, const float *w, const float *b, float *y,
                     void *ws);
    void (*conv_bwd)(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                     float *dx, float *dw, float *db, float beta, void *ws);

    /* ---- pooling --------------------------------------------------------- */
    void (*maxpool_fwd)(const pool_dims_t *d, const float *x, float *y, int32_t *argmax);
    void (*maxpool_bwd)(const pool_dims_t *d, const float *dy, const int32_t *argmax, float *dx);
    void (*avgpool_fwd)(const pool_dims_t *d, const float *x, float *y);
    void (*avgpool_bwd)(const pool_dims_t *d, const float *dy, float *dx);
    /* global average pool: x[n,c,hw] -> y[n,c] */
    void (*gap_fwd)(int n, int c, int hw, const float *x, float *y);
    void (*gap_bwd)(int n, int c, int hw, const float *dy, float *dx);

    /* ---- batch normalisation (x[n,c,hw]; hw = 1 for BatchNorm1d) ---------- */
    /* stats[0..c) = sum x, stats[c..2c) = sum x^2 over n*hw (local batch). */
    void (*bn_stats)(int n, int c, int hw, const float *x, double *stats);
    /* From (global) stats over `count` values per channel: mean and
     * invstd = 1/sqrt(var_biased + eps); when update_running, running_mean and
     * running_var (unbiased var) move by `momentum` as in PyTorch. */
    void (*bn_finalize)(int c, const double *stats, double count, float eps, float momentum,
                        int update_running, float *mean, float *invstd, float *running_mean,
                        float *running_var);
    /* bn_stats then bn_finalize on this rank's statistics (no SyncBatchNorm
     * between): the same values, in fewer launches.  NULL: the two
     * (optional). */
    void (*bn_stats_finalize)(int n, int c, int hw, const float *x, double *stats, double count,
                              float eps, float momentum, int update_running, float *mean,
                              float *invstd, float *running_mean, float *running_var);
    /* Eval mode: mean = running_mean, invstd = 1/sqrt(running_var + eps). */
    void (*bn_eval_params)(int c, const float *running_mean, const float *running_var, float eps,
                           float *mean, float *invstd);
    /* y = (x - mean) * invstd * gamma + beta_, computed as x a + b with
     * a = invstd gamma, b = beta_ - mean a; res (NULL: none): y = that +
     * res[same index] (the block's add the BatchNorm is fused into, as add:
     * the BatchNorm's output rounded, then the sum); relu: y = relu(that)
     * (a ReLU fused after the BatchNorm or the add, as relu_fwd: NaN
     * passes). */
    void (*bn_fwd)(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta_, float *y, int relu, const float *res);
    /* gstats[0..c) = sum dy, gstats[c..2c) = sum dy * xhat (local batch);
     * also dgamma = beta dgamma + sum dy*xhat, dbeta = beta dbeta + sum dy.
     * relu_gamma, relu_beta (the layer's gamma and beta_; NULL: no ReLU): dy
     * is the gradient of a fused ReLU's output, taken as 0 wherever the
     * BatchNorm's output x a + b (recomputed exactly as bn_fwd computed it)
     * is <= 0 (relu_bwd's mask): the same bits as relu_bwd, then this. */
    void (*bn_bwd_stats)(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                         const float *invstd, double *gstats, float *dgamma, float *dbeta,
                         float beta, const float *relu_gamma, const float *relu_beta);
    /* dx = gamma invstd (dy - gsum_dy/count - xhat gsum_dyxhat/count), with the
     * (global) gstats over `count` values per channel.  relu_beta (the
     * layer's beta_; NULL: no ReLU): dy masked as in bn_bwd_stats. */
    void (*bn_bwd_data)(int n, int c, int hw, const float *x, const float *dy, const float *mean,
                        const float *invstd, const float *gamma, const double *gstats, double count,
                        float *dx, const float *relu_beta);
    /* A BatchNorm (with its fused ReLU: relu) whose output only a max
     * pooling over d reads (d's n, c, h, w are the BatchNorm's; h * w > 1),
     * in one pass each way (optional, all four or none): bn_maxpool is 1
     * when the backend runs the other three (NULL or 0: the model runs the
     * layers alone).  bn_maxpool_fwd: maxpool_fwd's y and argmax of
     * bn_fwd's output (no res), without that output written;
     * bn_maxpool_bwd_stats and bn_maxpool_bwd_data: bn_bwd_stats and
     * bn_bwd_data with dy the gradient of the pooled output (argmax: the
     * forward's; gamma, beta_ and relu: the BatchNorm's), as maxpool_bwd
     * gives the BatchNorm's, without writing it.  argmax NULL (the model
     * keeps none where the windows do not overlap): the forward writes
     * none and the backward finds each window's maximum again from x.  The
     * bits of the layers run alone. */
    int (*bn_maxpool)(void);
    void (*bn_maxpool_fwd)(const pool_dims_t *d, const float *x, const float *mean,
                           const float *invstd, const float *gamma, const float *beta_, int relu,
                           float *y, int32_t *argmax);
    void (*bn_maxpool_bwd_stats)(const pool_dims_t *d, const int32_t *argmax, const float *x,
                                 const float *dy, const float *mean, const float *invstd,
                                 const float *gamma, const float *beta_, int relu, double *gstats,
                                 float *dgamma, float *dbeta, float beta);
    void (*bn_maxpool_bwd_data)(const pool_dims_t *d, const int32_t *argmax, const float *x,
                                const float *dy, const float *mean, const float *invstd,
                                const float *gamma, const float *beta_, int relu,
                                const double *gstats, double count, float *dx);

    /* ---- elementwise ----------------------------------------------------- */
    /* y = a + b (a residual connection); y may be a or b; relu: y = relu(a +
     * b) (a ReLU fused after a block's add, as relu_fwd) */
    void (*add)(size_t count, const float *a, const float *b, float *y, int relu);
    void (*relu_fwd)(size_t count, const float *x, float *y);
    /* dx = x > 0 ? dy : 0 (x the ReLU's input or output: the same mask; NaN
     * passes); dy2 (NULL: none): of dy2 + dy instead (a ReLU output's two
     * gradients summed inside its mask: the bits of add(dy2, dy) then this);
     * dx may be dy or dy2 when they hold fp32.  dy and dy2 may be held in
     * bf16 (grad_bf16: a convolution's dx for the ReLU after a block's add),
     * read as the fp32 values they round; dx is fp32 and then another buffer. */
    void (*relu_bwd)(size_t count, const float *x, const float *dy, float *dx, const float *dy2);
    void (*gelu_fwd)(size_t count, const float *x, float *y); /* erf form */
    void (*gelu_bwd)(size_t count, const float *x, const float *dy, float *dx);
    /* Dropout over x[n, features]; element j of row i is kept iff
     * ddp_dropout_keep(seed, step, layer, sample_idx[i], j, p) (rng.h), kept
     * values scaled by 1/(1-p).  sample_idx is a device array of n global
     * sample indices.  Backward applies the same mask to dy. */
    void (*dropout_fwd)(int n, size_t features, const float *x, float *y, float p, uint64_t seed,
                        uint64_t step, uint32_t layer, const int64_t *sample_idx);
    void (*dropout_bwd)(int n, size_t features, const float *dy, float *dx, float p, uint64_t seed,
                        uint64_t step, uint32_t layer, const int64_t *sample_idx);

    /* ---- losses ---------------------------------------------------------- */
    /* Softmax cross-entropy with label smoothing eps (PyTorch semantics):
     * per-sample loss = (1-eps) * -log p[y] + eps * mean_j(-log p[j]).
     * dlogits = grad_scale * d(loss_i)/d(logits_i) (grad_scale = 1/global count
     * folds the mean, accumulation and world size in); dlogits may be NULL
     * (evaluation).  acc[0] += sum of per-sample losses, acc[1] += number of
     * argmax hits (device doubles). */
    void (*xent)(int n, int classes, const float *logits, const int32_t *labels, float smoothing,
                 float grad_scale, float *dlogits, double *acc);
    /* The same where the logits are a dense layer's output (no ReLU after
     * it) whose linear_bwd comes next with dy = dlogits: the backend may
     * keep the gradient in a form of its own for that call instead of
     * writing dlogits (cuda under --precision bf16: bf16 and its column
     * sums, one pass less each way); nothing else may read dlogits.
     * NULL: xent (optional). */
    void (*xent_dense)(int n, int classes, const float *logits, const int32_t *labels,
                       float smoothing, float grad_scale, float *dlogits, double *acc);
    /* Mean squared error: acc[0] += sum over n*k of (pred - target)^2;
     * dpred = grad_scale * 2 (pred - target), grad_scale = 1/(global count*k). */
    void (*mse)(int n, int k, const float *pred, const float *target, float grad_scale,
                float *dpred, double *acc);

    /* ---- optimizers over flat buffers (PyTorch semantics) ----------------- */
    /* SGD: d = g + wd p; buf = first ? d : momentum buf + d (momentum > 0);
     * d = nesterov ? d + momentum buf : buf; p -= lr d. */
    void (*sgd_step)(size_t count, float *p, const float *g, float *buf, float lr, float momentum,
                     int nesterov, float wd, int first);
    /* AdamW: p *= 1 - lr wd; m,v moments; bias corrections for step t >= 1. */
    void (*adamw_step)(size_t count, float *p, const float *g, float *m, float *v, float lr,
                       float beta1, float beta2, float eps, float wd, int64_t t);

    /* ---- reductions and helpers ----------------------------------------- */
    void (*scale)(size_t count, float *x, float alpha);
    double (*sumsq)(size_t count, const float *x); /* returns to the host */
    /* out[i] = sumsq(count[i], x[i]) for i < n, the same values, with one
     * wait for the device for all of them (the gradient norm's pieces).
     * NULL: sumsq one at a time (optional). */
    void (*sumsq_many)(int n, const float *const *x, const size_t *count, double *out);
    int (*all_finite)(size_t count, const float *x);
    /* 16-bit casts for gradient compression: bf16 (round to nearest even)
     * when bf16 != 0, IEEE fp16 otherwise. */
    void (*to_half)(size_t count, const float *x, uint16_t *h, int bf16);
    void (*from_half)(size_t count, const uint16_t *h, float *x, int bf16);
} compute_ops_t;

/* Backends: "cpu" always; "cuda" (compute_cuda.c) in CUDA builds, and in
 * the test programs linked with the emulation. */
extern const compute_ops_t compute_cpu_ops;
extern const compute_ops_t compute_cuda_ops;

/* The registry (compute.c): the backends of this binary by name, "cpu"
 * first, then what configure built in; `ddptrain --version` lists them.  A
 * program may register another before it trains -- a test double, under
 * the name of the backend it stands in for, or a name of its own --
 * replacing an entry of that name or adding one.  A table with a required
 * op missing (every op but those documented as optional: check,
 * device_id, device_count, set_bf16, set_tf32, bf16_params,
 * params_written, act_bf16, conv_input_bf16, conv_acts_bf16, act_bias,
 * conv_group_samples, grad_bf16, act_copy16, bn_stats_finalize, bn_maxpool, bn_maxpool_fwd,
 * bn_maxpool_bwd_stats, bn_maxpool_bwd_data, sumsq_many, xent_dense,
 * mem_info, host_alloc, host_free, range_start, range_end) is refused with
 * DDP_ERR_INTERNAL naming the op, so a missing op is an error where the
 * backend is registered, never a NULL call in a step. */
ddp_status_t compute_register(const char *name, const compute_ops_t *ops);
int compute_backend_count(void);
/* 0 <= i < compute_backend_count(): the entry's name and table */
const char *compute_backend_name(int i);
const compute_ops_t *compute_backend(int i);
/* The table registered as `name` ("cpu", "cuda"); NULL when none. */
const compute_ops_t *compute_find(const char *name);

/* --device: the backend registered as `device`, or for "auto" the first
 * backend with device memory that sees a device (device_count() > 0), else
 * "cpu".  A name with no backend is DDP_ERR_USAGE (exit 2), a device
 * backend that sees no device DDP_ERR_DEVICE (exit 9), each saying what to
 * do; a builtin table refused at registration, its DDP_ERR_INTERNAL.  Not
 * collective. */
ddp_status_t compute_pick(const char *device, const compute_ops_t **out);

#endif
