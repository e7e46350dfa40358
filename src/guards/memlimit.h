/* memlimit.h -- the memory a rank may still take: the address-space limit
 * (`ulimit -v`, RLIMIT_AS), the memory limit of its cgroup (Slurm's
 * --mem, Docker's --memory), and the machine's available memory; and the
 * start-up check of a run's estimate against them, so that a run that
 * will not fit says so before it allocates (a limit reached inside a
 * library can hang: OpenBLAS retries its work-buffer mmap forever). */
#ifndef DDP_MEMLIMIT_H
#define DDP_MEMLIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define MEMLIMIT_NONE UINT64_MAX

/* Address space OpenBLAS maps for the work buffer of a thread that calls
 * it (its BUFFER_SIZE on x86-64: one mmap of 128 MiB at the first call). */
#define MEMLIMIT_BLAS_BUFFER ((uint64_t)128 << 20)
/* Address space a thread that allocates adds: its stack (the default
 * RLIMIT_STACK, 8 MiB) and a glibc malloc arena (64 MiB reserved). */
#define MEMLIMIT_THREAD ((uint64_t)72 << 20)

typedef struct memlimit {
    uint64_t as_limit; /* RLIMIT_AS soft limit (MEMLIMIT_NONE: unlimited) */
    uint64_t as_used;  /* this process's address space now (VmSize) */
    uint64_t cg_limit; /* the tightest cgroup memory limit on the way to the root */
    uint64_t cg_used;  /* that cgroup's usage now */
    char cg_file[1100]; /* the file the limit came from ("" when none) */
    uint64_t available; /* /proc/meminfo MemAvailable (MEMLIMIT_NONE: unknown) */
    uint64_t swap_free; /* /proc/meminfo SwapFree (0 when unknown) */
} memlimit_t;

/* Read the limits.  proc and cgroup are the mount points (NULL: "/proc"
 * and "/sys/fs/cgroup"; tests pass a directory of their own).  Anything
 * that cannot be read counts as no limit. */
void memlimit_probe(memlimit_t *l, const char *proc, const char *cgroup);

/* Bytes this process can still allocate: the least of MemAvailable, the
 * cgroup's room and the address space left under ulimit -v (MEMLIMIT_NONE
 * when none is known); *what (if not NULL) names the binding one
 * ("MemAvailable", "the cgroup memory limit", "ulimit -v"). */
uint64_t memlimit_available(const memlimit_t *l, const char **what);

/* bytes as "512.0 MiB", "3.7 GiB" or "1.2 TiB" in buf; returns buf. */
const char *memlimit_format(double bytes, char *buf, size_t n);

/* What a rank is about to take: `resident` bytes it will touch (buffers),
 * `address` bytes of address space beyond that (BLAS buffers, threads). */
typedef struct mem_need {
    uint64_t resident;
    uint64_t address;
} mem_need_t;

/* DDP_ERR_NOMEM with one line (what is needed, the limit, where it comes
 * from, what to do) when `need` on each of `local_ranks` ranks of this
 * node does not fit: under the address-space limit (per rank), in the
 * cgroup's remaining room or in the machine's available memory and free
 * swap (shared by the node's ranks).  Beyond MemAvailable but within swap
 * only warns (through *warn, "" if none). */
ddp_status_t memlimit_check(const memlimit_t *l, const mem_need_t *need, int local_ranks,
                            char *warn, size_t warn_len);

#endif
