/* compute_cuda.h -- the "cuda" compute backend (to be written). */
#ifndef DDP_COMPUTE_CUDA_H
#define DDP_COMPUTE_CUDA_H
#endif
