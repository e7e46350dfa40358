#!/bin/sh
# test_harness.sh -- make check's own harness, tests/run-test, on two small
# scripts of its own (in a directory of this test, as make check runs them in
# the build's tests/ directory):
# - a script named in DDP_ALONE_TESTS runs with no other test beside it: it
#   waits for a running test to end, and a test started while it runs waits
#   for it (the intervals the scripts record do not overlap);
# - a script named in DDP_TIMED_TESTS runs at the priority run-test was
#   started at, every other test 10 lower (nice), at most 19;
# - a script runs under a timeout: a script that hangs is killed after twice
#   DDP_TEST_TIMEOUT (here 2 x 2 s) and fails with 124.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
command -v flock >/dev/null 2>&1 || fail "flock (util-linux) is not installed: run-test needs it"
RUNTEST="$top_srcdir/tests/run-test"
cp ./testenv.sh "$T/testenv.sh" || fail "copying testenv.sh"
mkdir "$T/e2e" || fail "mkdir"
# a script that records when it ran: START END in $T/NAME.times, and its niceness
cat >"$T/e2e/rec.sh" <<'SH'
name=$1 secs=$2
s=$(date +%s.%N)
sleep "$secs"
echo "$s $(date +%s.%N)" >"$name.times"
nice >"$name.nice"
SH
cp "$T/e2e/rec.sh" "$T/e2e/alone.sh" && cp "$T/e2e/rec.sh" "$T/e2e/timed.sh" || fail "cp"
printf 'sleep 30\n' >"$T/e2e/hang.sh"
cd "$T" || fail "cd $T"
unset DDP_TEST_LOCKED
export DDP_ALONE_TESTS="e2e/alone.sh" DDP_TIMED_TESTS="e2e/timed.sh"
base=$(nice)

# a shared test runs 2 s; the alone one starts while it runs (and waits for
# it), a second shared one while the alone one runs (1.5 s from about 2 s);
# flock does not stop a shared test that starts while the alone one still
# waits, so the second one starts after the first one ended
"$RUNTEST" e2e/rec.sh a 2 & pa=$!
sleep 0.5
"$RUNTEST" e2e/alone.sh alone 1.5 & pb=$!
sleep 2.1
"$RUNTEST" e2e/rec.sh c 1 & pc=$!
wait $pa && wait $pb && wait $pc || fail "run-test of the recording scripts failed"
for n in a alone c; do [ -s "$n.times" ] || fail "$n did not run"; done
# alone.times must not overlap a.times nor c.times
cat a.times alone.times c.times | awk 'NR == 1 { a0 = $1; a1 = $2 } NR == 2 { b0 = $1; b1 = $2 }
  NR == 3 { c0 = $1; c1 = $2 }
  END { ok = (b0 >= a1 || b1 <= a0) && (b0 >= c1 || b1 <= c0)
        printf "a %.2f-%.2f, alone %.2f-%.2f, c %.2f-%.2f\n", 0, a1 - a0, b0 - a0, b1 - a0, c0 - a0, c1 - a0
        exit !ok }' || fail "the alone test ran beside another: $(cat a.times alone.times c.times | tr '\n' ' ')"
echo "alone: no overlap ($(cat a.times alone.times c.times | awk 'NR == 1 { t = $1 } { printf "%.1f-%.1f ", $1 - t, $2 - t }'))"

# priorities: the timed and the alone test at run-test's, the others 10 lower
"$RUNTEST" e2e/timed.sh timed 0 || fail "run-test e2e/timed.sh"
want=$((base + 10)); [ $want -le 19 ] || want=19
[ "$(cat timed.nice)" = "$base" ] || fail "the timed test ran at nice $(cat timed.nice), expected $base"
[ "$(cat alone.nice)" = "$base" ] || fail "the alone test ran at nice $(cat alone.nice), expected $base"
[ "$(cat a.nice)" = "$want" ] || fail "a shared test ran at nice $(cat a.nice), expected $want"
echo "priorities: timed and alone at nice $base, the others at $want"

# a hanging script: killed after 2 x DDP_TEST_TIMEOUT
t0=$(date +%s)
DDP_TEST_TIMEOUT=2 "$RUNTEST" e2e/hang.sh
rc=$? dt=$(($(date +%s) - t0))
[ $rc -eq 124 ] || fail "a hanging script: exit $rc, expected 124 (timeout)"
[ $dt -le 10 ] || fail "a hanging script ran $dt s with DDP_TEST_TIMEOUT=2"
echo "a hanging script: killed after $dt s (exit 124)"
echo ok
