/* comm_mpi.c -- the MPI comm backend (host memory).
 *
 * All-reduces are driven by a small progress engine that runs inside comm
 * calls (progress, test, wait, the blocking collectives); nothing runs in
 * the background.  Three algorithms (comm_mpi_set_algorithm):
 *
 * Shared memory ("auto", for a slice of comm_mem_alloc memory when every
 * rank is on one node).  The gradient buffer is an MPI_Win_allocate_shared
 * window, so every rank can read every other rank's buffer.  The slice is
 * split into W blocks; rank r
 *   0. publishes "my input for all-reduce k is ready" (a counter in its
 *      control block, with a descriptor of the slice);
 *   1. once every rank's input is ready, sums block r straight from all W
 *      buffers, in rank order 0, 1, ..., W-1, into its own buffer, and
 *      publishes "block r of k is summed";
 *   2. copies every other block q from rank q's buffer once q has summed
 *      it, and publishes "I have copied k";
 *   3. completes once every rank has copied, i.e. nobody reads its buffer
 *      any more and the caller may write it again.
 * No payload goes through a staging buffer: per rank the sum reads W blocks
 * of N/W bytes and writes one, and the copies move N (W-1)/W bytes -- less
 * memory traffic than message passing (which first copies what it receives
 * into a receive buffer), and no system calls or page pinning; about twice
 * as fast on our 2-core machines (bench/README.md).  Every step only needs
 * the other ranks' counters, so a progress call does all the work that is
 * ready and never waits.
 *
 * Ring ("auto" for every other buffer and for several nodes, or "ring"): a
 * ring reduce-scatter followed by a ring allgather over MPI_Isend/MPI_Irecv.
 * The buffer is cut into slices of W pieces (a piece at most `piece` bytes,
 * 4 MB); up to `depth` slices of one all-reduce are in flight, so no message
 * is larger than a piece.  Each slice is an independent ring:
 *
 *   reduce-scatter step s = 0..W-2: rank r sends block (r-s) mod W to r+1,
 *     receives block (r-s-1) mod W from r-1 and adds it to its own copy;
 *     afterwards rank r holds the complete sum of block (r+1) mod W;
 *   allgather step s = 0..W-2: rank r sends block (r+1-s) mod W to r+1 and
 *     receives block (r-s) mod W from r-1 into place.
 *
 * Messages are matched by tag = (all-reduce number mod N) * MAXDEPTH + slot:
 * slice k uses slot k mod depth and starts only after slice k-depth has
 * finished on this rank, so each (sender, tag) stream is posted in the same
 * order on both sides.  All ranks start all-reduces in the same order (the
 * comm.h contract), so all-reduce numbers agree.
 *
 * Why every rank ends with the same bits (both algorithms): the sum of each
 * block is computed exactly once, on one rank, in an order fixed by W and
 * the partition (shared memory: ranks 0..W-1; ring: b, b+1, ..., b-1); the
 * other ranks only copy those bytes.  No rank computes its own version of
 * another rank's result, so the results cannot differ, whatever the
 * floating-point behaviour, and a rerun gives the same bits.
 *
 * 16-bit payloads: the ring moves 16 bits and does each addition in float32,
 * rounding back after each (W-1 roundings); the shared-memory sum adds all W
 * values in float32 and rounds once.
 *
 * "mpi": MPI_Iallreduce in pieces of at most COMM_MPI_CHUNK bytes (Open MPI
 * 4.1's default all-reduce collapses above about 32 MB, DESIGN.md), with
 * user-defined operators for the 16-bit sums.  Kept for comparison.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "half.h"

#define COMM_MPI_CHUNK ((size_t)8 << 20) /* "mpi": largest MPI_Iallreduce */
#define RING_PIECE     ((size_t)4 << 20) /* default piece (bytes per message) */
#define RING_DEPTH     2                 /* default slices in flight */
#define RING_MAXDEPTH  16
#define SCRATCH_SPARES 4
#define SHM_SLOTS      64   /* shared-memory all-reduces in flight at most */
#define SHM_CHUNK      1024 /* elements summed per pass (stays in L1) */

typedef enum algo { ALGO_AUTO, ALGO_RING, ALGO_MPI, ALGO_SHM } algo_t;

/* A buffer from mem_alloc that the ranks of the node share. */
typedef struct shm_region {
    struct shm_region *next;
    int id; /* allocation number (the same on every rank) */
    MPI_Win win;
    size_t bytes;
    char **base; /* [W]: every rank's segment, mapped here */
} shm_region_t;

