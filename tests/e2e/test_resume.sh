#!/bin/sh
# test_resume.sh -- checkpoints and --resume give the run that was not
# interrupted: at 2 ranks a run stopped at step k (by --steps k, by a
# --ckpt-every checkpoint, or by SIGUSR1 sent to rank 1) and resumed with
# --resume auto ends with bitwise the weights of the uninterrupted run
# (SGD with momentum, AdamW, cosine schedule with warm-up, dropout,
# --augment, --accum 2, --no-sync-bn's per-rank BatchNorm statistics; in the
# middle of an epoch, at an epoch boundary, with --steps and with --epochs);
# resumed at another world size with the same global batch it matches to
# 1e-5; the resume is real (the start-up line, the steps left, weights unlike
# a fresh run of the remaining steps, the checkpoint's weights when nothing
# is left); --keep K leaves the newest K checkpoints, --keep 0 all.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --val 100 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --seed 3 -o "$T/nv.h5" \
  >/dev/null || fail "ddptrain-prep synthetic (no /val)"
"$MAKE_DECK" images "$T/img.h5" 256 || fail "make_deck images"
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-120}

# run NP OUT ARGS...: ddptrain on NP ranks (1: started directly), which must succeed
run() {
  _n=$1 _o=$2; shift 2
  if [ "$_n" = 1 ]; then
    timeout -k 10 "$DDP_TEST_TIMEOUT" "$DDPTRAIN" "$@" >"$_o" 2>&1
  else
    mpirun_np "$_n" "$DDPTRAIN" "$@" >"$_o" 2>&1
  fi || { cat "$_o"; fail "ddptrain on $_n ranks: $*"; }
}
# same A B TOL WHAT: weights_cmp within TOL (0: bitwise)
same() {
  "$WEIGHTS_CMP" "$1" "$2" "$3" >"$T/cmp" 2>&1 || { cat "$T/cmp"; fail "$4: not within $3"; }
}
# resumed OUT CKPT STEP LEFT: OUT resumed from CKPT at STEP and trained LEFT steps
resumed() {
  grep -qF "  resume       $2: step $3," "$1" || { cat "$1"; fail "no start-up line: resume $2: step $3"; }
  grep -q "^done: $4 steps" "$1" || { cat "$1"; fail "resumed at step $3: expected $4 steps trained"; }
}
# from CKPT DIR: a fresh --ckpt-dir DIR holding only CKPT (resume auto takes it)
from() { mkdir "$2" && cp "$1" "$2/" || fail "copying $1"; }
q="--log-every 0 --eval-every 0"

# 1. SGD with momentum 0.9, dropout, --accum 2, a cosine schedule with
# warm-up (its horizon is --steps, so the interruptions are checkpoints of the
# full run: every 10 steps and at the epoch's end, step 37), resumed in the
# middle of epoch 1 (step 20) and at the boundary (step 37)
m1="--model linear:16,relu,dropout:0.2,linear:auto --momentum 0.9 --lr 0.05 --batch 4 --accum 2 \
  --lr-schedule cosine --warmup-steps 5 --seed 5 $q"
run 2 "$T/o" "$T/d.h5" $m1 --steps 60 --ckpt-dir "$T/c1" --ckpt-every 10 --ckpt-every-epochs 1 \
  --keep 0 --save "$T/full1.h5"
grep -q "37 per epoch" "$T/o" || { cat "$T/o"; fail "expected 37 steps per epoch"; }
for k in 20 37; do
  from "$T/c1/ckpt_000000$k.h5" "$T/c1_$k"
  run 2 "$T/o" "$T/d.h5" $m1 --steps 60 --ckpt-dir "$T/c1_$k" --resume auto --save "$T/r1_$k.h5"
  resumed "$T/o" "$T/c1_$k/ckpt_000000$k.h5" $k $((60 - k))
  same "$T/full1.h5" "$T/r1_$k.h5" 0 "momentum+dropout+accum+cosine, resumed at step $k"
done
echo "ok: SGD momentum, dropout, --accum 2, cosine + warm-up: resumed at steps 20 and 37 bitwise"

# 2. AdamW, a conv model on images with --augment hflip,crop:2 and
# --epochs: stopped by --steps 7 (mid-epoch), then by --epochs 1 (the
# boundary, 16 steps per epoch), then on to --epochs 3
m2="--model conv:4:3:1:1,relu,gap,linear:auto --optimizer adamw --lr 0.01 --augment hflip,crop:2 \
  --batch 8 --log-every 0"
