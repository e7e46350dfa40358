#!/bin/sh
# bench_nodes.sh -- the progress thread (--comm-thread) on two simulated
# nodes (tests/simnodes.sh, as tests/e2e/test_multinode.sh),
# one rank per node, the MLP 784-1024-1024-10 + BN, batch 64 per rank.  For
# each bucket cap, in alternating rounds: the step with --comm-thread off,
# with it on, and with --no-sync (no gradient all-reduce; the exposed
# communication is step - no-sync step), and the progress thread's CPU time
# per step (utime + stime of the task named ddp-comm, sampled from /proc).
#
# As root, from a configured build directory (after make):
#   sh /path/to/ddptrain/bench/bench_nodes.sh [--rate 10gbit] [--caps "25 2 1"] [ROUNDS] [STEPS]
#   sh /path/to/ddptrain/bench/bench_nodes.sh [--rate R] --overlap "0 20 50 100" [ITERS]
# --rate limits each node's link with tc tbf (tests/simnodes.sh); default unlimited.
# --overlap runs bench/bench_overlap (ring-poll against comm-thread, 3 buckets)
# across the two nodes once per polling interval (--sleep-us) instead.
set -eu
rate= caps="25 4 2 1" sleeps=
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --caps) caps=$2; shift 2 ;;
    --overlap) sleeps=$2; shift 2 ;;
    *) break ;;
  esac
done
rounds=${1:-3}
steps=${2:-300}
[ "$(id -u)" = 0 ] || { echo "bench_nodes.sh: network namespaces need root" >&2; exit 2; }
[ -x ./ddptrain ] || { echo "run from a build directory after make" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/tests/simnodes.sh"
simnodes_check "${rate:-unlimited}" || { echo "bench_nodes.sh: $SIMNODES_WHY" >&2; exit 2; }
T=$(mktemp -d)
cleanup() { simnodes_down; rm -rf "$T"; }
trap cleanup EXIT INT TERM
simnodes_up 1,1 "${rate:-unlimited}" ddb || { echo "bench_nodes.sh: $SIMNODES_WHY" >&2; exit 2; }
./ddptrain-prep synthetic --classes 10 --features 784 --samples 20000 --seed 1 -o "$T/d.h5" >/dev/null
tag="bn$$"

# the progress threads' CPU ticks (utime + stime) of the job tagged $tag,
# sampled until the job ends: the last value per thread
sample() {
  while :; do
    for e in /proc/[0-9]*/environ; do
      p=${e#/proc/}; p=${p%/environ}
      grep -qa "DDP_BENCH_TAG=$tag" "$e" 2>/dev/null || continue
      for t in /proc/$p/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = ddp-comm ] || continue
        awk -v k="$p.${t##*/}" '{ print k, $14 + $15 }' "$t/stat" 2>/dev/null >"$T/cpu.$p.${t##*/}"
      done
    done
    [ -e "$T/stop" ] && break
    sleep 0.5
  done
}

run() { # name args...
  name=$1; shift
  rm -f "$T"/cpu.* "$T/stop"
  sample & sp=$!
  trap 'touch "$T/stop"; kill $sp 2>/dev/null || true; cleanup' EXIT INT TERM
  SIMNODES_TIMEOUT=${BENCH_TIMEOUT:-600} simnodes_mpirun -x OPENBLAS_NUM_THREADS=1 -x DDP_BENCH_TAG=$tag \
    "$PWD/ddptrain" "$T/d.h5" --model linear:1024,bn,relu,linear:1024,bn,relu,linear:10 --batch 64 \
    --log-every 0 --eval-every 0 --steps "$steps" "$@" >"$T/o" 2>&1 || { cat "$T/o" >&2; exit 1; }
  touch "$T/stop"; wait $sp
  grep -o 'step_ms_p50=[0-9.]*' "$T/o" | cut -d= -f2 >>"$T/$name.ms"
  grep -q "comm thread  on" "$T/o" && thr=1 || thr=0
  # ms of thread CPU per step, mean over the ranks
  cat "$T"/cpu.* 2>/dev/null | awk -v s="$steps" -v hz="$(getconf CLK_TCK)" -v on=$thr \
    '{ t += $2; n++ } END { if (on) printf "%.3f\n", n ? t / n / hz * 1e3 / s : 0 }' >>"$T/$name.cpu"
}

mpi2() { # the two-node mpirun, one rank per node
  SIMNODES_TIMEOUT=${BENCH_TIMEOUT:-600} simnodes_mpirun -x OPENBLAS_NUM_THREADS=1 "$@"
}
if [ -n "$sleeps" ]; then
  echo "# bench_overlap on 2 simulated nodes x 1 rank, link ${rate:-unlimited}"
  for u in $sleeps; do
    mpi2 "$PWD/bench/bench_overlap" --iters "$rounds" --warmup 10 --buckets 3 --sleep-us "$u" \
      --only ring-poll,comm-thread,serial-ring | grep -E "^(compute|ring-poll|comm-thread|serial-ring|# comm-thread)"
  done
  exit 0
fi

for r in $(seq "$rounds"); do
  for cap in $caps; do
    run "off$cap" --bucket-cap-mb "$cap" --comm-thread off
    run "on$cap" --bucket-cap-mb "$cap" --comm-thread on
    run "nosync$cap" --bucket-cap-mb "$cap" --no-sync --comm-thread off
  done
done
med() { sort -n "$1" | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }'; }
echo "# bench_nodes: 2 simulated nodes x 1 rank, link ${rate:-unlimited}, MLP 784-1024-1024-10 + BN,"
echo "# batch 64/rank, $rounds rounds x $steps steps, median of the rounds' p50 step times (rank 0)"
printf '%-8s %10s %10s %10s %12s %12s %14s\n' cap_MB off_ms on_ms nosync_ms exposed_off exposed_on thread_cpu_ms
for cap in $caps; do
  off=$(med "$T/off$cap.ms") on=$(med "$T/on$cap.ms") ns=$(med "$T/nosync$cap.ms") cpu=$(med "$T/on$cap.cpu")
  printf '%-8s %10s %10s %10s %12.3f %12.3f %14s\n' "$cap" "$off" "$on" "$ns" \
    "$(echo "$off - $ns" | bc -l)" "$(echo "$on - $ns" | bc -l)" "$cpu"
done