/* What a rank says about its shared-memory all-reduce number k. */
typedef struct shm_desc {
    uint64_t off, count;
    int32_t region, type;
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

/* One slice in flight (ring). */
typedef struct slot {
    int active;
    size_t slice; /* slice index */
    int step;     /* 0 .. 2(W-1)-1 */
    size_t off;   /* first element of the slice */
    size_t len;   /* elements in the slice */
} slot_t;

struct comm_req {
    struct comm_req *next, *prev; /* in-flight list, oldest first */
    algo_t algo;
    comm_desc_t desc;
    uint64_t seq;
    int done;
    ddp_status_t err; /* sticky failure */
    /* ring */
    char *buf;
    size_t count, esz;
    comm_dtype_t type;
    size_t nslices, next_slice, slices_done;
    size_t piece; /* elements per piece */
    int depth, tagbase;
    char *tmp; /* depth * piece * esz bytes (reduce-scatter receive) */
    size_t tmp_bytes;
    slot_t slot[RING_MAXDEPTH];
    MPI_Request mr[2 * RING_MAXDEPTH]; /* slot j: [2j] receive, [2j+1] send */
    /* mpi */
    int n;
    MPI_Request *r;
    /* shm */
    shm_region_t *region;
    size_t off; /* byte offset of buf in the region */
    uint64_t k; /* shared-memory all-reduce number */
    int phase;  /* 0 sum own block, 1 copy the others, 2 wait for all copies */
    int ngot;
    unsigned char *got; /* [W]: block of rank q copied */
    /* iallreduce_apply */
    int has_apply;
    int applied; /* fn has run (or is run block by block: fused) */
    int fused;   /* shared memory: owners apply their block, others copy the extras */
    comm_apply_t apply;
    shm_region_t *xregion[COMM_APPLY_MAX];
    size_t xoff[COMM_APPLY_MAX]; /* byte offset of extra[i] in its region */
};

typedef struct mpi_impl {
    MPI_Datatype half_t; /* 2 contiguous bytes */
    MPI_Op op_bf16, op_fp16;
    algo_t algo;
    size_t piece_bytes;
    int depth;
    int tag_slices; /* distinct all-reduce numbers in the tag space */
    uint64_t nallreduce;
    comm_req_t *head, *tail;
    char *spare[SCRATCH_SPARES]; /* scratch buffers kept for reuse */
    size_t spare_bytes[SCRATCH_SPARES];
    /* shared memory (one node, W > 1) */
    int oversubscribed; /* more ranks on this node than cores: yield while waiting */
    int shm_ok;
    MPI_Win ctl_win;
    shm_ctl_t **ctl; /* [W] */
    shm_region_t *regions;
    int nregions;
    uint64_t shm_started, shm_reduced, shm_copied, shm_completed;
} mpi_impl_t;

/* ---- reduction kernels ------------------------------------------------- */

/* The sums are memory-bound; written with vector extensions (GCC, Clang)
 * because -O2 does not vectorize plain loops.  Lane i of a vector holds
 * element i, so the result is the same as the scalar loop's. */
typedef float f32x8_t __attribute__((vector_size(32)));
typedef double f64x4_t __attribute__((vector_size(32)));
typedef int64_t i64x4_t __attribute__((vector_size(32)));

#define DEFINE_ADD_(name, T, V, L)                                                                 \
    static void name(T *restrict acc, const T *restrict in, size_t n)                              \
    {                                                                                              \
        size_t i = 0;                                                                              \
        for (; i + 2 * (L) <= n; i += 2 * (L)) {                                                   \
            V a0, a1, b0, b1;                                                                      \
            memcpy(&a0, acc + i, sizeof a0), memcpy(&a1, acc + i + (L), sizeof a1);                \
            memcpy(&b0, in + i, sizeof b0), memcpy(&b1, in + i + (L), sizeof b1);                  \
            a0 = b0 + a0, a1 = b1 + a1;                                                            \
            memcpy(acc + i, &a0, sizeof a0), memcpy(acc + i + (L), &a1, sizeof a1);                \
        }                                                                                          \
        for (; i < n; i++) acc[i] = in[i] + acc[i];                                                \
    }

DEFINE_ADD_(add_f32_, float, f32x8_t, 8)
DEFINE_ADD_(add_f64_, double, f64x4_t, 4)
DEFINE_ADD_(add_i64_, int64_t, i64x4_t, 4)

/* bfloat16 <-> float32, 8 values at a time as 4 pairs in 32-bit lanes of a
 * 16-byte vector (SSE2 has every operation used; wider generic vectors get
 * their comparisons split into scalar code): in a little-endian pair the
 * even value is the low half, the odd value the high half.  Rounding as
 * ddp_f32_to_bf16: to nearest even, NaN stays a quiet NaN.  Vectors go
 * through pointers: passing them by value may change the ABI. */
typedef float f32x4_t __attribute__((vector_size(16)));
typedef uint32_t u32x4_t __attribute__((vector_size(16)));
typedef int32_t i32x4_t __attribute__((vector_size(16)));

static inline void bf16x8_load_(f32x4_t *even, f32x4_t *odd, const uint16_t *p)
{
    u32x4_t w, e, o;
    memcpy(&w, p, sizeof w);
    e = w << 16;
    o = w & 0xffff0000u;
    memcpy(even, &e, sizeof e);
    memcpy(odd, &o, sizeof o);
}

/* f rounded to bfloat16, in the high 16 bits of each lane */
static inline u32x4_t bf16x4_round_(const f32x4_t *f)
{
    u32x4_t u;
    memcpy(&u, f, sizeof u);
    u32x4_t nan = (u32x4_t)((i32x4_t)(u & 0x7fffffffu) > 0x7f800000);
    u32x4_t rne = u + 0x7fffu + ((u >> 16) & 1u);
    return ((u | 0x00400000u) & nan) | (rne & ~nan);
}

static inline void bf16x8_store_(uint16_t *p, const f32x4_t *even, const f32x4_t *odd)
{
    u32x4_t w = (bf16x4_round_(even) >> 16) | (bf16x4_round_(odd) & 0xffff0000u);
    memcpy(p, &w, sizeof w);
}

/* IEEE binary16 <-> float32 in the same layout, branch-free (after
 * F. Giesen's half_to_float / float_to_half_fast3_rtne), exactly as
 * ddp_f16_to_f32 and ddp_f32_to_f16: round to nearest even, overflow to
 * infinity, NaN to the quiet NaN 0x7e00 (with the sign). */
static inline void f16x4_widen_(f32x4_t *f, u32x4_t h) /* h: 16 bits per lane */
{
    const f32x4_t magic = {0x1p-14f, 0x1p-14f, 0x1p-14f, 0x1p-14f}; /* 113 << 23 */
    u32x4_t o = (h & 0x7fffu) << 13, e = o & 0x0f800000u;
    u32x4_t inf = (u32x4_t)((i32x4_t)e == 0x0f800000), sub = (u32x4_t)((i32x4_t)e == 0);
    o += (127 - 15) << 23;
    o += inf & ((128 - 16) << 23);
    u32x4_t os = o + (1u << 23), r;
    f32x4_t fs;
    memcpy(&fs, &os, sizeof fs);
    fs = fs - magic; /* zero and subnormals: exact */
    memcpy(&r, &fs, sizeof r);
    o = (r & sub) | (o & ~sub);
    o |= (h & 0x8000u) << 16;
    memcpy(f, &o, sizeof o);
}

static inline u32x4_t f16x4_narrow_(const f32x4_t *f) /* 16 bits per lane */
{
    const f32x4_t half = {0.5f, 0.5f, 0.5f, 0.5f}; /* 126 << 23: subnormal rounding */
    u32x4_t u;
    memcpy(&u, f, sizeof u);
    u32x4_t sign = u & 0x80000000u;
    u ^= sign;
    i32x4_t a = (i32x4_t)u;
    u32x4_t big = (u32x4_t)(a >= (127 + 16) << 23), nan = (u32x4_t)(a > 0x7f800000);
    u32x4_t small = (u32x4_t)(a < 113 << 23);
    u32x4_t ob = (nan & 0x7e00u) | (~nan & 0x7c00u);
    f32x4_t fs;
    memcpy(&fs, &u, sizeof fs);
    fs = fs + half;
    u32x4_t os;
    memcpy(&os, &fs, sizeof os);
    os -= 126u << 23;
    u32x4_t on = (u + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    u32x4_t o = (ob & big) | (os & small & ~big) | (on & ~small & ~big);
    return o | (sign >> 16);
}

static inline void f16x8_load_(f32x4_t *even, f32x4_t *odd, const uint16_t *p)
{
    u32x4_t w;
    memcpy(&w, p, sizeof w);
    f16x4_widen_(even, w & 0xffffu);
    f16x4_widen_(odd, w >> 16);
}

static inline void f16x8_store_(uint16_t *p, const f32x4_t *even, const f32x4_t *odd)
{
    u32x4_t w = f16x4_narrow_(even) | (f16x4_narrow_(odd) << 16);
    memcpy(p, &w, sizeof w);
}

/* out = a + b; out may be a or b (each element is loaded before it is
 * stored). */
#define DEFINE_SUM3_(name, T, V, L)                                                                \
    static void name(T *out, const T *a, const T *b, size_t n)                                     \
    {                                                                                              \
        size_t i = 0;                                                                              \
        for (; i + (L) <= n; i += (L)) {                                                           \
            V x, y;                                                                                \
            memcpy(&x, a + i, sizeof x), memcpy(&y, b + i, sizeof y);                              \
            x = x + y;                                                                             \
            memcpy(out + i, &x, sizeof x);                                                         \
        }                                                                                          \
        for (; i < n; i++) out[i] = a[i] + b[i];                                                   \
    }

DEFINE_SUM3_(sum3_f32_, float, f32x8_t, 8)
DEFINE_SUM3_(sum3_f64_, double, f64x4_t, 4)
DEFINE_SUM3_(sum3_i64_, int64_t, i64x4_t, 4)

/* out = ((src[0] + src[1]) + src[2]) + ... (W >= 2 sources, in this order);
 * out may be one of the sources.  16-bit values are summed in float32 and
 * rounded once. */
#define DEFINE_SUMN_(name, T, sum3)                                                                \
    static void name(T *out, const char *const *src, int W, size_t n)                              \
    {                                                                                              \
        if (W == 2) {                                                                              \
            sum3(out, (const T *)src[0], (const T *)src[1], n);                                    \
            return;                                                                                \
        }                                                                                          \
        T acc[SHM_CHUNK];                                                                          \
        for (size_t o = 0; o < n; o += SHM_CHUNK) {                                                \
            size_t len = n - o < SHM_CHUNK ? n - o : SHM_CHUNK;                                    \
            sum3(acc, (const T *)src[0] + o, (const T *)src[1] + o, len);                          \
            for (int q = 2; q < W; q++) sum3(acc, acc, (const T *)src[q] + o, len);                \
            memcpy(out + o, acc, len * sizeof(T));                                                 \
        }                                                                                          \
    }

DEFINE_SUMN_(sumn_f32_, float, sum3_f32_)
DEFINE_SUMN_(sumn_f64_, double, sum3_f64_)
DEFINE_SUMN_(sumn_i64_, int64_t, sum3_i64_)

static void sumn_half_(comm_dtype_t t, uint16_t *out, const char *const *src, int W, size_t n)
{
    size_t i0 = 0;
    const uint16_t *s0 = (const uint16_t *)src[0], *s1 = (const uint16_t *)src[1];
    void (*load)(f32x4_t *, f32x4_t *, const uint16_t *) =
        t == COMM_BF16 ? bf16x8_load_ : f16x8_load_;
    void (*store)(uint16_t *, const f32x4_t *, const f32x4_t *) =
        t == COMM_BF16 ? bf16x8_store_ : f16x8_store_;
    if (t == COMM_BF16 && W == 2) { /* the common case, with the calls inlined */
        for (; i0 + 8 <= n; i0 += 8) {
            f32x4_t ae, ao, be, bo;
            bf16x8_load_(&ae, &ao, s0 + i0);
            bf16x8_load_(&be, &bo, s1 + i0);
            ae = ae + be, ao = ao + bo;
            bf16x8_store_(out + i0, &ae, &ao);
        }
    }
    for (; i0 + 8 <= n; i0 += 8) {
        f32x4_t ae, ao, be, bo;
        load(&ae, &ao, s0 + i0);
        for (int q = 1; q < W; q++) {
            load(&be, &bo, (const uint16_t *)src[q] + i0);
            ae = ae + be, ao = ao + bo;
        }
        store(out + i0, &ae, &ao);
    }
    float acc[SHM_CHUNK];
    for (size_t o = i0; o < n; o += SHM_CHUNK) {
        size_t len = n - o < SHM_CHUNK ? n - o : SHM_CHUNK;
        for (int q = 0; q < W; q++) {
            const uint16_t *x = (const uint16_t *)src[q] + o;
            for (size_t i = 0; i < len; i++) {
                float v = t == COMM_BF16 ? ddp_bf16_to_f32(x[i]) : ddp_f16_to_f32(x[i]);
                acc[i] = q ? acc[i] + v : v;
            }
        }
        for (size_t i = 0; i < len; i++)
            out[o + i] = t == COMM_BF16 ? ddp_f32_to_bf16(acc[i]) : ddp_f32_to_f16(acc[i]);
    }
}

static void sumn_(comm_dtype_t t, void *out, const char *const *src, int W, size_t n)
{
    switch (t) {
    case COMM_FLOAT: sumn_f32_(out, src, W, n); break;
    case COMM_DOUBLE: sumn_f64_(out, src, W, n); break;
    case COMM_INT64: sumn_i64_(out, src, W, n); break;
    case COMM_BF16:
    case COMM_FP16: sumn_half_(t, out, src, W, n); break;
    }
}

static void add_bf16_(uint16_t *restrict acc, const uint16_t *restrict in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x4_t ae, ao, be, bo;
        bf16x8_load_(&ae, &ao, in + i);
        bf16x8_load_(&be, &bo, acc + i);
        ae = ae + be, ao = ao + bo;
        bf16x8_store_(acc + i, &ae, &ao);
    }
    for (; i < n; i++) acc[i] = ddp_f32_to_bf16(ddp_bf16_to_f32(in[i]) + ddp_bf16_to_f32(acc[i]));
}

static void add_fp16_(uint16_t *restrict acc, const uint16_t *restrict in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x4_t ae, ao, be, bo;
        f16x8_load_(&ae, &ao, in + i);
        f16x8_load_(&be, &bo, acc + i);
        ae = ae + be, ao = ao + bo;
        f16x8_store_(acc + i, &ae, &ao);
    }
    for (; i < n; i++) acc[i] = ddp_f32_to_f16(ddp_f16_to_f32(in[i]) + ddp_f16_to_f32(acc[i]));
}

