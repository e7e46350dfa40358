/* backends.c -- the backends of a run and the devices they compute on
 * (see backends.h). */
#define _GNU_SOURCE /* sched_getaffinity */
#include "backends.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activity.h"
#include "log.h"

/* --device and --precision: the compute backend (compute_pick); --comm:
 * the comm backend for its memory (comm_pick: mpi for host memory, nccl
 * for device memory).  Not collective (agreed by the caller). */
static ddp_status_t choose_(trainer_t *t, const comm_backend_t **comm)
{
    const ddp_config_t *cfg = t->cfg;
    DDP_TRY(compute_pick(config_choice_name("device", cfg->device), &t->compute));
    if ((cfg->precision == PRECISION_BF16 && !t->compute->set_bf16) ||
        (cfg->precision == PRECISION_TF32 && !t->compute->set_tf32)) {
        const char *p = config_choice_name("precision", cfg->precision);
        return ddp_fail(DDP_ERR_USAGE,
                        "--precision %s needs the cuda backend, and this run computes on %s%s; "
                        "drop --precision %s or run with --device cuda on a GPU node",
                        p, t->compute->name,
                        cfg->device == DEVICE_AUTO ? " (--device auto found no GPU)" : "", p);
    }
    return comm_pick(config_choice_name("comm", cfg->comm), t->compute->mem_kind, t->compute->name,
                     comm);
}

/* This rank's place on its host, from the control plane's host names: the
 * compute backend binds its device before any comm backend exists (NCCL
 * needs the device set first). */
static void local_rank_(const trainer_t *t, int *local_rank, int *local_size)
{
    const control_t *ctl = t->ctl;
    const char *me = control_host(ctl, ctl->rank);
    *local_rank = 0;
    *local_size = 0;
    for (int r = 0; r < ctl->size; r++) {
        if (strcmp(control_host(ctl, r), me) != 0) continue;
        if (r < ctl->rank) ++*local_rank;
        ++*local_size;
    }
}

/* What every rank tells the others about its device. */
typedef struct rank_device {
    char id[64];    /* compute->device_id(): the PCI bus id ("" for host memory) */
    char desc[192]; /* compute->init's description */
} rank_device_t;

/* Every rank's device, gathered on the control plane: the start-up table
 * lists them, and two ranks of one host on one GPU are refused (they would
 * share its memory and serialise, and NCCL refuses them). */
static ddp_status_t check_devices_(trainer_t *t)
{
    control_t *ctl = t->ctl;
    if (t->compute->mem_kind != DDP_MEM_DEVICE) return DDP_OK;
    rank_device_t mine;
    memset(&mine, 0, sizeof mine);
    const char *id = t->compute->device_id ? t->compute->device_id() : "";
    snprintf(mine.id, sizeof mine.id, "%s", id ? id : "");
    snprintf(mine.desc, sizeof mine.desc, "%s", t->device);
    rank_device_t *all = calloc((size_t)ctl->size, sizeof *all);
    t->rank_devices = calloc((size_t)ctl->size, sizeof *t->rank_devices);
    ddp_status_t s = control_agree(
        ctl, all && t->rank_devices ? DDP_OK
                                    : ddp_fail(DDP_ERR_NOMEM, "out of memory for the device table"));
    if (s != DDP_OK) {
        free(all);
        return s;
    }
    comm_desc_t d = {"startup-devices", -1, -1};
    s = control_allgather(ctl, &mine, all, sizeof mine, &d);
    if (s != DDP_OK) control_abort(ctl, s);
    for (int r = 0; r < ctl->size; r++)
        snprintf(t->rank_devices[r], sizeof t->rank_devices[r], "%s", all[r].desc);
    for (int a = 0; a < ctl->size && s == DDP_OK; a++)
        for (int b = a + 1; b < ctl->size && s == DDP_OK; b++) {
            if (!all[a].id[0] || strcmp(all[a].id, all[b].id) != 0 ||
                strcmp(control_host(ctl, a), control_host(ctl, b)) != 0)
                continue;
            int n = 0;
            for (int r = 0; r < ctl->size; r++)
                n += strcmp(control_host(ctl, r), control_host(ctl, a)) == 0;
            s = ddp_fail(DDP_ERR_DEVICE,
                         "ranks %d and %d of host %s both compute on GPU %s (the host runs %d "
                         "ranks): start at most as many ranks per node as it has GPUs (Slurm: "
                         "--gpus-per-task=1, or --ntasks-per-node at most the GPUs per node; "
                         "mpirun: -npernode N), or check CUDA_VISIBLE_DEVICES",
                         a, b, control_host(ctl, a), all[a].id, n);
        }
    free(all);
    /* every rank found the same: no agreement needed */
    return s;
}
/* A core for the progress thread: this rank may run on more than one CPU
 * (its affinity mask: not bound to a single core) and its machine has more
 * online CPUs than ranks. */
