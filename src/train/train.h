/* train.h -- the trainer's entry point (the rooms it uses: trainer.h). */
#ifndef DDP_TRAIN_H
#define DDP_TRAIN_H

#include <stdint.h>

#include "comm.h"
#include "compute.h"
#include "config.h"
#include "control.h"
#include "status.h"

/* What a run did (for the caller and for tests). */
typedef struct train_result {
    int64_t steps;            /* optimizer steps taken */
    double last_loss;         /* global mean training loss of the last logged window */
    double val_loss, val_acc; /* last evaluation (NaN if none) */
    int64_t val_count;        /* validation samples counted in it */
    uint64_t allreduce_bytes; /* gradient bytes all-reduced */
} train_result_t;

/* The backends a run chooses from: --device picks the compute backend
 * (compute_pick), whose memory kind picks the comm backend (host: mpi,
 * device: nccl).  ddp_train takes this binary's registries
 * (train_backends_builtin); a test program may bring its own (the
 * emulated cuda backend, tests/train_emu.c). */
typedef struct train_backends {
    const compute_ops_t *cpu;          /* --device cpu (and auto without a GPU) */
    const compute_ops_t *cuda;         /* --device cuda; NULL: not built in */
    int (*gpu_count)(void);            /* GPUs visible; NULL: none */
    int (*set_bf16_gemm)(int on);      /* --precision bf16 (cuda); NULL: not available */
    const comm_backend_t *host_comm;   /* for host compute memory */
    const comm_backend_t *device_comm; /* for device compute memory; NULL: not built in */
} train_backends_t;

/* This binary's: cpu and mpi, and cuda and nccl where configure built them. */
void train_backends_builtin(train_backends_t *b);

/* Train with a parsed configuration.  Collective: every rank of the control
 * plane calls it; the status is the same on every rank (or the job has been
 * ended with control_abort). */
ddp_status_t ddp_train(const ddp_config_t *cfg, control_t *ctl, train_result_t *res);
/* The same with `compute` as the cpu backend (NULL: the registry's, as
 * ddp_train) and no cuda: how the tests run the trainer on
 * tests/compute_lazy.c. */
ddp_status_t ddp_train_on(const ddp_config_t *cfg, control_t *ctl, const compute_ops_t *compute,
                          train_result_t *res);
/* The same with the backends to choose from given (NULL: the builtin). */
ddp_status_t ddp_train_with(const ddp_config_t *cfg, control_t *ctl, const train_backends_t *b,
                            train_result_t *res);

#endif