/* acc[0..n) = in + acc, elementwise, for type t */
static void reduce_(comm_dtype_t t, void *acc, const void *in, size_t n)
{
    switch (t) {
    case COMM_FLOAT: add_f32_(acc, in, n); break;
    case COMM_DOUBLE: add_f64_(acc, in, n); break;
    case COMM_INT64: add_i64_(acc, in, n); break;
    case COMM_BF16: add_bf16_(acc, in, n); break;
    case COMM_FP16: add_fp16_(acc, in, n); break;
    }
}

static void sum_bf16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    add_bf16_(inout, in, (size_t)*len);
}

static void sum_fp16_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    add_fp16_(inout, in, (size_t)*len);
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
    if (q->algo == ALGO_RING) scratch_put_(m, q->tmp, q->tmp_bytes);
    free(q->r);
    free(q->got);
    free(q);
}

/* ---- ring ----------------------------------------------------------------- */

/* Block b of a slice of len elements split over W ranks (sizes differ by at
 * most one element; the first len % W blocks are the longer ones). */
static void block_(size_t len, int W, int b, size_t *off, size_t *n)
{
    size_t base = len / (size_t)W, rem = len % (size_t)W, ub = (size_t)b;
    *off = ub * base + (ub < rem ? ub : rem);
    *n = base + (ub < rem ? 1 : 0);
}

