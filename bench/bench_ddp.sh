#!/bin/sh
# bench_ddp.sh -- data-parallel training on one node: ddptrain at np=1, np=2
# and np=2 without gradient communication (--no-sync), PyTorch DDP (gloo) at
# np=1 and np=2, all on the MLP 784-1024-1024-10 with BatchNorm, batch 64 per
# rank, one thread per rank, in alternating rounds of the same run; and the
# gradient all-reduce alone (bench_allreduce on the same 7.13 MiB, same run),
# from which the exposed communication time and the overlap fraction follow:
#   exposed = step(np=2) - step(np=2, --no-sync)
#   overlap = 1 - exposed / all-reduce alone
# (SyncBatchNorm runs in both np=2 ddptrain rows.)  The watchdog (on by
# default, --timeout 600) and --debug-collectives are measured against the
# same np=2 run with --timeout 0 (no watchdog thread).  Rounds alternate the
# variants, so load from elsewhere spreads over all of them.
#
# From a configured build directory:
#   make -C bench bench && sh /path/to/ddptrain/bench/bench_ddp.sh [ROUNDS] [STEPS]
set -eu
rounds=${1:-3}
steps=${2:-400}
src=$(cd "$(dirname "$0")/.." && pwd)
[ -x ./ddptrain ] && [ -x ./bench/bench_allreduce ] || {
  echo "run from a build directory after 'make && make -C bench bench'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mpirun="mpirun --bind-to none"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
./ddptrain-prep synthetic --classes 10 --features 784 --samples 60000 --seed 1 -o "$tmp/mlp.h5" >/dev/null
model="--model linear:1024,bn,relu,linear:1024,bn,relu,linear:10 --batch 64 --log-every 0 --eval-every 0"

med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ddp() { # name np args...: the slowest... rank 0's p50 step and the job's samples/s
  name=$1; np=$2; shift 2
  $mpirun -np "$np" ./ddptrain "$tmp/mlp.h5" $model --steps "$steps" "$@" >"$tmp/o" 2>&1
  grep -o 'step_ms_p50=[0-9.]*' "$tmp/o" | cut -d= -f2 >>"$tmp/$name.ms"
  grep -o 'data_wait_ms_p50=[0-9.]*' "$tmp/o" | cut -d= -f2 >>"$tmp/$name.wait"
}
torch() { # name np
  name=$1; np=$2
  if [ "$np" = 1 ]; then
    /usr/bin/python3 "$src/bench/torch_mlp.py" -n "$steps" | awk '/pytorch training step/ { print $4 }' >>"$tmp/$name.ms"
  else
    for r in $(seq 0 $((np - 1))); do
      RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
        /usr/bin/python3 "$src/bench/torch_mlp.py" --ddp -n "$steps" >"$tmp/t$r" 2>&1 &
    done
    wait
    grep -o 'step_ms_p50=[0-9.]*' "$tmp/t0" | cut -d= -f2 >>"$tmp/$name.ms"
  fi
}
for r in $(seq "$rounds"); do
  ddp np1 1
  ddp np2 2
  ddp nosync 2 --no-sync
  ddp nowd 2 --timeout 0
  ddp dbg 2 --debug-collectives
  torch torch1 1
  torch torch2 2
  $mpirun -np 2 ./bench/bench_allreduce --min 7296K --max 7296K --reps 5 >"$tmp/o" 2>&1
  awk '!/^#/ && NF > 5 { print $5 / 1000 }' "$tmp/o" >>"$tmp/ar.ms"
done
printf '# bench_ddp: MLP 784-1024-1024-10 + BN, batch 64 per rank, 1 thread per rank, %s rounds of %s steps (medians)\n' "$rounds" "$steps"
printf '%-46s %10s %14s %12s\n' "" "step (ms)" "samples/s" "data wait"
row() { # label file np
  ms=$(med <"$tmp/$2.ms")
  wait="-"
  [ -s "$tmp/$2.wait" ] && wait=$(awk -v w="$(med <"$tmp/$2.wait")" -v s="$ms" 'BEGIN { printf "%.2f%%", 100 * w / s }')
  awk -v n="$1" -v ms="$ms" -v np="$3" -v w="$wait" 'BEGIN { printf "%-46s %10.3f %14.0f %12s\n", n, ms, 64000 * np / ms, w }'
}
row "ddptrain np=1" np1 1
row "ddptrain np=2" np2 2
row "ddptrain np=2 --no-sync (no gradient all-reduce)" nosync 2
row "ddptrain np=2 --timeout 0 (no watchdog)" nowd 2
row "ddptrain np=2 --debug-collectives" dbg 2
row "PyTorch DDP gloo np=1 (plain module)" torch1 1
row "PyTorch DDP gloo np=2" torch2 2
awk -v a="$(med <"$tmp/np1.ms")" -v b="$(med <"$tmp/np2.ms")" -v c="$(med <"$tmp/nosync.ms")" \
    -v t2="$(med <"$tmp/torch2.ms")" -v ar="$(med <"$tmp/ar.ms")" \
    -v nw="$(med <"$tmp/nowd.ms")" -v dbg="$(med <"$tmp/dbg.ms")" 'BEGIN {
  printf "gradient all-reduce alone (7.47 MB, comm backend): %.3f ms\n", ar
  printf "exposed communication: %.3f ms per step; overlap fraction %.0f%%\n", b - c, 100 * (1 - (b - c) / ar)
  printf "DDP step / no-communication step: %.3f (target <= 1.15)\n", b / c
  printf "weak-scaling efficiency np=2 vs np=1: %.0f%% (target >= 85%%)\n", 100 * a / b
  printf "ddptrain np=2 / PyTorch DDP np=2 samples/s: %.2fx (target >= 2.5x)\n", t2 / b
  printf "watchdog: step with / without (--timeout 0): %.3f (target: 1.00 within noise)\n", b / nw
  printf "--debug-collectives: step with / without: %.3f\n", dbg / b }'
