// the emulation build of reduce.cu (see cuda/Makefile.am)
#include "../../reduce.cu"
