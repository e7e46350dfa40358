// loss.cu -- the loss launchers of ddp_cuda.h: softmax cross-entropy with
// label smoothing (xent) and mean squared error (mse).
//
// xent: one thread per row runs the CPU backend's very row function
// (ddp_xent_row, backend_math.h), so a row's loss, hit and gradient agree
// with cpu_loss.c's to the device's expf/log rounding.  mse: one thread
// per element.  The sums over rows (elements) are deterministic, without
// atomics: each block reduces its threads' partial sums in a fixed tree in
// static shared memory (ddp_block_sum, block_reduce.h) and writes them to a
// scratch array, then one block adds the partials in a fixed tree and adds
// the result to acc.  The
// partials' shape depends only on n (n * k), so the same inputs give the
// same bits on every run.
#include "ddp_cuda_rt.h"

#include "backend_math.h"
#include "block_reduce.h"

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

// One thread per row (ddp_xent_row).  dlogits may alias logits: each
// row's logits are read by its thread before it writes the row.
// part[2b] = the block's sum of losses, part[2b+1] = its hits.
__global__ void xent_rows_k(int n, int classes, const float *logits, const int32_t *labels,
                            float smoothing, float grad_scale, float *dlogits, double *part)
{
    __shared__ double sh[kDdpThreads];
    const double eps = smoothing;
    double loss = 0, hits = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n;
         i += (size_t)gridDim.x * blockDim.x) {
        float *dl = dlogits ? dlogits + i * classes : nullptr;
        ddp_xent_row(classes, logits + i * classes, labels[i], eps, grad_scale, dl, &loss, &hits);
    }
    loss = ddp_block_sum(sh, loss);
    hits = ddp_block_sum(sh, hits);
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
    s = ddp_block_sum(sh, s);
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
        s = ddp_block_sum(sh, s);
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
