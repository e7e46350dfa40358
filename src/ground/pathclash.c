/* pathclash.c -- outputs written over inputs or over each other: the one
 * check every tool makes before it opens an output (see pathclash.h). */
#define _GNU_SOURCE
#include "pathclash.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"

#define PATH_MAX_ 4096
#define HOPS_MAX_ 40 /* dangling symbolic links followed, as the kernel's limit */

/* What one entry is on disk: its inode when it exists, else the name it
 * would be created under, resolved. */
typedef struct ident_ {
    int exists;
    dev_t dev;
    ino_t ino;
    char canon[PATH_MAX_]; /* realpath, or realpath of the directory + "/" + name */
} ident_t;

/* the last component of p (p itself when it has no '/') */
static const char *base_(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* out (PATH_MAX_ bytes) = s, cut to fit */
static void copy_(char *out, const char *s)
{
    size_t len = strlen(s);
    if (len >= PATH_MAX_) len = PATH_MAX_ - 1;
    memcpy(out, s, len);
    out[len] = '\0';
}

/* The resolved name of path: realpath() when it exists; for a name not
 * there yet, the resolved directory and the last component; a dangling
 * symbolic link followed to the name it would create. */
static void canon_(const char *path, char *out, int hops)
{
    char buf[PATH_MAX_];
    if (realpath(path, buf)) {
        copy_(out, buf);
        return;
    }
    char dir[PATH_MAX_];
    snprintf(dir, sizeof dir, "%s", path);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0'; /* "out/" names "out" */
    char *slash = strrchr(dir, '/');
    const char *name = slash ? slash + 1 : dir;
    char name_copy[PATH_MAX_];
    snprintf(name_copy, sizeof name_copy, "%s", name);
    if (slash == dir)
        strcpy(dir, "/");
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    char rdir[PATH_MAX_];
    if (!realpath(dir, rdir)) { /* no such directory (yet): resolve what is there */
        if (hops >= HOPS_MAX_) {
            copy_(out, path);
            return;
        }
        canon_(dir, rdir, hops + 1);
    }
    if (!strcmp(name_copy, ".") || !strcmp(name_copy, "..")) {
        char *up = strrchr(rdir, '/');
        if (!strcmp(name_copy, "..") && up == rdir)
            rdir[1] = '\0'; /* "/.." is "/" */
        else if (!strcmp(name_copy, "..") && up)
            *up = '\0';
        copy_(out, rdir);
        return;
    }
    char joined[2 * PATH_MAX_ + 2];
    snprintf(joined, sizeof joined, "%s%s%s", rdir, strcmp(rdir, "/") ? "/" : "", name_copy);
    /* a dangling link: writing through it creates its target */
    struct stat ls;
    char target[PATH_MAX_];
    ssize_t k;
    if (hops < HOPS_MAX_ && lstat(joined, &ls) == 0 && S_ISLNK(ls.st_mode) &&
        (k = readlink(joined, target, sizeof target - 1)) > 0) {
        target[k] = '\0';
        char next[2 * PATH_MAX_];
        if (target[0] == '/')
            snprintf(next, sizeof next, "%s", target);
        else
            snprintf(next, sizeof next, "%s/%s", rdir, target);
        canon_(next, out, hops + 1);
        return;
    }
    copy_(out, joined);
}

static void ident_(const char *path, ident_t *id, struct stat *st)
{
    id->exists = stat(path, st) == 0;
    id->dev = id->exists ? st->st_dev : 0;
    id->ino = id->exists ? st->st_ino : 0;
    canon_(path, id->canon, 0);
}

static int same_(const ident_t *a, const ident_t *b)
{
    if (a->exists || b->exists)
        return a->exists && b->exists && a->dev == b->dev && a->ino == b->ino;
    return strcmp(a->canon, b->canon) == 0;
}

/* does the entry's resolved name lie directly in dir under a name it owns? */
static int in_dir_(const ident_t *id, const ident_t *dir, int (*owns)(const char *))
{
    const char *name = base_(id->canon);
    size_t dl = (size_t)(name - id->canon);
    if (!owns || !owns(name) || dl == 0) return 0;
    /* id->canon is "<dir>/<name>": compare <dir> with the directory's name */
    size_t cl = strlen(dir->canon);
    if (dl == 1) return strcmp(dir->canon, "/") == 0; /* "/name" */
    return cl == dl - 1 && strncmp(id->canon, dir->canon, cl) == 0;
}

static int skip_(const pathclash_file_t *f)
{
    return !f->path || !f->path[0];
}

ddp_status_t pathclash_check(const pathclash_file_t *files, int n)
{
    if (n <= 0) return DDP_OK;
    ident_t *id = calloc((size_t)n, sizeof *id);
    if (!id) return ddp_fail(DDP_ERR_NOMEM, "out of memory checking the output names");
    ddp_status_t s = DDP_OK;
    /* what each entry is: regular files, directories for PATHCLASH_DIR */
    for (int i = 0; i < n && s == DDP_OK; i++) {
        const pathclash_file_t *f = &files[i];
        if (skip_(f)) continue;
        struct stat st;
        ident_(f->path, &id[i], &st);
        if (!id[i].exists) continue;
        if (f->kind == PATHCLASH_DIR && !S_ISDIR(st.st_mode))
            s = ddp_fail(DDP_ERR_USAGE, "%s %s is not a directory (it is %s); name a directory",
                         f->role, f->path, atomicfile_kind(st.st_mode));
        else if (f->kind != PATHCLASH_DIR && !S_ISREG(st.st_mode))
            s = ddp_fail(f->kind == PATHCLASH_IN ? DDP_ERR_INPUT : DDP_ERR_USAGE,
                         "%s %s is %s, not a regular file (%s); name a regular file", f->role,
                         f->path, atomicfile_kind(st.st_mode),
                         S_ISDIR(st.st_mode) ? "it cannot be read or written as one"
                                             : "it could block or never end");
    }
    /* an output the same file as any other entry; two inputs may be */
    for (int i = 0; i < n && s == DDP_OK; i++) {
        for (int j = i + 1; j < n && s == DDP_OK; j++) {
            const pathclash_file_t *a = &files[i], *b = &files[j];
            if (skip_(a) || skip_(b)) continue;
            if (a->kind == PATHCLASH_IN && b->kind == PATHCLASH_IN) continue;
            if (!same_(&id[i], &id[j])) continue;
            /* the one to rename: the output (the later one of two) */
            const pathclash_file_t *out = b->kind != PATHCLASH_IN ? b : a;
            const pathclash_file_t *other = out == b ? a : b;
            s = ddp_fail(DDP_ERR_USAGE,
                         "%s %s is %s %s (the same file); writing %s would replace it: choose "
                         "another %s name",
                         out->role, out->path, other->role, other->path, out->role, out->role);
        }
    }
    /* a file named like one a directory's owner writes there */
    for (int d = 0; d < n && s == DDP_OK; d++) {
        if (skip_(&files[d]) || files[d].kind != PATHCLASH_DIR) continue;
        for (int i = 0; i < n && s == DDP_OK; i++) {
            const pathclash_file_t *f = &files[i];
            if (i == d || skip_(f) || f->kind == PATHCLASH_DIR) continue;
            if (f->kind == PATHCLASH_IN && f->dir_ok) continue;
            if (!in_dir_(&id[i], &id[d], files[d].owns)) continue;
            s = ddp_fail(DDP_ERR_USAGE,
                         "%s %s is named like the files written in %s %s; they would replace "
                         "or remove it: choose another %s name or directory",
                         f->role, f->path, files[d].role, files[d].path, f->role);
        }
    }
    free(id);
    return s;
}

int64_t pathclash_ckpt_step(const char *name)
{
    size_t lp = strlen(PATHCLASH_CKPT_PREFIX), ls = strlen(PATHCLASH_CKPT_SUFFIX),
           n = strlen(name);
    if (n <= lp + ls || strncmp(name, PATHCLASH_CKPT_PREFIX, lp) != 0 ||
        strcmp(name + n - ls, PATHCLASH_CKPT_SUFFIX) != 0)
        return -1;
    int64_t v = 0;
    for (size_t i = lp; i < n - ls; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

int pathclash_is_ckpt_name(const char *name)
{
    return pathclash_ckpt_step(name) >= 0;
}
