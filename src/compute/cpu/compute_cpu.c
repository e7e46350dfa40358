/* compute_cpu.c -- the CPU compute backend's ops table (compute_cpu_ops):
 * every op of compute_ops_t on host memory, with its memory, events and
 * init here and the ops in rooms by family beside this file, as cuda/ has
 * them: cpu_linear.c (dense layers), cpu_conv.c (convolution: im2col + GEMM)
 * with cpu_winograd.c (its Winograd F(2x2, 3x3) path), cpu_pool.c,
 * cpu_bn.c, cpu_elementwise.c, cpu_loss.c, cpu_optim.c and cpu_reduce.c;
 * cpu_kernels.h is what they share.  GEMMs go through CBLAS (row-major
 * cblas_sgemm), the rest is plain C loops written so that the compiler
 * vectorises them at -O2, with SSE2 and AVX2 code where that does better.
 *
 * Semantics are PyTorch's (see compute.h and the comment of each op).  No op
 * starts threads; BLAS runs with the threads it was configured for.  Also
 * here: compute_cpu_prof, the convolution's phase timers (compute_cpu.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "compute.h"
#include "compute_cpu.h"
#include "cpu_dnnl.h"
#include "cpu_kernels.h"

/* ======================================================================== */
/* memory                                                                   */
/* ======================================================================== */

static void *cpu_alloc(size_t bytes)
{
    void *p = NULL;
    /* 64-byte aligned (one cache line, one AVX-512 vector); never size 0 so
     * that NULL always means out of memory */
    size_t sz = bytes ? (bytes + 63) / 64 * 64 : 64;
    if (posix_memalign(&p, 64, sz) != 0) return NULL;
    memset(p, 0, sz);
    return p;
}

static void cpu_free(void *p)
{
    free(p);
}

void cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_zero(void *p, size_t bytes)
{
    if (bytes) memset(p, 0, bytes);
}

static void cpu_sync(void) {}

/* Every op is done when it returns: an event has nothing to wait for, and
 * one object serves as every event. */
struct compute_event {
    int unused;
};

static compute_event_t cpu_event_;

static compute_event_t *cpu_event_create(void)
{
    return &cpu_event_;
}

static void cpu_event_destroy(compute_event_t *e)
{
    (void)e;
}

static void cpu_event_record(compute_event_t *e)
{
    (void)e;
}

static void cpu_event_wait(compute_event_t *e)
{
    (void)e;
}

/* The convolution's phase timers (compute_cpu.h; cpu_conv.c and
 * cpu_winograd.c add to them): NULL unless a benchmark sets them. */
compute_cpu_prof_t *compute_cpu_prof;

/* ======================================================================== */
/* init and the ops table                                                   */
/* ======================================================================== */

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int n);
int openblas_get_num_threads(void);
#endif

static ddp_status_t cpu_init(int local_rank, int local_size, char *describe, size_t n)
{
    (void)local_rank;
    (void)local_size;
    int threads = 1;
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS")) openblas_set_num_threads(1);
    threads = openblas_get_num_threads();
#endif
    cpu_dnnl_threads(threads);
    snprintf(describe, n, "cpu (%d BLAS thread%s per rank%s)", threads, threads > 1 ? "s" : "",
             cpu_dnnl_conv_usable(&(conv_dims_t){.n = 1}) ? ", oneDNN convolutions" : "");
    return DDP_OK;
}

/* The copy is made at once: nothing to wait for, nothing to record. */
static void cpu_upload_async(void *dst, const void *host_src, size_t bytes,
                             const compute_event_t *reuse, compute_event_t *done)
{
    (void)reuse;
    (void)done;
    cpu_copy(dst, host_src, bytes);
}

static void cpu_download_async(void *host_dst, const void *src, size_t bytes, compute_event_t *done)
{
    (void)done;
    cpu_copy(host_dst, src, bytes);
}

const compute_ops_t compute_cpu_ops = {
    .name = "cpu",
    .mem_kind = DDP_MEM_HOST,
    .init = cpu_init,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .download_async = cpu_download_async,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .upload_async = cpu_upload_async,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .linear_ws_bytes = cpu_linear_ws_bytes,
    .conv_ws_bytes = cpu_conv_ws_bytes,
    .conv_fwd = cpu_conv_fwd,
    .conv_bwd = cpu_conv_bwd,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .gap_fwd = cpu_gap_fwd,
    .gap_bwd = cpu_gap_bwd,
    .bn_stats = cpu_bn_stats,
    .bn_finalize = cpu_bn_finalize,
    .bn_eval_params = cpu_bn_eval_params,
    .bn_fwd = cpu_bn_fwd,
    .bn_bwd_stats = cpu_bn_bwd_stats,
    .bn_bwd_data = cpu_bn_bwd_data,
    .add = cpu_add,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .xent = cpu_xent,
    .mse = cpu_mse,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,
    .all_finite = cpu_all_finite,
    .to_half = cpu_to_half,
    .from_half = cpu_from_half,
};
