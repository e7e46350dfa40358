/* ckpt_lock.c -- the lock file of a checkpoint directory: one job at a time
 * (see ckpt_lock.h). */
#define _GNU_SOURCE
#include "ckpt_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomicfile.h"
#include "log.h"

#define LOCK_TEXT_MAX 1024
#define TAKE_TRIES    4 /* stale locks removed and taken again before giving up */

/* Who holds (or wants) a lock. */
typedef struct holder {
    char host[256];
    long pid;
    char job[64]; /* SLURM_JOB_ID ("" outside Slurm) */
    char since[64];
} holder_t;

static void me_(holder_t *h)
{
    memset(h, 0, sizeof *h);
    if (gethostname(h->host, sizeof h->host - 1) != 0) snprintf(h->host, sizeof h->host, "?");
    h->pid = (long)getpid();
    const char *job = getenv("SLURM_JOB_ID");
    snprintf(h->job, sizeof h->job, "%s", job ? job : "");
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(h->since, sizeof h->since, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int format_(const holder_t *h, char *buf, size_t n)
{
    return snprintf(buf, n, "host=%s\npid=%ld\nslurm_job_id=%s\nsince=%s\n", h->host, h->pid,
                    h->job, h->since);
}

/* "key=value" lines; unknown keys and a missing end are tolerated. */
static void parse_(char *text, holder_t *h)
{
    memset(h, 0, sizeof *h);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        const char *v = eq + 1;
        if (strcmp(line, "host") == 0) snprintf(h->host, sizeof h->host, "%s", v);
        if (strcmp(line, "pid") == 0) h->pid = strtol(v, NULL, 10);
        if (strcmp(line, "slurm_job_id") == 0) snprintf(h->job, sizeof h->job, "%s", v);
        if (strcmp(line, "since") == 0) snprintf(h->since, sizeof h->since, "%s", v);
    }
}

/* "Slurm job 42, pid 123 on host n1, since ..." */
static void describe_(const holder_t *h, char *buf, size_t n)
{
    if (!h->host[0]) {
        snprintf(buf, n, "a lock file without a holder's host and pid");
        return;
    }
    char job[96] = "";
    if (h->job[0]) snprintf(job, sizeof job, "Slurm job %s, ", h->job);
    snprintf(buf, n, "%spid %ld on host %s, since %s", job, h->pid, h->host,
             h->since[0] ? h->since : "?");
}

/* An open, flock'ed file with our text: l->fd (the lock already held, as
 * the flock travels with the inode). */
static int open_locked_(const char *path, const holder_t *me, int excl)
{
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC | (excl ? O_EXCL : O_TRUNC), 0644);
    if (fd < 0) return -1;
    (void)flock(fd, LOCK_EX | LOCK_NB); /* where flock does not work, the pid tells */
    char text[LOCK_TEXT_MAX];
    int n = format_(me, text, sizeof text);
    if (atomicfile_write_all(fd, text, (size_t)n, NULL) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(path);
        errno = e;
        return -1;
    }
    return fd;
}

/* Create the lock file whole: our text under a temporary name, then a hard
 * link to the lock's name (which fails when it exists).  *exists when
 * another lock is there. */
static ddp_status_t create_(ckpt_lock_t *l, const char *dir, const holder_t *me, int *exists)
{
    *exists = 0;
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s/" CKPT_LOCK_NAME ".%s.%ld", dir, me->host, me->pid);
    int fd = open_locked_(tmp, me, 0);
    if (fd < 0)
        return ddp_fail(DDP_ERR_IO, "cannot write in --ckpt-dir %s: cannot create %s: %s", dir, tmp,
                        strerror(errno));
    int linked = link(tmp, l->path) == 0, e = errno;
    unlink(tmp);
    if (linked) {
        l->fd = fd;
        l->held = 1;
        return DDP_OK;
    }
    close(fd);
    if (e == EEXIST) {
        *exists = 1;
        return DDP_OK;
    }
    /* a file system without hard links: create the name itself */
    fd = open_locked_(l->path, me, 1);
    if (fd >= 0) {
        l->fd = fd;
        l->held = 1;
        return DDP_OK;
    }
    if (errno == EEXIST) {
        *exists = 1;
        return DDP_OK;
    }
    return ddp_fail(DDP_ERR_IO, "cannot write in --ckpt-dir %s: cannot create the lock file %s: %s",
                    dir, l->path, strerror(errno));
}

