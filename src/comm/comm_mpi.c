/* comm_mpi.c -- the MPI comm backend (host memory).  All-reduces advance in
 * a progress engine that runs inside comm calls (progress, test, wait, the
 * blocking collectives); nothing runs in the background.  Three algorithms
 * (comm_mpi_set_algorithm; README.md, "How data parallelism works", has the
 * details):
 *   shared memory ("auto" on one node, for comm_mem_alloc memory): each rank
 *     sums its block straight from every rank's buffer, then copies the other
 *     blocks from their owners (shm_progress_);
 *   ring ("auto" otherwise, or "ring"): reduce-scatter then allgather over
 *     MPI_Isend/MPI_Irecv, in messages of at most one piece (ring_*);
 *   "mpi": MPI_Iallreduce in chunks of at most COMM_MPI_CHUNK, for comparison.
 * Every rank ends with the same bits: each block's sum is computed once, on
 * one rank, in an order fixed by W and the partition, and the other ranks
 * only copy it.  The additions themselves are in sum_kernels.c.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "comm.h"
#include "log.h"
#include "activity.h"
#include "sum_kernels.h"

/* "mpi": largest MPI_Iallreduce (Open MPI 4.1's default all-reduce collapses
 * above about 32 MB: bench/README.md) */
#define COMM_MPI_CHUNK ((size_t)8 << 20)
#define RING_PIECE     ((size_t)4 << 20) /* default piece (bytes per message) */
#define RING_DEPTH     2                 /* default slices in flight */
#define RING_MAXDEPTH  16                /* most slices in flight (tags per all-reduce) */
#define SCRATCH_SPARES 4                 /* ring receive buffers kept for reuse */
#define SHM_SLOTS      64                /* shared-memory all-reduces in flight at most */

typedef enum algo { ALGO_AUTO, ALGO_RING, ALGO_MPI, ALGO_SHM } algo_t;

/* A buffer from mpi_mem_alloc_ (comm_mem_alloc) that the ranks of the node
 * share. */
typedef struct shm_region {
    struct shm_region *next;
    int id; /* allocation number (the same on every rank) */
    MPI_Win win;
    size_t bytes;
    char **base; /* [W]: every rank's segment, mapped here */
} shm_region_t;

/* What a rank says about its shared-memory all-reduce number shm_seq, for
 * the others to check against their own. */
typedef struct shm_desc {
    uint64_t off, count;  /* byte offset in the region, elements */
    int32_t region, type; /* shm_region_t.id, comm_dtype_t */
} shm_desc_t;

/* Per-rank control block in shared memory.  The counters only grow: the
 * number of the last shared-memory all-reduce whose input this rank has
 * made ready / whose own block it has summed / whose other blocks it has
 * copied.  Each on its own cache line. */
typedef struct shm_ctl {
    _Atomic uint64_t arrived;
    char pad0[64 - sizeof(uint64_t)];
    _Atomic uint64_t reduced;
    char pad1[64 - sizeof(uint64_t)];
    _Atomic uint64_t copied;
    char pad2[64 - sizeof(uint64_t)];
    shm_desc_t desc[SHM_SLOTS]; /* all-reduce k: desc[k % SHM_SLOTS] */
} shm_ctl_t;

/* Where a shared-memory all-reduce stands on this rank (shm_progress_). */
typedef enum shm_phase {
    SHM_SUM_OWN_BLOCK, /* waiting for every rank's input, then summing this rank's block */
    SHM_COPY_OTHERS,   /* copying the other blocks as their owners finish them */
    SHM_WAIT_COPIES    /* waiting until no rank reads this rank's buffer any more */
} shm_phase_t;

/* One slice of a ring all-reduce in flight. */
typedef struct ring_slot {
    int active;
    size_t slice; /* slice index */
    int step;     /* 0 .. W-2 reduce-scatter, W-1 .. 2(W-1)-1 allgather */
    size_t off;   /* first element of the slice */
    size_t len;   /* elements in the slice */
} ring_slot_t;

/* An all-reduce in flight (called q in this file: c is the communicator, m
 * its mpi_impl_t). */
struct comm_req {
    struct comm_req *next, *prev; /* in-flight list, oldest first */
    algo_t algo;
    comm_desc_t desc;
    uint64_t seq;        /* collective number (comm_t.seq) */
    activity_coll_t job; /* what the watchdog knows it as (activity.h) */
    int done;
    ddp_status_t err; /* sticky failure */
    char *buf;
    size_t count, esz;
    comm_dtype_t type;
    /* ring */
    size_t nslices, slices_done;
    size_t piece; /* elements per piece */
    int depth, tagbase;
    char *recv_scratch; /* depth * piece * esz bytes (reduce-scatter receive) */
    size_t recv_scratch_bytes;
    ring_slot_t slot[RING_MAXDEPTH];
    MPI_Request ring_req[2 * RING_MAXDEPTH]; /* slot j: [2j] receive, [2j+1] send */
    /* "mpi" */
    int nchunks;
    MPI_Request *chunk_req; /* [nchunks]: one MPI_Iallreduce per chunk */
    /* shared memory */
    shm_region_t *region;
    size_t off;       /* byte offset of buf in the region */
    uint64_t shm_seq; /* shared-memory all-reduce number (1, 2, ...; same on every rank) */
    shm_phase_t phase;
    int ncopied;
    unsigned char *copied_from; /* [W]: rank r's block copied */
    /* iallreduce_apply */
    int has_apply;
    int applied; /* fn has run (or is run block by block: fused) */
    int fused;   /* shared memory: owners apply their block, others copy the extras */
    comm_apply_t apply;
    shm_region_t *extra_region[COMM_APPLY_MAX];
    size_t extra_off[COMM_APPLY_MAX]; /* byte offset of extra[i] in its region */
};

