/* collcheck.c -- the --debug-collectives check (see collcheck.h). */
#include "collcheck.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activity.h"
#include "hash.h"
#include "jobreport.h"
#include "watchdog.h"

static struct {
    int rank, size;
    const control_t *ctl; /* its host names */
    MPI_Comm comm;        /* the check's own communicator */
} cc_ = {.comm = MPI_COMM_NULL};

static const char *host_(int r)
{
    return cc_.ctl ? control_host(cc_.ctl, r) : "?";
}

/* --debug-collectives: every rank hashes the descriptor of the collective
 * it is about to start; the minimum and maximum over ranks agree when every
 * rank is in the same one. */
static void debug_check_(void *arg, const activity_coll_t *c)
{
    (void)arg;
    /* the collective runs on the plane its name belongs to (activity.h) */
    int plane = activity_plane_of(c->what);
    if (plane != c->plane) {
        static jobreport_t t;
        char what[192];
        activity_coll_format(c, what, sizeof what);
        if (plane < 0)
            jobreport_add(&t,
                          "--debug-collectives: %s, on the %s plane, has a name that the table of "
                          "planes does not know; add it (activity.c)\n",
                          what, activity_plane_name(c->plane));
        else
            jobreport_add(
                &t,
                "--debug-collectives: %s was started on the %s plane, but it belongs to the "
                "%s plane (step.h, \"Planes\": control collectives on control_*, gradient buckets and "
                "SyncBatchNorm on comm_*)\n",
                what, activity_plane_name(c->plane), activity_plane_name(plane));
        if (cc_.rank != 0) usleep(2000000); /* rank 0's line first */
        watchdog_end_job(&t, 6);
    }
    uint64_t h = HASH_SEED;
    h = hash_bytes(h, c->what, strlen(c->what));
    h = hash_bytes(h, c->op, strlen(c->op));
    int64_t fields[3] = {c->step, c->index, c->plane};
    h = hash_bytes(h, fields, sizeof fields);
    uint64_t mine[2] = {h, ~h}, agg[2];
    activity_block(c->number, c);
    int rc = MPI_Allreduce(mine, agg, 2, MPI_UINT64_T, MPI_MIN, cc_.comm);
    activity_unblock();
    if (rc == MPI_SUCCESS && agg[0] == ~agg[1]) return;
    /* they differ: everyone learns everyone's descriptor, rank 0 reports */
    char mine_text[192];
    activity_coll_format(c, mine_text, sizeof mine_text);
    char *all = calloc((size_t)cc_.size, sizeof mine_text);
    if (rc != MPI_SUCCESS || !all ||
        MPI_Allgather(mine_text, sizeof mine_text, MPI_CHAR, all, sizeof mine_text, MPI_CHAR,
                      cc_.comm) != MPI_SUCCESS) {
        static jobreport_t t = {"--debug-collectives: the ranks are not in the same collective\n",
                                0};
        watchdog_end_job(&t, 6);
    }
    if (cc_.rank != 0) {
        sleep(10); /* rank 0 reports and ends the job */
        MPI_Abort(MPI_COMM_WORLD, 6);
    }
    static jobreport_t t;
    jobreport_add(
        &t,
        "--debug-collectives: the ranks are not in the same collective at collective #%llu "
        "(every rank must start the same collectives in the same order):\n",
        (unsigned long long)c->number);
    unsigned char *group = calloc((size_t)cc_.size, 1), *done = calloc((size_t)cc_.size, 1);
    for (int r = 0; r < cc_.size && group && done; r++) {
        if (done[r]) continue;
        memset(group, 0, (size_t)cc_.size);
        const char *d = all + (size_t)r * sizeof mine_text;
        int n = 0;
        for (int q = r; q < cc_.size; q++)
            if (!done[q] && strcmp(d, all + (size_t)q * sizeof mine_text) == 0)
                group[q] = done[q] = 1, n++;
        jobreport_add(&t, "ddptrain:   rank%s ", n > 1 ? "s" : "");
        jobreport_add_ranks(&t, group, cc_.size);
        jobreport_add(&t, " (%s) %s in %s\n", host_(r), n > 1 ? "are" : "is", d);
    }
    jobreport_add(
        &t, "ddptrain:   what to do: the code path of the ranks differs before this point (a "
            "rank-dependent branch, a skipped step, different options or data on one rank)\n");
    watchdog_end_job(&t, 6);
}

ddp_status_t collcheck_start(control_t *ctl, int on)
{
    cc_.rank = ctl->rank;
    cc_.size = ctl->size;
    cc_.ctl = ctl;
    if (ctl->size == 1 || !on) return DDP_OK;
    if (MPI_Comm_dup(ctl->mpi, &cc_.comm) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_dup failed for --debug-collectives");
    activity_set_start_hook(debug_check_, NULL);
    return DDP_OK;
}

void collcheck_stop(void)
{
    activity_set_start_hook(NULL, NULL);
    if (cc_.comm != MPI_COMM_NULL) MPI_Comm_free(&cc_.comm);
    cc_.ctl = NULL;
}
