/* table.h -- the start-up table rank 0 prints before the first step: the
 * ranks, nodes, devices and backends; the input, the model and its
 * buckets; batch, steps, resume, checkpoints, optimizer, BatchNorm; the
 * memory per rank; the options not at their defaults, with where each came
 * from. */
#ifndef DDP_TABLE_H
#define DDP_TABLE_H

#include "run.h"

/* Rank 0 prints; the other ranks return at once. */
void table_print(const run_t *run);

#endif
