/* train_emu.c -- ddptrain's training with the "cuda" compute backend and
 * the "nccl" comm backend built against the CPU emulation of CUDA, cuBLAS
 * and NCCL (cuda/emu, libddpcuda_emu.a), for tests/test_gpu_emu.sh: the
 * options of ddptrain (--device cpu|cuda|auto, --precision), the same exit
 * codes, no watchdog.  The emulation's GPUs: DDP_EMU_GPUS per host. */
#include <mpi.h>
#include <stdio.h>

#include "comm.h"
#include "comm_nccl.h"
#include "compute.h"
#include "config.h"
#include "control.h"
#include "ddp_cuda.h"
#include "deck.h"
#include "h5util.h"
#include "inject.h"
#include "log.h"
#include "progress.h"
#include "signals.h"
#include "train.h"

int main(int argc, char **argv)
{
    int provided, rank;
    MPI_Init_thread(&argc, &argv, COMM_MPI_THREAD_LEVEL, &provided);
    signals_install();
    progress_begin();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    log_setup(rank, LOG_INFO);
    h5_quiet();
    control_t ctl;
    ddp_status_t s = control_init(&ctl, MPI_COMM_WORLD);
    if (s != DDP_OK) {
        log_error(ddp_error_message());
        MPI_Abort(MPI_COMM_WORLD, ddp_exit_code(s));
    }
    ddp_config_t cfg;
    config_action_t action;
    s = control_agree(&ctl, config_parse_args(&cfg, argc, argv, deck_load_config, &action));
    if (s == DDP_OK) s = inject_setup(cfg.inject, rank); /* validated: the same on every rank */
    if (s == DDP_OK) {
        log_setup(rank, cfg.quiet ? LOG_QUIET : LOG_INFO);
        /* this binary's registry has cpu and mpi only: the emulated GPU
         * backends come from here */
        train_backends_t b;
        train_backends_builtin(&b);
        b.cuda = &compute_cuda_ops;
        b.gpu_count = ddp_cuda_device_count;
        b.set_bf16_gemm = ddp_cuda_set_bf16_gemm;
        b.device_comm = &comm_nccl_backend;
        train_result_t res;
        s = ddp_train_with(&cfg, &ctl, &b, &res);
    }
    if (s != DDP_OK && rank == 0) log_error(ddp_error_message());
    config_free(&cfg);
    control_free(&ctl);
    MPI_Finalize();
    return ddp_exit_code(s);
}
