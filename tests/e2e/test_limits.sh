#!/bin/sh
# test_limits.sh -- memory limits of a hostile environment, on 2 ranks.
#  - An address-space limit (ulimit -v) below what the run needs: refused
#    at start-up with one line and exit 5 (without the check, OpenBLAS spins
#    forever in the mmap of its 128 MiB work buffer, or a later malloc
#    fails somewhere); a limit just above the estimate the start-up table
#    prints: the run trains (the estimate is an upper bound).
#  - With --ckpt-dir and --save the estimate counts rank 0's checkpoint image
#    and --save's copy and image: a limit between the estimates without and
#    with them is refused at start-up (before, the run trained and failed at
#    its first checkpoint); a limit above trains and writes both.
#  - Node-shared memory (/dev/shm) too small for the model (Docker's 64 MB):
#    one warning, private buffers and the ring all-reduce, the same model as
#    with room; before the check, rank 0's MPI_Win_allocate_shared failed and
#    the other rank waited in it forever.  Needs root and unshare -m (a
#    private tmpfs on /dev/shm); skipped (77) without them after the first
#    part, or fails when DDP_REQUIRE_MOUNT=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-120}
"$DDPPREP" synthetic --classes 10 --features 64 --samples 2000 --seed 5 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
m="--model linear:1024,relu,linear:1024,relu,linear:auto --momentum 0.9 --batch 16 --log-every 0 --eval-every 0"

# run LIMIT_KIB OUT ARGS...: 2 ranks under ulimit -v LIMIT_KIB.  One malloc
# arena: otherwise the address space in use at start-up varies from run to
# run by an arena (64 MiB) per thread that happened to take one, and the
# limits below, set from one run's estimate, would not hold for the next.
run() {
  _lim=$1 _out=$2; shift 2
  (ulimit -v "$_lim" && MALLOC_ARENA_MAX=1 mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m "$@") \
    >"$_out.o" 2>"$_out.e"
}

# the estimate, under a generous limit
run 4194304 "$T/big" --steps 3 || { cat "$T/big.e"; fail "run under a 4 GiB limit"; }
need=$(sed -n 's/^  address      about \([0-9]*\) MiB per rank.*/\1/p' "$T/big.o")
[ -n "$need" ] || { cat "$T/big.o"; fail "the start-up table shows no address-space estimate under ulimit -v"; }
echo "estimate: $need MiB per rank"

# The limits keep clear of the estimate (the lower one by less than the
# BLAS buffer and the thread reserve, 216 MiB, so that start-up reaches the
# check).  Below the estimate: one line, exit 5, no hang.
run $(( (need - 120) * 1024 )) "$T/low" --steps 20
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "hang under ulimit -v $((need - 120)) MiB"
[ $rc -eq 5 ] || { cat "$T/low.e"; fail "exit $rc under a limit below the estimate, expected 5"; }
n=$(grep -c "error:" "$T/low.e")
[ "$n" -eq 1 ] || { cat "$T/low.e"; fail "$n error lines, expected 1"; }
grep -q "error: memory: each rank needs about [0-9]* MiB of address space.*more than its limit of $((need - 120)) MiB (ulimit -v)" "$T/low.e" \
  || { cat "$T/low.e"; fail "the refusal does not say what is needed and which limit"; }
grep "error:" "$T/low.e"

# Above it: trains to the end (the estimate is an upper bound).
run $(( (need + 100) * 1024 )) "$T/high" --steps 20
rc=$?
[ $rc -eq 0 ] || { tail -n 5 "$T/high.e"; fail "exit $rc under ulimit -v $((need + 100)) MiB (the estimate is $need)"; }
grep -q "^done: 20 steps" "$T/high.o" || fail "no done line under the limit above the estimate"

# ---- checkpoint and --save buffers ----------------------------------------
# Rank 0 builds each checkpoint (and the --save file) as an image in memory
# beside host copies of the weights and optimizer state: with --ckpt-dir and
# --save the estimate counts them (AdamW, 17M parameters: about 330 MiB more
# than without them, beyond the writer thread's 72 MiB).  Between the
# estimate without them and the one with them the run is refused at start-up
# with the usual line; before, it trained and failed at its first checkpoint.
# Above it: checkpoints and --save are written.
mc="--model linear:4096,relu,linear:4096,relu,linear:auto --optimizer adamw"
runc() {
  _lim=$1 _out=$2; shift 2
  (ulimit -v "$_lim" && MALLOC_ARENA_MAX=1 mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m $mc "$@") \
    >"$_out.o" 2>"$_out.e"
}
est() { sed -n 's/^  address      about \([0-9]*\) MiB per rank.*/\1/p' "$1"; }
runc 4194304 "$T/c0" --steps 2 || { cat "$T/c0.e"; fail "the larger model under a 4 GiB limit"; }
runc 4194304 "$T/c1" --steps 2 --ckpt-dir "$T/ck1" --ckpt-every 1 --save "$T/w1.h5" \
  || { cat "$T/c1.e"; fail "the larger model with checkpoints under a 4 GiB limit"; }