run 2 "$T/o" "$T/img.h5" $m2 --epochs 3 --save "$T/full2.h5"
grep -q "16 per epoch, 48 total" "$T/o" || { cat "$T/o"; fail "expected 16 steps per epoch"; }
run 2 "$T/o" "$T/img.h5" $m2 --steps 7 --ckpt-dir "$T/c2"
run 2 "$T/o" "$T/img.h5" $m2 --epochs 1 --ckpt-dir "$T/c2" --resume auto
resumed "$T/o" "$T/c2/ckpt_00000007.h5" 7 9
[ -f "$T/c2/ckpt_00000016.h5" ] || { ls "$T/c2"; fail "no checkpoint at the end of epoch 1"; }
run 2 "$T/o" "$T/img.h5" $m2 --epochs 3 --ckpt-dir "$T/c2" --resume auto --save "$T/r2.h5"
resumed "$T/o" "$T/c2/ckpt_00000016.h5" 16 32
same "$T/full2.h5" "$T/r2.h5" 0 "AdamW+augment, --epochs, resumed at steps 7 and 16"
echo "ok: AdamW, conv, --augment hflip,crop:2, --epochs: resumed at steps 7 and 16 bitwise"

# 3. --no-sync-bn at 2 ranks: every rank's BatchNorm statistics come back
# (/local_bn), compared as they are in the final checkpoints, and the saved
# average bitwise (the deck has no /val: see 7. for one with /val)
m3="--model linear:16,bn,relu,linear:auto --no-sync-bn --momentum 0.9 --lr 0.05 --batch 8 $q"
run 2 "$T/o" "$T/nv.h5" $m3 --steps 30 --ckpt-dir "$T/c3f" --save "$T/full3.h5"
run 2 "$T/o" "$T/nv.h5" $m3 --steps 12 --ckpt-dir "$T/c3"
run 2 "$T/o" "$T/nv.h5" $m3 --steps 30 --ckpt-dir "$T/c3" --resume auto --save "$T/r3.h5"
resumed "$T/o" "$T/c3/ckpt_00000012.h5" 12 18
same "$T/full3.h5" "$T/r3.h5" 0 "--no-sync-bn, resumed at step 12"
localbn() { h5dump -m %.9g -d /local_bn -y -w 0 "$1" | sed -n '/DATA {/,/}/p'; }
localbn "$T/c3f/ckpt_00000030.h5" >"$T/lb1"
localbn "$T/c3/ckpt_00000030.h5" >"$T/lb2"
[ "$(wc -l <"$T/lb1")" -ge 4 ] || { cat "$T/lb1"; fail "no /local_bn in a --no-sync-bn checkpoint"; }
cmp -s "$T/lb1" "$T/lb2" || { diff "$T/lb1" "$T/lb2"; fail "--no-sync-bn: per-rank statistics differ after resume"; }
echo "ok: --no-sync-bn per-rank BatchNorm statistics resumed bitwise"

# 4. a real signal: SIGUSR1 to rank 1 of a long run (no periodic
# checkpoints): exit 75, one checkpoint, the "stopped:" line; resumed to
# N + 25 steps it is bitwise the uninterrupted run of N + 25 steps
m4="--model linear:16,relu,linear:auto --momentum 0.9 --lr 0.05 --batch 8 --eval-every 0"
DDP_TEST_TIMEOUT=60 mpirun_np 2 sh -c \
  'echo $$ >"$0/pid.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}"; shift; exec "$@"' "$T" x \
  "$DDPTRAIN" "$T/d.h5" $m4 --steps 100000 --log-every 10 --ckpt-dir "$T/c4" --ckpt-every 0 \
  >"$T/o4" 2>"$T/e4" &
job=$!
# a progress line needs rank 1, which wrote its pid before it started
ddp_wait_progress "$T/o4" "$T/e4" "SIGUSR1 to rank 1"
kill -USR1 "$(cat "$T/pid.1")" || fail "cannot signal rank 1"
wait "$job"
rc=$?
[ $rc -eq 75 ] || { cat "$T/o4" "$T/e4"; fail "SIGUSR1: exit $rc, expected 75"; }
n=$(sed -n 's/^ddptrain: stopped: SIGUSR1 at step \([0-9]*\): checkpoint .* written; go on with --resume auto .*(exit code 75: requeue)$/\1/p' "$T/e4")
[ -n "$n" ] || { cat "$T/e4"; fail "SIGUSR1: no 'stopped:' line"; }
ck=$(printf '%s/c4/ckpt_%08d.h5' "$T" "$n")
grep -qF "checkpoint $ck written" "$T/e4" || { cat "$T/e4"; fail "the 'stopped:' line does not name $ck"; }
[ "$(ls "$T/c4")" = "$(basename "$ck")" ] || { ls "$T/c4"; fail "SIGUSR1: expected only $ck"; }
m=$((n + 25))
run 2 "$T/o" "$T/d.h5" $m4 --steps $m --log-every 0 --ckpt-dir "$T/c4" --resume auto --save "$T/r4.h5"
resumed "$T/o" "$ck" "$n" 25
run 2 "$T/o" "$T/d.h5" $m4 --steps $m --log-every 0 --save "$T/full4.h5"
same "$T/full4.h5" "$T/r4.h5" 0 "SIGUSR1 at step $n, resumed"
echo "ok: SIGUSR1 to rank 1 at step $n: exit 75, checkpoint, resumed to $m steps bitwise"