typedef struct mpi_impl {
    MPI_Datatype half_dt; /* 2 contiguous bytes: bf16 and fp16 for "mpi" */
    MPI_Op op_bf16, op_fp16;
    algo_t algo;
    size_t piece_bytes;
    int depth;
    int tag_allreduces;    /* ring all-reduces whose tags can be told apart */
    uint64_t ring_started; /* ring all-reduces started (their tags cycle) */
    comm_req_t *head, *tail;
    char *spare[SCRATCH_SPARES]; /* scratch buffers kept for reuse */
    size_t spare_bytes[SCRATCH_SPARES];
    int oversubscribed; /* more ranks on this node than cores: yield while waiting */
    /* shared memory (one node, W > 1) */
    int shm_ok;
    MPI_Win ctl_win;
    shm_ctl_t **ctl; /* [W]: every rank's control block, mapped here */
    shm_region_t *regions;
    int nregions;
    uint64_t shm_started, shm_reduced, shm_copied, shm_completed; /* this rank's counters */
} mpi_impl_t;

/* ---- MPI reduction operators ("mpi" algorithm, 16-bit types) ----------- */

static void mpi_op_sum_bf16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    sum_accumulate_bf16(inout, in, (size_t)*len);
}

static void mpi_op_sum_fp16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    sum_accumulate_fp16(inout, in, (size_t)*len);
}

/* ---- errors ------------------------------------------------------------- */

static ddp_status_t mpi_err_(int rc, const char *what, const comm_desc_t *d, uint64_t seq)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ddp_fail(DDP_ERR_COMM,
                    "MPI %s failed during %s %d (step %lld, collective #%llu): %s; "
                    "check that every rank is alive and reachable",
                    what, d && d->what ? d->what : "collective", d ? d->index : -1,
                    d ? (long long)d->step : -1LL, (unsigned long long)seq, msg);
}

/* ---- in-flight list ------------------------------------------------------- */

static void link_(mpi_impl_t *m, comm_req_t *q)
{
    q->next = NULL;
    q->prev = m->tail;
    if (m->tail)
        m->tail->next = q;
    else
        m->head = q;
    m->tail = q;
}

static void unlink_(mpi_impl_t *m, comm_req_t *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        m->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        m->tail = q->prev;
    q->next = q->prev = NULL;
}

/* Scratch buffers: a few spares are kept, so a steady stream of
 * all-reduces (several in flight) does not map fresh pages every time. */
static char *scratch_get_(mpi_impl_t *m, size_t bytes)
{
    int best = -1;
    for (int i = 0; i < SCRATCH_SPARES; i++)
        if (m->spare[i] && m->spare_bytes[i] >= bytes &&
            (best < 0 || m->spare_bytes[i] < m->spare_bytes[best]))
            best = i;
    if (best >= 0) {
        char *p = m->spare[best];
        m->spare[best] = NULL;
        return p;
    }
    return malloc(bytes ? bytes : 1);
}

static void scratch_put_(mpi_impl_t *m, char *p, size_t bytes)
{
    if (!p) return;
    int slot = -1; /* an empty slot, else the smallest spare if smaller than p */
    for (int i = 0; i < SCRATCH_SPARES; i++) {
        if (!m->spare[i]) {
            slot = i;
            break;
        }
        if (m->spare_bytes[i] < bytes && (slot < 0 || m->spare_bytes[i] < m->spare_bytes[slot]))
            slot = i;
    }
    if (slot < 0) {
        free(p);
        return;
    }
    free(m->spare[slot]);
    m->spare[slot] = p;
    m->spare_bytes[slot] = bytes;
}

static void req_free_(mpi_impl_t *m, comm_req_t *q)
{
    if (q->algo == ALGO_RING) scratch_put_(m, q->recv_scratch, q->recv_scratch_bytes);
    free(q->chunk_req);
    free(q->copied_from);
    free(q);
}

/* ---- blocks (ring and shared memory) -------------------------------------- */

/* Block b of len elements split over W ranks: its first element and length
 * (lengths differ by at most one element; the first len % W blocks are the
 * longer ones). */
static void block_span_(size_t len, int W, int b, size_t *off, size_t *n)
{
    size_t base = len / (size_t)W, rem = len % (size_t)W, blk = (size_t)b;
    *off = blk * base + (blk < rem ? blk : rem);
    *n = base + (blk < rem ? 1 : 0);
}

/* ---- ring ----------------------------------------------------------------- */

static int mod_(int a, int W)
{
    return ((a % W) + W) % W;
}

