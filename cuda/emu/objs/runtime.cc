// the emulation build of runtime.cu (see cuda/Makefile.am)
#include "../../runtime.cu"
