#!/bin/sh
# test_slurm.sh -- the Slurm launch path, on a private single-host Slurm:
# munged, slurmctld and slurmd started here with a generated slurm.conf
# (their own ports, state and sockets under a temporary directory; nothing of
# the machine's own Slurm or munge is touched).  Checks that
#   - `srun --mpi=pmix -n 2 ddptrain` starts 2 ranks that find each other,
#     and trains to bit-identically the weights `mpirun -np 2` gives;
#   - bad input under srun gives one error line and the input exit code (3);
#   - the watchdog under srun: a rank that hangs (--inject hang) or exits
#     (--inject exit) ends the step within --timeout + 10 s, with a report
#     naming rank 1 (for the exit Slurm's PMIx plug-in may end it first);
#   - `sbatch --wait slurm/train.sbatch` runs a job to completion;
#   - the script with INPUT, CKPT_DIR and ARGS in the environment runs 2 ranks,
#     leaves the numbered checkpoints and the final one, and logs the steps;
#   - preemption: `scancel --signal=USR1 --batch` mid-training makes the ranks
#     checkpoint and exit 75, the script requeues the job, the restart resumes
#     from that checkpoint and finishes with weights bit-identical to an
#     uninterrupted `mpirun -np 2` run;
#   - SIGUSR1 before the ranks train kills them (138): the job is requeued too;
#   - a job that fails (missing input) ends FAILED with ddptrain's exit code;
#   - a plain `scancel`: the ranks checkpoint on SIGTERM, the job is not requeued.
# A failed check prints the job's log, `scontrol show job` and the Slurm logs.
# slurmd must run as root: without root, or without Slurm and munge
# installed (scripts/install-deps installs them), the test is skipped (77),
# unless DDP_REQUIRE_SLURM=1 (.ci/run sets it), which makes that a failure.
. ./testenv.sh || exit 99
set -u

skip() { ddp_skip DDP_REQUIRE_SLURM "$*"; }
[ "$(id -u)" = 0 ] || skip "slurmd needs root"
for p in munged mungekey slurmctld slurmd srun sbatch sinfo; do
  command -v "$p" >/dev/null 2>&1 || skip "$p not installed (scripts/install-deps installs Slurm and munge)"
done

