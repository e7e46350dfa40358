/* control.c -- the control plane over MPI (see control.h). */
#include "control.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "activity.h"
#include "signals.h"

#define BCAST_PIECE ((size_t)1 << 30) /* MPI counts are ints */

static ddp_status_t mpi_failed_(control_t *c, int rc, const char *call)
{
    char err[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, err, &len);
    return ddp_fail(DDP_ERR_COMM, "%s failed in %s (collective %llu): %s", call,
                    c->last.what ? c->last.what : "?", (unsigned long long)c->seq, err);
}

/* Number a collective and mark this rank as waiting in it (activity.h):
 * every control call blocks until it completes (done_). */
static void note_(control_t *c, const comm_desc_t *d, const char *op, size_t bytes)
{
    c->seq++;
    c->last = d ? *d : (comm_desc_t){"unnamed", -1, -1};
    activity_block(activity_collective_start(&c->last, PLANE_CONTROL, op, bytes), NULL);
}

static ddp_status_t done_(ddp_status_t s)
{
    activity_unblock();
    return s;
}

ddp_status_t control_init(control_t *c, MPI_Comm world)
{
    memset(c, 0, sizeof *c);
    c->mpi = MPI_COMM_NULL;
    if (MPI_Comm_dup(world, &c->mpi) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Comm_dup failed creating the control plane");
    /* errors come back as codes so they are reported with context */
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    c->last = (comm_desc_t){"none yet", -1, -1};
    char me[CONTROL_HOST_MAX] = "";
    snprintf(me, sizeof me, "%s", log_host());
    c->hosts = calloc((size_t)c->size, CONTROL_HOST_MAX);
    if (!c->hosts) return ddp_fail(DDP_ERR_NOMEM, "out of memory for the ranks' host names");
    if (MPI_Allgather(me, CONTROL_HOST_MAX, MPI_CHAR, c->hosts, CONTROL_HOST_MAX, MPI_CHAR,
                      c->mpi) != MPI_SUCCESS)
        return ddp_fail(DDP_ERR_COMM, "MPI_Allgather of the host names failed");
    return DDP_OK;
}

const char *control_host(const control_t *c, int r)
{
    if (!c->hosts || r < 0 || r >= c->size) return "?";
    return c->hosts + (size_t)r * CONTROL_HOST_MAX;
}

void control_free(control_t *c)
{
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    free(c->hosts);
    memset(c, 0, sizeof *c);
    c->mpi = MPI_COMM_NULL;
}

ddp_status_t control_agree(control_t *c, ddp_status_t s)
{
    comm_desc_t d = {"agreement", -1, -1};
    note_(c, &d, "all-reduce", sizeof(int));
    int mine = s != DDP_OK ? c->rank : c->size, first = 0;
    int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->mpi);
    if (rc != MPI_SUCCESS) control_abort(c, mpi_failed_(c, rc, "MPI_Allreduce"));
    if (first == c->size) return done_(DDP_OK);
    struct {
        int status;
        char msg[1024];
    } e = {0, ""};
    if (c->rank == first) {
        e.status = (int)s;
        snprintf(e.msg, sizeof e.msg, "%s", ddp_error_message());
    }
    rc = MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, c->mpi);
    if (rc != MPI_SUCCESS) control_abort(c, mpi_failed_(c, rc, "MPI_Bcast"));
    activity_unblock();
    ddp_clear_error();
    if (first == 0 || c->size == 1) return ddp_fail((ddp_status_t)e.status, "%s", e.msg);
    return ddp_fail((ddp_status_t)e.status, "rank %d (%s): %s", first, control_host(c, first),
                    e.msg);
}

_Noreturn void control_abort(control_t *c, ddp_status_t s)
{
    /* the job ends: the launcher's SIGTERM to the other ranks ends them now,
     * not at a step boundary they will not reach */
    signals_restore();
    activity_phase(PHASE_ABORTING); /* the watchdog stands down */
    comm_abort_all();               /* an NCCL communicator: cancel, do not wait */
    if (c->rank != 0) usleep(2000000);
    log_error(ddp_error_message());
    MPI_Abort(c->mpi != MPI_COMM_NULL ? c->mpi : MPI_COMM_WORLD, ddp_exit_code(s));
    exit(ddp_exit_code(s)); /* not reached */
}

