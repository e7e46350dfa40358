/* comm_cases.h -- what the comm backend tests share (check_comm.c for
 * the MPI backend, check_comm_nccl.c for the NCCL backend): the dtypes, the
 * per-rank integer values whose sums are exact in every dtype, values whose
 * sums depend on the order of addition, and the check that every rank holds
 * the same bytes.  Host buffers only. */
#ifndef DDP_COMM_CASES_H
#define DDP_COMM_CASES_H

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

#include "comm.h"
#include "half.h"

static const comm_dtype_t dtypes[] = {COMM_FLOAT, COMM_DOUBLE, COMM_BF16, COMM_FP16, COMM_INT64};
static const char *dtype_names[] = {"float", "double", "bf16", "fp16", "int64"};
enum { NDTYPE = sizeof dtypes / sizeof *dtypes };

/* Small integer value of element i on rank r: every partial sum of these is
 * exact in every dtype (|sum| <= 4 * 16 < 256 for bf16). */
static inline int ival_(size_t i, int r)
{
    return (int)((i * 7 + (size_t)r * 13) % 33) - 16;
}

static inline void fill_int_(void *buf, comm_dtype_t t, size_t n, int r)
{
    for (size_t i = 0; i < n; i++) {
        int v = ival_(i, r);
        switch (t) {
        case COMM_FLOAT: ((float *)buf)[i] = (float)v; break;
        case COMM_DOUBLE: ((double *)buf)[i] = v; break;
        case COMM_INT64: ((int64_t *)buf)[i] = v; break;
        case COMM_BF16: ((uint16_t *)buf)[i] = ddp_f32_to_bf16((float)v); break;
        case COMM_FP16: ((uint16_t *)buf)[i] = ddp_f32_to_f16((float)v); break;
        }
    }
}

static inline double get_(const void *buf, comm_dtype_t t, size_t i)
{
    switch (t) {
    case COMM_FLOAT: return ((const float *)buf)[i];
    case COMM_DOUBLE: return ((const double *)buf)[i];
    case COMM_INT64: return (double)((const int64_t *)buf)[i];
    case COMM_BF16: return ddp_bf16_to_f32(((const uint16_t *)buf)[i]);
    case COMM_FP16: return ddp_f16_to_f32(((const uint16_t *)buf)[i]);
    }
    return 0;
}

/* Returns the first wrong index, or n when all elements are the exact sum. */
static inline size_t check_int_(const void *buf, comm_dtype_t t, size_t n, int W)
{
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < W; r++) want += ival_(i, r);
        if (get_(buf, t, i) != want) return i;
    }
    return n;
}

static inline uint64_t fnv1a_(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* 1 when `bytes` bytes at p hash the same on every rank. */
static inline int same_on_all_ranks_(const void *p, size_t bytes)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t h = fnv1a_(p, bytes), *all = malloc((size_t)size * sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int same = 1;
    for (int r = 0; r < size; r++) same &= all[r] == h;
    free(all);
    return same;
}

/* Pseudo-random value in [-1, 1) differing per rank and element: sums of
 * these depend on the order of addition. */
static inline double rval_(size_t i, int r)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)r + 1) * 0xC2B2AE3D27D4EB4Full;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (double)(x >> 11) / (double)(1ull << 52) - 1.0;
}

static inline void fill_rand_(void *buf, comm_dtype_t t, size_t n, int r, double scale)
{
    for (size_t i = 0; i < n; i++) {
        double v = rval_(i, r) * scale;
        switch (t) {
        case COMM_FLOAT: ((float *)buf)[i] = (float)v; break;
        case COMM_DOUBLE: ((double *)buf)[i] = v; break;
        case COMM_INT64: ((int64_t *)buf)[i] = (int64_t)(v * 1e6); break;
        case COMM_BF16: ((uint16_t *)buf)[i] = ddp_f32_to_bf16((float)v); break;
        case COMM_FP16: ((uint16_t *)buf)[i] = ddp_f32_to_f16((float)v); break;
        }
    }
}

/* Reduce-scatter: the first wrong index of rank's block (comm_block) of
 * buf, which must hold the exact integer sums; n when all are right. */
static inline size_t check_block_int_(const void *buf, comm_dtype_t t, size_t n, int W, int rank)
{
    size_t first, len;
    comm_block(n, W, rank, &first, &len);
    for (size_t i = first; i < first + len; i++) {
        double want = 0;
        for (int r = 0; r < W; r++) want += ival_(i, r);
        if (get_(buf, t, i) != want) return i;
    }
    return n;
}

/* All-gather after fill_int_(buf, t, n, rank) on every rank: element i
 * must be its owner's value, ival_(i, owner); the first wrong index, or n. */
static inline size_t check_gathered_(const void *buf, comm_dtype_t t, size_t n, int W)
{
    for (int r = 0; r < W; r++) {
        size_t first, len;
        comm_block(n, W, r, &first, &len);
        for (size_t i = first; i < first + len; i++) {
            if (get_(buf, t, i) != ival_(i, r)) return i;
        }
    }
    return n;
}

#endif

