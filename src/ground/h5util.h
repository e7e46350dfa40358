/* h5util.h -- small HDF5 helpers shared by the input decks, weights files
 * and ddptrain-prep: the global HDF5 lock, quiet opening with clear errors,
 * atomic file creation, attributes and whole-dataset I/O.
 *
 * The HDF5 library is not thread-safe in the usual builds: every HDF5 call
 * in ddptrain happens between h5_lock() and h5_unlock().
 */
#ifndef DDP_H5UTIL_H
#define DDP_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Link info type of H5Literate callbacks across HDF5 1.10 and 1.12+. */
#if H5_VERSION_GE(1, 12, 0)
typedef H5L_info2_t h5_link_info_t;
#else
typedef H5L_info_t h5_link_info_t;
#endif

void h5_lock(void);
void h5_unlock(void);
/* Turn off HDF5's automatic error-stack printing (we report our own), in
 * this thread and in every thread when it first takes the lock.  Call it
 * before any other HDF5 call: it also replaces HDF5's exit handler by one
 * that skips closing the library after a failed h5_close_file (whose id
 * HDF5 1.10 would close again at exit, and crash). */
void h5_quiet(void);
/* Close a file (H5I_INVALID_HID: nothing to do): flush, then H5Fclose.  On
 * failure (disk full) the id must not be used again; returns < 0. */
herr_t h5_close_file(hid_t file);
/* How many failed HDF5 calls so far had a write error on their error stack
 * (after h5_quiet(): its error function counts them), including those whose
 * result the caller ignored, such as an H5Dclose that could not write the
 * dataset's last chunk. */
unsigned long h5_write_errors(void);

/* Open an existing file read-only.  Errors: missing file, not HDF5. */
ddp_status_t h5_open_read(const char *path, hid_t *file);
/* The same with a file access property list (H5P_DEFAULT allowed). */
ddp_status_t h5_open_read_fapl(const char *path, hid_t fapl, hid_t *file);

/* Atomic writes (atomicfile.h): create PATH.tmp.<host>.<pid> (removing
 * stale ones of PATH first; through a symlink to its target; a target that
 * is not a regular file is refused, DDP_ERR_USAGE), write, then
 * h5_atomic_commit (close, fsync, rename over PATH, fsync the directory) or
 * h5_atomic_abandon (close, unlink).  The old PATH survives any failure
 * before the rename, and no temporary file is left.  Closing the file
 * closes every object still open in it (H5F_CLOSE_STRONG).  A writer may
 * close a->file itself with h5_close_file (setting it to H5I_INVALID_HID)
 * to check the temporary file before h5_atomic_commit renames it.  A
 * write error anywhere since h5_atomic_create (h5_write_errors) fails the
 * commit: no file with silently lost data is renamed into place. */
typedef struct h5_atomic {
    hid_t file;
    unsigned long write_errors; /* h5_write_errors() at the create */
    char path[4096];
    char tmp[4400]; /* path + .tmp.<host>.<pid> */
} h5_atomic_t;
ddp_status_t h5_atomic_create(h5_atomic_t *a, const char *path);
ddp_status_t h5_atomic_commit(h5_atomic_t *a);
/* Did a write fail (even one the writer ignored) since the create? */
int h5_atomic_write_failed(const h5_atomic_t *a);
void h5_atomic_abandon(h5_atomic_t *a);

/* In-memory files: build a whole HDF5 file in memory (the core driver, no
 * backing store), then write its bytes in one piece with atomicfile_write.
 * The disk sees one sequential write, and a full disk is a failed write()
 * with no HDF5 file left half-closed.  The bytes live in an h5_mem_image_t
 * the caller owns: after h5_mem_finish (which closes the file) data[0, len)
 * is the file.  An image may be reused for the next file (its memory is
 * already mapped, which makes the next build several times faster); free
 * it with h5_mem_image_free.  h5_mem_abandon only closes the file. */
typedef struct h5_mem_image {
    void *data;
    size_t cap, len;
} h5_mem_image_t;
ddp_status_t h5_mem_create(hid_t *file, h5_mem_image_t *img, size_t size_hint);
ddp_status_t h5_mem_finish(hid_t file, h5_mem_image_t *img);
void h5_mem_abandon(hid_t file);
void h5_mem_image_free(h5_mem_image_t *img);

/* Does `name` (a path like "/train/x") exist under loc? */
int h5_exists(hid_t loc, const char *name);
/* Length of dimension 0 of dataset `name` (0 when it cannot be opened). */
hsize_t h5_rows(hid_t loc, const char *name);

/* Create intermediate groups as needed and write a whole dataset. */
ddp_status_t h5_write(hid_t loc, const char *name, hid_t mem_type, hid_t file_type, int ndim,
                      const hsize_t *dims, const void *data);

/* Does attribute `name` exist on obj?  (Records no error.) */
int h5_attr_exists(hid_t obj, const char *name);

/* Attributes on an object (dataset or group). */
ddp_status_t h5_attr_write_str(hid_t obj, const char *name, const char *value);
ddp_status_t h5_attr_write_i64(hid_t obj, const char *name, int64_t value);
ddp_status_t h5_attr_write_f64(hid_t obj, const char *name, double value);
ddp_status_t h5_attr_write_f32v(hid_t obj, const char *name, const float *v, size_t n);
/* Read an attribute; DDP_ERR_INPUT if absent or of the wrong kind.  Strings
 * are fixed- or variable-length; buf is always terminated. */
ddp_status_t h5_attr_read_str(hid_t obj, const char *name, char *buf, size_t n);
/* An integer, or a float holding an integral value (4.0; 4.5 is an error). */
ddp_status_t h5_attr_read_i64(hid_t obj, const char *name, int64_t *v);
ddp_status_t h5_attr_read_f64(hid_t obj, const char *name, double *v);
/* Float vector attribute: *n in = capacity, out = length. */
ddp_status_t h5_attr_read_f32v(hid_t obj, const char *name, float *v, size_t *n);

#endif