ddp_status_t control_allreduce(control_t *c, void *buf, size_t count, comm_dtype_t t,
                               const comm_desc_t *d)
{
    note_(c, d, "all-reduce", count * 8);
    if (t != COMM_DOUBLE && t != COMM_INT64)
        return done_(ddp_fail(DDP_ERR_INTERNAL, "control_allreduce: only double and int64 sums"));
    if (count > INT_MAX)
        return done_(
            ddp_fail(DDP_ERR_INTERNAL, "control_allreduce: %zu elements is too many", count));
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count,
                           t == COMM_DOUBLE ? MPI_DOUBLE : MPI_INT64_T, MPI_SUM, c->mpi);
    return done_(rc == MPI_SUCCESS ? DDP_OK : mpi_failed_(c, rc, "MPI_Allreduce"));
}

ddp_status_t control_bcast(control_t *c, void *buf, size_t bytes, int root, const comm_desc_t *d)
{
    note_(c, d, "broadcast", bytes);
    for (size_t off = 0; off < bytes; off += BCAST_PIECE) {
        size_t n = bytes - off < BCAST_PIECE ? bytes - off : BCAST_PIECE;
        int rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, c->mpi);
        if (rc != MPI_SUCCESS) return done_(mpi_failed_(c, rc, "MPI_Bcast"));
    }
    return done_(DDP_OK);
}

ddp_status_t control_allgather(control_t *c, const void *send, void *recv, size_t bytes,
                               const comm_desc_t *d)
{
    note_(c, d, "all-gather", bytes);
    if (bytes > INT_MAX)
        return done_(ddp_fail(DDP_ERR_INTERNAL, "control_allgather: %zu bytes is too many", bytes));
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi);
    return done_(rc == MPI_SUCCESS ? DDP_OK : mpi_failed_(c, rc, "MPI_Allgather"));
}

/* counts and displacements of a v-collective as MPI's ints */
static ddp_status_t vcounts_(control_t *c, const size_t *counts, int **cnt, int **displ)
{
    *cnt = malloc((size_t)c->size * sizeof(int));
    *displ = malloc((size_t)c->size * sizeof(int));
    if (!*cnt || !*displ) return ddp_fail(DDP_ERR_NOMEM, "out of memory in a control collective");
    size_t at = 0;
    for (int r = 0; r < c->size; r++) {
        if (counts[r] > INT_MAX || at > INT_MAX)
            return ddp_fail(DDP_ERR_INTERNAL, "a control collective of %zu floats is too large",
                            at + counts[r]);
        (*cnt)[r] = (int)counts[r];
        (*displ)[r] = (int)at;
        at += counts[r];
    }
    return DDP_OK;
}

/* MPI_Gatherv (gather) or MPI_Scatterv to or from root. */
static ddp_status_t vcollective_(control_t *c, int gather, const float *send, float *recv,
                                 const size_t *counts, int root, const comm_desc_t *d)
{
    note_(c, d, gather ? "gather" : "scatter", counts[c->rank] * sizeof(float));
    int *cnt = NULL, *displ = NULL;
    ddp_status_t s = vcounts_(c, counts, &cnt, &displ);
    if (s == DDP_OK) {
        int rc = gather ? MPI_Gatherv(send, cnt[c->rank], MPI_FLOAT, recv, cnt, displ, MPI_FLOAT,
                                      root, c->mpi)
                        : MPI_Scatterv(send, cnt, displ, MPI_FLOAT, recv, cnt[c->rank], MPI_FLOAT,
                                       root, c->mpi);
        if (rc != MPI_SUCCESS) s = mpi_failed_(c, rc, gather ? "MPI_Gatherv" : "MPI_Scatterv");
    }
    free(cnt);
    free(displ);
    return done_(s);
}

ddp_status_t control_gatherv(control_t *c, const float *send, float *recv, const size_t *counts,
                             int root, const comm_desc_t *d)
{
    return vcollective_(c, 1, send, recv, counts, root, d);
}

ddp_status_t control_scatterv(control_t *c, const float *send, float *recv, const size_t *counts,
                              int root, const comm_desc_t *d)
{
    return vcollective_(c, 0, send, recv, counts, root, d);
}
