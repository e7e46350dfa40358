/* reducer.c -- bucketed, overlapped gradient all-reduce (see reducer.h). */
#include "reducer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "inject.h"

struct reducer_span;

struct reducer {
    model_t *m;
    comm_t *comm;
    const compute_ops_t *compute;
    comm_dtype_t wire; /* COMM_FLOAT, or the 16-bit type buckets travel as */
    int find_unused;
    int sync;  /* this micro-batch all-reduces */
    int final; /* the last micro-batch of the step */
    int has_apply;
    reducer_apply_t apply;      /* the update hook (reducer.h) */
    int next_done;              /* buckets whose update has been run or handed on */
    int fuse;                   /* fuse the update into the all-reduce where the backend can */
    unsigned char *fused;       /* per bucket: the update runs inside the all-reduce */
    struct reducer_span *spans; /* per bucket: the fused update's context */
    int64_t step;
    float grad_beta;      /* of this micro-batch (0: gradients were overwritten) */
    int *pending;         /* per bucket: tensors not yet ready */
    unsigned char *ready; /* per tensor */
    comm_req_t **req;     /* per bucket: in-flight all-reduce (zero: reduce-scatter) */
    const zero_plan_t *zero; /* sharded (zero_sharded), else NULL */
    float *params;           /* zero: the parameters all-gathered */
    comm_req_t **gather;     /* zero: per bucket, the parameters' all-gather */
    int slots;               /* --zero 2: the gradient slots the buckets cycle through (0: none) */
    int claimed;             /* slots: buckets whose slot backward may write this step */
    int next_launch;      /* buckets are launched strictly in order */
    uint16_t *half;       /* compression buffer (gradient-plane memory): ntrainable elements,
                           * or with --zero 2's slots as many as the slots (half_of_) */
    model_mem_t half_mem; /* where half came from (alloc NULL: comm_mem_alloc) */
    int skip_grad;        /* --inject skipgrad: a tensor never marked ready this step (-1: none) */
    reducer_stats_t stats;
    /* the gradients of the buckets about to launch are written */
    compute_event_t *grads_written;
};

/* The fused update of one bucket: offsets of the collective are relative to
 * the bucket. */
struct reducer_span {
    reducer_t *r;
    size_t offset;
};

static void apply_span_(void *arg, size_t first, size_t count)
{
    struct reducer_span *sp = arg;
    sp->r->apply.fn(sp->r->apply.arg, sp->offset + first, count);
}

static int compressed_(const reducer_t *r)
{
    return r->wire != COMM_FLOAT;
}

/* Bucket b's 16-bit copy (in its slot, like its gradients, with --zero 2). */
static uint16_t *half_of_(const reducer_t *r, int b)
{
    return r->half + (r->slots ? (size_t)(b % r->slots) * r->m->slot_count : r->m->buckets[b].offset);
}

