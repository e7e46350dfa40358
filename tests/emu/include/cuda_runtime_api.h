/* cuda_runtime_api.h -- the CPU emulation's runtime API: the same
 * declarations as cuda_runtime.h (which holds them and their contract). */
#include "cuda_runtime.h"
