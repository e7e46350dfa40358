/* evaluate.h -- evaluation on the /val split: every rank evaluates a
 * disjoint range in eval mode, the sums travel on the control plane, rank 0
 * prints one result line. */
#ifndef DDP_EVALUATE_H
#define DDP_EVALUATE_H

#include <stdint.h>

#include "metrics.h"
#include "step.h"
#include "train_result.h"

/* Fills res->val_loss, val_acc and val_count.  Nothing without /val.  A read
 * failure is local (ranks read different ranges): it ends the job rather
 * than leave the other ranks in the final sum.  A non-finite loss on any
 * rank ends the job with DDP_ERR_NUMERIC (exit 8), agreed between the ranks:
 * one line naming the /val sample (file and row) whose input or target is
 * not finite.  The "eval" record goes to mt (metrics.h). */
void evaluate_run(trainer_t *t, metrics_t *mt, int64_t epoch, int64_t step, train_result_t *res);

#endif
