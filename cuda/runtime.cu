// runtime.cu -- (to be written; see ddp_cuda.h for the launchers it provides)
#include "ddp_cuda_rt.h"
