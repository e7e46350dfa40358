#!/bin/sh
# test_ckpt_jobs.sh -- jobs sharing a --ckpt-dir are told apart: (a) a second
# job started while another runs in the directory is refused at start-up
# (exit 2, at 2 ranks) naming the first, which finishes with its checkpoints
# intact; (b) a lock left by a dead process of this host, or by this Slurm job
# before its requeue, is taken over; one of another host is refused naming
# the file to delete; no run leaves its lock behind; (c) --resume from a
# checkpoint trained on another deck of the same shape is refused (exit 3)
# naming both decks and --resume-other-data, which resumes with a warning and
# keeps the checkpoint's run id; a copy of the same deck under another path
# resumes without one; (d) --keep 1 in a directory holding another run's
# checkpoints (copied in beside this run's) removes only this run's older
# ones; (e) a fresh start in a directory holding an earlier run's
# checkpoints is refused (exit 2) with nothing changed.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
for s in 3 4; do
  "$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --seed $s -o "$T/d$s.h5" \
    >/dev/null || fail "ddptrain-prep synthetic --seed $s"
done
cp "$T/d3.h5" "$T/copy3.h5"
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-120}
q="--model linear:16,relu,linear:auto --batch 8 --eval-every 0"

# one OUT ERR ARGS...: ddptrain on one rank; its exit code in $rc
one() {
  _o=$1 _e=$2; shift 2
  rc=0
  timeout -k 10 "$DDP_TEST_TIMEOUT" "$DDPTRAIN" "$@" >"$_o" 2>"$_e" || rc=$?
}
ok() { [ "$rc" -eq 0 ] || { cat "$T/o" "$T/e"; fail "$1: exit $rc"; }; }
nolock() { [ ! -e "$1/ddptrain.lock" ] || fail "$2: $1/ddptrain.lock left behind"; }
sums() { (cd "$1" && md5sum ckpt_*.h5); }

# (a) two live jobs in one directory
"$DDPTRAIN" "$T/d3.h5" $q --steps 100000000 --log-every 20 --ckpt-dir "$T/a" --ckpt-every 20 \
  --keep 2 >"$T/o1" 2>"$T/e1" &
job=$!
ddp_wait_progress "$T/o1" "$T/e1" "the first job" "^checkpoint step=20 "
[ -s "$T/a/ddptrain.lock" ] || { kill $job; fail "the first job holds no $T/a/ddptrain.lock"; }
rc=0
mpirun_np 2 "$DDPTRAIN" "$T/d4.h5" $q --steps 3 --log-every 0 --ckpt-dir "$T/a" --ckpt-every 1 \
  --keep 1 >"$T/o" 2>"$T/e" || rc=$?
kill -0 $job 2>/dev/null || { cat "$T/o1" "$T/e1"; fail "the first job ended early"; }
ddp_expect_error "$T/e" $rc 2 "a second job in a live job's --ckpt-dir" \
  "--ckpt-dir $T/a is in use by another job|pid $job on host $(hostname)|another --ckpt-dir"
grep -q "^step " "$T/o" && fail "the refused job trained"
kill -USR1 $job
rc=0
wait $job || rc=$?
[ $rc -eq 75 ] || { cat "$T/o1" "$T/e1"; fail "the first job after SIGUSR1: exit $rc, expected 75"; }
nolock "$T/a" "the first job"
# its checkpoints: the newest two it wrote, whole, and nothing of the second job
want=$(grep -o "file=[^ ]*" "$T/o1" | tail -n 2 | sed "s|file=$T/a/||" | sort | tr '\n' ' ')
have=$(cd "$T/a" && ls | sort | tr '\n' ' ')
[ "$want" = "$have" ] || fail "the first job's --ckpt-dir holds '$have', expected '$want'"
last=$(grep -o "file=[^ ]*" "$T/o1" | tail -n 1 | cut -d= -f2)
step=$(basename "$last" .h5 | sed 's/^ckpt_0*//')
one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps $((step + 2)) --ckpt-dir "$T/a" --resume auto
ok "resuming the first job"
grep -qF "  resume       $last: step $step," "$T/o" || { cat "$T/o"; fail "no resume from $last"; }
nolock "$T/a" "the resumed job"
echo "ok: a second job in a live job's --ckpt-dir refused, the first finishes intact"

# (b) stale locks
mkdir "$T/b"
dead=$(sh -c 'echo $$')
printf 'host=%s\npid=%s\nslurm_job_id=\nsince=x\n' "$(hostname)" "$dead" >"$T/b/ddptrain.lock"
one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps 2 --ckpt-dir "$T/b"
ok "a stale lock of this host"
grep -qF "took over the lock of a job that ended without removing it (pid $dead on host $(hostname)" \
  "$T/o" || { cat "$T/o"; fail "no note of the stale lock taken over"; }
nolock "$T/b" "a run that took over a stale lock"
printf 'host=elsewhere.invalid\npid=7\nslurm_job_id=4242\nsince=x\n' >"$T/b/ddptrain.lock"
one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps 2 --ckpt-dir "$T/b"
ddp_expect_error "$T/e" $rc 2 "a lock of another host" \
  "locked by a job on another host (Slurm job 4242, pid 7 on host elsewhere.invalid|delete $T/b/ddptrain.lock"
