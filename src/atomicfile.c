/* atomicfile.c -- write a file whole or not at all (see atomicfile.h). */
#define _GNU_SOURCE
#include "atomicfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void atomicfile_tmp_name(const char *path, char *buf, size_t n)
{
    snprintf(buf, n, "%s" ATOMICFILE_TMP_INFIX "%ld", path, (long)getpid());
}

int atomicfile_fsync(const char *path, int dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static const char *advice_(int e)
{
    return e == ENOSPC || e == EDQUOT ? " (disk full or over quota: free space or choose another "
                                        "directory)"
           : e == EACCES || e == EPERM || e == EROFS ? " (check the directory's permissions)"
                                                     : "";
}

/* rename tmp over path and flush the directory (tmp flushed first, unless
 * the caller did) */
static ddp_status_t finish_(const char *tmp, const char *path, int flush_tmp)
{
    if ((flush_tmp && atomicfile_fsync(tmp, 0) != 0) || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ddp_fail(DDP_ERR_IO, "cannot finish writing %s: %s%s; %s was left unchanged", path,
                        strerror(e), advice_(e), path);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    atomicfile_fsync(dirname(dir), 1);
    return DDP_OK;
}

ddp_status_t atomicfile_finish(const char *tmp, const char *path)
{
    return finish_(tmp, path, 1);
}

ddp_status_t atomicfile_write(const char *path, const void *data, size_t len)
{
    char tmp[4200];
    if (strlen(path) >= 4096) return ddp_fail(DDP_ERR_USAGE, "output path too long: %s", path);
    atomicfile_tmp_name(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        return ddp_fail(DDP_ERR_IO, "cannot create %s: %s%s; %s was left unchanged", tmp,
                        strerror(e), advice_(e), path);
    }
    const char *p = data;
    size_t left = len;
    int e = 0;
    while (left > 0) {
        /* pieces of at most 64 MiB: large writes, bounded by what write() takes */
        size_t chunk = left < ((size_t)64 << 20) ? left : ((size_t)64 << 20);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            e = w < 0 ? errno : ENOSPC;
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        unlink(tmp);
        return ddp_fail(DDP_ERR_IO,
                        "writing %s failed after %zu of %zu bytes: %s%s; %s was left "
                        "unchanged",
                        tmp, len - left, len, strerror(e), advice_(e), path);
    }
    return finish_(tmp, path, 0); /* flushed above */
}
