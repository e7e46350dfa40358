#!/bin/sh
# bench_ddp.sh -- data-parallel training on one node: ddptrain at np=1, np=2
# and np=2 without gradient communication (--no-sync), PyTorch DDP (gloo) at
# np=1 and np=2, on the same model, batch 64 per rank, one thread per rank, in
# alternating rounds of the same run; and the gradient all-reduce alone
# (bench_allreduce on the model's gradient bytes, same run), from which the
# exposed communication time and the overlap fraction follow:
#   exposed = step(np=2) - step(np=2, --no-sync)
#   overlap = 1 - exposed / all-reduce alone
# SyncBatchNorm runs in the np=2 ddptrain rows but the last: PyTorch refuses
# SyncBatchNorm on CPU, so its DDP model keeps per-rank statistics, and the
# --no-sync-bn row is ddptrain with the same per-rank BatchNorm.  For the MLP the watchdog
# (on by default, --timeout 600) and --debug-collectives are measured against
# the same np=2 run with --timeout 0 (no watchdog thread).  Rounds alternate
# the variants, so load from elsewhere spreads over all of them.
#
# Cases (--case):
#   mlp  784-1024-1024-10 with BatchNorm on a synthetic 60000 x 784 deck
#        (PyTorch: torch_mlp.py)
#   cnn  conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,
#        linear:128,relu,linear:10 on a generated uint8 60000 x 1x28x28 deck (bench_loader gen)
#        (PyTorch: torch_mlp.py --model cnn)
#   resnet18  --model resnet18 on a generated uint8 2048 x 3x64x64 deck, batch 16 per
#        rank, 10 classes (PyTorch: torch_mlp.py --model resnet18, tests/tools/resnets.py)
#   resnet50  --model resnet50 on 3x112x112, batch 8 per rank
# The synthetic-image benchmark of the data-parallel papers: images/s.
# For the ResNets a last run of each at np=1 under ONEDNN_VERBOSE=1 (oneDNN's
# own timing of every primitive it runs; PyTorch on CPU calls the same
# libdnnl) splits the step into convolutions, oneDNN's reorders and the rest,
# and gives the ceiling of the np=1 ratio: PyTorch's step over ddptrain's
# convolutions alone, what ddptrain would reach if nothing else took time.
#
# From a configured build directory:
#   make -C bench bench && sh /path/to/ddptrain/bench/bench_ddp.sh [--case mlp|cnn] [ROUNDS] [STEPS]
# With BENCH_CSV=FILE the numbers are also appended to FILE as results.csv rows
# (bench/lib.sh).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/lib.sh"
case_=mlp
if [ "${1:-}" = --case ]; then case_=${2:?--case mlp|cnn|resnet18|resnet50}; shift 2; fi
rounds=${1:-3}
steps=${2:-400}
[ -x ./ddptrain ] && [ -x ./bench/bench_allreduce ] || {
  echo "run from a build directory after 'make && make -C bench bench'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
case $case_ in
  mlp) ./ddptrain-prep synthetic --classes 10 --features 784 --samples 60000 --seed 1 -o "$tmp/d.h5" >/dev/null
       spec=linear:1024,bn,relu,linear:1024,bn,relu,linear:10
       title="MLP 784-1024-1024-10 + BN" ;;
  cnn) ./bench/bench_loader gen "$tmp/d.h5" 60000 1 28 28 >/dev/null
       spec=conv:32:3:1:1,bn,relu,maxpool:2,conv:64:3:1:1,bn,relu,maxpool:2,linear:128,relu,linear:10
       title="CNN conv32-conv64-128-10 + BN" ;;
  resnet18) ./bench/bench_loader gen "$tmp/d.h5" 2048 3 64 64 >/dev/null
       spec=resnet18 batch=16 hw=64
       title="ResNet-18 on 3x64x64 images (11.2 M parameters)" ;;
  resnet50) ./bench/bench_loader gen "$tmp/d.h5" 1024 3 112 112 >/dev/null
       spec=resnet50 batch=8 hw=112
       title="ResNet-50 on 3x112x112 images (23.5 M parameters)" ;;
  *) echo "bench_ddp.sh: --case $case_: not mlp, cnn, resnet18 or resnet50" >&2; exit 2 ;;
esac
batch=${batch:-64}
model="--model $spec --batch $batch --log-every 0 --eval-every 0"
tmodel="--model $case_ -b $batch ${hw:+--image $hw}"
# the gradient bytes: the model's parameters (start-up table), float32
grad_bytes=$(./ddptrain "$tmp/d.h5" $model --steps 1 2>&1 | sed -n 's/.* \([0-9]*\) parameters (.*/\1/p' | head -n 1)
grad_bytes=$((grad_bytes * 4))

