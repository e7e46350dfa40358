#!/bin/sh
# test_watchdog_forged.sh -- only the job's own ranks speak to the watchdog.
# During a 2-rank job a stranger connects to rank 0's hub (found with ss:
# it must listen on 127.0.0.1 only, the interface of a one-host job) and
# sends a real rank's hello and heartbeats captured from this run's
# loopback (replayed on a new connection), the same with a heartbeat turned
# into "ending", forged "ending" messages, a 224-byte heartbeat of the old
# unauthenticated format claiming rank 1 then a close, garbage, and
# nothing: the job trains to the end (exit 0) and rank 0 reports the 7
# dropped connections once.  A second run replays the first run's capture
# (another job's secret) and forged "ending" messages, then a rank hangs:
# the watchdog still ends it (exit 10, the rank named).  The capture needs
# root (AF_PACKET); without it the replays are left out.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 4000 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-90}
command -v ss >/dev/null 2>&1 || ddp_skip DDP_REQUIRE_MULTINODE "no ss (iproute2)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
FORGE="$top_srcdir/tests/tools/wd_forge.py"
TO=3
m="--model linear:16,bn,relu,linear:auto --batch 8 --log-every 1 --eval-every 0 --timeout $TO"

# hub_port: the TCP port rank 0's process listens on at 127.0.0.1 (waits 15 s)
hub_port() {
  _w=0
  while [ $_w -lt 150 ]; do
    for p in $(pgrep -f "$T/d.h5"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0" || continue
      _port=$(ss -ltnpH 2>/dev/null | grep "pid=$p," | awk '{print $4}' | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -n 1)
      [ -n "$_port" ] && { echo "$_port"; return 0; }
    done
    _w=$((_w + 1))
    sleep 0.1
  done
  return 1
}
# wait_job MAXSECONDS: the exit code of $job, which must end within MAXSECONDS
wait_job() {
  _w=0
  while kill -0 "$job" 2>/dev/null; do
    _w=$((_w + 1))
    if [ $_w -gt $(($1 * 10)) ]; then
      pkill -9 -f "$T/d.h5"
      wait "$job"
      cat "$T/e"
      fail "the job did not end within $1 s"
    fi
    sleep 0.1
  done
  wait "$job"
}

# ---- run 1: every kind of stranger; the job does not notice ----
have_cap=1
"$PY" "$FORGE" sniff 4 "$T/cap1" 2>"$T/sniff.err" &
sniffer=$!
sleep 0.3
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --steps 400 --inject 'slow:*:1:20' >"$T/o" 2>"$T/e" &
job=$!
port1=$(hub_port) || { cat "$T/e"; ss -ltnp; pkill -9 -f "$T/d.h5"; fail "no watchdog hub listening on 127.0.0.1 (a one-host job's hub must not listen on every interface)"; }
wait "$sniffer"
case $? in
  0) ;;
  77) have_cap=0; echo "no capture (not root): the replays are left out" ;;
  *) cat "$T/sniff.err"; pkill -9 -f "$T/d.h5"; fail "the loopback capture failed" ;;
esac
if [ $have_cap = 1 ]; then
  modes="replay replay-ending ending hello-ending old garbage silent"
else
  modes="ending hello-ending old garbage silent"
fi
kill -0 "$job" 2>/dev/null || { cat "$T/o" "$T/e"; fail "run 1 ended before the strangers came"; }
made=$("$PY" "$FORGE" attack "$port1" "$T/cap1" "$port1" $modes) \
  || { pkill -9 -f "$T/d.h5"; fail "the stranger could not connect to port $port1"; }
wait_job 60
rc=$?
[ $rc -eq 0 ] || { cat "$T/e"; fail "run 1: exit $rc after $made forged connections, expected 0"; }
grep -q "^step 400/" "$T/o" || { cat "$T/o"; fail "run 1: did not train to step 400"; }
grep -q "warning: watchdog: dropped $made unauthenticated connection(s) to port $port1" "$T/e" \
  || { cat "$T/e"; fail "run 1: no report of $made dropped connections"; }
[ "$(grep -c 'dropped' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "run 1: the drops reported more than once"; }
grep -q "error" "$T/e" && { cat "$T/e"; fail "run 1: an error"; }
echo "run 1: $made forged connections ($modes) to 127.0.0.1:$port1 dropped; exit 0"

# ---- run 2: another job's bytes and forged endings, then a real hang ----
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --steps 400 --inject 'slow:*:1:20' --inject hang:1:150 \
  >"$T/o" 2>"$T/e" &
job=$!
port2=$(hub_port) || { cat "$T/e"; pkill -9 -f "$T/d.h5"; fail "run 2: no watchdog hub on 127.0.0.1"; }
ddp_wait_progress "$T/o" "$T/e" "run 2" "^step 2/"
modes2="ending hello-ending"
[ $have_cap = 1 ] && modes2="replay replay-ending $modes2"
made=$("$PY" "$FORGE" attack "$port2" "$T/cap1" "$port1" $modes2) \
  || { pkill -9 -f "$T/d.h5"; fail "run 2: the stranger could not connect to port $port2"; }
grep -q "^step 149/" "$T/o" && { pkill -9 -f "$T/d.h5"; fail "run 2: the hang came before the strangers were done (too fast a machine?)"; }
t1=$(date +%s)
wait_job $((TO + 30))
rc=$?
[ $rc -eq 10 ] || { cat "$T/e"; fail "run 2: exit $rc, expected 10 (the hang caught after forged endings)"; }
grep -qE "error: watchdog: .* at step 150 .*rank 1 \([^)]*\) did not arrive" "$T/e" \
  || { cat "$T/e"; fail "run 2: the report does not name rank 1's hang"; }
grep -q "dropped $made unauthenticated connection(s) to port $port2" "$T/e" \
  || { cat "$T/e"; fail "run 2: no report of $made dropped connections"; }
echo "run 2: $made forged connections ($modes2) dropped; the hang ended the job after $(($(date +%s) - t1)) s"
echo "test_watchdog_forged: strangers at the watchdog's port change nothing; hangs are still caught"
