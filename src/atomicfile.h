/* atomicfile.h -- files that appear whole or not at all.
 *
 * A file is written under a temporary name next to its final one
 * (PATH.tmp.<pid>), flushed to disk (fsync), renamed over PATH, and the
 * directory is flushed too, so after a crash, a kill -9 or a full disk PATH
 * is either the old file or the complete new one.  A leftover temporary file
 * keeps its recognisable name (ATOMICFILE_TMP_INFIX): nothing ever takes it
 * for a finished file, and the next run can remove it. */
#ifndef DDP_ATOMICFILE_H
#define DDP_ATOMICFILE_H

#include <stddef.h>

#include "status.h"

#define ATOMICFILE_TMP_INFIX ".tmp."

/* The temporary name of path for this process: PATH.tmp.<pid>. */
void atomicfile_tmp_name(const char *path, char *buf, size_t n);
/* Write len bytes as path (see above).  On failure nothing is left under
 * the temporary name and path is unchanged; the message names the cause
 * (disk full, permissions) and says that path was left as it was. */
ddp_status_t atomicfile_write(const char *path, const void *data, size_t len);
/* The last steps of an atomic write whose temporary file tmp is complete
 * and closed: fsync it, rename it over path, fsync the directory.  On
 * failure tmp is removed. */
ddp_status_t atomicfile_finish(const char *tmp, const char *path);
/* fsync a file (dir = 0) or a directory (dir = 1); 0 on success. */
int atomicfile_fsync(const char *path, int dir);

#endif
