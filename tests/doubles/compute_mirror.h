/* compute_mirror.h -- a test-only compute backend over host memory that runs
 * every op on a device backend (compute_cuda_ops), so that tests written
 * for host pointers (check_kernels.c, check_golden.c) run unchanged against
 * it: each op uploads its inputs -- and its outputs, which keep what the
 * device does not write (n == 0, beta != 0, NaN prefills) -- to fresh device
 * buffers (one per distinct host pointer, so in-place calls stay in place),
 * runs the device op, downloads its outputs, frees the buffers and fails
 * the running Check test when the device's `check` reports a failure.
 * Memory ops go through the device as well: alloc downloads a fresh device
 * allocation (zero-filled), upload / copy / zero / upload_async round-trip
 * through device buffers.  Its memory is host memory (mem_kind HOST). */
#ifndef DDP_COMPUTE_MIRROR_H
#define DDP_COMPUTE_MIRROR_H

#include "compute.h"

/* Init `device` (local rank 0 of 1) and return the mirror table over it;
 * NULL with the status in *st (and ddp_error_message()) when init fails.
 * One device per process: later calls return the same table. */
const compute_ops_t *compute_mirror(const compute_ops_t *device, ddp_status_t *st);

/* For a test binary's test_suite(): the mirror of the "cuda" backend
 * (compute_cuda_ops); exits 77 (skipped) when no GPU is visible, 1 when
 * its init fails.  `prog` names the binary in the messages. */
const compute_ops_t *compute_mirror_cuda(const char *prog);

#endif
