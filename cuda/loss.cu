// loss.cu -- the loss launchers of ddp_cuda.h: softmax cross-entropy with
// label smoothing (xent) and mean squared error (mse).
//
// xent: one thread per row runs the CPU backend's loop over the row in the
// same order (first argmax, the sum of the logits and of exp(z - max) in
// double, the loss in double), so a row's loss, hit and gradient agree with
// compute_cpu.c's to the device's expf/log rounding.  mse: one thread per
// element.  The sums over rows (elements) are deterministic, without
// atomics: each block reduces its threads' partial sums in a fixed tree in
// static shared memory and writes them to a scratch array, then one block
// adds the partials in a fixed tree and adds the result to acc.  The
// partials' shape depends only on n (n * k), so the same inputs give the
// same bits on every run.
#include "ddp_cuda_rt.h"

#include <math.h>

namespace
{

// Partial sums of the first pass: two per block (xent: loss and hits), on
// the bound device (allocated at the first use there, as reduce.cu's).
double *partials_ = nullptr;
int partials_device_ = -1;
constexpr size_t kMaxPartials = 2 * 4096; // ddp_blocks_for's cap, twice

int partials(double **out)
{
    if (partials_device_ != ddp_cuda_state_.device) {
        partials_ = nullptr;
        partials_device_ = ddp_cuda_state_.device;
    }
    if (!partials_) DDP_CU(cudaMalloc((void **)&partials_, kMaxPartials * sizeof(double)));
    *out = partials_;
    return 0;
}

// The sum of every thread's `v` over the block, in every thread (all
// threads of the block must call it).
__device__ double block_sum(double *sh, double v)
{
    const int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = kDdpThreads / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); // sh may be reused at once
    return r;
}

// Per row: max and the first argmax (ties and NaN as the CPU's strict >),
// then sum exp(z - max) and log in double; loss = lse - (1-eps) z_y -
// eps mean_j z_j; dlogits = grad_scale (softmax - (1-eps) onehot - eps/C).
// dlogits may alias logits: each row's logits are read by its thread
// before it writes the row.  Labels outside [0, classes) contribute
// nothing (zero gradient).  part[2b] = sum of losses, part[2b+1] = hits.
__global__ void xent_rows_k(int n, int classes, const float *logits, const int32_t *labels,
                            float smoothing, float grad_scale, float *dlogits, double *part)
{
    __shared__ double sh[kDdpThreads];
    const double eps = smoothing;
    double loss = 0, hits = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float *z = logits + i * classes;
        float *dl = dlogits ? dlogits + i * classes : nullptr;
        const int y = labels[i];
        const int valid = y >= 0 && y < classes;
        float zmax = z[0];
        int arg = 0;
        double zsum = 0;
        for (int j = 0; j < classes; j++) {
            if (z[j] > zmax) {
                zmax = z[j];
                arg = j;
            }
            zsum += z[j];
        }
        const float zy = valid ? z[y] : 0.0f;
        double s = 0;
        for (int j = 0; j < classes; j++) {
            float e = expf(z[j] - zmax);
            s += e;
            if (dl) dl[j] = e;
        }
        if (!valid) {
            if (dl)
                for (int j = 0; j < classes; j++) dl[j] = 0.0f;
            continue;
        }
        double lse = (double)zmax + log(s);
        loss += lse - (1.0 - eps) * zy - eps * zsum / classes;
        hits += arg == y;
        if (dl) {
            const float inv = (float)(1.0 / s), off = (float)(eps / classes);
            for (int j = 0; j < classes; j++) dl[j] = (dl[j] * inv - off) * grad_scale;
            dl[y] -= (float)(1.0 - eps) * grad_scale;
        }
    }
    loss = block_sum(sh, loss);
    hits = block_sum(sh, hits);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = loss;
        part[2 * blockIdx.x + 1] = hits;
    }
}

// dpred = 2 grad_scale (pred - target); part[b] = the block's sum of squares
__global__ void mse_k(size_t count, const float *pred, const float *target, float two, float *dpred,
                      double *part)
{
    __shared__ double sh[kDdpThreads];
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float t = pred[i] - target[i];
        s += (double)t * t;
        if (dpred) dpred[i] = two * t;
    }
    s = block_sum(sh, s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// acc[a] += sum over b < blocks of part[b * width + a], for a < width (one
// block; each thread sums a fixed stride of the partials, then the tree).
__global__ void add_partials_k(unsigned blocks, int width, const double *part, double *acc)
{
    __shared__ double sh[kDdpThreads];
    for (int a = 0; a < width; a++) {
        double s = 0;
        for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x)
            s += part[(size_t)b * width + a];
        s = block_sum(sh, s);
        if (threadIdx.x == 0) acc[a] += s;
    }
}

} // namespace

extern "C" int ddp_cuda_xent(int n, int classes, const float *logits, const int32_t *labels,
                             float smoothing, float grad_scale, float *dlogits, double *acc)
{
    if (n <= 0 || classes <= 0) return 0;
    double *part;
    if (partials(&part)) return -1;
    const unsigned blocks = ddp_blocks_for((size_t)n);
    cudaStream_t st = ddp_cuda_state_.stream;
    DDP_LAUNCH(xent_rows_k, blocks, kDdpThreads, st, n, classes, logits, labels, smoothing,
               grad_scale, dlogits, part);
    DDP_CU_LAUNCHED();
    DDP_LAUNCH(add_partials_k, 1, kDdpThreads, st, blocks, 2, (const double *)part, acc);
    DDP_CU_LAUNCHED();
    return 0;
}

extern "C" int ddp_cuda_mse(int n, int k, const float *pred, const float *target, float grad_scale,
                            float *dpred, double *acc)
{
    if (n <= 0 || k <= 0) return 0;
    double *part;
    if (partials(&part)) return -1;
    const size_t count = (size_t)n * k;
    const unsigned blocks = ddp_blocks_for(count);
    cudaStream_t st = ddp_cuda_state_.stream;
    DDP_LAUNCH(mse_k, blocks, kDdpThreads, st, count, pred, target, 2.0f * grad_scale, dpred, part);
    DDP_CU_LAUNCHED();
    DDP_LAUNCH(add_partials_k, 1, kDdpThreads, st, blocks, 1, (const double *)part, acc);
    DDP_CU_LAUNCHED();
    return 0;
}
