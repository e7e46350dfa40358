/* sysmem.c -- memory this process may still use (see sysmem.h). */
#include "sysmem.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* The value of "Key:   1234 kB" in a /proc file, in bytes; 0 if absent. */
static size_t proc_kb_(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t klen = strlen(key), v = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (strncmp(line, key, klen) == 0 && line[klen] == ':' &&
            sscanf(line + klen + 1, "%llu", &kb) == 1) {
            v = (size_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

/* A cgroup v2 file holding one number (or "max"); 0 if absent or "max". */
static size_t cgroup_value_(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s", name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return (size_t)v;
}

size_t sysmem_available(const char **what)
{
    size_t best = SIZE_MAX;
    const char *name = "unknown";
    size_t avail = proc_kb_("/proc/meminfo", "MemAvailable");
    if (avail > 0) {
        best = avail;
        name = "MemAvailable";
    }
    size_t cg_max = cgroup_value_("memory.max"), cg_cur = cgroup_value_("memory.current");
    if (cg_max > 0) {
        size_t room = cg_max > cg_cur ? cg_max - cg_cur : 0;
        if (room < best) {
            best = room;
            name = "the cgroup memory.max";
        }
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        size_t used = proc_kb_("/proc/self/status", "VmSize");
        size_t room = (size_t)rl.rlim_cur > used ? (size_t)rl.rlim_cur - used : 0;
        if (room < best) {
            best = room;
            name = "ulimit -v";
        }
    }
    if (what) *what = name;
    return best;
}

const char *sysmem_format(double bytes, char *buf, size_t n)
{
    if (bytes >= 1024.0 * 1024 * 1024 * 1024)
        snprintf(buf, n, "%.1f TiB", bytes / (1024.0 * 1024 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024));
    return buf;
}
