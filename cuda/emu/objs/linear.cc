// the emulation build of linear.cu (see cuda/Makefile.am)
#include "../../linear.cu"
