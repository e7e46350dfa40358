/* train_emu.c -- ddptrain's training with the "cuda" compute backend and
 * the "nccl" comm backend built against the CPU emulation of CUDA, cuBLAS
 * and NCCL (cuda/emu, libddpcuda_emu.a), for tests/test_gpu_emu.sh: the
 * options of ddptrain (--device cpu|cuda|auto, --precision), the same exit
 * codes, messages and watchdog (job.h).  The emulation's GPUs:
 * DDP_EMU_GPUS per host. */
#include "comm_nccl.h"
#include "compute.h"
#include "ddp_cuda.h"
#include "job.h"
#include "train.h"

int main(int argc, char **argv)
{
    job_t job;
    ddp_status_t s = job_begin(&job, &argc, &argv);
    if (s == DDP_OK) {
        /* this binary's registry has cpu and mpi only: the emulated GPU
         * backends come from here */
        train_backends_t b;
        train_backends_builtin(&b);
        b.cuda = &compute_cuda_ops;
        b.gpu_count = ddp_cuda_device_count;
        b.set_bf16_gemm = ddp_cuda_set_bf16_gemm;
        b.device_comm = &comm_nccl_backend;
        train_result_t res;
        s = ddp_train_with(&job.cfg, &job.ctl, &b, &res);
    }
    return job_end(&job, s);
}
