# diagnose_lib.sh -- sourced by test_diagnose.sh and test_diagnose_report.sh
# (after testenv.sh): check_report, run_diag and expect_verdict.

# check_report OUT NP WHAT: the report of a finished diagnosis at NP ranks
check_report() {
  _o=$1 _np=$2 _what=$3
  grep -q "^diagnose: $_np rank" "$_o" || { cat "$_o"; fail "$_what: no report header"; }
  for r in $(seq 0 $((_np - 1))); do
    for m in normal no-comm in-memory; do
      grep -q "^ *$r  $m " "$_o" || { cat "$_o"; fail "$_what: no row for rank $r, mode $m"; }
    done
  done
  [ "$(grep -c '^verdict: ' "$_o")" -eq 1 ] || { cat "$_o"; fail "$_what: not one verdict line"; }
  [ "$(grep -c '^next: ' "$_o")" -eq 1 ] || { cat "$_o"; fail "$_what: not one next line"; }
  # the rows: the five parts sum to at most the step, compute at most the
  # step (3 decimals each: up to 0.003 ms of rounding)
  awk '/^ *[0-9]+  (normal|no-comm|in-memory) / && $3 != "n/a" {
         if ($4 + $5 + $6 + $7 + $8 > $3 + 0.003 || $9 > $3 + 0.001 || $4 < 0 || $7 < 0) {
           print "inconsistent row: " $0; bad = 1 } }
       END { exit bad }' "$_o" || { cat "$_o"; fail "$_what: a row's parts exceed its step"; }
  if [ "$_np" -gt 1 ]; then
    line=$(grep "^all-reduce alone: " "$_o")
    # (4 significant digits each)
    echo "$line" | sed 's/.*algbw \([0-9.e+-]*\) GB\/s, busbw \([0-9.e+-]*\) GB\/s.*/\1 \2/' \
      | awk -v n="$_np" '{ want = $1 * 2 * (n - 1) / n; d = $2 - want; if (d < 0) d = -d
                           exit !(NF == 2 && $1 > 0 && d <= 2e-3 * want) }' \
      || { cat "$_o"; fail "$_what: busbw is not algbw x 2(n-1)/n: $line"; }
    grep "^overlap fraction: " "$_o" | awk '{ exit !($3 >= 0 && $3 <= 1) }' \
      || { cat "$_o"; fail "$_what: overlap fraction outside [0, 1]"; }
  else
    grep -q "^ *0  no-comm *n/a (1 rank)" "$_o" || { cat "$_o"; fail "$_what: no-comm not n/a"; }
    grep -q "^all-reduce alone: n/a (1 rank)" "$_o" || { cat "$_o"; fail "$_what: all-reduce not n/a"; }
  fi
}

# run_diag OUT NP WHAT ARGS...: a diagnosis that must finish with exit 0
run_diag() {
  _o=$1 _np=$2 _what=$3
  shift 3
  mpirun_np "$_np" "$DDPTRAIN" --diagnose "$@" >"$_o" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$_o"; fail "$_what: exit $rc, expected 0"; }
  check_report "$_o" "$_np" "$_what"
  echo "$_what: $(grep '^verdict: ' "$_o")"
}

# expect_verdict OUT WHAT VERDICT
expect_verdict() {
  grep -qx "verdict: $3" "$1" || { cat "$1"; fail "$2: expected 'verdict: $3'"; }
}