ddp() { # name np args...: rank 0's p50 step time
  name=$1; np=$2; shift 2
  bench_mpirun -np "$np" ./ddptrain "$tmp/d.h5" $model --steps "$steps" "$@" >"$tmp/o" 2>&1 ||
    { cat "$tmp/o" >&2; exit 1; }
  grep -o 'step_ms_p50=[0-9.]*' "$tmp/o" | cut -d= -f2 >>"$tmp/$name.ms"
  grep -o 'data_wait_ms_p50=[0-9.]*' "$tmp/o" | cut -d= -f2 >>"$tmp/$name.wait"
}
torch() { # name np
  name=$1; np=$2
  if [ "$np" = 1 ]; then
    /usr/bin/python3 "$src/bench/torch_mlp.py" $tmodel -n "$steps" |
      awk '/pytorch training step/ { print $4 }' >>"$tmp/$name.ms"
  else
    for r in $(seq 0 $((np - 1))); do
      RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
        /usr/bin/python3 "$src/bench/torch_mlp.py" $tmodel --ddp -n "$steps" >"$tmp/t$r" 2>&1 &
    done
    wait
    grep -o 'step_ms_p50=[0-9.]*' "$tmp/t0" | cut -d= -f2 >>"$tmp/$name.ms"
  fi
}
for r in $(seq "$rounds"); do
  ddp np1 1
  ddp np2 2
  ddp nosync 2 --no-sync
  ddp localbn 2 --no-sync-bn
  if [ "$case_" = mlp ]; then
    ddp nowd 2 --timeout 0
    ddp dbg 2 --debug-collectives
  fi
  torch torch1 1
  torch torch2 2
  bench_mpirun -np 2 ./bench/bench_allreduce --min "$grad_bytes" --max "$grad_bytes" --reps 5 >"$tmp/o" 2>&1
  awk '!/^#/ && NF > 5 { print $5 / 1000 }' "$tmp/o" >>"$tmp/ar.ms"
done
printf '# bench_ddp %s: %s, batch %s per rank, 1 thread per rank, %s rounds of %s steps (medians)\n' \
  "$case_" "$title" "$batch" "$rounds" "$steps"
printf '%-46s %10s %14s %12s\n' "" "step (ms)" "samples/s" "data wait"
row() { # label file np impl
  ms=$(med <"$tmp/$2.ms")
  wait="-"
  [ -s "$tmp/$2.wait" ] && wait=$(awk -v w="$(med <"$tmp/$2.wait")" -v s="$ms" 'BEGIN { printf "%.2f%%", 100 * w / s }')
  awk -v n="$1" -v ms="$ms" -v np="$3" -v w="$wait" -v b="$batch" 'BEGIN { printf "%-46s %10.3f %14.1f %12s\n", n, ms, 1000 * b * np / ms, w }'
  scale_each "$tmp/$2.ms" "1000 * $batch * $3 / v" >"$tmp/$2.sps"
  csv_rows "$case_" "$4" "$3" samples_per_s "$tmp/$2.sps" samples/s
  csv_rows "$case_" "$4" "$3" step_ms "$tmp/$2.ms" ms
}
row "ddptrain np=1" np1 1 ddptrain
row "ddptrain np=2" np2 2 ddptrain
row "ddptrain np=2 --no-sync (no gradient all-reduce)" nosync 2 ddptrain-no-sync
row "ddptrain np=2 --no-sync-bn (per-rank BN, as PyTorch)" localbn 2 ddptrain-no-sync-bn
if [ "$case_" = mlp ]; then
  row "ddptrain np=2 --timeout 0 (no watchdog)" nowd 2 ddptrain-no-watchdog
  row "ddptrain np=2 --debug-collectives" dbg 2 ddptrain-debug-collectives
fi
row "PyTorch DDP gloo np=1 (plain module)" torch1 1 pytorch
row "PyTorch DDP gloo np=2" torch2 2 pytorch
a=$(med <"$tmp/np1.ms") b=$(med <"$tmp/np2.ms") c=$(med <"$tmp/nosync.ms")
t1=$(med <"$tmp/torch1.ms") t2=$(med <"$tmp/torch2.ms") ar=$(med <"$tmp/ar.ms")
lb=$(med <"$tmp/localbn.ms")
case $case_ in resnet*) g1=1.5 g2=2.0 ;; *) g1=1.3 g2=2.5 ;; esac
awk -v a="$a" -v b="$b" -v c="$c" -v t1="$t1" -v t2="$t2" -v ar="$ar" -v gb="$grad_bytes" -v lb="$lb" \
    -v g1="$g1" -v g2="$g2" 'BEGIN {
  printf "gradient all-reduce alone (%.2f MB, comm backend): %.3f ms\n", gb / 1e6, ar
  if (b - c <= 0) printf "exposed communication: none measurable (np=2 within noise of --no-sync: %.3f ms)\n", b - c
  else if (b - c > ar) printf "exposed communication: %.3f ms per step, more than the all-reduce alone: no overlap measurable (noise, or waiting for the other rank)\n", b - c
  else printf "exposed communication: %.3f ms per step; overlap fraction %.0f%%\n", b - c, 100 * (1 - (b - c) / ar)
  printf "DDP step / no-communication step: %.3f (target <= 1.15)\n", b / c
  printf "weak-scaling efficiency np=2 vs np=1: %.0f%% (target >= 85%%)\n", 100 * a / b
  printf "ddptrain np=1 / PyTorch np=1 samples/s: %.2fx (target >= %.1fx)\n", t1 / a, g1
  printf "ddptrain np=2 / PyTorch DDP np=2 samples/s: %.2fx (target >= %.1fx)\n", t2 / b, g2
  printf "ddptrain np=2 --no-sync-bn / PyTorch DDP np=2 samples/s: %.2fx (the same per-rank BatchNorm)\n", t2 / lb }'
