/* weights.h -- weights files: /model/<name> datasets with PyTorch
 * nn.Sequential state_dict names and shapes (layers.<i>.weight, ...), plus
 * attributes describing the run.  `--save` writes one; `--init` reads one
 * (for example exported from PyTorch with h5py). */
#ifndef DDP_WEIGHTS_H
#define DDP_WEIGHTS_H

#include <stdint.h>

#include "config.h"
#include "model.h"
#include "status.h"

#define WEIGHTS_FORMAT         "ddptrain-weights"
#define WEIGHTS_FORMAT_VERSION 1

typedef struct weights_meta {
    int64_t step, epoch;
    int64_t world_size;
    const ddp_config_t *cfg; /* stored as text (config_dump) */
} weights_meta_t;

/* Write the model's parameters and buffers to path atomically (temporary
 * file, then rename: an existing file survives any failure). */
ddp_status_t weights_save(const char *path, const model_t *m, const weights_meta_t *meta);

/* Load parameters and BN buffers from path into m.  Every missing, extra or
 * mis-shaped tensor is named in the error. */
ddp_status_t weights_load(const char *path, model_t *m);
/* The same from another group than /model (the test fixtures keep the
 * initial weights in /init). */
ddp_status_t weights_load_group(const char *path, const char *group, model_t *m);

#endif
