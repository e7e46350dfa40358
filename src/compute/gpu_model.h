/* gpu_model.h -- a model of a GPU step from the cuda backend's cost log
 * (ddp_cuda_cost_log, cuda/ddp_cuda.h): the time each kernel launch, GEMM
 * and device copy would take on a given GPU, summed in order.  A model, not
 * a measurement:
 *
 *   time = max(bytes / (HBM bandwidth x mem_eff x share),
 *              FLOPs / (peak of its units x eff x share),
 *              floor_us)
 *
 * bytes: what the launcher declares it reads and writes (each byte once: a
 * streaming kernel; the emulation's cost check holds the declarations to
 * the pages really touched).  share = min(1, the grid's blocks / the SMs):
 * a grid of 16 blocks uses 16 of 132 SMs and gets that share of the
 * bandwidth and of the FLOPs; a GEMM's grid is its 128x128 output tiles
 * times the 512-long slices of k (split-K, which cuBLAS takes when the
 * tiles are fewer than the SMs).
 * The peak is the units' of the entry (CUDA cores in fp32 for kernels;
 * tensor cores in TF32 or bf16 for GEMMs in those precisions), eff is
 * gemm_eff for GEMMs (what cuBLAS reaches on large GEMMs) and 1 for
 * kernels; floor_us is the least a launch costs back to back.  Nothing
 * overlaps: kernels on one stream run one after another. */
#ifndef DDP_GPU_MODEL_H
#define DDP_GPU_MODEL_H

#include <stddef.h>
#include <stdio.h>

#include "ddp_cuda.h"

typedef struct gpu_spec {
    const char *name;
    int sms;
    double hbm_gbs;                        /* GB/s */
    double peak_fp32, peak_tf32, peak_bf16; /* TFLOP/s, dense */
    double gemm_eff, mem_eff;              /* fractions of the peaks reached */
    double floor_us;                       /* per launch */
} gpu_spec_t;

/* NVIDIA H200 SXM: 132 SMs, 4.8 TB/s HBM3e, 67 / 494 / 989 TFLOP/s dense
 * (fp32 CUDA cores, TF32 and bf16 tensor cores); cuBLAS at 70% of the
 * tensor-core peak on large GEMMs, streaming kernels at 90% of the
 * bandwidth, 2 us a launch at least. */
extern const gpu_spec_t gpu_spec_h200;

#define GPU_MODEL_MAX_ROWS 64

/* one kernel (by name), or all GEMMs of one name, over the step */
typedef struct gpu_model_row {
    const char *name;
    int kind; /* ddp_cuda_cost_kind_t */
    long calls;
    double blocks; /* the largest grid */
    double bytes, flops, us;
    double us_grid; /* of us: what the grids' shares of the SMs add */
} gpu_model_row_t;

typedef struct gpu_model {
    double step_us, gemm_us, gemm_flops, bytes;
    long launches, undeclared;
    int nrows; /* rows beyond GPU_MODEL_MAX_ROWS go into the last one, "(others)" */
    gpu_model_row_t rows[GPU_MODEL_MAX_ROWS];
} gpu_model_t;

/* The time of one entry on `spec`, and (optional) what of it the grid's
 * share of the SMs adds over a full grid. */
double gpu_model_entry_us(const ddp_cuda_cost_t *e, const gpu_spec_t *spec, double *grid_us);
/* The model of the log's entries, rows sorted by time, largest first. */
void gpu_model_build(const ddp_cuda_cost_t *e, size_t n, const gpu_spec_t *spec, gpu_model_t *m);
/* The model as a table: a header line naming the spec and the formula, one
 * row per kernel, then "# modeled step", "# GEMMs alone" and MFU against
 * peak_tflops (the step's precision) on lines a script can read. */
void gpu_model_print(FILE *f, const gpu_model_t *m, const gpu_spec_t *spec, const char *what,
                     double peak_tflops);

#endif
