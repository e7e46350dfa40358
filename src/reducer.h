/* reducer.h -- gradient buckets: ready counting, asynchronous all-reduce
 * launched the moment a bucket's last gradient is written (overlapping the
 * rest of backward), accumulation (no-sync micro-batches), 16-bit
 * compression, and the unused-parameter check.
 *
 * Gradients arrive pre-scaled by 1/(global samples of the step) (the loss
 * seeds backward with that scale), so the all-reduced SUM is the average
 * gradient of the union batch: no division afterwards, and uneven batches
 * (a rank with fewer or no samples) average correctly.
 */
#ifndef DDP_REDUCER_H
#define DDP_REDUCER_H

#include <stdint.h>

#include "comm.h"
#include "config.h"
#include "model.h"
#include "status.h"

struct reducer_span;

typedef struct reducer {
    model_t *m;
    comm_t *comm;
    const compute_ops_t *be;
    int compress; /* compress_kind_t */
    int find_unused;
    int sync;  /* this micro-batch all-reduces */
    int final; /* the last micro-batch of the step */
    /* The optimizer over [offset, offset + count) of the flat buffers, run
     * once per bucket of the final micro-batch as soon as the bucket's
     * gradients are final.  Where the comm backend can, it is fused into the
     * all-reduce (each rank updates the blocks it sums, the others copy the
     * results: apply_out are the buffers it writes); otherwise it runs on
     * every rank when the bucket completes, or when it is ready if there is
     * nothing to reduce.  NULL: the trainer steps after reducer_finish. */
    void (*apply)(void *arg, size_t offset, size_t count);
    void *apply_arg;
    int napply_out;
    float *apply_out[COMM_APPLY_MAX];
    int next_done;              /* buckets whose update has been run or handed on */
    unsigned char *fused;       /* per bucket: the update runs inside the all-reduce */
    struct reducer_span *spans; /* per bucket: the fused update's context */
    int64_t step;
    float grad_beta;       /* of this micro-batch (0: gradients were overwritten) */
    int *pending;          /* per bucket: tensors not yet ready */
    unsigned char *ready;  /* per tensor */
    comm_req_t **req;      /* per bucket: in-flight all-reduce */
    int next_launch;       /* buckets are launched strictly in order */
    uint16_t *half;        /* compression buffer (device), ntrainable elements */
    const char *skip_grad; /* fault injection: a tensor never marked ready */
    /* statistics */
    uint64_t bytes_sent; /* payload bytes all-reduced by the reducer */
    uint64_t calls;      /* bucket all-reduces started */
    double wait_seconds; /* time blocked in reducer_finish */
} reducer_t;

ddp_status_t reducer_init(reducer_t *r, model_t *m, comm_t *c, int compress, int find_unused);
void reducer_free(reducer_t *r);

/* Before a micro-batch's backward.  final: the last micro-batch of the step
 * (the first K-1 of --accum K accumulate locally and communicate nothing);
 * sync: all-reduce the final micro-batch (0 for --no-sync or one rank). */
void reducer_begin(reducer_t *r, int final, int sync, int64_t step, float grad_beta);
/* The backward hook (step_ctx.grads_ready): layer's gradients are final. */
ddp_status_t reducer_layer_ready(void *reducer, int layer);
/* After backward: handle parameters that got no gradient (error, or zero
 * gradient with --find-unused), wait for every bucket, decompress, hand
 * the update of every bucket whose all-reduce did not run it. */
ddp_status_t reducer_finish(reducer_t *r);

#endif
