#!/bin/sh
# test_replicas.sh -- every rank holds identical weights after every step
# (--check-replicas 1 compares a hash of all parameters and BN buffers across
# ranks after each step, at 2 and 3 ranks); a replica nudged by fault
# injection is caught; ranks started with different options are stopped at
# start-up with the option and the ranks named.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 900 --seed 6 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--model linear:24,bn,relu,dropout:0.2,linear:auto --batch 8 --steps 15 --log-every 0 --eval-every 0"
for np in 2 3; do
  mpirun_np $np "$DDPTRAIN" "$T/d.h5" $common --check-replicas 1 >"$T/o" 2>&1 \
    || { cat "$T/o"; fail "np=$np: replicas differ or the run failed"; }
  mpirun_np $np "$DDPTRAIN" "$T/d.h5" $common --check-replicas 1 --optimizer adamw --lr 0.01 \
    --grad-compress bf16 >"$T/o" 2>&1 || { cat "$T/o"; fail "np=$np adamw bf16: replicas differ"; }
done

# --no-sync-bn: BN statistics are local (they differ between ranks), the
# parameters still agree after every step, and the saved model differs from
# the SyncBN one (local statistics were really used)
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --check-replicas 1 --no-sync-bn --save "$T/local.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "--no-sync-bn: replicas differ or the run failed"; }
grep -q "local statistics per rank" "$T/o" || fail "--no-sync-bn not in the start-up table"
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --save "$T/sync.h5" >/dev/null 2>&1 || fail "sync-bn run"
if "$WEIGHTS_CMP" "$T/local.h5" "$T/sync.h5" 1e-6 layers.1.running_mean >/dev/null; then
  fail "--no-sync-bn gave the SyncBN running statistics"
fi

# a diverged replica is reported, with the step and the rank, exit code 6
DDP_FAULT_PERTURB=1:3 mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --check-replicas 1 >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 6 ] || { cat "$T/o" "$T/e"; fail "perturbed replica: exit $rc, expected 6"; }
grep -q "replicas diverged: after step 3 the parameters and BN statistics of rank 1 differ" "$T/e" \
  || { cat "$T/e"; fail "perturbed replica message"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "expected one error line"; }

# different options on different ranks (MPMD launch): named at start-up
timeout 120 $MPIEXEC $DDP_MPIEXEC_FLAGS -np 2 "$DDPTRAIN" "$T/d.h5" $common \
  : -np 1 "$DDPTRAIN" "$T/d.h5" $common --batch 4 >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 6 ] || { cat "$T/o" "$T/e"; fail "mismatched --batch: exit $rc, expected 6"; }
grep -q "ranks disagree on --batch: rank 0 has '8', rank 2 has '4'" "$T/e" \
  || { cat "$T/e"; fail "mismatch message"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "expected one error line"; }

# the same path naming different files (a stale copy on one node): rank 1's
# deck has no /val, so it would skip the evaluation rank 0 runs; named at
# start-up instead of a hang
mkdir -p "$T/a" "$T/b"
"$DDPPREP" synthetic --classes 4 --features 12 --samples 900 --val 50 --seed 6 -o "$T/a/d.h5" \
  >/dev/null || fail "prep a"
cp "$T/d.h5" "$T/b/d.h5"
timeout 120 $MPIEXEC $DDP_MPIEXEC_FLAGS -np 1 sh -c "cd '$T/a' && exec '$DDPTRAIN' d.h5 $common" \
  : -np 1 sh -c "cd '$T/b' && exec '$DDPTRAIN' d.h5 $common" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 6 ] || { cat "$T/o" "$T/e"; fail "one rank without /val: exit $rc, expected 6"; }
grep -q "ranks disagree on validation data: rank 0 has '/val with 50 samples of 12 values', rank 1 has 'no /val'" "$T/e" \
  || { cat "$T/e"; fail "validation data mismatch message"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "expected one error line"; }
echo ok
