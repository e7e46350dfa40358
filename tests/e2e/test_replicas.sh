#!/bin/sh
# test_replicas.sh -- every rank holds identical weights after every step
# (--check-replicas 1 compares a hash of all parameters and BN buffers across
# ranks at start-up and after each step, at 2 and 3 ranks), also with
# several gradient buckets, on every all-reduce path (--allreduce,
# --update), and after --init with trained weights, where np=2
# also trains the model of np=1 with the global batch; --no-sync-bn saves the
# average of the ranks' local BN statistics; a bit flipped by fault
# injection (--inject bitflip) in a parameter, a BN statistic or the
# optimizer state of one rank is caught, naming the rank and the tensor;
# ranks started with different options are stopped at start-up with the
# option and the ranks named.
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

# several buckets: caps of 1048 bytes give 2 buckets, the boundary between
# layers.0.bias (with layers.1 and layers.4 in the first) and layers.0.weight;
# every bucket is all-reduced: the replicas agree after every step and the
# model is that of one rank with the global batch (1e-5 relative)
small="--bucket-cap-mb 0.001 --first-bucket-mb 0.001"
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common $small --check-replicas 1 --save "$T/b2.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "2 buckets, np=2: replicas differ or the run failed"; }
grep -q "buckets *2:" "$T/o" || { cat "$T/o"; fail "expected 2 buckets in the start-up table"; }
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" $common $small --batch 16 --save "$T/b1.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "2 buckets, np=1"; }
"$WEIGHTS_CMP" "$T/b2.h5" "$T/b1.h5" 1e-5 >"$T/cmp" || { cat "$T/cmp"; fail "2 buckets: np=2 != np=1"; }
echo "2 buckets, np=2 vs np=1: $(tail -n 1 "$T/cmp")"

# the other all-reduce paths (the ring, the MPI library's, the update per
# bucket after its all-reduce and after the step) keep the replicas
# identical after every step too, at 3 ranks with 2 buckets
for path in "--allreduce ring --update bucket" "--allreduce mpi --update step" \
  "--allreduce ring --update fused --optimizer adamw --lr 0.01"; do
  mpirun_np 3 "$DDPTRAIN" "$T/d.h5" $common $small --check-replicas 1 $path >"$T/o" 2>&1 \
    || { cat "$T/o"; fail "np=3 $path: replicas differ or the run failed"; }
done
echo "np=3, the ring, the MPI library's all-reduce, unfused updates: replicas identical"

# --init with trained weights (b1.h5: not the seeded initialisation, BN
# statistics and counters not at their defaults): rank 0 reads the file and
# broadcasts it; the replicas agree from the start (step 0) and np=2 trains
# the model of np=1 with the global batch
init="--init $T/b1.h5 --steps 5"
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common $init --check-replicas 1 --save "$T/i2.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "--init trained weights, np=2: replicas differ or the run failed"; }
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" $common $init --batch 16 --save "$T/i1.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "--init trained weights, np=1"; }
"$WEIGHTS_CMP" "$T/i2.h5" "$T/i1.h5" 1e-5 >"$T/cmp" || { cat "$T/cmp"; fail "--init: np=2 != np=1"; }
echo "--init trained weights, np=2 vs np=1: $(tail -n 1 "$T/cmp")"

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
# the saved statistics are the average of the ranks' local ones: with lr 0
# (the input of BN does not change) and equal local batches, the average of
# the two local batch means is the global batch mean, so running_mean is
# that of one rank with batch 16 (a sum instead of the average doubles it)
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --no-sync-bn --lr 0 --steps 3 --save "$T/l2.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "--no-sync-bn lr 0"; }
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" $common --batch 16 --lr 0 --steps 3 --save "$T/l1.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "np=1 lr 0"; }
"$WEIGHTS_CMP" "$T/l2.h5" "$T/l1.h5" 1e-5 layers.1.running_mean >"$T/cmp" \
  || { cat "$T/cmp"; fail "--no-sync-bn: running_mean is not the average of the ranks' means"; }
echo "--no-sync-bn running_mean, np=2 vs np=1 at lr 0: $(tail -n 1 "$T/cmp")"

# a diverged replica is reported with the step, the rank, its host and the
# first tensor that differs, exit code 6 (one flipped bit: the lowest of
# the first value, after step 3, on rank 1 of 2; by default in the first
# parameter tensor)
flipped() { # flipped NP INJECT NEEDLE [options]: the run stops with NEEDLE
  _np=$1 _inj=$2 _needle=$3; shift 3
  DDP_TEST_TIMEOUT=120 mpirun_np "$_np" "$DDPTRAIN" "$T/d.h5" $common --check-replicas 1 \
    --inject "$_inj" "$@" >"$T/o" 2>"$T/e"
  rc=$?
  [ $rc -eq 6 ] || { cat "$T/o" "$T/e"; fail "--inject $_inj: exit $rc, expected 6"; }
  grep -qF "$_needle" "$T/e" || { cat "$T/e"; fail "--inject $_inj: message lacks '$_needle'"; }
  [ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "expected one error line"; }
}
flipped 2 bitflip:1:3 \
  "replicas diverged after step 3: rank 1's layers.0.weight differs from rank 0's (the only differing tensor;"
grep -q "rank 1 is on host $(hostname)" "$T/e" || { cat "$T/e"; fail "bitflip: host not named"; }
# the optimizer state is covered: SGD momentum, AdamW's second moment (the
# bucket-fused update on one node copies parameters and state from the
# rank that updated a block, so a flip there would heal unseen a step later)
flipped 2 bitflip:1:3:momentum_buffer:layers.4.weight \
  "rank 1's momentum_buffer:layers.4.weight differs from rank 0's (the only differing tensor;"
flipped 3 bitflip:2:3:exp_avg_sq:layers.0.bias \
  "rank 2's exp_avg_sq:layers.0.bias differs from rank 0's (the only differing tensor;" \
  --optimizer adamw --lr 0.01
# rank 0 the odd one out of 3: named against the 2 that agree; the first
# differing tensor in state_dict order, then optimizer state; SyncBN statistics
flipped 3 bitflip:0:3:exp_avg:layers.4.bias,bitflip:0:3:layers.1.running_var \
  "rank 0's layers.1.running_var differs from rank 1's (first of 2 differing tensors;" \
  --optimizer adamw --lr 0.01
# a name that is not a tensor is refused at start-up
DDP_TEST_TIMEOUT=120 mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --inject bitflip:1:3:exp_avg:layers.0.weight \
  >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] && grep -q "this optimizer keeps no state 'exp_avg' (it keeps momentum_buffer)" "$T/e" \
  || { cat "$T/e"; fail "bitflip of a state SGD does not keep: exit $rc"; }

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
