#!/bin/sh
# bench_cluster.sh -- data parallelism across simulated nodes: layouts of
# nodes x ranks per node (tests/simnodes.sh: network namespaces on a bridge,
# each node's link limited with tc tbf both ways) at several link rates, for
# the MLP 784-1024-1024-10 with BatchNorm and the Fashion-MNIST CNN of
# bench_ddp.sh, batch 64 per rank, on generated decks.  Per cell (model,
# layout, link rate):
#   step      the median over the ranks of each rank's step_ms p50 (the
#             summary line), median over the rounds
#   no-sync   the same with --no-sync (no gradient all-reduce; SyncBN still
#             on), same layout and rate
#   exposed   step - no-sync: the communication training waits for
#   ideal     the all-reduce's time at the link rate if it moved only what a
#             hierarchical all-reduce must: 2(N-1)/N x the gradient bytes
#             through each node's link, N nodes
#   eff       weak-scaling efficiency: the 1-rank step (one node, no
#             namespaces) / step
#   MB/step   the bytes each node sent on its link per step (tx_bytes of its
#             interface, TCP/IP headers included; mean over the nodes) less
#             those of the no-sync run, over the steps: the gradient
#             all-reduce's traffic alone, against the ideal above
#   algo      the all-reduce algorithm that ran the gradient buckets, from
#             the summary's "collectives by algorithm" line
# This machine's cores are shared by all the simulated nodes: 2x2 and 4x1 run
# 4 ranks on 2 cores (oversubscribed), so their steps measure that more than
# the network; the bench says so and is still a check that everything runs.
#
# From a configured build directory (make -C bench bench builds bench_loader,
# which makes the CNN's images):
#   sh /path/to/ddptrain/bench/bench_cluster.sh [--quick] [--rounds N] [--steps N]
#       [--layouts "2x1 2x2 4x1"] [--rates "unlimited 100gbit 10gbit 1gbit"]
#       [--models "mlp cnn"] [--allreduce auto|ring|mpi|hier]
#   --quick          the MLP on 2x1 at unlimited and 1gbit, 20 steps, 1 round
#                    (a check that everything runs; about half a minute)
#   --rounds N       rounds, alternating the step and no-sync runs (default 1)
#   --steps N        steps per run (default 60)
#   --layouts L      NxK (N nodes of K ranks) or a list of ranks per node
#                    (2,1: uneven), space-separated
#   --rates R        tc rates of each node's link, or unlimited
#   --allreduce A    passed to ddptrain (default auto), so that one bench
#                    compares the algorithms
#   --comm-thread T, --bucket-cap-mb C
#                    passed to ddptrain too (default auto); results.csv names
#                    them in the implementation (ddptrain-auto-thread-off)
# Skipped, with the reason on one line, where the nodes cannot be simulated
# (not root, no ip, unshare or tc, not Open MPI).
# With BENCH_CSV=FILE the numbers are also appended to FILE (bench/lib.sh):
# case cluster-MODEL-LAYOUT (cluster-mlp-2x2; the 1-rank reference
# cluster-MODEL-1x1, implementation ddptrain-local), implementation
# ddptrain-ALLREDUCE@RATE (ddptrain-auto@10gbit), metrics step_ms,
# no_sync_step_ms, exposed_comm_ms, ideal_ring_ms (not at unlimited),
# weak_scaling_efficiency, link_bytes_per_node_step and
# ideal_link_bytes_per_node_step.  ddptrain-plot --scaling draws the
# efficiencies against the link rate.
# Exit status: 0 (also when skipped); 1 when a run fails; 2 usage.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
. "$src/tests/simnodes.sh"
quick=0 rounds=1 steps="" layouts="2x1 2x2 4x1" rates="unlimited 100gbit 10gbit 1gbit" models="mlp cnn"
allreduce=auto thread=auto cap=auto
usage() { echo "bench_cluster.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?--rounds N}; shift ;;
    --steps) steps=${2:?--steps N}; shift ;;
    --layouts) layouts=${2:?--layouts LIST}; shift ;;
    --rates) rates=${2:?--rates LIST}; shift ;;
    --models) models=${2:?--models LIST}; shift ;;
    --allreduce) allreduce=${2:?--allreduce NAME}; shift ;;
    --comm-thread) thread=${2:?--comm-thread auto|on|off}; shift ;;
    --bucket-cap-mb) cap=${2:?--bucket-cap-mb MB|auto}; shift ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument $1 (see --help)" ;;
  esac
  shift
