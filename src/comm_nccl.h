/* comm_nccl.h -- the "nccl" comm backend (to be written). */
#ifndef DDP_COMM_NCCL_H
#define DDP_COMM_NCCL_H
#endif
