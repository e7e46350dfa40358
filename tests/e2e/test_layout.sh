#!/bin/sh
# test_layout.sh -- src/'s folders are layers (docs/layout.md): every file
# includes only headers of its own folder and of the folders below it, and
# header names are unique (tools/check_layout.py); and the check itself sees
# an include that runs up a layer (a copy of the tree with one added).
. ./testenv.sh || exit 99
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
check="$top_srcdir/tests/tools/check_layout.py"
"$PY" "$check" "$top_srcdir" || fail "the source tree breaks its layers (above)"

T=$(mktemp -d) || exit 99
trap 'rm -rf "$T"' EXIT
cp -R "$top_srcdir/src" "$T/src"
# the ground including the trainer's step: a layer running up
sed -i 's|#include "h5util.h"|#include "h5util.h"\n#include "step.h"|' "$T/src/ground/h5util.c"
"$PY" "$check" "$T" >"$T/out" 2>&1 && fail "an include of step.h from src/ground passed the check"
grep -q "h5util.c (ground) includes step.h (train)" "$T/out" || fail "the check did not name it: $(cat "$T/out")"
# two headers of one name
cp "$T/src/ground/clock.h" "$T/src/train/clock.h"
"$PY" "$check" "$T" >"$T/out" 2>&1 && fail "a second clock.h passed the check"
echo "ok"
