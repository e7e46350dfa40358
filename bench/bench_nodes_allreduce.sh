#!/bin/sh
# bench_nodes_allreduce.sh -- ddptrain's all-reduce across simulated nodes
# against Open MPI's own MPI_Allreduce, coll tuned (the default) and coll han
# (its hierarchical component), in the same run, at every size from --min to
# --max (doubling), for layouts of nodes x ranks per node at several link
# rates (tests/simnodes.sh: network namespaces on a bridge, each node's link
# limited both ways with tc tbf).
#
# One process gets one coll selection (at MPI_Init), so each round starts two
# mpirun jobs of bench_allreduce --algo auto,ring on a comm_mem_alloc'd
# buffer, one with Open MPI's defaults (coll tuned answers MPI_Allreduce) and
# one with OMPI_MCA_coll_han_priority=100 (coll han answers), alternating
# which goes first; each job also measures ddptrain's two algorithms
# alternating with its MPI_Allreduce, so every MPI number has ddptrain's from
# the same process beside it.  MPI_Allreduce reads a separate send buffer
# (bench_allreduce --mpi-in-place no) under both components: Open MPI
# 4.1.4's coll han crashes on MPI_IN_PLACE with several ranks per node
# (open-mpi/ompi#11488, fixed after 4.1.4); ddptrain's are in place.  Columns (per size, medians over the rounds;
# ddptrain's over both jobs of every round):
#   hier   ddptrain --allreduce auto, which on several nodes with node-shared
#          buffers is the hierarchical all-reduce (the script checks that hier
#          ran)
#   ring   ddptrain's flat ring over all ranks (--allreduce ring)
#   tuned  MPI_Allreduce, Open MPI coll tuned (its default decision rules)
#   han    MPI_Allreduce, Open MPI coll han (default han settings)
#   each as time (us: the slowest rank's average, bench_allreduce) and busbw
#   (GB/s: bytes / time x 2(W-1)/W, W ranks)
#   ratio  ddptrain's best busbw (hier or ring) / MPI's best (tuned or han):
#          >= 1.00 means ddptrain is at least as fast at that size
#
# From a configured build directory after `make -C bench bench`:
#   sh /path/to/ddptrain/bench/bench_nodes_allreduce.sh [--quick] [--rounds N]
#       [--layouts "2x1 2x2 4x1"] [--rates "unlimited 10gbit"] [--min 1M]
#       [--max 64M] [--reps N] [--iters N] [--piece BYTES] [--depth D]
#   --quick        2x1 at unlimited, 1M..2M, 1 round of 1 rep (seconds)
#   --rounds N     rounds, each one tuned job and one han job (default 2)
#   --reps N       alternating repetitions inside each job (default 3)
#   --iters N      timed all-reduces per repetition (default 20; fewer for
#                  large sizes, as bench_allreduce does)
#   --piece/--depth  ddptrain's ring piece and depth (bench_allreduce), for
#                  tuning studies; default: the built-in values
# Skipped, with the reason on one line, where the nodes cannot be simulated
# (not root, no ip, unshare or tc, not Open MPI) or coll han is not built.
# With BENCH_CSV=FILE the numbers are also appended to FILE (bench/lib.sh):
# case allreduce-nodes-LAYOUT-SIZEB (allreduce-nodes-2x2-1048576B),
# implementation ddptrain-hier@RATE, ddptrain-ring@RATE, mpi-tuned@RATE,
# mpi-han@RATE with metrics time_us and busbw_gb_per_s (min/median/max over
# the rounds), and ddptrain-best-over-mpi-best@RATE, metric busbw_ratio (of
# the medians).
# Exit status: 0 (also when skipped); 1 when a run fails or a result is
# wrong; 2 usage.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
. "$src/tests/simnodes.sh"
quick=0 rounds=2 layouts="2x1 2x2 4x1" rates="unlimited 10gbit" minb=1M maxb=64M reps=3 iters=20
piece=0 depth=0
usage() { echo "bench_nodes_allreduce.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?--rounds N}; shift ;;
    --layouts) layouts=${2:?--layouts LIST}; shift ;;
    --rates) rates=${2:?--rates LIST}; shift ;;
    --min) minb=${2:?--min SIZE}; shift ;;
    --max) maxb=${2:?--max SIZE}; shift ;;
    --reps) reps=${2:?--reps N}; shift ;;
    --iters) iters=${2:?--iters N}; shift ;;
    --piece) piece=${2:?--piece BYTES}; shift ;;
    --depth) depth=${2:?--depth D}; shift ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument $1 (see --help)" ;;
  esac
  shift
