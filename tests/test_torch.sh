#!/bin/sh
# test_torch.sh -- weights files against PyTorch (an outside reference):
# weights ddptrain saves load into torch.nn.Sequential with h5py, and torch's
# eval-mode loss and accuracy on the validation split equal ddptrain's final
# evaluation line; weights written by torch load with --init and evaluate to
# torch's own numbers.  Needs Debian's /usr/bin/python3 with torch and h5py
# (scripts/install-deps installs them); skipped (77) only when they are absent.
. ./testenv.sh || exit 99
set -u
PY=/usr/bin/python3
$PY -c "import torch, h5py" 2>/dev/null || { echo "no torch/h5py for $PY: skipped"; exit 77; }
ddp_tmpdir
"$DDPPREP" synthetic --classes 5 --features 12 --samples 1200 --val 500 --seed 12 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"

cat >"$T/eval.py" <<'PY'
import sys, h5py, numpy as np, torch
deck, weights, mode = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.BatchNorm1d(24), torch.nn.GELU(),
                          torch.nn.Linear(24, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
if mode == "export":   # torch's own initial weights -> a weights file for --init
    with h5py.File(weights, "w") as f:
        for k, v in net.state_dict().items():
            f.create_dataset("model/layers." + k, data=v.numpy())
else:
    f = h5py.File(weights, "r")
    sd = {k.removeprefix("layers."): torch.as_tensor(v[()]) for k, v in f["model"].items()}
    net.load_state_dict(sd)
d = h5py.File(deck, "r")
x, a = d["val/x"][()], d["val/x"].attrs
x = torch.from_numpy(((x - a["mean"]) / a["std"]).astype(np.float32))
y = torch.from_numpy(d["val/y"][()].astype(np.int64))
net.eval()
with torch.no_grad():
    out = net(x)
print("%.6f %.6f" % (torch.nn.functional.cross_entropy(out, y).item(),
                     (out.argmax(1) == y).double().mean().item()))
PY
model="linear:24,bn,gelu,linear:16,relu,linear:auto"
# 1. ddptrain trains and saves; torch evaluates the saved weights
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model "$model" --batch 16 --epochs 2 --log-every 0 \
  --save "$T/w.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "training"; }
set -- $($PY "$T/eval.py" "$T/d.h5" "$T/w.h5" load) || fail "torch could not load the weights"
tl=$1; ta=$2
dl=$(ddp_field "$T/o" val_loss); da=$(ddp_field "$T/o" val_acc)
awk -v a="$tl" -v b="$dl" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (a > 1 ? a : 1)) }' \
  || fail "val_loss: torch $tl, ddptrain $dl"
[ "$ta" = "$da" ] || fail "val_acc: torch $ta, ddptrain $da"
echo "saved weights in torch: val_loss $tl (ddptrain $dl), val_acc $ta (ddptrain $da)"

# 2. torch writes its initial weights; ddptrain --init evaluates them (lr 0,
#    one step; the BN running statistics of that step are why torch's eval is
#    recomputed from the weights ddptrain saves)
$PY "$T/eval.py" "$T/d.h5" "$T/torch-init.h5" export >/dev/null || fail "torch export"
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" --model "$model" --batch 16 --steps 1 --lr 0 --log-every 0 \
  --init "$T/torch-init.h5" --save "$T/w2.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "--init run"; }
"$WEIGHTS_CMP" "$T/w2.h5" "$T/torch-init.h5" 0 layers.0.weight >/dev/null || fail "--init changed layers.0.weight"
"$WEIGHTS_CMP" "$T/w2.h5" "$T/torch-init.h5" 0 layers.5. >/dev/null || fail "--init changed layers.5"
set -- $($PY "$T/eval.py" "$T/d.h5" "$T/w2.h5" load) || fail "torch could not load w2"
dl=$(ddp_field "$T/o" val_loss)
awk -v a="$1" -v b="$dl" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (a > 1 ? a : 1)) }' \
  || fail "--init val_loss: torch $1, ddptrain $dl"
echo "torch weights via --init: val_loss $1 (ddptrain $dl)"
echo ok
