#!/bin/sh
# test_sbatch_signals.sh -- slurm/train.sbatch's own rules, without Slurm:
# the script runs as Slurm would run it (SLURM_* set) with srun and scontrol
# replaced by stubs that record what they get.  test_slurm.sh runs the real
# thing; here each rule is held exactly, not through timing:
#   - the command line: the input (first argument or INPUT), --resume auto
#     --ckpt-dir (CKPT_DIR, default ckpt-<job name>-<job id>), ARGS, then the options;
#   - SIGUSR1 is passed on to srun (the ranks checkpoint and exit 75), and the
#     job is requeued (scontrol requeue), also on exit 138 (128 + SIGUSR1);
#   - SIGTERM is NOT passed on (Slurm has sent it to the ranks already; a
#     second one would stop a rank before its checkpoint), and after it an
#     exit 75 is not requeued;
#   - any other exit code is the script's, with one line naming it.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
SB="$top_srcdir/slurm/train.sbatch"
mkdir "$T/bin" || exit 99
# srun: record its parent (the script's shell), the arguments and every
# USR1/TERM, wait for $T/go (or the test's end), exit with the code in it
cat >"$T/bin/srun" <<EOS
#!/bin/bash
echo "\$PPID" >"$T/srun.ppid"
trap 'echo USR1 >>"$T/srun.sig"' USR1
trap 'echo TERM >>"$T/srun.sig"' TERM
echo "\$*" >"$T/srun.args"
until [ -s "$T/go" ] || [ ! -d "$T" ]; do sleep 0.05; done
exit "\$(cat "$T/go" 2>/dev/null || echo 1)"
EOS
cat >"$T/bin/scontrol" <<EOS
#!/bin/sh
echo "\$*" >>"$T/scontrol.log"
EOS
chmod +x "$T/bin/srun" "$T/bin/scontrol"

# job SIGNAL RC ARGS...: run the script, send SIGNAL (or none) once srun
# runs, then let srun exit with RC; the script's exit code in $rc, its
# output in $T/out
job() {
  sig=$1 code=$2
  shift 2
  rm -f "$T/srun.args" "$T/srun.ppid" "$T/srun.sig" "$T/go" "$T/scontrol.log"
  (cd "$T" && PATH="$T/bin:$PATH" SLURM_JOB_ID=4242 SLURM_JOB_NAME=demo SLURM_NNODES=1 \
    SLURM_NTASKS=2 DDPTRAIN=/path/ddptrain timeout -k 5 60 bash "$SB" "$@" >"$T/out" 2>&1) &
  pid=$!
  i=0
  until [ -s "$T/srun.args" ]; do
    i=$((i + 1)); [ $i -le 400 ] || { kill $pid; cat "$T/out"; fail "srun was not started"; }
    sleep 0.05
  done
  if [ "$sig" != none ]; then
    # the shell that runs the script: srun's parent
    kill -"$sig" "$(cat "$T/srun.ppid")" || fail "the script's shell is gone"
    sleep 0.5 # the trap runs, and passes the signal on or not
  fi
  echo "$code" >"$T/go"
  wait $pid
  rc=$?
}

# 1. the command line
INPUT=ignored.h5 ARGS="--epochs 3 --lr 0.1" CKPT_DIR= job none 0 first.h5 --batch 8
[ $rc -eq 0 ] || { cat "$T/out"; fail "a job that ends with 0: exit $rc"; }
grep -qx -- "-l -u --mpi=pmix /path/ddptrain first.h5 --resume auto --ckpt-dir ckpt-demo-4242 --epochs 3 --lr 0.1 --batch 8" \
  "$T/srun.args" || fail "srun's command line: $(cat "$T/srun.args")"
[ -e "$T/scontrol.log" ] && fail "a job that ends with 0 was requeued"
INPUT=env.h5 CKPT_DIR=ck job none 0 --steps 5
grep -qx -- "-l -u --mpi=pmix /path/ddptrain env.h5 --resume auto --ckpt-dir ck --steps 5" "$T/srun.args" \
  || fail "INPUT and CKPT_DIR from the environment: $(cat "$T/srun.args")"
echo "ok: the command line"

# 2. SIGUSR1: passed on to srun; exit 75 (checkpoint written) requeues
job USR1 75 d.h5
[ $rc -eq 0 ] || { cat "$T/out"; fail "SIGUSR1 then exit 75: the script's exit $rc, expected 0 (requeued)"; }
grep -qx USR1 "$T/srun.sig" 2>/dev/null || fail "SIGUSR1 was not passed on to srun"
grep -qx "requeue 4242" "$T/scontrol.log" 2>/dev/null || { cat "$T/out"; fail "SIGUSR1 then exit 75: not requeued"; }
grep -q "checkpoint written (exit code 75): requeued, restart 1" "$T/out" || { cat "$T/out"; fail "no requeue line"; }
# ... and so does 138, a rank killed by the SIGUSR1 before it was training
job USR1 138 d.h5
grep -qx "requeue 4242" "$T/scontrol.log" 2>/dev/null || { cat "$T/out"; fail "SIGUSR1 then exit 138: not requeued"; }
echo "ok: SIGUSR1 passed on to srun, the job requeued after exit 75 and 138"

# 3. SIGTERM: not passed on to srun, and exit 75 is not requeued
job TERM 75 d.h5
[ -e "$T/srun.sig" ] && fail "SIGTERM was passed on to srun ($(tr '\n' ' ' <"$T/srun.sig")): a second SIGTERM stops a rank before its checkpoint"
[ -e "$T/scontrol.log" ] && fail "SIGTERM then exit 75: requeued"
[ $rc -eq 75 ] || { cat "$T/out"; fail "SIGTERM then exit 75: the script's exit $rc, expected 75"; }
grep -q "not requeued after SIGTERM" "$T/out" || { cat "$T/out"; fail "SIGTERM: no 'not requeued' line"; }
echo "ok: SIGTERM not passed on, no requeue after it"

# 4. a failure keeps its exit code, with a line
job none 3 d.h5
[ $rc -eq 3 ] || fail "srun exit 3: the script's exit $rc"
grep -q "srun exit code 3 (see docs/troubleshooting.md" "$T/out" || { cat "$T/out"; fail "no line on exit code 3"; }
[ -e "$T/scontrol.log" ] && fail "a failed job was requeued"
echo "ok: a failed job keeps its exit code"
echo ok
