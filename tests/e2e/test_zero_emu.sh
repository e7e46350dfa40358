#!/bin/sh
# test_zero_emu.sh -- ZeRO on the GPU path (--device cuda: the cuda compute
# backend, NCCL's reduce-scatter and all-gather), on the CPU emulation of
# CUDA and NCCL (builds without CUDA; test_zero.sh has the CPU path):
# --zero 1 and 2 give --zero 0's bits at np=2 and 3, with AdamW, SyncBN,
# dropout, gradient clipping and several buckets.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 6 --features 24 --samples 1200 --seed 3 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--steps 12 --log-every 0 --eval-every 0 --seed 11 --weight-decay 1e-4 \
  --model linear:48,relu,bn,dropout:0.25,linear:32,gelu,bn,linear:auto \
  --bucket-cap-mb 0.004 --first-bucket-mb 0.002"
adamw="--optimizer adamw --lr 0.003"
# same A B WHAT: the saved weights of A and B are bit-identical
same() {
  "$WEIGHTS_CMP" "$T/$2.h5" "$T/$1.h5" 0 >"$T/cmp" || { cat "$T/cmp"; fail "$3: not the bits of $1"; }
}
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
