/* inject.h -- fault injection: --inject KIND:RANK:STEP[:ARG] (repeatable),
 * documented debugging options that make each failure the diagnostics must
 * catch happen on purpose, on one rank, at one step.
 *
 * STEP counts optimizer steps from 1, as the progress lines do; RANK may be
 * '*' (every rank).  Kinds, and where each fires:
 *   hang      the rank stops responding at the start of step STEP (before
 *             its next collective) and never comes back
 *   exit      the rank exits with code ARG (default 1) at the start of STEP,
 *             without finalising MPI
 *   kill      the rank raises SIGKILL at the start of STEP
 *   slow      every step from STEP on takes ARG ms (default 100) longer on
 *             the rank (a straggler)
 *   bitflip   after step STEP, flip the lowest bit of the first element of
 *             tensor ARG (default: the first parameter tensor)
 *   nan       the first input value of step STEP's first micro-batch
 *             becomes NaN
 *   skipgrad  at step STEP tensor ARG's gradient is never marked ready
 *             (a parameter that "received no gradient")
 *   desync    the rank skips the stop agreement (a control-plane all-reduce)
 *             at the end of step STEP: its collectives no longer line up
 * A one-shot fault fires once; slow lasts.
 */
#ifndef DDP_INJECT_H
#define DDP_INJECT_H

#include <stdint.h>

#include "status.h"

typedef enum inject_kind {
    INJECT_HANG,
    INJECT_EXIT,
    INJECT_KILL,
    INJECT_SLOW,
    INJECT_BITFLIP,
    INJECT_NAN,
    INJECT_SKIPGRAD,
    INJECT_DESYNC,
    INJECT_NKINDS
} inject_kind_t;

#define INJECT_MAX     16
#define INJECT_ARG_MAX 128

typedef struct inject_fault {
    inject_kind_t kind;
    int rank; /* -1: every rank */
    int64_t step;
    char arg[INJECT_ARG_MAX]; /* "" if none */
    int fired;
} inject_fault_t;

/* Parse a comma-separated list of KIND:RANK:STEP[:ARG] (the --inject
 * value); DDP_ERR_USAGE naming the bad entry.  out may be NULL (validate
 * only). */
ddp_status_t inject_parse(const char *list, inject_fault_t *out, int *n);
/* Arm the faults of `list` for this rank of `size` (after the
 * configuration is agreed).  An empty list disarms everything; a fault
 * aimed at a rank >= size is DDP_ERR_USAGE (it would never fire). */
ddp_status_t inject_setup(const char *list, int rank, int size);

/* The fault of `kind` due at `step` on this rank, marked fired (one-shot
 * kinds), or NULL.  slow: due at every step >= its STEP. */
const inject_fault_t *inject_due(inject_kind_t kind, int64_t step);

/* At the start of step `step` (1-based): hang, exit or kill if one is due
 * (does not return then); sleeps for a due slow fault. */
void inject_step_begin(int64_t step);

#endif
