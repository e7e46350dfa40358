/* pathclash.h -- outputs that would be written over inputs or over each other.
 *
 * Every tool lists the files it reads and the files it writes, each with the
 * role a user knows it by ("--metrics", "-o", "input file 2"), and asks
 * pathclash_check before it opens any output.  Two entries are the same file
 * when both exist and stat() gives the same device and inode (through
 * symbolic and hard links), or, for names that do not exist yet, when their
 * directory resolves (realpath) to the same place and the last component is
 * the same.  Existing entries must be regular files (directories for
 * PATHCLASH_DIR): a FIFO, device or socket would block or never end, and is
 * refused by stat() alone, never opened.
 *
 * A PATHCLASH_DIR is a directory a tool writes files into under names its
 * `owns` predicate recognises (--ckpt-dir and its checkpoint names): an
 * output, or an input not marked dir_ok, whose name resolves into it with
 * such a name is a clash too.
 */
#ifndef DDP_PATHCLASH_H
#define DDP_PATHCLASH_H

#include <stdint.h>

#include "status.h"

typedef enum pathclash_kind {
    PATHCLASH_IN,  /* read by the tool */
    PATHCLASH_OUT, /* written (created or replaced) by the tool */
    PATHCLASH_DIR  /* a directory the tool writes its own names into */
} pathclash_kind_t;

typedef struct pathclash_file {
    const char *role; /* "--metrics", "-o", "input file 2": for the message */
    const char *path; /* NULL or "" entries are skipped */
    pathclash_kind_t kind;
    /* PATHCLASH_DIR: the file names (last component) the tool writes in it */
    int (*owns)(const char *name);
    /* PATHCLASH_IN: may be one of a PATHCLASH_DIR's own files (--resume,
     * read once at start-up) */
    int dir_ok;
} pathclash_file_t;

/* The first problem among files[0..n): an existing entry of the wrong kind
 * (not a regular file, or not a directory for PATHCLASH_DIR), then an
 * output that is the same file as an earlier or later entry, or a file
 * named like one a PATHCLASH_DIR's owner writes.  One line naming the
 * role(s) and path(s) and what to do: DDP_ERR_INPUT for an input that is no
 * regular file, DDP_ERR_USAGE for everything else; DDP_OK when none.
 * Inputs may be the same file as each other (the tools judge that). */
ddp_status_t pathclash_check(const pathclash_file_t *files, int n);

/* The names checkpoints take in --ckpt-dir: ckpt_<digits>.h5.  The step a
 * name stands for, or -1 when it is no checkpoint's name; checkpoint.c
 * names and finds its files by it. */
#define PATHCLASH_CKPT_PREFIX "ckpt_"
#define PATHCLASH_CKPT_SUFFIX ".h5"
int64_t pathclash_ckpt_step(const char *name);
/* pathclash_ckpt_step(name) >= 0, as an `owns` predicate. */
int pathclash_is_ckpt_name(const char *name);

#endif
