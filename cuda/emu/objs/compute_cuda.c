/* the emulation build of src/compute/compute_cuda.c (see cuda/Makefile.am) */
#include "../../../src/compute/compute_cuda.c"
