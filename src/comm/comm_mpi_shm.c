/* comm_mpi_shm.c -- the shared-memory algorithm of the MPI comm backend
 * (comm_mpi_algo.h), and the node-shared memory it works on.
 *
 * When every rank is on one node, comm_mem_alloc hands out node-shared
 * memory (an MPI shared window): each rank's buffer is mapped in every
 * rank, at the same offset of the same region.  A collective on a slice of
 * it needs no message: every rank sums its block (comm_block) straight from
 * every rank's buffer, in rank order (sum_sources), and, for an all-reduce
 * or an all-gather, copies the other blocks from their owners once they are
 * final.  Counters in a per-rank control block (also shared) say how far
 * each rank is: the input of collective k is ready (arrived), its own block
 * of k is final (reduced), it has copied the other blocks of k (copied).
 * Each phase runs in collective order on every rank; a collective completes
 * once every rank has copied, i.e. nobody reads this rank's buffer any
 * more.  The fused update of iallreduce_apply: the owner of a block applies
 * the optimizer to it and the other ranks copy the updated parameters and
 * optimizer state instead of the sums, so each element is updated once on
 * the node.
 *
 * /dev/shm can be small (Docker's 64 MB): the room is checked (collectively)
 * before every mapping, and when it runs short every rank falls back to
 * private memory and the ring, saying so once. */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "comm_mpi_algo.h"
#include "comm_mpi_thread.h"
#include "log.h"
#include "sum_kernels.h"

#define SHM_SLOTS 64 /* shared-memory collectives in flight at most */

/* A buffer from mpi_shm_alloc (comm_mem_alloc) that the ranks of the node
 * share. */
typedef struct shm_region {
    struct shm_region *next;
    int id; /* allocation number (the same on every rank) */
    MPI_Win win;
    size_t bytes;
    char **base; /* [L]: every local rank's segment, mapped here */
} shm_region_t;

/* What a rank says about its shared-memory collective number seq, for the
 * others to check against their own. */
typedef struct shm_desc {
    uint64_t off, count;      /* byte offset in the region, elements */
    int32_t region, type, op; /* shm_region_t.id, comm_dtype_t, coll_op_t */
    int32_t pad;
} shm_desc_t;

/* Per-rank control block in shared memory.  The counters only grow: the
 * number of the last shared-memory collective whose input this rank has
 * made ready / whose own block it has finished / whose other blocks it has
 * copied.  Each on its own cache line. */
typedef struct shm_ctl {
    _Atomic uint64_t arrived;
    char pad0[64 - sizeof(uint64_t)];
    _Atomic uint64_t reduced;
    char pad1[64 - sizeof(uint64_t)];
    _Atomic uint64_t copied;
    char pad2[64 - sizeof(uint64_t)];
    shm_desc_t desc[SHM_SLOTS]; /* collective k: desc[k % SHM_SLOTS] */
} shm_ctl_t;

struct mpi_shm {
    int ok; /* node-shared memory in use (W > 1, room) */
    int L, me; /* the ranks of this node (c->node_comm), this rank's local rank */
    int S;     /* slices of a collective: the most ranks on any node */
    /* the hierarchical algorithm (ranks on several nodes) */
    int *owner;     /* [c->nnodes * S]: the rank (in c->mpi) owning slice j on node n */
    MPI_Comm cross; /* a duplicate of c->mpi: the slices' rings, with tags of their own */
    int tag_collectives; /* hierarchical collectives whose tags can be told apart */
    MPI_Win ctl_win;
    shm_ctl_t **ctl; /* [L]: every local rank's control block, mapped here */
    shm_region_t *regions;
    int nregions;
    uint64_t started, reduced, copied, completed; /* this rank's counters */
};

/* Where a shared-memory collective stands on this rank (shm_progress_). */
typedef enum shm_phase {
    SHM_OWN_BLOCK,   /* waiting for every local rank's input, then summing this rank's slices */
    SHM_CROSS,       /* hierarchical: this rank's slices all-reduced with the other nodes */
    SHM_COPY_OTHERS, /* copying the other blocks as their owners finish them */
    SHM_WAIT_COPIES  /* waiting until no rank reads this rank's buffer any more */
} shm_phase_t;