/* Post the messages of slot j's current step (none for empty blocks). */
static ddp_status_t ring_post_(comm_t *c, comm_req_t *q, int j)
{
    ring_slot_t *sl = &q->slot[j];
    int W = c->size, r = c->rank, s = sl->step;
    int left = mod_(r - 1, W), right = mod_(r + 1, W);
    int send_blk, recv_blk; /* block sent, block received */
    if (s < W - 1)
        send_blk = mod_(r - s, W), recv_blk = mod_(r - s - 1, W);
    else
        send_blk = mod_(r + 1 - (s - (W - 1)), W), recv_blk = mod_(r - (s - (W - 1)), W);
    size_t send_off, send_len, recv_off, recv_len;
    block_span_(sl->len, W, send_blk, &send_off, &send_len);
    block_span_(sl->len, W, recv_blk, &recv_off, &recv_len);
    char *base = q->buf + sl->off * q->esz;
    int tag = q->tagbase + j, rc;
    q->ring_req[2 * j] = q->ring_req[2 * j + 1] = MPI_REQUEST_NULL;
    if (recv_len) {
        void *dst =
            s < W - 1 ? q->recv_scratch + (size_t)j * q->piece * q->esz : base + recv_off * q->esz;
        rc = MPI_Irecv(dst, (int)(recv_len * q->esz), MPI_BYTE, left, tag, c->mpi,
                       &q->ring_req[2 * j]);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Irecv", &q->desc, q->seq);
    }
    if (send_len) {
        rc = MPI_Isend(base + send_off * q->esz, (int)(send_len * q->esz), MPI_BYTE, right, tag,
                       c->mpi, &q->ring_req[2 * j + 1]);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Isend", &q->desc, q->seq);
    }
    return DDP_OK;
}

/* Start slot j's next slice: slot j runs slices j, j + depth, j + 2 depth, ...
 * in that order on every rank, which keeps each tag's message stream in the
 * same order on sender and receiver. */
static ddp_status_t ring_start_slice_(comm_t *c, comm_req_t *q, int j, int first)
{
    ring_slot_t *sl = &q->slot[j];
    size_t slice = first ? (size_t)j : sl->slice + (size_t)q->depth;
    if (slice >= q->nslices) {
        sl->active = 0;
        return DDP_OK;
    }
    size_t slice_len = q->piece * (size_t)c->size; /* W pieces (the last slice: fewer elements) */
    sl->active = 1;
    sl->slice = slice;
    sl->step = 0;
    sl->off = slice * slice_len;
    sl->len = q->count - sl->off < slice_len ? q->count - sl->off : slice_len;
    return ring_post_(c, q, j);
}

/* Slot j's messages of the current step have completed: add the received
 * block into ours (during the reduce-scatter), then post the next step or
 * finish the slice; repeat while steps complete at once (empty blocks post
 * nothing). */
static ddp_status_t ring_advance_(comm_t *c, comm_req_t *q, int j)
{
    ring_slot_t *sl = &q->slot[j];
    int W = c->size, r = c->rank;
    for (;;) {
        if (q->ring_req[2 * j] != MPI_REQUEST_NULL || q->ring_req[2 * j + 1] != MPI_REQUEST_NULL)
            return DDP_OK;
        if (!sl->active) return DDP_OK;
        if (sl->step < W - 1) {
            size_t recv_off, recv_len;
            block_span_(sl->len, W, mod_(r - sl->step - 1, W), &recv_off, &recv_len);
            sum_accumulate(q->type, q->buf + (sl->off + recv_off) * q->esz,
                           q->recv_scratch + (size_t)j * q->piece * q->esz, recv_len);
        }
        if (++sl->step == 2 * (W - 1)) {
            q->slices_done++;
            DDP_TRY(ring_start_slice_(c, q, j, 0));
        } else {
            DDP_TRY(ring_post_(c, q, j));
        }
    }
}

/* Advance q as far as it goes without waiting. */
static ddp_status_t ring_progress_(comm_t *c, comm_req_t *q)
{
    int n = 2 * q->depth, outcount = 0;
    int idx[2 * RING_MAXDEPTH];
    for (;;) {
        for (int j = 0; j < q->depth; j++) DDP_TRY(ring_advance_(c, q, j));
        if (q->slices_done == q->nslices) {
            q->done = 1;
            return DDP_OK;
        }
        int rc = MPI_Testsome(n, q->ring_req, &outcount, idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Testsome", &q->desc, q->seq);
        if (outcount == MPI_UNDEFINED || outcount == 0) return DDP_OK; /* nothing more now */
    }
}

static ddp_status_t ring_start_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    size_t max_piece = m->piece_bytes / q->esz;
    if (max_piece == 0) max_piece = 1;
    size_t W = (size_t)c->size;
    /* small buffers: pieces just big enough for one slice */
    size_t need = (q->count + W - 1) / W;
    q->piece = need < max_piece ? (need ? need : 1) : max_piece;
    q->nslices = (q->count + q->piece * W - 1) / (q->piece * W);
    q->depth = m->depth < (int)q->nslices ? m->depth : (int)q->nslices;
    if (q->depth < 1) q->depth = 1;
    q->tagbase = (int)(m->ring_started++ % (uint64_t)m->tag_allreduces) * RING_MAXDEPTH;
    for (int j = 0; j < 2 * RING_MAXDEPTH; j++) q->ring_req[j] = MPI_REQUEST_NULL;
    if (c->size == 1 || q->count == 0) {
        q->done = 1;
        return DDP_OK;
    }
    q->recv_scratch_bytes = (size_t)q->depth * q->piece * q->esz;
    q->recv_scratch = scratch_get_(m, q->recv_scratch_bytes);
    if (!q->recv_scratch)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory starting all-reduce %s %d (%zu bytes)",
                        q->desc.what, q->desc.index, q->recv_scratch_bytes);
    for (int j = 0; j < q->depth; j++) DDP_TRY(ring_start_slice_(c, q, j, 1));
    return ring_progress_(c, q);
}

