/* comm_mpi_ring.c -- the ring algorithm of the MPI comm backend
 * (comm_mpi_algo.h): every rank sends to its right neighbour and receives
 * from its left one, W-1 steps of reduce-scatter (the received block added
 * into ours) then W-1 steps of all-gather (the finished block passed on),
 * each message at most one piece, a few slices in flight at once, advanced
 * by the progress engine between layers.
 *
 * Layout: every collective cuts the buffer into the W blocks of comm_block
 * -- rank r owns block r -- and a slice is the k-th piece of every block;
 * the all-reduce is the reduce-scatter's steps followed by the
 * all-gather's, so an element is added up in the same order by both (ZeRO's
 * reduce-scatter gives an all-reduce's sums bit for bit).  Each element's
 * sum is added up in the ring's fixed order, starting at the block's first
 * sender, and the other ranks only copy it: the same bits everywhere.
 * (A layout of slices of W blocks each, rank r finishing block r+1, was
 * the all-reduce's before --zero: an element's order then depended on the
 * collective.) */
#include <stdlib.h>
#include <string.h>

#include "comm_mpi_algo.h"
#include "sum_kernels.h"

#define RING_PIECE     ((size_t)4 << 20) /* default piece (bytes per message) */
#define RING_DEPTH     2                 /* default slices in flight */
#define SCRATCH_SPARES 4                 /* receive buffers kept for reuse */

struct mpi_ring {
    size_t piece_bytes;
    int depth;
    int tag_ub;          /* the largest tag of c->mpi */
    int tag_collectives; /* ring collectives whose tags can be told apart */
    uint64_t started;    /* ring collectives started (their tags cycle) */
    char *spare[SCRATCH_SPARES]; /* receive buffers kept for reuse */
    size_t spare_bytes[SCRATCH_SPARES];
};

/* One slice in flight. */
typedef struct ring_slot {
    int active;
    size_t slice; /* slice index */
    int step;     /* 0 .. W-2 reduce-scatter, W-1 .. 2(W-1)-1 all-gather */
} ring_slot_t;

struct ring_run {
    ring_geo_t geo;
    int step_first, step_end;  /* the steps run: [0, W-1) reduce, [W-1, 2(W-1)) gather */
    size_t nslices, slices_done;
    size_t piece; /* elements per piece */
    int depth, tagbase;
    char *recv_scratch; /* depth * piece * esz bytes (reduce-scatter receive) */
    size_t recv_scratch_bytes;
    ring_slot_t slot[RING_MAXDEPTH];
    MPI_Request req[2 * RING_MAXDEPTH]; /* slot j: [2j] receive, [2j+1] send */
};

/* ---- scratch buffers -------------------------------------------------------- */

/* A few spares are kept, so a steady stream of collectives (several in
 * flight) does not map fresh pages every time. */
static char *scratch_get_(mpi_ring_t *g, size_t bytes)
{
    int best = -1;
    for (int i = 0; i < SCRATCH_SPARES; i++)
        if (g->spare[i] && g->spare_bytes[i] >= bytes &&
            (best < 0 || g->spare_bytes[i] < g->spare_bytes[best]))
            best = i;
    if (best >= 0) {
        char *p = g->spare[best];
        g->spare[best] = NULL;
        return p;
    }
    return malloc(bytes ? bytes : 1);
}

static void scratch_put_(mpi_ring_t *g, char *p, size_t bytes)
{
    if (!p) return;
    int slot = -1; /* an empty slot, else the smallest spare if smaller than p */
    for (int i = 0; i < SCRATCH_SPARES; i++) {
        if (!g->spare[i]) {
            slot = i;
            break;
        }
        if (g->spare_bytes[i] < bytes && (slot < 0 || g->spare_bytes[i] < g->spare_bytes[slot]))
            slot = i;
    }
    if (slot < 0) {
        free(p);
        return;
    }
    free(g->spare[slot]);
    g->spare[slot] = p;
    g->spare_bytes[slot] = bytes;
}

/* ---- the ring ----------------------------------------------------------------- */

static int mod_(int a, int W)
{
    return ((a % W) + W) % W;
}

/* Elements [*off, *off + *n) of block blk in slot sl's slice: the slice's
 * piece of that block. */
static void span_(const ring_run_t *rq, const ring_slot_t *sl, int blk, size_t *off, size_t *n)
{
    size_t first, len, p0 = sl->slice * rq->piece;
    comm_block(rq->geo.count, rq->geo.W, blk, &first, &len);
    *n = len > p0 ? (len - p0 < rq->piece ? len - p0 : rq->piece) : 0;
    *off = first + p0;
}

