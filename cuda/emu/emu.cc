// emu.cc -- the CPU emulation of the CUDA runtime and cuBLAS (to be written).
#include "emu.h"
