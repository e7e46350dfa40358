/* bench_gpu.c -- the GPU training step of a large MLP against the GPU's
 * peak and against cuBLAS alone on the same GEMMs, in bf16 and fp32.
 *
 * The whole step (forward, cross-entropy, backward, AdamW over the flat
 * parameter buffer; each hidden layer's ReLU fused into it, as the model
 * runs it) runs through the "cuda" compute ops table
 * (compute_cuda_ops); in alternating blocks of the same run, the step's
 * GEMMs alone run through cuBLAS (bench_gpu_gemm.cu).  Medians over the
 * rounds.  FLOPs are counted as performed: 2*B*in*out for the forward and
 * the weight gradient of every layer and for the input gradient of layers
 * 2..L (6*params*batch would also count the first layer's input gradient,
 * which is not computed, and the biases); elementwise work, the loss and
 * AdamW are not counted.
 *
 *   bench_gpu [--width W] [--in N] [--out N] [--layers L] [--batch B] [--steps S]
 *             [--rounds R] [--warmup N] [--precision bf16|fp32|both] [--quick]
 *             [--peak-bf16 TF] [--peak-fp32 TF] [--csv FILE] [--model]
 *
 * Defaults: W = in = out = 8192, L = 4, B = 4096, 5 rounds of 5 steps,
 * both precisions, the H200's dense peaks (989 TFLOP/s bf16, 67 TFLOP/s
 * fp32 without tensor cores).  --quick: W = 64, B = 32, 2 rounds of 2 steps
 * (a check that it runs: the CPU emulation of a build without CUDA).
 * --csv FILE (or BENCH_CSV) appends bench/results.csv rows.
 *
 * The model of the step on an H200 (gpu_model.h) from the backend's cost
 * log of one step: printed after the measured rows; with --model alone,
 * nothing is timed (on the CPU emulation, with DDP_EMU_DRY=1 the kernels do
 * not even run: the full-size step's model in seconds), and the model's
 * targets are checked: the step within 1.25x of its GEMMs alone in bf16.
 * Exit 1 when a CUDA call fails or the loss is not finite, 2 on bad
 * arguments. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_gpu_gemm.h"
#include "compute.h"
#include "compute_cuda.h"
#include "ddp_cuda.h"
#include "gpu_model.h"

extern const compute_ops_t compute_cuda_ops;

#define BENCH_GPU_MAX_LAYERS 16
#define BENCH_GPU_MAX_ROUNDS 64

typedef struct bench_gpu_args {
    int width, in, out, layers, batch, steps, rounds, warmup, bf16, fp32;
    double peak_bf16, peak_fp32; /* TFLOP/s */
    const char *csv;
    int model_only; /* --model */
} bench_gpu_args_t;

typedef struct bench_gpu_net {
    int dims[BENCH_GPU_MAX_LAYERS + 1];
    size_t woff[BENCH_GPU_MAX_LAYERS], boff[BENCH_GPU_MAX_LAYERS], params;
    float *p, *g, *m, *v;           /* flat parameters, gradients, AdamW moments */
    float *z;                       /* the last layer's output (the logits) */
    float *a[BENCH_GPU_MAX_LAYERS]; /* relu outputs (layers 0..L-2); a[-1] is x */
    float *x, *dz, *da, *ws;        /* ws: a fused layer's masked gradient */
    int32_t *labels;
    double *acc;
} bench_gpu_net_t;

static const compute_ops_t *ops_;

static void die_(const char *what)
{
    ddp_status_t s = ops_ && ops_->check ? ops_->check() : DDP_OK;
    fprintf(stderr, "bench_gpu: %s%s%s\n", what, s != DDP_OK ? ": " : "",
            s != DDP_OK ? ddp_error_message() : "");
    exit(1);
}

