#!/bin/sh
# test_ckpt_trust.sh -- a checkpoint is believed only when it proves itself:
# edited with h5py (tests/tools/ckpt_edit.py), each is refused by --resume
# PATH with exit 3 and a line naming the attribute or dataset:
#  - a dataset's checksum removed and its weights changed;
#  - a root attribute changed (step 6 -> -50) or the /optimizer step changed
#    without the metadata checksum recomputed: fails the metadata checksum;
#  - with the checksums recomputed (so only the range checks stand): step -50
#    and 10^9, /optimizer step -5, sample cursor -640, epoch -2 and 10^6,
#    world size 0, batch 0;
#  - NaN and +Inf in exp_avg_sq, also with the checksums recomputed;
#  - --init of a --save file with a dataset's checksum removed.
# --resume auto skips a newest checkpoint that fails its metadata checksum or
# a range, with a warning, and resumes from the one before; a recomputed
# checksum over unchanged contents resumes.
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-120}
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
m="--model linear:16,bn,relu,linear:auto --optimizer adamw --batch 8 --log-every 0 --eval-every 0"
"$DDPTRAIN" "$T/d.h5" $m --steps 6 --ckpt-dir "$T/p" --ckpt-every 2 --keep 0 --save "$T/w.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "writing checkpoints 2, 4, 6"; }
c6=$T/p/ckpt_00000006.h5

# edited NEEDLE EDIT...: a copy of checkpoint 6 edited; --resume refuses it
# with exit 3 and NEEDLE (a fixed string) on its error line
edited() {
  _n=$1; shift
  cp "$c6" "$T/x.h5" && "$PY" "$top_srcdir/tests/tools/ckpt_edit.py" "$T/x.h5" "$@" \
    || fail "ckpt_edit.py $*"
  timeout -k 10 "$DDP_TEST_TIMEOUT" "$DDPTRAIN" "$T/d.h5" $m --steps 8 --resume "$T/x.h5" \
    >"$T/o" 2>"$T/e"
  _rc=$?
  [ $_rc -eq 3 ] || { cat "$T/o" "$T/e"; fail "exit $_rc, expected 3: $*"; }
  [ "$(grep -c "error:" "$T/e")" -eq 1 ] || { cat "$T/e"; fail "not one error line: $*"; }
  grep -qF -- "$_n" "$T/e" || { cat "$T/e"; fail "no '$_n': $*"; }
  grep -q "^step " "$T/o" && fail "trained before refusing: $*"
  echo "ok: $* -> $(grep error: "$T/e" | cut -c1-150)"
}

# the recomputation itself is right: resigned unchanged contents resume
cp "$c6" "$T/x.h5" && "$PY" "$top_srcdir/tests/tools/ckpt_edit.py" "$T/x.h5" --resign \
  || fail "ckpt_edit.py --resign"
"$DDPTRAIN" "$T/d.h5" $m --steps 8 --resume "$T/x.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "a checkpoint with recomputed checksums does not resume"; }

edited "dataset /model/layers.0.weight has no checksum (the file was edited" \
  unsign:model/layers.0.weight add:model/layers.0.weight=1
edited "fails its metadata checksum" attr:step=-50
edited "fails its metadata checksum" gattr:optimizer:step=3
edited "attribute step is -50, outside [0, " attr:step=-50 --resign
edited "attribute step is 1000000000, outside [0, 600]" attr:step=1000000000 --resign
edited "attribute step of /optimizer is -5, outside [0, 6]" gattr:optimizer:step=-5 --resign
edited "attribute sample_in_epoch is -640, outside [0, 600]" attr:sample_in_epoch=-640 --resign
edited "attribute epoch is -2, outside [0, 6]" attr:epoch=-2 --resign
edited "attribute epoch is 1000000, outside [0, 6]" attr:epoch=1000000 --resign
edited "attribute world_size is 0, outside [1, " attr:world_size=0 --resign
edited "attribute batch is 0, outside [1, " attr:batch=0 --resign
edited "dataset /optimizer/layers.0.weight/exp_avg_sq holds NaN at element 0" \
  set:optimizer/layers.0.weight/exp_avg_sq=nan --resign
edited "dataset /optimizer/layers.3.bias/exp_avg_sq holds +Inf at element 0" \
  set:optimizer/layers.3.bias/exp_avg_sq=inf --resign

# --init of a ddptrain weights file: every dataset's checksum required
cp "$T/w.h5" "$T/wx.h5" && "$PY" "$top_srcdir/tests/tools/ckpt_edit.py" "$T/wx.h5" \
  unsign:model/layers.3.weight add:model/layers.3.weight=1 || fail "ckpt_edit.py on --save"
"$DDPTRAIN" "$T/d.h5" $m --steps 1 --init "$T/wx.h5" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 3 ] || { cat "$T/e"; fail "--init of an edited --save file: exit $rc, expected 3"; }
grep -qF -- "--init $T/wx.h5: dataset /model/layers.3.weight has no checksum" "$T/e" \
  || { cat "$T/e"; fail "--init of an edited --save file: message"; }
echo "ok: --init of a --save file without a dataset's checksum: exit 3"

# --resume auto: the newest failing its metadata checksum, or a range, is
# skipped with a warning naming why; the run resumes from step 4
for e in attr:step=-50 "attr:world_size=0 --resign"; do
  rm -rf "$T/a" && mkdir "$T/a" && cp "$T"/p/ckpt_*.h5 "$T/a/" || fail "copying checkpoints"
  "$PY" "$top_srcdir/tests/tools/ckpt_edit.py" "$T/a/ckpt_00000006.h5" $e || fail "ckpt_edit.py"
  "$DDPTRAIN" "$T/d.h5" $m --steps 8 --ckpt-dir "$T/a" --resume auto >"$T/o" 2>"$T/e" \
    || { cat "$T/o" "$T/e"; fail "--resume auto past an edited newest checkpoint ($e)"; }
  grep -qF -- "--resume auto: skipping $T/a/ckpt_00000006.h5: checkpoint" "$T/e" \
    || { cat "$T/e"; fail "--resume auto: no warning for the edited checkpoint ($e)"; }
  grep -qF "  resume       $T/a/ckpt_00000004.h5: step 4," "$T/o" \
    || { cat "$T/o"; fail "--resume auto: did not resume from step 4 ($e)"; }
done
echo "ok: --resume auto skips an edited newest checkpoint with a warning"