typedef struct shm_req {
    shm_region_t *region;
    size_t off;   /* byte offset of buf in the region */
    uint64_t seq; /* shared-memory collective number (1, 2, ...; same on every rank) */
    shm_phase_t phase;
    int ncopied;
    unsigned char *copied_from; /* [L]: local rank r's slices copied */
    int cross;                  /* hierarchical: the slices go round the nodes */
    int nrun;                   /* hierarchical: this rank's slices (run[i]: slice me + i L) */
    ring_run_t **run;
    unsigned char *run_done;
    int fused;                  /* iallreduce_apply: owners apply their block, others copy extras */
    shm_region_t *extra_region[COMM_APPLY_MAX];
    size_t extra_off[COMM_APPLY_MAX]; /* byte offset of extra[i] in its region */
} shm_req_t;

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
 * collectives take the ring: the same arithmetic on every rank, slower --
 * and rank 0 says so once, with what to do. */
static int shm_room_(comm_t *c, uint64_t need, const char *what)
{
    mpi_shm_t *h = ((mpi_impl_t *)c->impl)->shm;
    uint64_t fr = shm_free_(c);
    if (fr >= need) return 1;
    h->ok = 0;
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

int mpi_shm_available(const comm_t *c)
{
    const mpi_impl_t *m = c->impl;
    return m && m->shm && m->shm->ok;
}

ddp_status_t mpi_shm_plan(comm_t *c, size_t bytes, int nbuffers)
{
    if (mpi_shm_available(c))
        shm_room_(c, shm_need_(c, bytes, nbuffers),
                  "the parameters, gradients and optimizer state");
    return DDP_OK;
}

ddp_status_t mpi_shm_alloc(comm_t *c, size_t bytes, void **p)
{
    mpi_shm_t *h = ((mpi_impl_t *)c->impl)->shm;
    *p = NULL;
    if (h->ok) {
        DDP_TRY(comm_mpi_progress(c));
        shm_room_(c, shm_need_(c, bytes, 1), "the gradient and optimizer buffers");
    }
    if (!h->ok) return comm_mem_alloc_host(bytes, p);
    shm_region_t *reg = calloc(1, sizeof *reg);
    char **base = calloc((size_t)h->L, sizeof *base);
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
    int rc =
        MPI_Win_allocate_shared((MPI_Aint)(bytes + 64), 1, info, c->node_comm, &mine, &reg->win);
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
    for (int r = 0; r < h->L; r++) {
        MPI_Aint sz;
        int disp_unit;
        char *b = NULL;
        MPI_Win_shared_query(reg->win, r, &sz, &disp_unit, &b);
        base[r] = b + (64 - (uintptr_t)b % 64) % 64;
    }
    mine = base[h->me];
    memset(mine, 0, bytes);
    reg->id = h->nregions++;
    reg->bytes = bytes;
    reg->base = base;
    reg->next = h->regions;
    h->regions = reg;
    *p = mine;
    return DDP_OK;
}

static void region_free_(shm_region_t *reg)
{
    MPI_Win_free(&reg->win);
    free(reg->base);
    free(reg);
}

int mpi_shm_free(comm_t *c, void *p)
{
    mpi_shm_t *h = ((mpi_impl_t *)c->impl)->shm;
    for (shm_region_t **pg = &h->regions; *pg; pg = &(*pg)->next) {
        if ((*pg)->base[h->me] == p) {
            shm_region_t *reg = *pg;
            *pg = reg->next;
            region_free_(reg);
            return 1;
        }
    }
    return 0;
}

/* The region holding [buf, buf + bytes) on this rank, or NULL. */
static shm_region_t *shm_find_(const comm_t *c, const void *buf, size_t bytes)
{
    const mpi_shm_t *h = ((const mpi_impl_t *)c->impl)->shm;
    const char *p = buf;
    for (shm_region_t *reg = h->regions; reg; reg = reg->next) {
        const char *b = reg->base[h->me];
        if (p >= b && p <= b + reg->bytes && bytes <= (size_t)(b + reg->bytes - p)) return reg;
    }
    return NULL;
}

/* ---- the algorithm ---------------------------------------------------------------- */

/* Every rank has made collective q's input ready, and passes the same
 * slice of the same region for the same kind of collective. */
static ddp_status_t check_descs_(comm_t *c, const comm_req_t *q, const shm_req_t *sq, int *ready)
{
    mpi_shm_t *h = ((mpi_impl_t *)c->impl)->shm;
    const int W = h->L, me = h->me;
    *ready = 0;
    for (int r = 0; r < W; r++)
        if (atomic_load_explicit(&h->ctl[r]->arrived, memory_order_acquire) < sq->seq)
            return DDP_OK;
    *ready = 1;
    const shm_desc_t *mine = &h->ctl[me]->desc[sq->seq % SHM_SLOTS];
    for (int r = 0; r < W; r++) {
        const shm_desc_t *d = &h->ctl[r]->desc[sq->seq % SHM_SLOTS];
        if (d->off != mine->off || d->count != mine->count || d->region != mine->region ||
            d->type != mine->type || d->op != mine->op)
            return ddp_fail(DDP_ERR_MISMATCH,
                            "%s %s %d (step %lld, collective #%llu): rank %d passes "
                            "%llu elements of type %d at byte %llu of shared buffer %d "
                            "(operation %d), local rank %d passes %llu of type %d at byte %llu of "
                            "buffer %d (operation %d); every rank must start the same "
                            "collective on the same slice of its comm-allocated buffer",
                            q->op == COLL_ALLREDUCE        ? "all-reduce"
                            : q->op == COLL_REDUCE_SCATTER ? "reduce-scatter"
                                                           : "all-gather",
                            q->desc.what, q->desc.index, (long long)q->desc.step,
                            (unsigned long long)q->seq, me, (unsigned long long)mine->count,
                            (int)mine->type, (unsigned long long)mine->off, (int)mine->region,
                            (int)mine->op, r, (unsigned long long)d->count, (int)d->type,
                            (unsigned long long)d->off, (int)d->region, (int)d->op);
    }
    return DDP_OK;
}

/* Elements [*off, *off + *n) of slice j of q. */
static void slice_(const mpi_shm_t *h, const comm_req_t *q, int j, size_t *off, size_t *n)
{
    comm_block(q->count, h->S, j, off, n);
}

/* Copy local rank r's slices of q from its buffers (the updated extra
 * buffers when fused, else the sums); a reduce-scatter only what falls in
 * this rank's block. */
static void copy_from_(const comm_t *c, const mpi_shm_t *h, comm_req_t *q, const shm_req_t *sq,
                       int r)
{
    size_t lo = 0, hi = q->count;
    if (q->op == COLL_REDUCE_SCATTER) {
        comm_block(q->count, c->size, c->rank, &lo, &hi);
        hi += lo;
    }
    for (int j = r; j < h->S; j += h->L) {
        size_t off, n;
        slice_(h, q, j, &off, &n);
        size_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
        if (a >= b) continue;
        if (sq->fused)
            for (int i = 0; i < q->apply.nextra; i++)
                memcpy(q->apply.extra[i] + a,
                       sq->extra_region[i]->base[r] + sq->extra_off[i] + a * 4, (b - a) * 4);
        else
            memcpy(q->buf + a * q->esz, sq->region->base[r] + sq->off + a * q->esz,
                   (b - a) * q->esz);
    }
}

/* Start the rings of this rank's slices, one per slice, among the slice's
 * owners on every node in node order. */
static ddp_status_t cross_start_(comm_t *c, comm_req_t *q, shm_req_t *sq)
{
    mpi_shm_t *h = ((mpi_impl_t *)c->impl)->shm;
    int N = c->nnodes, n = c->node;
    for (int i = 0; i < sq->nrun; i++) {
        int j = h->me + i * h->L;
        size_t off, len;
        slice_(h, q, j, &off, &len);
        ring_geo_t geo = {h->cross, N, n, h->owner[((n + N - 1) % N) * h->S + j],
                          h->owner[((n + 1) % N) * h->S + j], q->buf + off * q->esz, len};
        int tagbase =
            (int)((sq->seq % (uint64_t)h->tag_collectives) * (uint64_t)h->S + (uint64_t)j) *
            RING_MAXDEPTH;
        DDP_TRY(ring_run_start(c, q, &geo, COLL_ALLREDUCE, tagbase, &sq->run[i]));
    }
    return DDP_OK;
}

/* Advance q as far as it goes without waiting.  A collective cuts its
 * buffer into S slices (comm_block), and local rank l owns the slices l,
 * l + L, ...: on one node each rank one block, as the ranks' blocks.
 *   SHM_OWN_BLOCK: once every local rank's input is ready, this rank sums
 *     its slices from every local rank's buffer in local rank order (for an
 *     all-reduce or a reduce-scatter; an all-gather's are final already);
 *     on one node the owner then applies the fused update;
 *   SHM_CROSS (hierarchical, ranks on several nodes): each slice's node
 *     sums go round the slice's owners, one per node, in a ring
 *     (all-reduce: every node ends with the same bits), and then the fused
 *     update;
 *   SHM_COPY_OTHERS: the other local ranks' slices copied as their owners
 *     finish them (none for a reduce-scatter on one node; across nodes what
 *     falls in this rank's block);
 *   SHM_WAIT_COPIES: complete once no local rank reads this rank's buffer. */
static ddp_status_t shm_progress_(comm_t *c, comm_req_t *q)
{
    mpi_shm_t *h = ((mpi_impl_t *)c->impl)->shm;
    shm_req_t *sq = q->state;
    const int L = h->L, me = h->me;
    size_t off, len;
    if (sq->phase == SHM_OWN_BLOCK) {
        if (h->reduced != sq->seq - 1) return DDP_OK;
        int ready;
        DDP_TRY(check_descs_(c, q, sq, &ready));
        if (!ready) return DDP_OK;
        for (int j = me; j < h->S; j += L) {
            slice_(h, q, j, &off, &len);
            if (!len || q->op == COLL_ALLGATHER) continue;
            if (L > 1) {
                const char *src[L];
                for (int r = 0; r < L; r++) src[r] = sq->region->base[r] + sq->off + off * q->esz;
                sum_sources(q->type, q->buf + off * q->esz, src, L, len);
            }
            /* the owner of the slice updates it; the others copy the result */
            if (sq->fused && !sq->cross) q->apply.fn(q->apply.arg, off, len);
        }
        if (sq->cross) {
            DDP_TRY(cross_start_(c, q, sq));
            sq->phase = SHM_CROSS;
        } else {
            atomic_store_explicit(&h->ctl[me]->reduced, sq->seq, memory_order_release);
            h->reduced = sq->seq;
            sq->phase = SHM_COPY_OTHERS;
        }
    }
    if (sq->phase == SHM_CROSS) {
        int left = 0;
        for (int i = 0; i < sq->nrun; i++) {
            if (sq->run_done[i]) continue;
            int done = 0;
            DDP_TRY(ring_run_progress(q, sq->run[i], &done));
            if (!done) {
                left++;
                continue;
            }
            sq->run_done[i] = 1;
        }
        if (left) return DDP_OK;
        /* the owner updates its slices: on the main thread (the progress
         * thread leaves it to the next comm call, comm_mpi_thread.h) */
        if (sq->fused && mpi_thread_self()) return DDP_OK;
        for (int i = 0; sq->fused && i < sq->nrun; i++) {
            slice_(h, q, me + i * L, &off, &len);
            if (len) q->apply.fn(q->apply.arg, off, len);
        }
        atomic_store_explicit(&h->ctl[me]->reduced, sq->seq, memory_order_release);
        h->reduced = sq->seq;
        sq->phase = SHM_COPY_OTHERS;
    }
    if (sq->phase == SHM_COPY_OTHERS) {
        if (h->copied != sq->seq - 1) return DDP_OK;
        int copies = q->op != COLL_REDUCE_SCATTER || sq->cross;
        for (int r = 0; r < L && copies; r++) {
            if (r == me || sq->copied_from[r]) continue;
            if (atomic_load_explicit(&h->ctl[r]->reduced, memory_order_acquire) < sq->seq)
                continue;
            copy_from_(c, h, q, sq, r);
            sq->copied_from[r] = 1;
            sq->ncopied++;
        }
        if (copies && sq->ncopied < L - 1) return DDP_OK;
        atomic_store_explicit(&h->ctl[me]->copied, sq->seq, memory_order_release);
        h->copied = sq->seq;
        sq->phase = SHM_WAIT_COPIES;
    }
    for (int r = 0; r < L; r++)
        if (atomic_load_explicit(&h->ctl[r]->copied, memory_order_acquire) < sq->seq)
            return DDP_OK;
    q->done = 1;
    h->completed = sq->seq;
    return DDP_OK;
}

static int shm_usable_(comm_t *c, const comm_req_t *q)
{
    return c->nnodes == 1 && mpi_shm_available(c) && q->count > 0 &&
           shm_find_(c, q->buf, q->count * q->esz);
}

/* Across nodes: an all-reduce or a reduce-scatter (the all-reduce, of
 * which this rank keeps its block: the same sums bit for bit) of a
 * node-shared buffer.  An all-gather adds nothing up and takes the ring. */
static int hier_usable_(comm_t *c, const comm_req_t *q)
{
    return c->nnodes > 1 && mpi_shm_available(c) && q->count > 0 && q->op != COLL_ALLGATHER &&
           shm_find_(c, q->buf, q->count * q->esz);
}

static ddp_status_t shm_start_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    mpi_shm_t *h = m->shm;
    shm_req_t *sq = calloc(1, sizeof *sq);
    if (!sq) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
    q->state = sq;
    sq->cross = q->algo == &mpi_algo_hier;
    sq->nrun = sq->cross ? (h->S - h->me + h->L - 1) / h->L : 0;
    sq->copied_from = calloc((size_t)h->L, 1);
    sq->run = calloc((size_t)sq->nrun + 1, sizeof *sq->run);
    sq->run_done = calloc((size_t)sq->nrun + 1, 1);
    if (!sq->copied_from || !sq->run || !sq->run_done)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
    sq->region = shm_find_(c, q->buf, q->count * q->esz);
    sq->off = (size_t)(q->buf - sq->region->base[h->me]);
    /* fused: an all-reduce whose every extra buffer is shared too */
    if (q->has_apply && q->op == COLL_ALLREDUCE) {
        sq->fused = q->apply.nextra >= 1 && q->apply.nextra <= COMM_APPLY_MAX;
        for (int i = 0; sq->fused && i < q->apply.nextra; i++) {
            sq->extra_region[i] = shm_find_(c, q->apply.extra[i], q->count * 4);
            sq->fused = sq->extra_region[i] != NULL;
            if (sq->fused)
                sq->extra_off[i] =
                    (size_t)((char *)q->apply.extra[i] - sq->extra_region[i]->base[h->me]);
        }
        q->applied = sq->fused;
    }
    sq->seq = ++h->started;
    /* the descriptor slot of collective k - SHM_SLOTS must be free */
    for (long spin = 0; sq->seq - h->completed > SHM_SLOTS; spin++) {
        DDP_TRY(comm_mpi_progress(c));
        if (m->oversubscribed && spin % 64 == 63) sched_yield();
    }
    shm_desc_t *d = &h->ctl[h->me]->desc[sq->seq % SHM_SLOTS];
    d->off = sq->off;
    d->count = q->count;
    d->region = sq->region->id;
    d->type = (int32_t)q->type;
    d->op = (int32_t)q->op;
    atomic_store_explicit(&h->ctl[h->me]->arrived, sq->seq, memory_order_release);
    return DDP_OK;
}

