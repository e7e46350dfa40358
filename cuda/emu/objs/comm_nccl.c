/* the emulation build of src/comm/comm_nccl.c, against cuda/emu/include/nccl.h
 * (see cuda/Makefile.am) */
#include "../../../src/comm/comm_nccl.c"