done
[ "$quick" = 1 ] && layouts=2x1 rates=unlimited minb=1M maxb=2M rounds=1 reps=1 iters=5
for v in "$rounds" "$reps" "$iters"; do
  case $v in '' | *[!0-9]* | 0) usage "--rounds, --reps and --iters take a number >= 1" ;; esac
done
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
for r in $rates; do
  [ "$r" = unlimited ] || [ -n "$(simnodes_rate_bits_ "$r")" ] || usage "--rates: $r is not a tc rate (e.g. 10gbit) or unlimited"
done
[ -x ./bench/bench_allreduce ] || usage "run from a build directory after 'make -C bench bench'"
lay_name() {
  echo "$1" | awk -F, '{ for (i = 2; i <= NF; i++) if ($i != $1) { print; exit } print NF "x" $1 }'
}

tune=""
[ "$piece" = 0 ] || tune="$tune --piece $piece"
[ "$depth" = 0 ] || tune="$tune --depth $depth"
echo "# bench_nodes_allreduce.sh: layouts$(for p in $lays; do printf ' %s' "$(lay_name "$p")"; done), links: $rates;" \
  "sizes $minb..$maxb; $rounds round(s) x (tuned job, han job), $reps reps x $iters iters per job${tune:+; ddptrain ring$tune}"
if ! simnodes_check "$(echo "$rates" | tr ' ' '\n' | grep -v '^unlimited$' | head -n 1)"; then
  echo "Not run: $SIMNODES_WHY."
  exit 0
fi
if ! ompi_info 2>/dev/null | grep -q 'MCA coll: han'; then
  echo "Not run: this Open MPI has no coll han component (ompi_info)."
  exit 0
fi

tmp=$(mktemp -d)
trap 'simnodes_down; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
load0=$(cut -d' ' -f1-3 /proc/loadavg)
ncores=$(getconf _NPROCESSORS_ONLN)

# one_job FLAVOUR: bench_allreduce on the nodes under coll FLAVOUR (tuned:
# Open MPI's defaults; han: coll_han_priority 100); its rows appended to
# $tmp/FLAVOUR as "size hier_us ring_us mpi_us"
one_job() {
  case $1 in tuned) mca="" ;; han) mca="--mca coll_han_priority 100" ;; esac
  rc=0
  # shellcheck disable=SC2086
  simnodes_mpirun $mca ./bench/bench_allreduce --algo auto,ring --min "$minb" --max "$maxb" \
    --reps "$reps" --iters "$iters" --warmup 2 --mpi-in-place no $tune >"$tmp/o" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { cat "$tmp/o" >&2; echo "bench_nodes_allreduce.sh: $lname at $rate, coll $1: exit $rc" >&2; exit 1; }
  grep -q "ranks on $SIMNODES_N node(s)" "$tmp/o" ||
    { cat "$tmp/o" >&2; echo "bench_nodes_allreduce.sh: $lname: the ranks did not see $SIMNODES_N nodes" >&2; exit 1; }
  grep -q '^# comm algorithms that ran: .*hier' "$tmp/o" ||
    { cat "$tmp/o" >&2; echo "bench_nodes_allreduce.sh: $lname: auto did not run the hierarchical all-reduce" >&2; exit 1; }
  [ "$1" = tuned ] || grep -q 'coll_han_priority=100' "$tmp/o" ||
    { cat "$tmp/o" >&2; echo "bench_nodes_allreduce.sh: coll han was not asked for" >&2; exit 1; }
  awk '!/^#/ && NF >= 21 { print $1, $5, $11, $17 }' "$tmp/o" >>"$tmp/$1"
}

