#!/bin/sh
# suite.sh -- the benchmark suite behind `make bench`: every benchmark of
# bench/, each next to its reference measured in the same run, written to
# OUT/results.md (machine, versions, date, one section per case with the
# command and its table) and OUT/results.csv (one row per measured quantity:
# case,implementation,ranks,metric,min,median,max,unit; bench/lib.sh).
#
# From a configured build directory (make bench runs it after building):
#   sh /path/to/ddptrain/bench/suite.sh [--quick] [--rounds N] [--fashion-rounds N]
#                                       [--only CASE[,CASE...]] [--out DIR]
# Cases, in order: mlp cnn cnn-ops mlp-1-rank accum zero cluster allreduce
# allreduce-nodes loader checkpoint fashion gpu-model.
#   --quick            1 round, fewer steps, the quick checkpoint sizes, no
#                      Fashion-MNIST: a check that everything runs (minutes)
#   --rounds N         rounds of the alternating benchmarks (default 3)
#   --fashion-rounds N rounds of the Fashion-MNIST time-to-accuracy runs
#                      (default 1; 0 leaves them out; they take ~5 min a round)
#   --out DIR          where results.md and results.csv go (default: bench/ of
#                      the build directory)
# The machine should be otherwise idle: the numbers are only comparable within
# one run, next to their reference.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
rounds=3 fashion_rounds=1 quick=0 only="" out=bench
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?--rounds N}; shift ;;
    --fashion-rounds) fashion_rounds=${2:?--fashion-rounds N}; shift ;;
    --only) only=${2:?--only CASE[,CASE...]}; shift ;;
    --out) out=${2:?--out DIR}; shift ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "suite.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x ./ddptrain ] && [ -x ./ddptrain-prep ] || {
  echo "suite.sh: run from a build directory after 'make' (or run 'make bench' there)" >&2; exit 2; }
for c in $(echo "$only" | tr , ' '); do
  case " mlp cnn cnn-ops resnet18 resnet50 mlp-1-rank accum zero cluster allreduce allreduce-nodes loader checkpoint fashion gpu-model " in
    *" $c "*) ;;
    *) echo "suite.sh: --only $c: no such case (mlp cnn cnn-ops resnet18 resnet50 mlp-1-rank accum zero cluster allreduce allreduce-nodes loader checkpoint fashion gpu-model)" >&2; exit 2 ;;
  esac
