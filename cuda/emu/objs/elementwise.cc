// the emulation build of elementwise.cu (see cuda/Makefile.am)
#include "../../elementwise.cu"