ddp_status_t reducer_init(reducer_t **out, model_t *m, comm_t *c, const reducer_opts_t *o)
{
    *out = NULL;
    if (o->wire != COMM_FLOAT && o->wire != COMM_BF16 && o->wire != COMM_FP16)
        return ddp_fail(DDP_ERR_INTERNAL, "reducer: buckets travel as float32, bf16 or fp16");
    reducer_t *r = calloc(1, sizeof *r);
    if (!r) return ddp_fail(DDP_ERR_NOMEM, "out of memory for the reducer");
    r->m = m;
    r->comm = c;
    r->compute = m->compute;
    r->wire = o->wire;
    r->find_unused = o->find_unused;
    r->zero = o->zero && zero_sharded(o->zero) ? o->zero : NULL;
    r->params = o->params;
    r->slots = r->zero ? m->grad_slots : 0;
    if (o->apply) {
        r->has_apply = 1;
        r->apply = *o->apply;
        r->fuse = o->fuse;
    }
    int nb = m->nbuckets ? m->nbuckets : 1;
    r->pending = calloc((size_t)nb, sizeof *r->pending);
    r->req = calloc((size_t)nb, sizeof *r->req);
    r->gather = calloc((size_t)nb, sizeof *r->gather);
    r->ready = calloc((size_t)(m->ntensors ? m->ntensors : 1), 1);
    r->fused = calloc((size_t)nb, 1);
    r->spans = calloc((size_t)nb, sizeof *r->spans);
    r->grads_written = r->compute->event_create();
    if (!r->pending || !r->req || !r->gather || !r->ready || !r->fused || !r->spans || !r->grads_written) {
        reducer_free(r);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for the reducer");
    }
    if (compressed_(r)) {
        /* from where the gradient buffer came from (collective for comm memory) */
        void *h = NULL;
        size_t bytes = (r->slots ? (size_t)r->slots * m->slot_count : m->ntrainable) *
                           sizeof(uint16_t) + 2;
        if (o->mem && o->mem->alloc) r->half_mem = *o->mem;
        ddp_status_t s = r->half_mem.alloc ? r->half_mem.alloc(r->half_mem.arg, bytes, &h)
                                           : comm_mem_alloc(c, bytes, &h);
        if (s != DDP_OK) {
            reducer_free(r);
            return s;
        }
        r->half = h;
        r->stats.scratch_bytes = bytes;
    }
    r->skip_grad = -1;
    *out = r;
    return DDP_OK;
}

void reducer_free(reducer_t *r)
{
    if (!r) return;
    if (r->half && r->half_mem.free)
        r->half_mem.free(r->half_mem.arg, r->half);
    else if (r->half)
        comm_mem_free(r->comm, r->half);
    if (r->grads_written) r->compute->event_destroy(r->grads_written);
    free(r->pending);
    free(r->req);
    free(r->gather);
    free(r->ready);
    free(r->fused);
    free(r->spans);
    free(r);
}

void reducer_get_stats(const reducer_t *r, reducer_stats_t *s)
{
    *s = r->stats;
}

void reducer_begin(reducer_t *r, int final, int sync, int64_t step, float grad_beta)
{
    const model_t *m = r->m;
    r->final = final;
    r->sync = final && sync && r->comm->size > 1;
    r->next_done = 0;
    r->claimed = 0;
    r->step = step;
    r->grad_beta = grad_beta;
    r->next_launch = 0;
    /* --inject skipgrad:RANK:STEP:TENSOR (the name is checked at start-up,
     * replicas_check_injections): the tensor "receives no gradient" in that step */
    const inject_fault_t *f = final ? inject_due(INJECT_SKIPGRAD, step + 1) : NULL;
    r->skip_grad = f ? model_find_tensor(m, f->arg) : -1;
    for (int b = 0; b < m->nbuckets; b++) {
        r->pending[b] = m->buckets[b].ntensors;
        r->fused[b] = 0;
    }
    memset(r->ready, 0, (size_t)m->ntensors);
}

/* --zero: bucket b reduce-scattered; this rank's block updated inside it
 * when the sums are float32 and the update runs per bucket. */
static ddp_status_t launch_zero_(reducer_t *r, int b, const comm_desc_t *d)
{
    const bucket_t *B = &r->m->buckets[b];
    float *g = model_bucket_grads(r->m, b);
    if (compressed_(r)) {
        uint16_t *h = half_of_(r, b);
        r->compute->to_half(B->count, g, h, r->wire == COMM_BF16);
        return r->comm->ops->ireduce_scatter(r->comm, h, B->count, r->wire, NULL, d, &r->req[b]);
    }
    comm_apply_t a = {.fn = apply_span_, .arg = &r->spans[b], .nextra = 1, .extra = {r->params}};
    r->spans[b] = (struct reducer_span){r, B->offset};
    /* with slots the block moves to the shard first (retire_), then the update */
    r->fused[b] = r->has_apply && r->fuse && !r->slots;
    return r->comm->ops->ireduce_scatter(r->comm, g, B->count, COMM_FLOAT, r->fused[b] ? &a : NULL,
                                         d, &r->req[b]);
}

