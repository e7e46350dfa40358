// the emulation build of bn.cu (see cuda/Makefile.am)
#include "../../bn.cu"