static int spare_core_(const comm_t *c)
{
    cpu_set_t set;
    int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return mine >= 2 && online > c->host_size;
}

ddp_status_t backends_start(trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    control_t *ctl = t->ctl;
    /* the compute backend first, and its device bound (NCCL needs it),
     * then the gradient plane's comm backend for its memory */
    const comm_backend_t *comm = NULL;
    DDP_TRY(control_agree(ctl, choose_(t, &comm)));
    int local_rank, local_size;
    local_rank_(t, &local_rank, &local_size);
    DDP_TRY(
        control_agree(ctl, t->compute->init(local_rank, local_size, t->device, sizeof t->device)));
    if (cfg->precision != PRECISION_FP32) {
        ddp_status_t bs = DDP_OK;
        int (*set)(int) =
            cfg->precision == PRECISION_BF16 ? t->compute->set_bf16 : t->compute->set_tf32;
        if (set(1) != 0)
            bs = trainer_compute_failure(
                t, ddp_fail(DDP_ERR_DEVICE, "--precision %s: the cuda backend refused it",
                            config_choice_name("precision", cfg->precision)));
        DDP_TRY(control_agree(ctl, bs));
    }
    DDP_TRY(check_devices_(t));
    /* the phases as profiler ranges (NVTX on the cuda backend) */
    if (t->compute->range_start) activity_trace(t->compute->range_start, t->compute->range_end);
    ddp_status_t s = control_agree(ctl, comm->init(&t->comm, ctl->mpi));
    t->have_comm = s == DDP_OK;
    DDP_TRY(s);
    comm_track(&t->comm); /* a fatal error aborts it (comm_abort_all) */
    if (cfg->allreduce != ALLREDUCE_AUTO) {
        const char *name = config_choice_name("allreduce", cfg->allreduce);
        DDP_TRY(control_agree(
            ctl, t->comm.ops->set_algorithm
                     ? t->comm.ops->set_algorithm(&t->comm, name)
                     : ddp_fail(DDP_ERR_USAGE,
                                "--allreduce %s: the %s comm backend chooses its own algorithm "
                                "(NCCL: set NCCL_ALGO); use --allreduce auto, or --comm mpi",
                                name, comm->name)));
    }
    /* --comm-thread: auto runs it where messages cross nodes (on one node
     * shared memory sends none) and the rank has a core to spare for it
     * (a thread on the core that computes only time-slices with backward:
     * measured, docs/parallelism.md) */
    t->comm_thread_spare = spare_core_(&t->comm);
    int want = cfg->comm_thread == COMM_THREAD_ON ||
               (cfg->comm_thread == COMM_THREAD_AUTO && t->comm.nnodes > 1 &&
                t->comm_thread_spare);
    t->comm_thread_why[0] = 0;
    ddp_status_t ts = DDP_OK;
    if (want && t->comm.ops->set_progress_thread) {
        ts = t->comm.ops->set_progress_thread(&t->comm, 1, &t->comm_thread, t->comm_thread_why,
                                              sizeof t->comm_thread_why);
        /* MPI below MULTIPLE is alike on every rank: said once, by rank 0 */
        if (ts == DDP_OK && !t->comm_thread && t->comm.rank == 0)
            log_warn("--comm-thread %s: no progress thread: %s",
                     config_choice_name("comm-thread", cfg->comm_thread), t->comm_thread_why);
    }
    /* every rank, wanted or not (auto's answer is each rank's own: its
     * cores) */
    return control_agree(ctl, ts);
}