static int mod_(int a, int W)
{
    return ((a % W) + W) % W;
}

/* Post the messages of slot j's current step (none for empty blocks). */
static ddp_status_t ring_post_(comm_t *c, comm_req_t *q, int j)
{
    slot_t *sl = &q->slot[j];
    int W = c->size, r = c->rank, s = sl->step;
    int left = mod_(r - 1, W), right = mod_(r + 1, W);
    int sb, rb; /* block sent, block received */
    if (s < W - 1)
        sb = mod_(r - s, W), rb = mod_(r - s - 1, W);
    else
        sb = mod_(r + 1 - (s - (W - 1)), W), rb = mod_(r - (s - (W - 1)), W);
    size_t so, sn, ro, rn;
    block_(sl->len, W, sb, &so, &sn);
    block_(sl->len, W, rb, &ro, &rn);
    char *base = q->buf + sl->off * q->esz;
    int tag = q->tagbase + j, rc;
    q->mr[2 * j] = q->mr[2 * j + 1] = MPI_REQUEST_NULL;
    if (rn) {
        void *dst = s < W - 1 ? q->tmp + (size_t)j * q->piece * q->esz : base + ro * q->esz;
        rc = MPI_Irecv(dst, (int)(rn * q->esz), MPI_BYTE, left, tag, c->mpi, &q->mr[2 * j]);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Irecv", &q->desc, q->seq);
    }
    if (sn) {
        rc = MPI_Isend(base + so * q->esz, (int)(sn * q->esz), MPI_BYTE, right, tag, c->mpi,
                       &q->mr[2 * j + 1]);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Isend", &q->desc, q->seq);
    }
    return DDP_OK;
}

