#!/bin/sh
# test_nonfinite.sh -- non-finite values (--on-nonfinite abort|skip,
# --max-skips, --inject nan), at 2 ranks:
#   - abort (the default): a NaN in the data (sample 57 of the second shard,
#     global index 257, shuffled into the middle of a batch) ends the job
#     within seconds with exit code 8 and one error line, from the rank that
#     holds the sample, naming the step, the sample's global index, file and
#     row, and the value (a NaN regression target likewise, not called
#     divergence); a NaN injected into rank 1's batch with
#     SyncBatchNorm (every rank's loss is NaN then) is named by rank 1, the
#     rank whose input holds it; the verdict, one step late, still comes
#     before a checkpoint (none is written of a NaN step) and at the end
#     (a NaN in the last step named with its sample);
#   - skip: a NaN on rank 1 in the last step drops that step on both ranks:
#     weights, BN statistics and counters, optimizer state and its step
#     count equal bitwise those of the run that stopped one step earlier
#     (SGD momentum and AdamW, dropout; the reference uses the default fused
#     per-bucket optimizer); rank 0 warns naming the step, the summary
#     counts 1 skip, the logged loss stays finite, exit 0;
#   - a skip mid-run with --accum 2 trains on (finite weights: exit 0);
#   - --max-skips N: N skipped steps in a row end the job (exit 8) naming
#     them; N skips not in a row do not.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
MK="$top_builddir/tests/tools/make_bad_deck"
"$MK" good "$T/good.h5" && "$MK" nan "$T/nan.h5" || fail "make_bad_deck"
"$DDPPREP" synthetic --classes 4 --features 12 --samples 900 --seed 6 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"

# run NAME ARGS...: 2 ranks, stdout in $T/NAME.o, stderr in $T/NAME.e, exit code in rc,
# wall seconds in secs
run() {
  _n=$1; shift
  _t0=$(date +%s)
  DDP_TEST_TIMEOUT=120 mpirun_np 2 "$DDPTRAIN" "$@" >"$T/$_n.o" 2>"$T/$_n.e"
  rc=$?
  secs=$(( $(date +%s) - _t0 ))
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$T/$_n.e"; fail "$_n: hang (timeout)"; }
}
has() { grep -qF -- "$2" "$T/$1" || { cat "$T/$1"; fail "$1 lacks '$2'"; }; }
errors() { grep -c "ddptrain: .*error:" "$T/$1.e"; }

# ---- abort -------------------------------------------------------------
base="--model linear:16,relu,linear:auto --batch 8 --epochs 2 --log-every 0 --eval-every 0"
run data "$T/good.h5" "$T/nan.h5" $base
[ $rc -eq 8 ] || { cat "$T/data.e"; fail "NaN in the data: exit $rc, expected 8"; }
[ "$(errors data)" -eq 1 ] || { cat "$T/data.e"; fail "NaN in the data: expected one error line"; }
has data.e "the training loss is nan at step 21 on this rank; its samples there: "
has data.e "sample 257 (row 57 of $T/nan.h5) holds a non-finite input value (nan at value 3 of 8)"
has data.e "--check-data"
[ "$secs" -le 30 ] || fail "NaN in the data: the job took $secs s to end"
echo "abort, NaN in the data: exit 8 after $secs s: $(grep 'error:' "$T/data.e" | cut -c1-160)..."

# a NaN regression target (sample 57 of the second shard) is bad data, not
# divergence: named with its sample like a NaN input
"$MK" nan-target "$T/nan-target.h5" && "$MK" float-y "$T/float-y.h5" || fail "make_bad_deck"
run target "$T/float-y.h5" "$T/nan-target.h5" $base
[ $rc -eq 8 ] || { cat "$T/target.e"; fail "NaN target: exit $rc, expected 8"; }
[ "$(errors target)" -eq 1 ] || { cat "$T/target.e"; fail "NaN target: expected one error line"; }
has target.e "sample 257 (row 57 of $T/nan-target.h5) holds a non-finite target value (nan at value 0 of 1): the regression target in /train/y is bad"
grep -q "lower --lr" "$T/target.e" && { cat "$T/target.e"; fail "NaN target reported as divergence"; }

bn="--model linear:24,bn,relu,dropout:0.2,linear:auto --batch 8 --log-every 1 --eval-every 0"
run inj "$T/d.h5" $bn --steps 10 --inject nan:1:3
[ $rc -eq 8 ] || { cat "$T/inj.e"; fail "--inject nan:1:3: exit $rc, expected 8"; }
[ "$(errors inj)" -eq 1 ] || { cat "$T/inj.e"; fail "--inject nan:1:3: expected one error line"; }
has inj.e "rank 1 ($(hostname)): error: the training loss is nan at step 3 on this rank"
has inj.e "holds a non-finite input value (nan at value 0 of 12)"
# the sample named is the first of rank 1's batch (the value poisoned)
first=$(sed -n 's/.*its samples there: \([0-9]*\),.*/\1/p' "$T/inj.e")
has inj.e "; sample $first (row $first of $T/d.h5) holds"
[ "$secs" -le 30 ] || fail "--inject nan:1:3: the job took $secs s to end"
echo "abort, --inject nan:1:3 with SyncBN: exit 8 after $secs s, sample $first named"