done
if [ "$quick" = 1 ]; then
  layouts=2x1 rates="unlimited 1gbit" models=mlp rounds=1 steps=${steps:-20}
fi
steps=${steps:-60}
case $rounds in '' | *[!0-9]* | 0) usage "--rounds $rounds: a number >= 1" ;; esac
case $steps in '' | *[!0-9]* | 0) usage "--steps $steps: a number >= 1" ;; esac
case $allreduce in '' | *[!a-z]*) usage "--allreduce $allreduce: an algorithm name" ;; esac
case $thread in auto | on | off) ;; *) usage "--comm-thread $thread: auto, on or off" ;; esac
case $cap in auto | [0-9]*) ;; *) usage "--bucket-cap-mb $cap: MB or auto" ;; esac
# the implementation's name in results.csv: ddptrain-ALGO, then what differs
# from the defaults
impl=ddptrain-$allreduce
[ "$thread" = auto ] || impl=$impl-thread-$thread
[ "$cap" = auto ] || impl=$impl-cap-$cap
for m in $models; do
  case $m in mlp | cnn) ;; *) usage "--models: $m is not mlp or cnn" ;; esac
done
# the layouts as lists of ranks per node
lays=""
for l in $layouts; do
  case $l in
    [1-9]x[1-9] | [1-9]x[1-9][0-9] | [1-9][0-9]x[1-9])
      n=${l%x*} k=${l#*x} per=$k
      i=1; while [ $i -lt "$n" ]; do per="$per,$k"; i=$((i + 1)); done ;;
    *[!0-9,]* | "") usage "--layouts: $l is neither NxK nor ranks per node like 2,1" ;;
    *) per=$l ;;
  esac
  lays="$lays $per"
done
[ -x ./ddptrain ] && [ -x ./ddptrain-prep ] || usage "run from a build directory after 'make'"
case " $models " in
  *" cnn "*) [ -x ./bench/bench_loader ] || usage "the CNN's images need bench/bench_loader: run 'make -C bench bench'" ;;
esac

# the layout's name: NxK when every node has K ranks, else the list
lay_name() {
  echo "$1" | awk -F, '{ for (i = 2; i <= NF; i++) if ($i != $1) { print; exit } print NF "x" $1 }'
}
# the rate in bit/s, or nothing for unlimited
rate_bits() { [ "$1" = unlimited ] || simnodes_rate_bits_ "$1"; }
for r in $rates; do
  [ "$r" = unlimited ] || [ -n "$(rate_bits "$r")" ] || usage "--rates: $r is not a tc rate (e.g. 10gbit) or unlimited"
done

echo "# bench_cluster.sh: layouts$(for p in $lays; do printf ' %s' "$(lay_name "$p")"; done), links: $rates;" \
  "--allreduce $allreduce; $steps steps x $rounds round(s)"
if ! simnodes_check "$(echo "$rates" | tr ' ' '\n' | grep -v '^unlimited$' | head -n 1)"; then
  echo "Not run: $SIMNODES_WHY."
  exit 0
fi

tmp=$(mktemp -d)
trap 'simnodes_down; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
ncores=$(getconf _NPROCESSORS_ONLN)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# all_ranks_ms LOG: the median over the ranks of their step_ms p50
all_ranks_ms() { sed -n 's/^summary (all ranks): step_ms min [0-9.]* (rank [0-9]*) median \([0-9.]*\) .*/\1/p' "$1"; }
# algo_of LOG: the algorithm that ran the gradient buckets: of the summary's
# "collectives by algorithm", the first of hier, shm, mpi (chunked) and ring
# that ran (SyncBatchNorm's small all-reduces of private buffers take the
# ring beside the others); "?" when the output names none
algo_of() {
  l=$(sed -n 's/^summary (rank 0): collectives by algorithm: //p' "$1" | head -n 1)
  for a in hier shm mpi ring; do
    case ", $l" in *", $a "[0-9]*) echo "$a"; return ;; esac
  done
  echo "?"
}
runfail() { cat "$tmp/o" >&2; echo "bench_cluster.sh: $*" >&2; exit 1; }

