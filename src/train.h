/* train.h -- the trainer's entry point (the rooms it uses: trainer.h). */
#ifndef DDP_TRAIN_H
#define DDP_TRAIN_H

#include <stdint.h>

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

/* Train with a parsed configuration.  Collective: every rank of the control
 * plane calls it; the status is the same on every rank (or the job has been
 * ended with control_abort). */
ddp_status_t ddp_train(const ddp_config_t *cfg, control_t *ctl, train_result_t *res);
/* The same on a given compute backend (NULL: the registry's default, as
 * ddp_train): how the tests run the trainer on tests/compute_lazy.c. */
ddp_status_t ddp_train_on(const ddp_config_t *cfg, control_t *ctl, const compute_ops_t *compute,
                          train_result_t *res);

#endif