/* Start slot j's next slice: slot j runs slices j, j + depth, j + 2 depth, ...
 * in that order on every rank, which keeps each tag's message stream in the
 * same order on sender and receiver. */
static ddp_status_t ring_start_slice_(comm_t *c, comm_req_t *q, int j, int first)
{
    slot_t *sl = &q->slot[j];
    size_t k = first ? (size_t)j : sl->slice + (size_t)q->depth;
    if (k >= q->nslices) {
        sl->active = 0;
        return DDP_OK;
    }
    size_t per = q->piece * (size_t)c->size;
    sl->active = 1;
    sl->slice = k;
    sl->step = 0;
    sl->off = k * per;
    sl->len = q->count - sl->off < per ? q->count - sl->off : per;
    return ring_post_(c, q, j);
}

/* Slot j's messages of the current step have completed: reduce (during the
 * reduce-scatter), then post the next step or finish the slice; repeat
 * while steps complete at once (empty blocks post nothing). */
static ddp_status_t ring_advance_(comm_t *c, comm_req_t *q, int j)
{
    slot_t *sl = &q->slot[j];
    int W = c->size, r = c->rank;
    for (;;) {
        if (q->mr[2 * j] != MPI_REQUEST_NULL || q->mr[2 * j + 1] != MPI_REQUEST_NULL) return DDP_OK;
        if (!sl->active) return DDP_OK;
        if (sl->step < W - 1) {
            size_t ro, rn;
            block_(sl->len, W, mod_(r - sl->step - 1, W), &ro, &rn);
            reduce_(q->type, q->buf + (sl->off + ro) * q->esz,
                    q->tmp + (size_t)j * q->piece * q->esz, rn);
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
        int rc = MPI_Testsome(n, q->mr, &outcount, idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Testsome", &q->desc, q->seq);
        if (outcount == MPI_UNDEFINED || outcount == 0) return DDP_OK; /* nothing more now */
    }
}

static ddp_status_t ring_start_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    size_t per = m->piece_bytes / q->esz;
    if (per == 0) per = 1;
    size_t W = (size_t)c->size;
    /* small buffers: pieces just big enough for one slice */
    size_t need = (q->count + W - 1) / W;
    q->piece = need < per ? (need ? need : 1) : per;
    q->nslices = (q->count + q->piece * W - 1) / (q->piece * W);
    q->depth = m->depth < (int)q->nslices ? m->depth : (int)q->nslices;
    if (q->depth < 1) q->depth = 1;
    q->tagbase = (int)(m->nallreduce++ % (uint64_t)m->tag_slices) * RING_MAXDEPTH;
    for (int j = 0; j < 2 * RING_MAXDEPTH; j++) q->mr[j] = MPI_REQUEST_NULL;
    if (c->size == 1 || q->count == 0) {
        q->done = 1;
        return DDP_OK;
    }
    q->tmp_bytes = (size_t)q->depth * q->piece * q->esz;
    q->tmp = scratch_get_(m, q->tmp_bytes);
    if (!q->tmp)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory starting all-reduce %s %d (%zu bytes)",
                        q->desc.what, q->desc.index, q->tmp_bytes);
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
    case COMM_BF16: *dt = m->half_t, *op = m->op_bf16; break;
    case COMM_FP16: *dt = m->half_t, *op = m->op_fp16; break;
    }
}

