/* atomicfile.c -- write a file whole or not at all (see atomicfile.h). */
#define _GNU_SOURCE
#include "atomicfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_MAX_ 4096
#define HOPS_MAX_ 40 /* symlinks followed, as the kernel's limit */

const char *atomicfile_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
           : S_ISREG(m)  ? "a regular file"
                         : "not a regular file";
}

/* ---- the target ----------------------------------------------------------- */

ddp_status_t atomicfile_target(const char *what, const char *path, char *out, size_t n)
{
    const char *sep = what && what[0] ? " " : "";
    if (!what) what = "";
    char cur[PATH_MAX_];
    if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur)
        return ddp_fail(DDP_ERR_USAGE, "%s%s%s: path too long", what, sep, path);
    struct stat st;
    int hops = 0;
    while (lstat(cur, &st) == 0 && S_ISLNK(st.st_mode)) {
        char link[PATH_MAX_];
        ssize_t k = readlink(cur, link, sizeof link - 1);
        if (k < 0 || ++hops > HOPS_MAX_)
            return ddp_fail(DDP_ERR_USAGE, "%s%s%s: cannot follow the symbolic link %s: %s", what,
                            sep, path, cur, k < 0 ? strerror(errno) : "too many levels (a loop?)");
        link[k] = '\0';
        char next[2 * PATH_MAX_];
        if (link[0] == '/') {
            snprintf(next, sizeof next, "%s", link);
        } else { /* relative to the link's directory */
            char dir[PATH_MAX_];
            snprintf(dir, sizeof dir, "%s", cur);
            snprintf(next, sizeof next, "%s/%s", dirname(dir), link);
        }
        if (strlen(next) >= sizeof cur)
            return ddp_fail(DDP_ERR_USAGE, "%s%s%s: the symbolic link's target is too long", what,
                            sep, path);
        strcpy(cur, next);
    }
    /* cur does not exist (a new file) or is what the links end at */
    if (lstat(cur, &st) == 0 && !S_ISREG(st.st_mode)) {
        char via[PATH_MAX_ + 32] = "";
        if (hops) snprintf(via, sizeof via, " (through a symbolic link, %s)", cur);
        if (!what[0]) /* (a write after start-up: the caller says what was kept) */
            return ddp_fail(DDP_ERR_USAGE, "%s is %s%s, not a regular file", path,
                            atomicfile_kind(st.st_mode), via);
        if (S_ISDIR(st.st_mode))
            return ddp_fail(DDP_ERR_USAGE,
                            "%s %s is a directory%s; name a file, e.g. %s/weights.h5", what, path,
                            via, cur);
        return ddp_fail(DDP_ERR_USAGE,
                        "%s %s is %s%s, not a regular file; name a regular file (an existing "
                        "one is replaced once the new one is complete)",
                        what, path, atomicfile_kind(st.st_mode), via);
    }
    if (strlen(cur) >= n) return ddp_fail(DDP_ERR_USAGE, "%s%s%s: path too long", what, sep, path);
    strcpy(out, cur);
    return DDP_OK;
}

/* ---- temporary names ------------------------------------------------------ */

/* This host's name as it goes into temporary names: [A-Za-z0-9_-] and dots
 * (anything else becomes '_'), never empty. */
static const char *host_(void)
{
    static char host[256];
    if (host[0]) return host;
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "localhost");
    h[sizeof h - 1] = '\0';
    for (char *p = h; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '.'))
            *p = '_';
    snprintf(host, sizeof host, "%s", h);
    return host;
}

void atomicfile_tmp_name(const char *path, char *buf, size_t n)
{
    snprintf(buf, n, "%s" ATOMICFILE_TMP_INFIX "%s.%ld", path, host_(), (long)getpid());
}

atomicfile_tmp_kind_t atomicfile_tmp_classify(const char *name, const char *target,
                                              size_t *target_len)
{
    /* TARGET.tmp.HOST.PID: the host is everything between the infix and the
     * last dot (host names may hold dots), the pid all digits */
    const char *inf;
    if (target) {
        size_t tl = strlen(target);
        if (strncmp(name, target, tl) != 0 ||
            strncmp(name + tl, ATOMICFILE_TMP_INFIX, strlen(ATOMICFILE_TMP_INFIX)) != 0)
            return ATOMICFILE_NOT_TMP;
        inf = name + tl;
    } else {
        inf = strstr(name, ATOMICFILE_TMP_INFIX); /* (callers check the target's name) */
    }
    if (!inf || inf == name) return ATOMICFILE_NOT_TMP;
    const char *host = inf + strlen(ATOMICFILE_TMP_INFIX);
    const char *dot = strrchr(host, '.');
    if (!dot || dot == host || !dot[1] || strlen(dot + 1) > 9) return ATOMICFILE_NOT_TMP;
    for (const char *p = dot + 1; *p; p++)
        if (*p < '0' || *p > '9') return ATOMICFILE_NOT_TMP;
    for (const char *p = host; p < dot; p++)
        if (*p == '/') return ATOMICFILE_NOT_TMP;
    if (target_len) *target_len = (size_t)(inf - name);
    const char *me = host_();
    if ((size_t)(dot - host) != strlen(me) || strncmp(host, me, (size_t)(dot - host)) != 0)
        return ATOMICFILE_TMP_ELSEWHERE;
    long pid = strtol(dot + 1, NULL, 10);
    if (pid <= 0) return ATOMICFILE_NOT_TMP;
    if (pid == (long)getpid()) return ATOMICFILE_TMP_LIVE;
    /* alive, or alive and not ours to signal: kept */
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) return ATOMICFILE_TMP_LIVE;
    return ATOMICFILE_TMP_STALE;
}