n0=$(( $(est "$T/c0.o") + 72 )) n1=$(est "$T/c1.o")
echo "estimate: $n0 MiB without the files' buffers (with the writer thread), $n1 MiB with them"
[ $((n1 - n0)) -ge 240 ] \
  || fail "the estimate counts $((n1 - n0)) MiB for the checkpoint and --save buffers, expected about 330"
mid=$(( (n0 + n1) / 2 ))
runc $((mid * 1024)) "$T/cmid" --steps 2 --log-every 1 --ckpt-dir "$T/ck2" --ckpt-every 1 \
  --save "$T/w2.h5"
rc=$?
[ $rc -eq 5 ] || { cat "$T/cmid.o" "$T/cmid.e"; fail "exit $rc under ulimit -v $mid MiB, between the estimates, expected 5"; }
grep -q "error: memory: each rank needs about $n1 MiB of address space.*checkpoint or --save copies.*more than its limit of $mid MiB (ulimit -v)" "$T/cmid.e" \
  || { cat "$T/cmid.e"; fail "under ulimit -v $mid MiB: not the start-up refusal"; }
grep -q "^step " "$T/cmid.o" && fail "under ulimit -v $mid MiB: trained before refusing"
ls "$T/ck2"/ckpt_* >/dev/null 2>&1 && fail "under ulimit -v $mid MiB: a checkpoint was written"
runc $(( (n1 + 100) * 1024 )) "$T/chigh" --steps 2 --ckpt-dir "$T/ck3" --ckpt-every 1 \
  --save "$T/w3.h5" || { tail -n 5 "$T/chigh.e"; fail "exit under ulimit -v $((n1 + 100)) MiB with checkpoints and --save"; }
[ -f "$T/ck3/ckpt_00000001.h5" ] && [ -f "$T/w3.h5" ] || fail "no checkpoint or --save file under the limit above the estimate"
rm -rf "$T"/ck* "$T"/w*.h5
echo "ok: checkpoint and --save buffers counted: refused at start-up under $mid MiB, written under $((n1 + 100)) MiB"

# ---- node-shared memory ---------------------------------------------------
if [ "$(id -u)" != 0 ] || ! unshare -m sh -c 'mount -t tmpfs -o size=16m tmpfs /dev/shm' 2>/dev/null; then
  ddp_skip DDP_REQUIRE_MOUNT "the /dev/shm case needs root and unshare -m / mount"
fi
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --steps 10 --save "$T/room.h5" >"$T/room.o" 2>"$T/room.e" \
  || { cat "$T/room.e"; fail "reference run with room in /dev/shm"; }
grep -q "node-shared memory" "$T/room.e" && fail "a warning about /dev/shm with room there"
T=$T m=$m DDPTRAIN=$DDPTRAIN unshare -m sh -c '. ./testenv.sh
  mount -t tmpfs -o size=16m tmpfs /dev/shm || exit 99
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --steps 10 --save "$T/small.h5" >"$T/small.o" 2>"$T/small.e"'
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "hang with a 16 MiB /dev/shm"
[ $rc -eq 0 ] || { cat "$T/small.e"; fail "exit $rc with a 16 MiB /dev/shm, expected 0 (private buffers)"; }
n=$(grep -c "warning: node-shared memory: .* MiB in /dev/shm (2 ranks on this node), which has .* MiB free; using private buffers and the ring all-reduce.*--shm-size=" "$T/small.e")
[ "$n" -eq 1 ] || { cat "$T/small.e"; fail "$n warnings about /dev/shm, expected 1"; }
grep "warning:" "$T/small.e" | cut -c1-200
"$top_builddir/tests/tools/weights_cmp" "$T/room.h5" "$T/small.h5" 0 >"$T/cmp" \
  || { cat "$T/cmp"; fail "the run on private buffers trained another model"; }
echo "ok: $(tail -n 1 "$T/cmp")"
