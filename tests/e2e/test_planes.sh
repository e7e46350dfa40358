#!/bin/sh
# test_planes.sh -- every collective runs on the plane its name belongs to
# (step.h, "Planes"; the table in activity.c): with --debug-collectives a job
# whose control collective (metrics, evaluation sums, replica hashes,
# checkpoint agreement...) is started on the gradient plane, or a bucket on
# the control plane, stops with exit 6 naming both planes.  The runs cover
# every kind of collective of a run: start-up check and broadcast,
# SyncBatchNorm and buckets, metrics and the summary, evaluation, the
# replica check, checkpoints and --resume, the --no-sync-bn average, and
# --diagnose (its buckets' all-reduce alone and its report's gather).
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 400 --val 64 --seed 5 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
common="--model linear:16,bn,relu,linear:auto --batch 8 --log-every 5 --eval-every 1 \
--check-replicas 3 --debug-collectives"
run() { # run NAME OPTIONS...: exit 0, no plane complaint
  name=$1; shift
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common "$@" >"$T/o" 2>&1 || { cat "$T/o"; fail "$name"; }
  ! grep -q "plane" "$T/o" || { cat "$T/o"; fail "$name: a collective on the wrong plane"; }
  echo "$name: every collective on its plane"
}
run "SyncBN, checkpoints" --steps 30 --ckpt-dir "$T/ck" --ckpt-every 10
run "resume" --steps 40 --ckpt-dir "$T/ck" --resume auto
run "--no-sync-bn" --steps 20 --no-sync-bn --ckpt-dir "$T/ck2" --ckpt-every 10
run "bf16, clipping" --steps 20 --grad-compress bf16 --clip-grad-norm 1
run "--diagnose" --diagnose --diagnose-steps 4
grep -q "^verdict: " "$T/o" || { cat "$T/o"; fail "--diagnose under --debug-collectives gave no verdict"; }
exit 0
