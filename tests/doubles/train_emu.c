/* train_emu.c -- ddptrain's training with the "cuda" compute backend and
 * the "nccl" comm backend built against the CPU emulation of CUDA, cuBLAS
 * and NCCL (tests/emu, libddpcuda_emu.a), for tests/e2e/test_gpu_emu.sh: the
 * options of ddptrain (--device cpu|cuda|auto, --precision), the same exit
 * codes, messages and watchdog (job.h).  The emulation's GPUs:
 * DDP_EMU_GPUS per host. */
#include "comm.h"
#include "compute.h"
#include "job.h"
#include "loop.h"

int main(int argc, char **argv)
{
    job_t job;
    ddp_status_t s = job_begin(&job, &argc, &argv);
    if (s == DDP_OK && job.action != CONFIG_RUN) return job_end(&job, s);
    /* this binary's registries have cpu and mpi only: the emulated GPU
     * backends are registered here, as a GPU build's registries hold them */
    if (s == DDP_OK) s = compute_register("cuda", &compute_cuda_ops);
    if (s == DDP_OK) s = comm_register_backend(&comm_nccl_backend);
    if (s == DDP_OK) {
        train_result_t res;
        s = ddp_train(&job.cfg, &job.ctl, &res);
    }
    return job_end(&job, s);
}
