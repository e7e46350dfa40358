#!/bin/sh
# test_cli.sh -- the command line: --help lists every option with its
# default, --version names the build, bad usage is one clear line + exit 2.
. ./testenv.sh || exit 99
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp -d) || exit 99
trap 'rm -rf "$out"' EXIT

"$DDPTRAIN" --help >"$out/help" 2>&1 || fail "--help exited non-zero"
for opt in model batch epochs lr optimizer bucket-cap-mb grad-compress accum sync-bn save init; do
  grep -q -- "--$opt" "$out/help" || fail "--help does not list --$opt"
done
grep -q "default: 64" "$out/help" || fail "--help shows no default for --batch"

"$DDPTRAIN" --version >"$out/version" 2>&1 || fail "--version exited non-zero"
for what in "ddptrain" "compute backends" "MPI" "HDF5" "CUDA" "NCCL" "BLAS" "libsodium"; do
  grep -q "$what" "$out/version" || fail "--version lacks '$what'"
done
# the backend lines print the registries (check_kernels and check_comm hold
# the registries to configure's lists, m4/ddp_backends.m4)
backends() { sed -n "s/^  $1 backends *: //p" "$out/version"; }
[ "$(backends compute)" = "$DDP_COMPUTE_BACKENDS" ] ||
  fail "--version lists compute backends '$(backends compute)', configure built '$DDP_COMPUTE_BACKENDS'"
[ "$(backends comm)" = "$DDP_COMM_BACKENDS" ] ||
  fail "--version lists comm backends '$(backends comm)', configure built '$DDP_COMM_BACKENDS'"
[ -n "$DDP_COMPUTE_BACKENDS" ] && [ -n "$DDP_COMM_BACKENDS" ] || fail "configure lists no backends"

# usage errors: exit code 2, one line on stderr naming the problem
"$DDPTRAIN" --bacth 3 x.h5 >"$out/o" 2>"$out/e"; rc=$?
[ "$rc" -eq 2 ] || fail "unknown option: exit $rc, expected 2"
grep -q "unknown option 'bacth'" "$out/e" || fail "unknown option message: $(cat "$out/e")"
[ "$(grep -c 'ddptrain: error' "$out/e")" -eq 1 ] || fail "expected one error line: $(cat "$out/e")"

"$DDPTRAIN" >"$out/o" 2>"$out/e"; rc=$?
[ "$rc" -eq 2 ] || fail "no input: exit $rc, expected 2"
grep -q "no input file" "$out/e" || fail "no input message: $(cat "$out/e")"

# --comm: a comm backend the build lacks, or one that cannot move the memory
# --device computes in, is a usage error naming it (the backends are chosen
# before any input is read)
"$DDPPREP" synthetic --classes 2 --features 4 --samples 64 -o "$out/tiny.h5" >/dev/null ||
  fail "ddptrain-prep synthetic failed"
"$DDPTRAIN" --device cpu --comm nccl "$out/tiny.h5" >"$out/o" 2>"$out/e"; rc=$?
[ "$rc" -eq 2 ] || fail "--comm nccl with --device cpu: exit $rc, expected 2"
grep -q -- "--comm nccl" "$out/e" || fail "--comm nccl message: $(cat "$out/e")"
[ "$(grep -c 'ddptrain: error' "$out/e")" -eq 1 ] || fail "--comm nccl: expected one error line"
"$DDPTRAIN" --comm tcp "$out/tiny.h5" >"$out/o" 2>"$out/e"; rc=$?
[ "$rc" -eq 2 ] || fail "--comm tcp: exit $rc, expected 2"

# a missing input file is an input error (3) with the file named, on 2 ranks too
if [ -n "$MPIEXEC" ]; then
  mpirun_np 2 "$DDPTRAIN" "$out/missing.h5" >"$out/o" 2>"$out/e"; rc=$?
  [ "$rc" -ne 0 ] || fail "missing input on 2 ranks: exit 0"
  grep -q "missing.h5" "$out/e" || fail "missing input message: $(cat "$out/e")"
  [ "$(grep -c 'ddptrain: error' "$out/e")" -eq 1 ] || fail "2 ranks: expected one error line: $(cat "$out/e")"
fi
echo "ok"
