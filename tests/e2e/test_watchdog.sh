#!/bin/sh
# test_watchdog.sh -- no hang outlives --timeout, and the report says who
# and where: a rank that stops responding (--inject hang) on rank 1 at np=2
# and np=3 and on rank 0 ends the job with exit 10 within timeout + 10 s,
# one report naming the missing rank, the collective and its step, and no
# process left behind; a rank stopped with SIGSTOP is named as silent; a
# rank that exits or is killed (rank 1 and rank 0) ends the job within the
# timeout (also when the launcher would wait: the rank is named as vanished);
# a rank that skips a collective (--inject desync) is named as a
# desync by the watchdog, and stopped at the first differing collective,
# with both descriptors named, under --debug-collectives (exit 6).
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 4000 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-60}
TO=3
m="--model linear:16,bn,relu,linear:auto --batch 8 --log-every 0 --eval-every 0 --timeout $TO"

now() { date +%s; }
# run NP CODE MAXSECONDS ARGS...: exits CODE (nz: any failure) within MAXSECONDS
run() {
  _n=$1 _c=$2 _max=$3; shift 3
  _t0=$(now)
  mpirun_np "$_n" "$DDPTRAIN" "$T/d.h5" $m "$@" >"$T/o" 2>"$T/e"
  _rc=$? _dt=$(($(now) - _t0))
  if [ "$_c" = nz ]; then  # any failure, not the test's own timeout
    [ $_rc -ne 0 ] && [ $_rc -ne 124 ] || { cat "$T/e"; fail "np=$_n $*: exit $_rc"; }
  else
    [ $_rc -eq "$_c" ] || { cat "$T/o" "$T/e"; fail "np=$_n $*: exit $_rc, expected $_c"; }
  fi
  [ $_dt -le "$_max" ] || { cat "$T/e"; fail "np=$_n $*: took $_dt s, expected <= $_max s"; }
  echo "np=$_n $*: exit $_rc after $_dt s"
}
has() { grep -qE -- "$1" "$T/e" || { cat "$T/e"; fail "$2: stderr lacks /$1/"; }; }
# nothing of this test is left running (pgrep -f matches the deck's path)
no_leftovers() {
  sleep 1
  if pgrep -f "$T/d.h5" >/dev/null; then
    ps -o pid,stat,args -p "$(pgrep -d, -f "$T/d.h5")"
    pkill -9 -f "$T/d.h5"
    fail "$1: processes left behind"
  fi
}

# ---- hang: rank 1 at np=2 and np=3, rank 0 ----
for np in 2 3; do
  run $np 10 $((TO + 10)) --steps 200 --inject hang:1:5
  has "error: watchdog: .* at step 5 .*has not completed in [0-9.]+ s \(--timeout $TO\): rank 1 \([^)]*\) did not arrive" "hang np=$np"
  has "rank 1 \([^)]*\): in end-of-step work of step 4 for [0-9.]+ s; its last collective was step-boundary" "hang np=$np: what rank 1 did"
  if [ $np = 3 ]; then has "arrived \(2 of 3\): 0,2" "hang np=3: arrived ranks"; fi
  [ "$(grep -c 'error:' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "hang np=$np: expected one error line"; }
  no_leftovers "hang np=$np"
done
run 2 10 $((TO + 10)) --steps 200 --inject hang:0:3
has "rank 0 \([^)]*\) did not arrive" "hang of rank 0"
no_leftovers "hang of rank 0"

# ---- a rank stopped from outside (SIGSTOP): silent ----
t0=$(now)
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --steps 100000 --log-every 1 --inject 'slow:*:1:5' \
  >"$T/o" 2>"$T/e" &
job=$!
ddp_wait_progress "$T/o" "$T/e" "SIGSTOP" "^step 3/"
victim=""
for p in $(pgrep -f "$T/d.h5"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
done
[ -n "$victim" ] || { kill $job; fail "SIGSTOP: rank 1's process not found"; }
t1=$(now)
kill -STOP "$victim"
wait $job
rc=$? dt=$(($(now) - t1))
kill -CONT "$victim" 2>/dev/null
[ $rc -eq 10 ] || { cat "$T/e"; fail "SIGSTOP of rank 1: exit $rc, expected 10"; }
[ $dt -le $((TO + 10)) ] || { cat "$T/e"; fail "SIGSTOP of rank 1: took $dt s"; }
has "rank 1 \([^)]*\).*nothing heard from it for [0-9.]+ s: its process is stopped or its node is unreachable" "SIGSTOP of rank 1"
echo "SIGSTOP of rank 1: exit $rc after $dt s"
no_leftovers "SIGSTOP"

# ---- a rank that exits or is killed: the job ends within the timeout ----
# (mpirun ends the job itself; srun does not: test_slurm.sh)
for r in 1 0; do
  run 2 nz $((TO + 5)) --steps 200 --inject "exit:$r:4:3"
  no_leftovers "exit of rank $r"
  run 2 nz $((TO + 5)) --steps 200 --inject "kill:$r:4"
  no_leftovers "kill of rank $r"
done
# ... and when the launcher does not (Open MPI told not to abort on a
# failed process, as a launcher that waits for every task): the watchdog
# names the rank that vanished, from rank 0 or, for rank 0, from rank 1
if [ "$DDP_MPIEXEC_FLAVOR" = openmpi ]; then
  for r in 1 0; do
    OMPI_MCA_orte_abort_on_non_zero_status=0 run 3 10 $((TO + 10)) --steps 200 --inject "exit:$r:4:3"
    has "error: watchdog: rank $r \([^)]*\) vanished: its connection closed [0-9.]+ s ago without a goodbye" "exit of rank $r, launcher waiting"
    no_leftovers "exit of rank $r, launcher waiting"
  done
fi

# ---- desync: the watchdog names it; --debug-collectives stops at it ----
run 2 10 $((TO + 10)) --steps 200 --inject desync:1:5
has "desync: rank [01] \([^)]*\) waits in .*, rank [01] \([^)]*\) in .*: the ranks called different collectives" "desync"
has "step-boundary all-reduce \([0-9]+ bytes\) at step 5" "desync: the skipped collective"
run 2 6 $((TO + 10)) --steps 200 --inject desync:1:5 --debug-collectives
has "error: --debug-collectives: the ranks are not in the same collective at collective #[0-9]+" "debug-collectives"
has "rank 0 \([^)]*\) is in step-boundary all-reduce \(32 bytes\) at step 5" "debug-collectives: rank 0's side"
has "rank 1 \([^)]*\) is in syncbn-forward 1 all-reduce \([0-9]+ bytes\) at step 6" "debug-collectives: rank 1's side"
no_leftovers "desync"

# ---- the checks cost no false alarm: a normal run with both ----
run 3 0 60 --steps 40 --debug-collectives --check-replicas 10
echo "test_watchdog: hangs end in <= timeout + 10 s with the missing rank named; SIGSTOP, exit, kill, desync caught"
