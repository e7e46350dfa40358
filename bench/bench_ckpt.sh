#!/bin/sh
# bench_ckpt.sh -- checkpoint write speed: ddptrain writing checkpoints (rank 0
# builds the HDF5 image in memory, then writes it to a temporary file, fsync,
# rename, fsync of the directory) next to `dd if=/dev/zero conv=fsync` of the
# same byte count into the same directory, in alternating rounds of the same
# run.  Three checkpoint sizes (MLPs with AdamW: weights + exp_avg +
# exp_avg_sq, 12 bytes per parameter): ~15 MiB, ~117 MiB, ~518 MiB.
#   ckpt MiB/s  = bytes / (build_s + write_s), median over every checkpoint
#   write MiB/s = bytes / write_s alone (the file part of the same checkpoints)
#   dd MiB/s    = bytes / wall time of dd, median over the repetitions
#   ratio       = ckpt MiB/s / dd MiB/s (target >= 75%)
#   build share = build_s / (build_s + write_s), median
#
# From a configured build directory (it needs ./ddptrain and ./ddptrain-prep,
# or DDPTRAIN and DDPPREP in the environment):
#   sh /path/to/ddptrain/bench/bench_ckpt.sh [--quick] [--dir DIR] [ROUNDS]
# With BENCH_CSV=FILE the numbers are also appended to FILE (bench/lib.sh).
# --dir DIR (or CKPT_BENCH_DIR): where the checkpoints and dd files go, so the
# disk under test can be chosen (default: a temporary directory under
# ${TMPDIR:-/tmp}); the script writes only into a new subdirectory of DIR and
# removes it at the end.  --quick: the two smaller sizes, one round.
# ROUNDS (default 3): each round runs ddptrain once per size (CKPTS checkpoints,
# default 5) and dd REPS times (default 5) on the same bytes.
# Exit status: 0 whether or not the target is met; 1 when something is broken
# (ddptrain or dd fails, a checkpoint is missing or has the wrong size); 2 usage.
set -eu
quick=0
dir=${CKPT_BENCH_DIR:-}
rounds=3
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --dir) [ $# -ge 2 ] || { echo "bench_ckpt.sh: --dir needs a directory" >&2; exit 2; }
           dir=$2; shift ;;
    --dir=*) dir=${1#--dir=} ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench_ckpt.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) rounds=$1 ;;
  esac
  shift
done
DDPTRAIN=${DDPTRAIN:-./ddptrain}
DDPPREP=${DDPPREP:-./ddptrain-prep}
CKPTS=${CKPTS:-5}
REPS=${REPS:-5}
[ -x "$DDPTRAIN" ] && [ -x "$DDPPREP" ] || {
  echo "bench_ckpt.sh: run from a build directory after 'make' (or set DDPTRAIN and DDPPREP)" >&2; exit 2; }
if [ "$quick" = 1 ]; then
  rounds=1; CKPTS=${CKPTS_QUICK:-3}; REPS=${REPS_QUICK:-3}
fi
if [ -n "$dir" ]; then
  [ -d "$dir" ] && [ -w "$dir" ] || { echo "bench_ckpt.sh: --dir $dir: not a writable directory" >&2; exit 2; }
  tmp=$(mktemp -d "$dir/bench_ckpt.XXXXXX")
else
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_ckpt.XXXXXX")
fi
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

broken() { echo "bench_ckpt.sh: $*" >&2; exit 1; }
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
now() { date +%s.%N; }

# size name, then the model: 256 input features, 10 classes; AdamW
sizes="s m l"
[ "$quick" = 1 ] && sizes="s m"
model_of() {
  case $1 in
    s) echo linear:1024,relu,linear:1024,relu,linear:10 ;;
    m) echo linear:3072,relu,linear:3072,relu,linear:10 ;;
    l) echo linear:3840,relu,linear:3840,relu,linear:3840,relu,linear:3840,relu,linear:10 ;;
  esac
}

"$DDPPREP" synthetic --classes 10 --features 256 --samples 256 --seed 1 -o "$tmp/deck.h5" >/dev/null ||
  broken "ddptrain-prep synthetic failed"
ck="$tmp/ckpt"
mkdir "$ck"

