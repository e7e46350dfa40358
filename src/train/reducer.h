/* reducer.h -- gradient buckets: ready counting, an asynchronous all-reduce
 * launched the moment a bucket's last gradient is written (overlapping the
 * rest of backward), accumulation (no-sync micro-batches), 16-bit
 * compression, and the unused-parameter check.
 *
 * Gradients arrive pre-scaled by 1/(global samples of the step) (the loss
 * seeds backward with that scale), so the all-reduced SUM is the average
 * gradient of the union batch: no division afterwards, and uneven batches
 * (a rank with fewer or no samples) average correctly.
 *
 * The chain of one step, in the order things run (one thread, no callbacks
 * from elsewhere):
 *
 *   model_backward (model.c), layer by layer in reverse
 *     -> reducer_layer_ready (the step_ctx.grads_ready hook) after each layer
 *        whose parameter gradients are final: counts them into their bucket;
 *        a bucket whose count reaches zero is launched (buckets strictly in
 *        order) with comm ops->iallreduce, or ops->iallreduce_apply when
 *        the backend can fuse the update into the all-reduce, after an
 *        event of the compute backend says its gradients are written
 *        (compute.h, "Ordering")
 *     -> comm ops->progress (comm_mpi.c): drives every bucket in flight as
 *        far as it goes without waiting; a fused all-reduce runs the
 *        optimizer update of the blocks it completes, right there
 *   reducer_finish, after backward
 *     -> waits for every bucket in order and runs the update hook
 *        (reducer_apply_t, optim_apply) of each bucket the all-reduce did not
 *        already update.
 *
 * Under --zero 1|2 (zero.h) a bucket is reduce-scattered instead, and the
 * update of this rank's block runs inside it (or after it, with
 * compression); reducer_finish then all-gathers each bucket's parameters as
 * soon as its reduce-scatter is waited for, in bucket order on every rank
 * (collectives start in the same order everywhere), and waits for them.
 *
 * So the optimizer runs inside the comm layer's progress, inside backward,
 * by design: each bucket is updated while its gradients are still in cache.
 * Without an update hook (gradient clipping needs every gradient first) the
 * trainer runs the optimizer after reducer_finish.
 */
#ifndef DDP_REDUCER_H
#define DDP_REDUCER_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "model.h"
#include "status.h"
#include "zero.h"

typedef struct reducer reducer_t;

/* The optimizer update of [offset, offset + count) of the flat buffers.
 * `out` are the buffers fn writes (parameters, then optimizer state), for a
 * fused all-reduce that copies them from the rank that updated a block. */
typedef struct reducer_apply {
    void (*fn)(void *arg, size_t offset, size_t count);
    void *arg;
    int nout;
    float *out[COMM_APPLY_MAX];
} reducer_apply_t;

typedef struct reducer_opts {
    comm_dtype_t wire; /* what buckets travel as: COMM_FLOAT, COMM_BF16 or COMM_FP16 */
    int find_unused;   /* a parameter without a gradient gets zero (else an error) */
    /* Run once per bucket of the final micro-batch as soon as its gradients
     * are final; NULL: the trainer steps after reducer_finish. */
    const reducer_apply_t *apply;
    /* Run apply inside the all-reduce where the comm backend can
     * (iallreduce_apply: each rank updates the block it reduced); 0: after
     * the bucket's all-reduce completes. */
    int fuse;
    /* Where the 16-bit bucket copy comes from (registered with the comm
     * backend by it); NULL: comm_mem_alloc. */
    const model_mem_t *mem;
    /* --zero 1|2 (zero.h; NULL or not sharded: all-reduce): each bucket is
     * reduce-scattered, this rank's block updated (apply, fused into the
     * reduce-scatter where it can), and the bucket's parameters all-gathered
     * (params: the parameter buffer) before reducer_finish returns; without
     * apply the trainer updates its blocks and calls reducer_gather_params. */
    const zero_plan_t *zero;
    float *params;
} reducer_opts_t;

typedef struct reducer_stats {
    uint64_t bytes_sent;  /* payload bytes all-reduced */
    uint64_t calls;       /* bucket all-reduces started */
    double wait_seconds;  /* time blocked in reducer_finish */
    size_t scratch_bytes; /* memory of its own (the 16-bit bucket copies) */
} reducer_stats_t;

/* Collective when compressing and the 16-bit buffer comes from
 * comm_mem_alloc. */
ddp_status_t reducer_init(reducer_t **r, model_t *m, comm_t *c, const reducer_opts_t *o);
void reducer_free(reducer_t *r);

/* Before a micro-batch's backward.  final: the last micro-batch of the step
 * (the first K-1 of --accum K accumulate locally and communicate nothing);
 * sync: all-reduce the final micro-batch (0 for --no-sync or one rank). */
void reducer_begin(reducer_t *r, int final, int sync, int64_t step, float grad_beta);
/* The backward hook before a layer writes its parameter gradients
 * (step_ctx.grads_needed): with --zero 2's gradient slots, the buckets that
 * used the slots its buckets are about to write are finished with first
 * (their reduce-scatter waited for -- started here if a parameter of theirs
 * got no gradient --, this rank's block moved into the shard and updated;
 * the parameters' all-gathers start in reducer_finish).  Nothing to do
 * otherwise. */
ddp_status_t reducer_layer_begin(void *reducer, int layer);
/* The backward hook (step_ctx.grads_ready): layer's gradients are final. */
ddp_status_t reducer_layer_ready(void *reducer, int layer);
/* After backward: handle parameters that got no gradient (error, or zero
 * gradient with --find-unused), wait for every bucket, decompress, run the
 * update of every bucket whose all-reduce did not run it. */
ddp_status_t reducer_finish(reducer_t *r);
/* --zero without a per-bucket update: after the trainer updated its blocks,
 * every bucket's parameters from their owners (all-gather), waited for.
 * Nothing to do when not sharded. */
ddp_status_t reducer_gather_params(reducer_t *r);

void reducer_get_stats(const reducer_t *r, reducer_stats_t *s);

/* Communication alone (--diagnose): every bucket all-reduced once, the way
 * a step sends it (the same slices of the gradient buffer, or of its 16-bit
 * copy with --grad-compress, on the same comm path, launched in order, then
 * waited for), without compute, compression or update: the gradient buffer
 * holds sums afterwards (the next step overwrites it).  *bytes: the payload
 * bytes of one call.  Not counted in the stats.  Collective on the gradient
 * plane; with one rank nothing is sent (*bytes 0). */
ddp_status_t reducer_allreduce_buckets(reducer_t *r, uint64_t *bytes);

#endif