done
wanted() { [ -z "$only" ] || case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for c in mlp cnn cnn-ops mlp-1-rank allreduce loader; do
  wanted "$c" || continue
  [ -x ./bench/bench_allreduce ] && [ -x ./bench/bench_kernels ] && [ -x ./bench/bench_loader ] &&
    [ -x ./bench/bench_cnn ] || {
    echo "suite.sh: the benchmark programs are not built: run 'make -C bench bench' (or 'make bench')" >&2; exit 2; }
done
# allreduce-nodes runs bench_allreduce alone
! wanted allreduce-nodes || [ -x ./bench/bench_allreduce ] || {
  echo "suite.sh: bench/bench_allreduce is not built: run 'make -C bench bench' (or 'make bench')" >&2; exit 2; }
[ -d "$out" ] && [ -w "$out" ] || { echo "suite.sh: --out $out: not a writable directory" >&2; exit 2; }
if [ "$quick" = 1 ]; then rounds=1 fashion_rounds=0 steps=100 cnn_steps=30 rn_steps=3 accum_samples=6400 q=--quick
else steps=400 cnn_steps=150 rn_steps=10 accum_samples=25600 q=""; fi
md=$out/results.md csv=$out/results.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/csv"
export BENCH_CSV="$tmp/csv"
fm=${DDP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}

# section TITLE TEXT COMMAND...: run COMMAND, its output in a code block under TITLE
section() {
  title=$1 text=$2; shift 2
  echo "suite: $title: $*" >&2
  t0=$(date +%s)
  if ! "$@" >"$tmp/out" 2>&1; then
    cat "$tmp/out" >&2
    echo "suite.sh: $title failed: $*" >&2
    exit 1
  fi
  # the command as run from a build directory under the source tree
  cmd=$(echo "$*" | sed "s|$src/|../|g; s|^bench_mpirun|mpirun|")
  { printf '\n## %s\n\n%s\n\n    %s\n\n```\n' "$title" "$text" "$cmd"; cat "$tmp/out"; printf '```\n'
    printf '\n(%s s; load average after: %s)\n' "$(($(date +%s) - t0))" "$(cut -d' ' -f1-3 /proc/loadavg)"; } >>"$tmp/md"
}
ver() { "$@" 2>/dev/null | head -n 1 || echo "?"; }

t_start=$(date -u +%Y-%m-%dT%H:%MZ)
{
  echo "# bench/results.md -- measured results"
  echo
  echo "Written by \`make bench\` (bench/suite.sh; how to run and read each benchmark: bench/README.md)."
  echo "Every number sits next to its reference measured in the same run; the machines are"
  echo "shared and noisy, so compare within a run, not across runs. The same numbers, one row"
  echo "per quantity (min/median/max over the rounds): \`results.csv\`."
  echo
  echo "- date: $t_start; rounds: $rounds$( [ "$quick" = 1 ] && echo ' (--quick)')"
  echo "- machine: $(uname -srm); $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores, $(free -g | awk '/^Mem:/ { print $2 }') GiB; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- OS: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "- ddptrain: $(./ddptrain --version | head -n 1)$(git -C "$src" rev-parse --short HEAD >/dev/null 2>&1 && echo " at commit $(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet HEAD 2>/dev/null || echo ' plus local changes')")"
  ./ddptrain --version | sed -n 's/^ *\(MPI\|HDF5\|BLAS\) *: */- \1: /p'
  echo "- PyTorch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed') (/usr/bin/python3, gloo)"
  echo "- compiler: $(ver "$(./ddptrain --version | sed -n 's/^ *compiler *: *//p')" --version)"
} >"$tmp/md"

t1="ddptrain at np=1, np=2 and np=2 with \`--no-sync\` (no gradient all-reduce; SyncBatchNorm still on), PyTorch DDP (gloo, ranks started by hand) at np=1 and np=2, the same model, batch 64 per rank, one thread per rank, and the gradient all-reduce alone, alternating in every round; medians. exposed = step(np=2) - step(np=2, --no-sync); overlap = 1 - exposed / all-reduce alone; efficiency = step(np=1) / step(np=2)."
wanted mlp && section "MLP 784-1024-1024-10 + BN, np=1 and np=2" "$t1" \
  sh "$src/bench/bench_ddp.sh" --case mlp "$rounds" "$steps"
wanted cnn && section "CNN (Fashion-MNIST shape), np=1 and np=2" "$t1 The model: conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,linear:128,relu,linear:10 on 1x28x28 uint8 images." \
  sh "$src/bench/bench_ddp.sh" --case cnn "$rounds" "$cnn_steps"
wanted resnet18 && section "ResNet-18, synthetic 3x64x64 images, np=1 and np=2" "The synthetic-image benchmark of the data-parallel papers: --model resnet18 (torchvision's ResNet-18, 10 classes) on a generated uint8 2048 x 3x64x64 deck, batch 16 per rank, one thread per rank: ddptrain at np=1, np=2, np=2 --no-sync and --no-sync-bn, PyTorch (the same module, tests/tools/resnets.py) and PyTorch DDP (gloo) at np=1 and np=2, and the gradient all-reduce alone, alternating in every round; medians; samples/s are images/s." \
  sh "$src/bench/bench_ddp.sh" --case resnet18 "$rounds" "$rn_steps"
wanted resnet50 && section "ResNet-50, synthetic 3x112x112 images, np=1 and np=2" "As ResNet-18, with --model resnet50 on 3x112x112 images, batch 8 per rank." \
  sh "$src/bench/bench_ddp.sh" --case resnet50 "$rounds" "$rn_steps"
if wanted cnn-ops; then
  section "CNN: where the step goes" "bench_cnn: the CNN's training step through the CPU ops table, one thread, batch 64, each op timed per step (convolutions split into their phases) next to cblas_sgemm alone on the op's GEMM shapes, in alternating blocks of 10 steps. A Winograd convolution (3x3 pad 1, 16+ channels) counts its direct multiply-adds, so it can show more than the sgemm rate." \
    ./bench/bench_cnn -n "$cnn_steps"
  awk '/training step \(median\)/ { print $4 }' "$tmp/out" >"$tmp/x"; csv_rows cnn ddptrain-cpu-ops-alone 1 step_ms "$tmp/x" ms
  awk '/cblas_sgemm alone/ { print $5 }' "$tmp/out" >"$tmp/x"; csv_rows cnn cblas-sgemm-alone 1 step_ms "$tmp/x" ms
fi
wanted mlp-1-rank && section "MLP on one rank against sgemm" "The whole trainer on one rank next to the CPU ops alone (bench_kernels), the raw cblas_sgemm rate of the step's GEMMs and PyTorch (one thread), alternating; medians. GFLOP/s count the forward and weight-gradient GEMMs of all layers and the input-gradient GEMMs of layers 2 and 3." \
  sh "$src/bench/bench_train.sh" "$rounds" "$steps"
wanted accum && section "Gradient accumulation 4 against 1" "Gradient bytes each rank all-reduces per training sample, --accum 1 and 4 over the same samples at np=2, against 4 x parameters / (64 x accum)." \
  sh "$src/bench/bench_accum.sh" "$rounds" "$accum_samples"
wanted zero && section "ZeRO stages 0, 1 and 2" "bench_zero.sh: --zero 0, 1 and 2 at np=1, 2 and 4 (np=4 oversubscribed on 2 cores) on an MLP with AdamW, batch 32 per rank: per-rank memory (the start-up table's plan and the measured PSS), the optimizer state and gradient shards against 1/N of the whole, the step time of each stage against stage 0, on one node and on two simulated nodes (network namespaces; skipped with the reason when not root), and the plan of --device cuda on the emulated GPUs." \
  sh "$src/bench/bench_zero.sh" $q --rounds "$rounds"
# --quick: the MLP on 2 nodes x 1 rank at two link rates (about 15 s)
wanted cluster && section "Simulated nodes: layouts and link rates" "bench_cluster.sh: the MLP 784-1024-1024-10 + BN and the Fashion-MNIST CNN, batch 64 per rank, on simulated nodes (network namespaces on a bridge, tests/simnodes.sh; each node's link limited both ways with tc tbf), layouts nodes x ranks per node at several link rates: the step, the --no-sync step, exposed communication, the ideal all-reduce time at the link rate (2(N-1)/N x the gradient through each node's link), weak-scaling efficiency against 1 rank, and the bytes per node per step on the link against that ideal. All nodes share this machine's cores (4 ranks on 2 cores are oversubscribed). Skipped with the reason when not root." \
  sh "$src/bench/bench_cluster.sh" $q --rounds "$rounds"
if wanted allreduce; then
  section "All-reduce bus bandwidth, shared memory" "bench_allreduce at np=2 on a buffer from comm_mem_alloc (the shared-memory path on one node), alternating with MPI_Allreduce on the same buffer; median of the rounds; busbw = algbw x 2(n-1)/n." \
    bench_mpirun -np 2 ./bench/bench_allreduce --min 64K --max 64M --reps "$((rounds * 2 + 1))"
  awk '!/^#/ && NF > 10 { printf "%s %s %s\n", $1, $7, $13 }' "$tmp/out" >"$tmp/ar"
  section "All-reduce bus bandwidth, ring" "The same on private buffers: the ring, the path across nodes." \
    bench_mpirun -np 2 ./bench/bench_allreduce --mem private --min 64K --max 64M --reps "$((rounds * 2 + 1))"
  awk '!/^#/ && NF > 10 { printf "%s %s\n", $1, $7 }' "$tmp/out" >"$tmp/ar2"
  while read -r b shm mpi; do
    csv_value "allreduce-${b}B" ddptrain-shared-memory 2 busbw_gb_per_s "$shm" GB/s
    csv_value "allreduce-${b}B" mpi-allreduce 2 busbw_gb_per_s "$mpi" GB/s
  done <"$tmp/ar"
  while read -r b ring; do csv_value "allreduce-${b}B" ddptrain-ring 2 busbw_gb_per_s "$ring" GB/s; done <"$tmp/ar2"
fi
# --quick: 2 nodes x 1 rank, unlimited link, 1-2 MB (seconds)
wanted allreduce-nodes && section "All-reduce across simulated nodes against Open MPI's tuned and han" "bench_nodes_allreduce.sh: bench_allreduce --algo auto,ring on a comm_mem_alloc'd buffer (auto = the hierarchical all-reduce across nodes) on simulated nodes (tests/simnodes.sh), layouts 2x1 and 2x2 at an unlimited and a 10 Gbit/s link, 1-64 MB, 5 timed all-reduces a repetition, against MPI_Allreduce in the same processes: one job per round under Open MPI's default coll tuned and one under coll han (coll_han_priority 100), alternating; medians; ratio = ddptrain's best busbw / MPI's best. 4 ranks on 2 cores are oversubscribed (Open MPI's all-reduces then take seconds each, so 4x1 is left out here). Skipped with the reason when not root." \
  sh "$src/bench/bench_nodes_allreduce.sh" $q --rounds "$rounds" --layouts "2x1 2x2" --iters 5
wanted loader && section "Loader against raw reads" "bench_loader.sh: the loader's samples/s against a raw pread of the same bytes (hot page cache), and its peak RSS as N grows 10x." \
  env BATCHES=64 REPS="$((rounds + 2))" sh "$src/bench/bench_loader.sh"
if wanted checkpoint; then
  section "Checkpoint writes against dd + fsync" "bench_ckpt.sh: rank 0 writing AdamW checkpoints (build in memory, write, fsync, rename) against dd conv=fsync of the same bytes into the same directory." \
    sh "$src/bench/bench_ckpt.sh" $q "$rounds"
fi
if wanted fashion && [ "$fashion_rounds" -gt 0 ]; then
  if [ -r "$fm/train-images-idx3-ubyte.gz" ]; then
    for c in mlp cnn resnet20; do
      section "Fashion-MNIST time to accuracy, $c" "The $c recipe of docs/usage.md (\"Examples\") at np=2, ddptrain against PyTorch DDP (bench/torch_fashion.py, the same model and recipe), alternating; seconds from the launch (start-up and reading the deck included) to the first evaluation at or above the target." \
        sh "$src/bench/bench_fashion.sh" --case "$c" "$fashion_rounds"
    done
  else
    printf '\n## Fashion-MNIST\n\nNot run: no %s (apt-get install dataset-fashion-mnist).\n' "$fm" >>"$tmp/md"
  fi
fi
if wanted gpu-model; then
  # the CPU emulation (builds without CUDA) models the full-size step in a
  # second (DDP_EMU_DRY=1: no kernel runs); a CUDA build needs a GPU for it
  if [ -x ./bench/bench_gpu ] && env -u BENCH_CSV DDP_EMU_DRY=1 ./bench/bench_gpu --model --quick >"$tmp/probe" 2>&1; then
    section "GPU step model: the benchmark MLP on an H200" "bench_gpu --model: one training step of the MLP 8192-8192-8192-8192-8192 (batch 4096, cross-entropy, AdamW) through the cuda compute ops table with the backend's cost log on, and its model on an H200 (src/compute/gpu_model.h): each launch's declared bytes and FLOPs (held to the pages really touched by the emulation's cost check, DDP_EMU_COST_CHECK, in make check) at the HBM bandwidth and the units' peak, at the grid's share of the 132 SMs, summed. A model, not a measurement; tests/gpu/run-all measures the step on a GPU beside it." \
      env DDP_EMU_DRY=1 ./bench/bench_gpu --model
    if [ -x ./tests/doubles/train_emu ] || ./ddptrain --version | grep -q 'compute backends.*cuda'; then
    section "GPU step model: the CNN and the ResNets on an H200" "bench_gpu_model.sh: the trainer's real step (3 steps, DDP_CUDA_MODEL=1 prints the model of the last complete one) for the Fashion-MNIST CNN at batch 1024, ResNet-18 on 3x64x64 images at batch 256 and ResNet-50 on 3x112x112 at batch 128, in bf16 and fp32, on the CPU emulation with DDP_EMU_DRY=1: the modeled step next to its GEMMs alone, and the modeled images/s. A model, not a measurement." \
      sh "$src/bench/bench_gpu_model.sh" $q
    else
      printf '\n## GPU step model: the CNN and the ResNets\n\nNot run: tests/doubles/train_emu is not built (make bench builds it).\n' >>"$tmp/md"
    fi
  else
    printf '\n## GPU step model\n\nNot run: %s\n' "$(tail -n 1 "$tmp/probe" 2>/dev/null || echo 'bench/bench_gpu is not built')" >>"$tmp/md"
  fi
fi

# the headline ratios against the targets, from the CSV
{
  printf '\n## Summary\n\n'
  awk -F, 'function head() { if (!h++) printf "| case | quantity | median | min | max | target |\n|---|---|---:|---:|---:|---|\n" }
    $4 ~ /^(speedup_over_pytorch|weak_scaling_efficiency|ddp_step_over_no_comm_step|final_val_acc)$/ && $1 !~ /^cluster-/ || $4 ~ /^time_to_/ { head() }
    $1 ~ /^zero-stage[12]$/ && $3 > 1 && $4 ~ /^(step_over_stage0|optimizer_state_times_n_over_full|grads_over_shard_plus_bucket|measured_saving_over_plan)$/ { head() }
    END { if (!h) print "No case of this run has a headline ratio (see the sections below)." }
    $2 == "ddptrain" && $4 == "speedup_over_pytorch" { t = ($3 == 1) ? ">= 1.3x" : ">= 2.5x"
      if ($1 ~ /^resnet/) t = ($3 == 1) ? ">= 1.5x" : ">= 2x"
      printf "| %s | ddptrain / PyTorch samples/s, np=%s | %.2fx | %.2fx | %.2fx | %s |\n", $1, $3, $6, $5, $7, t }
    $2 == "ddptrain-no-sync-bn" && $4 == "speedup_over_pytorch" {
      printf "| %s | ddptrain --no-sync-bn / PyTorch samples/s, np=%s (both per-rank BatchNorm) | %.2fx | %.2fx | %.2fx | |\n", $1, $3, $6, $5, $7 }
    $4 == "weak_scaling_efficiency" && $1 !~ /^cluster-/ { printf "| %s | %s weak-scaling efficiency np=2 | %.0f%% | %.0f%% | %.0f%% | %s |\n", $1, $2, 100 * $6, 100 * $5, 100 * $7, $2 == "ddptrain" ? ">= 85%" : "" }
    $2 == "ddptrain" && $4 == "ddp_step_over_no_comm_step" { printf "| %s | DDP step / no-communication step | %.3f | %.3f | %.3f | <= 1.15 |\n", $1, $6, $5, $7 }
    $4 ~ /^time_to_/ { printf "| %s | %s, seconds to %s | %.1f | %.1f | %.1f | ddptrain faster |\n", $1, $2, substr($4, 9, length($4) - 10), $6, $5, $7 }
    $4 == "final_val_acc" { printf "| %s | %s, final test accuracy | %.4f | %.4f | %.4f | %s |\n", $1, $2, $6, $5, $7, $1 == "fashion-resnet20" && $2 == "ddptrain" ? ">= 0.935" : "" }
    $2 == "model-h200" && $4 == "step_ms" { ms[$1] = $6 }
    $2 == "model-h200-gemms" && $4 == "step_ms" && ($1 in ms) { head(); printf "| %s | H200 model: step / its GEMMs alone | %.3f | | | %s |\n", $1, ms[$1] / $6, $1 == "gpu-mlp-bf16" ? "<= 1.25" : $1 == "gpu-cnn-bf16" ? "<= 1.5" : "" }
    $1 == "zero-stage1" && $3 > 1 && $4 == "step_over_stage0" { printf "| %s | step / stage-0 step, np=%s, %s | %.3f | %.3f | %.3f | %s |\n", $1, $3, $2 == "ddptrain" ? "one node" : "two simulated nodes", $6, $5, $7, $2 == "ddptrain" ? "<= 1.05" : "" }
    $1 == "zero-stage1" && $3 > 1 && $4 == "optimizer_state_times_n_over_full" { printf "| %s | optimizer state per rank x N / whole state, np=%s (plan) | %.4f | %.4f | %.4f | 1 +- 5%% |\n", $1, $3, $6, $5, $7 }
    $1 == "zero-stage2" && $3 > 1 && $4 == "grads_over_shard_plus_bucket" { printf "| %s | gradient memory / (G/N + one bucket), np=%s (plan; stage 2 keeps 2 slots) | %.3f | %.3f | %.3f | <= 1.05 |\n", $1, $3, $6, $5, $7 }
    $1 ~ /^zero-stage[12]$/ && $3 > 1 && $4 == "measured_saving_over_plan" { printf "| %s | memory saved against stage 0, measured (PSS anon+shmem) / planned, np=%s | %.2f | %.2f | %.2f | |\n", $1, $3, $6, $5, $7 }' "$tmp/csv"
} >"$tmp/summary"
# the summary goes right after the header
awk -v s="$tmp/summary" 'NR > 1 && /^## / && !done { while ((getline l < s) > 0) print l; print ""; done = 1 } { print }
  END { if (!done) while ((getline l < s) > 0) print l }' "$tmp/md" >"$tmp/md2"
# the earlier studies, unchanged, after this run's numbers
[ -r "$src/bench/findings.md" ] && { echo; sed '1s/^# bench\/findings.md -- /# Earlier studies: /; s/^### /#### /; s/^## /### /; s/^# /## /' "$src/bench/findings.md"; } >>"$tmp/md2"
{ echo "case,implementation,ranks,metric,min,median,max,unit"; cat "$tmp/csv"; } >"$tmp/csv2"
mv "$tmp/md2" "$md"
mv "$tmp/csv2" "$csv"
echo "suite: wrote $md and $csv" >&2
