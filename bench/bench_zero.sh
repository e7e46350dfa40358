#!/bin/sh
# bench_zero.sh -- ZeRO (--zero 0|1|2) side by side: for each stage at np=1,
# 2 and 4 on one node, an MLP whose AdamW state is twice its parameters,
# batch 32 per rank, in alternating rounds of the same run:
#   - memory per rank: the plan of the start-up table (rank 0's
#     `memory/rank` line: params, grads, optimizer MiB) and the measured PSS
#     of the ranks (Pss of /proc/PID/smaps_rollup, sampled every 0.2 s,
#     during training: the ranks' total over N, and the largest rank; the
#     same of Pss_Anon + Pss_Shmem, without the pages of files: libraries,
#     shared with whatever else runs; and its peak, start-up included),
#     against stage 0 at the same np.  The ranks run with
#     MALLOC_MMAP_THRESHOLD_=131072, so that large blocks freed during the
#     start-up go back to the system: with glibc's default the heap keeps
#     them (about one parameter copy), the sharded state of stages 1 and 2
#     reuses them, and PSS would fall by more than the plan says;
#   - the shards, from the plan: the largest rank's optimizer state over the
#     full state, times N (target: within 5% of 1 at stages 1 and 2), and at
#     stage 2 the planned gradient bytes over G/N + one bucket (target: within
#     5%) and over G/N + the two bucket slots stage 2 keeps;
#   - the step time (the median over the ranks of each rank's step_ms p50,
#     from the summary; median over the rounds) with stage 1 / stage 0 and
#     stage 2 / stage 0 (target: stage 1 within 5% of stage 0 on one node);
#   - the same step times on two simulated nodes (network namespaces on a
#     bridge, tests/simnodes.sh, as tests/e2e/test_multinode.sh: the ranks
#     talk over TCP), 1 rank per node (--per-node 1,2: also 2);
#     skipped with the reason when not root or without ip/unshare;
#   - the plan of `--device cuda` at stages 0/1/2 on the emulated GPUs
#     (tests/doubles/train_emu, DDP_EMU_GPUS), when that program is built
#     (`make -C tests doubles/train_emu`); skipped otherwise.
# The default model is deeper than wide so that stage 2's two gradient slots
# (each the largest bucket, at least the largest tensor) are small next to
# the whole gradient; on the 784-1024-1024-10 MLP two slots of its 4 MiB
# layer exceed its 7.1 MiB of gradients (try --model to see it).
#
# From a configured build directory:
#   sh /path/to/ddptrain/bench/bench_zero.sh [--quick] [--rounds N] [--steps N]
#       [--model SPEC] [--bucket-cap-mb MB] [--no-nodes] [--per-node LIST]
#       [--link-rate RATE]
#   --quick          1 round of 30 steps
#   --rounds N       rounds (default 3); --steps N steps per run (default 60)
#   --model SPEC     the model (default linear:512 x 8 with relu, linear:auto)
#   --bucket-cap-mb  the bucket cap (default 1.6: one linear layer a bucket)
#   --no-nodes       leave out the two simulated nodes
#   --per-node LIST  ranks per simulated node, e.g. 1,2 (default 1: np=2)
#   --link-rate RATE limit each node's link with tc tbf (e.g. 10gbit;
#                    default: unlimited)
# np=4 runs with --oversubscribe: on a 2-core machine 2 ranks share a core,
# so its step times measure the stages against each other, not scaling.
# With BENCH_CSV=FILE the numbers are also appended to FILE (bench/lib.sh).
# Exit status: 0 whether or not a target is met; 1 when a run fails; 2 usage.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
. "$src/tests/simnodes.sh"
quick=0 rounds=3 steps=60 nodes=1 per_node=1 link_rate="" cap=1.6 spec=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?--rounds N}; shift ;;
    --steps) steps=${2:?--steps N}; shift ;;
    --model) spec=${2:?--model SPEC}; shift ;;
    --bucket-cap-mb) cap=${2:?--bucket-cap-mb MB}; shift ;;
    --no-nodes) nodes=0 ;;
    --per-node) per_node=$(echo "${2:?--per-node LIST}" | tr , ' '); shift ;;
    --link-rate) link_rate=${2:?--link-rate RATE}; shift ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_zero.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$quick" = 1 ] && { rounds=1 steps=30; }