static void shm_release_(comm_t *c, comm_req_t *q)
{
    shm_req_t *sq = q->state;
    if (!sq) return;
    for (int i = 0; sq->run && i < sq->nrun; i++) ring_run_free(c, sq->run[i]);
    free(sq->run);
    free(sq->run_done);
    free(sq->copied_from);
    free(sq);
    q->state = NULL;
}

/* Across nodes: who owns each slice on each node (owner), and the
 * communicator of the slices' rings.  Collective over c->mpi. */
static ddp_status_t hier_init_(comm_t *c, mpi_shm_t *h)
{
    int mine[3] = {c->node, c->local_rank, c->local_size};
    int *all = malloc((size_t)c->size * sizeof mine);
    if (!all) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    if (MPI_Allgather(mine, 3, MPI_INT, all, 3, MPI_INT, c->mpi) != MPI_SUCCESS) {
        free(all);
        return ddp_fail(DDP_ERR_COMM, "MPI_Allgather (the ranks of every node) failed");
    }
    for (int r = 0; r < c->size; r++)
        if (all[3 * r + 2] > h->S) h->S = all[3 * r + 2];
    h->owner = calloc((size_t)c->nnodes * (size_t)h->S, sizeof *h->owner);
    if (!h->owner) {
        free(all);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    }
    for (int r = 0; r < c->size; r++) {
        int node = all[3 * r], lr = all[3 * r + 1], ls = all[3 * r + 2];
        for (int j = lr; j < h->S; j += ls) h->owner[node * h->S + j] = r;
    }
    free(all);
    if (MPI_Comm_dup(c->mpi, &h->cross) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_dup (the all-reduce between nodes) failed");
    MPI_Comm_set_errhandler(h->cross, MPI_ERRORS_RETURN);
    void *ub = NULL;
    int flag = 0;
    MPI_Comm_get_attr(c->mpi, MPI_TAG_UB, &ub, &flag);
    int tag_ub = flag && ub ? *(int *)ub : 32767;
    h->tag_collectives = tag_ub / (h->S * RING_MAXDEPTH);
    if (h->tag_collectives < 2)
        return ddp_fail(DDP_ERR_COMM,
                        "MPI's largest tag (%d) is too small for %d ranks on a node; use "
                        "--allreduce ring",
                        tag_ub, h->S);
    return DDP_OK;
}

/* The control blocks of each node's ranks (node-shared memory among them),
 * when /dev/shm has room for them; without them, collectives take the ring
 * (correct, a little slower).  Across nodes, also the hierarchical
 * algorithm's tables. */
static ddp_status_t shm_init_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    mpi_shm_t *h = calloc(1, sizeof *h);
    if (!h) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    m->shm = h;
    h->ctl_win = MPI_WIN_NULL;
    h->cross = MPI_COMM_NULL;
    h->L = c->local_size;
    h->me = c->local_rank;
    h->S = h->L;
    h->ok = 1; /* for shm_room_ */
    if (c->size == 1 ||
        !shm_room_(c, shm_need_(c, sizeof(shm_ctl_t), 1), "the all-reduce control blocks")) {
        h->ok = 0;
        return DDP_OK;
    }
    if (c->nnodes > 1) DDP_TRY(hier_init_(c, h));
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    shm_ctl_t *mine = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)sizeof(shm_ctl_t), 64, info, c->node_comm, &mine,
                                     &h->ctl_win);
    MPI_Info_free(&info);
    if (rc == MPI_SUCCESS) h->ctl = calloc((size_t)h->L, sizeof *h->ctl);
    int ok = rc == MPI_SUCCESS && h->ctl, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c->mpi);
    if (!all) {
        free(h->ctl);
        h->ctl = NULL;
        if (rc == MPI_SUCCESS) MPI_Win_free(&h->ctl_win);
        h->ctl_win = MPI_WIN_NULL;
        h->ok = 0;
        return DDP_OK;
    }
    memset(mine, 0, sizeof *mine);
    for (int r = 0; r < h->L; r++) {
        MPI_Aint sz;
        int disp_unit;
        void *b = NULL;
        MPI_Win_shared_query(h->ctl_win, r, &sz, &disp_unit, &b);
        h->ctl[r] = b;
    }
    MPI_Barrier(c->mpi); /* every control block is zeroed before anyone uses it */
    return DDP_OK;
}

