#!/bin/sh
# test_slurm.sh -- the Slurm launch path, on a private single-host Slurm:
# munged, slurmctld and slurmd started here with a generated slurm.conf
# (their own ports, state and sockets under a temporary directory; nothing of
# the machine's own Slurm or munge is touched).  Checks that
#   - `srun --mpi=pmix -n 2 ddptrain` starts 2 ranks that find each other,
#     and trains to bit-identically the weights `mpirun -np 2` gives;
#   - bad input under srun gives one error line and the input exit code (3);
#   - `sbatch --wait slurm/train.sbatch` runs a job to completion.
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
AuthInfo=socket=$T/munge/munge.sock
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
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
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

# ---- sbatch slurm/train.sbatch: the job script as shipped ----
( cd "$T" && DDPTRAIN="$DDPTRAIN" timeout -k 5 180 sbatch --wait -N 1 -n 2 --cpus-per-task=1 \
    -o "$T/job-%j.out" "$top_srcdir/slurm/train.sbatch" "$T/d.h5" $common ) >"$T/sb" 2>&1 \
  || { cat "$T/sb" "$T"/job-*.out; logs; fail "sbatch --wait slurm/train.sbatch failed"; }
grep -q "1 node(s), 2 rank(s)" "$T"/job-*.out || { cat "$T"/job-*.out; fail "train.sbatch: job line"; }
grep -q "^0: eval epoch=.*val_acc=" "$T"/job-*.out || { cat "$T"/job-*.out; fail "train.sbatch: no evaluation"; }
echo "test_slurm: srun --mpi=pmix and sbatch slurm/train.sbatch work; srun and mpirun weights identical"
