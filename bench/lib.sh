# bench/lib.sh -- shell functions the benchmark scripts share (sourced, not run):
# medians and min/median/max over rounds, and the rows of bench/results.csv.
#
# results.csv, written by `make bench` (bench/suite.sh) or by any bench script
# run with BENCH_CSV=FILE, has one row per measured quantity:
#   case,implementation,ranks,metric,min,median,max,unit
# min/median/max over the rounds of that run (equal for a single value).

# median of the numbers on stdin, one per line
med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# stats FILE: "min median max" of the numbers in FILE
stats() { printf '%s %s %s\n' "$(sort -g "$1" | head -n 1)" "$(med <"$1")" "$(sort -g "$1" | tail -n 1)"; }

# scale_each FILE EXPR: each number v of FILE through the awk expression EXPR of v
scale_each() { awk "{ v = \$1; print $2 }" "$1"; }

# csv_rows CASE IMPL RANKS METRIC FILE UNIT: one results.csv row from the
# per-round numbers in FILE (nothing without BENCH_CSV or with FILE empty)
csv_rows() {
  [ -n "${BENCH_CSV:-}" ] && [ -s "$5" ] || return 0
  set -- "$1" "$2" "$3" "$4" "$(stats "$5")" "$6"
  echo "$5" | awk -v c="$1" -v i="$2" -v r="$3" -v m="$4" -v u="$6" \
    '{ printf "%s,%s,%s,%s,%.6g,%.6g,%.6g,%s\n", c, i, r, m, $1, $2, $3, u }' >>"$BENCH_CSV"
}

# csv_value CASE IMPL RANKS METRIC VALUE UNIT: a row of one value
csv_value() {
  [ -n "${BENCH_CSV:-}" ] || return 0
  awk -v c="$1" -v i="$2" -v r="$3" -v m="$4" -v v="$5" -v u="$6" \
    'BEGIN { printf "%s,%s,%s,%s,%.6g,%.6g,%.6g,%s\n", c, i, r, m, v, v, v, u }' >>"$BENCH_CSV"
}

# mpirun as these benchmarks start it: one rank per core, unbound, as root too
bench_mpirun() {
  if [ "$(id -u)" = 0 ]; then mpirun --bind-to none --allow-run-as-root "$@"; else mpirun --bind-to none "$@"; fi
}
