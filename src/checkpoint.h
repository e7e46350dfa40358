/* checkpoint.h -- what the trainer writes to disk: the final weights
 * (--save), through weights.c's atomic writer (temporary file, rename), and
 * the start-up probe that finds an unwritable path before training starts. */
#ifndef DDP_CHECKPOINT_H
#define DDP_CHECKPOINT_H

#include "status.h"
#include "train.h"

struct trainer;

/* Rank 0 creates and removes the temporary file --save will use, so a path
 * that cannot be written stops the job at start-up, not after training.
 * Local: agree on the result. */
ddp_status_t checkpoint_probe_save(const struct trainer *t);
/* --save after training: every rank averages local BN statistics if any,
 * rank 0 writes; the result is agreed. */
ddp_status_t checkpoint_save_final(struct trainer *t, const train_result_t *res);

#endif
