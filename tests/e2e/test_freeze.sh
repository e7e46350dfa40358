#!/bin/sh
# test_freeze.sh -- frozen and unused parameters.  --freeze keeps a layer at
# its initial values and out of the buckets; a parameter that receives no
# gradient (forced by fault injection, --inject skipgrad) stops the step
# with its name, on every rank or on one (no hang), unless --find-unused
# gives it a zero gradient.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --seed 10 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
model="linear:16,relu,linear:16,relu,linear:auto"
common="--model $model --batch 8 --steps 10 --log-every 0 --eval-every 0 --momentum 0"
# initial weights: one step with lr 0 changes nothing
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" $common --steps 1 --lr 0 --save "$T/init.h5" >/dev/null 2>&1 \
  || fail "init run"
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --init "$T/init.h5" --freeze layers.0,layers.2.bias \
  --save "$T/frozen.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "frozen run"; }
"$WEIGHTS_CMP" "$T/frozen.h5" "$T/init.h5" 0 layers.0. >/dev/null || fail "frozen layers.0 changed"
"$WEIGHTS_CMP" "$T/frozen.h5" "$T/init.h5" 0 layers.2.bias >/dev/null || fail "frozen bias changed"
if "$WEIGHTS_CMP" "$T/frozen.h5" "$T/init.h5" 1e-3 layers.2.weight >/dev/null; then
  fail "trainable layers.2.weight did not change"
fi
grep -q "(.* trainable)" "$T/o" || fail "no trainable count in the start-up table"

# an unused parameter without --find-unused (layers.2.bias withholds its
# gradient in step 1 on every rank): one error naming it, no hang
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --inject 'skipgrad:*:1:layers.2.bias' >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] || { cat "$T/e"; fail "unused parameter: exit $rc, expected 2"; }
grep -q "parameter layers.2.bias received no gradient in step 1," "$T/e" || { cat "$T/e"; fail "unused message"; }
grep -q -- "--find-unused" "$T/e" || fail "unused message does not point at --find-unused"
[ "$(grep -c 'error:' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "unused parameter: expected one error line"; }
# ... on rank 1 only, in step 3: rank 0 waits in the bucket's all-reduce, and
# rank 1's error ends the job (exit 2) instead of a hang
DDP_TEST_TIMEOUT=60 mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --inject skipgrad:1:3:layers.2.bias \
  >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] || { cat "$T/e"; fail "unused parameter on rank 1: exit $rc, expected 2"; }
grep -q "rank 1 (.*): error: parameter layers.2.bias received no gradient in step 3," "$T/e" \
  || { cat "$T/e"; fail "unused parameter on rank 1: message"; }
# an --inject skipgrad naming no trainable parameter is refused at start-up
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --freeze layers.0 --inject 'skipgrad:*:1:layers.0.bias' \
  >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] && grep -q "not a trainable parameter" "$T/e" \
  || { cat "$T/e"; fail "skipgrad of a frozen parameter: exit $rc, expected 2 and a message"; }
# with --find-unused it trains, and the unused bias gets a zero gradient:
# without momentum, step 2 (layers.2.bias withheld on every rank) leaves it
# where step 1 put it, while the other parameters train on
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --find-unused --steps 2 \
  --init "$T/init.h5" --inject 'skipgrad:*:2:layers.2.bias' --save "$T/unused.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "--find-unused run"; }
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --steps 1 --init "$T/init.h5" --save "$T/step1.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "one step"; }
"$WEIGHTS_CMP" "$T/unused.h5" "$T/step1.h5" 0 layers.2.bias >/dev/null \
  || fail "the bias without a gradient changed in step 2"
"$WEIGHTS_CMP" "$T/step1.h5" "$T/init.h5" 0 layers.2.bias >/dev/null \
  && fail "layers.2.bias did not train in step 1 (the check above proves nothing)"
"$WEIGHTS_CMP" "$T/unused.h5" "$T/step1.h5" 1e-6 layers.2.weight >/dev/null \
  && fail "layers.2.weight did not train in step 2"
echo ok