static ddp_status_t launch_body_(reducer_t *r, int b)
{
    const bucket_t *B = &r->m->buckets[b];
    comm_desc_t d = {"gradient-bucket", b, r->step + 1}; /* the step as logged */
    if (r->zero) return launch_zero_(r, b, &d);
    float *g = model_bucket_grads(r->m, b);
    if (!compressed_(r) && r->fuse && r->comm->ops->iallreduce_apply) {
        r->spans[b] = (struct reducer_span){r, B->offset};
        comm_apply_t a = {.fn = apply_span_, .arg = &r->spans[b], .nextra = r->apply.nout};
        for (int i = 0; i < r->apply.nout; i++) a.extra[i] = r->apply.out[i] + B->offset;
        r->fused[b] = 1;
        return r->comm->ops->iallreduce_apply(r->comm, g, B->count, &a, &d, &r->req[b]);
    }
    if (!compressed_(r))
        return r->comm->ops->iallreduce(r->comm, g, B->count, COMM_FLOAT, &d, &r->req[b]);
    uint16_t *h = r->half + B->offset;
    r->compute->to_half(B->count, g, h, r->wire == COMM_BF16);
    return r->comm->ops->iallreduce(r->comm, h, B->count, r->wire, &d, &r->req[b]);
}

/* Bucket b's collective, inside a profiler range "ddptrain all-reduce
 * bucket B" where the compute backend has them (NVTX: Nsight projects it
 * onto the NCCL kernel it launches). */
static ddp_status_t launch_(reducer_t *r, int b)
{
    if (!r->compute->range_start) return launch_body_(r, b);
    char name[64];
    snprintf(name, sizeof name, "ddptrain %s bucket %d", r->zero ? "reduce-scatter" : "all-reduce",
             b);
    uint64_t id = r->compute->range_start(name);
    ddp_status_t s = launch_body_(r, b);
    r->compute->range_end(id);
    return s;
}

/* Launch every ready bucket in order, once the compute backend has
 * written their gradients (compute.h, "Ordering"): the host waits for them
 * here, unless the comm backend orders its collectives after the compute
 * work on the device (COMM_CAP_STREAM_ORDERED: NCCL waits on the compute
 * stream, and blocking the host would stall the backward pass). */
static ddp_status_t launch_ready_(reducer_t *r)
{
    if (r->next_launch < r->m->nbuckets && r->pending[r->next_launch] == 0 &&
        !(comm_caps(r->comm) & COMM_CAP_STREAM_ORDERED)) {
        r->compute->event_record(r->grads_written);
        r->compute->event_wait(r->grads_written);
    }
    while (r->next_launch < r->m->nbuckets && r->pending[r->next_launch] == 0) {
        DDP_TRY(launch_(r, r->next_launch));
        r->stats.bytes_sent += r->m->buckets[r->next_launch].count * comm_dtype_size(r->wire);
        r->stats.calls++;
        r->next_launch++;
    }
    return DDP_OK;
}

static void mark_(reducer_t *r, int id);

/* Parameters of buckets [0, upto) that never became ready this step. */
static ddp_status_t handle_unused_(reducer_t *r, int upto)
{
    const model_t *m = r->m;
    for (int id = 0; id < m->ntensors; id++) {
        const tensor_t *T = &m->tensors[id];
        if (T->kind != TENSOR_PARAM || T->frozen || r->ready[id] || T->bucket >= upto) continue;
        if (!r->find_unused)
            return ddp_fail(DDP_ERR_USAGE,
                            "parameter %s received no gradient in step %lld, so "
                            "its bucket %d cannot finish reduction; if some parameters are unused "
                            "by design, pass --find-unused (they then get a zero gradient)",
                            T->name, (long long)r->step + 1, T->bucket);
        if (r->grad_beta == 0)
            r->compute->zero(model_tensor_grad(m, id), T->numel * sizeof(float));
        mark_(r, id);
    }
    return DDP_OK;
}