static void shm_fini_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    mpi_shm_t *h = m->shm;
    if (!h) return;
    while (h->regions) {
        shm_region_t *reg = h->regions;
        h->regions = reg->next;
        region_free_(reg);
    }
    if (h->ctl_win != MPI_WIN_NULL) MPI_Win_free(&h->ctl_win);
    if (h->cross != MPI_COMM_NULL) MPI_Comm_free(&h->cross);
    free(h->owner);
    free(h->ctl);
    free(h);
    m->shm = NULL;
}

const mpi_algo_t mpi_algo_shm = {
    .name = "shm",
    .init = shm_init_,
    .fini = shm_fini_,
    .usable = shm_usable_,
    .start = shm_start_,
    .progress = shm_progress_,
    .release = shm_release_,
};

/* The hierarchical algorithm: the same machinery, with the slices' rings
 * between the nodes (SHM_CROSS); its state is shared memory's. */
static ddp_status_t hier_none_(comm_t *c)
{
    (void)c;
    return DDP_OK;
}

static void hier_fini_(comm_t *c)
{
    (void)c;
}

const mpi_algo_t mpi_algo_hier = {
    .name = "hier",
    .init = hier_none_,
    .fini = hier_fini_,
    .usable = hier_usable_,
    .start = shm_start_,
    .progress = shm_progress_,
    .release = shm_release_,
};
