/* h5util.c -- HDF5 helpers: lock, quiet open, atomic files, in-memory
 * files, attributes. */
#define _GNU_SOURCE
#include "h5util.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"

static pthread_mutex_t h5_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/* A failed H5Fclose (a full disk while flushing) leaves, in HDF5 1.10, an
 * id whose file is already freed: HDF5's own exit handler would close it
 * again and crash.  h5_quiet() takes over that handler (H5dont_atexit), and
 * ours closes the library only when no file close and no write failed;
 * otherwise the process ends without it (what the failed file held is
 * abandoned anyway). */
static int h5_close_failed;
static int h5_own_atexit;

static unsigned long h5_write_errors_now_(void);

static void h5_atexit_(void)
{
    /* after a write error HDF5 may hold half-closed objects: its shutdown
     * would crash or report "infinite loop closing library" */
    if (!h5_close_failed && h5_write_errors_now_() == 0) H5close();
}

herr_t h5_close_file(hid_t file)
{
    if (file < 0) return 0;
    h5_lock();
    /* flush first: a flush that fails leaves the file open and intact */
    herr_t rc = H5Fflush(file, H5F_SCOPE_LOCAL);
    if (rc >= 0) rc = H5Fclose(file);
    if (rc < 0) h5_close_failed = 1; /* the id is never touched again */
    h5_unlock();
    return rc;
}

/* Write errors (a full disk) that a caller did not see: HDF5 reports a
 * failed chunk write when the dataset is closed (or its cache evicted), and
 * a writer that ignores H5Dclose's result would end with holes of zeros in
 * a file that closes without error.  Instead of printing the error stack,
 * HDF5's automatic error function counts the failed calls whose stack holds
 * a write error; h5_atomic_commit refuses a file that saw one. */
static atomic_ulong h5_write_errors_;

static herr_t find_write_error_(unsigned n, const H5E_error2_t *e, void *found)
{
    (void)n;
    if (e->min_num == H5E_WRITEERROR) *(int *)found = 1;
    return 0;
}

static herr_t note_error_(hid_t stack, void *arg)
{
    (void)arg;
    int found = 0;
    H5Ewalk2(stack, H5E_WALK_DOWNWARD, find_write_error_, &found);
    if (found) atomic_fetch_add(&h5_write_errors_, 1);
    return 0;
}

static unsigned long h5_write_errors_now_(void)
{
    return atomic_load(&h5_write_errors_);
}

unsigned long h5_write_errors(void)
{
    return h5_write_errors_now_();
}

/* Thread-safe HDF5 builds keep the error-printing setting per thread: once
 * h5_quiet() was called, every thread replaces it (by note_error_) the
 * first time it takes the lock (the loader thread, for one). */
static int h5_quiet_all;
static _Thread_local int h5_quiet_here;

void h5_lock(void)
{
    pthread_mutex_lock(&h5_mutex);
    if (h5_quiet_all && !h5_quiet_here) {
        H5Eset_auto2(H5E_DEFAULT, note_error_, NULL);
        h5_quiet_here = 1;
    }
}

void h5_unlock(void)
{
    pthread_mutex_unlock(&h5_mutex);
}

void h5_quiet(void)
{
    pthread_mutex_lock(&h5_mutex);
    /* only before the library's first use (else HDF5's handler stays) */
    if (!h5_own_atexit && H5dont_atexit() >= 0 && atexit(h5_atexit_) == 0) h5_own_atexit = 1;
    h5_quiet_all = 1;
    pthread_mutex_unlock(&h5_mutex);
    h5_lock();
    h5_unlock();
}

ddp_status_t h5_open_read(const char *path, hid_t *file)
{
    return h5_open_read_fapl(path, H5P_DEFAULT, file);
}

ddp_status_t h5_open_read_fapl(const char *path, hid_t fapl, hid_t *file)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ddp_fail(DDP_ERR_INPUT, "%s: cannot open: %s; check the path", path,
                        strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ddp_fail(DDP_ERR_INPUT, "%s is %s, not a regular file; name an HDF5 file", path,
                        atomicfile_kind(st.st_mode));
    h5_lock();
    htri_t is = H5Fis_hdf5(path);
    hid_t f = is > 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : H5I_INVALID_HID;
    h5_unlock();
    if (is <= 0)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: not an HDF5 file (or truncated); make input decks "
                        "with ddptrain-prep",
                        path);
    if (f < 0)
        return ddp_fail(DDP_ERR_INPUT, "%s: HDF5 cannot open it (corrupt or truncated?)", path);
    *file = f;
    return DDP_OK;
}

