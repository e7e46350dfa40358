/* compute.c -- the registry of compute backends built into this binary,
 * and the choice of one from --device. */
#include "compute.h"

#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#ifdef HAVE_CUDA
#include "ddp_cuda.h"
#endif

/* One line per backend, under the configure condition that builds it. */
static const compute_ops_t *const backends_[] = {
    &compute_cpu_ops,
#ifdef HAVE_CUDA
    &compute_cuda_ops,
#endif
};

int compute_backend_count(void)
{
    return (int)(sizeof backends_ / sizeof backends_[0]);
}

const compute_ops_t *compute_backend(int i)
{
    return i >= 0 && i < compute_backend_count() ? backends_[i] : NULL;
}

const compute_ops_t *compute_find(const char *name)
{
    for (int i = 0; i < compute_backend_count(); i++)
        if (strcmp(backends_[i]->name, name) == 0) return backends_[i];
    return NULL;
}

int compute_gpu_count(void)
{
#ifdef HAVE_CUDA
    return ddp_cuda_device_count();
#else
    return 0;
#endif
}

int (*compute_bf16_gemm_fn(void))(int on)
{
#ifdef HAVE_CUDA
    return ddp_cuda_set_bf16_gemm;
#else
    return NULL;
#endif
}

ddp_status_t compute_pick(const char *device, const compute_ops_t *cpu, const compute_ops_t *cuda,
                          int gpus, const compute_ops_t **out)
{
    *out = NULL;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (strcmp(device, "cpu") == 0) {
        *out = cpu;
    } else if (strcmp(device, "cuda") == 0) {
        if (!cuda)
            return ddp_fail(DDP_ERR_USAGE,
                            "--device cuda: this ddptrain was built without the cuda backend "
                            "(ddptrain --version lists the backends); rebuild with ./configure "
                            "--with-cuda --with-nccl, or use --device cpu");
        if (gpus <= 0)
            return ddp_fail(
                DDP_ERR_DEVICE,
                "--device cuda: no GPU is visible to this rank (CUDA_VISIBLE_DEVICES=%s); "
                "run on a GPU node and ask the launcher for GPUs (Slurm: "
                "--gpus-per-task=1), or use --device cpu",
                visible ? visible : "unset");
        *out = cuda;
    } else if (strcmp(device, "auto") == 0) {
        *out = cuda && gpus > 0 ? cuda : cpu;
    } else {
        return ddp_fail(DDP_ERR_USAGE, "--device %s: not one of cpu, cuda, auto", device);
    }
    return DDP_OK;
}
