/* train_result.h -- what a training run did, for its caller (main, the
 * tests) and for the rooms that fill it in: the loop (steps, bytes),
 * metrics (the last logged loss) and evaluation (the last val numbers). */
#ifndef DDP_TRAIN_RESULT_H
#define DDP_TRAIN_RESULT_H

#include <stdint.h>

typedef struct train_result {
    int64_t steps;            /* optimizer steps taken */
    double last_loss;         /* global mean training loss of the last logged window */
    double val_loss, val_acc; /* last evaluation (NaN if none) */
    int64_t val_count;        /* validation samples counted in it */
    uint64_t allreduce_bytes; /* gradient bytes all-reduced */
} train_result_t;

#endif