for k in $per_node; do
  case $k in [1-9]) ;; *) echo "bench_zero.sh: --per-node $k: ranks per node, 1 to 9" >&2; exit 2 ;; esac
done
[ -x ./ddptrain ] && [ -x ./ddptrain-prep ] || { echo "bench_zero.sh: run from a build directory after 'make'" >&2; exit 2; }
if [ -z "$spec" ]; then
  spec=linear:512
  for _ in 2 3 4 5 6 7 8; do spec=$spec,relu,linear:512; done
  spec=$spec,relu,linear:auto
fi
watcher=""
tmp=$(mktemp -d)
cleanup() {
  [ -z "$watcher" ] || kill "$watcher" 2>/dev/null || true
  simnodes_down
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
ncores=$(getconf _NPROCESSORS_ONLN) # before OMP_NUM_THREADS, which nproc obeys
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=131072
./ddptrain-prep synthetic --classes 10 --features 784 --samples 8192 --seed 1 -o "$tmp/d.h5" >/dev/null
opts="--model $spec --optimizer adamw --batch 32 --bucket-cap-mb $cap --log-every 0 --eval-every 0 --seed 1"
nps="1 2 4" stages="0 1 2"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# pss_watch OUT: until killed, every 0.2 s, "sample pid pss_kib
# anon+shmem_kib" of every rank of the mpirun this shell started (Open MPI
# starts the ranks of its own node as its children)
pss_watch() {
  i=0
  while kill -0 "$$" 2>/dev/null; do # not beyond this script
    i=$((i + 1))
    for mp in $(pgrep -P "$$" -x mpirun || true); do
      for p in $(pgrep -P "$mp" || true); do
        awk -v i="$i" -v p="$p" '$1 == "Pss:" { t = $2 } $1 == "Pss_Anon:" || $1 == "Pss_Shmem:" { a += $2 }
          END { if (t != "") print i, p, t, a }' "/proc/$p/smaps_rollup" 2>/dev/null || true
      done
    done >>"$1"
    sleep 0.2
  done
}

# all_ranks_ms LOG: the median over the ranks of their step_ms p50
all_ranks_ms() { sed -n 's/^summary (all ranks): step_ms min [0-9.]* (rank [0-9]*) median \([0-9.]*\) .*/\1/p' "$1"; }

# one NP STAGE: one run on this node; step time, PSS and (first round) the log
one() {
  : >"$tmp/pss"
  pss_watch "$tmp/pss" &
  watcher=$!
  rc=0
  bench_mpirun --oversubscribe -np "$1" ./ddptrain "$tmp/d.h5" $opts --steps "$steps" --zero "$2" \
    >"$tmp/o" 2>&1 || rc=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  watcher=""
  [ "$rc" = 0 ] || { cat "$tmp/o" >&2; echo "bench_zero.sh: np=$1 --zero $2 failed (exit $rc)" >&2; exit 1; }
  ms=$(all_ranks_ms "$tmp/o")
  [ -n "$ms" ] || { cat "$tmp/o" >&2; echo "bench_zero.sh: np=$1 --zero $2: no summary line" >&2; exit 1; }
  echo "$ms" >>"$tmp/ms.$1.$2"
  # over the samples that saw every rank (a shared page counts once in the
  # ranks' total): during training = the median of the later half of them,
  # of the total over N, of the largest rank and of the total without files
  # over N; and the peak of the total without files over N (the start-up
  # holds a few temporaries).  A rank's own peak would catch the end, when
  # the ranks that exit first leave the pages they shared to the others.
  awk -v n="$1" 'function med(x, c,   i, j, v) { for (i = 2; i <= c; i++) { v = x[i]
        for (j = i - 1; j >= 1 && x[j] > v; j--) x[j + 1] = x[j]; x[j + 1] = v }
      return c % 2 ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2 }
    { k[$1]++; t[$1] += $3; a[$1] += $4; if ($3 > m[$1]) m[$1] = $3; if ($1 > last) last = $1 }
    END { for (i = 1; i <= last; i++) if (k[i] == n) { c++; T[c] = t[i]; M[c] = m[i]; A[c] = a[i]; if (a[i] > pa) pa = a[i] }
      if (!c) exit
      h = int(c / 2); for (i = h + 1; i <= c; i++) { T2[i - h] = T[i]; M2[i - h] = M[i]; A2[i - h] = A[i] }
      printf "%.2f %.2f %.2f %.2f\n", med(T2, c - h) / n / 1024, med(M2, c - h) / 1024, med(A2, c - h) / n / 1024, pa / n / 1024 }' \
    "$tmp/pss" >"$tmp/x"
  if [ -s "$tmp/x" ]; then
    cut -d' ' -f1 "$tmp/x" >>"$tmp/pss.$1.$2"
    cut -d' ' -f2 "$tmp/x" >>"$tmp/pssmax.$1.$2"
    cut -d' ' -f3 "$tmp/x" >>"$tmp/anon.$1.$2"
    cut -d' ' -f4 "$tmp/x" >>"$tmp/anonpeak.$1.$2"
  fi
  [ -s "$tmp/log.$1.$2" ] || cp "$tmp/o" "$tmp/log.$1.$2"
}

