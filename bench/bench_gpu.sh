#!/bin/sh
# bench_gpu.sh -- the GPU benchmark: a large MLP's training step on one GPU
# in bf16 and fp32, three views of it next to each other in the same run:
#   1. bench_gpu: the step through the cuda compute ops table, against the
#      GPU's dense peak and against cuBLAS alone on the same GEMMs;
#   2. ddptrain --device cuda end to end (loader, uploads, the trainer) on a
#      generated deck of the model's input width, --metrics for samples/s;
#   3. PyTorch (bench/torch_gpu_mlp.py): the same model, batch and AdamW.
# Before them, 0. the model of the step on an H200 (bench_gpu --model,
# src/compute/gpu_model.h) from the backend's declared costs: on the CPU
# emulation too, where DDP_EMU_DRY=1 runs none of the kernels, so the
# full-size step's model takes a second.  The summary puts the model's
# step and its GEMMs alone beside the measured rows.
# FLOPs: bench_gpu's count (the GEMMs as performed; its header line says how).
#
#   sh bench/bench_gpu.sh [--quick] [--width W] [--layers L] [--batch B]
#
# From a CUDA build directory (./bench/bench_gpu, ./ddptrain, ./ddptrain-prep),
# or with BENCH_GPU, DDPTRAIN, DDPPREP (commands) and PYTHON set
# (tests/gpu/run-all runs it so from the bundle).  --quick: width 64,
# batch 32 (a check that everything runs; on the CPU emulation the
# end-to-end and PyTorch views are skipped with a line).  BENCH_CSV=FILE
# appends results.csv rows.  Exit 1 when a view that can run fails.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
quick="" width=8192 layers=4 batch=4096 steps=30
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=--quick width=64 batch=32 steps=10 ;;
    --width) width=${2:?--width W}; shift ;;
    --layers) layers=${2:?--layers L}; shift ;;
    --batch) batch=${2:?--batch B}; shift ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_gpu.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
BENCH_GPU=${BENCH_GPU:-./bench/bench_gpu} DDPTRAIN=${DDPTRAIN:-./ddptrain} DDPPREP=${DDPPREP:-./ddptrain-prep}
PYTHON=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
sizes="--width $width --in $width --out $width --layers $layers --batch $batch"

echo "== 0. the model of the step on an H200 (bench_gpu --model)"
# shellcheck disable=SC2086
DDP_EMU_DRY=1 $BENCH_GPU --model $sizes >"$tmp/model.out" 2>&1 || rc=1
cat "$tmp/model.out"
# the model's lines: PREC STEP_MS GEMMS_MS
awk '/^# model of the [a-z0-9]+ training step/ { p = $5 }
     /^# modeled step: / { s[p] = $4 } /^# modeled GEMMs alone: / { g[p] = $5 }
     END { for (p in s) print p, s[p], g[p] }' "$tmp/model.out" >"$tmp/model.rows"
[ -s "$tmp/model.rows" ] || { echo "bench_gpu --model printed no modeled step"; rc=1; }

echo
echo "== 1. bench_gpu: the step through the ops table and cuBLAS alone"
# shellcheck disable=SC2086
$BENCH_GPU $quick $sizes >"$tmp/b.out" 2>&1 || rc=1
cat "$tmp/b.out"
flops=$(sed -n 's/^# FLOPs per step: \([0-9.e+]*\) GFLOP.*/\1/p' "$tmp/b.out")
peak_bf16=$(sed -n 's/^# peaks: bf16 \([0-9.]*\) TFLOP.*/\1/p' "$tmp/b.out")
peak_fp32=$(sed -n 's/^# peaks: .*, fp32 \([0-9.]*\) TFLOP.*/\1/p' "$tmp/b.out")
# the medians of the table: PREC WHAT -> ms/step
row_ms() { awk -v p="$1" -v w="$2" '$1 == p && index($0, w) { for (i = 3; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }' "$tmp/b.out"; }

echo
echo "== 2. ddptrain --device cuda end to end"
e2e=0
if ! $DDPTRAIN --version 2>/dev/null | grep -q 'compute backends.*cuda'; then
  echo "skipped: this ddptrain has no cuda compute backend (ddptrain --version; a build without CUDA has none)"
elif [ -z "$flops" ]; then
  echo "skipped: bench_gpu gave no FLOP count"
