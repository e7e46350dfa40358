// the emulation build of conv.cu (see cuda/Makefile.am)
#include "../../conv.cu"