ddp_status_t h5_atomic_create(h5_atomic_t *a, const char *path)
{
    a->file = H5I_INVALID_HID;
    a->tmp[0] = '\0';
    a->write_errors = h5_write_errors();
    if (strlen(path) >= sizeof a->path)
        return ddp_fail(DDP_ERR_USAGE, "output path too long: %s", path);
    /* through a symlink to its target; never over a FIFO or device */
    DDP_TRY(atomicfile_target("", path, a->path, sizeof a->path));
    atomicfile_remove_stale(a->path, NULL);
    atomicfile_tmp_name(a->path, a->tmp, sizeof a->tmp);
    h5_lock();
    /* closing the file closes every object still open in it */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        H5Pclose(fapl);
        fapl = H5I_INVALID_HID;
    }
    a->file = fapl < 0 ? H5I_INVALID_HID : H5Fcreate(a->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    int e = errno;
    if (fapl >= 0) H5Pclose(fapl);
    h5_unlock();
    if (a->file < 0) {
        unlink(a->tmp); /* a create that failed part-way (disk full) leaves an empty file */
        return ddp_fail(DDP_ERR_IO,
                        "cannot create %s: %s; check that the directory exists and "
                        "is writable",
                        a->tmp, strerror(e));
    }
    return DDP_OK;
}

int h5_atomic_write_failed(const h5_atomic_t *a)
{
    return h5_write_errors() != a->write_errors;
}

ddp_status_t h5_atomic_commit(h5_atomic_t *a)
{
    herr_t rc = h5_close_file(a->file); /* the writer may have closed it to validate it */
    a->file = H5I_INVALID_HID;
    if (rc < 0 || h5_atomic_write_failed(a)) {
        unlink(a->tmp);
        return ddp_fail(DDP_ERR_IO,
                        "writing %s failed (disk full or quota?); %s was left unchanged", a->tmp,
                        a->path);
    }
    return atomicfile_finish(a->tmp, a->path);
}

void h5_atomic_abandon(h5_atomic_t *a)
{
    h5_close_file(a->file);
    a->file = H5I_INVALID_HID;
    if (a->tmp[0]) unlink(a->tmp);
}

int h5_exists(hid_t loc, const char *name)
{
    /* walk the path component by component: H5Lexists fails on missing parents */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", name);
    int ok = 1;
    h5_lock();
    for (char *p = buf + (buf[0] == '/'); ok; p++) {
        p = strchr(p, '/');
        if (p) *p = '\0';
        ok = H5Lexists(loc, buf, H5P_DEFAULT) > 0;
        if (!p) break;
        *p = '/';
    }
    h5_unlock();
    return ok;
}

hsize_t h5_rows(hid_t loc, const char *name)
{
    hsize_t dims[H5S_MAX_RANK] = {0};
    h5_lock();
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    hid_t sp = ds < 0 ? H5I_INVALID_HID : H5Dget_space(ds);
    if (sp >= 0) H5Sget_simple_extent_dims(sp, dims, NULL);
    if (sp >= 0) H5Sclose(sp);
    if (ds >= 0) H5Dclose(ds);
    h5_unlock();
    return dims[0];
}