static void *dev_alloc_(size_t bytes)
{
    void *p = ops_->alloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_gpu: out of device memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* The GEMM FLOPs of one step, as performed (see the file comment). */
static double step_flops_(const bench_gpu_net_t *n, int layers, int batch)
{
    double f = 0;
    for (int l = 0; l < layers; l++)
        f += 2.0 * batch * n->dims[l] * n->dims[l + 1] * (l == 0 ? 2 : 3);
    return f;
}

static void net_init_(bench_gpu_net_t *n, const bench_gpu_args_t *a)
{
    n->dims[0] = a->in;
    for (int l = 1; l < a->layers; l++) n->dims[l] = a->width;
    n->dims[a->layers] = a->out;
    n->params = 0;
    for (int l = 0; l < a->layers; l++) {
        n->woff[l] = n->params;
        n->params += (size_t)n->dims[l] * n->dims[l + 1];
        n->boff[l] = n->params;
        n->params += (size_t)n->dims[l + 1];
    }
    size_t pb = n->params * sizeof(float);
    n->p = dev_alloc_(pb), n->g = dev_alloc_(pb), n->m = dev_alloc_(pb), n->v = dev_alloc_(pb);
    int maxd = 0;
    for (int l = 0; l <= a->layers; l++) maxd = n->dims[l] > maxd ? n->dims[l] : maxd;
    for (int l = 0; l + 1 < a->layers; l++)
        n->a[l] = dev_alloc_((size_t)a->batch * n->dims[l + 1] * sizeof(float));
    n->z = dev_alloc_((size_t)a->batch * a->out * sizeof(float));
    n->ws = dev_alloc_((size_t)a->batch * maxd * sizeof(float));
    n->x = dev_alloc_((size_t)a->batch * a->in * sizeof(float));
    n->dz = dev_alloc_((size_t)a->batch * maxd * sizeof(float));
    n->da = dev_alloc_((size_t)a->batch * maxd * sizeof(float));
    n->labels = dev_alloc_((size_t)a->batch * sizeof(int32_t));
    n->acc = dev_alloc_(2 * sizeof(double));

    /* weights U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's Linear), zero biases,
     * inputs U(-1, 1), labels uniform over the classes: a fixed LCG */
    unsigned s = 12345u;
    size_t chunk = (size_t)1 << 22;
    float *h = malloc(chunk * sizeof(float));
    int32_t *y = malloc((size_t)a->batch * sizeof(int32_t));
    if (!h || !y) die_("out of host memory");
    for (int l = 0; l < a->layers; l++) {
        size_t count = (size_t)n->dims[l] * n->dims[l + 1];
        float scale = 1.0f / sqrtf((float)n->dims[l]);
        for (size_t off = 0; off < count; off += chunk) {
            size_t k = count - off < chunk ? count - off : chunk;
            for (size_t i = 0; i < k; i++) {
                s = s * 1664525u + 1013904223u;
                h[i] = ((float)(s >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale;
            }
            ops_->upload(n->p + n->woff[l] + off, h, k * sizeof(float));
        }
    }
    size_t count = (size_t)a->batch * a->in;
    for (size_t off = 0; off < count; off += chunk) {
        size_t k = count - off < chunk ? count - off : chunk;
        for (size_t i = 0; i < k; i++) {
            s = s * 1664525u + 1013904223u;
            h[i] = (float)(s >> 8) * (1.0f / 8388608.0f) - 1.0f;
        }
        ops_->upload(n->x + off, h, k * sizeof(float));
    }
    for (int i = 0; i < a->batch; i++) {
        s = s * 1664525u + 1013904223u;
        y[i] = (int32_t)((s >> 8) % (unsigned)a->out);
    }
    ops_->upload(n->labels, y, (size_t)a->batch * sizeof(int32_t));
    free(h), free(y);
}

/* One training step through the ops table; t is AdamW's step (1, 2, ...).
 * Each hidden layer's ReLU runs inside it, as the model runs it (fuse_relus_
 * in src/model/model.c). */
static void net_step_(bench_gpu_net_t *n, int layers, int batch, int64_t t)
{
    const float *in = n->x;
    for (int l = 0; l < layers; l++) {
        int hidden = l + 1 < layers;
        float *y = hidden ? n->a[l] : n->z;
        ops_->linear_fwd(batch, n->dims[l], n->dims[l + 1], in, n->p + n->woff[l],
                         n->p + n->boff[l], y, hidden);
        in = y;
    }
    ops_->zero(n->acc, 2 * sizeof(double));
    /* the last layer is dense: its gradient as the trainer has it (xent_dense) */
    (ops_->xent_dense ? ops_->xent_dense : ops_->xent)(batch, n->dims[layers], n->z, n->labels,
                                                        0.0f, 1.0f / (float)batch, n->dz, n->acc);
    float *dy = n->dz, *dx = n->da;
    for (int l = layers - 1; l >= 0; l--) {
        const float *x = l > 0 ? n->a[l - 1] : n->x;
        ops_->linear_bwd(batch, n->dims[l], n->dims[l + 1], x, n->p + n->woff[l], dy,
                         l > 0 ? dx : NULL, n->g + n->woff[l], n->g + n->boff[l], 0.0f,
                         l + 1 < layers ? n->a[l] : NULL, n->ws);
        float *t2 = dy;
        dy = dx, dx = t2;
    }
    ops_->adamw_step(n->params, n->p, n->g, n->m, n->v, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
}

static double loss_(bench_gpu_net_t *n, int batch)
{
    double acc[2];
    ops_->download(acc, n->acc, sizeof acc);
    return acc[0] / batch;
}

/* The timed cases (bench_common.h): the whole step through the ops table,
 * and the step's GEMMs through cuBLAS alone as the reference. */
typedef struct run {
    bench_gpu_net_t *n;
    const bench_gpu_args_t *a;
    int bf16;
    int64_t *t;   /* AdamW's step */
    double first; /* the loss after the first warm-up step */
    int failed;   /* cuBLAS alone failed: the other calls do nothing */
} run_t;

static void step_case_(void *arg, long it)
{
    run_t *r = arg;
    if (r->failed) return;
    net_step_(r->n, r->a->layers, r->a->batch, ++*r->t);
    if (it < 0 && it == -r->a->warmup) r->first = loss_(r->n, r->a->batch);
}

static void gemm_case_(void *arg, long it)
{
    run_t *r = arg;
    if (r->failed) return;
    /* warm-up: one step's GEMMs; a sample: --steps steps' in one call */
    if (bench_gpu_gemm_steps(r->a->layers, r->n->dims, r->a->batch, r->bf16,
                             it < 0 ? 1 : r->a->steps) != 0) {
        fprintf(stderr, "bench_gpu: cuBLAS alone: %s\n", bench_gpu_gemm_error());
        r->failed = 1;
    }
}

/* The clock starts and stops with the GPU idle. */
static void sync_(void *arg)
{
    (void)arg;
    ops_->sync();
}

static void csv_row_(FILE *f, const char *cas, const char *impl, const char *metric,
                     const double v[3], const char *unit)
{
    if (f) fprintf(f, "%s,%s,1,%s,%.6g,%.6g,%.6g,%s\n", cas, impl, metric, v[0], v[1], v[2], unit);
}

/* bf16: the optimizer writes the bf16 copy of the parameters the forward's
 * GEMMs read (ddp_cuda_bf16_params), and the hidden layers' outputs, which
 * only the next dense layer reads, are kept in bf16 (ddp_cuda_act_bf16), as
 * the trainer has them */
static void bf16_copies_(bench_gpu_net_t *n, int layers, int batch, int bf16)
{
    if (ddp_cuda_bf16_params(bf16 ? n->p : NULL, bf16 ? n->params : 0) != 0)
        die_("ddp_cuda_bf16_params");
    for (int l = 0; bf16 && l + 1 < layers; l++)
        if (ddp_cuda_act_bf16(n->a[l], (size_t)batch * n->dims[l + 1]) != 0)
            die_("ddp_cuda_act_bf16");
}

static int run_precision_(bench_gpu_net_t *n, const bench_gpu_args_t *a, int bf16, int64_t *t,
                          FILE *csv, int *met)
{
    const char *prec = bf16 ? "bf16" : "fp32";
    double peak = bf16 ? a->peak_bf16 : a->peak_fp32;
    double flops = step_flops_(n, a->layers, a->batch);
    if (ddp_cuda_set_bf16_gemm(bf16) != 0) die_("ddp_cuda_set_bf16_gemm");
    bf16_copies_(n, a->layers, a->batch, bf16);
    /* rounds of --steps steps alternate with --steps times the GEMMs alone */
    run_t run = {.n = n, .a = a, .bf16 = bf16, .t = t};
    double step_ms[BENCH_GPU_MAX_ROUNDS], gemm_ms[BENCH_GPU_MAX_ROUNDS];
    bench_case_t cases[2] = {
        {.run = step_case_, .arg = &run, .warmup = a->warmup, .iters = a->steps, .t = step_ms},
        {.run = gemm_case_, .arg = &run, .warmup = 1, .t = gemm_ms}};
    bench_loop_run(&(bench_loop_t){.samples = a->rounds, .before = sync_, .after = sync_}, cases,
                   2);
    if (run.failed) return 1;
    for (int r = 0; r < a->rounds; r++) {
        step_ms[r] *= 1e3;
        gemm_ms[r] *= 1e3 / a->steps;
    }
    if (ops_->check && ops_->check() != DDP_OK) die_("a CUDA call failed");
    double first = run.first, last = loss_(n, a->batch);
    if (a->warmup == 0) first = last;
    int finite = isfinite(first) && isfinite(last) && ops_->all_finite(n->params, n->p);

    double s[3], g[3], v[3];
    bench_summary(step_ms, a->rounds, s);
    bench_summary(gemm_ms, a->rounds, g);
    double ratio[BENCH_GPU_MAX_ROUNDS];
    for (int r = 0; r < a->rounds; r++) ratio[r] = gemm_ms[r] / step_ms[r];
    double rt[3];
    bench_summary(ratio, a->rounds, rt);
    /* rates from the medians; the CSV's min/max from the slowest/fastest round */
    double step_tf = flops / (s[1] * 1e-3) / 1e12, gemm_tf = flops / (g[1] * 1e-3) / 1e12;
    printf("%-5s  %-20s %10.3f %12.0f %10.2f %8.1f%% %9.1f%%\n", prec, "training step", s[1],
           a->batch / (s[1] * 1e-3), step_tf, 100 * step_tf / peak, 100 * rt[1]);
    printf("%-5s  %-20s %10.3f %12.0f %10.2f %8.1f%% %9.1f%%\n", prec, "cuBLAS GEMMs alone", g[1],
           a->batch / (g[1] * 1e-3), gemm_tf, 100 * gemm_tf / peak, 100.0);
    char cas[32];
    snprintf(cas, sizeof cas, "gpu-mlp-%s", prec);
    csv_row_(csv, cas, "ddptrain-cuda-ops", "step_ms", s, "ms");
    csv_row_(csv, cas, "cublas-alone", "step_ms", g, "ms");
    v[0] = a->batch / (s[2] * 1e-3), v[1] = a->batch / (s[1] * 1e-3),
    v[2] = a->batch / (s[0] * 1e-3);
    csv_row_(csv, cas, "ddptrain-cuda-ops", "samples_per_s", v, "samples/s");
    v[0] = flops / (s[2] * 1e-3) / 1e12, v[1] = step_tf, v[2] = flops / (s[0] * 1e-3) / 1e12;
    csv_row_(csv, cas, "ddptrain-cuda-ops", "tflops", v, "TFLOP/s");
    for (int i = 0; i < 3; i++) v[i] /= peak;
    csv_row_(csv, cas, "ddptrain-cuda-ops", "fraction_of_peak", v, "ratio");
    v[0] = flops / (g[2] * 1e-3) / 1e12, v[1] = gemm_tf, v[2] = flops / (g[0] * 1e-3) / 1e12;
    csv_row_(csv, cas, "cublas-alone", "tflops", v, "TFLOP/s");
    for (int i = 0; i < 3; i++) v[i] /= peak;
    csv_row_(csv, cas, "cublas-alone", "fraction_of_peak", v, "ratio");
    csv_row_(csv, cas, "ddptrain-cuda-ops", "fraction_of_cublas", rt, "ratio");
    v[0] = v[1] = v[2] = flops;
    csv_row_(csv, cas, "expected", "gemm_flops_per_step", v, "FLOP");
    v[0] = v[1] = v[2] = peak;
    csv_row_(csv, cas, "peak", "tflops", v, "TFLOP/s");
    printf("%-5s  loss on the fixed batch: %.5f at the first step, %.5f at the last%s\n", prec,
           first, last, finite ? "" : " (NOT FINITE)");
    int ok_peak = step_tf >= 0.5 * peak, ok_cublas = rt[1] >= 0.85;
    if (bf16)
        printf("bf16   target: step >= 50%% of peak: %.1f%% (%s); step >= 85%% of cuBLAS alone: "
               "%.1f%% (%s)\n",
               100 * step_tf / peak, ok_peak ? "met" : "NOT met", 100 * rt[1],
               ok_cublas ? "met" : "NOT met");
    else
        printf("fp32   target: step >= 85%% of cuBLAS alone: %.1f%% (%s)\n", 100 * rt[1],
               ok_cublas ? "met" : "NOT met");
    *met = *met && ok_cublas && (!bf16 || ok_peak);
    return finite ? 0 : 1;
}

/* One step with the cost log on, and its model on an H200; *ratio: the
 * modeled step over its GEMMs alone. */
static void model_precision_(bench_gpu_net_t *n, const bench_gpu_args_t *a, int bf16, int64_t *t,
                             FILE *csv, double *ratio)
{
    const char *prec = bf16 ? "bf16" : "fp32";
    if (ddp_cuda_set_bf16_gemm(bf16) != 0) die_("ddp_cuda_set_bf16_gemm");
    bf16_copies_(n, a->layers, a->batch, bf16);
    /* bf16: the step after one has written the mirror, as in training */
    if (bf16) net_step_(n, a->layers, a->batch, ++*t);
    ddp_cuda_cost_record(1);
    net_step_(n, a->layers, a->batch, ++*t);
    ops_->sync();
    ddp_cuda_cost_record(0);
    if (ops_->check && ops_->check() != DDP_OK) die_("a CUDA call failed");
    const ddp_cuda_cost_t *e;
    size_t count = ddp_cuda_cost_log(&e);
    gpu_model_t m;
    gpu_model_build(e, count, &gpu_spec_h200, &m);
    char what[96];
    snprintf(what, sizeof what, "the %s training step", prec);
    gpu_model_print(stdout, &m, &gpu_spec_h200,
                    what, bf16 ? gpu_spec_h200.peak_bf16 : gpu_spec_h200.peak_fp32);
    double flops = step_flops_(n, a->layers, a->batch);
    if (m.gemm_flops != flops)
        printf("# WARNING: the log's GEMM FLOPs %.6g differ from the count of the header %.6g\n",
               m.gemm_flops, flops);
    *ratio = m.gemm_us > 0 ? m.step_us / m.gemm_us : 0;
    char cas[32];
    snprintf(cas, sizeof cas, "gpu-mlp-%s", prec);
    double v[3] = {m.step_us / 1e3, m.step_us / 1e3, m.step_us / 1e3};
    csv_row_(csv, cas, "model-h200", "step_ms", v, "ms");
    v[0] = v[1] = v[2] = m.gemm_us / 1e3;
    csv_row_(csv, cas, "model-h200-gemms", "step_ms", v, "ms");
}

static int usage_(const char *msg)
{
    if (msg) fprintf(stderr, "bench_gpu: %s\n", msg);
    fprintf(stderr, "usage: bench_gpu [--width W] [--in N] [--out N] [--layers L] [--batch B] "
                    "[--steps S] [--rounds R] [--warmup N] [--precision bf16|fp32|both] [--quick] "
                    "[--peak-bf16 TF] [--peak-fp32 TF] [--csv FILE] [--model]\n");
    return 2;
}

int main(int argc, char **argv)
{
    bench_gpu_args_t a = {8192, 8192, 8192, 4, 4096, 5, 5, 3, 1, 1, 989.0, 67.0, NULL, 0};
    int in_set = 0, out_set = 0;
    a.csv = getenv("BENCH_CSV");
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *ip = !strcmp(o, "--width")    ? &a.width
                  : !strcmp(o, "--in")     ? &a.in
                  : !strcmp(o, "--out")    ? &a.out
                  : !strcmp(o, "--layers") ? &a.layers
                  : !strcmp(o, "--batch")  ? &a.batch
                  : !strcmp(o, "--steps")  ? &a.steps
                  : !strcmp(o, "--rounds") ? &a.rounds
                  : !strcmp(o, "--warmup") ? &a.warmup
                                           : NULL;
        if (ip) {
            if (!v) return usage_("an option lacks its value");
            *ip = atoi(v), i++;
            in_set |= ip == &a.in, out_set |= ip == &a.out;
        } else if (!strcmp(o, "--quick")) {
            a.width = 64, a.batch = 32, a.steps = 2, a.rounds = 2, a.warmup = 1;
            if (!in_set) a.in = 64;
            if (!out_set) a.out = 64;
        } else if (!strcmp(o, "--precision") && v) {
            a.bf16 = !strcmp(v, "bf16") || !strcmp(v, "both");
            a.fp32 = !strcmp(v, "fp32") || !strcmp(v, "both");
            if (!a.bf16 && !a.fp32) return usage_("--precision is bf16, fp32 or both");
            i++;
        } else if (!strcmp(o, "--peak-bf16") && v) {
            a.peak_bf16 = atof(v), i++;
        } else if (!strcmp(o, "--peak-fp32") && v) {
            a.peak_fp32 = atof(v), i++;
        } else if (!strcmp(o, "--model")) {
            a.model_only = 1;
        } else if (!strcmp(o, "--csv") && v) {
            a.csv = v, i++;
        } else if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage_(NULL);
            return 0;
        } else {
            return usage_("unknown option (or one without its value)");
        }
    }
    if (!in_set && a.in == 8192 && a.width != 8192) a.in = a.width;
    if (!out_set && a.out == 8192 && a.width != 8192) a.out = a.width;
    if (a.width < 1 || a.in < 1 || a.out < 2 || a.layers < 1 || a.layers > BENCH_GPU_MAX_LAYERS ||
        a.batch < 1 || a.steps < 1 || a.rounds < 1 || a.rounds > BENCH_GPU_MAX_ROUNDS ||
        a.warmup < 0 || a.peak_bf16 <= 0 || a.peak_fp32 <= 0)
        return usage_("need --width, --in, --batch, --steps >= 1, --out >= 2, 1 <= --layers <= 16, "
                      "1 <= --rounds <= 64, --warmup >= 0, peaks > 0");

    ops_ = &compute_cuda_ops;
    char describe[256] = "";
    if (ops_->init(0, 1, describe, sizeof describe) != DDP_OK) {
        fprintf(stderr, "bench_gpu: no GPU to run on: %s\n", ddp_error_message());
        return 1;
    }
    ddp_cuda_device_info_t info;
    memset(&info, 0, sizeof info);
    ddp_cuda_device_info(ddp_cuda_bound_device() < 0 ? 0 : ddp_cuda_bound_device(), &info);
    char ver[128] = "";
    ddp_cuda_version_string(ver, sizeof ver);

    bench_gpu_net_t n;
    memset(&n, 0, sizeof n);
    net_init_(&n, &a);
    int maxd = a.width > a.in ? a.width : a.in;
    maxd = a.out > maxd ? a.out : maxd;
    if (bench_gpu_gemm_init(maxd, a.batch) != 0) {
        fprintf(stderr, "bench_gpu: cuBLAS alone: %s\n", bench_gpu_gemm_error());
        return 1;
    }
    double flops = step_flops_(&n, a.layers, a.batch), p6 = 6.0 * (double)n.params * a.batch;
    printf("# bench_gpu: MLP %d", a.in);
    for (int l = 1; l <= a.layers; l++) printf("-%d", n.dims[l]);
    printf(" (%d linear layers, ReLU, %zu parameters), batch %d, cross-entropy, AdamW\n", a.layers,
           n.params, a.batch);
    printf("# device: %s (sm_%d%d, %d SMs, %.0f GiB); %s; backend: %s\n", info.name, info.sm_major,
           info.sm_minor, info.sm_count, info.mem_total / 1073741824.0, ver, describe);
    printf("# FLOPs per step: %.6g GFLOP = the GEMMs as performed, 2*B*in*out for the forward and "
           "weight gradient of every layer and the input gradient of layers 2..%d "
           "(6*params*batch = %.6g GFLOP also counts the first layer's input gradient, not "
           "computed, and the biases); elementwise work, the loss and AdamW not counted\n",
           flops / 1e9, a.layers, p6 / 1e9);
    printf(
        "# peaks: bf16 %.0f TFLOP/s, fp32 %.0f TFLOP/s (dense; the H200's: bf16 989, TF32 494, "
        "fp32 without tensor cores 67); the fp32 GEMMs are cublasSgemm in the default math mode\n",
        a.peak_bf16, a.peak_fp32);
    if (a.model_only) {
        printf("# --model: nothing timed; the model of one step of each precision\n");
    } else {
        printf("# %d rounds of %d steps, alternating with %d times the step's GEMMs through "
               "cuBLAS alone; %d warm-up steps; medians\n",
               a.rounds, a.steps, a.steps, a.warmup);
        printf("%-5s  %-20s %10s %12s %10s %9s %10s\n", "prec", "what", "ms/step", "samples/s",
               "TFLOP/s", "of peak", "of cuBLAS");
    }
    FILE *csv = a.csv ? fopen(a.csv, "a") : NULL;
    if (a.csv && !csv) {
        fprintf(stderr, "bench_gpu: --csv %s: cannot open it for appending\n", a.csv);
        return 2;
    }
    int64_t t = 0;
    int rc = 0, met = 1;
    if (!a.model_only) {
        if (a.bf16) rc |= run_precision_(&n, &a, 1, &t, csv, &met);
        if (a.fp32) rc |= run_precision_(&n, &a, 0, &t, csv, &met);
    }
    /* the model: one more step of each precision with the cost log on */
    double ratio = 0;
    if (a.bf16) {
        model_precision_(&n, &a, 1, &t, csv, &ratio);
        int ok = ratio <= 1.25;
        printf("bf16   model target: step <= 1.25x its GEMMs alone: %.3fx (%s)\n", ratio,
               ok ? "met" : "NOT met");
        met = met && ok;
    }
    if (a.fp32) {
        model_precision_(&n, &a, 0, &t, csv, &ratio);
        printf("fp32   model: step = %.3fx its GEMMs alone\n", ratio);
    }
    printf("# targets %s\n", met ? "met" : "NOT all met (see the target lines)");
    if (csv) fclose(csv);
    bench_gpu_gemm_free();
    return rc;
}
