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

/* Refuse a run whose buffers will not fit, right after the model's layout
 * and the --zero plan, so that an absurd size (a `classes` attribute of
 * 10^9 makes a last layer of 10^9 outputs) is named before any other
 * check; a last layer that holds most of it names the deck's classes as
 * the cause.  On host compute memory (the cpu backend, compute_ops_t.mem_kind)
 * every buffer counts against the host's limits; on device memory the
 * host keeps the batches and the start-up copies, and the device plan
 * (memplan_device) must fit in the free memory of this rank's device
 * (compute_ops_t.mem_info), else DDP_ERR_NOMEM with one line: the plan's
 * parts, the free memory, and what to change -- a --zero stage that fits
 * (with more than one rank), else the largest --batch that fits, else a
 * smaller model.  Sets t->mem_need_address, t->mem_limit_address,
 * t->device_free and t->device_total for the start-up table.  Local
 * (agree on it). */
ddp_status_t memplan_check(trainer_t *t);

/* What the runtime takes on the device beside the buffers of the plan:
 * cuBLAS's workspace (32 MiB per handle on Hopper), the trainer's small
 * buffers (loss sums, events) and the allocator's rounding. */
#define MEMPLAN_DEVICE_RESERVE ((size_t)32 << 20)
/* --precision bf16: the backend keeps the bf16 copy of the parameters that
 * its optimizer writes (compute_ops_t.bf16_params, cuda/bf16.h) when every
 * GEMM weight's copy there is 16-byte aligned (offsets multiples of 8
 * elements: cuBLAS's tensor-core kernels want it); the plan counts it, and
 * start-up asks for it, by this rule. */
#define MEMPLAN_BF16_ALIGN 8
int memplan_bf16_mirror(const model_t *m);
/* A rank's device memory by part, in bytes: parameters, gradients
 * (memplan_grad_bytes), optimizer state (of the shard when --zero shards
 * it), BatchNorm buffers, activations (model_act_bytes without the
 * convolution workspace), the device batches (TRAINER_DEVICE_BATCHES), the
 * convolution workspace (with the scratch of the two-pass sums of a
 * convolution's bias gradient and of BatchNorm's statistics), the 16-bit
 * gradient copy (--grad-compress), the bf16 copies of the GEMMs' inputs
 * (--precision bf16, cuda/bf16.h: the forward's copies of every dense
 * layer's weight and input and every convolution's weight, kept for the
 * backward, the weights' copies being the parameters' mirror under
 * memplan_bf16_mirror; a bound on the scratch: the largest weight, activation or
 * workspace twice, and the largest output gradient) and
 * MEMPLAN_DEVICE_RESERVE. */
typedef struct memplan_device {
    size_t params, grads, state, bn, act, batches, ws, half, bf16, reserve;
} memplan_device_t;
/* This rank's device plan (after the layout and the --zero plan). */
void memplan_device(const trainer_t *t, memplan_device_t *p);
size_t memplan_device_total(const memplan_device_t *p);
/* "parameters 19.1, gradients 19.1, ..., runtime reserve 32.0 MiB" (parts
 * of 0 bytes that not every run has are left out). */
void memplan_device_parts(const memplan_device_t *p, char *buf, size_t n);
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
