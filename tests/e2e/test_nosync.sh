#!/bin/sh
# test_nosync.sh -- --no-sync (a benchmark mode) at np=2: rank 0 warns at
# start-up that the replicas diverge, no gradient byte is all-reduced
# (summary grad_bytes=0, grad_allreduces=0), and the replicas really do
# diverge: --check-replicas 1 stops the job after step 1 with exit code 6.
# The same run without --no-sync all-reduces exactly the model's gradient
# every step and passes the replica check (the control).
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 400 --seed 51 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
STEPS=6
common="--model linear:16,relu,linear:auto --batch 8 --steps $STEPS --log-every 0 --eval-every 0"

# the control: synchronised replicas, 6 x (16x12+16 + 4x16+4) floats all-reduced
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --check-replicas 1 >"$T/sync" 2>&1 \
  || { cat "$T/sync"; fail "synchronised run failed the replica check"; }
b=$(ddp_field "$T/sync" grad_bytes)
[ "$b" = $((STEPS * (16 * 12 + 16 + 4 * 16 + 4) * 4)) ] \
  || { cat "$T/sync"; fail "synchronised run: grad_bytes=$b"; }
if grep -q -- "--no-sync" "$T/sync"; then cat "$T/sync"; fail "--no-sync warning without --no-sync"; fi

# --no-sync: nothing all-reduced, one warning (stderr, rank 0), the run completes
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --no-sync >"$T/o" 2>&1 || { cat "$T/o"; fail "--no-sync run"; }
[ "$(ddp_field "$T/o" grad_bytes)" = 0 ] || { cat "$T/o"; fail "--no-sync all-reduced gradient bytes"; }
[ "$(ddp_field "$T/o" grad_allreduces)" = 0 ] || { cat "$T/o"; fail "--no-sync started all-reduces"; }
warn=$(grep -- "--no-sync" "$T/o" | grep "diverge")
[ -n "$warn" ] || { cat "$T/o"; fail "no start-up warning that --no-sync makes the replicas diverge"; }
[ "$(echo "$warn" | wc -l)" -eq 1 ] || { cat "$T/o"; fail "the --no-sync warning is printed more than once"; }

# the replicas diverge: the hash comparison after step 1 fails, exit code 6
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --no-sync --check-replicas 1 >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 6 ] || { cat "$T/o" "$T/e"; fail "--no-sync --check-replicas 1: exit $rc, expected 6"; }
grep -q "replicas diverged after step 1: " "$T/e" || { cat "$T/e"; fail "--no-sync: replica check message"; }
echo ok
