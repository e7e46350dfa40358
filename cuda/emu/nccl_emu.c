/* nccl_emu.c -- the CPU emulation of NCCL over MPI (to be written). */
typedef int ddp_nccl_emu_placeholder_t;