static ddp_status_t nbc_start_(comm_t *c, comm_req_t *q)
{
    size_t per = COMM_MPI_CHUNK / q->esz;
    int n = q->count == 0 ? 0 : (int)((q->count + per - 1) / per);
    q->r = malloc((size_t)(n ? n : 1) * sizeof(MPI_Request));
    if (!q->r) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    MPI_Datatype dt = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    mpi_type_op_(c, q->type, &dt, &op);
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * per, len = q->count - off < per ? q->count - off : per;
        int rc =
            MPI_Iallreduce(MPI_IN_PLACE, q->buf + off * q->esz, (int)len, dt, op, c->mpi, &q->r[i]);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Iallreduce", &q->desc, q->seq);
        q->n = i + 1;
    }
    if (n == 0) q->done = 1;
    return DDP_OK;
}

static ddp_status_t nbc_progress_(comm_t *c, comm_req_t *q)
{
    int flag = 1;
    int rc = MPI_Testall(q->n, q->r, &flag, MPI_STATUSES_IGNORE);
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
    for (shm_region_t *g = m->regions; g; g = g->next) {
        const char *b = g->base[c->rank];
        if (p >= b && p <= b + g->bytes && bytes <= (size_t)(b + g->bytes - p)) return g;
    }
    return NULL;
}

/* Advance shared-memory all-reduce q as far as it goes without waiting.
 * Every rank sums its own block of the slice from all ranks' buffers in rank
 * order (phase 0), copies the other blocks from their owners (phase 1), and
 * completes once every rank has copied, i.e. nobody reads its buffer any
 * more (phase 2).  Each phase runs in all-reduce order on every rank. */
static ddp_status_t shm_progress_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    const int W = c->size, me = c->rank;
    size_t bo, bn;
    if (q->phase == 0) {
        if (m->shm_reduced != q->k - 1) return DDP_OK;
        for (int r = 0; r < W; r++)
            if (atomic_load_explicit(&m->ctl[r]->arrived, memory_order_acquire) < q->k)
                return DDP_OK;
        const shm_desc_t *mine = &m->ctl[me]->desc[q->k % SHM_SLOTS];
        for (int r = 0; r < W; r++) {
            const shm_desc_t *d = &m->ctl[r]->desc[q->k % SHM_SLOTS];
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
        block_(q->count, W, me, &bo, &bn);
        if (bn) {
            const char *src[W];
            for (int r = 0; r < W; r++) src[r] = q->region->base[r] + q->off + bo * q->esz;
            sumn_(q->type, q->buf + bo * q->esz, src, W, bn);
            /* the owner of the block updates it; the others copy the result */
            if (q->fused) q->apply.fn(q->apply.arg, bo, bn);
        }
        atomic_store_explicit(&m->ctl[me]->reduced, q->k, memory_order_release);
        m->shm_reduced = q->k;
        q->phase = 1;
    }
    if (q->phase == 1) {
        if (m->shm_copied != q->k - 1) return DDP_OK;
        for (int r = 0; r < W; r++) {
            if (r == me || q->got[r]) continue;
            if (atomic_load_explicit(&m->ctl[r]->reduced, memory_order_acquire) < q->k) continue;
            block_(q->count, W, r, &bo, &bn);
            if (q->fused)
                for (int i = 0; i < q->apply.nextra; i++)
                    memcpy(q->apply.extra[i] + bo, q->xregion[i]->base[r] + q->xoff[i] + bo * 4,
                           bn * 4);
            else
                memcpy(q->buf + bo * q->esz, q->region->base[r] + q->off + bo * q->esz,
                       bn * q->esz);
            q->got[r] = 1;
            q->ngot++;
        }
        if (q->ngot < W - 1) return DDP_OK;
        atomic_store_explicit(&m->ctl[me]->copied, q->k, memory_order_release);
        m->shm_copied = q->k;
        q->phase = 2;
    }
    for (int r = 0; r < W; r++)
        if (atomic_load_explicit(&m->ctl[r]->copied, memory_order_acquire) < q->k) return DDP_OK;
    q->done = 1;
    m->shm_completed = q->k;
    return DDP_OK;
}

