#!/bin/sh
# test_start_agreement.sh -- the start-up agreement on the options, before
# anything whose collectives depend on them (optagree.h), at 2 ranks started
# as MPMD (one option differs on one rank) or from two directories (a stale
# node-local copy of the deck): each case ends within its timeout (a hang
# is a failure) with exit 6 and one error line naming the option, both
# values and where they came from:
#   - --debug-collectives on rank 1 only (its check starts collectively);
#   - --timeout 0 on rank 1 only (the watchdog starts collectively);
#   - a deck whose /config sets debug-collectives on one node only;
#   - --help on rank 1 only; --help on every rank prints the help once, exit 0;
# and start-up refusals of values that would mislead (exit 2):
#   - --inject aimed at a rank the job does not have;
#   - --timeout shorter than 1 s (the watchdog would call healthy ranks stopped).
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
MK="$top_builddir/tests/tools/make_bad_deck"
mkdir -p "$T/a" "$T/b"
"$MK" good "$T/a/d.h5" && "$MK" config-debug "$T/b/d.h5" || fail "make_bad_deck"
c="--model linear:8,relu,linear:auto --batch 8 --steps 3 --log-every 0 --eval-every 0"
d="$T/a/d.h5"

# mpmd NAME ARGS-OF-RANK-1...: rank 0 runs with $c, rank 1 with $c and ARGS
mpmd() {
  _n=$1; shift
  timeout -k 10 60 $MPIEXEC $DDP_MPIEXEC_FLAGS -np 1 "$DDPTRAIN" "$d" $c \
    : -np 1 "$DDPTRAIN" "$d" $c "$@" >"$T/$_n.o" 2>"$T/$_n.e"
  rc=$?
}

mpmd dbg --debug-collectives
ddp_expect_error "$T/dbg.e" $rc 6 "--debug-collectives on rank 1 only" \
  "ranks disagree on --debug-collectives: rank 0 has 'false' (default), rank 1 has 'true' (from the command line)"

mpmd timeout0 --timeout 0
ddp_expect_error "$T/timeout0.e" $rc 6 "--timeout 0 on rank 1 only" \
  "ranks disagree on --timeout: rank 0 has '600' (default), rank 1 has '0' (from the command line)"

mpmd help --help
ddp_expect_error "$T/help.e" $rc 6 "--help on rank 1 only" \
  "ranks disagree on --help or --version: rank 0 has 'run', rank 1 has '--help'"

timeout -k 10 60 $MPIEXEC $DDP_MPIEXEC_FLAGS -np 1 sh -c "cd '$T/a' && exec '$DDPTRAIN' d.h5 $c" \
  : -np 1 sh -c "cd '$T/b' && exec '$DDPTRAIN' d.h5 $c" >"$T/stale.o" 2>"$T/stale.e"
ddp_expect_error "$T/stale.e" $? 6 "a deck whose /config differs on one node" \
  "ranks disagree on --debug-collectives: rank 0 has 'false' (default), rank 1 has 'true' (from the input file's /config)"

timeout -k 10 60 $MPIEXEC $DDP_MPIEXEC_FLAGS -np 2 "$DDPTRAIN" --help >"$T/helpall.o" 2>"$T/helpall.e"
rc=$?
[ $rc -eq 0 ] || { cat "$T/helpall.e"; fail "--help on every rank: exit $rc"; }
[ "$(grep -c '^Usage: ddptrain' "$T/helpall.o")" -eq 1 ] || { cat "$T/helpall.o"; fail "--help on 2 ranks: not printed once"; }

DDP_TEST_TIMEOUT=60 mpirun_np 2 "$DDPTRAIN" "$d" $c --inject hang:2:2 >"$T/inj.o" 2>"$T/inj.e"
ddp_expect_error "$T/inj.e" $? 2 "--inject at rank 2 of 2" \
  "--inject names rank 2, but the job has 2 ranks (0-1)"

DDP_TEST_TIMEOUT=60 mpirun_np 2 "$DDPTRAIN" "$d" $c --timeout 0.001 >"$T/short.o" 2>"$T/short.e"
ddp_expect_error "$T/short.e" $? 2 "--timeout 0.001" \
  "--timeout 0.001 is too short to tell a hang from a slow step; give 0 (the watchdog off) or at least 1 s"
echo ok
