/* memlimit.c -- memory limits and the start-up check against them (see
 * memlimit.h). */
#define _GNU_SOURCE
#include "memlimit.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* The first number after `key` in file path, in the file's units. */
static int read_key_(const char *path, const char *key, uint64_t *v)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    size_t kl = strlen(key);
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0) ok = sscanf(line + kl, "%" SCNu64, v) == 1;
    fclose(f);
    return ok;
}

/* A file holding one number or "max" (MEMLIMIT_NONE). */
static int read_num_(const char *path, uint64_t *v)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    if (strncmp(buf, "max", 3) == 0) {
        *v = MEMLIMIT_NONE;
        return 1;
    }
    char *end;
    unsigned long long x = strtoull(buf, &end, 10);
    if (end == buf) return 0;
    *v = (uint64_t)x;
    return 1;
}

static int is_dir_(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* One cgroup directory's limit and usage: v2 memory.max/memory.current,
 * v1 memory.limit_in_bytes/memory.usage_in_bytes.  Keeps the tightest
 * room (limit - usage) in l. */
static void cg_dir_(memlimit_t *l, const char *dir, int v2)
{
    char lim[1100], use[1100];
    snprintf(lim, sizeof lim, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    snprintf(use, sizeof use, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    uint64_t L, U = 0;
    /* v1 writes "no limit" as a huge number near 2^63 */
    if (!read_num_(lim, &L) || L == MEMLIMIT_NONE || L >= ((uint64_t)1 << 62)) return;
    read_num_(use, &U);
    uint64_t room = L > U ? L - U : 0;
    uint64_t old = l->cg_limit == MEMLIMIT_NONE ? MEMLIMIT_NONE
                   : l->cg_limit > l->cg_used   ? l->cg_limit - l->cg_used
                                                : 0;
    if (room < old) {
        l->cg_limit = L;
        l->cg_used = U;
        snprintf(l->cg_file, sizeof l->cg_file, "%s", lim);
    }
}

/* Walk from this process's cgroup up to the root of the mount: a limit on
 * any ancestor applies too.  Where the process's path is not under the
 * mount (a cgroup namespace shows the process's own group as the root),
 * the mount's root is the group. */
static void cg_walk_(memlimit_t *l, const char *mount, const char *rel, int v2)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s%s", mount, rel);
    if (!is_dir_(dir)) snprintf(dir, sizeof dir, "%s", mount);
    size_t root = strlen(mount);
    for (;;) {
        cg_dir_(l, dir, v2);
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < root) break;
        *slash = '\0';
    }
}

static void cgroups_(memlimit_t *l, const char *proc, const char *cgroup)
{
    char path[600];
    snprintf(path, sizeof path, "%s/self/cgroup", proc);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        /* "ID:CONTROLLERS:PATH"; v2 is "0::PATH" */
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1, *rel = c2 + 1;
        char mount[700];
        if (!*ctrl) {
            /* v2: the unified hierarchy at the mount point itself, or at
             * its "unified" directory on hybrid systems */
            snprintf(mount, sizeof mount, "%s/unified", cgroup);
            if (!is_dir_(mount)) snprintf(mount, sizeof mount, "%s", cgroup);
            cg_walk_(l, mount, strcmp(rel, "/") == 0 ? "" : rel, 1);
        } else if (strstr(ctrl, "memory")) {
            snprintf(mount, sizeof mount, "%s/memory", cgroup);
            cg_walk_(l, mount, strcmp(rel, "/") == 0 ? "" : rel, 0);
        }
    }
    fclose(f);
}

void memlimit_probe(memlimit_t *l, const char *proc, const char *cgroup)
{
    if (!proc) proc = "/proc";
    if (!cgroup) cgroup = "/sys/fs/cgroup";
    memset(l, 0, sizeof *l);
    l->as_limit = l->cg_limit = l->available = MEMLIMIT_NONE;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        l->as_limit = (uint64_t)rl.rlim_cur;
    char path[600];
    uint64_t kib;
    snprintf(path, sizeof path, "%s/self/status", proc);
    if (read_key_(path, "VmSize:", &kib)) l->as_used = kib << 10;
    snprintf(path, sizeof path, "%s/meminfo", proc);
    if (read_key_(path, "MemAvailable:", &kib)) l->available = kib << 10;
    if (read_key_(path, "SwapFree:", &kib)) l->swap_free = kib << 10;
    cgroups_(l, proc, cgroup);
}

