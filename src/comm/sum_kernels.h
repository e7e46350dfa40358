/* sum_kernels.h -- the element-wise sums of the all-reduces, for every
 * comm_dtype_t: pure arithmetic on host memory, no communication.  The
 * transports (comm_mpi.c) decide which elements meet where; these decide
 * how they are added.
 *
 * The order of the additions is fixed by the arguments alone (not by the
 * vector width or n), which the backends' bit-identity guarantee rests on.
 * 16-bit values (bf16, fp16) are added in float32 and rounded to nearest
 * even as half.h does.  Each call runs a loop over n elements, so the
 * functions are not inline: one call per block costs nothing next to it. */
#ifndef DDP_SUM_KERNELS_H
#define DDP_SUM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h" /* comm_dtype_t */

/* acc[i] = in[i] + acc[i] for i < n; acc and in do not overlap.  16-bit
 * types round after this one addition (so a chain of calls rounds after
 * each). */
void sum_accumulate(comm_dtype_t t, void *acc, const void *in, size_t n);
void sum_accumulate_bf16(uint16_t *restrict acc, const uint16_t *restrict in, size_t n);
void sum_accumulate_fp16(uint16_t *restrict acc, const uint16_t *restrict in, size_t n);

/* out[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ... + src[nsrc-1][i] for
 * i < n, nsrc >= 2, in that order; out may be one of the sources.  16-bit
 * types add all nsrc values in float32 and round once. */
void sum_sources(comm_dtype_t t, void *out, const char *const *src, int nsrc, size_t n);

#endif
