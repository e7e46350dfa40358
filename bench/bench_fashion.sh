#!/bin/sh
# bench_fashion.sh -- time-to-accuracy on real data: Fashion-MNIST (Debian's
# dataset-fashion-mnist, converted by `ddptrain-prep idx`), the README's MLP
# recipe (784-1024-1024-10 with BatchNorm, AdamW lr 0.001, weight decay 0.05,
# 200 warm-up steps, cosine decay, batch 64 per rank, 5 epochs) at np=2 with
# ddptrain and with PyTorch DDP (gloo, ranks started by hand, one thread per
# rank: bench/torch_fashion.py), in alternating rounds of the same run.
# Both evaluate the 10,000 test images after every epoch; the times are
# seconds from the launch (mpirun, or the Python ranks) until the evaluation
# line arrives, so start-up and reading the deck are included for both.
# Prints per round: the time to the first evaluation at or above TARGET
# (default 0.89), the final val_acc and the wall time of the whole run.
#
# From a configured build directory (after `make`):
#   sh /path/to/ddptrain/bench/bench_fashion.sh [ROUNDS] [TARGET]
set -eu
rounds=${1:-2}
target=${2:-0.89}
src=$(cd "$(dirname "$0")/.." && pwd)
fm=${DDP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
[ -x ./ddptrain ] && [ -x ./ddptrain-prep ] || { echo "run from a build directory after 'make'" >&2; exit 2; }
[ -r "$fm/train-images-idx3-ubyte.gz" ] || { echo "no $fm (apt-get install dataset-fashion-mnist)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mpirun="mpirun --bind-to none"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
./ddptrain-prep idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" \
  --val "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" -o "$tmp/fashion.h5" >/dev/null

# stamp START: each line of stdin prefixed by the seconds since START
stamp() { while IFS= read -r l; do echo "$(echo "$(date +%s.%N) - $1" | bc) $l"; done; }
# report NAME FILE: time to TARGET, final accuracy, wall (lines "T ... val_acc=A")
report() {
  awk -v t="$target" -v n="$1" '
    { for (i = 2; i <= NF; i++) if ($i ~ /^val_acc=/) { e++; a = substr($i, 9); last = a; if (!hit && a + 0 >= t) { hit = $1; ep = e } } w = $1 }
    END { printf "%-22s time to %.2f: %s   final val_acc %s   wall %.1f s\n", n, t,
          hit ? sprintf("%.1f s (epoch %d)", hit, ep) : "not reached", last, w }' "$2"
}
for r in $(seq "$rounds"); do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
  start=$(date +%s.%N)
  $mpirun -np 2 ./ddptrain "$tmp/fashion.h5" \
    --model linear:1024,bn,relu,linear:1024,bn,relu,linear:auto --optimizer adamw --lr 0.001 \
    --weight-decay 0.05 --warmup-steps 200 --lr-schedule cosine --batch 64 --epochs 5 \
    --log-every 0 2>&1 | stamp "$start" >"$tmp/d"
  report "ddptrain np=2" "$tmp/d"
  start=$(date +%s.%N)
  for k in 0 1; do
    RANK=$k WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29513 /usr/bin/python3 \
      "$src/bench/torch_fashion.py" "$tmp/fashion.h5" --epochs 5 --start "$start" >"$tmp/t$k" 2>&1 &
  done
  wait
  echo "$(echo "$(date +%s.%N) - $start" | bc) end" | cat "$tmp/t0" - | sed 's/^epoch=[0-9]* time_s=//' >"$tmp/p"
  report "PyTorch DDP gloo np=2" "$tmp/p"
done