else
  model=$(i=1; while [ $i -lt "$layers" ]; do printf 'linear:%s,relu,' "$width"; i=$((i + 1)); done; echo "linear:auto")
  samples=$((batch * 2))
  $DDPPREP synthetic --classes "$width" --features "$width" --samples "$samples" --seed 1 -o "$tmp/deck.h5" \
    >"$tmp/prep.out" 2>&1 || { cat "$tmp/prep.out"; echo "ddptrain-prep synthetic failed"; rc=1; }
  for prec in bf16 fp32; do
    [ -s "$tmp/deck.h5" ] || break
    # shellcheck disable=SC2086
    $DDPTRAIN "$tmp/deck.h5" --device cuda --precision "$prec" --model "$model" --batch "$batch" \
      --optimizer adamw --lr 1e-4 --weight-decay 0.01 --steps "$steps" --log-every 5 --eval-every 0 \
      --metrics "$tmp/m-$prec.jsonl" >"$tmp/t-$prec.out" 2>&1 || { tail -n 20 "$tmp/t-$prec.out"; echo "ddptrain --precision $prec failed"; rc=1; continue; }
    # samples/s of the step records after the first (warm-up) window
    sed -n 's/^{"type":"step".*"samples_per_s":\([0-9.e+-]*\).*/\1/p' "$tmp/m-$prec.jsonl" | sed 1d >"$tmp/sps-$prec"
    [ -s "$tmp/sps-$prec" ] || { cat "$tmp/m-$prec.jsonl"; echo "no step records in --metrics"; rc=1; continue; }
    sps=$(med <"$tmp/sps-$prec")
    awk -v s="$sps" -v f="$flops" -v b="$batch" -v p="$prec" -v pk="$( [ "$prec" = bf16 ] && echo "$peak_bf16" || echo "$peak_fp32")" \
      'BEGIN { tf = f * 1e9 / b * s / 1e12; printf "ddptrain %s: %.0f samples/s (median of the step records after the first), %.2f TFLOP/s, %.1f%% of peak\n", p, s, tf, 100 * tf / pk }'
    grep '^done:' "$tmp/t-$prec.out" || true
    scale_each "$tmp/sps-$prec" "v" >"$tmp/x"; csv_rows "gpu-mlp-$prec" ddptrain-end-to-end 1 samples_per_s "$tmp/x" samples/s
    scale_each "$tmp/sps-$prec" "v * $flops * 1e9 / $batch / 1e12" >"$tmp/x"; csv_rows "gpu-mlp-$prec" ddptrain-end-to-end 1 tflops "$tmp/x" TFLOP/s
    eval "e2e_$prec=\$sps"
    e2e=1
  done
fi

echo
echo "== 3. PyTorch: the same MLP, batch and AdamW"
trc=0
# shellcheck disable=SC2086
$PYTHON "$src/bench/torch_gpu_mlp.py" $sizes >"$tmp/torch.out" 2>&1 || trc=$?
cat "$tmp/torch.out"
if [ $trc -eq 77 ]; then echo "skipped (no PyTorch with a GPU)"
elif [ $trc -ne 0 ]; then echo "torch_gpu_mlp.py failed (exit $trc)"; rc=1
else
  for prec in bf16 fp32; do
    ms=$(sed -n "s/^torch precision=$prec step_ms=\([0-9.]*\).*/\1/p" "$tmp/torch.out")
    [ -n "$ms" ] || continue
    csv_value "gpu-mlp-$prec" pytorch 1 step_ms "$ms" ms
    csv_value "gpu-mlp-$prec" pytorch 1 samples_per_s "$(awk -v m="$ms" -v b="$batch" 'BEGIN { print b / (m * 1e-3) }')" samples/s
    csv_value "gpu-mlp-$prec" pytorch 1 tflops "$(sed -n "s/^torch precision=$prec .*tflops=\([0-9.]*\).*/\1/p" "$tmp/torch.out")" TFLOP/s
  done
fi

echo
echo "== summary (medians; the same FLOP count for every row)"
printf '%-5s %-28s %10s %12s %9s %8s\n' prec implementation ms/step samples/s TFLOP/s "of peak"
for prec in bf16 fp32; do
  pk=$peak_fp32; [ "$prec" = bf16 ] && pk=$peak_bf16
  for what in "training step:ops table (bench_gpu)" "cuBLAS GEMMs alone:cuBLAS alone"; do
    ms=$(row_ms "$prec" "${what%%:*}")
    [ -n "$ms" ] && [ -n "$flops" ] && awk -v p="$prec" -v n="${what#*:}" -v m="$ms" -v f="$flops" -v b="$batch" -v pk="$pk" \
      'BEGIN { tf = f / m; printf "%-5s %-28s %10.3f %12.0f %9.2f %7.1f%%\n", p, n, m, b / (m * 1e-3), tf, 100 * tf / pk }'
  done
  awk -v p="$prec" -v f="$flops" -v b="$batch" -v pk="$pk" '$1 == p && f != "" {
      printf "%-5s %-28s %10.3f %12.0f %9.2f %7.1f%%\n", p, "H200 model: step", $2, b / ($2 * 1e-3), f / $2, 100 * f / $2 / pk
      printf "%-5s %-28s %10.3f %12.0f %9.2f %7.1f%%\n", p, "H200 model: GEMMs alone", $3, b / ($3 * 1e-3), f / $3, 100 * f / $3 / pk }' "$tmp/model.rows"
  eval "s=\${e2e_$prec:-}"
  [ -n "$s" ] && awk -v p="$prec" -v s="$s" -v f="$flops" -v b="$batch" -v pk="$pk" \
    'BEGIN { m = b / s * 1e3; tf = f / m; printf "%-5s %-28s %10.3f %12.0f %9.2f %7.1f%%\n", p, "ddptrain end to end", m, s, tf, 100 * tf / pk }'
  ms=$(sed -n "s/^torch precision=$prec step_ms=\([0-9.]*\).*/\1/p" "$tmp/torch.out")
  [ -n "$ms" ] && [ -n "$flops" ] && awk -v p="$prec" -v m="$ms" -v f="$flops" -v b="$batch" -v pk="$pk" \
    'BEGIN { tf = f / m; printf "%-5s %-28s %10.3f %12.0f %9.2f %7.1f%%\n", p, "PyTorch", m, b / (m * 1e-3), tf, 100 * tf / pk }'
done
grep -h 'target:' "$tmp/model.out" "$tmp/b.out" | awk '!seen[$0]++' || true
exit $rc
