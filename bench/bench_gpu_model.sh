#!/bin/sh
# bench_gpu_model.sh -- the modeled H200 step (src/compute/gpu_model.h) of
# the trainer's real step for the models people train on GPUs: the
# Fashion-MNIST CNN, ResNet-18 on 3x64x64 and ResNet-50 on 3x112x112 images
# (the synthetic-image benchmark of the data-parallel papers), in bf16 and
# fp32, at batches that fill an H200.  Each runs 3 steps of the trainer on
# the cuda backend with DDP_CUDA_MODEL=1, which prints the model of the last
# complete step; the table puts the modeled step, its GEMMs alone, their
# ratio and the modeled images/s side by side.  A model, not a measurement.
#
#   sh bench/bench_gpu_model.sh [--quick]
#
# From a build directory.  Builds without CUDA run the trainer on the CPU
# emulation (tests/doubles/train_emu; `make bench` builds it) with
# DDP_EMU_DRY=1: no kernel runs, so each model takes seconds; a CUDA build
# runs ./ddptrain --device cuda, which needs a GPU (skipped without one).
# --quick: the batches divided by 8.  BENCH_CSV=FILE appends results.csv
# rows (case gpu-<model>-<precision>).  Exit 1 when a run fails.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
div=1
case ${1:-} in
  --quick) div=8 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "bench_gpu_model.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
if [ -x ./tests/doubles/train_emu ]; then
  trainer=./tests/doubles/train_emu
  export DDP_EMU_DRY=1 DDP_EMU_GPU_MEM_MB=143000
elif ./ddptrain --version 2>/dev/null | grep -q 'compute backends.*cuda'; then
  trainer=./ddptrain
else
  echo "bench_gpu_model.sh: no trainer on the cuda backend here (tests/doubles/train_emu: make -C tests doubles/train_emu)" >&2
  exit 2
fi
[ -x ./bench/bench_loader ] || { echo "bench_gpu_model.sh: bench/bench_loader is not built (make -C bench bench)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
printf '%-9s %-5s %6s %10s %12s %8s %12s %7s\n' model prec batch "step ms" "GEMMs ms" "step/GEMM" "images/s" "MFU"
# NAME SPEC C H W BATCH
for m in "cnn conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,linear:128,relu,linear:10 1 28 28 1024" \
         "resnet18 resnet18 3 64 64 256" "resnet50 resnet50 3 112 112 128"; do
  set -- $m
  name=$1 spec=$2 c=$3 h=$4 w=$5 batch=$(($6 / div))
  ./bench/bench_loader gen "$tmp/$name.h5" "$batch" "$c" "$h" "$w" >/dev/null
  for prec in bf16 fp32; do
    if ! DDP_CUDA_MODEL=1 "$trainer" "$tmp/$name.h5" --device cuda --model "$spec" --batch "$batch" \
        --precision "$prec" --steps 3 --eval-every 0 --log-every 0 >"$tmp/out" 2>&1; then
      tail -n 5 "$tmp/out"
      if grep -q "no GPU" "$tmp/out"; then echo "skipped: no GPU"; exit 0; fi
      rc=1; continue
    fi
    grep -q "^# modeled step: " "$tmp/out" || { tail -n 5 "$tmp/out"; echo "$name $prec: no model printed"; rc=1; continue; }
    awk -v n="$name" -v p="$prec" -v b="$batch" '
      /^# modeled step: / { s = $4; mfu = $(NF - 3) }
      /^# modeled GEMMs alone: / { g = $5 }
      END { printf "%-9s %-5s %6d %10.3f %12.3f %8.2fx %12.0f %7s\n", n, p, b, s, g, s / g, b / (s * 1e-3), mfu }' "$tmp/out"
    step=$(sed -n 's/^# modeled step: \([0-9.]*\) ms.*/\1/p' "$tmp/out")
    gemm=$(sed -n 's/^# modeled GEMMs alone: \([0-9.]*\) ms.*/\1/p' "$tmp/out")
    csv_value "gpu-$name-$prec" model-h200 1 step_ms "$step" ms
    csv_value "gpu-$name-$prec" model-h200-gemms 1 step_ms "$gemm" ms
    cp "$tmp/out" "$tmp/$name-$prec.model"
  done
done
echo
echo "# the per-kernel tables of the bf16 steps:"
for name in cnn resnet18 resnet50; do
  [ -r "$tmp/$name-bf16.model" ] && { echo "## $name"; sed -n '/^# model of /,/^# modeled GEMMs/p' "$tmp/$name-bf16.model"; }
done
exit $rc