for r in $(seq "$rounds"); do
  for np in $nps; do
    for z in $stages; do one "$np" "$z"; done
  done
done

# ---- the plan, from the start-up tables -------------------------------------
# plan_of NP STAGE: "params grads optimizer" MiB of rank 0's memory/rank line
plan_of() { sed -n 's/^  memory\/rank  params \([0-9.]*\) MiB, grads \([0-9.]*\) MiB, optimizer \([0-9.]*\) MiB.*/\1 \2 \3/p' "$tmp/log.$1.$2"; }
# shard_of NP STAGE: "largest_shard trainable" elements of the zero line
shard_of() { sed -n 's/^  zero         stage [0-9]*: optimizer state of [0-9]* of \([0-9]*\) trainable elements on this rank ([0-9]* ranks, at most \([0-9]*\) each.*/\2 \1/p' "$tmp/log.$1.$2"; }
# slots_of NP STAGE: "slots slot_MiB" of stage 2's zero line
slots_of() { sed -n 's/.*reduced gradients of the shard, \([0-9]*\) gradient slots of \([0-9.]*\) MiB.*/\1 \2/p' "$tmp/log.$1.$2"; }
med_of() { if [ -s "$1" ]; then med <"$1"; else echo -; fi; }

l=$tmp/log.1.0
params=$(sed -n 's/.* \([0-9]*\) parameters (\([0-9]*\) trainable).*/\1/p' "$l" | head -n 1)
buckets=$(sed -n 's/^  buckets      \([0-9]*\): .*/\1/p' "$l")
largest=$(sed -n 's/^  buckets      [0-9]*: \(.*\) MiB (cap.*/\1/p' "$l" | tr ',' '\n' | sort -g | tail -n 1 | tr -d ' ')
printf '# bench_zero: --zero 0/1/2, model %s\n' "$spec"
printf '# %s parameters (%.2f MiB float32), AdamW (2 state tensors), batch 32 per rank, --bucket-cap-mb %s (%s buckets, the largest %s MiB), %s steps, %s round(s), medians\n' \
  "$params" "$(awk -v p="$params" 'BEGIN { print 4 * p / 1048576 }')" "$cap" "$buckets" "$largest" "$steps" "$rounds"
printf '# machine: %s, %s cores%s; load average at start %s\n' "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)" \
  "$ncores" "$(for np in $nps; do [ "$np" -gt "$ncores" ] && printf '; np=%s oversubscribed (%s ranks on %s cores)' "$np" "$np" "$ncores"; done)" "$load0"
