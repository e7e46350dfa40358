#!/bin/sh
# bench_train.sh -- single-rank training throughput: ddptrain (the whole
# trainer: HDF5 input through the loader thread, forward, backward, optimizer)
# on the MLP 784-1024-1024-10 with BatchNorm, batch 64, one BLAS thread, next
# to PyTorch on the same model and batch (one thread) measured in the same run,
# in alternating rounds; and the GFLOP/s of the step next to the raw
# cblas_sgemm rate of the step's GEMMs (bench_kernels, same run).
#
# From a configured build directory:
#   make -C bench bench && sh /path/to/ddptrain/bench/bench_train.sh [ROUNDS] [STEPS]
# With BENCH_CSV=FILE the numbers are also appended to FILE (bench/lib.sh).
set -eu
rounds=${1:-3}
steps=${2:-400}
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
[ -x ./ddptrain ] && [ -x ./bench/bench_kernels ] || {
  echo "run from a build directory after 'make && make -C bench bench'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
./ddptrain-prep synthetic --classes 10 --features 784 --samples 60000 --seed 1 -o "$tmp/mlp.h5" >/dev/null
model="--model linear:1024,bn,relu,linear:1024,bn,relu,linear:10 --batch 64 --log-every 0 --eval-every 0"
# FLOPs of one step: forward and weight gradients of all three layers, input
# gradients of layers 2 and 3 (the first layer's input needs none)
flop=$(awk 'BEGIN { b = 64; w = 784*1024 + 1024*1024 + 1024*10; printf "%.0f", 2*b*(2*w) + 2*b*(1024*1024 + 1024*10) }')

: >"$tmp/ddp"; : >"$tmp/torch"; : >"$tmp/kstep"; : >"$tmp/gemm"
for r in $(seq "$rounds"); do
  ./ddptrain "$tmp/mlp.h5" $model --steps "$steps" >"$tmp/o" 2>&1
  grep -o 'step_ms_p50=[0-9.]*' "$tmp/o" | cut -d= -f2 >>"$tmp/ddp"
  /usr/bin/python3 "$src/bench/torch_mlp.py" -n "$steps" >"$tmp/o" 2>&1
  awk '/pytorch training step/ { print $4 }' "$tmp/o" >>"$tmp/torch"
  ./bench/bench_kernels -n "$steps" >"$tmp/o" 2>&1
  awk '/training step \(all ops\)/ { print $5 }' "$tmp/o" >>"$tmp/kstep"
  awk '/cblas_sgemm alone/ { print $5 }' "$tmp/o" >>"$tmp/gemm"
done
d=$(med <"$tmp/ddp"); t=$(med <"$tmp/torch"); k=$(med <"$tmp/kstep"); g=$(med <"$tmp/gemm")
printf '# bench_train: MLP 784-1024-1024-10 + BN, batch 64, SGD momentum, 1 thread; medians of %s rounds of %s steps\n' "$rounds" "$steps"
printf '%-44s %10s %12s %10s\n' "" "step (ms)" "samples/s" "GFLOP/s"
row() { awk -v n="$1" -v ms="$2" -v f="$flop" 'BEGIN { printf "%-44s %10.3f %12.0f %10.1f\n", n, ms, 64000 / ms, f / ms / 1e6 }'; }
row "ddptrain, 1 rank (whole trainer, HDF5 input)" "$d"
row "CPU ops alone (bench_kernels)" "$k"
row "cblas_sgemm alone, the step's GEMMs" "$g"
row "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), 1 thread" "$t"
awk -v d="$d" -v t="$t" -v g="$g" 'BEGIN {
  printf "ddptrain / PyTorch samples/s: %.2fx (target >= 1.3x)\n", t / d;
  printf "ddptrain GFLOP/s / sgemm GFLOP/s: %.0f%%\n", 100 * g / d }'
for k in ddp:ddptrain kstep:cpu-ops-alone gemm:cblas-sgemm-alone torch:pytorch; do
  scale_each "$tmp/${k%%:*}" "$flop / v / 1e6" >"$tmp/gf"
  csv_rows mlp-1-rank "${k#*:}" 1 gflops "$tmp/gf" GFLOP/s
  csv_rows mlp-1-rank "${k#*:}" 1 step_ms "$tmp/${k%%:*}" ms
done
