#!/bin/sh
# test_torch.sh -- weights files against PyTorch (an outside reference):
# weights ddptrain saves load into torch.nn.Sequential with h5py, and torch's
# eval-mode loss and accuracy on the validation split equal ddptrain's final
# evaluation line; weights written by torch load with --init and evaluate to
# torch's own numbers.  Needs Debian's /usr/bin/python3 with torch and h5py
# (scripts/install-deps installs them); skipped (77) when they are absent,
# unless DDP_REQUIRE_TORCH=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
"$DDPPREP" synthetic --classes 5 --features 12 --samples 1200 --val 500 --seed 12 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"

model="linear:24,bn,gelu,linear:16,relu,linear:auto"
cat >"$T/eval.py" <<'PY'
# eval.py DECK WEIGHTS export|load MODEL: torch's loss and accuracy on val
import sys, torch, torchref
deck, weights, mode, spec = sys.argv[1:5]
torch.manual_seed(0)
x, y = torchref.load_split(deck, "val")
net = torchref.build(spec, 12, 5)
if mode == "export":   # torch's own initial weights -> a weights file for --init
    torchref.save_weights(net, weights)
else:
    torchref.load_weights(net, weights)
net.eval()
with torch.no_grad():
    out = net(x)
print("%.6f %.6f" % (torch.nn.functional.cross_entropy(out, y).item(),
                     (out.argmax(1) == y).double().mean().item()))
PY
# 1. ddptrain trains and saves; torch evaluates the saved weights
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model "$model" --batch 16 --epochs 2 --log-every 0 \
  --save "$T/w.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "training"; }
set -- $($PY "$T/eval.py" "$T/d.h5" "$T/w.h5" load "$model") || fail "torch could not load the weights"
tl=$1; ta=$2
dl=$(ddp_field "$T/o" val_loss); da=$(ddp_field "$T/o" val_acc)
awk -v a="$tl" -v b="$dl" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (a > 1 ? a : 1)) }' \
  || fail "val_loss: torch $tl, ddptrain $dl"
[ "$ta" = "$da" ] || fail "val_acc: torch $ta, ddptrain $da"
echo "saved weights in torch: val_loss $tl (ddptrain $dl), val_acc $ta (ddptrain $da)"

# 2. torch writes its initial weights; ddptrain --init evaluates them (lr 0,
#    one step; the BN running statistics of that step are why torch's eval is
#    recomputed from the weights ddptrain saves)
$PY "$T/eval.py" "$T/d.h5" "$T/torch-init.h5" export "$model" >/dev/null || fail "torch export"
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" --model "$model" --batch 16 --steps 1 --lr 0 --log-every 0 \
  --init "$T/torch-init.h5" --save "$T/w2.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "--init run"; }
"$WEIGHTS_CMP" "$T/w2.h5" "$T/torch-init.h5" 0 layers.0.weight >/dev/null || fail "--init changed layers.0.weight"
"$WEIGHTS_CMP" "$T/w2.h5" "$T/torch-init.h5" 0 layers.5. >/dev/null || fail "--init changed layers.5"
set -- $($PY "$T/eval.py" "$T/d.h5" "$T/w2.h5" load "$model") || fail "torch could not load w2"
dl=$(ddp_field "$T/o" val_loss)
awk -v a="$1" -v b="$dl" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (a > 1 ? a : 1)) }' \
  || fail "--init val_loss: torch $1, ddptrain $dl"
echo "torch weights via --init: val_loss $1 (ddptrain $dl)"
echo ok
