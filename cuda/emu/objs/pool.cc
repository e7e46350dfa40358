// the emulation build of pool.cu (see cuda/Makefile.am)
#include "../../pool.cu"
