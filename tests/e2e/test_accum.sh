#!/bin/sh
# test_accum.sh -- gradient accumulation: np=2, batch 8, --accum 2 gives the
# model of np=2, batch 16, --accum 1 (no BN: SyncBN statistics are per
# micro-batch by design); and the gradient bytes all-reduced per step do not
# depend on K: the first K-1 micro-batches communicate nothing.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 5 --features 16 --samples 800 --seed 4 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--model linear:32,relu,dropout:0.1,linear:auto --steps 12 --log-every 4 --eval-every 0 --seed 5"
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --accum 2 --save "$T/k2.h5" >"$T/k2" 2>&1 \
  || { cat "$T/k2"; fail "accum 2"; }
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --batch 16 --accum 1 --save "$T/k1.h5" >"$T/k1" 2>&1 \
  || { cat "$T/k1"; fail "accum 1"; }
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --batch 4 --accum 4 --save "$T/k4.h5" >"$T/k4" 2>&1 \
  || { cat "$T/k4"; fail "accum 4"; }
"$WEIGHTS_CMP" "$T/k2.h5" "$T/k1.h5" 1e-5 >"$T/cmp" || { cat "$T/cmp"; fail "accum 2 != batch 2B"; }
echo "accum 2 vs batch 2B: $(tail -n 1 "$T/cmp")"
"$WEIGHTS_CMP" "$T/k4.h5" "$T/k1.h5" 1e-5 >"$T/cmp" || { cat "$T/cmp"; fail "accum 4 != batch 4B"; }
echo "accum 4 vs batch 4B: $(tail -n 1 "$T/cmp")"
b1=$(ddp_field "$T/k1" grad_bytes); b2=$(ddp_field "$T/k2" grad_bytes); b4=$(ddp_field "$T/k4" grad_bytes)
c1=$(ddp_field "$T/k1" grad_allreduces); c4=$(ddp_field "$T/k4" grad_allreduces)
[ -n "$b1" ] && [ "$b1" -gt 0 ] || fail "no gradient byte count in the summary"
[ "$b1" = "$b2" ] && [ "$b1" = "$b4" ] || fail "gradient bytes depend on --accum: $b1 $b2 $b4"
[ "$c1" = "$c4" ] || fail "all-reduce calls depend on --accum: $c1 vs $c4"
# 12 steps x (32x16+32 + 5x32+5 floats) x 4 bytes
[ "$b1" -eq $((12 * (32 * 16 + 32 + 5 * 32 + 5) * 4)) ] || fail "unexpected gradient bytes $b1"
echo ok
