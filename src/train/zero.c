/* zero.c -- ZeRO's shard plan and its collectives (see zero.h). */
#include "zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ddp_status_t zero_plan_init(zero_plan_t *z, const model_t *m, int stage, int rank, int size,
                            int64_t accum)
{
    memset(z, 0, sizeof *z);
    z->stage = stage;
    z->rank = rank;
    z->size = size;
    z->nbuckets = m->nbuckets;
    size_t nb = (size_t)(m->nbuckets ? m->nbuckets : 1);
    z->first = calloc(nb, sizeof *z->first);
    z->n = calloc(nb, sizeof *z->n);
    z->shard_off = calloc(nb, sizeof *z->shard_off);
    if (!z->first || !z->n || !z->shard_off) {
        zero_plan_free(z);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for the --zero plan");
    }
    for (int b = 0; b < m->nbuckets; b++) {
        comm_block(m->buckets[b].count, size, rank, &z->first[b], &z->n[b]);
        z->shard_off[b] = z->shard_count;
        z->shard_count += z->n[b];
    }
    /* rank 0 holds the longer block of every bucket (comm_block) */
    for (int b = 0; b < m->nbuckets; b++) {
        size_t f, n;
        comm_block(m->buckets[b].count, size, 0, &f, &n);
        z->max_shard += n;
    }
    z->slots = zero_slots(stage, size, accum);
    return DDP_OK;
}

int zero_slots(int stage, int size, int64_t accum)
{
    return stage == 2 && size > 1 && accum == 1 ? ZERO_GRAD_SLOTS : 0;
}

float *zero_block_grads(const zero_plan_t *z, const model_t *m, int b)
{
    if (z->slots) return z->shard_grads + z->shard_off[b];
    return model_bucket_grads(m, b) + z->first[b];
}

void zero_plan_free(zero_plan_t *z)
{
    free(z->first);
    free(z->n);
    free(z->shard_off);
    z->first = z->n = z->shard_off = NULL;
}

int zero_sharded(const zero_plan_t *z)
{
    return z->stage > 0 && z->size > 1;
}

ddp_status_t zero_shard_offset(const zero_plan_t *z, const model_t *m, size_t offset,
                               size_t count, size_t *at)
{
    for (int b = 0; b < m->nbuckets; b++) {
        size_t lo = m->buckets[b].offset + z->first[b];
        if (offset >= lo && offset + count <= lo + z->n[b]) {
            *at = z->shard_off[b] + (offset - lo);
            return DDP_OK;
        }
    }
    return ddp_fail(DDP_ERR_INTERNAL, "--zero: elements [%zu, %zu) are not in rank %d's shard",
                    offset, offset + count, z->rank);
}

ddp_status_t zero_grad_norm(const zero_plan_t *z, const model_t *m, control_t *ctl, double *norm)
{
    const compute_ops_t *compute = m->compute;
    int W = z->size, sharded = zero_sharded(z);
    size_t npieces = (size_t)m->nbuckets * (size_t)W;
    double *piece = calloc(npieces + 1, sizeof *piece);
    double *mine = calloc((size_t)m->nbuckets + 1, sizeof *mine);
    /* this rank's pieces: their gradients, counts and places in piece or
     * mine, summed on the device with one wait where the backend can */
    const float **gs = calloc(npieces + 1, sizeof *gs);
    size_t *ns = calloc(npieces + 1, sizeof *ns);
    double *vals = calloc(npieces + 1, sizeof *vals);
    double **dst = calloc(npieces + 1, sizeof *dst);
    ddp_status_t s = piece && mine && gs && ns && vals && dst
                         ? DDP_OK
                         : ddp_fail(DDP_ERR_NOMEM, "out of memory for the gradient norm");
    if (sharded) s = control_agree(ctl, s);
    int k = 0;
    for (int b = 0; b < m->nbuckets && s == DDP_OK; b++) {
        const bucket_t *B = &m->buckets[b];
        for (int r = 0; r < W; r++) {
            if (sharded && r != z->rank) continue;
            size_t first, n;
            comm_block(B->count, W, r, &first, &n);
            gs[k] = sharded ? zero_block_grads(z, m, b) : model_bucket_grads(m, b) + first;
            ns[k] = n;
            dst[k++] = sharded ? &mine[b] : &piece[(size_t)r * (size_t)m->nbuckets + (size_t)b];
        }
    }
    if (s == DDP_OK && compute->sumsq_many)
        compute->sumsq_many(k, gs, ns, vals);
    else
        for (int i = 0; i < k && s == DDP_OK; i++)
            vals[i] = ns[i] ? compute->sumsq(ns[i], gs[i]) : 0;
    for (int i = 0; i < k && s == DDP_OK; i++) *dst[i] = vals[i];
    free(gs);
    free(ns);
    free(vals);
    free(dst);
    if (s != DDP_OK) {
        free(piece);
        free(mine);
        return s;
    }
    if (sharded) {
        comm_desc_t d = {"gradient-norm", -1, -1};
        s = control_allgather(ctl, mine, piece, (size_t)m->nbuckets * sizeof(double), &d);
    }
    /* piece[r * nbuckets + b]: added in bucket, then rank order */
    double sum = 0;
    for (int b = 0; b < m->nbuckets; b++)
        for (int r = 0; r < W; r++) sum += piece[(size_t)r * (size_t)m->nbuckets + (size_t)b];
    *norm = sqrt(sum);
    free(piece);
    free(mine);
    return s;
}

