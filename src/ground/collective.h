/* collective.h -- what a collective is, as every plane and the watchdog
 * name it: the descriptor each collective carries (comm.h, control.h) and
 * the activity record shows (activity.h). */
#ifndef DDP_COLLECTIVE_H
#define DDP_COLLECTIVE_H

#include <stdint.h>

typedef struct comm_desc {
    const char *what; /* "bucket", "syncbn-fwd", "syncbn-bwd", "metrics", ... */
    int index;        /* bucket number or layer index; -1 if none */
    int64_t step;     /* training step; -1 outside the loop */
} comm_desc_t;

#endif
