/* checkpoint.c -- what the trainer writes to disk (see checkpoint.h). */
#include "checkpoint.h"

#include <sys/stat.h>

#include "h5util.h"
#include "log.h"
#include "trainer.h"
#include "weights.h"

ddp_status_t checkpoint_probe_save(const trainer_t *t)
{
    const char *path = t->cfg->save;
    if (!path[0] || t->ctl->rank != 0) return DDP_OK;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ddp_fail(DDP_ERR_USAGE, "--save %s is a directory; name a file, e.g. %s/weights.h5",
                        path, path);
    h5_atomic_t a;
    ddp_status_t s = h5_atomic_create(&a, path);
    if (s != DDP_OK) return ddp_fail_override(s, "--save %s: %s", path, ddp_error_message());
    h5_atomic_abandon(&a);
    return DDP_OK;
}

ddp_status_t checkpoint_save_final(trainer_t *t, const train_result_t *res)
{
    const ddp_config_t *cfg = t->cfg;
    if (!cfg->save[0]) return DDP_OK;
    DDP_TRY(trainer_average_bn_buffers(t));
    ddp_status_t s = DDP_OK;
    if (t->ctl->rank == 0) {
        weights_meta_t meta = {.step = res->steps,
                               .epoch = (res->steps + t->steps_per_epoch - 1) / t->steps_per_epoch,
                               .world_size = t->ctl->size,
                               .cfg = cfg};
        s = weights_save(cfg->save, &t->model, &meta);
        if (s == DDP_OK) log_info("saved weights to %s", cfg->save);
    }
    return control_agree(t->ctl, s);
}
