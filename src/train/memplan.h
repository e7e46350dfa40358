/* memplan.h -- the memory of a run: what it will take per rank (parameters,
 * gradients, optimizer state, activations, batches, the copies start-up
 * and checkpoints keep), checked against the address-space limit, the
 * cgroup's room and the machine's memory before anything is allocated
 * (memlimit.h); and where the buffers the gradient plane moves come from:
 * the comm backend's node-shared memory (host compute memory and
 * COMM_CAP_NODE_SHARED_MEMORY: the fused all-reduce + optimizer works on
 * them in place) or the compute backend, registered with the comm backend. */
#ifndef DDP_MEMPLAN_H
#define DDP_MEMPLAN_H

#include <stddef.h>

#include "model.h"
#include "status.h"
#include "step.h"

/* Refuse a run whose buffers will not fit, right after the model's layout,
 * so that an absurd size (a `classes` attribute of 10^9 makes a last layer
 * of 10^9 outputs) is named before any other check; a last layer that
 * holds most of it names the deck's classes as the cause.  Every buffer is
 * counted as host memory, which it is on the cpu compute backend
 * (compute_ops_t.mem_kind); a device backend's buffers would belong to a
 * check of the device's memory.  Sets t->mem_need_address and
 * t->mem_limit_address for the start-up table.  Local (agree on it). */
ddp_status_t memplan_check(trainer_t *t);
/* Whether parameters, gradients and optimizer state come from the comm
 * backend's node-shared memory (t->comm_memory): only for host compute
 * memory and a comm backend with COMM_CAP_NODE_SHARED_MEMORY that finds
 * room for them (comm_mem_plan).  Collective; the same answer on every
 * rank. */
ddp_status_t memplan_choose(trainer_t *t);
/* The allocator of parameters, gradients, optimizer state and the 16-bit
 * gradient copy (the buffers the gradient plane reduces or the fused
 * update writes), after memplan_choose: model_alloc, optim_init and the
 * reducer take it. */
model_mem_t memplan_plane_memory(trainer_t *t);
/* The other buffers the gradient plane moves -- BatchNorm running
 * statistics (averaged over ranks with --no-sync-bn) and each BN layer's
 * batch statistics (SyncBatchNorm), compute memory from model_alloc --
 * registered with the comm backend, and deregistered at the teardown. */
ddp_status_t memplan_register_model(trainer_t *t);
void memplan_deregister_model(trainer_t *t);
/* Bytes of a rank's gradients: the gradient buffer, or under --zero 2 its
 * slots, the frozen parameters' gradients and the shard's reduced
 * gradients (zero.h); known from the layout and the plan, before
 * model_alloc. */
size_t memplan_grad_bytes(const trainer_t *t);
/* Bytes of every batch buffer of a rank (host and device), for the table. */
size_t memplan_data_bytes(const trainer_t *t);

#endif
