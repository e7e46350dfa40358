/* compute_cuda.c -- the "cuda" compute backend: the ops table over the launchers of ddp_cuda.h (to be written). */
typedef int ddp_compute_cuda_placeholder_t;
