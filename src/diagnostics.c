/* diagnostics.c -- the replica check and fault injection (see
 * diagnostics.h). */
#include "diagnostics.h"

#include <stdio.h>
#include <stdlib.h>

#include "hash.h"
#include "trainer.h"

ddp_status_t diagnostics_check_replicas(trainer_t *t, int64_t step)
{
    model_t *m = &t->model;
    /* with --no-sync-bn the running statistics differ between ranks by design
     * (their average is evaluated and saved): parameters only */
    size_t np = m->nparams * sizeof(float), nb = t->sync_bn ? m->nbufs * sizeof(float) : 0;
    char *host = malloc(np + nb + 1);
    uint64_t *all = malloc((size_t)t->ctl->size * sizeof *all);
    if (!host || !all)
        control_abort(t->ctl, ddp_fail(DDP_ERR_NOMEM, "out of memory in the replica check"));
    t->compute->download(host, m->params, np);
    t->compute->download(host + np, m->bufs, nb);
    uint64_t h = hash_bytes(HASH_SEED, host, np + nb);
    free(host);
    comm_desc_t d = {"replica-check", -1, step};
    ddp_status_t s = control_allgather(t->ctl, &h, all, sizeof h, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    /* from here every rank sees the same hashes: a mismatch is agreed */
    for (int r = 1; r < t->ctl->size && s == DDP_OK; r++) {
        if (all[r] == all[0]) continue;
        char when[64];
        if (step == 0)
            snprintf(when, sizeof when, "at start-up, after the broadcast of rank 0's model,");
        else
            snprintf(when, sizeof when, "after step %lld", (long long)step);
        s = ddp_fail(DDP_ERR_MISMATCH,
                     "replicas diverged: %s the parameters%s of rank %d differ from rank 0's "
                     "(hash %016llx vs %016llx); the model is no longer the same on every rank",
                     when, nb ? " and BN statistics" : "", r, (unsigned long long)all[r],
                     (unsigned long long)all[0]);
    }
    free(all);
    return s;
}

void diagnostics_maybe_perturb(trainer_t *t, int64_t step)
{
    const char *f = getenv("DDP_FAULT_PERTURB");
    int rank;
    long long at;
    if (!f || sscanf(f, "%d:%lld", &rank, &at) != 2) return;
    if (rank != t->ctl->rank || at != step || t->model.nparams == 0) return;
    float v;
    t->compute->download(&v, t->model.params, sizeof v);
    v += 1e-3f;
    t->compute->upload(t->model.params, &v, sizeof v);
}
