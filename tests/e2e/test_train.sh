#!/bin/sh
# test_train.sh -- one-process training end to end: it learns the synthetic
# task, prints the start-up table and evaluation lines, saves weights that
# --init reads back, rejects mismatched --init files and bad model specs, and
# its start-up memory estimate matches the measured peak RSS within 25% (and,
# at 2 ranks, the proportional set size); an evaluation in the middle of a
# progress window changes neither training nor the window's logged loss.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 10 --features 32 --samples 6000 --val 1000 --seed 1 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"

# learns: validation accuracy far above chance (0.1) after 4 epochs
"$DDPTRAIN" "$T/d.h5" --model linear:64,bn,relu,linear:auto --epochs 4 --batch 32 \
  --optimizer adamw --lr 0.003 --save "$T/w.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "training run"; }
for what in "memory/rank" "buckets" "global batch 32" "eval epoch=4" "saved weights to"; do
  grep -q "$what" "$T/o" || { cat "$T/o"; fail "output lacks '$what'"; }
done
acc=$(ddp_field "$T/o" val_acc)
awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' || { cat "$T/o"; fail "val_acc $acc not above 0.6"; }
echo "1 rank, 4 epochs: val_acc $acc"
n_eval=$(grep -c "^eval epoch=" "$T/o")
[ "$n_eval" -eq 4 ] || fail "expected 4 evaluation lines (--eval-every 1), got $n_eval"

# --init reads the saved weights back (lr 0: the linear weights stay put)
"$DDPTRAIN" "$T/d.h5" --model linear:64,bn,relu,linear:auto --steps 1 --lr 0 --init "$T/w.h5" \
  --save "$T/w2.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "--init run"; }
"$WEIGHTS_CMP" "$T/w2.h5" "$T/w.h5" 0 layers.0. >/dev/null || fail "--init did not load layers.0"
"$WEIGHTS_CMP" "$T/w2.h5" "$T/w.h5" 0 layers.3. >/dev/null || fail "--init did not load layers.3"

# a weights file of another model: every problem named, exit 3
"$DDPTRAIN" "$T/d.h5" --model linear:32,relu,linear:auto --init "$T/w.h5" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 3 ] || { cat "$T/e"; fail "--init mismatch: exit $rc, expected 3"; }
grep -q "layers.0.weight has shape file \[64, 32\], model \[32, 32\]" "$T/e" || { cat "$T/e"; fail "shape message"; }
grep -q "unexpected tensor layers.1.running_mean" "$T/e" || { cat "$T/e"; fail "extra tensor message"; }
# many problems: as many as fit are named, the rest counted, the advice kept
"$DDPTRAIN" "$T/d.h5" --steps 1 --log-every 0 --save "$T/deep.h5" \
  --model linear:32,bn,relu,linear:32,bn,relu,linear:32,bn,relu,linear:32,bn,relu,linear:auto \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "deep model run"; }
"$DDPTRAIN" "$T/d.h5" --init "$T/deep.h5" \
  --model linear:16,bn,relu,linear:16,bn,relu,linear:16,bn,relu,linear:16,bn,relu,linear:auto \
  >"$T/o" 2>"$T/e"
[ $? -eq 3 ] || { cat "$T/e"; fail "--init with many problems: expected exit 3"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "many problems: one line"; }
grep -q "(25 problems): layers.0.weight has shape .*; and [0-9]* more; check --model against the file" \
  "$T/e" || { cat "$T/e"; fail "many problems: the count and the advice"; }

