// the emulation build of optim.cu (see cuda/Makefile.am)
#include "../../optim.cu"
