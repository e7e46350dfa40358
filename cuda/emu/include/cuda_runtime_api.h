/* cuda_runtime_api.h -- emulation (to be written): see cuda_runtime.h */
#include "cuda_runtime.h"
