/* train.h -- the trainer: start-up, the training loop, evaluation, and the
 * one place where errors are reported and the job is ended. */
#ifndef DDP_TRAIN_H
#define DDP_TRAIN_H

#include "comm.h"
#include "config.h"
#include "status.h"

/* Results of a run, for tests that run the trainer in-process. */
typedef struct train_result {
    int64_t steps;            /* optimizer steps taken */
    double last_loss;         /* global mean training loss of the last logged window */
    double val_loss, val_acc; /* last evaluation (NaN if none) */
    int64_t val_count;        /* validation samples counted in it */
    uint64_t allreduce_bytes; /* gradient bytes all-reduced */
} train_result_t;

/* Train with an already parsed configuration on `world` (MPI initialised).
 * Collective: every rank of `world` calls it. */
ddp_status_t ddp_train(const ddp_config_t *cfg, MPI_Comm world, train_result_t *res);

/* The program: parse, initialise MPI, train, report, exit code. */
int ddp_main(int argc, char **argv);

#endif
