#!/bin/sh
# bench_loader.sh -- loader throughput against a raw pread of the same bytes
# (hot page cache, same run), and the loader's peak RSS as N grows 10x.
#
# Run from a configured build directory after `make -C bench bench`:
#     sh /path/to/ddptrain/bench/bench_loader.sh
# Environment: BENCH (default ./bench/bench_loader), BATCHES ("64 256"),
# REPS (5), KEEP=1 keeps the generated files.  Needs ~2 GB in $TMPDIR.
#
# Prints one table per (data set, batch, order) -- see bench_loader.c for the
# modes -- then the RSS lines; exits non-zero if the peak RSS grows by more
# than 10% when N grows 10x.
# With BENCH_CSV=FILE the samples/s of each mode are also appended to FILE
# (bench/lib.sh; "best of REPS", so min = median = max).
set -eu
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
BENCH=${BENCH:-./bench/bench_loader}
BATCHES=${BATCHES:-64 256}
REPS=${REPS:-5}
[ -x "$BENCH" ] || { echo "bench_loader.sh: $BENCH not found; run 'make -C bench bench' in the build directory" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/bench_loader.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$dir"' EXIT

echo "# generating inputs in $dir"
"$BENCH" gen "$dir/fm-200k.h5" 200000 1 28 28     # Fashion-MNIST-sized, 157 MB
"$BENCH" gen "$dir/c32-50k.h5" 50000 3 32 32      # CIFAR-sized, 154 MB
"$BENCH" gen "$dir/fm-20k.h5" 20000 1 28 28       # for the RSS comparison
"$BENCH" gen "$dir/fm-2m.h5" 2000000 1 28 28      # 1.6 GB
cat "$dir"/*.h5 >/dev/null                        # hot page cache

echo "# host: $(uname -srm), $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
for f in fm-200k c32-50k; do
  for b in $BATCHES; do
    for order in seq random; do
      "$BENCH" run "$dir/$f.h5" "$b" "$order" "$REPS" | tee "$dir/out"
      echo
      awk '!/^#/ && NF >= 3 { print $1, $2 }' "$dir/out" | while read -r mode sps; do
        csv_value "loader-$f-b$b-$order" "$mode" 1 samples_per_s "$sps" samples/s
      done
    done
  done
done

echo "# peak RSS of a process running the loader (prefetch 4, batch 64, random order,"
echo "# 3000 batches) as N grows 10x and 100x"
r1=$("$BENCH" rss "$dir/fm-20k.h5" 64 3000)
r2=$("$BENCH" rss "$dir/fm-200k.h5" 64 3000)
r3=$("$BENCH" rss "$dir/fm-2m.h5" 64 3000)
printf '  %s\n  %s\n  %s\n' "$r1" "$r2" "$r3"
kib() { echo "$1" | sed 's/.*peak RSS \([0-9]*\) KiB.*/\1/'; }
status=0
for pair in "$r1|$r2" "$r2|$r3"; do
  a=$(kib "${pair%%|*}") b=$(kib "${pair##*|}")
  pct=$(( (b - a) * 100 / a ))
  if [ $(( (b - a) * 10 )) -le "$a" ]; then verdict=ok; else verdict="FAIL (> 10%)"; status=1; fi
  echo "  N x10: $a KiB -> $b KiB (+$pct%): $verdict"
done
exit $status
