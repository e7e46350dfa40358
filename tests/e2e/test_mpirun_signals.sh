#!/bin/sh
# test_mpirun_signals.sh -- what a signal to Open MPI's mpirun does, and that
# the ranks' last line says it truthfully (a wrapper keys on the exit code):
#   - SIGUSR1 to mpirun: passed on, every rank checkpoints and exits 75, and
#     mpirun returns 75; the line says "exit code 75: requeue";
#   - SIGTERM to mpirun: passed on while mpirun ends the job itself; the
#     ranks checkpoint and exit 75, mpirun returns 1, and the line says so
#     and how to get 75 (send mpirun SIGUSR1).
# Both checkpoints resume (the files are whole).
. ./testenv.sh || exit 99
set -u
[ "$DDP_MPIEXEC_FLAVOR" = openmpi ] || { echo "skipped: not Open MPI's mpirun" >&2; exit 77; }
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 2000 --seed 3 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
c="--model linear:16,relu,linear:auto --batch 8 --epochs 100000 --log-every 1 --eval-every 0"

# sig NAME SIGNAL: train on 2 ranks, send SIGNAL to mpirun once training runs
sig() {
  $MPIEXEC $DDP_MPIEXEC_FLAGS -np 2 "$DDPTRAIN" "$T/d.h5" $c --ckpt-dir "$T/$1" \
    >"$T/$1.o" 2>"$T/$1.e" &
  job=$!
  ddp_wait_progress "$T/$1.o" "$T/$1.e" "$1"
  kill -"$2" $job
  _w=0
  while kill -0 $job 2>/dev/null; do
    _w=$((_w + 1))
    [ $_w -le 600 ] || { kill -9 $job; cat "$T/$1.e"; fail "$1: mpirun still running 60 s after SIG$2"; }
    sleep 0.1
  done
  wait $job
  rc=$?
}

sig usr1 USR1
[ $rc -eq 75 ] || { cat "$T/usr1.e"; fail "SIGUSR1 to mpirun: exit $rc, expected 75"; }
grep -q "ddptrain: stopped: SIGUSR1 at step [0-9]*: checkpoint .* written; .*(exit code 75: requeue)" "$T/usr1.e" \
  || { cat "$T/usr1.e"; fail "SIGUSR1: the stop line"; }

sig term TERM
[ $rc -eq 1 ] || { cat "$T/term.e"; fail "SIGTERM to mpirun: exit $rc (Open MPI's mpirun returned 1 when this was written; update the message if that changed)"; }
grep -q "ddptrain: stopped: SIGTERM at step [0-9]*: checkpoint .* written; .*every rank exits 75, requeue, but mpirun returns 1 after passing on a SIGTERM or SIGINT: send mpirun SIGUSR1 to have it return 75" "$T/term.e" \
  || { cat "$T/term.e"; fail "SIGTERM: the stop line does not say what mpirun returns"; }
grep -q "exit code 75: requeue)" "$T/term.e" && { cat "$T/term.e"; fail "SIGTERM: claims exit code 75"; }

# the checkpoints are whole: a resume from each goes on from its step
for n in usr1 term; do
  at=$(sed -n 's/.*stopped: SIG[A-Z0-9]* at step \([0-9]*\):.*/\1/p' "$T/$n.e")
  [ -n "$at" ] || fail "$n: no step in the stop line"
  DDP_TEST_TIMEOUT=120 mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $c --steps $((at + 2)) --resume auto \
    --ckpt-dir "$T/$n" >"$T/$n.r.o" 2>"$T/$n.r.e"
  r=$?
  [ $r -eq 0 ] || { cat "$T/$n.r.e"; fail "$n: resume from step $at: exit $r"; }
  grep -q "step $at" "$T/$n.r.o" || { cat "$T/$n.r.o"; fail "$n: the resume does not start at step $at"; }
done
echo ok