# node_tx: every node's tx bytes so far, space-separated
node_tx() { i=0; while [ $i -lt "$SIMNODES_N" ]; do printf '%s ' "$(simnodes_tx $i)"; i=$((i + 1)); done; }
# one_run TAG [ARGS]: a run on the nodes; its step time into $tmp/TAG.ms,
# the bytes each node sent during it (mean over the nodes) into $tmp/TAG.tx
one_run() {
  tag=$1; shift
  before=$(node_tx)
  rc=0
  simnodes_mpirun -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS \
    ./ddptrain "$tmp/d.h5" $opts --steps "$steps" --allreduce "$allreduce" --comm-thread "$thread" \
    --bucket-cap-mb "$cap" "$@" >"$tmp/o" 2>&1 || rc=$?
  [ "$rc" = 0 ] || runfail "$model on $lname at $rate $* failed (exit $rc)"
  after=$(node_tx)
  grep -q "$SIMNODES_NP ranks on $SIMNODES_N nodes" "$tmp/o" || runfail "$lname: the ranks did not see $SIMNODES_N nodes"
  ms=$(all_ranks_ms "$tmp/o")
  [ -n "$ms" ] || runfail "$lname at $rate: no summary line"
  echo "$ms" >>"$tmp/$tag.ms"
  echo "$before" "$after" | awk -v n="$SIMNODES_N" '{ s = 0; for (i = 1; i <= n; i++) s += $(n + i) - $i; printf "%.0f\n", s / n }' >>"$tmp/$tag.tx"
  [ "$tag" != sync ] || algo=$(algo_of "$tmp/o")
}