for per in $lays; do
  lname=$(lay_name "$per")
  for rate in $rates; do
    simnodes_up "$per" "$rate" nar || { echo "Not run: $lname at $rate: $SIMNODES_WHY."; continue; }
    rm -f "$tmp/tuned" "$tmp/han"
    for r in $(seq "$rounds"); do
      if [ $((r % 2)) = 1 ]; then one_job tuned; one_job han; else one_job han; one_job tuned; fi
    done
    W=$SIMNODES_NP
    simnodes_down
    echo
    echo "## $lname ($W ranks), link $rate: medians of $rounds round(s); ddptrain's over both jobs of each round"
    printf '%10s | %9s %6s | %9s %6s | %9s %6s | %9s %6s | %6s\n' size "hier" "" "ring" "" "MPI tuned" "" "MPI han" "" "ratio"
    printf '%10s | %9s %6s | %9s %6s | %9s %6s | %9s %6s | %6s\n' "(B)" "(us)" busbw "(us)" busbw "(us)" busbw "(us)" busbw "best"
    for b in $(awk '{ print $1 }' "$tmp/tuned" | sort -un); do
      # per-round times: hier and ring from both jobs, tuned and han from theirs
      awk -v b="$b" '$1 == b { print $2 }' "$tmp/tuned" "$tmp/han" >"$tmp/hier.t"
      awk -v b="$b" '$1 == b { print $3 }' "$tmp/tuned" "$tmp/han" >"$tmp/ring.t"
      awk -v b="$b" '$1 == b { print $4 }' "$tmp/tuned" >"$tmp/tuned.t"
      awk -v b="$b" '$1 == b { print $4 }' "$tmp/han" >"$tmp/han.t"
      line="" best_d="" best_m=""
      for k in hier ring tuned han; do
        t=$(med <"$tmp/$k.t")
        bw=$(awk -v b="$b" -v t="$t" -v w="$W" 'BEGIN { printf "%.2f", b / (t * 1e-6) / 1e9 * 2 * (w - 1) / w }')
        line="$line$(printf ' | %9.1f %6.2f' "$t" "$bw")"
        scale_each "$tmp/$k.t" "$b / (v * 1e-6) / 1e9 * 2 * ($W - 1) / $W" >"$tmp/$k.bw"
        case $k in
          hier | ring) best_d=$(echo "$best_d $bw" | awk '{ print ($1 == "" || $2 > $1) ? $2 : $1 }') ;;
          *) best_m=$(echo "$best_m $bw" | awk '{ print ($1 == "" || $2 > $1) ? $2 : $1 }') ;;
        esac
        case $k in hier | ring) impl=ddptrain-$k ;; *) impl=mpi-$k ;; esac
        csv_rows "allreduce-nodes-$lname-${b}B" "$impl@$rate" "$W" time_us "$tmp/$k.t" us
        csv_rows "allreduce-nodes-$lname-${b}B" "$impl@$rate" "$W" busbw_gb_per_s "$tmp/$k.bw" GB/s
      done
      ratio=$(awk -v d="$best_d" -v m="$best_m" 'BEGIN { printf "%.2f", d / m }')
      printf '%10s%s | %6s\n' "$b" "$line" "$ratio"
      csv_value "allreduce-nodes-$lname-${b}B" "ddptrain-best-over-mpi-best@$rate" "$W" busbw_ratio "$ratio" ratio
    done
  done
done
echo
echo "Each node: a network namespace on a bridge (tests/simnodes.sh), its link limited both ways by"
echo "tc tbf at the rate shown; ranks placed node by node, TCP between nodes, shared memory within."
echo "ratio: ddptrain's best busbw (hier, ring) / MPI's best (tuned, han); >= 1.00: ddptrain at least as fast."
echo "All nodes share this machine's $ncores cores: more than $ncores ranks are oversubscribed."
echo "(load average at the start: $load0; at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
