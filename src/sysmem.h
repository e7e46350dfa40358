/* sysmem.h -- how much memory this process may still use, for start-up
 * checks that refuse absurd sizes with a message instead of an allocation
 * the kernel kills or a malloc that fails halfway. */
#ifndef DDP_SYSMEM_H
#define DDP_SYSMEM_H

#include <stddef.h>

/* Bytes this process can still allocate: the least of MemAvailable
 * (/proc/meminfo), the cgroup v2 limit's headroom (memory.max -
 * memory.current) and the address-space limit's headroom (RLIMIT_AS minus
 * the current VmSize).  SIZE_MAX when none of them is known.  If `what` is
 * non-NULL it receives the name of the binding limit ("MemAvailable",
 * "the cgroup memory.max", "ulimit -v"). */
size_t sysmem_available(const char **what);

/* Bytes as "3.7 GiB" / "512.0 MiB" into buf. */
const char *sysmem_format(double bytes, char *buf, size_t n);

#endif