static double mib_(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

uint64_t memlimit_available(const memlimit_t *l, const char **what)
{
    uint64_t best = l->available;
    const char *name = "MemAvailable";
    if (l->cg_limit != MEMLIMIT_NONE) {
        uint64_t room = l->cg_limit > l->cg_used ? l->cg_limit - l->cg_used : 0;
        if (room < best) best = room, name = "the cgroup memory limit";
    }
    if (l->as_limit != MEMLIMIT_NONE) {
        uint64_t room = l->as_limit > l->as_used ? l->as_limit - l->as_used : 0;
        if (room < best) best = room, name = "ulimit -v";
    }
    if (what) *what = best == MEMLIMIT_NONE ? "no known limit" : name;
    return best;
}

const char *memlimit_format(double bytes, char *buf, size_t n)
{
    const double gib = 1024.0 * 1024 * 1024;
    if (bytes >= 1024 * gib)
        snprintf(buf, n, "%.1f TiB", bytes / (1024 * gib));
    else if (bytes >= gib)
        snprintf(buf, n, "%.1f GiB", bytes / gib);
    else
        snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024));
    return buf;
}

ddp_status_t memlimit_check(const memlimit_t *l, const mem_need_t *need, int local_ranks,
                            char *warn, size_t warn_len)
{
    if (warn_len) warn[0] = '\0';
    uint64_t n = local_ranks > 0 ? (uint64_t)local_ranks : 1;
    char a[32], b[32], c[32], e[32], f[32];
    if (l->as_limit != MEMLIMIT_NONE) {
        uint64_t total = l->as_used + need->resident + need->address;
        if (total > l->as_limit)
            return ddp_fail(DDP_ERR_NOMEM,
                            "memory: each rank needs about %.0f MiB of address space (%.0f MiB "
                            "in use now + %.0f MiB for the model, optimizer, activations, "
                            "batches and checkpoint or --save copies + %.0f MiB for BLAS work "
                            "buffers and threads), more than "
                            "its limit of %.0f MiB (ulimit -v); raise the limit, or lower "
                            "--batch or the model size",
                            mib_(total), mib_(l->as_used), mib_(need->resident),
                            mib_(need->address), mib_(l->as_limit));
    }
    /* the node's ranks together (a double: an absurd model overflows) */
    double node = (double)need->resident * (double)n;
    const char *ranks = n > 1 ? "ranks on this node need" : "rank on this node needs";
    if (l->cg_limit != MEMLIMIT_NONE) {
        uint64_t room = l->cg_limit > l->cg_used ? l->cg_limit - l->cg_used : 0;
        if (node > (double)room)
            return ddp_fail(DDP_ERR_NOMEM,
                            "memory: %llu %s about %s more (%s each), but the cgroup memory "
                            "limit leaves %s (%s: %s, %s in use); ask for more memory (sbatch "
                            "--mem, docker --memory), run fewer ranks per node, or lower --batch "
                            "or the model size",
                            (unsigned long long)n, ranks, memlimit_format(node, a, sizeof a),
                            memlimit_format((double)need->resident, b, sizeof b),
                            memlimit_format((double)room, c, sizeof c), l->cg_file,
                            memlimit_format((double)l->cg_limit, e, sizeof e),
                            memlimit_format((double)l->cg_used, f, sizeof f));
    }
    if (l->available == MEMLIMIT_NONE || node <= (double)l->available) return DDP_OK;
    if (node > (double)l->available + (double)l->swap_free)
        return ddp_fail(DDP_ERR_NOMEM,
                        "memory: %llu %s about %s (%s each), more than the machine has "
                        "available (%s MemAvailable + %s free swap); use a smaller model or "
                        "--batch, or fewer ranks per node",
                        (unsigned long long)n, ranks, memlimit_format(node, a, sizeof a),
                        memlimit_format((double)need->resident, b, sizeof b),
                        memlimit_format((double)l->available, c, sizeof c),
                        memlimit_format((double)l->swap_free, e, sizeof e));
    if (warn_len)
        snprintf(warn, warn_len,
                 "memory: %llu %s about %s, more than the %s the machine has available "
                 "(MemAvailable): expect swapping, or lower --batch or the model size",
                 (unsigned long long)n, ranks, memlimit_format(node, a, sizeof a),
                 memlimit_format((double)l->available, c, sizeof c));
    return DDP_OK;
}