/* ---- "mpi": chunked MPI_Iallreduce ----------------------------------------- */

static void mpi_type_op_(comm_t *c, comm_dtype_t t, MPI_Datatype *dt, MPI_Op *op)
{
    mpi_impl_t *m = c->impl;
    *op = MPI_SUM;
    switch (t) {
    case COMM_FLOAT: *dt = MPI_FLOAT; break;
    case COMM_DOUBLE: *dt = MPI_DOUBLE; break;
    case COMM_INT64: *dt = MPI_INT64_T; break;
    case COMM_BF16: *dt = m->half_dt, *op = m->op_bf16; break;
    case COMM_FP16: *dt = m->half_dt, *op = m->op_fp16; break;
    }
}

static ddp_status_t mpi_chunks_start_(comm_t *c, comm_req_t *q)
{
    size_t chunk_len = COMM_MPI_CHUNK / q->esz;
    int n = q->count == 0 ? 0 : (int)((q->count + chunk_len - 1) / chunk_len);
    q->chunk_req = malloc((size_t)(n ? n : 1) * sizeof(MPI_Request));
    if (!q->chunk_req) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    MPI_Datatype dt = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    mpi_type_op_(c, q->type, &dt, &op);
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * chunk_len;
        size_t len = q->count - off < chunk_len ? q->count - off : chunk_len;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, q->buf + off * q->esz, (int)len, dt, op, c->mpi,
                                &q->chunk_req[i]);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Iallreduce", &q->desc, q->seq);
        q->nchunks = i + 1;
    }
    if (n == 0) q->done = 1;
    return DDP_OK;
}

static ddp_status_t mpi_chunks_progress_(comm_t *c, comm_req_t *q)
{
    int flag = 1;
    int rc = MPI_Testall(q->nchunks, q->chunk_req, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Testall", &q->desc, q->seq);
    if (flag) q->done = 1;
    return DDP_OK;
}

/* ---- shared memory (one node) --------------------------------------------------- */

/* The region holding [buf, buf + bytes) on this rank, or NULL. */
static shm_region_t *shm_find_(comm_t *c, const void *buf, size_t bytes)
{
    mpi_impl_t *m = c->impl;
    const char *p = buf;
    for (shm_region_t *reg = m->regions; reg; reg = reg->next) {
        const char *b = reg->base[c->rank];
        if (p >= b && p <= b + reg->bytes && bytes <= (size_t)(b + reg->bytes - p)) return reg;
    }
    return NULL;
}

/* Advance shared-memory all-reduce q as far as it goes without waiting.
 * Every rank sums its own block of the slice from all ranks' buffers in rank
 * order (SHM_SUM_OWN_BLOCK), copies the other blocks from their owners
 * (SHM_COPY_OTHERS), and completes once every rank has copied, i.e. nobody
 * reads its buffer any more (SHM_WAIT_COPIES).  Each phase runs in
 * all-reduce order on every rank. */
static ddp_status_t shm_progress_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    const int W = c->size, me = c->rank;
    size_t blk_off, blk_len;
    if (q->phase == SHM_SUM_OWN_BLOCK) {
        if (m->shm_reduced != q->shm_seq - 1) return DDP_OK;
        for (int r = 0; r < W; r++)
            if (atomic_load_explicit(&m->ctl[r]->arrived, memory_order_acquire) < q->shm_seq)
                return DDP_OK;
        const shm_desc_t *mine = &m->ctl[me]->desc[q->shm_seq % SHM_SLOTS];
        for (int r = 0; r < W; r++) {
            const shm_desc_t *d = &m->ctl[r]->desc[q->shm_seq % SHM_SLOTS];
            if (d->off != mine->off || d->count != mine->count || d->region != mine->region ||
                d->type != mine->type)
                return ddp_fail(DDP_ERR_MISMATCH,
                                "all-reduce %s %d (step %lld, collective #%llu): rank %d passes "
                                "%llu elements of type %d at byte %llu of shared buffer %d, rank "
                                "%d passes %llu of type %d at byte %llu of buffer %d; every rank "
                                "must all-reduce the same slice of its comm-allocated buffer",
                                q->desc.what, q->desc.index, (long long)q->desc.step,
                                (unsigned long long)q->seq, me, (unsigned long long)mine->count,
                                (int)mine->type, (unsigned long long)mine->off, (int)mine->region,
                                r, (unsigned long long)d->count, (int)d->type,
                                (unsigned long long)d->off, (int)d->region);
        }
        block_span_(q->count, W, me, &blk_off, &blk_len);
        if (blk_len) {
            const char *src[W];
            for (int r = 0; r < W; r++) src[r] = q->region->base[r] + q->off + blk_off * q->esz;
            sum_sources(q->type, q->buf + blk_off * q->esz, src, W, blk_len);
            /* the owner of the block updates it; the others copy the result */
            if (q->fused) q->apply.fn(q->apply.arg, blk_off, blk_len);
        }
        atomic_store_explicit(&m->ctl[me]->reduced, q->shm_seq, memory_order_release);
        m->shm_reduced = q->shm_seq;
        q->phase = SHM_COPY_OTHERS;
    }
    if (q->phase == SHM_COPY_OTHERS) {
        if (m->shm_copied != q->shm_seq - 1) return DDP_OK;
        for (int r = 0; r < W; r++) {
            if (r == me || q->copied_from[r]) continue;
            if (atomic_load_explicit(&m->ctl[r]->reduced, memory_order_acquire) < q->shm_seq)
                continue;
            block_span_(q->count, W, r, &blk_off, &blk_len);
            if (q->fused)
                for (int i = 0; i < q->apply.nextra; i++)
                    memcpy(q->apply.extra[i] + blk_off,
                           q->extra_region[i]->base[r] + q->extra_off[i] + blk_off * 4,
                           blk_len * 4);
            else
                memcpy(q->buf + blk_off * q->esz, q->region->base[r] + q->off + blk_off * q->esz,
                       blk_len * q->esz);
            q->copied_from[r] = 1;
            q->ncopied++;
        }
        if (q->ncopied < W - 1) return DDP_OK;
        atomic_store_explicit(&m->ctl[me]->copied, q->shm_seq, memory_order_release);
        m->shm_copied = q->shm_seq;
        q->phase = SHM_WAIT_COPIES;
    }
    for (int r = 0; r < W; r++)
        if (atomic_load_explicit(&m->ctl[r]->copied, memory_order_acquire) < q->shm_seq)
            return DDP_OK;
    q->done = 1;
    m->shm_completed = q->shm_seq;
    return DDP_OK;
}

