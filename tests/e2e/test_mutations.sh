#!/bin/sh
# test_mutations.sh -- the mutation list stays usable (the mutation runs
# themselves are `make mutate`, hours long, not part of make check): every
# pattern of tests/mutation/mutations.txt still applies to the source
# exactly once, every mutation names a promise of tests/mutation/promises.txt,
# and every test it names exists; and tests/mutation/mutate refuses a
# promise that is not in the list, a mutation without a promise and a
# pattern that no longer matches.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
M="$top_srcdir/tests/mutation"
TMPDIR=$T sh "$M/mutate" -n -s "$top_srcdir" >"$T/out" 2>&1
rc=$?
[ $rc -eq 0 ] || { grep -E "stale|mutate:" "$T/out"; fail "mutate -n: exit $rc (a pattern no longer applies: update tests/mutation/mutations.txt)"; }
n=$(grep -c '^mutation ' "$M/mutations.txt")
grep -q "^applies $n, stale 0 " "$T/out" || { tail -n 5 "$T/out"; fail "mutate -n did not report $n mutations applying"; }
grep "^promises: " "$T/out"
# every test a mutation names is a test of make check (listed in
# tests/Makefile.am; a script also exists)
for t in $(sed -n 's/^tests //p' "$M/mutations.txt" | tr ' ' '\n' | sort -u); do
  grep -q "[[:space:]]$t\([[:space:]]\|\$\)" "$top_srcdir/tests/Makefile.am" ||
    fail "mutations.txt names the test $t, which tests/Makefile.am does not list"
  case $t in
    *.sh) [ -f "$top_srcdir/tests/$t" ] || fail "mutations.txt names the test $t, which does not exist" ;;
  esac
done
echo "ok: $n mutations apply, each names a promise and existing tests"

# the tool's refusals, on small lists beside a copy of the promises
cp "$M/promises.txt" "$T/promises.txt" || exit 99
first=$(sed -n 's/^\([a-z0-9-]*\):.*/\1/p' "$T/promises.txt" | head -n 1)
list() { # NAME PROMISE-LINE FROM
  printf 'mutation %s: a test mutation\nfile src/guards/signals.c\ntests unit/check_signals\n%s\n- %s\n+ %s\n' \
    "$1" "$2" "$3" "/* mutated */ $3" >"$T/list.txt"
}
list good "promise $first" 'if ((first == SIGTERM || first == SIGINT) && signo != SIGUSR1) {'
TMPDIR=$T sh "$M/mutate" -n -s "$top_srcdir" -l "$T/list.txt" >"$T/o" 2>&1 || { cat "$T/o"; fail "a good list refused"; }
list badname "promise no-such-promise" 'if ((first == SIGTERM || first == SIGINT) && signo != SIGUSR1) {'
TMPDIR=$T sh "$M/mutate" -n -s "$top_srcdir" -l "$T/list.txt" >"$T/o" 2>&1
[ $? -eq 3 ] && grep -q "promise 'no-such-promise' is not in" "$T/o" || { cat "$T/o"; fail "an unknown promise was not refused"; }
list nopromise "" 'if ((first == SIGTERM || first == SIGINT) && signo != SIGUSR1) {'
TMPDIR=$T sh "$M/mutate" -n -s "$top_srcdir" -l "$T/list.txt" >"$T/o" 2>&1
[ $? -eq 3 ] && grep -q "needs a 'promise' line" "$T/o" || { cat "$T/o"; fail "a mutation without a promise was not refused"; }
list stale "promise $first" 'this text is not in signals.c'
TMPDIR=$T sh "$M/mutate" -n -s "$top_srcdir" -l "$T/list.txt" >"$T/o" 2>&1
[ $? -eq 2 ] && grep -q "stale" "$T/o" || { cat "$T/o"; fail "a stale pattern was not reported"; }
echo "ok: unknown promises, missing promises and stale patterns refused"
echo ok
