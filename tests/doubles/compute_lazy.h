/* compute_lazy.h -- "cpu-lazy", the test compute backend that delays what
 * the ordering contract of compute.h lets a backend delay (compute_lazy.c). */
#ifndef DDP_COMPUTE_LAZY_H
#define DDP_COMPUTE_LAZY_H

#include "compute.h"

const compute_ops_t *compute_lazy_ops(void);
/* Nonzero when it ran out of memory holding work back (results are off). */
int compute_lazy_failed(void);
/* The first upload that broke the pairing of device buffer and reuse event
 * (compute.h, "Ordering"), as a sentence; NULL when none. */
const char *compute_lazy_violation(void);

#endif