static ddp_status_t mpi_progress_(comm_t *c);

static ddp_status_t shm_start_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    q->copied_from = calloc((size_t)c->size, 1);
    if (!q->copied_from) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    q->shm_seq = ++m->shm_started;
    /* the descriptor slot of all-reduce k - SHM_SLOTS must be free */
    for (long spin = 0; q->shm_seq - m->shm_completed > SHM_SLOTS; spin++) {
        DDP_TRY(mpi_progress_(c));
        if (m->oversubscribed && spin % 64 == 63) sched_yield();
    }
    shm_desc_t *d = &m->ctl[c->rank]->desc[q->shm_seq % SHM_SLOTS];
    d->off = q->off;
    d->count = q->count;
    d->region = q->region->id;
    d->type = (int32_t)q->type;
    atomic_store_explicit(&m->ctl[c->rank]->arrived, q->shm_seq, memory_order_release);
    return DDP_OK;
}

/* ---- the ops ---------------------------------------------------------------- */

static ddp_status_t req_progress_(comm_t *c, comm_req_t *q)
{
    if (q->err) return q->err;
    if (!q->done) {
        ddp_status_t s = q->algo == ALGO_RING  ? ring_progress_(c, q)
                         : q->algo == ALGO_SHM ? shm_progress_(c, q)
                                               : mpi_chunks_progress_(c, q);
        if (s != DDP_OK) return q->err = s;
    }
    /* iallreduce_apply without the fused path: every rank updates it all */
    if (q->done && q->has_apply && !q->applied) {
        q->applied = 1;
        q->apply.fn(q->apply.arg, 0, q->count);
    }
    return DDP_OK;
}

static ddp_status_t mpi_progress_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    ddp_status_t first = DDP_OK;
    for (comm_req_t *q = m->head; q; q = q->next) {
        ddp_status_t s = req_progress_(c, q);
        if (s != DDP_OK && first == DDP_OK) first = s;
    }
    return first;
}

/* Start an all-reduce, with an update after it when a != NULL. */
static ddp_status_t allreduce_start_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                     const comm_apply_t *a, const comm_desc_t *d, comm_req_t **req)
{
    mpi_impl_t *m = c->impl;
    *req = NULL;
    comm_req_t *q = calloc(1, sizeof *q);
    if (!q) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    size_t esz = comm_dtype_size(t);
    comm_note_start(c, d, "all-reduce", count * esz);
    q->job = activity_last();
    q->algo = m->algo == ALGO_AUTO ? ALGO_RING : m->algo;
    q->desc = c->last;
    q->seq = c->seq;
    q->buf = buf;
    q->count = count;
    q->esz = esz;
    q->type = t;
    if (m->algo == ALGO_AUTO && m->shm_ok && count > 0 &&
        (q->region = shm_find_(c, buf, count * esz)) != NULL) {
        q->algo = ALGO_SHM;
        q->off = (size_t)((char *)buf - q->region->base[c->rank]);
    }
    if (a) {
        q->has_apply = 1;
        q->apply = *a;
        /* fused: shared memory, and every extra buffer shared too */
        q->fused = q->algo == ALGO_SHM && a->nextra >= 1 && a->nextra <= COMM_APPLY_MAX;
        for (int i = 0; q->fused && i < a->nextra; i++) {
            q->extra_region[i] = shm_find_(c, a->extra[i], count * 4);
            q->fused = q->extra_region[i] != NULL;
            if (q->fused)
                q->extra_off[i] = (size_t)((char *)a->extra[i] - q->extra_region[i]->base[c->rank]);
        }
        q->applied = q->fused;
    }
    ddp_status_t s = q->algo == ALGO_RING  ? ring_start_(c, q)
                     : q->algo == ALGO_SHM ? shm_start_(c, q)
                                           : mpi_chunks_start_(c, q);
    if (s == DDP_OK) link_(m, q);
    if (s == DDP_OK) s = req_progress_(c, q);
    if (s != DDP_OK) {
        /* the communicator is unusable after a failed start; the caller aborts */
        if (q->next || q->prev || m->head == q) unlink_(m, q);
        req_free_(m, q);
        return s;
    }
    *req = q;
    return DDP_OK;
}

