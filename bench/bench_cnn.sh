#!/bin/sh
# bench_cnn.sh -- CNN training throughput on one node: ddptrain at np=1, np=2
# and np=2 without gradient communication (--no-sync) on Fashion-MNIST (the
# real deck: uint8 1x28x28 images through the loader), and PyTorch at np=1
# (a plain module) and DDP (gloo, ranks started by hand) at np=2 on a fixed
# batch of the same shape (bench/torch_cnn.py), all on the model
#   conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,linear:128,relu,linear:10
# batch 64 per rank, SGD with momentum, one thread per rank, in alternating
# rounds of the same run; medians over the rounds.  (SyncBatchNorm runs in
# both np=2 ddptrain rows; PyTorch refuses it on CPU and keeps per-rank BN.)
# Then one run of bench/bench_cnn: where the time of a step goes, per op.
#
# From a configured build directory:
#   make -C bench bench && sh /path/to/ddptrain/bench/bench_cnn.sh [ROUNDS] [STEPS]
set -eu
rounds=${1:-3}
steps=${2:-200}
src=$(cd "$(dirname "$0")/.." && pwd)
fm=${DDP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
[ -x ./ddptrain ] && [ -x ./bench/bench_cnn ] || {
  echo "run from a build directory after 'make && make -C bench bench'" >&2; exit 2; }
[ -r "$fm/train-images-idx3-ubyte.gz" ] || { echo "no $fm (apt-get install dataset-fashion-mnist)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mpirun="mpirun --bind-to none"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
./ddptrain-prep idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" -o "$tmp/fashion.h5" >/dev/null
spec=conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,linear:128,relu,linear:10
model="--model $spec --batch 64 --log-every 0 --eval-every 0"

med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ddp() { # name np args...: rank 0's p50 step (the step ends with the all-reduce: all ranks agree)
  name=$1; np=$2; shift 2
  $mpirun -np "$np" ./ddptrain "$tmp/fashion.h5" $model --steps "$steps" "$@" >"$tmp/o" 2>&1
  grep -o 'step_ms_p50=[0-9.]*' "$tmp/o" | cut -d= -f2 >>"$tmp/$name.ms"
}
torch() { # name np
  name=$1; np=$2
  if [ "$np" = 1 ]; then
    /usr/bin/python3 "$src/bench/torch_cnn.py" -n "$steps" | awk '/pytorch training step/ { print $4 }' >>"$tmp/$name.ms"
  else
    for r in $(seq 0 $((np - 1))); do
      RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=29519 \
        /usr/bin/python3 "$src/bench/torch_cnn.py" --ddp -n "$steps" >"$tmp/t$r" 2>&1 &
    done
    wait
    grep -o 'step_ms_p50=[0-9.]*' "$tmp/t0" | cut -d= -f2 >>"$tmp/$name.ms"
  fi
}
for r in $(seq "$rounds"); do
  ddp np1 1
  torch torch1 1
  ddp np2 2
  torch torch2 2
  ddp nosync 2 --no-sync
done
printf '# bench_cnn: %s\n# batch 64 per rank, 1 thread per rank, %s rounds of %s steps (medians)\n' "$spec" "$rounds" "$steps"
printf '%-46s %10s %12s\n' "" "step (ms)" "samples/s"
row() { # label file np
  awk -v n="$1" -v ms="$(med <"$tmp/$2.ms")" -v np="$3" 'BEGIN { printf "%-46s %10.3f %12.0f\n", n, ms, 64000 * np / ms }'
}
row "ddptrain np=1" np1 1
row "ddptrain np=2" np2 2
row "ddptrain np=2 --no-sync (no gradient all-reduce)" nosync 2
row "PyTorch np=1 (plain module)" torch1 1
row "PyTorch DDP gloo np=2" torch2 2
awk -v a="$(med <"$tmp/np1.ms")" -v b="$(med <"$tmp/np2.ms")" -v c="$(med <"$tmp/nosync.ms")" \
    -v t1="$(med <"$tmp/torch1.ms")" -v t2="$(med <"$tmp/torch2.ms")" 'BEGIN {
  printf "ddptrain np=1 / PyTorch np=1 samples/s: %.2fx (target >= 1.3x)\n", t1 / a
  printf "ddptrain np=2 / PyTorch DDP np=2 samples/s: %.2fx (target >= 2.5x)\n", t2 / b
  printf "DDP step / no-communication step: %.3f; weak-scaling efficiency np=2 vs np=1: %.0f%%\n", b / c, 100 * a / b }'
# per round, ratios within the round (the machine is shared: a round's
# numbers saw the same load)
paste "$tmp/np1.ms" "$tmp/torch1.ms" "$tmp/np2.ms" "$tmp/torch2.ms" | awk '{
  printf "round %d: np=1 %.2f vs %.2f ms (%.2fx), np=2 %.2f vs %.2f ms (%.2fx)\n", NR, $1, $2, $2 / $1, $3, $4, $4 / $3 }'
echo
./bench/bench_cnn -n 50