for model in $models; do
  rm -f "$tmp"/*.ms "$tmp"/*.tx "$tmp/d.h5"
  case $model in
    mlp) ./ddptrain-prep synthetic --classes 10 --features 784 --samples 16384 --seed 1 -o "$tmp/d.h5" >/dev/null
         spec=linear:1024,bn,relu,linear:1024,bn,relu,linear:10
         title="MLP 784-1024-1024-10 + BN" ;;
    cnn) ./bench/bench_loader gen "$tmp/d.h5" 16384 1 28 28 >/dev/null
         spec=conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,linear:128,relu,linear:10
         title="CNN conv32-conv64-128-10 + BN" ;;
  esac
  opts="--model $spec --batch 64 --log-every 0 --eval-every 0 --seed 1"
  # the reference: 1 rank on this machine, no namespaces
  for r in $(seq "$rounds"); do
    bench_mpirun -np 1 ./ddptrain "$tmp/d.h5" $opts --steps "$steps" >"$tmp/o" 2>&1 || runfail "$model: 1 rank failed"
    ms=$(all_ranks_ms "$tmp/o")
    [ -n "$ms" ] || runfail "$model, 1 rank: no summary line"
    echo "$ms" >>"$tmp/one.ms"
  done
  trainable=$(sed -n 's/.* parameters (\([0-9]*\) trainable).*/\1/p' "$tmp/o" | head -n 1)
  grad=$((trainable * 4))
  one=$(med <"$tmp/one.ms")
  csv_rows "cluster-$model-1x1" ddptrain-local 1 step_ms "$tmp/one.ms" ms
  echo
  echo "## $title, batch 64 per rank: $(awk -v g="$grad" 'BEGIN { printf "%.2f", g / 1e6 }') MB of float32 gradients"
  echo "1 rank (this machine, no namespaces): step $one ms."
  printf '%-8s %3s %-9s %-6s | %8s %8s %8s %8s | %5s | %8s %8s %6s\n' layout np link algo step no-sync exposed ideal eff \
    "MB/step" ideal ratio
  printf '%-8s %3s %-9s %-6s | %8s %8s %8s %8s | %5s | %8s %8s %6s\n' "" "" "" "" ms ms ms ms "" node node ""
  for per in $lays; do
    lname=$(lay_name "$per")
    for rate in $rates; do
      simnodes_up "$per" "$rate" clu || { echo "Not run: $lname at $rate: $SIMNODES_WHY."; continue; }
      rm -f "$tmp/sync.ms" "$tmp/sync.tx" "$tmp/nosync.ms" "$tmp/nosync.tx"
      for r in $(seq "$rounds"); do
        one_run sync
        one_run nosync --no-sync
      done
      N=$SIMNODES_N np=$SIMNODES_NP
      simnodes_down
      step=$(med <"$tmp/sync.ms") nos=$(med <"$tmp/nosync.ms")
      # per step, gradient traffic alone: the sync run's bytes less the no-sync run's
      paste "$tmp/sync.tx" "$tmp/nosync.tx" | awk -v s="$steps" '{ printf "%.0f\n", ($1 - $2) / s }' >"$tmp/bytes"
      ideal_b=$(awk -v g="$grad" -v n="$N" 'BEGIN { printf "%.0f", 2 * (n - 1) / n * g }')
      bits=$(rate_bits "$rate")
      ideal_ms=$([ -n "$bits" ] && awk -v b="$ideal_b" -v r="$bits" 'BEGIN { printf "%.2f", b * 8 / r * 1000 }' || echo -)
      paste "$tmp/sync.ms" "$tmp/nosync.ms" | awk '{ print $1 - $2 }' >"$tmp/exposed"
      awk -v o="$one" '{ print o / $1 }' "$tmp/sync.ms" >"$tmp/eff"
      printf '%-8s %3s %-9s %-6s | %8.2f %8.2f %8.2f %8s | %5.2f | %8.2f %8.2f %6.2f\n' "$lname" "$np" "$rate" "$algo" \
        "$step" "$nos" "$(med <"$tmp/exposed")" "$ideal_ms" "$(med <"$tmp/eff")" \
        "$(med <"$tmp/bytes" | awk '{ print $1 / 1e6 }')" "$(awk -v b="$ideal_b" 'BEGIN { print b / 1e6 }')" \
        "$(med <"$tmp/bytes" | awk -v b="$ideal_b" '{ print (b > 0) ? $1 / b : 0 }')"
      c="cluster-$model-$lname" i="$impl@$rate"
      csv_rows "$c" "$i" "$np" step_ms "$tmp/sync.ms" ms
      csv_rows "$c" "$i" "$np" no_sync_step_ms "$tmp/nosync.ms" ms
      csv_rows "$c" "$i" "$np" exposed_comm_ms "$tmp/exposed" ms
      [ "$ideal_ms" = - ] || csv_value "$c" "$i" "$np" ideal_ring_ms "$ideal_ms" ms
      csv_rows "$c" "$i" "$np" weak_scaling_efficiency "$tmp/eff" ratio
      csv_rows "$c" "$i" "$np" link_bytes_per_node_step "$tmp/bytes" bytes
      csv_value "$c" "$i" "$np" ideal_link_bytes_per_node_step "$ideal_b" bytes
    done
  done
done
echo
echo "Each node: a network namespace on a bridge (tests/simnodes.sh), its link limited both ways"
echo "by tc tbf at the rate shown; ranks placed node by node.  algo: the algorithm that ran the"
echo "gradient buckets (the summary's collectives by algorithm).  MB/step: bytes a node sent on its link per step beyond the no-sync run's,"
echo "TCP/IP headers included, mean over the nodes; ideal: 2(N-1)/N x the gradient (N nodes)."
echo "All nodes share this machine's $ncores cores: runs of more than $ncores ranks are oversubscribed"
echo "(their steps measure the shared cores more than the network)."
echo "(load average at the start: $load0; at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
