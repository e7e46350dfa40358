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
    char **base; /* [W]: every rank's segment, mapped here */
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
    int ok; /* node-shared memory in use (one node, W > 1, room) */
    MPI_Win ctl_win;
    shm_ctl_t **ctl; /* [W]: every rank's control block, mapped here */
    shm_region_t *regions;
    int nregions;
    uint64_t started, reduced, copied, completed; /* this rank's counters */
};

/* Where a shared-memory collective stands on this rank (shm_progress_). */
typedef enum shm_phase {
    SHM_OWN_BLOCK,   /* waiting for every rank's input, then summing this rank's block */
    SHM_COPY_OTHERS, /* copying the other blocks as their owners finish them */
    SHM_WAIT_COPIES  /* waiting until no rank reads this rank's buffer any more */
} shm_phase_t;

typedef struct shm_req {
    shm_region_t *region;
    size_t off;   /* byte offset of buf in the region */
    uint64_t seq; /* shared-memory collective number (1, 2, ...; same on every rank) */
    shm_phase_t phase;
    int ncopied;
    unsigned char *copied_from; /* [W]: rank r's block copied */
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
        if ((*pg)->base[c->rank] == p) {
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
        const char *b = reg->base[c->rank];
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
    const int W = c->size, me = c->rank;
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
                            "(operation %d), rank %d passes %llu of type %d at byte %llu of "
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

/* Advance q as far as it goes without waiting: this rank's own block
 * (SHM_OWN_BLOCK: summed from every rank's buffer in rank order, for an
 * all-reduce or a reduce-scatter; an all-gather's is final already), the
 * other blocks copied from their owners (SHM_COPY_OTHERS; none for a
 * reduce-scatter), then completion once every rank has copied
 * (SHM_WAIT_COPIES). */
static ddp_status_t shm_progress_(comm_t *c, comm_req_t *q)
{
    mpi_shm_t *h = ((mpi_impl_t *)c->impl)->shm;
    shm_req_t *sq = q->state;
    const int W = c->size, me = c->rank;
    size_t blk_off, blk_len;
    if (sq->phase == SHM_OWN_BLOCK) {
        if (h->reduced != sq->seq - 1) return DDP_OK;
        int ready;
        DDP_TRY(check_descs_(c, q, sq, &ready));
        if (!ready) return DDP_OK;
        comm_block(q->count, W, me, &blk_off, &blk_len);
        if (blk_len && q->op != COLL_ALLGATHER) {
            const char *src[W];
            for (int r = 0; r < W; r++)
                src[r] = sq->region->base[r] + sq->off + blk_off * q->esz;
            sum_sources(q->type, q->buf + blk_off * q->esz, src, W, blk_len);
            /* the owner of the block updates it; the others copy the result */
            if (sq->fused) q->apply.fn(q->apply.arg, blk_off, blk_len);
        }
        atomic_store_explicit(&h->ctl[me]->reduced, sq->seq, memory_order_release);
        h->reduced = sq->seq;
        sq->phase = SHM_COPY_OTHERS;
    }
    if (sq->phase == SHM_COPY_OTHERS) {
        if (h->copied != sq->seq - 1) return DDP_OK;
        for (int r = 0; r < W && q->op != COLL_REDUCE_SCATTER; r++) {
            if (r == me || sq->copied_from[r]) continue;
            if (atomic_load_explicit(&h->ctl[r]->reduced, memory_order_acquire) < sq->seq)
                continue;
            comm_block(q->count, W, r, &blk_off, &blk_len);
            if (sq->fused)
                for (int i = 0; i < q->apply.nextra; i++)
                    memcpy(q->apply.extra[i] + blk_off,
                           sq->extra_region[i]->base[r] + sq->extra_off[i] + blk_off * 4,
                           blk_len * 4);
            else
                memcpy(q->buf + blk_off * q->esz,
                       sq->region->base[r] + sq->off + blk_off * q->esz, blk_len * q->esz);
            sq->copied_from[r] = 1;
            sq->ncopied++;
        }
        if (q->op != COLL_REDUCE_SCATTER && sq->ncopied < W - 1) return DDP_OK;
        atomic_store_explicit(&h->ctl[me]->copied, sq->seq, memory_order_release);
        h->copied = sq->seq;
        sq->phase = SHM_WAIT_COPIES;
    }
    for (int r = 0; r < W; r++)
        if (atomic_load_explicit(&h->ctl[r]->copied, memory_order_acquire) < sq->seq)
            return DDP_OK;
    q->done = 1;
    h->completed = sq->seq;
    return DDP_OK;
}

static int shm_usable_(comm_t *c, const comm_req_t *q)
{
    return mpi_shm_available(c) && q->count > 0 && shm_find_(c, q->buf, q->count * q->esz);
}

static ddp_status_t shm_start_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    mpi_shm_t *h = m->shm;
    shm_req_t *sq = calloc(1, sizeof *sq);
    if (sq) sq->copied_from = calloc((size_t)c->size, 1);
    if (!sq || !sq->copied_from) {
        if (sq) free(sq);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory starting a collective");
    }
    q->state = sq;
    sq->region = shm_find_(c, q->buf, q->count * q->esz);
    sq->off = (size_t)(q->buf - sq->region->base[c->rank]);
    /* fused: an all-reduce whose every extra buffer is shared too */
    if (q->has_apply && q->op == COLL_ALLREDUCE) {
        sq->fused = q->apply.nextra >= 1 && q->apply.nextra <= COMM_APPLY_MAX;
        for (int i = 0; sq->fused && i < q->apply.nextra; i++) {
            sq->extra_region[i] = shm_find_(c, q->apply.extra[i], q->count * 4);
            sq->fused = sq->extra_region[i] != NULL;
            if (sq->fused)
                sq->extra_off[i] =
                    (size_t)((char *)q->apply.extra[i] - sq->extra_region[i]->base[c->rank]);
        }
        q->applied = sq->fused;
    }
    sq->seq = ++h->started;
    /* the descriptor slot of collective k - SHM_SLOTS must be free */
    for (long spin = 0; sq->seq - h->completed > SHM_SLOTS; spin++) {
        DDP_TRY(comm_mpi_progress(c));
        if (m->oversubscribed && spin % 64 == 63) sched_yield();
    }
    shm_desc_t *d = &h->ctl[c->rank]->desc[sq->seq % SHM_SLOTS];
    d->off = sq->off;
    d->count = q->count;
    d->region = sq->region->id;
    d->type = (int32_t)q->type;
    d->op = (int32_t)q->op;
    atomic_store_explicit(&h->ctl[c->rank]->arrived, sq->seq, memory_order_release);
    return DDP_OK;
}

static void shm_release_(comm_t *c, comm_req_t *q)
{
    shm_req_t *sq = q->state;
    if (!sq) return;
    free(sq->copied_from);
    free(sq);
    q->state = NULL;
}

/* The control blocks, when every rank is on one node and /dev/shm has room
 * for them; without them, collectives take the ring (correct, a little
 * slower). */
static ddp_status_t shm_init_(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    mpi_shm_t *h = calloc(1, sizeof *h);
    if (!h) return ddp_fail(DDP_ERR_NOMEM, "out of memory creating the communicator");
    m->shm = h;
    h->ctl_win = MPI_WIN_NULL;
    h->ok = 1; /* for shm_room_ */
    if (c->nnodes != 1 || c->size == 1 ||
        !shm_room_(c, shm_need_(c, sizeof(shm_ctl_t), 1), "the all-reduce control blocks")) {
        h->ok = 0;
        return DDP_OK;
    }
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    shm_ctl_t *mine = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)sizeof(shm_ctl_t), 64, info, c->mpi, &mine,
                                     &h->ctl_win);
    MPI_Info_free(&info);
    if (rc == MPI_SUCCESS) h->ctl = calloc((size_t)c->size, sizeof *h->ctl);
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
    for (int r = 0; r < c->size; r++) {
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