typedef enum { LOCK_GONE, LOCK_LIVE, LOCK_STALE, LOCK_REQUEUED, LOCK_UNKNOWN } lock_state_t;

/* What the lock file found is, and its holder. */
static lock_state_t inspect_(const char *path, const holder_t *me, holder_t *other)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? LOCK_GONE : LOCK_UNKNOWN; /* GONE: removed meanwhile */
    char text[LOCK_TEXT_MAX];
    ssize_t n = read(fd, text, sizeof text - 1);
    text[n > 0 ? n : 0] = '\0';
    parse_(text, other);
    lock_state_t st = LOCK_UNKNOWN;
    if (other->host[0] && strcmp(other->host, me->host) == 0) {
        /* this host: its holder keeps an flock on it while it runs */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            st = LOCK_STALE;
        else if (errno == EWOULDBLOCK)
            st = LOCK_LIVE;
        else /* no flock here: does the pid exist? */
            st = other->pid > 0 && (kill((pid_t)other->pid, 0) == 0 || errno == EPERM) ? LOCK_LIVE
                                                                                       : LOCK_STALE;
        if (st == LOCK_STALE) {
            /* still the file we judged (not one a third job made meanwhile)? */
            struct stat a, b;
            if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_ino != b.st_ino ||
                a.st_dev != b.st_dev)
                st = LOCK_GONE;
        }
    } else if (other->host[0] && me->job[0] && strcmp(other->job, me->job) == 0) {
        st = LOCK_REQUEUED; /* this Slurm job before its requeue: it has ended */
    }
    close(fd);
    return st;
}

ddp_status_t ckpt_lock_take(ckpt_lock_t *l, const char *dir)
{
    holder_t me, other;
    me_(&me);
    l->held = 0;
    l->fd = -1;
    snprintf(l->path, sizeof l->path, "%s/" CKPT_LOCK_NAME, dir);
    for (int i = 0; i < TAKE_TRIES; i++) {
        int exists;
        DDP_TRY(create_(l, dir, &me, &exists));
        if (!exists) return DDP_OK;
        lock_state_t st = inspect_(l->path, &me, &other);
        char who[512];
        describe_(&other, who, sizeof who);
        if (st == LOCK_LIVE)
            return ddp_fail(DDP_ERR_USAGE,
                            "--ckpt-dir %s is in use by another job (%s); two jobs in one "
                            "checkpoint directory remove and overwrite each other's "
                            "checkpoints: give this job another --ckpt-dir",
                            dir, who);
        if (st == LOCK_UNKNOWN)
            return ddp_fail(DDP_ERR_USAGE,
                            "--ckpt-dir %s is locked by a job on another host (%s) that cannot "
                            "be checked from here; if that job has ended, delete %s, otherwise "
                            "give this job another --ckpt-dir",
                            dir, who, l->path);
        if (st == LOCK_GONE) continue;
        if (unlink(l->path) != 0 && errno != ENOENT)
            return ddp_fail(DDP_ERR_IO, "cannot remove the stale lock file %s: %s", l->path,
                            strerror(errno));
        log_info("--ckpt-dir %s: took over the lock of %s (%s)", dir,
                 st == LOCK_REQUEUED ? "this Slurm job before its restart"
                                     : "a job that ended without removing it",
                 who);
    }
    return ddp_fail(DDP_ERR_IO,
                    "cannot take the lock file %s: other jobs keep taking it; give this job "
                    "another --ckpt-dir",
                    l->path);
}

void ckpt_lock_release(ckpt_lock_t *l)
{
    if (!l->held) return;
    struct stat a, b;
    if (fstat(l->fd, &a) == 0 && stat(l->path, &b) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev)
        unlink(l->path);
    close(l->fd);
    l->held = 0;
    l->fd = -1;
}
