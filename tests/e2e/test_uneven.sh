#!/bin/sh
# test_uneven.sh -- uneven inputs and exact evaluation.  With --no-drop-last,
# 100 samples at 3 ranks x batch 8 leave the last step with 2, 1 and 1
# samples on the ranks; the job must not hang, and the update must equal one
# rank with batch 24 (Join semantics: the averaging uses the true global
# count).  Evaluation of 1001 validation samples over 3 ranks counts every
# sample exactly once.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 3 --features 10 --samples 100 --val 1001 --seed 8 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
common="--model linear:16,bn,relu,linear:auto --epochs 3 --no-drop-last --log-every 0 --seed 2"
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" $common --batch 24 --save "$T/w1.h5" >"$T/o1" 2>&1 \
  || { cat "$T/o1"; fail "np=1"; }
mpirun_np 3 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --save "$T/w3.h5" >"$T/o3" 2>&1 \
  || { cat "$T/o3"; fail "np=3 uneven"; }
grep -q "5 per epoch, 15 total" "$T/o3" || { cat "$T/o3"; fail "expected 5 steps per epoch"; }
"$WEIGHTS_CMP" "$T/w3.h5" "$T/w1.h5" 1e-5 >"$T/cmp" || { cat "$T/cmp"; fail "uneven np=3 != np=1"; }
echo "uneven np=3 vs np=1: $(tail -n 1 "$T/cmp")"
for f in o1 o3; do
  n=$(ddp_field "$T/$f" samples)
  [ "$n" = 1001 ] || { cat "$T/$f"; fail "$f: evaluation counted $n samples, expected 1001"; }
done
a1=$(ddp_field "$T/o1" val_acc); a3=$(ddp_field "$T/o3" val_acc)
awk -v a="$a1" -v b="$a3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.002) }' \
  || fail "val_acc np=1 $a1 vs np=3 $a3"
echo ok