ddp_status_t h5_write(hid_t loc, const char *name, hid_t mem_type, hid_t file_type, int ndim,
                      const hsize_t *dims, const void *data)
{
    h5_lock();
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t space = ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(ndim, dims, NULL);
    hid_t ds = H5Dcreate2(loc, name, file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = ds < 0 ? -1 : H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(space);
    H5Pclose(lcpl);
    h5_unlock();
    if (rc < 0) return ddp_fail(DDP_ERR_IO, "cannot write dataset %s (disk full?)", name);
    return DDP_OK;
}

int h5_attr_exists(hid_t obj, const char *name)
{
    h5_lock();
    int yes = H5Aexists(obj, name) > 0;
    h5_unlock();
    return yes;
}

static ddp_status_t attr_write_(hid_t obj, const char *name, hid_t type, hid_t space, const void *v)
{
    h5_lock();
    if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
    hid_t at = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = at < 0 ? -1 : H5Awrite(at, type, v);
    if (at >= 0) H5Aclose(at);
    h5_unlock();
    if (rc < 0) return ddp_fail(DDP_ERR_IO, "cannot write attribute %s", name);
    return DDP_OK;
}

ddp_status_t h5_attr_write_str(hid_t obj, const char *name, const char *value)
{
    h5_lock();
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(value) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    hid_t sp = H5Screate(H5S_SCALAR);
    h5_unlock();
    ddp_status_t s = attr_write_(obj, name, t, sp, value);
    h5_lock();
    H5Sclose(sp);
    H5Tclose(t);
    h5_unlock();
    return s;
}

static ddp_status_t attr_write_scalar_(hid_t obj, const char *name, hid_t type, const void *v)
{
    h5_lock();
    hid_t sp = H5Screate(H5S_SCALAR);
    h5_unlock();
    ddp_status_t s = attr_write_(obj, name, type, sp, v);
    h5_lock();
    H5Sclose(sp);
    h5_unlock();
    return s;
}

ddp_status_t h5_attr_write_i64(hid_t obj, const char *name, int64_t value)
{
    return attr_write_scalar_(obj, name, H5T_NATIVE_INT64, &value);
}

ddp_status_t h5_attr_write_f64(hid_t obj, const char *name, double value)
{
    return attr_write_scalar_(obj, name, H5T_NATIVE_DOUBLE, &value);
}

ddp_status_t h5_attr_write_f32v(hid_t obj, const char *name, const float *v, size_t n)
{
    hsize_t d = n;
    h5_lock();
    hid_t sp = H5Screate_simple(1, &d, NULL);
    h5_unlock();
    ddp_status_t s = attr_write_(obj, name, H5T_NATIVE_FLOAT, sp, v);
    h5_lock();
    H5Sclose(sp);
    h5_unlock();
    return s;
}

/* Open attribute `name` and return its element count (0 on failure). */
static hid_t attr_open_(hid_t obj, const char *name, hssize_t *npoints, H5T_class_t *cls)
{
    if (H5Aexists(obj, name) <= 0) return H5I_INVALID_HID;
    hid_t at = H5Aopen(obj, name, H5P_DEFAULT);
    if (at < 0) return at;
    hid_t sp = H5Aget_space(at), t = H5Aget_type(at);
    *npoints = H5Sget_simple_extent_npoints(sp);
    *cls = H5Tget_class(t);
    H5Sclose(sp);
    H5Tclose(t);
    return at;
}

ddp_status_t h5_attr_read_str(hid_t obj, const char *name, char *buf, size_t n)
{
    hssize_t np;
    H5T_class_t cls;
    ddp_status_t s = DDP_OK;
    h5_lock();
    hid_t at = attr_open_(obj, name, &np, &cls);
    if (at < 0 || cls != H5T_STRING || np != 1) {
        s = ddp_fail(DDP_ERR_INPUT, "attribute %s is missing or not a string", name);
    } else {
        hid_t ft = H5Aget_type(at);
        if (H5Tis_variable_str(ft) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(ft)); /* no conversion between ASCII and UTF-8 */
            char *v = NULL;
            if (H5Aread(at, mt, &v) < 0 || !v)
                s = ddp_fail(DDP_ERR_INPUT, "cannot read string attribute %s", name);
            else
                snprintf(buf, n, "%s", v);
            if (v) H5free_memory(v);
            H5Tclose(mt);
        } else {
            size_t sz = H5Tget_size(ft);
            char *tmp = calloc(sz + 1, 1);
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, sz + 1);
            H5Tset_cset(mt, H5Tget_cset(ft));
            if (!tmp || H5Aread(at, mt, tmp) < 0)
                s = ddp_fail(DDP_ERR_INPUT, "cannot read string attribute %s", name);
            else
                snprintf(buf, n, "%s", tmp);
            free(tmp);
            H5Tclose(mt);
        }
        H5Tclose(ft);
    }
    if (at >= 0) H5Aclose(at);
    h5_unlock();
    return s;
}

static ddp_status_t attr_read_num_(hid_t obj, const char *name, hid_t mt, void *v, size_t *n)
{
    hssize_t np;
    H5T_class_t cls;
    ddp_status_t s = DDP_OK;
    h5_lock();
    hid_t at = attr_open_(obj, name, &np, &cls);
    if (at < 0 || (cls != H5T_INTEGER && cls != H5T_FLOAT) || np < 1 || (size_t)np > *n)
        s = ddp_fail(DDP_ERR_INPUT,
                     "attribute %s is missing, not numeric or has %lld values "
                     "(at most %zu expected)",
                     name, (long long)(at < 0 ? 0 : np), *n);
    else if (H5Aread(at, mt, v) < 0)
        s = ddp_fail(DDP_ERR_INPUT, "cannot read attribute %s", name);
    else
        *n = (size_t)np;
    if (at >= 0) H5Aclose(at);
    h5_unlock();
    return s;
}

