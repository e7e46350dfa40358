/* comm_nccl.c -- the "nccl" comm backend (to be written). */
typedef int ddp_comm_nccl_placeholder_t;