[ -e "$T/b/ddptrain.lock" ] || fail "another host's lock was removed"
SLURM_JOB_ID=4242 one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps 2 --ckpt-dir "$T/b" --resume auto
ok "this Slurm job's lock from before its requeue"
grep -qF "took over the lock of this Slurm job before its restart" "$T/o" \
  || { cat "$T/o"; fail "no note of the requeued job's lock taken over"; }
nolock "$T/b" "a requeued job"
echo "ok: stale locks taken over, another host's refused, none left behind"

# (c) resuming from a checkpoint of another deck of the same shape
one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps 4 --ckpt-dir "$T/c" --ckpt-every 2 --keep 0
ok "the first run of (c)"
run=$(sed -n 's/^  run          \([0-9a-f]*\) (new).*/\1/p' "$T/o")
[ ${#run} -eq 16 ] || { cat "$T/o"; fail "no new run id in the start-up table"; }
before=$(sums "$T/c")
one "$T/o" "$T/e" "$T/d4.h5" $q --log-every 0 --steps 8 --ckpt-dir "$T/c" --resume auto
ddp_expect_error "$T/e" $rc 3 "a resume on another deck" \
  "--resume $T/c/ckpt_00000004.h5: the checkpoint was trained on other data: $T/d3.h5|this run reads $T/d4.h5|--resume-other-data"
[ "$before" = "$(sums "$T/c")" ] || fail "a refused resume changed the checkpoints"
one "$T/o" "$T/e" "$T/copy3.h5" $q --log-every 0 --steps 6 --ckpt-dir "$T/c" --resume auto --keep 0
ok "a resume on a copy of the same deck"
grep -q "warning" "$T/e" && { cat "$T/e"; fail "a copy of the same deck warned"; }
grep -q "^  run          $run (the checkpoint's)" "$T/o" || { cat "$T/o"; fail "the run id $run not kept"; }
one "$T/o" "$T/e" "$T/d4.h5" $q --log-every 0 --steps 8 --ckpt-dir "$T/c" --resume auto \
  --resume-other-data
ok "--resume-other-data"
grep -qF "trained on other data ($T/copy3.h5, fingerprint " "$T/e" || { cat "$T/e"; fail "no warning naming the other data"; }
grep -qF "  resume       $T/c/ckpt_00000006.h5: step 6," "$T/o" || { cat "$T/o"; fail "no resume at step 6"; }
grep -q "^  run          $run (the checkpoint's)" "$T/o" || { cat "$T/o"; fail "the run id $run not kept"; }
nolock "$T/c" "(c)"
echo "ok: a resume on another deck refused, --resume-other-data resumes with a warning"

# (d) --keep leaves another run's checkpoints alone: this run's own in its
# directory, resumed by name after another run's were copied in beside them
one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps 4 --ckpt-dir "$T/x" --ckpt-every 2 --keep 0
ok "the other run of (d)"
one "$T/o" "$T/e" "$T/d4.h5" $q --log-every 0 --steps 3 --ckpt-dir "$T/d" --ckpt-every 3
ok "this run of (d), its first part"
cp "$T/x/ckpt_00000002.h5" "$T/x/ckpt_00000004.h5" "$T/d/" || exit 99
before=$(sums "$T/d" | grep -v ckpt_00000003)
one "$T/o" "$T/e" "$T/d4.h5" $q --log-every 0 --steps 9 --ckpt-dir "$T/d" --ckpt-every 3 --keep 1 \
  --resume "$T/d/ckpt_00000003.h5"
ok "--keep 1 beside another run's checkpoints"
have=$(cd "$T/d" && ls | tr '\n' ' ')
[ "$have" = "ckpt_00000002.h5 ckpt_00000004.h5 ckpt_00000009.h5 " ] \
  || fail "--keep 1: the directory holds '$have', expected the other run's two and this run's newest"
[ "$before" = "$(sums "$T/d" | grep -v ckpt_00000009)" ] || fail "the other run's checkpoints changed"
echo "ok: --keep removes only this run's checkpoints"

# (e) a fresh start (no --resume) in a directory holding an earlier run's
# checkpoints is refused before anything is written; --resume auto goes on
before=$(sums "$T/x")
one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps 4 --ckpt-dir "$T/x" --ckpt-every 2
ddp_expect_error "$T/e" $rc 2 "a fresh start over an earlier run's checkpoints" \
  "--ckpt-dir $T/x already holds 2 checkpoints of an earlier run (the newest: $T/x/ckpt_00000004.h5)|--resume auto"
[ "$before" = "$(sums "$T/x")" ] || fail "a refused fresh start changed the earlier run's checkpoints"
nolock "$T/x" "a refused fresh start"
one "$T/o" "$T/e" "$T/d3.h5" $q --log-every 0 --steps 6 --ckpt-dir "$T/x" --ckpt-every 2 --resume auto
ok "--resume auto in the earlier run's directory"
echo "ok: a fresh start over an earlier run's checkpoints refused"
