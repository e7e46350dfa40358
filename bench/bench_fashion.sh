#!/bin/sh
# bench_fashion.sh -- time-to-accuracy on real data: Fashion-MNIST (Debian's
# dataset-fashion-mnist, converted by `ddptrain-prep idx`), one of the
# recipes of docs/usage.md ("Examples") at np=2 with ddptrain and with
# PyTorch DDP (gloo, ranks started by hand, one thread per rank:
# bench/torch_fashion.py), in alternating rounds of the same run.  Cases
# (--case):
#   mlp  784-1024-1024-10 with BatchNorm, 5 epochs, target 0.89
#   cnn  conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,
#        linear:128,relu,linear:10, 6 epochs, target 0.92
#        (both AdamW lr 0.001, weight decay 0.05)
#   resnet20  --model resnet20 (the CIFAR-style ResNet-20, 272k parameters),
#        SGD lr 0.1, momentum 0.9, Nesterov, weight decay 5e-4,
#        --augment hflip,crop:2, 15 epochs, target 0.935
# all with 200 warm-up steps, cosine decay, batch 64 per rank.  Both programs evaluate the 10,000 test images after
# every epoch; the times are seconds from the launch (mpirun, or the Python
# ranks) until the evaluation line arrives, so start-up and reading the deck
# are included for both.  Prints per round: the time to the first evaluation
# at or above TARGET, the final val_acc and the wall time of the whole run;
# then the test accuracy after each epoch (median over the rounds).
#
# From a configured build directory (after `make`):
#   sh /path/to/ddptrain/bench/bench_fashion.sh [--case mlp|cnn|resnet20] [ROUNDS] [TARGET]
# DDP_FASHION_EPOCHS=N overrides the case's number of epochs.
# With BENCH_CSV=FILE the numbers are also appended to FILE (bench/lib.sh).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
case_=mlp
if [ "${1:-}" = --case ]; then case_=${2:?--case mlp|cnn|resnet20}; shift 2; fi
# the recipe: the options of ddptrain and of torch_fashion.py alike
adamw="--optimizer adamw --lr 0.001 --weight-decay 0.05"
case $case_ in
  mlp) spec=linear:1024,bn,relu,linear:1024,bn,relu,linear:auto; epochs=5; dtarget=0.89
       opt=$adamw ;;
  cnn) spec=conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,linear:128,relu,linear:auto
       epochs=6; dtarget=0.92 opt=$adamw ;;
  resnet20) spec=resnet20 epochs=15 dtarget=0.935
       opt="--optimizer sgd --lr 0.1 --momentum 0.9 --nesterov --weight-decay 5e-4 --augment hflip,crop:2" ;;
  *) echo "bench_fashion.sh: --case $case_: not mlp, cnn or resnet20" >&2; exit 2 ;;
esac
epochs=${DDP_FASHION_EPOCHS:-$epochs}
rounds=${1:-2}
target=${2:-$dtarget}
fm=${DDP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
[ -x ./ddptrain ] && [ -x ./ddptrain-prep ] || { echo "run from a build directory after 'make'" >&2; exit 2; }
[ -r "$fm/train-images-idx3-ubyte.gz" ] || { echo "no $fm (apt-get install dataset-fashion-mnist)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
./ddptrain-prep idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" \
  --val "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" -o "$tmp/fashion.h5" >/dev/null

# stamp START: each line of stdin prefixed by the seconds since START
stamp() { while IFS= read -r l; do echo "$(echo "$(date +%s.%N) - $1" | bc) $l"; done; }
# report NAME FILE KEY: time to TARGET, final accuracy, wall (lines "T ... val_acc=A");
# appends the round's numbers to $tmp/KEY.{hit,acc,wall} and its accuracies to $tmp/KEY.epochs
report() {
  awk -v t="$target" -v n="$1" -v k="$tmp/$3" '
    { for (i = 2; i <= NF; i++) if ($i ~ /^val_acc=/) { e++; a = substr($i, 9); last = a; acc = acc " " a
        if (!hit && a + 0 >= t) { hit = $1; ep = e } } w = $1 }
    END { printf "%-22s time to %g: %s   final val_acc %s   wall %.1f s\n", n, t,
            hit ? sprintf("%.1f s (epoch %d)", hit, ep) : "not reached", last, w
          if (hit) print hit >> (k ".hit")
          print last >> (k ".acc"); print w >> (k ".wall"); print substr(acc, 2) >> (k ".epochs") }' "$2"
}
for r in $(seq "$rounds"); do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086 # $opt: several options
  bench_mpirun -np 2 ./ddptrain "$tmp/fashion.h5" --model "$spec" $opt \
    --warmup-steps 200 --lr-schedule cosine --batch 64 --epochs "$epochs" \
    --log-every 0 2>&1 | stamp "$start" >"$tmp/d"
  report "ddptrain np=2" "$tmp/d" ddptrain
  start=$(date +%s.%N)
  for k in 0 1; do
    RANK=$k WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29513 /usr/bin/python3 \
      "$src/bench/torch_fashion.py" "$tmp/fashion.h5" --model "$case_" $opt --epochs "$epochs" \
      --start "$start" >"$tmp/t$k" 2>&1 &
  done
  wait
  echo "$(echo "$(date +%s.%N) - $start" | bc) end" | cat "$tmp/t0" - | sed 's/^epoch=[0-9]* time_s=//' >"$tmp/p"
  report "PyTorch DDP gloo np=2" "$tmp/p" pytorch
done
echo "test accuracy after each epoch (median over $rounds round(s)):"
for k in ddptrain pytorch; do
  line=$(printf '  %-10s' "$k")
  for i in $(seq "$(awk '{ if (NF > m) m = NF } END { print m + 0 }' "$tmp/$k.epochs")"); do
    line="$line $(cut -d' ' -f"$i" "$tmp/$k.epochs" | grep . | med | awk '{ printf "%.4f", $1 }')"
  done
  echo "$line"
done
for k in ddptrain pytorch; do
  csv_rows "fashion-$case_" "$k" 2 time_to_${target}_s "$tmp/$k.hit" s
  csv_rows "fashion-$case_" "$k" 2 final_val_acc "$tmp/$k.acc" fraction
  csv_rows "fashion-$case_" "$k" 2 wall_s "$tmp/$k.wall" s
done