int atomicfile_remove_stale(const char *path, int *kept)
{
    char dir[PATH_MAX_], base[PATH_MAX_];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(base, sizeof base, "%s", path);
    const char *d = dirname(dir), *b = basename(base);
    int removed = 0;
    if (kept) *kept = 0;
    DIR *dp = opendir(d);
    if (!dp) return 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        atomicfile_tmp_kind_t k = atomicfile_tmp_classify(e->d_name, b, NULL);
        if (k == ATOMICFILE_NOT_TMP) continue;
        char p[2 * PATH_MAX_ + 2];
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        struct stat st;
        if (k == ATOMICFILE_TMP_STALE && lstat(p, &st) == 0 && S_ISREG(st.st_mode) &&
            unlink(p) == 0)
            removed++;
        else if (kept)
            (*kept)++;
    }
    closedir(dp);
    return removed;
}

/* ---- writing ------------------------------------------------------------- */

int atomicfile_fsync(const char *path, int dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

const char *atomicfile_advice(int e)
{
    switch (e) {
    case ENOSPC:
    case EDQUOT: return " (disk full or over quota: free space or choose another directory)";
    case EROFS: return " (a read-only file system: choose a directory on a writable one)";
    case EACCES:
    case EPERM: return " (permission denied: check the directory's permissions)";
    case ENOENT: return " (does the directory exist?)";
    case ELOOP: return " (the path is a loop of symbolic links: fix or remove the link)";
    case ENOTDIR: return " (a part of the path is not a directory)";
    default: return "";
    }
}

ddp_status_t atomicfile_probe(const char *what, const char *path, int *removed, int *kept)
{
    char target[PATH_MAX_], tmp[PATH_MAX_ + 300];
    DDP_TRY(atomicfile_target(what, path, target, sizeof target));
    int n = atomicfile_remove_stale(target, kept);
    if (removed) *removed = n;
    atomicfile_tmp_name(target, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        if (!what[0])
            return ddp_fail(DDP_ERR_IO, "cannot create %s: %s%s", tmp, strerror(e), atomicfile_advice(e));
        return ddp_fail(DDP_ERR_IO, "%s %s: cannot create %s: %s%s", what, path, tmp, strerror(e),
                        atomicfile_advice(e));
    }
    /* one block: a disk that is already full fails now, not after training */
    static const char block[4096];
    ssize_t w = write(fd, block, sizeof block);
    int e = w < 0 ? errno : ENOSPC;
    close(fd);
    unlink(tmp);
    if (w != (ssize_t)sizeof block && !what[0])
        return ddp_fail(DDP_ERR_IO, "cannot write %s: %s%s", tmp, strerror(e), atomicfile_advice(e));
    if (w != (ssize_t)sizeof block)
        return ddp_fail(DDP_ERR_IO, "%s %s: cannot write %s: %s%s", what, path, tmp, strerror(e),
                        atomicfile_advice(e));
    return DDP_OK;
}

/* rename tmp over path and flush the directory (tmp flushed first, unless
 * the caller did) */
static ddp_status_t finish_(const char *tmp, const char *path, int flush_tmp)
{
    if ((flush_tmp && atomicfile_fsync(tmp, 0) != 0) || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ddp_fail(DDP_ERR_IO, "cannot finish writing %s: %s%s; %s was left unchanged", path,
                        strerror(e), atomicfile_advice(e), path);
    }
    char dir[PATH_MAX_];
    snprintf(dir, sizeof dir, "%s", path);
    atomicfile_fsync(dirname(dir), 1);
    return DDP_OK;
}

ddp_status_t atomicfile_finish(const char *tmp, const char *path)
{
    return finish_(tmp, path, 1);
}

int atomicfile_write_all(int fd, const void *data, size_t n, size_t *written)
{
    const char *p = data;
    if (written) *written = 0;
    while (n > 0) {
        /* pieces of at most 64 MiB: large writes, bounded by what write() takes */
        size_t chunk = n < ((size_t)64 << 20) ? n : ((size_t)64 << 20);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        if (written) *written += (size_t)w;
    }
    return 0;
}

/* path: the resolved target; shown: as the user named it */
static ddp_status_t write_(const char *path, const char *shown, const void *data, size_t len)
{
    char tmp[PATH_MAX_ + 300];
    atomicfile_tmp_name(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        return ddp_fail(DDP_ERR_IO, "cannot create %s: %s%s; %s was left unchanged", tmp,
                        strerror(e), atomicfile_advice(e), shown);
    }
    size_t done;
    int e = atomicfile_write_all(fd, data, len, &done) != 0 ? errno : 0;
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        unlink(tmp);
        return ddp_fail(DDP_ERR_IO,
                        "writing %s failed after %zu of %zu bytes: %s%s; %s was left "
                        "unchanged",
                        tmp, done, len, strerror(e), atomicfile_advice(e), shown);
    }
    return finish_(tmp, path, 0); /* flushed above */
}

ddp_status_t atomicfile_write(const char *path, const void *data, size_t len)
{
    char target[PATH_MAX_];
    ddp_status_t s = atomicfile_target("", path, target, sizeof target);
    /* a target that became a FIFO or device after start-up: an I/O failure now */
    if (s != DDP_OK)
        return ddp_fail_override(DDP_ERR_IO, "%s; it was left unchanged (move it away)",
                                 ddp_error_message());
    return write_(target, path, data, len);
}
