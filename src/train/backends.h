/* backends.h -- the backends of a run and the devices they compute on:
 * --device (and --precision) choose the compute backend from its registry
 * (compute_pick), --comm the gradient plane's comm backend for the memory
 * it computes in (comm_pick); the compute backend binds this rank's device
 * before any comm backend exists (NCCL needs it set); every rank's device
 * is gathered for the start-up table, and two ranks of one host on one GPU
 * are refused (they would share its memory and serialise, and NCCL refuses
 * them); then the comm backend's communicator, tracked for comm_abort_all. */
#ifndef DDP_BACKENDS_H
#define DDP_BACKENDS_H

#include "status.h"
#include "step.h"

/* Collective on the control plane; every step agreed.  Sets t->compute,
 * t->device, t->rank_devices (device memory), t->comm and t->have_comm. */
ddp_status_t backends_start(trainer_t *t);

#endif