void zero_grad_scale(const zero_plan_t *z, model_t *m, float coef)
{
    if (!zero_sharded(z)) {
        m->compute->scale(m->ntrainable, m->grads, coef);
        return;
    }
    for (int b = 0; b < m->nbuckets; b++)
        if (z->n[b]) m->compute->scale(z->n[b], zero_block_grads(z, m, b), coef);
}

ddp_status_t zero_grads_finite(const zero_plan_t *z, const model_t *m, control_t *ctl, int *ok)
{
    if (!zero_sharded(z)) {
        *ok = m->compute->all_finite(m->ntrainable, m->grads);
        return DDP_OK;
    }
    int64_t bad = 0;
    for (int b = 0; b < m->nbuckets && !bad; b++)
        if (z->n[b])
            bad = !m->compute->all_finite(z->n[b], zero_block_grads(z, m, b));
    comm_desc_t d = {"nonfinite-gradients", -1, -1};
    ddp_status_t s = control_allreduce(ctl, &bad, 1, COMM_INT64, &d);
    *ok = bad == 0;
    return s;
}


/* Every rank's block length of bucket b. */
static ddp_status_t counts_(const zero_plan_t *z, const model_t *m, int b, size_t **counts)
{
    *counts = malloc((size_t)z->size * sizeof **counts);
    if (!*counts) return ddp_fail(DDP_ERR_NOMEM, "out of memory for the --zero state exchange");
    for (int r = 0; r < z->size; r++) {
        size_t f;
        comm_block(m->buckets[b].count, z->size, r, &f, &(*counts)[r]);
    }
    return DDP_OK;
}

ddp_status_t zero_gather_bucket(const zero_plan_t *z, const model_t *m, control_t *ctl,
                                const float *state, int b, float *bucket_host, float *scratch)
{
    size_t *counts;
    DDP_TRY(counts_(z, m, b, &counts));
    if (z->n[b]) m->compute->download(scratch, state + z->shard_off[b], z->n[b] * sizeof(float));
    comm_desc_t d = {"checkpoint-optimizer", b, -1};
    ddp_status_t s = control_gatherv(ctl, scratch, bucket_host, counts, 0, &d);
    free(counts);
    return s;
}

ddp_status_t zero_scatter_state(const zero_plan_t *z, const model_t *m, control_t *ctl,
                                const float *full, float *state)
{
    float *scratch = malloc((model_max_bucket(m) + 1) * sizeof(float));
    DDP_TRY(control_agree(
        ctl, scratch ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory for the optimizer state")));
    ddp_status_t s = DDP_OK;
    for (int b = 0; b < m->nbuckets && s == DDP_OK; b++) {
        size_t *counts;
        s = counts_(z, m, b, &counts);
        if (s != DDP_OK) break;
        comm_desc_t d = {"resume-optimizer", b, -1};
        s = control_scatterv(ctl, full ? full + m->buckets[b].offset : NULL, scratch, counts, 0, &d);
        free(counts);
        if (s == DDP_OK && z->n[b])
            m->compute->upload(state + z->shard_off[b], scratch, z->n[b] * sizeof(float));
    }
    free(scratch);
    return s;
}
