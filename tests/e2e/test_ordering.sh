#!/bin/sh
# test_ordering.sh -- the ordering contract of the compute backend (compute.h,
# "Ordering"): the trainer on "cpu-lazy" (tests/doubles/compute_lazy.c: uploads are
# copied only when their event is waited for, after a pause in which a
# loader buffer handed back too early is refilled; a device batch is wiped
# when its reuse event is recorded, and an upload whose reuse event predates
# its buffer's last landing fails the run; gradients read NaN until their
# event is waited for) saves bit-identical weights to ddptrain on "cpu" -- so
# every upload is waited for before its batch is computed on and before the
# loader gets the buffer back, no op computes on the device batch left
# behind, no upload goes into a device batch an op may still read, and every
# bucket's gradients are waited for before their all-reduce.  At 1 rank and at 2 (the shared-memory fused
# all-reduce + optimizer), with accumulation, evaluation on /val, bf16
# compression (the 16-bit copy of the gradients), gradient clipping (the
# unfused optimizer) and a convolutional model.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
LAZY="$top_builddir/tests/doubles/train_lazy"
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --val 100 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
"$MAKE_DECK" images "$T/img.h5" 256 || fail "make_deck images"
mlp="--model linear:24,bn,relu,linear:auto --batch 8 --epochs 2 --log-every 10 --eval-every 1"

same() { # same NAME NP DECK OPTIONS...: cpu-lazy == cpu, bit for bit
  name=$1 np=$2 deck=$3; shift 3
  mpirun_np "$np" "$DDPTRAIN" "$deck" "$@" --save "$T/cpu.h5" >"$T/o" 2>&1 \
    || { cat "$T/o"; fail "$name: ddptrain failed"; }
  mpirun_np "$np" "$LAZY" "$deck" "$@" --save "$T/lazy.h5" >"$T/ol" 2>&1 \
    || { cat "$T/ol"; fail "$name: the trainer on cpu-lazy failed"; }
  "$WEIGHTS_CMP" "$T/lazy.h5" "$T/cpu.h5" 0 >"$T/cmp" \
    || { cat "$T/cmp"; fail "$name: cpu-lazy trained other weights than cpu (an event not waited for)"; }
  grep "^eval" "$T/o" >"$T/e" || true
  grep "^eval" "$T/ol" >"$T/el" || true
  cmp -s "$T/e" "$T/el" || { diff "$T/e" "$T/el"; fail "$name: evaluation differs on cpu-lazy"; }
  echo "$name: cpu-lazy == cpu"
}

same "np=1" 1 "$T/d.h5" $mlp
same "np=1 accum 3" 1 "$T/d.h5" $mlp --accum 3
same "np=2" 2 "$T/d.h5" $mlp
grep -q "comm mpi (node-shared memory)" "$T/o" || { cat "$T/o"; fail "np=2 on one node: not the shared-memory path"; }
same "np=2 accum 2" 2 "$T/d.h5" $mlp --accum 2 --optimizer adamw --lr 0.01
same "np=2 bf16" 2 "$T/d.h5" $mlp --grad-compress bf16
same "np=2 clip" 2 "$T/d.h5" $mlp --clip-grad-norm 0.5
same "np=2 cnn" 2 "$T/img.h5" --model conv:4:3:1:1,bn,relu,maxpool:2,linear:auto --batch 8 \
  --epochs 1 --log-every 0 --eval-every 1
exit 0
