#!/bin/sh
# test_badinput.sh -- bad input to the trainer on 2 ranks: each case gives
# exactly one `ddptrain: error:` line naming the file and the problem, a
# non-zero exit code of the documented kind, no hang (every run is under a
# timeout), no core dump, no half-written output file, and an existing
# --save file left as it was.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
MK="$top_builddir/tests/tools/make_bad_deck"
for k in good no-y short-y nan neg-label wide corrupt corrupt-unsampled huge-n huge-f \
  classes-huge classes-frac stray-label u8-scale mean-a mean-b val-nan float-y; do
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
  ddp_expect_error "$T/e" $rc "$code" "$*" "$needles"
  [ -e "$T/out.h5" ] && fail "an output file was written: $*"
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
# headers that declare absurd sizes in a file of a few KiB: refused from
# what the file stores, before anything is allocated or scanned
expect 3 "huge-n.h5" "/train/x declares [1000000000000,8]" "never written" -- "$T/huge-n.h5" $base
expect 3 "huge-f.h5" "/train/x declares [2,1000000000]" "never written" -- "$T/huge-f.h5" $base
# classes = 10^9: a last layer of 10^9 outputs does not fit (exit 5, out of memory)
expect 5 "memory: 2 ranks on this node need about" "last layer's 1000000000 outputs" \
  "attribute classes of /train/y in $T/classes-huge.h5" -- \
  "$T/classes-huge.h5" $base --model linear:1024,relu,linear:auto
expect 3 "classes-frac.h5" "attribute classes of /train/y is 4.5" "positive integer" -- \
  "$T/classes-frac.h5" $base
# a bad scale is named as such (not blamed on mean or std)
expect 3 "u8-scale.h5" "attribute scale of /train/x is -1" -- "$T/u8-scale.h5" $base
# the same shard twice (by name or through a link), and shards normalised differently
ln -s "$T/good.h5" "$T/link.h5" || exit 99
expect 3 "input file 2 is the same file as input file 1" -- "$T/good.h5" "$T/good.h5" $base
expect 3 "link.h5: input file 2 is the same file" -- "$T/good.h5" "$T/link.h5" $base
expect 3 "mean-b.h5: attribute mean of /train/x differs from $T/mean-a.h5's" -- \
  "$T/mean-a.h5" "$T/mean-b.h5" $base
expect 3 "mean-a.h5: /train/x has attribute mean but $T/good.h5 has none" -- \
  "$T/good.h5" "$T/mean-a.h5" $base
# NaN in /val: exit 8 naming the sample, as in training (not val_loss=nan, exit 0)
expect 8 "the validation loss is nan" "/val sample 13 (row 13 of $T/val-nan.h5)" -- \
  "$T/val-nan.h5" $base
expect 3 "float-y.h5" "float targets" -- "$T/float-y.h5" $base --loss xent

# a stray label of 10^6 without `classes`: trains, warned once (from rank 0)
DDP_TEST_TIMEOUT=120 mpirun_np 2 "$DDPTRAIN" "$T/stray-label.h5" $base --steps 2 >"$T/o" 2>"$T/e" \
  || { cat "$T/e"; fail "stray label: exit $?"; }
n=$(grep -c "warning: .*stray-label.h5: /train/y has no attribute classes" "$T/e")
[ "$n" -eq 1 ] || { cat "$T/e"; fail "stray label: $n warnings, expected 1"; }
grep -q "1000001 classes (label 1000000 at sample 37), but only 5 distinct labels" "$T/e" \
  || { cat "$T/e"; fail "stray label: the warning lacks the numbers"; }
grep -q "warning" "$T/o" && fail "stray label: a warning on stdout"
# float labels [N] are regression, and the start-up table says so
DDP_TEST_TIMEOUT=120 mpirun_np 2 "$DDPTRAIN" "$T/float-y.h5" $base --steps 2 >"$T/o" 2>"$T/e" \
  || { cat "$T/e"; fail "float labels: exit $?"; }
grep -q "input .*1 regression target (/train/y \[N\] is float: regression, not class labels)" \
  "$T/o" || { cat "$T/o"; fail "float labels: the start-up table does not say regression"; }
echo "ok: stray-label warning and float-label table line"

# the good deck trains (the harness above is not failing everything)
mpirun_np 2 "$DDPTRAIN" "$T/good.h5" $base --save "$T/out.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "good deck"; }
[ -f "$T/out.h5" ] || fail "good deck: no output"
grep -q "warning" "$T/o" && { cat "$T/o"; fail "good deck: a warning"; }
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