# 5. another world size with the same global batch (16): 2 ranks x 8 -> 4 x 4
# (BatchNorm with SGD), 4 x 4 -> 1 x 16 (AdamW, no BatchNorm), within 1e-5
# of the uninterrupted 2-rank run
m5="--model linear:16,bn,relu,linear:auto --momentum 0.9 --lr 0.05 $q"
run 2 "$T/o" "$T/d.h5" $m5 --batch 8 --steps 30 --save "$T/full5.h5"
run 2 "$T/o" "$T/d.h5" $m5 --batch 8 --steps 12 --ckpt-dir "$T/c5"
run 4 "$T/o" "$T/d.h5" $m5 --batch 4 --steps 30 --ckpt-dir "$T/c5" --resume auto --save "$T/r5.h5"
resumed "$T/o" "$T/c5/ckpt_00000012.h5" 12 18
grep -q "(saved by 2 ranks)" "$T/o" || { cat "$T/o"; fail "resume line: saved by 2 ranks"; }
same "$T/full5.h5" "$T/r5.h5" 1e-5 "2 ranks x 8 -> 4 ranks x 4"
# the resume is real: a fresh 4-rank run of the remaining 18 steps is far off
run 4 "$T/o" "$T/d.h5" $m5 --batch 4 --steps 18 --save "$T/fresh5.h5"
"$WEIGHTS_CMP" "$T/fresh5.h5" "$T/r5.h5" 1e-3 >"$T/cmp" 2>&1
[ $? -eq 1 ] || { cat "$T/cmp"; fail "the resumed run is like a fresh run of the remaining steps"; }
# nothing left to train: the checkpoint's weights come out as they are
run 2 "$T/o" "$T/d.h5" $m5 --batch 8 --steps 12 --resume "$T/c5/ckpt_00000012.h5" --save "$T/n5.h5"
grep -q "step 12, .*nothing left to train" "$T/o" || { cat "$T/o"; fail "nothing left to train"; }
same "$T/c5/ckpt_00000012.h5" "$T/n5.h5" 0 "--resume with nothing left to train"
m6="--model linear:16,relu,linear:auto --optimizer adamw --lr 0.01 $q"
run 2 "$T/o" "$T/d.h5" $m6 --batch 8 --steps 30 --save "$T/full6.h5"
run 4 "$T/o" "$T/d.h5" $m6 --batch 4 --steps 12 --ckpt-dir "$T/c6"
run 1 "$T/o" "$T/d.h5" $m6 --batch 16 --steps 30 --ckpt-dir "$T/c6" --resume auto --save "$T/r6.h5"
resumed "$T/o" "$T/c6/ckpt_00000012.h5" 12 18
same "$T/full6.h5" "$T/r6.h5" 1e-5 "AdamW, 4 ranks x 4 -> 1 rank x 16"
echo "ok: world size 2 -> 4 (BatchNorm, SGD) and 4 -> 1 (AdamW) within 1e-5; the resume is used"

# 6. --keep 2: the newest two; --keep 0: all
run 1 "$T/o" "$T/nv.h5" $m3 --steps 10 --ckpt-dir "$T/k2" --ckpt-every 2 --keep 2
[ "$(ls "$T/k2" | tr '\n' ' ')" = "ckpt_00000008.h5 ckpt_00000010.h5 " ] \
  || { ls "$T/k2"; fail "--keep 2: expected ckpt_00000008.h5 ckpt_00000010.h5"; }
run 1 "$T/o" "$T/nv.h5" $m3 --steps 10 --ckpt-dir "$T/k0" --ckpt-every 2 --keep 0
[ "$(ls "$T/k0" | tr '\n' ' ')" = "ckpt_00000002.h5 ckpt_00000004.h5 ckpt_00000006.h5 ckpt_00000008.h5 ckpt_00000010.h5 " ] \
  || { ls "$T/k0"; fail "--keep 0: expected the 5 checkpoints"; }
echo "ok: --keep 2 and --keep 0"

# 7. --no-sync-bn with a /val split: the checkpoint at the end of the
# interrupted run comes after its final evaluation, which must not have
# replaced the ranks' own statistics by their average
run 2 "$T/o" "$T/d.h5" $m3 --steps 30 --ckpt-dir "$T/c7f" --save "$T/full7.h5"
run 2 "$T/o" "$T/d.h5" $m3 --steps 12 --ckpt-dir "$T/c7"
run 2 "$T/o" "$T/d.h5" $m3 --steps 30 --ckpt-dir "$T/c7" --resume auto --save "$T/r7.h5"
localbn "$T/c7f/ckpt_00000030.h5" >"$T/lb1"
localbn "$T/c7/ckpt_00000030.h5" >"$T/lb2"
cmp -s "$T/lb1" "$T/lb2" || { diff "$T/lb1" "$T/lb2" | head -n 6; fail "--no-sync-bn with /val: per-rank statistics differ after resume (the end-of-run checkpoint holds the averaged statistics of the final evaluation)"; }
same "$T/full7.h5" "$T/r7.h5" 0 "--no-sync-bn with /val, resumed at step 12"
echo "ok: --no-sync-bn with /val resumed bitwise"
echo ok
