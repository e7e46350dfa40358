#!/bin/sh
# test_badinput.sh -- bad input to the trainer on 2 ranks: each case gives
# exactly one `ddptrain: error:` line naming the file and the problem, a
# non-zero exit code of the documented kind, no hang (every run is under a
# timeout), no core dump, no half-written output file, and an existing
# --save file left as it was.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
MK="$top_builddir/tests/make_bad_deck"
for k in good no-y short-y nan neg-label wide corrupt corrupt-unsampled; do
  "$MK" $k "$T/$k.h5" || fail "make_bad_deck $k"
done
echo "this is not an HDF5 file" >"$T/text.h5"
"$DDPPREP" synthetic --classes 10 --features 8 --samples 300 --seed 1 -o "$T/ten.h5" >/dev/null \
  || fail "prep ten"
"$DDPPREP" synthetic --features 8 --samples 300 --regression 2 --seed 1 \
  -o "$T/reg.h5" >/dev/null || fail "prep regression"

base="--model linear:16,relu,linear:auto --batch 8 --epochs 2 --log-every 0 --eval-every 0"
# expect CODE NEEDLE... -- ddptrain args: run on 2 ranks, check exit code and message
expect() {
  code=$1; shift
  needles=""
  while [ "$1" != "--" ]; do needles="$needles|$1"; shift; done
  shift
  DDP_TEST_TIMEOUT=120 mpirun_np 2 "$DDPTRAIN" "$@" --save "$T/out.h5" >"$T/o" 2>"$T/e"
  rc=$?
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "hang (timeout): $*"
  [ $rc -eq "$code" ] || { cat "$T/e"; fail "exit $rc, expected $code: $*"; }
  n=$(grep -c "ddptrain: \(rank [0-9]* ([^)]*): \)\?error:" "$T/e")
  [ "$n" -eq 1 ] || { cat "$T/e"; fail "$n error lines, expected 1: $*"; }
  grep -q "core dumped" "$T/e" && fail "core dump: $*"
  [ -e "$T/out.h5" ] && fail "an output file was written: $*"
  IFS='|'
  for s in $needles; do
    [ -z "$s" ] && continue
    grep -qF -- "$s" "$T/e" || { unset IFS; cat "$T/e"; fail "message lacks '$s': $*"; }
  done
  unset IFS
  echo "ok ($code): $(grep 'error:' "$T/e")"
}

expect 3 "missing.h5" "cannot open" -- "$T/missing.h5" $base
expect 3 "text.h5" "not an HDF5 file" -- "$T/text.h5" $base
expect 3 "no-y.h5" "/train/y" -- "$T/no-y.h5" $base
expect 3 "short-y.h5" "/train/y" "190" "200" -- "$T/short-y.h5" $base
expect 3 "neg-label.h5" "/train/y" "label -1" -- "$T/neg-label.h5" $base
expect 3 "ten.h5" "/train/y holds label 9" "3 outputs" -- "$T/ten.h5" $base --model linear:16,relu,linear:3
expect 3 "reg.h5" "float targets" -- "$T/reg.h5" $base --loss xent
expect 3 "nan.h5" "/train/x" "sample 57" -- "$T/nan.h5" $base --check-data
expect 3 "wide.h5" "good.h5" -- "$T/good.h5" "$T/wide.h5" $base
expect 3 "good.h5" "holds 200 samples" "fewer than one global batch" -- "$T/good.h5" $base --batch 128
# a corrupt chunk the start-up content check samples, and one it does not
# (then found by the loader in training)
expect 3 "corrupt.h5" "/train/x" "samples [100, 110)" "start-up content check" -- "$T/corrupt.h5" $base
expect 3 "corrupt-unsampled.h5" "/train/x" "samples [3" -- "$T/corrupt-unsampled.h5" $base --no-shuffle
# without --check-data the NaN shows up as a diverged loss: exit 8, not silent
# training, whether the loss is logged or not (checked every step)
expect 8 "loss is nan" -- "$T/nan.h5" $base --log-every 1 --no-shuffle
expect 8 "loss is nan at step" -- "$T/nan.h5" $base --no-shuffle
# the good deck trains (the harness above is not failing everything)
mpirun_np 2 "$DDPTRAIN" "$T/good.h5" $base --save "$T/out.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "good deck"; }
[ -f "$T/out.h5" ] || fail "good deck: no output"
# a failed run leaves an existing --save file as it was, byte for byte (the
# weights go to a temporary file renamed over the old one when complete):
# here training diverges (exit 8) after the start-up probe of --save
cp "$T/out.h5" "$T/old.h5" || exit 99
DDP_TEST_TIMEOUT=120 mpirun_np 2 "$DDPTRAIN" "$T/nan.h5" $base --no-shuffle --save "$T/out.h5" \
  >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 8 ] || { cat "$T/e"; fail "diverging run over an old --save file: exit $rc, expected 8"; }
cmp -s "$T/out.h5" "$T/old.h5" || fail "a failed run changed or removed the existing --save file"
ls "$T"/out.h5.tmp.* >/dev/null 2>&1 && fail "a temporary file was left behind"
echo "ok: a failed run left the old --save file unchanged"
echo ok
