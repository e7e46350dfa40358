/* nccl.h -- the CPU emulation's NCCL over MPI (to be written). */
