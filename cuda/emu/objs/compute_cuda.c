/* the emulation build of src/compute_cuda.c (see cuda/Makefile.am) */
#include "../../../src/compute_cuda.c"