static ddp_status_t mpi_progress_(comm_t *c);

static ddp_status_t shm_start_(comm_t *c, comm_req_t *q)
{
    mpi_impl_t *m = c->impl;
    q->got = calloc((size_t)c->size, 1);
    if (!q->got) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    q->k = ++m->shm_started;
    /* the descriptor slot of all-reduce k - SHM_SLOTS must be free */
    for (long spin = 0; q->k - m->shm_completed > SHM_SLOTS; spin++) {
        DDP_TRY(mpi_progress_(c));
        if (m->oversubscribed && spin % 64 == 63) sched_yield();
    }
    shm_desc_t *d = &m->ctl[c->rank]->desc[q->k % SHM_SLOTS];
    d->off = q->off;
    d->count = q->count;
    d->region = q->region->id;
    d->type = (int32_t)q->type;
    atomic_store_explicit(&m->ctl[c->rank]->arrived, q->k, memory_order_release);
    return DDP_OK;
}

/* ---- the ops ---------------------------------------------------------------- */

static ddp_status_t req_progress_(comm_t *c, comm_req_t *q)
{
    if (q->err) return q->err;
    if (!q->done) {
        ddp_status_t s = q->algo == ALGO_RING  ? ring_progress_(c, q)
                         : q->algo == ALGO_SHM ? shm_progress_(c, q)
                                               : nbc_progress_(c, q);
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
static ddp_status_t start_(comm_t *c, void *buf, size_t count, comm_dtype_t t,
                           const comm_apply_t *a, const comm_desc_t *d, comm_req_t **req)
{
    mpi_impl_t *m = c->impl;
    *req = NULL;
    comm_req_t *q = calloc(1, sizeof *q);
    if (!q) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting an all-reduce");
    size_t esz = comm_dtype_size(t);
    comm_note_start(c, d, count * esz);
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
            q->xregion[i] = shm_find_(c, a->extra[i], count * 4);
            q->fused = q->xregion[i] != NULL;
            if (q->fused) q->xoff[i] = (size_t)((char *)a->extra[i] - q->xregion[i]->base[c->rank]);
        }
        q->applied = q->fused;
    }
    ddp_status_t s = q->algo == ALGO_RING  ? ring_start_(c, q)
                     : q->algo == ALGO_SHM ? shm_start_(c, q)
                                           : nbc_start_(c, q);
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
    return start_(c, buf, count, t, NULL, d, req);
}

static ddp_status_t mpi_iallreduce_apply_(comm_t *c, float *buf, size_t count,
                                          const comm_apply_t *a, const comm_desc_t *d,
                                          comm_req_t **req)
{
    return start_(c, buf, count, COMM_FLOAT, a, d, req);
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
    ddp_status_t s = DDP_OK;
    for (long spin = 0; !req->done && s == DDP_OK; spin++) {
        s = mpi_progress_(c);
        if (req->err) s = req->err;
        /* with more ranks than cores, let the rank we wait for run */
        if (m->oversubscribed && spin % 64 == 63) sched_yield();
    }
    unlink_(m, req);
    req_free_(m, req);
    return s;
}

static ddp_status_t mpi_bcast_(comm_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d)
{
    DDP_TRY(mpi_progress_(c));
    comm_note_start(c, d, 0);
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += COMM_MPI_CHUNK) {
        size_t len = bytes - off < COMM_MPI_CHUNK ? bytes - off : COMM_MPI_CHUNK;
        int rc = MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, c->mpi);
        if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Bcast", &c->last, c->seq);
        if (bytes == 0) break;
    }
    return DDP_OK;
}

static ddp_status_t mpi_allgather_(comm_t *c, const void *send, void *recv, size_t bytes,
                                   const comm_desc_t *d)
{
    DDP_TRY(mpi_progress_(c));
    comm_note_start(c, d, 0);
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Allgather", &c->last, c->seq);
    return DDP_OK;
}

static ddp_status_t mpi_barrier_(comm_t *c)
{
    DDP_TRY(mpi_progress_(c));
    comm_desc_t d = {"barrier", -1, -1};
    comm_note_start(c, &d, 0);
    int rc = MPI_Barrier(c->mpi);
    if (rc != MPI_SUCCESS) return mpi_err_(rc, "MPI_Barrier", &d, c->seq);
    return DDP_OK;
}

/* Shared memory on one node (when the ranks share it), plain memory
 * otherwise; see comm.h. */
