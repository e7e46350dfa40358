/* hostdev.h -- DDP_HD, the qualifier of the functions that the CPU code and
 * the CUDA kernels share (half.h, rng.h, backend_math.h): __host__
 * __device__ __forceinline__ under nvcc, static inline elsewhere (the C
 * code, and the CPU emulation's C++ build of the kernels), so one
 * definition serves both and inlines into every hot loop that calls it. */
#ifndef DDP_HOSTDEV_H
#define DDP_HOSTDEV_H

#ifdef __CUDACC__
#define DDP_HD __host__ __device__ __forceinline__
#else
#define DDP_HD static inline
#endif

#endif