static ddp_status_t mpi_iallreduce_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                                    const comm_desc_t *d, comm_req_t **req)
{
    return allreduce_start_(c, buf, count, t, NULL, d, req);
}

static ddp_status_t mpi_iallreduce_apply_(comm_t *c, float *buf, size_t count,
                                          const comm_apply_t *a, const comm_desc_t *d,
                                          comm_req_t **req)
{
    return allreduce_start_(c, buf, count, COMM_FLOAT, a, d, req);
}

static ddp_status_t mpi_test_(comm_t *c, comm_req_t *req, int *done)
{
    *done = 0;
    DDP_TRY(mpi_progress_(c));
    *done = req->done;
    return DDP_OK;
}

static ddp_status_t mpi_wait_(comm_t *c, comm_req_t *req)
{
    mpi_impl_t *m = c->impl;
    ddp_status_t s = mpi_progress_(c);
    if (!req->done && s == DDP_OK) {
        /* the watchdog thread sees this wait (activity.h) and ends the job
         * when it outlasts --timeout */
        activity_block(req->job.number, &req->job);
        for (long spin = 0; !req->done && s == DDP_OK; spin++) {
            s = mpi_progress_(c);
            if (req->err) s = req->err;
            /* with more ranks than cores, let the rank we wait for run */
            if (m->oversubscribed && spin % 64 == 63) sched_yield();
        }
        activity_unblock();
    }
    if (req->err) s = req->err;
    unlink_(m, req);
    req_free_(m, req);
    return s;
}

static ddp_status_t mpi_bcast_(comm_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d)
{
    DDP_TRY(mpi_progress_(c));
    activity_block(comm_note_start(c, d, "broadcast", bytes), NULL);
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += COMM_MPI_CHUNK) {
        size_t len = bytes - off < COMM_MPI_CHUNK ? bytes - off : COMM_MPI_CHUNK;
        int rc = MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, c->mpi);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Bcast", &c->last, c->seq);
        if (bytes == 0) break;
    }
    activity_unblock();
    return DDP_OK;
}

static ddp_status_t mpi_allgather_(comm_t *c, const void *send, void *recv, size_t bytes,
                                   const comm_desc_t *d)
{
    DDP_TRY(mpi_progress_(c));
    activity_block(comm_note_start(c, d, "all-gather", bytes), NULL);
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Allgather", &c->last, c->seq);
    activity_unblock();
    return DDP_OK;
}

static ddp_status_t mpi_barrier_(comm_t *c)
{
    DDP_TRY(mpi_progress_(c));
    comm_desc_t d = {"barrier", -1, -1};
    activity_block(comm_note_start(c, &d, "barrier", 0), NULL);
    int rc = MPI_Barrier(c->mpi);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Barrier", &d, c->seq);
    activity_unblock();
    return DDP_OK;
}

/* ---- node-shared memory: room for it ------------------------------------ */

/* Where Open MPI keeps the backing files of shared windows (osc/sm). */
static const char *shm_dir_(void)
{
    const char *d = getenv("OMPI_MCA_osc_sm_backing_directory");
    return d && d[0] ? d : "/dev/shm";
}

/* Bytes the node needs in shm_dir_() for windows of `bytes` per rank in
 * `nwin` allocations: every rank's part rounded up to pages, a page of
 * window state each, and some slack. */
static uint64_t shm_need_(const comm_t *c, uint64_t bytes, int nwin)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t per = (bytes + (uint64_t)nwin * (64 + 2 * page) + page - 1) / page * page;
    return (uint64_t)c->local_size * per + ((uint64_t)256 << 10);
}

/* The smallest free space in shm_dir_() over the ranks (UINT64_MAX where it
 * cannot be measured).  Collective on c->mpi, so that the decision below is
 * the same on every rank: a rank whose MPI_Win_allocate_shared fails returns
 * while the others wait inside it forever. */
