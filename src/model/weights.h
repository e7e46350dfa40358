/* weights.h -- weights files: /model/<name> datasets with PyTorch
 * nn.Sequential state_dict names and shapes (layers.<i>.weight, ...), plus
 * attributes describing the run.  `--save` writes one; `--init` reads one
 * (for example exported from PyTorch with h5py).  A checkpoint
 * (checkpoint.h) is a weights file with more in it, written and read with
 * the pieces below. */
#ifndef DDP_WEIGHTS_H
#define DDP_WEIGHTS_H

#include <hdf5.h>
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

/* Host copies of everything a weights file holds about the model. */
typedef struct weights_host {
    float *params;     /* [nparams] */
    float *bufs;       /* [nbufs] */
    int64_t *counters; /* [nlayers] BatchNorm num_batches_tracked */
} weights_host_t;

ddp_status_t weights_host_alloc(weights_host_t *h, const model_t *m);
void weights_host_free(weights_host_t *h);
/* Model memory to host, and back. */
void weights_host_download(weights_host_t *h, const model_t *m);
void weights_host_upload(const weights_host_t *h, model_t *m);

/* Write the model's parameters and buffers to path atomically (temporary
 * file, then rename: an existing file survives any failure). */
ddp_status_t weights_save(const char *path, const model_t *m, const weights_meta_t *meta);
/* The pieces: the /model datasets and the run attributes (format,
 * format_version, program_version, and meta when given) into an open file. */
ddp_status_t weights_write_model(hid_t file, const model_t *m, const weights_host_t *h);
ddp_status_t weights_write_attrs(hid_t file, const char *format, int64_t format_version,
                                 const weights_meta_t *meta);
/* Bytes the /model datasets take (a size hint for in-memory files). */
size_t weights_model_bytes(const model_t *m);

/* Load parameters and BN buffers from path into m.  Every missing, extra or
 * mis-shaped tensor is named in the error. */
ddp_status_t weights_load(const char *path, model_t *m);
/* The same from another group than /model (the test fixtures keep the
 * initial weights in /init). */
ddp_status_t weights_load_group(const char *path, const char *group, model_t *m);
/* Read group's tensors of m's layout from an open file into h (which holds
 * m's current values where nothing is read).  `option` and `path` name the
 * file in errors ("--init weights.h5 does not match the model: ...");
 * *damaged is set when a dataset is unreadable or fails its checksum, or,
 * in a file ddptrain wrote (it has the root attribute format_version), has
 * no checksum (DDP_ERR_INPUT naming the dataset).  A
 * float tensor holding NaN or Inf is refused (DDP_ERR_INPUT, naming the
 * dataset and the element), not *damaged: the file is what was written. */
ddp_status_t weights_read_group(hid_t file, const char *group, const model_t *m, weights_host_t *h,
                                const char *option, const char *path, int *damaged);

/* Datasets with a checksum: every dataset ddptrain writes carries the
 * attribute WEIGHTS_CHECKSUM_ATTR (hash_words of its bytes, 16 hex digits),
 * and a reader checks it where present; weights_read_group and a checkpoint's
 * metadata checksum (ckpt_verify.h) require it in files ddptrain wrote
 * (files from PyTorch have none). */
#define WEIGHTS_CHECKSUM_ATTR "checksum"
ddp_status_t weights_write_dataset(hid_t file, const char *name, hid_t mem_type, hid_t file_type,
                                   int ndim, const hsize_t *dims, const void *data, size_t bytes);
typedef enum weights_read {
    WEIGHTS_READ_OK,
    WEIGHTS_READ_MISSING,
    WEIGHTS_READ_SHAPE,  /* another shape (in got_ndim, got_dims) */
    WEIGHTS_READ_DAMAGED /* unreadable, or its checksum does not match */
} weights_read_t;
/* Read dataset `name` of loc, which must have shape[ndim], into out. */
weights_read_t weights_read_dataset(hid_t loc, const char *name, hid_t mem_type, int ndim,
                                    const int *shape, void *out, size_t bytes, int *got_ndim,
                                    hsize_t *got_dims);

#endif