T=$(mktemp -d "${TMPDIR:-/tmp}/ddpslurm.XXXXXX") || exit 99
chmod 700 "$T"
stop_daemons() {
  for f in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munge/munged.pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 1
  for f in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munge/munged.pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$T"
}
trap stop_daemons EXIT
logs() { for f in "$T"/log/* "$T/munge/munged.log"; do echo "--- $f"; tail -n 20 "$f"; done 2>/dev/null; }

# ---- munge: its own key, socket and pid file ----
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/log" && chmod 700 "$T/munge"
mungekey -c -k "$T/munge/munge.key" >/dev/null 2>&1 || fail "mungekey could not create a key"
chmod 600 "$T/munge/munge.key"
munged -f --key-file="$T/munge/munge.key" --socket="$T/munge/munge.sock" \
  --pid-file="$T/munge/munged.pid" --log-file="$T/munge/munged.log" --seed-file="$T/munge/seed" \
  || { logs; fail "munged did not start"; }

# ---- slurm.conf: one node, this host, ports picked from our pid ----
node=$(uname -n | cut -d. -f1)
port=$(( 20000 + ($$ % 20000) ))
cat >"$T/slurm.conf" <<EOF
ClusterName=ddptest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.sock,cred_expire=10
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc)
PartitionName=ddptest Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$T/slurm.conf"
slurmctld -f "$SLURM_CONF" || { logs; fail "slurmctld did not start"; }
slurmd -f "$SLURM_CONF" -N "$node" || { logs; fail "slurmd did not start"; }
i=0
until [ "$(sinfo -h -o %t 2>/dev/null)" = idle ]; do
  i=$((i + 1))
  [ $i -le 60 ] || { sinfo; logs; fail "the Slurm node did not become idle in 30 s"; }
  sleep 0.5
done

# ---- srun --mpi=pmix: 2 ranks, the same weights as mpirun ----
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --val 100 --seed 3 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--model linear:16,bn,relu,linear:auto --batch 8 --steps 20 --log-every 0"
timeout -k 5 120 srun --mpi=pmix -n 2 "$DDPTRAIN" "$T/d.h5" $common --save "$T/srun.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; logs; fail "srun --mpi=pmix -n 2 ddptrain failed"; }
grep -q "2 ranks on 1 node" "$T/o" || { cat "$T/o"; fail "srun: the ranks did not form one job of 2"; }
grep -q "^eval epoch=.*val_acc=" "$T/o" || { cat "$T/o"; fail "srun: no evaluation line"; }
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --save "$T/mpirun.h5" >"$T/o2" 2>&1 \
  || { cat "$T/o2"; fail "mpirun -np 2 failed"; }
"$WEIGHTS_CMP" "$T/srun.h5" "$T/mpirun.h5" 0 >"$T/cmp" \
  || { cat "$T/cmp"; fail "srun and mpirun trained different weights"; }

# ---- bad input under srun: one line, exit code 3, no hang ----
timeout -k 5 60 srun --mpi=pmix -n 2 "$DDPTRAIN" "$T/missing.h5" $common >"$T/o" 2>"$T/e"
rc=$?
[ $rc -ne 124 ] || fail "srun with a missing input hung"
grep -q "exit code 3" "$T/e" || { cat "$T/o" "$T/e"; fail "srun with a missing input: expected exit code 3 (rc $rc)"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "srun: expected one error line"; }

# ---- the watchdog under srun: a hang, and a rank that exits (srun alone
# would wait for the other rank forever), end the step within the timeout ----
wd="--model linear:16,bn,relu,linear:auto --batch 8 --steps 2000 --log-every 0 --eval-every 0 --timeout 3"
for fault in hang:1:3 exit:1:3:3; do
  t0=$(date +%s)
  timeout -k 5 60 srun --mpi=pmix -n 2 "$DDPTRAIN" "$T/d.h5" $wd --inject $fault >"$T/o" 2>"$T/e"
  rc=$? dt=$(($(date +%s) - t0))
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$T/o" "$T/e"; logs; fail "srun --inject $fault: exit $rc"; }
  [ $dt -le 13 ] || { cat "$T/e"; fail "srun --inject $fault: the step took $dt s to end (timeout 3)"; }
  case $fault in
  hang*) needle="watchdog: .* at step 3 .*has not completed in [0-9.]+ s \(--timeout 3\): rank 1 \([^)]*\) did not arrive" ;;
  # Slurm's PMIx plug-in ends the step itself when a task exits early (the
  # watchdog's report may not get out first); either names rank/task 1
  exit*) needle="watchdog: rank 1 \([^)]*\) vanished|task 1: Exited with exit code 3" ;;
  esac
  grep -qE "$needle" "$T/e" || { cat "$T/e"; fail "srun --inject $fault: no watchdog report naming rank 1"; }
  echo "srun --inject $fault: exit $rc after $dt s"
done

# ---- sbatch slurm/train.sbatch: the job script as shipped ----
( cd "$T" && DDPTRAIN="$DDPTRAIN" timeout -k 5 180 sbatch --wait -N 1 -n 2 --cpus-per-task=1 \
    -o "$T/job-%j.out" "$top_srcdir/slurm/train.sbatch" "$T/d.h5" $common ) >"$T/sb" 2>&1 \
  || { cat "$T/sb" "$T"/job-*.out; logs; fail "sbatch --wait slurm/train.sbatch failed"; }
grep -q "1 node(s), 2 rank(s)" "$T"/job-*.out || { cat "$T"/job-*.out; fail "train.sbatch: job line"; }
grep -q "^0: eval epoch=.*val_acc=" "$T"/job-*.out || { cat "$T"/job-*.out; fail "train.sbatch: no evaluation"; }

# ---- helpers for the jobs below: bounded waits; a failure shows the job ----
sctl() { timeout -k 2 20 scontrol "$@"; }
job_field() { sctl show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
failjob() {  # failjob JOBID LOG MESSAGE
  echo "--- job log $2"; cat "$2" 2>/dev/null; echo "--- scontrol show job $1"; sctl show job "$1"
  logs; fail "$3"
}
# wait_job JOBID LOG SECONDS STATE...: poll until the job is in one of the
# states (and not completing), fail after SECONDS
wait_job() {
  _j=$1 _l=$2 _n=$(($3 * 5)); shift 3
  while :; do
    _s=$(job_field "$_j" JobState)
    for _w in "$@"; do
      if [ "$_s" = "$_w" ] && ! sctl show job "$_j" 2>/dev/null | grep -q "JobState=.*COMPLETING"; then
        return 0
      fi
    done
    _n=$((_n - 1))
    [ $_n -gt 0 ] || failjob "$_j" "$_l" "job $_j: not $* in time (state $_s)"
    sleep 0.2
  done
}
# wait_file JOBID LOG FILE SECONDS
wait_file() {
  _n=$(($4 * 10))
  until [ -e "$3" ]; do
    _n=$((_n - 1))
    [ $_n -gt 0 ] || failjob "$1" "$2" "job $1: no $3 after $4 s"
    sleep 0.1
  done
}
submit() {  # submit LOGNAME DDPTRAIN [sbatch options]: the job id (INPUT, CKPT_DIR, ARGS from the caller)
  _o=$1 _b=$2; shift 2
  ( cd "$T" && DDPTRAIN="$_b" timeout -k 5 30 sbatch --parsable -N 1 -n 2 --cpus-per-task=1 \
      -o "$T/$_o-%j.out" "$@" "$top_srcdir/slurm/train.sbatch" ) 2>"$T/sb" | cut -d';' -f1
}

# ---- INPUT, CKPT_DIR and ARGS from the environment: 2 ranks, checkpoints ----
eargs="--model linear:16,bn,relu,linear:auto --batch 8 --steps 45 --log-every 10 --ckpt-every 10 --keep 0"
jid=$(INPUT="$T/d.h5" CKPT_DIR="$T/ck-env" ARGS="$eargs" submit env "$DDPTRAIN" --wait)
[ -n "$jid" ] || { cat "$T/sb"; logs; fail "sbatch --wait of train.sbatch with INPUT, CKPT_DIR, ARGS"; }
log="$T/env-$jid.out"
[ "$(job_field "$jid" JobState)" = COMPLETED ] || failjob "$jid" "$log" "env job: not COMPLETED"
grep -q "^ddptrain: job $jid (restart 0), 1 node(s), 2 rank(s), input $T/d.h5, checkpoints in $T/ck-env$" "$log" \
  || failjob "$jid" "$log" "env job: no job line with INPUT and CKPT_DIR"
grep -q "^0: ddptrain .*: 2 ranks on 1 node" "$log" || failjob "$jid" "$log" "env job: not 2 ranks"
for s in 10 20 30 40; do
  grep -q "^0: step $s/45 " "$log" || failjob "$jid" "$log" "env job: the log lacks step $s"
  [ -s "$T/ck-env/ckpt_000000$s.h5" ] || failjob "$jid" "$log" "env job: no checkpoint of step $s (ARGS --ckpt-every 10)"
done
[ -s "$T/ck-env/ckpt_00000045.h5" ] || failjob "$jid" "$log" "env job: no final checkpoint ckpt_00000045.h5"
grep -q "^0: checkpoint step=45 file=$T/ck-env/ckpt_00000045.h5 " "$log" \
  || failjob "$jid" "$log" "env job: no line for the final checkpoint"

# ---- a job that fails: its exit code (3, a missing input), no requeue ----
jid=$(INPUT="$T/missing.h5" CKPT_DIR="$T/ck-bad" ARGS="$eargs" submit bad "$DDPTRAIN" --wait)
[ -n "$jid" ] || { cat "$T/sb"; logs; fail "sbatch --wait of the job with a missing input"; }
log="$T/bad-$jid.out"
[ "$(job_field "$jid" JobState)" = FAILED ] && [ "$(job_field "$jid" ExitCode)" = 3:0 ] \
  && [ "$(job_field "$jid" Restarts)" = 0 ] \
  || failjob "$jid" "$log" "missing input: expected a FAILED job with ExitCode=3:0 and no restart"

# ---- preemption: USR1 to the batch shell mid-training, checkpoint, requeue,
# resume, the weights of an uninterrupted run.  The signal is sent when the
# first checkpoint (step 200) appears and takes from under one to several
# seconds to reach the ranks (measured on a loaded 2-core machine: 1 to 1200
# steps of 3 ms later).  So that no machine, however fast or loaded, finishes
# the 2000 steps first, the first run steps slowly (slowfirst: --inject
# slow:*:1:10, 10 ms at the start of every step, at least 18 s after step
# 200); the restart and the reference run train at full speed (--inject only
# sleeps, and may differ on --resume) ----
pargs="--model linear:512,bn,relu,linear:512,relu,linear:auto --batch 64 --steps 2000 --log-every 100"
pargs="$pargs --eval-every 0 --ckpt-every 200 --keep 0"
cat >"$T/slowfirst" <<EOF
#!/bin/sh
if [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then exec "$DDPTRAIN" "\$@" --inject 'slow:*:1:10'; fi
exec "$DDPTRAIN" "\$@"
EOF
chmod +x "$T/slowfirst"
jid=$(INPUT="$T/d.h5" CKPT_DIR="$T/ck-pre" ARGS="$pargs" submit pre "$T/slowfirst")
[ -n "$jid" ] || { cat "$T/sb"; logs; fail "sbatch of the preemption job"; }
log="$T/pre-$jid.out"
wait_file "$jid" "$log" "$T/ck-pre/ckpt_00000200.h5" 90
timeout -k 2 20 scancel --signal=USR1 --batch "$jid" || failjob "$jid" "$log" "scancel --signal=USR1 --batch"
# the script requeues the job; a requeued job is held until the credential
# of its last run expires (AuthInfo cred_expire: 10 s here, 2 minutes by
# default; starting it earlier fails with "Job credential revoked")
n=300
until [ "$(job_field "$jid" JobState)" = PENDING ] && [ "$(job_field "$jid" Restarts)" = 1 ]; do
  n=$((n - 1))
  [ $n -gt 0 ] || failjob "$jid" "$log" "preempted job: not requeued (PENDING, Restarts=1) within 60 s"
  case $(job_field "$jid" JobState) in
    COMPLETED | FAILED | CANCELLED | TIMEOUT) failjob "$jid" "$log" "preempted job: ended, not requeued" ;;
  esac
  sleep 0.2
done
wait_job "$jid" "$log" 120 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY
[ "$(job_field "$jid" JobState)" = COMPLETED ] || failjob "$jid" "$log" "preempted job: did not complete"
[ "$(job_field "$jid" Restarts)" = 1 ] || failjob "$jid" "$log" "preempted job: expected exactly one restart"
k=$(sed -n 's/^0: ddptrain: stopped: SIGUSR1 at step \([0-9]*\): .*exit code 75.*/\1/p' "$log")
[ -n "$k" ] && [ "$(echo "$k" | wc -l)" -eq 1 ] || failjob "$jid" "$log" "preempted job: no (single) 'stopped: SIGUSR1' line"
[ "$k" -lt 2000 ] || failjob "$jid" "$log" "preempted job: stopped at step $k, not mid-training"
kf=$(printf '%s/ckpt_%08d.h5' "$T/ck-pre" "$k")
[ -s "$kf" ] || failjob "$jid" "$log" "preempted job: no checkpoint $kf"
grep -q "^ddptrain: job $jid: checkpoint written (exit code 75): requeued" "$log" \
  || failjob "$jid" "$log" "preempted job: the script did not say it requeued"
grep -q "^ddptrain: job $jid (restart 1), 1 node(s), 2 rank(s)" "$log" \
  || failjob "$jid" "$log" "preempted job: no log of restart 1 (the log must keep every restart)"
grep -q "^0: step 100/2000 " "$log" || failjob "$jid" "$log" "preempted job: the log lost the first run"
grep -q "^0:   resume       $kf: step $k," "$log" \
  || failjob "$jid" "$log" "preempted job: the restart did not resume from $kf"
[ -s "$T/ck-pre/ckpt_00002000.h5" ] || failjob "$jid" "$log" "preempted job: no final checkpoint"
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $pargs --ckpt-dir "$T/ck-ref" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "mpirun -np 2, the uninterrupted run"; }
"$WEIGHTS_CMP" "$T/ck-pre/ckpt_00002000.h5" "$T/ck-ref/ckpt_00002000.h5" 0 >"$T/cmp" \
  || { cat "$T/cmp"; failjob "$jid" "$log" "preempted and requeued job: weights differ from the uninterrupted run"; }
