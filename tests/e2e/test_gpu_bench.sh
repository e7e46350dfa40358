#!/bin/sh
# test_gpu_bench.sh -- the GPU benchmark (bench/bench_gpu, bench_gpu.sh) runs
# and counts right, on the CPU emulation of CUDA in builds without CUDA (in
# CUDA builds it needs a GPU: skipped without one).  Speed is not asserted.
#   - bench_gpu --quick and at a second size: exit 0, the table's rows for
#     both precisions (training step, cuBLAS GEMMs alone) and a finite loss
#     that falls on the fixed batch;
#   - the FLOP count: the header's GFLOP per step is 2*B*(in*out summed over
#     the layers, the first counted twice, the others three times), the
#     CSV's TFLOP/s x ms/step is that count, of-peak is TFLOP/s over the
#     stated peak, and the parameter count is that of the MLP;
#   - the CSV rows: bench/results.csv's 8 columns, min <= median <= max;
#   - the H200 model of the full-size step (bench_gpu --model; DDP_EMU_DRY=1
#     runs no kernel) against the formula of src/compute/gpu_model.h worked out
#     here: its GEMMs alone at 70% of the units' peak from the header's FLOP
#     count, AdamW's 28 bytes a parameter (30 under bf16: the weights' bf16
#     copy) at 90% of 4.8 TB/s, the step the
#     sum of its rows, every launch declared, the bf16 target line;
#   - bench_gpu.sh --quick runs all its views (or says which it skipped);
#   - bad arguments: exit 2 with a usage line.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
BG="$top_builddir/bench/bench_gpu"
if [ ! -x "$BG" ]; then
  make -s -C "$top_builddir/bench" bench_gpu >"$T/make.log" 2>&1 || { cat "$T/make.log"; fail "make -C bench bench_gpu"; }
fi
case " $DDP_COMPUTE_BACKENDS " in
  *" cuda "*) command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 ||
    { echo "test_gpu_bench.sh: skipped: a CUDA build and no GPU" >&2; exit 77; } ;;
esac

# check NAME W IN OUT L B ARGS...: one run and its accounting
check() {
  name=$1 w=$2 in=$3 out=$4 l=$5 b=$6; shift 6
  rm -f "$T/$name.csv"
  "$BG" "$@" --csv "$T/$name.csv" >"$T/$name.out" 2>&1 || { cat "$T/$name.out"; fail "$name: bench_gpu $* failed"; }
  want=$(awk -v w="$w" -v in_="$in" -v o="$out" -v l="$l" -v b="$b" 'BEGIN {
    f = 0; p = 0
    for (k = 0; k < l; k++) { a = (k == 0) ? in_ : w; c = (k == l - 1) ? o : w
      f += 2 * b * a * c * (k == 0 ? 2 : 3); p += a * c + c }
    printf "%.6g %d\n", f / 1e9, p }')
  gf=${want% *} params=${want#* }
  got=$(sed -n 's/^# FLOPs per step: \([0-9.e+-]*\) GFLOP.*/\1/p' "$T/$name.out")
  awk -v g="$got" -v w="$gf" 'BEGIN { exit !(g > 0.9999 * w && g < 1.0001 * w) }' ||
    { cat "$T/$name.out"; fail "$name: $got GFLOP per step, expected $gf"; }
  grep -q "($l linear layers, ReLU, $params parameters), batch $b," "$T/$name.out" ||
    { head -n 1 "$T/$name.out"; fail "$name: the header does not say $params parameters, batch $b"; }
  for p in bf16 fp32; do
    for r in "training step" "cuBLAS GEMMs alone"; do
      grep -q "^$p  *$r  *[0-9.]* *[0-9]* *[0-9.]* *[0-9.]*% *[0-9.]*%$" "$T/$name.out" ||
        { cat "$T/$name.out"; fail "$name: no '$p $r' row"; }
    done
    # "bf16   loss on the fixed batch: F at the first step, L at the last"
    awk -v p="$p" '$1 == p && $2 == "loss" { f = $7 + 0; l = $12 + 0
        ok = ($7 ~ /^[0-9.]+$/ && l < f && $0 !~ /NOT FINITE/) } END { exit !ok }' "$T/$name.out" ||
      { grep "loss" "$T/$name.out"; fail "$name: $p loss not finite or not falling on the fixed batch"; }
  done
  [ -s "$T/$name.csv" ] || fail "$name: no CSV rows"
  awk -F, '(NF != 8 || $5 + 0 > $6 + 0 || $6 + 0 > $7 + 0) { print "bad row " NR ": " $0; bad = 1 } END { exit bad }' "$T/$name.csv" ||
    fail "$name: malformed CSV rows"
  for p in bf16 fp32; do
    c=gpu-mlp-$p
    awk -F, -v c="$c" -v gf="$gf" '
      $1 == c && $2 == "expected" && $4 == "gemm_flops_per_step" { fl = $6 }
      $1 == c && $2 == "peak" && $4 == "tflops" { pk = $6 }
      $1 == c && $2 == "ddptrain-cuda-ops" && $4 == "step_ms" { ms = $6 }
      $1 == c && $2 == "ddptrain-cuda-ops" && $4 == "tflops" { tf = $6 }
      $1 == c && $2 == "ddptrain-cuda-ops" && $4 == "fraction_of_peak" { fp = $6 }
      $1 == c && $2 == "cublas-alone" && $4 == "step_ms" { gms = $6 }
      $1 == c && $2 == "cublas-alone" && $4 == "tflops" { gtf = $6 }
      $1 == c && $2 == "ddptrain-cuda-ops" && $4 == "fraction_of_cublas" { fc = $6 }
      function near(a, b) { return a > 0 && b > 0 && a / b > 0.999 && a / b < 1.001 }
      END {
        if (!near(fl, gf * 1e9)) { print c ": gemm_flops_per_step " fl ", expected " gf * 1e9; exit 1 }
        if (!near(tf * 1e12 * ms * 1e-3, fl)) { print c ": tflops x step_ms = " tf * ms * 1e9 " FLOP, expected " fl; exit 1 }
        if (!near(gtf * 1e12 * gms * 1e-3, fl)) { print c ": cuBLAS tflops x step_ms does not give the FLOP count"; exit 1 }
        if (!near(fp, tf / pk)) { print c ": fraction_of_peak " fp " is not " tf " / " pk; exit 1 }
        if (!(fc > 0 && fc <= 1e3)) { print c ": fraction_of_cublas " fc; exit 1 }
      }' "$T/$name.csv" || { cat "$T/$name.csv"; fail "$name: the CSV's numbers do not follow from the FLOP count"; }
  done
  grep -q "^gpu-mlp-bf16,peak,1,tflops,989,989,989," "$T/$name.csv" || [ "$name" != quick ] ||
    fail "$name: the bf16 peak is not the H200's 989 TFLOP/s"
}
check quick 64 64 64 4 32 --quick
# another shape: 3 layers, input and output widths of their own, a peak given
check shape 48 20 10 3 16 --quick --width 48 --in 20 --out 10 --layers 3 --batch 16 --peak-bf16 100
grep -q "^gpu-mlp-bf16,peak,1,tflops,100,100,100," "$T/shape.csv" || fail "--peak-bf16 100 not in the CSV"

