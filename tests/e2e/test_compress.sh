#!/bin/sh
# test_compress.sh -- 16-bit gradient all-reduce: bf16 and fp16 runs train
# (the loss goes down on the synthetic task) and stay close to the fp32 run
# after 20 steps: max |w16 - w32| / max |w32| per tensor below 1e-2 for bf16
# and 2e-3 for fp16 (measured 7.6e-3 and 7.6e-4: each 16-bit rounding to
# nearest is relative 2^-8 (bf16) or 2^-11 (fp16); a bf16 conversion that
# truncates instead, with errors up to 2^-7 and all of one sign, gives 1.4e-2).
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 5 --features 20 --samples 2000 --seed 9 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--model linear:32,bn,relu,linear:auto --batch 16 --steps 20 --log-every 5 --eval-every 0"
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --save "$T/f32.h5" >"$T/o32" 2>&1 || fail "fp32 run"
for c in bf16 fp16; do
  tol=1e-2
  [ $c = fp16 ] && tol=2e-3
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --grad-compress $c --save "$T/$c.h5" >"$T/o" 2>&1 \
    || { cat "$T/o"; fail "$c run"; }
  first=$(grep -o 'loss [0-9][0-9.]*' "$T/o" | head -n 1 | cut -d' ' -f2)
  last=$(grep -o 'loss [0-9][0-9.]*' "$T/o" | tail -n 1 | cut -d' ' -f2)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' \
    || { cat "$T/o"; fail "$c: loss did not go down ($first -> $last)"; }
  "$WEIGHTS_CMP" "$T/$c.h5" "$T/f32.h5" $tol >"$T/cmp" || { cat "$T/cmp"; fail "$c too far from fp32"; }
  echo "$c vs fp32 after 20 steps: $(tail -n 1 "$T/cmp")"
  b32=$(ddp_field "$T/o32" grad_bytes); b16=$(ddp_field "$T/o" grad_bytes)
  [ $((b32)) -eq $((2 * b16)) ] || fail "$c: $b16 bytes all-reduced, expected half of $b32"
done
echo ok