ddp_status_t h5_attr_read_i64(hid_t obj, const char *name, int64_t *v)
{
    /* read as double, so that a float attribute (4.5, or 1e30) is refused
     * rather than truncated or clamped by HDF5's conversion; integers
     * beyond 2^53 are read exactly as int64 */
    double f;
    size_t n = 1;
    DDP_TRY(attr_read_num_(obj, name, H5T_NATIVE_DOUBLE, &f, &n));
    if (!(isfinite(f) && f == floor(f)))
        return ddp_fail(DDP_ERR_INPUT, "attribute %s is %.17g, not an integer", name, f);
    if (fabs(f) > 9223372036854775808.0)
        return ddp_fail(DDP_ERR_INPUT, "attribute %s is %.17g, beyond 64-bit integers", name, f);
    if (fabs(f) < 9007199254740992.0) {
        *v = (int64_t)f;
        return DDP_OK;
    }
    return attr_read_num_(obj, name, H5T_NATIVE_INT64, v, &n);
}

ddp_status_t h5_attr_read_f64(hid_t obj, const char *name, double *v)
{
    size_t n = 1;
    return attr_read_num_(obj, name, H5T_NATIVE_DOUBLE, v, &n);
}

ddp_status_t h5_attr_read_f32v(hid_t obj, const char *name, float *v, size_t *n)
{
    return attr_read_num_(obj, name, H5T_NATIVE_FLOAT, v, n);
}

/* ---- in-memory files ------------------------------------------------------ */

/* The core driver's memory, through file image callbacks: it lives in the
 * caller's h5_mem_image_t, grows by realloc, and survives the file's close
 * (the image is what the close leaves behind).  Reused for the next file,
 * its pages are already mapped: no page faults, no kernel page clearing. */
static void *image_malloc_(size_t size, H5FD_file_image_op_t op, void *udata)
{
    (void)op;
    h5_mem_image_t *img = udata;
    if (size > img->cap) {
        free(img->data);
        img->data = malloc(size);
        img->cap = img->data ? size : 0;
    }
    return img->data;
}

static void *image_realloc_(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata)
{
    h5_mem_image_t *img = udata;
    if (!ptr) return image_malloc_(size, op, udata);
    if (size <= img->cap) return ptr;
    void *p = realloc(img->data, size);
    if (!p) return NULL;
    img->data = p;
    img->cap = size;
    return p;
}

static herr_t image_free_(void *ptr, H5FD_file_image_op_t op, void *udata)
{
    (void)ptr, (void)op, (void)udata; /* the image stays with its owner */
    return 0;
}

static void *image_memcpy_(void *dest, const void *src, size_t size, H5FD_file_image_op_t op,
                           void *udata)
{
    (void)op, (void)udata;
    return memcpy(dest, src, size);
}

static void *udata_copy_(void *udata)
{
    return udata;
}

static herr_t udata_free_(void *udata)
{
    (void)udata;
    return 0;
}

ddp_status_t h5_mem_create(hid_t *file, h5_mem_image_t *img, size_t size_hint)
{
    /* grow in steps of the expected size (at least 1 MiB): few reallocations */
    size_t increment = size_hint < ((size_t)1 << 20) ? ((size_t)1 << 20) : size_hint;
    H5FD_file_image_callbacks_t cb = {
        image_malloc_, image_memcpy_, image_realloc_, image_free_, udata_copy_, udata_free_, img};
    img->len = 0;
    h5_lock();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    herr_t rc = fapl < 0 ? -1 : H5Pset_fapl_core(fapl, increment, 0);
    if (rc >= 0) rc = H5Pset_file_image_callbacks(fapl, &cb);
    hid_t f =
        rc < 0 ? H5I_INVALID_HID : H5Fcreate("ddptrain-image", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    h5_unlock();
    if (f < 0)
        return ddp_fail(DDP_ERR_NOMEM, "cannot create an in-memory HDF5 file (out of memory?)");
    *file = f;
    return DDP_OK;
}

ddp_status_t h5_mem_finish(hid_t file, h5_mem_image_t *img)
{
    h5_lock();
    ssize_t n = H5Fflush(file, H5F_SCOPE_LOCAL) < 0 ? -1 : H5Fget_file_image(file, NULL, 0);
    h5_unlock();
    herr_t rc = h5_close_file(file);
    if (n <= 0 || rc < 0 || !img->data || (size_t)n > img->cap)
        return ddp_fail(DDP_ERR_NOMEM,
                        "cannot finish an in-memory HDF5 file (%zd bytes; out of memory?)", n);
    img->len = (size_t)n;
    return DDP_OK;
}

void h5_mem_abandon(hid_t file)
{
    h5_close_file(file);
}

void h5_mem_image_free(h5_mem_image_t *img)
{
    free(img->data);
    img->data = NULL;
    img->cap = img->len = 0;
}