/* Post the messages of slot j's current step (none for empty blocks). */
static ddp_status_t post_(const comm_req_t *q, ring_run_t *rq, int j)
{
    const ring_geo_t *g = &rq->geo;
    ring_slot_t *sl = &rq->slot[j];
    int W = g->W, r = g->me, s = sl->step;
    int send_blk, recv_blk; /* block sent, block received */
    /* reduce-scatter step s: block r-s-1 goes right, r-s-2 comes in and is
     * added (rank r finishes block r last); all-gather: the finished blocks
     * go round */
    if (s < W - 1)
        send_blk = mod_(r - s - 1, W), recv_blk = mod_(r - s - 2, W);
    else
        send_blk = mod_(r - (s - (W - 1)), W), recv_blk = mod_(r - 1 - (s - (W - 1)), W);
    size_t send_off, send_len, recv_off, recv_len;
    span_(rq, sl, send_blk, &send_off, &send_len);
    span_(rq, sl, recv_blk, &recv_off, &recv_len);
    int tag = rq->tagbase + j, rc;
    rq->req[2 * j] = rq->req[2 * j + 1] = MPI_REQUEST_NULL;
    if (recv_len) {
        void *dst = s < W - 1 ? rq->recv_scratch + (size_t)j * rq->piece * q->esz
                              : g->buf + recv_off * q->esz;
        rc = MPI_Irecv(dst, (int)(recv_len * q->esz), MPI_BYTE, g->left, tag, g->comm,
                       &rq->req[2 * j]);
        if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Irecv", &q->desc, q->seq);
    }
    if (send_len) {
        rc = MPI_Isend(g->buf + send_off * q->esz, (int)(send_len * q->esz), MPI_BYTE, g->right,
                       tag, g->comm, &rq->req[2 * j + 1]);
        if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Isend", &q->desc, q->seq);
    }
    return DDP_OK;
}

/* Start slot j's next slice: slot j runs slices j, j + depth, j + 2 depth, ...
 * in that order on every rank, which keeps each tag's message stream in the
 * same order on sender and receiver. */
static ddp_status_t start_slice_(const comm_req_t *q, ring_run_t *rq, int j, int first)
{
    ring_slot_t *sl = &rq->slot[j];
    size_t slice = first ? (size_t)j : sl->slice + (size_t)rq->depth;
    if (slice >= rq->nslices) {
        sl->active = 0;
        return DDP_OK;
    }
    sl->active = 1;
    sl->slice = slice;
    sl->step = rq->step_first;
    return post_(q, rq, j);
}

/* Slot j's messages of the current step have completed: add the received
 * block into ours (during the reduce-scatter), then post the next step or
 * finish the slice; repeat while steps complete at once (empty blocks post
 * nothing). */
static ddp_status_t advance_(const comm_req_t *q, ring_run_t *rq, int j)
{
    ring_slot_t *sl = &rq->slot[j];
    int W = rq->geo.W, r = rq->geo.me;
    for (;;) {
        if (rq->req[2 * j] != MPI_REQUEST_NULL || rq->req[2 * j + 1] != MPI_REQUEST_NULL)
            return DDP_OK;
        if (!sl->active) return DDP_OK;
        if (sl->step < W - 1) {
            size_t recv_off, recv_len;
            span_(rq, sl, mod_(r - sl->step - 2, W), &recv_off, &recv_len);
            sum_accumulate(q->type, rq->geo.buf + recv_off * q->esz,
                           rq->recv_scratch + (size_t)j * rq->piece * q->esz, recv_len);
        }
        if (++sl->step == rq->step_end) {
            rq->slices_done++;
            DDP_TRY(start_slice_(q, rq, j, 0));
        } else {
            DDP_TRY(post_(q, rq, j));
        }
    }
}

ddp_status_t ring_run_progress(const comm_req_t *q, ring_run_t *rq, int *done)
{
    int n = 2 * rq->depth, outcount = 0;
    int idx[2 * RING_MAXDEPTH];
    *done = 0;
    for (;;) {
        for (int j = 0; j < rq->depth; j++) DDP_TRY(advance_(q, rq, j));
        if (rq->slices_done == rq->nslices) {
            *done = 1;
            return DDP_OK;
        }
        int rc = MPI_Testsome(n, rq->req, &outcount, idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return comm_mpi_error(rc, "MPI_Testsome", &q->desc, q->seq);
        if (outcount == MPI_UNDEFINED || outcount == 0) return DDP_OK; /* nothing more now */
    }
}

ddp_status_t ring_run_start(comm_t *c, const comm_req_t *q, const ring_geo_t *geo, coll_op_t op,
                            int tagbase, ring_run_t **out)
{
    mpi_ring_t *g = ((mpi_impl_t *)c->impl)->ring;
    ring_run_t *rq = calloc(1, sizeof *rq);
    *out = rq;
    if (!rq) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
    rq->geo = *geo;
    int W = geo->W;
    rq->step_first = op == COLL_ALLGATHER ? W - 1 : 0;
    rq->step_end = op == COLL_REDUCE_SCATTER ? W - 1 : 2 * (W - 1);
    size_t max_piece = g->piece_bytes / q->esz;
    if (max_piece == 0) max_piece = 1;
    /* small buffers: pieces just big enough for one slice */
    size_t need = (geo->count + (size_t)W - 1) / (size_t)W;
    rq->piece = need < max_piece ? (need ? need : 1) : max_piece;
    rq->nslices = W == 1 || geo->count == 0 ? 0 : (need + rq->piece - 1) / rq->piece;
    rq->depth = g->depth < (int)rq->nslices ? g->depth : (int)rq->nslices;
    if (rq->depth < 1) rq->depth = 1;
    rq->tagbase = tagbase;
    for (int j = 0; j < 2 * RING_MAXDEPTH; j++) rq->req[j] = MPI_REQUEST_NULL;
    if (rq->nslices == 0) return DDP_OK;
    rq->recv_scratch_bytes = (size_t)rq->depth * rq->piece * q->esz;
    rq->recv_scratch = scratch_get_(g, rq->recv_scratch_bytes);
    if (!rq->recv_scratch)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory starting collective %s %d (%zu bytes)",
                        q->desc.what, q->desc.index, rq->recv_scratch_bytes);
    for (int j = 0; j < rq->depth; j++) DDP_TRY(start_slice_(q, rq, j, 1));
    return DDP_OK;
}