static void mark_(reducer_t *r, int id)
{
    const tensor_t *T = &r->m->tensors[id];
    if (T->kind != TENSOR_PARAM || T->frozen || r->ready[id]) return;
    r->ready[id] = 1;
    r->pending[T->bucket]--;
}

/* Buckets [next_done, upto) are final: run the update of those whose
 * all-reduce did not already run it (--zero: of this rank's block). */
static ddp_status_t done_upto_(reducer_t *r, int upto)
{
    for (; r->next_done < upto; r->next_done++) {
        int b = r->next_done;
        const bucket_t *B = &r->m->buckets[b];
        if (!r->has_apply || r->fused[b]) continue;
        if (!r->zero)
            r->apply.fn(r->apply.arg, B->offset, B->count);
        else if (r->zero->n[b])
            r->apply.fn(r->apply.arg, B->offset + r->zero->first[b], r->zero->n[b]);
    }
    return DDP_OK;
}

/* --zero: bucket b's parameters from their owners. */
static ddp_status_t launch_gather_(reducer_t *r, int b)
{
    const bucket_t *B = &r->m->buckets[b];
    comm_desc_t d = {"parameter-gather", b, r->step + 1};
    /* the collective writes the parameters: a bf16 copy the backend keeps
     * of them is stale (compute.h, params_written) */
    if (r->compute->params_written) r->compute->params_written(r->params + B->offset, B->count);
    return r->comm->ops->iallgather(r->comm, r->params + B->offset, B->count, COMM_FLOAT, &d,
                                    &r->gather[b]);
}

static ddp_status_t wait_gathers_(reducer_t *r)
{
    for (int b = 0; b < r->m->nbuckets; b++) {
        if (!r->gather[b]) continue;
        DDP_TRY(r->comm->ops->wait(r->comm, r->gather[b]));
        r->gather[b] = NULL;
    }
    return DDP_OK;
}

/* Bucket b (== next_done) is finished with: its collective waited for, the
 * sums this rank keeps decompressed into place -- the whole bucket, or
 * (--zero) its block, which with slots moves out of the slot into the shard
 * -- and its update run.  In bucket order.  It starts no collective: where
 * it runs (a slot claimed during backward, or reducer_finish) depends on
 * when the buckets became ready, which a parameter without a gradient on
 * one rank changes, and collectives must start in the same order on every
 * rank. */
static ddp_status_t retire_(reducer_t *r, int b)
{
    const model_t *m = r->m;
    if (r->req[b]) {
        DDP_TRY(r->comm->ops->wait(r->comm, r->req[b]));
        r->req[b] = NULL;
    }
    size_t first = 0, n = m->buckets[b].count;
    if (r->zero) first = r->zero->first[b], n = r->zero->n[b];
    float *dst = r->zero ? zero_block_grads(r->zero, m, b) : model_bucket_grads(m, b);
    if (n && r->sync && compressed_(r))
        r->compute->from_half(n, half_of_(r, b) + first, dst, r->wire == COMM_BF16);
    else if (n && r->slots)
        r->compute->copy(dst, model_bucket_grads(m, b) + first, n * sizeof(float));
    return done_upto_(r, b + 1);
}

ddp_status_t reducer_layer_begin(void *arg, int layer)
{
    reducer_t *r = arg;
    if (!r->slots || !r->final) return DDP_OK;
    const model_t *m = r->m;
    const layer_t *L = &m->layers[layer];
    int ids[2] = {L->weight, L->bias}, need = -1;
    for (int i = 0; i < 2; i++)
        if (ids[i] >= 0 && m->tensors[ids[i]].bucket > need) need = m->tensors[ids[i]].bucket;
    /* buckets claim their slots in order: bucket b's is bucket b - slots',
     * which must be finished with first */
    for (; r->claimed <= need; r->claimed++) {
        int old = r->claimed - r->slots;
        if (old < r->next_done) continue;
        if (r->sync && r->next_launch <= old) {
            /* a parameter of it got no gradient in its layer's backward */
            DDP_TRY(handle_unused_(r, old + 1));
            DDP_TRY(launch_ready_(r));
        }
        while (r->next_done <= old) DDP_TRY(retire_(r, r->next_done));
    }
    return DDP_OK;
}

