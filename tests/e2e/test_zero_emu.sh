#!/bin/sh
# test_zero_emu.sh -- ZeRO on the GPU path (--device cuda: the cuda compute
# backend, NCCL's reduce-scatter and all-gather), on the CPU emulation of
# CUDA and NCCL (builds without CUDA; test_zero.sh has the CPU path):
# --zero 1 and 2 give --zero 0's bits at np=2 and 3, with AdamW, SyncBN,
# dropout, gradient clipping and several buckets.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
. "$top_srcdir/tests/e2e/zero_deck.sh"
EMU="$top_builddir/tests/doubles/train_emu"
export DDP_EMU_GPUS=3
for np in 2 3; do
  for z in 0 1 2; do
    mpirun_np $np "$EMU" "$T/d.h5" $common $adamw --clip-grad-norm 0.5 --batch $((24 / np)) \
      --device cuda --zero $z --save "$T/emu$np-z$z.h5" >"$T/emu.log" 2>&1 \
      || { cat "$T/emu.log"; fail "emulated cuda np=$np --zero $z"; }
  done
  grep -q "comm nccl" "$T/emu.log" || { cat "$T/emu.log"; fail "not the nccl path"; }
  same "emu$np-z0" "emu$np-z1" "emulated cuda np=$np --zero 1"
  same "emu$np-z0" "emu$np-z2" "emulated cuda np=$np --zero 2"
  echo "emulated cuda + nccl np=$np: --zero 1 and 2 = --zero 0, bit for bit"
done
echo ok
