#!/bin/sh
# test_clip.sh -- --clip-grad-norm against torch.nn.utils.clip_grad_norm_ (an
# outside reference): from torch's initial weights (--init), 10 steps on the
# file order (--no-shuffle) with a max norm far below the gradient norm, so
# that every step clips (the torch side asserts it), for SGD with momentum
# and for AdamW with weight decay.  np=1 with batch 24 and np=2 with batch 12
# (the same union batch) both give torch's weights with batch 24 to 1e-5
# relative per tensor, and each other's to 1e-5.  The norm must be that of
# the whole all-reduced gradient: clipping by the norm of a part of it (a
# rank's block), or not clipping, moves the weights by 3e-2 to 2 relative.
# Needs /usr/bin/python3 with torch and h5py; skipped (77) when they are
# absent, unless DDP_REQUIRE_TORCH=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
"$DDPPREP" synthetic --classes 6 --features 16 --samples 300 --seed 31 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
STEPS=10 BATCH=24 CLIP=0.05 MODEL=linear:24,relu,linear:auto

cat >"$T/ref.py" <<'PY'
# ref.py DECK OUTDIR STEPS BATCH CLIP MODEL: OUTDIR/init.h5, sgd.h5, adamw.h5
import sys, torch, torchref
deck, out, steps, batch, clip = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
torch.manual_seed(5)
x, y = torchref.load_split(deck)
net = torchref.build(sys.argv[6], 16, 6)
init = {k: v.clone() for k, v in net.state_dict().items()}
torchref.save_weights(net, out + "/init.h5")
for name in ("sgd", "adamw"):
    net.load_state_dict(init)
    if name == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01)
    norms = []
    for t in range(steps):
        opt.zero_grad()
        xb, yb = x[t * batch:(t + 1) * batch], y[t * batch:(t + 1) * batch]
        torch.nn.functional.cross_entropy(net(xb), yb).backward()
        norm = float(torch.nn.utils.clip_grad_norm_(net.parameters(), clip))
        assert norm > 2 * clip, "step %d: norm %g does not clip at %g" % (t + 1, norm, clip)
        norms.append(norm)
        opt.step()
    torchref.save_weights(net, "%s/%s.h5" % (out, name))
    print("%s: gradient norms before clipping %s" % (name, " ".join("%.3g" % v for v in norms)))
PY
$PY "$T/ref.py" "$T/d.h5" "$T" $STEPS $BATCH $CLIP $MODEL || fail "torch reference"

for opt in sgd adamw; do
  if [ $opt = sgd ]; then args="--optimizer sgd --lr 0.2 --momentum 0.9"
  else args="--optimizer adamw --lr 0.01 --weight-decay 0.01"; fi
  for np in 1 2; do
    b=$((BATCH / np))
    mpirun_np $np "$DDPTRAIN" "$T/d.h5" --model $MODEL --init "$T/init.h5" \
      --steps $STEPS --batch $b --no-shuffle $args --clip-grad-norm $CLIP \
      --log-every 0 --eval-every 0 --save "$T/w-$opt-$np.h5" >"$T/o" 2>&1 \
      || { cat "$T/o"; fail "$opt np=$np: training"; }
    grep -q "gradient clipping" "$T/o" || { cat "$T/o"; fail "$opt np=$np: no clipping in the start-up table"; }
    "$WEIGHTS_CMP" "$T/w-$opt-$np.h5" "$T/$opt.h5" 1e-5 >"$T/cmp" \
      || { cat "$T/cmp"; fail "$opt np=$np batch $b: weights differ from torch's (batch $BATCH, clip $CLIP)"; }
    echo "$opt np=$np batch $b vs torch batch $BATCH: $(tail -n 1 "$T/cmp")"
  done
  "$WEIGHTS_CMP" "$T/w-$opt-2.h5" "$T/w-$opt-1.h5" 1e-5 >"$T/cmp" \
    || { cat "$T/cmp"; fail "$opt: np=2 differs from np=1"; }
  echo "$opt np=2 vs np=1: $(tail -n 1 "$T/cmp")"
done
echo ok
