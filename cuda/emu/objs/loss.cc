// the emulation build of loss.cu (see cuda/Makefile.am)
#include "../../loss.cu"
