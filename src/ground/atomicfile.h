/* atomicfile.h -- files that appear whole or not at all.
 *
 * A file is written under a temporary name next to its final one
 * (PATH.tmp.<host>.<pid>), flushed to disk (fsync), renamed over PATH, and
 * the directory is flushed too, so after a crash, a kill -9 or a full disk
 * PATH is either the old file or the complete new one.  A leftover temporary
 * file keeps its recognisable name (ATOMICFILE_TMP_INFIX): nothing ever takes
 * it for a finished file, and the next run removes it when it is stale: made
 * on this host by a process that no longer exists (a file of another host,
 * or of a live process, is never removed: its writer may still be at work).
 *
 * The target: a symlink is written through (the new file replaces the
 * link's final target, in the target's directory; the link stays); a target
 * that exists and is not a regular file (a directory, FIFO, device, socket)
 * is refused, so a save never replaces /dev/null or a named pipe. */
#ifndef DDP_ATOMICFILE_H
#define DDP_ATOMICFILE_H

#include <stddef.h>
#include <sys/types.h>

#include "status.h"

#define ATOMICFILE_TMP_INFIX ".tmp."

/* What a file of mode m is, for messages: "a directory", "a FIFO", ... */
const char *atomicfile_kind(mode_t m);

/* Where a write of path goes: path, or the final target of a symlink
 * (also one that does not exist yet).  DDP_ERR_USAGE when the target exists
 * and is not a regular file, or the links loop; the message starts with
 * path.  `what` names it for the message ("--save"; "" for none). */
ddp_status_t atomicfile_target(const char *what, const char *path, char *out, size_t n);

/* The temporary name of path for this process: PATH.tmp.<host>.<pid>
 * (path as given: resolve it with atomicfile_target first). */
void atomicfile_tmp_name(const char *path, char *buf, size_t n);

typedef enum atomicfile_tmp_kind {
    ATOMICFILE_NOT_TMP = 0,  /* not a temporary file name of ours */
    ATOMICFILE_TMP_STALE,    /* ours, this host, its process is gone: safe to remove */
    ATOMICFILE_TMP_LIVE,     /* ours, this host, its process (or one with its pid) lives */
    ATOMICFILE_TMP_ELSEWHERE /* ours, made on another host: cannot tell, kept */
} atomicfile_tmp_kind_t;
/* Is the file name `name` (no directory) a temporary file of ours?  With
 * target (a file name) only for that target; with target NULL for any, and
 * *target_len (if not NULL) is the length of the target's name in name. */
atomicfile_tmp_kind_t atomicfile_tmp_classify(const char *name, const char *target,
                                              size_t *target_len);
/* Remove the stale temporary files of path (see above) in its directory;
 * returns how many were removed, *kept (may be NULL) how many of others
 * (another host, a live process) were left. */
int atomicfile_remove_stale(const char *path, int *kept);

/* At start-up: can path be written?  Resolves it (atomicfile_target),
 * removes its stale temporary files (*removed, *kept as in
 * atomicfile_remove_stale; either may be NULL), and creates, writes one
 * 4 KiB block to (a full disk fails here) and removes this process's
 * temporary file next to the target.  On failure nothing is
 * left behind; DDP_ERR_USAGE for a target that is not a regular file,
 * DDP_ERR_IO for a directory that is missing or not writable. */
ddp_status_t atomicfile_probe(const char *what, const char *path, int *removed, int *kept);

/* Write len bytes as path (see above).  On failure nothing is left under
 * the temporary name and path is unchanged; the message names the cause
 * (disk full, permissions, a target that is not a regular file) and says
 * that path was left as it was. */
ddp_status_t atomicfile_write(const char *path, const void *data, size_t len);
/* The last steps of an atomic write whose temporary file tmp is complete
 * and closed: fsync it, rename it over path, fsync the directory.  On
 * failure tmp is removed. */
ddp_status_t atomicfile_finish(const char *tmp, const char *path);
/* fsync a file (dir = 0) or a directory (dir = 1); 0 on success. */
int atomicfile_fsync(const char *path, int dir);

/* What to do about a failed open, create or write with errno e, as
 * " (...)" to append to the message (disk full, read-only file system,
 * permission denied, a missing directory, a symbolic link loop), or "". */
const char *atomicfile_advice(int e);

/* All n bytes of data to fd (write() again after a short write or EINTR):
 * 0, or -1 with errno (ENOSPC when write() takes nothing); *written (may
 * be NULL) counts the bytes that went. */
int atomicfile_write_all(int fd, const void *data, size_t n, size_t *written);

#endif