static uint64_t shm_free_(comm_t *c)
{
    struct statvfs v;
    uint64_t mine = statvfs(shm_dir_(), &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : UINT64_MAX,
             least = 0;
    comm_desc_t d = {"shared-memory-check", -1, -1};
    activity_block(comm_note_start(c, &d, "all-reduce", sizeof mine), NULL);
    MPI_Allreduce(&mine, &least, 1, MPI_UINT64_T, MPI_MIN, c->mpi);
    activity_unblock();
    return least;
}

/* Is there room for `need` bytes (shm_need_)?  If not, every rank stops
 * using node-shared memory from here on -- buffers come from plain memory,
 * all-reduces take the ring: the same arithmetic on every rank, slower --
 * and rank 0 says so once, with what to do. */
static int shm_room_(comm_t *c, uint64_t need, const char *what)
{
    mpi_impl_t *m = c->impl;
    uint64_t fr = shm_free_(c);
    if (fr >= need) return 1;
    m->shm_ok = 0;
    double mib = 1024.0 * 1024.0;
    if (c->rank == 0)
        log_warn("node-shared memory: %s take about %.1f MiB in %s (%d ranks on this node), which "
             "has %.1f MiB free; using private buffers and the ring all-reduce instead (same "
             "results, slower all-reduce).  To keep the shared-memory path give %s more room "
             "(Docker: --shm-size=%llug) or point Open MPI at a larger local directory "
             "(export OMPI_MCA_osc_sm_backing_directory=/tmp)",
             what, (double)need / mib, shm_dir_(), c->local_size, (double)fr / mib, shm_dir_(),
             (unsigned long long)((need + ((uint64_t)64 << 20)) / ((uint64_t)1 << 30) + 1));
    return 0;
}

static ddp_status_t mpi_mem_plan_(comm_t *c, size_t bytes, int nbuffers)
{
    mpi_impl_t *m = c->impl;
    if (m->shm_ok)
        shm_room_(c, shm_need_(c, bytes, nbuffers),
                  "the parameters, gradients and optimizer state");
    return DDP_OK;
}

/* Shared memory on one node (when the ranks share it and there is room),
 * plain memory otherwise; see comm.h. */
static ddp_status_t mpi_mem_alloc_(comm_t *c, size_t bytes, void **p)
{
    mpi_impl_t *m = c->impl;
    *p = NULL;
    if (m->shm_ok) {
        DDP_TRY(mpi_progress_(c));
        shm_room_(c, shm_need_(c, bytes, 1), "the gradient and optimizer buffers");
    }
    if (!m->shm_ok) return comm_mem_alloc_host(bytes, p);
    shm_region_t *reg = calloc(1, sizeof *reg);
    char **base = calloc((size_t)c->size, sizeof *base);
    if (!reg || !base) {
        free(reg);
        free(base);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory allocating the gradient buffer");
    }
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    char *mine = NULL;
    /* 64 bytes more, so every rank's buffer can start on a cache line */
    int rc = MPI_Win_allocate_shared((MPI_Aint)(bytes + 64), 1, info, c->mpi, &mine, &reg->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        free(base);
        free(reg);
        return ddp_fail(DDP_ERR_NOMEM,
                        "cannot allocate %zu bytes of node-shared memory for the gradient "
                        "buffer (MPI_Win_allocate_shared: %s); check the free space in /dev/shm "
                        "and in Open MPI's session directory",
                        bytes, msg);
    }
    for (int r = 0; r < c->size; r++) {
        MPI_Aint sz;
        int disp_unit;
        char *b = NULL;
        MPI_Win_shared_query(reg->win, r, &sz, &disp_unit, &b);
        base[r] = b + (64 - (uintptr_t)b % 64) % 64;
    }
    mine = base[c->rank];
    memset(mine, 0, bytes);
    reg->id = m->nregions++;
    reg->bytes = bytes;
    reg->base = base;
    reg->next = m->regions;
    m->regions = reg;
    *p = mine;
    return DDP_OK;
}

static void region_free_(comm_t *c, shm_region_t *reg)
{
    MPI_Win_free(&reg->win);
    free(reg->base);
    free(reg);
}

static void mpi_mem_free_(comm_t *c, void *p)
{
    mpi_impl_t *m = c->impl;
    if (!p) return;
    for (shm_region_t **pg = &m->regions; *pg; pg = &(*pg)->next) {
        if ((*pg)->base[c->rank] == p) {
            shm_region_t *reg = *pg;
            *pg = reg->next;
            region_free_(c, reg);
            return;
        }
    }
    free(p);
}

static void mpi_free_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    if (m) {
        /* requests never waited for: cancel what is pending, release */
        while (m->head) {
            comm_req_t *q = m->head;
            MPI_Request *reqs = q->algo == ALGO_RING ? q->ring_req : q->chunk_req;
            int nreqs = q->algo == ALGO_RING ? 2 * RING_MAXDEPTH : q->nchunks;
            for (int i = 0; i < nreqs; i++)
                if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[i]);
            unlink_(m, q);
            req_free_(m, q);
        }
        for (int i = 0; i < SCRATCH_SPARES; i++) free(m->spare[i]);
        while (m->regions) {
            shm_region_t *reg = m->regions;
            m->regions = reg->next;
            region_free_(c, reg);
        }
        if (m->ctl_win != MPI_WIN_NULL) MPI_Win_free(&m->ctl_win);
        free(m->ctl);
        MPI_Op_free(&m->op_bf16);
        MPI_Op_free(&m->op_fp16);
        MPI_Type_free(&m->half_dt);
        free(m);
    }
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
}

/* ---- capabilities and registration -------------------------------------- */

static unsigned mpi_caps_(const comm_t *c)
{
    const mpi_impl_t *m = c->impl;
    return m && m->shm_ok ? COMM_CAP_NODE_SHARED_MEMORY : 0u;
}

/* MPI moves host memory; device memory needs a backend that takes it. */
static ddp_status_t mpi_mem_register_(comm_t *c, void *p, size_t bytes, ddp_mem_kind_t kind)
{
    (void)c;
    (void)p;
    (void)bytes;
    if (kind == DDP_MEM_HOST) return DDP_OK;
    return ddp_fail(DDP_ERR_USAGE,
                    "the mpi comm backend cannot all-reduce %s memory (%zu bytes of gradients "
                    "or BatchNorm statistics); this build has no comm backend for %s memory: "
                    "use the cpu compute backend",
                    ddp_mem_kind_name(kind), bytes, ddp_mem_kind_name(kind));
}

