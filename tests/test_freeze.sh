#!/bin/sh
# test_freeze.sh -- frozen and unused parameters.  --freeze keeps a layer at
# its initial values and out of the buckets; a parameter that receives no
# gradient (forced by fault injection, DDP_FAULT_SKIP_GRAD) stops the step
# with its name, unless --find-unused gives it a zero gradient.
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

# an unused parameter without --find-unused: one error naming it, no hang
DDP_FAULT_SKIP_GRAD=layers.2.bias mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] || { cat "$T/e"; fail "unused parameter: exit $rc, expected 2"; }
grep -q "parameter layers.2.bias received no gradient in step 1," "$T/e" || { cat "$T/e"; fail "unused message"; }
grep -q -- "--find-unused" "$T/e" || fail "unused message does not point at --find-unused"
# with --find-unused it trains, and the unused bias keeps its value (zero gradient, no momentum)
DDP_FAULT_SKIP_GRAD=layers.2.bias mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --find-unused \
  --init "$T/init.h5" --save "$T/unused.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "--find-unused run"; }
"$WEIGHTS_CMP" "$T/unused.h5" "$T/init.h5" 0 layers.2.bias >/dev/null || fail "unused bias changed"
echo ok
