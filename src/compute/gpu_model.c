/* gpu_model.c -- the step model of gpu_model.h. */
#include "gpu_model.h"

#include <stdlib.h>
#include <string.h>

const gpu_spec_t gpu_spec_h200 = {
    .name = "H200 SXM",
    .sms = 132,
    .hbm_gbs = 4800,
    .peak_fp32 = 67,
    .peak_tf32 = 494,
    .peak_bf16 = 989,
    .gemm_eff = 0.70,
    .mem_eff = 0.90,
    .floor_us = 2.0,
};

static double peak_(const gpu_spec_t *s, ddp_cuda_math_t math)
{
    return math == DDP_MATH_BF16 ? s->peak_bf16 : math == DDP_MATH_TF32 ? s->peak_tf32
                                                                       : s->peak_fp32;
}

/* bytes and FLOPs at a share of the machine, in us */
static double at_share_(const ddp_cuda_cost_t *e, const gpu_spec_t *s, double share)
{
    double eff = e->kind == DDP_COST_GEMM ? s->gemm_eff : 1.0;
    double mem = (e->read + e->written) / (s->hbm_gbs * 1e3 * s->mem_eff * share);
    double fl = e->flops / (peak_(s, e->math) * 1e6 * eff * share);
    return mem > fl ? mem : fl;
}

double gpu_model_entry_us(const ddp_cuda_cost_t *e, const gpu_spec_t *s, double *grid_us)
{
    double share = 1.0;
    if (e->kind != DDP_COST_COPY && e->blocks < (unsigned long long)s->sms)
        share = (double)(e->blocks ? e->blocks : 1) / s->sms;
    double full = at_share_(e, s, 1.0), t = at_share_(e, s, share);
    if (t < s->floor_us) t = s->floor_us;
    if (full < s->floor_us) full = s->floor_us;
    if (grid_us) *grid_us = t - full;
    return t;
}

static int by_time_(const void *a, const void *b)
{
    double x = ((const gpu_model_row_t *)a)->us, y = ((const gpu_model_row_t *)b)->us;
    return x < y ? 1 : x > y ? -1 : 0;
}

void gpu_model_build(const ddp_cuda_cost_t *e, size_t n, const gpu_spec_t *spec, gpu_model_t *m)
{
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < n; i++) {
        double grid;
        double us = gpu_model_entry_us(&e[i], spec, &grid);
        m->step_us += us;
        m->bytes += e[i].read + e[i].written;
        m->launches++;
        m->undeclared += !e[i].declared;
        if (e[i].kind == DDP_COST_GEMM) {
            m->gemm_us += us;
            m->gemm_flops += e[i].flops;
        }
        int r = 0;
        while (r < m->nrows && strcmp(m->rows[r].name, e[i].name)) r++;
        if (r == m->nrows) {
            if (m->nrows == GPU_MODEL_MAX_ROWS) {
                r = GPU_MODEL_MAX_ROWS - 1;
                m->rows[r].name = "(others)";
            } else {
                m->nrows++;
                m->rows[r].name = e[i].name;
                m->rows[r].kind = (int)e[i].kind;
            }
        }
        gpu_model_row_t *row = &m->rows[r];
        row->calls++;
        if ((double)e[i].blocks > row->blocks) row->blocks = (double)e[i].blocks;
        row->bytes += e[i].read + e[i].written;
        row->flops += e[i].flops;
        row->us += us;
        row->us_grid += grid;
    }
    qsort(m->rows, (size_t)m->nrows, sizeof m->rows[0], by_time_);
}

void gpu_model_print(FILE *f, const gpu_model_t *m, const gpu_spec_t *s, const char *what,
                     double peak_tflops)
{
    fprintf(f,
            "# model of %s on an %s (a model, not a measurement: gpu_model.h): per launch "
            "max(bytes / (%.0f GB/s x %.2f), FLOPs / (peak x %.2f for GEMMs) ) at the grid's "
            "share of %d SMs, at least %.1f us; summed, nothing overlapped\n",
            what, s->name, s->hbm_gbs, s->mem_eff, s->gemm_eff, s->sms, s->floor_us);
    fprintf(f, "%-32s %6s %8s %10s %10s %10s %7s %9s\n", "kernel", "calls", "grid", "MB",
            "GFLOP", "us", "of step", "grid-us");
    for (int r = 0; r < m->nrows; r++) {
        const gpu_model_row_t *row = &m->rows[r];
        fprintf(f, "%-32.32s %6ld %8.0f %10.1f %10.2f %10.1f %6.1f%% %9.1f\n", row->name,
                row->calls, row->blocks, row->bytes / 1e6, row->flops / 1e9, row->us,
                m->step_us > 0 ? 100 * row->us / m->step_us : 0, row->us_grid);
    }
    double mfu = m->step_us > 0 ? m->gemm_flops / (m->step_us * 1e-6) / (peak_tflops * 1e12) : 0;
    fprintf(f, "# modeled step: %.3f ms, %ld launches, %.1f GB moved, MFU %.1f%% of %.0f TFLOP/s\n",
            m->step_us / 1e3, m->launches, m->bytes / 1e9, 100 * mfu, peak_tflops);
    fprintf(f, "# modeled GEMMs alone: %.3f ms; step / GEMMs = %.3f\n", m->gemm_us / 1e3,
            m->gemm_us > 0 ? m->step_us / m->gemm_us : 0);
    if (m->undeclared)
        fprintf(f, "# WARNING: %ld launches declared no cost (DDP_COST): the model misses them\n",
                m->undeclared);
}