ckpt_run() { # size: one ddptrain run writing CKPTS checkpoints into $ck
  model=$(model_of "$1")
  rm -f "$ck"/*
  "$DDPTRAIN" "$tmp/deck.h5" --model "$model" --optimizer adamw --batch 8 --steps "$CKPTS" \
    --ckpt-dir "$ck" --ckpt-every 1 --keep 2 --log-every 0 --eval-every 0 --quiet \
    >"$tmp/o" 2>&1 || { cat "$tmp/o" >&2; broken "ddptrain failed (size $1)"; }
  n=$(grep -c '^checkpoint step=' "$tmp/o" || true)
  [ "$n" = "$CKPTS" ] || { cat "$tmp/o" >&2; broken "expected $CKPTS checkpoint lines, got $n (size $1)"; }
  # the newest checkpoint must be on disk with the size the line reports
  last=$(grep '^checkpoint step=' "$tmp/o" | tail -n 1)
  f=$(echo "$last" | sed 's/.* file=\([^ ]*\) .*/\1/')
  b=$(echo "$last" | sed 's/.* bytes=\([0-9]*\) .*/\1/')
  [ -f "$f" ] && [ "$(wc -c <"$f")" -eq "$b" ] || broken "checkpoint $f missing or not $b bytes"
  echo "$b" >"$tmp/$1.bytes"
  sed -n 's/^checkpoint .* bytes=\([0-9]*\) build_s=\([0-9.]*\) write_s=\([0-9.]*\) .*/\1 \2 \3/p' "$tmp/o" >>"$tmp/$1.ckpt"
}

dd_run() { # size: REPS times dd of the same byte count, keeping the 2 newest files like --keep 2
  b=$(cat "$tmp/$1.bytes")
  for i in $(seq "$REPS"); do
    t0=$(now)
    dd if=/dev/zero of="$ck/dd_$i.bin" bs=4M count="$b" iflag=count_bytes conv=fsync 2>"$tmp/e" ||
      { cat "$tmp/e" >&2; broken "dd failed"; }
    t1=$(now)
    [ "$(wc -c <"$ck/dd_$i.bin")" -eq "$b" ] || broken "dd wrote $(wc -c <"$ck/dd_$i.bin") bytes, not $b"
    echo "$t0 $t1" | awk -v b="$b" '{ print b / ($2 - $1) / 1048576 }' >>"$tmp/$1.dd"
    rm -f "$ck/dd_$((i - 2)).bin"
  done
  rm -f "$ck"/dd_*.bin
}

for _ in $(seq "$rounds"); do
  for s in $sizes; do
    ckpt_run "$s"
    dd_run "$s"
  done
done

fs=$(df -P "$ck" | awk 'NR == 2 { print $1 }')
fstype=$(df -PT "$ck" 2>/dev/null | awk 'NR == 2 { print $2 }')
printf '# bench_ckpt: AdamW MLPs, %s round(s) of %s checkpoints and %s dd runs per size; medians\n' "$rounds" "$CKPTS" "$REPS"
printf '# directory %s on %s (%s); %s\n' "$(dirname "$tmp")" "$fs" "${fstype:-?}" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-8s %12s %12s %12s %12s %8s %12s\n' "" "bytes" "ckpt" "write only" "dd+fsync" "ratio" "build share"
printf '%-8s %12s %12s %12s %12s %8s %12s\n' "" "" "(MiB/s)" "(MiB/s)" "(MiB/s)" "ckpt/dd" "(of ckpt)"
: >"$tmp/ratios"
for s in $sizes; do
  b=$(cat "$tmp/$s.bytes")
  c=$(awk '{ print $1 / ($2 + $3) / 1048576 }' "$tmp/$s.ckpt" | med)
  w=$(awk '{ print $1 / $3 / 1048576 }' "$tmp/$s.ckpt" | med)
  sh=$(awk '{ print $2 / ($2 + $3) }' "$tmp/$s.ckpt" | med)
  d=$(med <"$tmp/$s.dd")
  awk -v n="$(awk -v b="$b" 'BEGIN { printf "%.0f MiB", b / 1048576 }')" -v b="$b" -v c="$c" -v w="$w" -v d="$d" -v sh="$sh" \
    'BEGIN { printf "%-8s %12d %12.0f %12.0f %12.0f %7.0f%% %11.0f%%\n", n, b, c, w, d, 100 * c / d, 100 * sh }'
  awk -v c="$c" -v d="$d" 'BEGIN { print 100 * c / d }' >>"$tmp/ratios"
  awk '{ print $1 / ($2 + $3) / 1048576 }' "$tmp/$s.ckpt" >"$tmp/x"
  csv_rows "checkpoint-$(awk -v b="$b" 'BEGIN { printf "%.0fMiB", b / 1048576 }')" ddptrain 1 write_mib_per_s "$tmp/x" MiB/s
  csv_rows "checkpoint-$(awk -v b="$b" 'BEGIN { printf "%.0fMiB", b / 1048576 }')" dd-fsync 1 write_mib_per_s "$tmp/$s.dd" MiB/s
done
awk '{ if (NR == 1 || $1 < m) m = $1 } END {
  printf "checkpoint / dd+fsync, worst size: %.0f%% (target >= 75%%): %s\n", m, (m >= 75 ? "met" : "missed") }' "$tmp/ratios"