void ring_run_free(comm_t *c, ring_run_t *rq)
{
    if (!rq) return;
    for (int i = 0; i < 2 * RING_MAXDEPTH; i++)
        if (rq->req[i] != MPI_REQUEST_NULL) MPI_Request_free(&rq->req[i]);
    scratch_put_(((mpi_impl_t *)c->impl)->ring, rq->recv_scratch, rq->recv_scratch_bytes);
    free(rq);
}

/* ---- the ring algorithm: every rank of c in rank order -------------------- */

static ddp_status_t ring_progress_(comm_t *c, comm_req_t *q)
{
    int done = 0;
    DDP_TRY(ring_run_progress(q, q->state, &done));
    q->done = done;
    return DDP_OK;
}

static ddp_status_t ring_start_(comm_t *c, comm_req_t *q)
{
    mpi_ring_t *g = ((mpi_impl_t *)c->impl)->ring;
    int W = c->size, r = c->rank;
    ring_geo_t geo = {c->mpi, W, r, mod_(r - 1, W), mod_(r + 1, W), q->buf, q->count};
    int tagbase = (int)(g->started++ % (uint64_t)g->tag_collectives) * RING_MAXDEPTH;
    ring_run_t *rq = NULL;
    ddp_status_t s = ring_run_start(c, q, &geo, q->op, tagbase, &rq);
    q->state = rq;
    if (s != DDP_OK) return s;
    return ring_progress_(c, q);
}

static void ring_release_(comm_t *c, comm_req_t *q)
{
    ring_run_free(c, q->state);
    q->state = NULL;
}

static int ring_usable_(comm_t *c, const comm_req_t *q)
{
    return 1;
}

static ddp_status_t ring_init_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    mpi_ring_t *g = calloc(1, sizeof *g);
    if (!g) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    g->piece_bytes = RING_PIECE;
    g->depth = RING_DEPTH;
    void *ub = NULL;
    int flag = 0;
    MPI_Comm_get_attr(c->mpi, MPI_TAG_UB, &ub, &flag);
    int tag_ub = flag && ub ? *(int *)ub : 32767;
    g->tag_ub = tag_ub;
    g->tag_collectives = tag_ub / RING_MAXDEPTH; /* >= 2047: the standard's minimum tag bound */
    m->ring = g;
    return DDP_OK;
}

static void ring_fini_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    if (!m->ring) return;
    for (int i = 0; i < SCRATCH_SPARES; i++) free(m->ring->spare[i]);
    free(m->ring);
    m->ring = NULL;
}

ddp_status_t mpi_ring_set(comm_t *c, size_t piece_bytes, int depth)
{
    mpi_ring_t *g = ((mpi_impl_t *)c->impl)->ring;
    if (depth < 0 || depth > RING_MAXDEPTH || piece_bytes > ((size_t)1 << 30))
        return ddp_fail(DDP_ERR_USAGE,
                        "ring piece %zu bytes / depth %d out of range "
                        "(piece <= 1 GiB, depth 1..%d)",
                        piece_bytes, depth, RING_MAXDEPTH);
    if (piece_bytes) g->piece_bytes = piece_bytes;
    if (depth) g->depth = depth;
    return DDP_OK;
}

void mpi_ring_get(const comm_t *c, size_t *piece_bytes, int *depth)
{
    const mpi_ring_t *g = ((const mpi_impl_t *)c->impl)->ring;
    *piece_bytes = g->piece_bytes;
    *depth = g->depth;
}

const mpi_algo_t mpi_algo_ring = {
    .name = "ring",
    .init = ring_init_,
    .fini = ring_fini_,
    .usable = ring_usable_,
    .start = ring_start_,
    .progress = ring_progress_,
    .release = ring_release_,
};
