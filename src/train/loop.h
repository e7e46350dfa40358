/* loop.h -- the trainer's entry point: start-up, the training loop (or
 * --diagnose's measured steps), the final --save, the teardown.  The rooms
 * it runs are listed in run.h. */
#ifndef DDP_LOOP_H
#define DDP_LOOP_H

#include "config.h"
#include "control.h"
#include "status.h"
#include "train_result.h"

/* Train with a parsed configuration, on the backends the registries hold
 * (compute.h, comm.h: --device and --comm choose among them; a test program
 * registers doubles of its own before it calls this).  Collective: every
 * rank of the control plane calls it; the status is the same on every rank
 * (or the job has been ended with control_abort). */
ddp_status_t ddp_train(const ddp_config_t *cfg, control_t *ctl, train_result_t *res);

#endif