echo "preempted at step $k, requeued, resumed: weights identical to the uninterrupted run"

# ---- SIGUSR1 before the ranks train (here: a ddptrain slow to start on the
# first run): they die of it (138); the script requeues, the restart trains ----
cat >"$T/slowstart" <<EOF
#!/bin/sh
if [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then touch "$T/started.\$SLURM_PROCID"; exec sleep 60; fi
exec "$DDPTRAIN" "\$@"
EOF
chmod +x "$T/slowstart"
jid=$(INPUT="$T/d.h5" CKPT_DIR="$T/ck-slow" ARGS="$eargs" submit slow "$T/slowstart")
[ -n "$jid" ] || { cat "$T/sb"; logs; fail "sbatch of the slow-starting job"; }
log="$T/slow-$jid.out"
wait_file "$jid" "$log" "$T/started.0" 60
wait_file "$jid" "$log" "$T/started.1" 60
timeout -k 2 20 scancel --signal=USR1 --batch "$jid" || failjob "$jid" "$log" "scancel --signal=USR1 --batch"
wait_job "$jid" "$log" 120 COMPLETED FAILED CANCELLED
[ "$(job_field "$jid" JobState)" = COMPLETED ] && [ "$(job_field "$jid" Restarts)" = 1 ] \
  || failjob "$jid" "$log" "SIGUSR1 before training: not requeued once and completed"
grep -q "^ddptrain: job $jid: SIGUSR1 came while the ranks were not training (exit code 138): requeued" "$log" \
  || failjob "$jid" "$log" "SIGUSR1 before training: no requeue line"
[ -s "$T/ck-slow/ckpt_00000045.h5" ] || failjob "$jid" "$log" "SIGUSR1 before training: no final checkpoint"

# ---- plain scancel: SIGTERM to every process; checkpoint, no requeue ----
jid=$(INPUT="$T/d.h5" CKPT_DIR="$T/ck-can" ARGS="$pargs" submit can "$T/slowfirst")
[ -n "$jid" ] || { cat "$T/sb"; logs; fail "sbatch of the job to cancel"; }
log="$T/can-$jid.out"
wait_file "$jid" "$log" "$T/ck-can/ckpt_00000200.h5" 90
timeout -k 2 20 scancel "$jid" || failjob "$jid" "$log" "scancel"
wait_job "$jid" "$log" 60 CANCELLED PENDING COMPLETED FAILED
[ "$(job_field "$jid" JobState)" = CANCELLED ] && [ "$(job_field "$jid" Restarts)" = 0 ] \
  || failjob "$jid" "$log" "cancelled job: requeued or not CANCELLED"
grep -q "^0: ddptrain: stopped: SIGTERM at step [0-9]*: checkpoint $T/ck-can/ckpt_" "$log" \
  || failjob "$jid" "$log" "cancelled job: the ranks did not checkpoint on SIGTERM"
grep -q "not requeued after SIGTERM" "$log" || failjob "$jid" "$log" "cancelled job: no 'not requeued' line"

echo "test_slurm: srun --mpi=pmix and sbatch slurm/train.sbatch work; srun and mpirun weights identical;"
echo "  preemption with requeue resumes exactly; SIGUSR1 before training requeues;"
echo "  a failed job keeps its exit code; scancel checkpoints without requeue"
