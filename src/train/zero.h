/* zero.h -- ZeRO (--zero 1|2): which part of the trainable parameters each
 * rank owns, and the collectives that keep sharded state exact.
 *
 * The shards follow the gradient buckets: rank r owns block r of every
 * bucket (comm_block: the block the comm layer's reduce-scatter leaves
 * summed on r), so a rank's shard is one piece of each bucket, the shards
 * differ by at most one element per bucket, and the sums a rank owns after
 * a bucket's reduce-scatter are exactly the gradients of its shard.  The
 * optimizer state of the shard is kept in bucket order: block b of this
 * rank starts at shard_off[b] of the state buffers.
 *
 * Stage 1 keeps the optimizer state of the shard only; stage 2 also the
 * reduced gradients of the shard only (the gradient buffer is a few
 * bucket-sized slots that backward cycles through, reducer.c).  Stage 0
 * keeps everything on every rank; its plan still describes the blocks, so
 * the gradient norm for clipping is added up in the same pieces and the
 * same order at every stage (zero_grad_norm): --zero 1 and 2 give the
 * weights of --zero 0 bit for bit.
 */
#ifndef DDP_ZERO_H
#define DDP_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "control.h"
#include "model.h"
#include "status.h"

typedef struct zero_plan {
    int stage;          /* --zero: 0, 1 or 2 */
    int rank, size;     /* in the gradient plane */
    int nbuckets;
    size_t *first, *n;  /* per bucket: this rank's block, elements from the bucket's start */
    size_t *shard_off;  /* per bucket: where that block is in the shard */
    size_t shard_count; /* elements of this rank's shard */
    size_t max_shard;   /* the largest shard of any rank */
    /* stage 2, sharded, one micro-batch per step: the gradient buffer is
     * ZERO_GRAD_SLOTS bucket-sized slots (model_t.grad_slots) and each
     * rank's reduced block of every bucket moves to shard_grads (compute
     * memory, shard_count floats, set by the trainer) before its slot is
     * reused.  0: the whole gradient buffer (stages 0 and 1; stage 2 with
     * --accum > 1, whose micro-batches accumulate every gradient locally
     * before the one reduction, as --zero 0 does, so the sums stay bit for
     * bit those of --zero 0). */
    int slots;
    float *shard_grads;
} zero_plan_t;

#define ZERO_GRAD_SLOTS 2 /* a bucket being written while the one before is reduced */

/* The plan of `stage` for rank `rank` of `size` over m's buckets, with
 * `accum` micro-batches per step. */
ddp_status_t zero_plan_init(zero_plan_t *z, const model_t *m, int stage, int rank, int size,
                            int64_t accum);
/* The gradient slots of a plan of `stage` over `size` ranks with `accum`
 * micro-batches per step (zero_plan_t.slots). */
int zero_slots(int stage, int size, int64_t accum);
/* Where this rank's reduced gradients of bucket b are (its block). */
float *zero_block_grads(const zero_plan_t *z, const model_t *m, int b);
void zero_plan_free(zero_plan_t *z);
/* Sharded: stage 1 or 2 with more than one rank. */
int zero_sharded(const zero_plan_t *z);
/* Where element `offset` of the trainable range lives in this rank's
 * shard; the range [offset, offset + count) must lie in one of its blocks
 * (DDP_ERR_INTERNAL otherwise). */
ddp_status_t zero_shard_offset(const zero_plan_t *z, const model_t *m, size_t offset,
                               size_t count, size_t *at);

/* The global L2 norm of the reduced gradients, bit-identical on every rank
 * and at every stage: the sum of squares of each (bucket, rank) block, in
 * double, added in bucket then rank order.  Sharded, each rank squares its
 * own blocks and the pieces are gathered on the control plane (download
 * first: the gradients are in compute memory); at stage 0 every rank
 * squares every block itself.  Collective when sharded. */
ddp_status_t zero_grad_norm(const zero_plan_t *z, const model_t *m, control_t *ctl,
                            double *norm);
/* Scale this rank's blocks of the gradients (every block at stage 0). */
void zero_grad_scale(const zero_plan_t *z, model_t *m, float coef);
/* Every reduced gradient this rank holds is finite: its blocks when
 * sharded, agreed over the ranks on the control plane (collective), else
 * the whole range (the same answer everywhere, no collective). */
ddp_status_t zero_grads_finite(const zero_plan_t *z, const model_t *m, control_t *ctl, int *ok);

/* Rank 0 gathers optimizer state `state` (this rank's shard in compute
 * memory) bucket by bucket: for each bucket b, every rank calls it in turn
 * and rank 0 receives the whole bucket in `bucket_host` (host, the largest
 * bucket's elements).  Collective; other ranks pass bucket_host = NULL. */
ddp_status_t zero_gather_bucket(const zero_plan_t *z, const model_t *m, control_t *ctl,
                                const float *state, int b, float *bucket_host, float *scratch);
/* The reverse at resume: rank 0 holds the full state `full` (host,
 * ntrainable elements; NULL on other ranks); every rank gets its shard into
 * `state` (compute memory).  Collective. */
ddp_status_t zero_scatter_state(const zero_plan_t *z, const model_t *m, control_t *ctl,
                                const float *full, float *state);

#endif