case $case_ in resnet*)
  # oneDNN's time per step in convolutions and reorders, summed from its
  # verbose lines (exec,cpu,KIND,...,TIME_MS) over the run's steps
  dnnl() { awk -F, -v n="$steps" '$1 == "onednn_verbose" && $2 == "exec" {
      if ($4 == "convolution") c += $NF; else if ($4 == "reorder") r += $NF }
      END { printf "%.3f %.3f\n", c / n, r / n }' "$1"; }
  ONEDNN_VERBOSE=1 bench_mpirun -np 1 ./ddptrain "$tmp/d.h5" $model --steps "$steps" >"$tmp/vd" 2>&1 ||
    { tail "$tmp/vd" >&2; exit 1; }
  ONEDNN_VERBOSE=1 /usr/bin/python3 "$src/bench/torch_mlp.py" $tmodel -w 0 -n "$steps" >"$tmp/vt" 2>&1 ||
    { tail "$tmp/vt" >&2; exit 1; }
  set -- $(dnnl "$tmp/vd") $(dnnl "$tmp/vt")
  awk -v a="$a" -v t1="$t1" -v dc="$1" -v dr="$2" -v tc="$3" -v tr="$4" 'BEGIN {
    printf "where an np=1 step goes (oneDNN'"'"'s own timing, ONEDNN_VERBOSE=1, one run of each; the rest: the step above less both):\n"
    printf "  %-10s %14s %12s %10s\n", "", "convolutions", "reorders", "the rest"
    printf "  %-10s %11.1f ms %9.1f ms %7.1f ms\n", "ddptrain", dc, dr, a - dc - dr
    if (tc > 0) printf "  %-10s %11.1f ms %9.1f ms %7.1f ms\n", "PyTorch", tc, tr, t1 - tc - tr
    else printf "  PyTorch    (no oneDNN lines: this PyTorch does not run its convolutions through libdnnl)\n"
    if (dc > 0) printf "ceiling of ddptrain np=1 / PyTorch np=1 with these convolutions and nothing else: %.2fx\n", t1 / dc }'
  ;;
esac
if [ "$case_" = mlp ]; then
  awk -v b="$b" -v nw="$(med <"$tmp/nowd.ms")" -v dbg="$(med <"$tmp/dbg.ms")" 'BEGIN {
    printf "watchdog: step with / without (--timeout 0): %.3f (target: 1.00 within noise)\n", b / nw
    printf "--debug-collectives: step with / without: %.3f\n", dbg / b }'
fi
# per-round ratios for results.csv (round i of each variant ran side by side)
ratio() { # A B EXPR IMPL RANKS METRIC UNIT
  paste "$tmp/$1.ms" "$tmp/$2.ms" | awk "{ print $3 }" >"$tmp/ratio"; csv_rows "$case_" "$4" "$5" "$6" "$tmp/ratio" "$7"; }
ratio np1 np2 '$1 / $2' ddptrain 2 weak_scaling_efficiency fraction
ratio np2 nosync '$1 / $2' ddptrain 2 ddp_step_over_no_comm_step ratio
ratio np1 torch1 '$2 / $1' ddptrain 1 speedup_over_pytorch ratio
ratio np2 torch2 '$2 / $1' ddptrain 2 speedup_over_pytorch ratio
ratio localbn torch2 '$2 / $1' ddptrain-no-sync-bn 2 speedup_over_pytorch ratio
ratio torch1 torch2 '$1 / $2' pytorch 2 weak_scaling_efficiency fraction
ratio np2 nosync '$1 - $2' ddptrain 2 comm_exposed_ms ms
csv_rows "$case_" ddptrain-allreduce-alone 2 allreduce_ms "$tmp/ar.ms" ms