static ddp_status_t mpi_mem_alloc_(comm_t *c, size_t bytes, void **p)
{
    mpi_impl_t *m = c->impl;
    *p = NULL;
    if (!m->shm_ok) return comm_mem_alloc_host(bytes, p);
    DDP_TRY(mpi_progress_(c));
    shm_region_t *g = calloc(1, sizeof *g);
    char **base = calloc((size_t)c->size, sizeof *base);
    if (!g || !base) {
        free(g);
        free(base);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory allocating the gradient buffer");
    }
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    char *mine = NULL;
    /* 64 bytes more, so every rank's buffer can start on a cache line */
    int rc = MPI_Win_allocate_shared((MPI_Aint)(bytes + 64), 1, info, c->mpi, &mine, &g->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        free(base);
        free(g);
        return ddp_fail(DDP_ERR_NOMEM,
                        "cannot allocate %zu bytes of node-shared memory for the gradient "
                        "buffer (MPI_Win_allocate_shared: %s); check the free space in /dev/shm "
                        "and in Open MPI's session directory",
                        bytes, msg);
    }
    for (int r = 0; r < c->size; r++) {
        MPI_Aint sz;
        int du;
        char *b = NULL;
        MPI_Win_shared_query(g->win, r, &sz, &du, &b);
        base[r] = b + (64 - (uintptr_t)b % 64) % 64;
    }
    mine = base[c->rank];
    memset(mine, 0, bytes);
    g->id = m->nregions++;
    g->bytes = bytes;
    g->base = base;
    g->next = m->regions;
    m->regions = g;
    *p = mine;
    return DDP_OK;
}

static void region_free_(comm_t *c, shm_region_t *g)
{
    MPI_Win_free(&g->win);
    free(g->base);
    free(g);
}

static void mpi_mem_free_(comm_t *c, void *p)
{
    mpi_impl_t *m = c->impl;
    if (!p) return;
    for (shm_region_t **pg = &m->regions; *pg; pg = &(*pg)->next) {
        if ((*pg)->base[c->rank] == p) {
            shm_region_t *g = *pg;
            *pg = g->next;
            region_free_(c, g);
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
            MPI_Request *rs = q->algo == ALGO_RING ? q->mr : q->r;
            int n = q->algo == ALGO_RING ? 2 * RING_MAXDEPTH : q->n;
            for (int i = 0; i < n; i++)
                if (rs[i] != MPI_REQUEST_NULL) MPI_Request_free(&rs[i]);
            unlink_(m, q);
            req_free_(m, q);
        }
        for (int i = 0; i < SCRATCH_SPARES; i++) free(m->spare[i]);
        while (m->regions) {
            shm_region_t *g = m->regions;
            m->regions = g->next;
            region_free_(c, g);
        }
        if (m->ctl_win != MPI_WIN_NULL) MPI_Win_free(&m->ctl_win);
        free(m->ctl);
        MPI_Op_free(&m->op_bf16);
        MPI_Op_free(&m->op_fp16);
        MPI_Type_free(&m->half_t);
        free(m);
    }
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
}

static const comm_ops_t comm_mpi_ops = {
    .name = "mpi",
    .iallreduce = mpi_iallreduce_,
    .iallreduce_apply = mpi_iallreduce_apply_,
    .test = mpi_test_,
    .wait = mpi_wait_,
    .progress = mpi_progress_,
    .bcast = mpi_bcast_,
    .allgather = mpi_allgather_,
    .barrier = mpi_barrier_,
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
    if (MPI_Comm_dup(world, &c->mpi) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_dup failed");
    /* errors come back as codes so they are reported with context */
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);

    MPI_Comm node;
    MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    int leader = c->local_rank == 0;
    MPI_Allreduce(&leader, &c->nnodes, 1, MPI_INT, MPI_SUM, c->mpi);
    MPI_Comm_free(&node);

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
    m->tag_slices = tag_ub / RING_MAXDEPTH; /* >= 2047: the standard's minimum tag bound */
    MPI_Type_contiguous(2, MPI_BYTE, &m->half_t);
    MPI_Type_commit(&m->half_t);
    MPI_Op_create(sum_bf16_, 1, &m->op_bf16);
    MPI_Op_create(sum_fp16_, 1, &m->op_fp16);
    c->impl = m;
    c->ops = &comm_mpi_ops;

    /* shared-memory all-reduces: every rank on one node */
    m->ctl_win = MPI_WIN_NULL;
    if (c->nnodes == 1 && c->size > 1) {
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
            return DDP_OK;
        }
        memset(mine, 0, sizeof *mine);
        for (int r = 0; r < c->size; r++) {
            MPI_Aint sz;
            int du;
            void *b = NULL;
            MPI_Win_shared_query(m->ctl_win, r, &sz, &du, &b);
            m->ctl[r] = b;
        }
        MPI_Barrier(c->mpi); /* every control block is zeroed before anyone uses it */
        m->shm_ok = 1;
    }
    return DDP_OK;
}