ddp_status_t reducer_gather_params(reducer_t *r)
{
    if (!r->zero) return DDP_OK;
    for (int b = 0; b < r->m->nbuckets; b++) DDP_TRY(launch_gather_(r, b));
    return wait_gathers_(r);
}

ddp_status_t reducer_layer_ready(void *arg, int layer)
{
    reducer_t *r = arg;
    if (!r->final) return DDP_OK;
    const layer_t *L = &r->m->layers[layer];
    int ids[2] = {L->weight, L->bias};
    for (int i = 0; i < 2; i++)
        if (ids[i] >= 0 && ids[i] != r->skip_grad) mark_(r, ids[i]);
    if (!r->sync) {
        /* nothing to reduce: a bucket is final as soon as it is ready */
        while (r->next_done < r->m->nbuckets && r->pending[r->next_done] == 0)
            DDP_TRY(retire_(r, r->next_done));
        return DDP_OK;
    }
    DDP_TRY(launch_ready_(r));
    /* advance the buckets in flight while backward goes on (no threads: an
     * all-reduce moves only inside comm calls) */
    if (r->next_launch > 0 && r->comm->ops->progress) return r->comm->ops->progress(r->comm);
    return DDP_OK;
}

ddp_status_t reducer_finish(reducer_t *r)
{
    const model_t *m = r->m;
    if (!r->final) return DDP_OK;
    DDP_TRY(handle_unused_(r, m->nbuckets));
    if (!r->sync) {
        while (r->next_done < m->nbuckets) DDP_TRY(retire_(r, r->next_done));
        return DDP_OK;
    }
    DDP_TRY(launch_ready_(r));
    double t0 = clock_seconds();
    /* the time blocked here counts (retire_ waits, then decompresses and
     * updates: the update is not waiting) */
    for (int b = 0; b < m->nbuckets; b++) {
        if (r->next_done == b) {
            if (r->req[b]) {
                DDP_TRY(r->comm->ops->wait(r->comm, r->req[b]));
                r->req[b] = NULL;
            }
            r->stats.wait_seconds += clock_seconds() - t0;
            DDP_TRY(retire_(r, b));
            t0 = clock_seconds();
        }
        /* --zero: the bucket's updated parameters from their owners, in
         * bucket order after every reduce-scatter started, the same on every
         * rank; with the update after the step, reducer_gather_params */
        if (r->zero && r->has_apply) DDP_TRY(launch_gather_(r, b));
    }
    ddp_status_t s = wait_gathers_(r);
    r->stats.wait_seconds += clock_seconds() - t0;
    return s;
}

ddp_status_t reducer_allreduce_buckets(reducer_t *r, uint64_t *bytes)
{
    const model_t *m = r->m;
    *bytes = 0;
    if (r->comm->size == 1) return DDP_OK;
    for (int b = 0; b < m->nbuckets; b++) {
        const bucket_t *B = &m->buckets[b];
        comm_desc_t d = {"allreduce-alone", b, -1};
        void *buf = compressed_(r) ? (void *)half_of_(r, b) : (void *)model_bucket_grads(m, b);
        /* --zero 2: bucket b shares its slot with bucket b - slots */
        int old = r->slots ? b - r->slots : -1;
        if (old >= 0 && r->req[old]) {
            DDP_TRY(r->comm->ops->wait(r->comm, r->req[old]));
            r->req[old] = NULL;
        }
        DDP_TRY(r->comm->ops->iallreduce(r->comm, buf, B->count, r->wire, &d, &r->req[b]));
        *bytes += B->count * comm_dtype_size(r->wire);
    }
    for (int b = 0; b < m->nbuckets; b++) {
        if (!r->req[b]) continue;
        DDP_TRY(r->comm->ops->wait(r->comm, r->req[b]));
        r->req[b] = NULL;
    }
    return DDP_OK;
}