# an unwritable --save is found before training, not after it
"$DDPTRAIN" "$T/d.h5" --steps 5 --log-every 1 --save "$T/no/such/dir/w.h5" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 4 ] || { cat "$T/o" "$T/e"; fail "--save into a missing directory: exit $rc, expected 4"; }
grep -q "^step " "$T/o" && fail "--save into a missing directory: trained before failing"
grep -q -- "--save $T/no/such/dir/w.h5: cannot create" "$T/e" || { cat "$T/e"; fail "--save message"; }
"$DDPTRAIN" "$T/d.h5" --steps 5 --save "$T" >"$T/o" 2>"$T/e"
[ $? -eq 2 ] || { cat "$T/e"; fail "--save naming a directory: expected exit 2"; }
ls "$T"/*.tmp.* >/dev/null 2>&1 && fail "a temporary file was left behind"

# a bad spec: exit 2, the layer named
"$DDPTRAIN" "$T/d.h5" --model linear:64,bnn,linear:auto >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] || fail "bad spec: exit $rc, expected 2"
grep -q "layer 1 'bnn': unknown layer type" "$T/e" || { cat "$T/e"; fail "bad spec message"; }

# memory estimate vs measured peak RSS (a model large enough to dominate the
# process: about 65M parameters, 3 float copies with momentum); not in
# sanitizer builds, whose shadow memory is no part of the estimate
if "$DDPTRAIN" --version | grep -q "sanitizers"; then
  echo "sanitizer build: memory estimate vs peak RSS not compared"
  echo ok
  exit 0
fi
"$DDPTRAIN" "$T/d.h5" --model linear:8000,relu,linear:8000,relu,linear:auto --batch 16 --steps 2 \
  --eval-every 0 --log-every 0 >"$T/o" 2>&1 || { cat "$T/o"; fail "large model run"; }
est=$(grep "memory/rank" "$T/o" | sed 's/.*= \([0-9.]*\) MiB.*/\1/')
rss=$(ddp_field "$T/o" peak_rss_mib)
awk -v e="$est" -v r="$rss" 'BEGIN { d = (r - e) / r; if (d < 0) d = -d; exit !(d <= 0.25) }' \
  || { cat "$T/o"; fail "memory estimate $est MiB vs peak RSS $rss MiB: more than 25% apart"; }
echo "memory estimate $est MiB, peak RSS $rss MiB"

# at 2 ranks: the estimate per rank vs the proportional set size (PSS); RSS
# also counts, in full, the other rank's shared buffers that the
# shared-memory all-reduce reads
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model linear:8000,relu,linear:8000,relu,linear:auto --batch 16 \
  --steps 2 --eval-every 0 --log-every 0 >"$T/o" 2>&1 || { cat "$T/o"; fail "large model run, 2 ranks"; }
est=$(grep "memory/rank" "$T/o" | sed 's/.*= \([0-9.]*\) MiB.*/\1/')
pss=$(ddp_field "$T/o" pss_mib)
awk -v e="$est" -v r="$pss" 'BEGIN { d = (r - e) / r; if (d < 0) d = -d; exit !(r > 0 && d <= 0.25) }' \
  || { cat "$T/o"; fail "2 ranks: memory estimate $est MiB vs PSS $pss MiB: more than 25% apart"; }
echo "2 ranks: memory estimate $est MiB per rank, PSS $pss MiB"

# evaluation after every epoch (every 6000/32 = 187.5 -> 187 steps) inside
# the window of steps 181-200 of --log-every 20: the progress lines are those
# of a run without evaluation (the logged loss is the training loss)
lines() { grep "^step " "$1" | sed 's/ [0-9]* samples\/s.*//'; }
ev="--model linear:64,bn,relu,linear:auto --steps 200 --batch 32 --log-every 20"
"$DDPTRAIN" "$T/d.h5" $ev --eval-every 1 >"$T/e1" 2>&1 || { cat "$T/e1"; fail "--eval-every 1"; }
"$DDPTRAIN" "$T/d.h5" $ev --eval-every 0 >"$T/e0" 2>&1 || { cat "$T/e0"; fail "--eval-every 0"; }
grep -q "^eval epoch=1 step=187 " "$T/e1" || { cat "$T/e1"; fail "no evaluation after epoch 1"; }
lines "$T/e1" >"$T/l1"; lines "$T/e0" >"$T/l0"
cmp -s "$T/l1" "$T/l0" || { diff "$T/l1" "$T/l0"; fail "an evaluation changed the logged training loss"; }
echo "evaluation mid-window: progress lines unchanged ($(wc -l <"$T/l1") lines)"
echo ok