static const comm_ops_t comm_mpi_ops = {
    .name = "mpi",
    .caps = mpi_caps_,
    .mem_register = mpi_mem_register_,
    .iallreduce = mpi_iallreduce_,
    .iallreduce_apply = mpi_iallreduce_apply_,
    .test = mpi_test_,
    .wait = mpi_wait_,
    .progress = mpi_progress_,
    .bcast = mpi_bcast_,
    .allgather = mpi_allgather_,
    .barrier = mpi_barrier_,
    .mem_plan = mpi_mem_plan_,
    .mem_alloc = mpi_mem_alloc_,
    .mem_free = mpi_mem_free_,
    .free = mpi_free_,
};

ddp_status_t comm_mpi_set_algorithm(comm_t *c, const char *name)
{
    mpi_impl_t *m = c->impl;
    if (!m || c->ops != &comm_mpi_ops)
        return ddp_fail(DDP_ERR_INTERNAL, "comm_mpi_set_algorithm on a non-MPI communicator");
    if (!strcmp(name, "auto"))
        m->algo = ALGO_AUTO;
    else if (!strcmp(name, "ring"))
        m->algo = ALGO_RING;
    else if (!strcmp(name, "mpi"))
        m->algo = ALGO_MPI;
    else
        return ddp_fail(DDP_ERR_USAGE, "unknown all-reduce algorithm '%s' (use auto, ring or mpi)",
                        name);
    return DDP_OK;
}

ddp_status_t comm_mpi_set_ring(comm_t *c, size_t piece_bytes, int depth)
{
    mpi_impl_t *m = c->impl;
    if (!m || c->ops != &comm_mpi_ops)
        return ddp_fail(DDP_ERR_INTERNAL, "comm_mpi_set_ring on a non-MPI communicator");
    if (depth < 0 || depth > RING_MAXDEPTH || piece_bytes > ((size_t)1 << 30))
        return ddp_fail(DDP_ERR_USAGE,
                        "ring piece %zu bytes / depth %d out of range "
                        "(piece <= 1 GiB, depth 1..%d)",
                        piece_bytes, depth, RING_MAXDEPTH);
    if (piece_bytes) m->piece_bytes = piece_bytes;
    if (depth) m->depth = depth;
    return DDP_OK;
}

ddp_status_t comm_init_mpi(comm_t *c, MPI_Comm world)
{
    memset(c, 0, sizeof *c);
    c->mpi = MPI_COMM_NULL;
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < COMM_MPI_THREAD_LEVEL)
        return ddp_fail(DDP_ERR_INTERNAL,
                        "MPI was initialised with thread level %d; the MPI comm backend needs "
                        "COMM_MPI_THREAD_LEVEL (%d): call MPI_Init_thread with it",
                        provided, COMM_MPI_THREAD_LEVEL);
    ddp_status_t s = comm_attach(c, world);
    if (s != DDP_OK) return s;

    mpi_impl_t *m = calloc(1, sizeof *m);
    if (!m) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    m->algo = ALGO_AUTO;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    m->oversubscribed = ncpu > 0 && c->local_size > ncpu;
    m->piece_bytes = RING_PIECE;
    m->depth = RING_DEPTH;
    void *ub = NULL;
    int flag = 0;
    MPI_Comm_get_attr(c->mpi, MPI_TAG_UB, &ub, &flag);
    int tag_ub = flag && ub ? *(int *)ub : 32767;
    m->tag_allreduces = tag_ub / RING_MAXDEPTH; /* >= 2047: the standard's minimum tag bound */
    MPI_Type_contiguous(2, MPI_BYTE, &m->half_dt);
    MPI_Type_commit(&m->half_dt);
    MPI_Op_create(mpi_op_sum_bf16_, 1, &m->op_bf16);
    MPI_Op_create(mpi_op_sum_fp16_, 1, &m->op_fp16);
    c->impl = m;
    c->ops = &comm_mpi_ops;

    /* shared-memory all-reduces: every rank on one node */
    m->ctl_win = MPI_WIN_NULL;
    m->shm_ok = 1; /* for shm_room_ */
    if (c->nnodes == 1 && c->size > 1 &&
        shm_room_(c, shm_need_(c, sizeof(shm_ctl_t), 1), "the all-reduce control blocks")) {
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
        shm_ctl_t *mine = NULL;
        int rc = MPI_Win_allocate_shared((MPI_Aint)sizeof(shm_ctl_t), 64, info, c->mpi, &mine,
                                         &m->ctl_win);
        MPI_Info_free(&info);
        if (rc == MPI_SUCCESS) m->ctl = calloc((size_t)c->size, sizeof *m->ctl);
        int ok = rc == MPI_SUCCESS && m->ctl, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c->mpi);
        if (!all) {
            /* without it, all-reduces use the ring: correct, a little slower */
            free(m->ctl);
            m->ctl = NULL;
            if (rc == MPI_SUCCESS) MPI_Win_free(&m->ctl_win);
            m->ctl_win = MPI_WIN_NULL;
            m->shm_ok = 0;
            return DDP_OK;
        }
        memset(mine, 0, sizeof *mine);
        for (int r = 0; r < c->size; r++) {
            MPI_Aint sz;
            int disp_unit;
            void *b = NULL;
            MPI_Win_shared_query(m->ctl_win, r, &sz, &disp_unit, &b);
            m->ctl[r] = b;
        }
        MPI_Barrier(c->mpi); /* every control block is zeroed before anyone uses it */
        return DDP_OK;
    }
    m->shm_ok = 0;
    return DDP_OK;
}