# the model of the full-size step
DDP_EMU_DRY=1 "$BG" --model >"$T/model.out" 2>&1 || { cat "$T/model.out"; fail "bench_gpu --model failed"; }
gf=$(sed -n 's/^# FLOPs per step: \([0-9.e+-]*\) GFLOP.*/\1/p' "$T/model.out")
params=$(sed -n 's/.*ReLU, \([0-9]*\) parameters.*/\1/p' "$T/model.out")
[ -n "$gf" ] && [ -n "$params" ] || { cat "$T/model.out"; fail "--model: no FLOP count or parameter count in the header"; }
grep -q "WARNING" "$T/model.out" && { cat "$T/model.out"; fail "--model warns (an undeclared launch, or the log's GEMM FLOPs off the count)"; }
awk -v gf="$gf" -v np="$params" '
  function near(a, b) { return a > 0 && b > 0 && a / b > 0.999 && a / b < 1.001 }
  function bad(m) { print m; err = 1 }
  /^# model of the [a-z0-9]+ training step/ { p = $5; sum = 0; n++ }
  /^[a-zA-Z0-9_<>()]+ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.-]+$/ {
    sum += $6
    # AdamW: p, g, m, v read, p, m, v written; under bf16 also the
    # bf16 copy of the parameters (cuda/bf16.h, the mirror)
    if ($1 == "adamw_k") { b = p == "bf16" ? 30 : 28
      if (!near($4, b * np / 1e6)) bad(p ": adamw_k moves " $4 " MB, not " b " bytes x " np " parameters")
      if (!near($6, b * np / (4800e9 * 0.9) * 1e6)) bad(p ": adamw_k takes " $6 " us, not its bytes at 90% of 4.8 TB/s") } }
  /^# modeled step: / { step = $4; if (!near(sum / 1e3, step)) bad(p ": the rows add to " sum " us, the step is " step " ms") }
  /^# modeled GEMMs alone: / { pk = p == "bf16" ? 989 : 67; g = gf * 1e9 / (pk * 1e12 * 0.7) * 1e3
    if (!near($5, g)) bad(p ": GEMMs alone " $5 " ms, not " gf " GFLOP at 70% of " pk " TFLOP/s (" g " ms)")
    split($0, r, "= "); if (!near(r[2] + 0, step / $5)) bad(p ": step / GEMMs " r[2] " is not " step " / " $5) }
  END { if (n != 2) bad("--model: " n " models, expected bf16 and fp32"); exit err }' "$T/model.out" ||
  { cat "$T/model.out"; fail "--model: the model does not follow its formula"; }
grep -q "^bf16   model target: step <= 1.25x its GEMMs alone: [0-9.]*x (\(met\|NOT met\))$" "$T/model.out" ||
  { cat "$T/model.out"; fail "--model: no bf16 target line"; }

# the script with its three views
(cd "$top_builddir" && BENCH_CSV="$T/sh.csv" PYTHON=/usr/bin/python3 sh "$top_srcdir/bench/bench_gpu.sh" --quick) >"$T/sh.out" 2>&1 ||
  { cat "$T/sh.out"; fail "bench_gpu.sh --quick failed"; }
for s in "== 0. the model" "== 1. bench_gpu" "== 2. ddptrain --device cuda end to end" "== 3. PyTorch" \
  "== summary" "ops table (bench_gpu)" "cuBLAS alone" "H200 model: step" "H200 model: GEMMs alone"; do
  grep -qF -- "$s" "$T/sh.out" || { cat "$T/sh.out"; fail "bench_gpu.sh output lacks '$s'"; }
done
grep -q "gpu-mlp-bf16,ddptrain-cuda-ops,1,tflops," "$T/sh.csv" || fail "bench_gpu.sh wrote no CSV rows to BENCH_CSV"

# bad arguments
for args in "--layers 0" "--precision fp16" "--frobnicate" "--batch"; do
  # shellcheck disable=SC2086
  "$BG" $args >"$T/bad.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { cat "$T/bad.out"; fail "bench_gpu $args: exit $rc, expected 2"; }
  grep -q "^usage: bench_gpu" "$T/bad.out" || { cat "$T/bad.out"; fail "bench_gpu $args: no usage line"; }
done
echo "test_gpu_bench.sh: passed"
