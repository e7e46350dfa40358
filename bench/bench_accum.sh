#!/bin/sh
# bench_accum.sh -- gradient accumulation: the MLP 784-1024-1024-10 with
# BatchNorm at np=2, batch 64 per rank, with --accum 1 and --accum 4 over the
# same number of samples, in alternating rounds.  Reports the gradient bytes
# each rank all-reduced per training sample (the summary's grad_bytes over
# the rank's samples) next to the expectation (the float32 gradient once per
# optimizer step: 4 x parameters / (64 x accum)), and the samples/s of both.
# With accumulation only the last micro-batch of a step all-reduces, so
# --accum 4 must send a quarter of the bytes per sample.
#
# From a configured build directory:
#   sh /path/to/ddptrain/bench/bench_accum.sh [ROUNDS] [SAMPLES_PER_RANK]
# With BENCH_CSV=FILE the numbers are also appended to FILE (bench/lib.sh).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
rounds=${1:-3}
samples=${2:-25600}
[ -x ./ddptrain ] && [ -x ./ddptrain-prep ] || { echo "run from a build directory after 'make'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
./ddptrain-prep synthetic --classes 10 --features 784 --samples 60000 --seed 1 -o "$tmp/d.h5" >/dev/null
model="--model linear:1024,bn,relu,linear:1024,bn,relu,linear:10 --batch 64 --log-every 0 --eval-every 0"
params=$(./ddptrain "$tmp/d.h5" $model --steps 1 2>&1 | sed -n 's/.* \([0-9]*\) parameters (.*/\1/p' | head -n 1)
for r in $(seq "$rounds"); do
  for k in 1 4; do
    steps=$((samples / 64 / k))
    bench_mpirun -np 2 ./ddptrain "$tmp/d.h5" $model --accum "$k" --steps "$steps" >"$tmp/o" 2>&1 ||
      { cat "$tmp/o" >&2; exit 1; }
    b=$(grep -o 'grad_bytes=[0-9]*' "$tmp/o" | cut -d= -f2)
    awk -v b="$b" -v n="$((steps * 64 * k))" 'BEGIN { print b / n }' >>"$tmp/bps$k"
    sed -n 's/.* = \([0-9.]*\) samples\/s.*/\1/p' "$tmp/o" >>"$tmp/sps$k"
  done
done
printf '# bench_accum: MLP 784-1024-1024-10 + BN (%s parameters), np=2, batch 64 per rank, %s samples per rank, %s rounds (medians)\n' \
  "$params" "$samples" "$rounds"
printf '%-12s %22s %22s %12s\n' "" "grad bytes per sample" "expected (4P/(64K))" "samples/s"
for k in 1 4; do
  awk -v k="$k" -v b="$(med <"$tmp/bps$k")" -v p="$params" -v s="$(med <"$tmp/sps$k")" \
    'BEGIN { printf "%-12s %22.1f %22.1f %12.0f\n", "--accum " k, b, 4 * p / (64 * k), s }'
  csv_rows accum-$k ddptrain 2 grad_bytes_per_sample "$tmp/bps$k" B
  csv_value accum-$k expected 2 grad_bytes_per_sample "$(awk -v k="$k" -v p="$params" 'BEGIN { print 4 * p / (64 * k) }')" B
  csv_rows accum-$k ddptrain 2 samples_per_s "$tmp/sps$k" samples/s
done
awk -v a="$(med <"$tmp/bps1")" -v b="$(med <"$tmp/bps4")" 'BEGIN { printf "bytes per sample, accum 1 / accum 4: %.2f (expected 4.00)\n", a / b }'