echo
echo "## Memory per rank, one node (MiB)"
echo "plan = rank 0's start-up table (memory/rank).  Measured: Pss of each rank's /proc/PID/smaps_rollup,"
echo "sampled every 0.2 s (a page shared by k processes counts 1/k in each; the ranks' total counts it"
echo "once), during training (the median of the later half of the samples): PSS = the ranks' total / N,"
echo "max = the largest rank; a+s = Pss_Anon + Pss_Shmem, the total / N: PSS without the pages of files"
echo "(libraries, shared with whatever else runs); a+s peak = its largest sample, start-up included."
echo "d = the change against stage 0 at the same np: the plan's params + grads + optimizer, and a+s;"
echo "saved = d a+s / d plan.  The ranks run with MALLOC_MMAP_THRESHOLD_=131072: large blocks freed"
echo "during the start-up go back to the system (glibc's default keeps them in the heap, where stages"
echo "1 and 2 reuse them for the shard's state, so the saving would look larger than planned)."
printf '%-3s %5s | %6s %6s %9s %6s | %6s %6s %6s %7s | %6s %6s %5s\n' np stage params grads optimizer sum PSS max a+s "a+s pk" "d plan" "d a+s" saved
for np in $nps; do
  set -- $(plan_of "$np" 0)
  base_sum=$(awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { print a + b + c }')
  base_anon=$(med_of "$tmp/anon.$np.0")
  for z in $stages; do
    set -- $(plan_of "$np" "$z")
    pm=$(med_of "$tmp/pss.$np.$z") px=$(med_of "$tmp/pssmax.$np.$z") an=$(med_of "$tmp/anon.$np.$z")
    ap=$(med_of "$tmp/anonpeak.$np.$z")
    awk -v np="$np" -v z="$z" -v a="$1" -v b="$2" -v c="$3" -v pm="$pm" -v px="$px" -v an="$an" -v ap="$ap" \
      -v bs="$base_sum" -v ba="$base_anon" \
      'function f(v) { return v == "-" ? "-" : sprintf("%.1f", v) }
      BEGIN { s = a + b + c; m = (z != 0 && an != "-" && ba != "-")
        printf "%-3s %5s | %6.1f %6.1f %9.1f %6.1f | %6s %6s %6s %7s | %6s %6s %5s\n", np, z, a, b, c, s, f(pm), f(px), f(an), f(ap),
          z == 0 ? "" : sprintf("%+.1f", s - bs), m ? sprintf("%+.1f", an - ba) : "",
          m && s != bs ? sprintf("%.2f", (an - ba) / (s - bs)) : "" }'
    if [ "$z" != 0 ] && [ "$an" != - ] && [ "$base_anon" != - ]; then
      awk -v s="$1 $2 $3" -v bs="$base_sum" -v an="$an" -v ba="$base_anon" \
        'BEGIN { split(s, v, " "); d = v[1] + v[2] + v[3] - bs; if (d != 0) print (an - ba) / d }' >"$tmp/x"
      csv_rows "zero-stage$z" ddptrain "$np" measured_saving_over_plan "$tmp/x" ratio
    fi
    csv_value "zero-stage$z" ddptrain "$np" plan_params_mib "$1" MiB
    csv_value "zero-stage$z" ddptrain "$np" plan_grads_mib "$2" MiB
    csv_value "zero-stage$z" ddptrain "$np" plan_optimizer_mib "$3" MiB
    csv_rows "zero-stage$z" ddptrain "$np" pss_mib_per_rank "$tmp/pss.$np.$z" MiB
    csv_rows "zero-stage$z" ddptrain "$np" pss_max_mib_per_rank "$tmp/pssmax.$np.$z" MiB
    csv_rows "zero-stage$z" ddptrain "$np" pss_anon_shmem_mib_per_rank "$tmp/anon.$np.$z" MiB
    csv_rows "zero-stage$z" ddptrain "$np" pss_anon_shmem_peak_mib_per_rank "$tmp/anonpeak.$np.$z" MiB
  done
done
echo
echo "## Shards, from the plan (np > 1)"
echo "optimizer: the largest rank's optimizer-state elements (zero line) / the trainable elements; x N: that times"
echo "the ranks (target 1.00 +- 5% at stages 1 and 2).  grads (stage 2): the plan's grads MiB against"
echo "G/N + B (G = the whole gradient, stage 0's grads MiB; B = the largest bucket; target: within 5%)"
echo "and against G/N + 2B (stage 2 keeps 2 bucket-sized slots: backward writes one while the other is reduced)."
printf '%-3s %5s | %9s %6s | %7s %7s %6s %7s %6s\n' np stage "opt/full" "x N" grads "G/N+B" ratio "G/N+2B" ratio
for np in $nps; do
  [ "$np" -gt 1 ] || continue
  G=$(plan_of "$np" 0 | cut -d' ' -f2)
  for z in 1 2; do
    set -- $(shard_of "$np" "$z") -
    [ "$1" != - ] || { echo "bench_zero.sh: np=$np --zero $z: no zero line in the start-up table" >&2; exit 1; }
    opt=$(awk -v s="$1" -v t="$2" 'BEGIN { printf "%.6f", s / t }')
    xn=$(awk -v o="$opt" -v n="$np" 'BEGIN { printf "%.4f", o * n }')
    csv_value "zero-stage$z" ddptrain "$np" optimizer_state_over_full "$opt" fraction
    csv_value "zero-stage$z" ddptrain "$np" optimizer_state_times_n_over_full "$xn" ratio
    if [ "$z" = 2 ]; then
      g=$(plan_of "$np" 2 | cut -d' ' -f2)
      set -- $(slots_of "$np" 2) - -
      B=${2:-}
      [ "$B" != - ] || B=$largest # stage 2 without slots (--accum > 1) keeps the whole gradient
      e1=$(awk -v G="$G" -v n="$np" -v B="$B" 'BEGIN { print G / n + B }')
      e2=$(awk -v G="$G" -v n="$np" -v B="$B" 'BEGIN { print G / n + 2 * B }')
      awk -v np="$np" -v o="$opt" -v x="$xn" -v g="$g" -v e1="$e1" -v e2="$e2" \
        'BEGIN { printf "%-3s %5s | %9.4f %6.3f | %7.1f %7.2f %6.3f %7.2f %6.3f\n", np, 2, o, x, g, e1, g / e1, e2, g / e2 }'
      csv_value zero-stage2 ddptrain "$np" grads_over_shard_plus_bucket "$(awk -v g="$g" -v e="$e1" 'BEGIN { print g / e }')" ratio
      csv_value zero-stage2 ddptrain "$np" grads_over_shard_plus_2_slots "$(awk -v g="$g" -v e="$e2" 'BEGIN { print g / e }')" ratio
    else
      awk -v np="$np" -v o="$opt" -v x="$xn" -v g="$(plan_of "$np" 1 | cut -d' ' -f2)" \
        'BEGIN { printf "%-3s %5s | %9.4f %6.3f | %7.1f %7s %6s %7s %6s\n", np, 1, o, x, g, "", "", "", "" }'
    fi
  done
done

# step_table IMPL NPS: the step times of IMPL's runs ($tmp/ms[IMPL].NP.STAGE)
step_table() {
  printf '%-3s | %9s %9s %9s | %7s %7s\n' np "stage 0" "stage 1" "stage 2" "1 / 0" "2 / 0"
  for np in $2; do
    for z in $stages; do csv_rows "zero-stage$z" "$1" "$np" step_ms "$tmp/ms$3.$np.$z" ms; done
    for z in 1 2; do
      paste -d' ' "$tmp/ms$3.$np.$z" "$tmp/ms$3.$np.0" | awk '{ print $1 / $2 }' >"$tmp/ratio.$np.$z"
      csv_rows "zero-stage$z" "$1" "$np" step_over_stage0 "$tmp/ratio.$np.$z" ratio
    done
    awk -v np="$np" -v a="$(med <"$tmp/ms$3.$np.0")" -v b="$(med <"$tmp/ms$3.$np.1")" -v c="$(med <"$tmp/ms$3.$np.2")" \
      -v r1="$(med <"$tmp/ratio.$np.1")" -v r2="$(med <"$tmp/ratio.$np.2")" \
      'BEGIN { printf "%-3s | %9.2f %9.2f %9.2f | %7.3f %7.3f\n", np, a, b, c, r1, r2 }'
  done
}
echo
echo "## Step time, one node (ms)"
echo "The median over the ranks of each rank's step_ms p50 (summary), median over the rounds; the"
echo "ratios are taken per round.  Target: stage 1 / stage 0 <= 1.05.  At np=1 every stage runs the"
echo "same code (nothing to shard): its ratios are the noise of this run."
step_table ddptrain "$nps" ""

# ---- two simulated nodes ----------------------------------------------------
# tests/simnodes.sh: network namespaces on a bridge, mpirun's agent starting
# each node's daemon in its namespace
nodes_why=""
nodes_up() {
  simnodes_up 1,1 "${link_rate:-unlimited}" ddz || { nodes_why=$SIMNODES_WHY; return 1; }
}
# on_nodes PER_NODE STAGE: one run on the two nodes, its step time
on_nodes() {
  simnodes_layout "$1,$1" || { echo "bench_zero.sh: $SIMNODES_WHY" >&2; exit 1; }
  np=$SIMNODES_NP rc=0
  simnodes_mpirun -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x MALLOC_MMAP_THRESHOLD_ \
    ./ddptrain "$tmp/d.h5" $opts --steps "$steps" --zero "$2" >"$tmp/o" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { cat "$tmp/o" >&2; echo "bench_zero.sh: 2 nodes x $1 --zero $2 failed (exit $rc)" >&2; exit 1; }
  grep -q "$np ranks on 2 nodes ($1 per node)" "$tmp/o" ||
    { cat "$tmp/o" >&2; echo "bench_zero.sh: the ranks did not see 2 nodes" >&2; exit 1; }
  ms=$(all_ranks_ms "$tmp/o")
  [ -n "$ms" ] || { cat "$tmp/o" >&2; echo "bench_zero.sh: 2 nodes: no summary line" >&2; exit 1; }
  echo "$ms" >>"$tmp/msn.$np.$2"
}
echo
echo "## Step time, two simulated nodes (ms)"
if [ "$nodes" = 0 ]; then
  echo "Not run: --no-nodes."
elif nodes_up; then
  for r in $(seq "$rounds"); do
    for k in $per_node; do
      for z in $stages; do on_nodes "$k" "$z"; done
    done
  done
  echo "Two network namespaces on a bridge (tests/simnodes.sh; $([ -n "$link_rate" ] && echo "tc tbf $link_rate each way" || echo "no rate limit")),"
  echo "ranks placed node by node (np=2: 1 per node, np=4: 2 per node), TCP between the nodes."
  echo "Both nodes share this machine's $ncores cores.  As above: medians, ratios per round."
  nn=""; for k in $per_node; do nn="$nn $((2 * k))"; done
  step_table ddptrain-2-nodes "$nn" n
else
  echo "Not run: $nodes_why."
fi

# ---- the emulated GPUs' plan ------------------------------------------------
echo
echo "## Plan of --device cuda (emulated GPUs), MiB per rank"
emu=./tests/doubles/train_emu
if [ -x "$emu" ]; then
  echo "tests/doubles/train_emu (the CUDA, cuBLAS and NCCL emulation on the CPU; DDP_EMU_GPUS=N), one step;"
  echo "rank 0's memory/rank line: these are device-memory plans, the CPU numbers are not GPU measurements."
  printf '%-3s %5s | %7s %7s %9s\n' np stage params grads optimizer
  for np in 2 4; do
    for z in $stages; do
      rc=0
      DDP_EMU_GPUS=$np bench_mpirun --oversubscribe -np "$np" "$emu" "$tmp/d.h5" $opts --steps 1 --device cuda \
        --zero "$z" >"$tmp/o" 2>&1 || rc=$?
      [ "$rc" = 0 ] || { cat "$tmp/o" >&2; echo "bench_zero.sh: emulated cuda np=$np --zero $z failed (exit $rc)" >&2; exit 1; }
      grep -q "comm nccl" "$tmp/o" || { cat "$tmp/o" >&2; echo "bench_zero.sh: train_emu did not take the cuda + nccl path" >&2; exit 1; }
      cp "$tmp/o" "$tmp/log.$np.$z"
      set -- $(plan_of "$np" "$z")
      printf '%-3s %5s | %7.1f %7.1f %9.1f\n' "$np" "$z" "$1" "$2" "$3"
    done
  done
else
  echo "Not run: $emu is not built (make -C tests doubles/train_emu)."
fi
echo
echo "(load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