# the verdict comes one step late (the host does not wait for the step it
# just queued), but before anything reads the model: a NaN at a checkpoint
# step leaves no checkpoint of the poisoned weights, and a NaN in the last
# step is still named with its sample (not "the weights are not finite")
late="--model linear:16,relu,linear:auto --batch 8 --log-every 0 --eval-every 0"
run ck "$T/d.h5" $late --steps 10 --inject nan:1:4 --ckpt-every 4 --ckpt-dir "$T/ck"
[ $rc -eq 8 ] || { cat "$T/ck.e"; fail "NaN at a checkpoint step: exit $rc, expected 8"; }
has ck.e "rank 1 ($(hostname)): error: the training loss is nan at step 4 on this rank"
ls "$T/ck" | grep -q '^ckpt_' && { ls -l "$T/ck"; fail "a checkpoint of the step whose loss was NaN"; }
run last "$T/d.h5" $late --steps 5 --inject nan:1:5
[ $rc -eq 8 ] || { cat "$T/last.e"; fail "NaN in the last step: exit $rc, expected 8"; }
has last.e "the training loss is nan at step 5 on this rank"
has last.e "holds a non-finite input value (nan at value 0 of 12)"
echo "abort, NaN at a checkpoint step and in the last step: named, no checkpoint written"

# ---- skip --------------------------------------------------------------
for opt in "--momentum 0.9" "--optimizer adamw --lr 0.01"; do
  rm -rf "$T/skip" "$T/ref"
  run skip "$T/d.h5" $bn $opt --steps 4 --on-nonfinite skip --inject nan:1:4 --ckpt-dir "$T/skip"
  [ $rc -eq 0 ] || { cat "$T/skip.e"; fail "skip ($opt): exit $rc"; }
  run ref "$T/d.h5" $bn $opt --steps 3 --ckpt-dir "$T/ref"
  [ $rc -eq 0 ] || { cat "$T/ref.e"; fail "reference ($opt): exit $rc"; }
  # (the two ranks warn at once: their lines may interleave, not their texts)
  has skip.e "step 4 skipped: the all-reduced gradient is not finite"
  has skip.e "rank 1 ($(hostname)): warning: "
  has skip.e "the training loss is nan at step 4 on this rank"
  has skip.o "skipped_steps=1 (--on-nonfinite skip): steps 4"
  has skip.o "step 3/4 "
  grep -q "loss nan" "$T/skip.o" && fail "skip ($opt): a NaN loss was logged"
  # the model (weights, BN statistics and counters) of step 3, bitwise
  "$WEIGHTS_CMP" "$T/skip/ckpt_00000004.h5" "$T/ref/ckpt_00000003.h5" 0 >"$T/cmp" \
    || { cat "$T/cmp"; fail "skip ($opt): the skipped step changed the model"; }
  # the optimizer state and its step count, bitwise
  h5dump -g /optimizer "$T/skip/ckpt_00000004.h5" | sed 1d >"$T/opt.skip" || fail "h5dump"
  h5dump -g /optimizer "$T/ref/ckpt_00000003.h5" | sed 1d >"$T/opt.ref" || fail "h5dump"
  [ "$(grep -c DATASET "$T/opt.ref")" -gt 0 ] \
    || { head "$T/opt.ref"; fail "no optimizer state in the checkpoint"; }
  cmp -s "$T/opt.skip" "$T/opt.ref" \
    || { diff "$T/opt.skip" "$T/opt.ref" | head; fail "skip ($opt): the skipped step changed the optimizer"; }
  echo "skip ($opt): the run that skipped step 4 holds the state of step 3 ($(tail -n 1 "$T/cmp"))"
done

# a skip mid-run, with accumulation: training goes on (finite weights, else exit 8)
run mid "$T/d.h5" $bn --steps 12 --accum 2 --on-nonfinite skip --inject nan:0:5
[ $rc -eq 0 ] || { cat "$T/mid.e"; fail "skip mid-run: exit $rc"; }
has mid.o "skipped_steps=1 (--on-nonfinite skip): steps 5"
has mid.o "step 12/12 "

# --max-skips: 2 in a row stop the job; 2 apart do not
run row "$T/d.h5" $bn --steps 10 --on-nonfinite skip --max-skips 2 --inject nan:1:2,nan:0:3
[ $rc -eq 8 ] || { cat "$T/row.e"; fail "--max-skips 2, 2 in a row: exit $rc, expected 8"; }
[ "$(errors row)" -eq 1 ] || { cat "$T/row.e"; fail "--max-skips: expected one error line"; }
has row.e "ddptrain: error: 2 steps in a row had a non-finite gradient and were skipped (steps 2 to 3; --max-skips 2)"
run apart "$T/d.h5" $bn --steps 10 --on-nonfinite skip --max-skips 2 --inject nan:1:2,nan:0:4
[ $rc -eq 0 ] || { cat "$T/apart.e"; fail "--max-skips 2, 2 apart: exit $rc"; }
has apart.o "skipped_steps=2 (--on-nonfinite skip): steps 2, 4"
echo ok
