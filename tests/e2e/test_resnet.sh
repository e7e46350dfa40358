#!/bin/sh
# test_resnet.sh -- residual networks against PyTorch (an outside
# reference): the named architectures (--model resnet20 ..., src/model/
# archs.c) built in torch by tests/tools/resnets.py with torchvision's
# module names; torch's initial weights go in with --init, and torch
# replays in float64 the steps ddptrain takes on the same deck in the same
# sample order (--no-shuffle: rank r takes positions r, r+W, ...), with
# SyncBatchNorm (the global batch's statistics) at np=2.  ddptrain's saved
# weights, BN buffers and counters load into the torch module
# (load_state_dict, strict) and agree with torch's to TOL relative (max
# |a-b| / max |b| per tensor):
#   A. resnet20:width=4 (CIFAR style: identity and projection blocks), np=1,
#      SGD with momentum and weight decay, 10 steps;
#   B. resnet18:width=4 (ImageNet style: 7x7 stride-2 stem, padded max-pool,
#      four stages), np=2, SGD with Nesterov momentum, 4 steps;
#   C. resnet18:width=4, np=2, AdamW, 1 step (see C below);
#   F. resnet50:width=4 (bottleneck blocks), np=2, SGD, 2 steps, held to
#      10 times PyTorch's own float32 distance from float64 (see F below);
# and among themselves:
#   D. A's run on 2 and 4 ranks (global batch 8 each) gives np=1's weights
#      within 1e-5 after 4 steps (world-size equivalence);
#   E. B's run stopped by a checkpoint at step 5 and resumed gives the
#      uninterrupted run's weights after 10 steps bit for bit.
# Few steps: a ResNet's trajectory is chaotic where a ReLU input crosses 0
# (measured: a 1e-6 relative change of resnet18's initial weights moves
# float64 PyTorch's BN biases by 5e-2 after 6 steps, by up to 1e-2 after 2),
# so the runs against torch stop before float32 rounding can flip a ReLU;
# A's 10 steps stay within 1e-5.
# Needs Debian's /usr/bin/python3 with torch and h5py (scripts/install-deps
# installs them); skipped (77) when they are absent, unless
# DDP_REQUIRE_TORCH=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
TOL=1e-4

cat >"$T/ref.py" <<'PY'
# ref.py deck OUT.h5 HW                64 images 3xHWxHW, 5 classes
# ref.py export ARCH WIDTH OUT.h5       torch's initial weights
# ref.py loads ARCH WEIGHTS.h5          load_state_dict (strict) of ddptrain's file
# ref.py train DECK INIT.h5 OUT.h5 key=value ...   torch's steps in float64
#   (dtype=float32: in float32, the rounding a float32 run may show)
# ref.py cmp DDP.h5 REF64.h5 REF32.h5 TOL K      per tensor: |ddp - ref64| <=
#   max(TOL * max|ref64|, K * max|ref32 - ref64|): no further from float64
#   than K times PyTorch's own float32 run where rounding grows
import sys, h5py, numpy as np, torch, torchref, resnets

def deck(out, hw):
    g = np.random.default_rng(7)
    x = g.standard_normal((64, 3, hw, hw)).astype(np.float32)
    y = (np.arange(64) % 5).astype(np.int32)
    with h5py.File(out, "w") as f:
        f.create_dataset("train/x", data=x)
        f.create_dataset("train/y", data=y)

def net_of(arch_w):
    arch, _, w = arch_w.partition(":width=")
    return resnets.ResNet(arch, 3, 5, int(w) if w else None)

def train(deck, init, out, o):
    dt = torch.float32 if o.get("dtype") == "float32" else torch.float64
    torch.set_default_dtype(dt)
    x, y = torchref.load_split(deck, dtype=dt)
    N, W, B, steps = len(y), int(o["world"]), int(o["batch"]), int(o["steps"])
    G = W * B
    net = torchref.load_weights(net_of(o["model"]), init, prefix="").to(dt)
    if o["opt"] == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=float(o["lr"]), momentum=float(o["momentum"]),
                              nesterov=o.get("nesterov", "0") == "1", weight_decay=float(o["wd"]))
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=float(o["lr"]), weight_decay=float(o["wd"]),
                                eps=float(o.get("eps", 1e-8)))
    xent = torch.nn.CrossEntropyLoss()
    net.train()
    for s in range(steps):
        t = s % (N // G)
        pos = torch.arange(t * G, (t + 1) * G)
        opt.zero_grad()
        xent(net(x[pos]), y[pos]).backward()
        opt.step()
    torchref.save_weights(net, out, prefix="")

def cmp(ddp, r64, r32, tol, k):
    rd = lambda p: {n: v[()].astype(np.float64) for n, v in h5py.File(p, "r")["model"].items()}
    a, b, c = rd(ddp), rd(r64), rd(r32)
    worst, bad = (0.0, ""), []
    for n in b:
        allow = max(tol * np.abs(b[n]).max(), k * np.abs(c[n] - b[n]).max(), 1e-30)
        r = np.abs(a[n] - b[n]).max() / allow
        worst = max(worst, (r, n))
        if not r <= 1: bad.append(n)
    print("worst %.4f of the allowance (%s) over %d tensors" % (worst[0], worst[1], len(b)))
    sys.exit(1 if bad else 0)

if sys.argv[1] == "deck":
    deck(sys.argv[2], int(sys.argv[3]))
elif sys.argv[1] == "export":
    torch.manual_seed(0)
    torchref.save_weights(net_of(sys.argv[2]), sys.argv[3], prefix="")
elif sys.argv[1] == "loads":
    torchref.load_weights(net_of(sys.argv[2]), sys.argv[3], prefix="")  # strict
elif sys.argv[1] == "cmp":
    cmp(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]))
else:
    train(sys.argv[2], sys.argv[3], sys.argv[4], dict(kv.split("=", 1) for kv in sys.argv[5:]))
PY
$PY "$T/ref.py" deck "$T/d16.h5" 16 || fail "writing the deck"
$PY "$T/ref.py" deck "$T/d64.h5" 64 || fail "writing the deck"

run() { # NP OUT DECK MODEL ARGS...: ddptrain on NP ranks, --no-shuffle
  _np=$1 _out=$2 _deck=$3 _model=$4; shift 4
  mpirun_np "$_np" "$DDPTRAIN" "$T/$_deck.h5" --model "$_model" --no-shuffle --log-every 0 \
    --eval-every 0 "$@" --save "$T/$_out.h5" >"$T/$_out.log" 2>&1 || { cat "$T/$_out.log"; fail "$_out: ddptrain"; }
  $PY "$T/ref.py" loads "$_model" "$T/$_out.h5" || fail "$_out: torch cannot load ddptrain's weights"
}
same() { # A B TOL WHAT
  "$WEIGHTS_CMP" "$1" "$2" "$3" >"$T/cmp" 2>&1 || { cat "$T/cmp"; fail "$4: not within $3"; }
  echo "$4: $(tail -n 1 "$T/cmp")"
}
torch_() { # DECK INIT OUT key=value ...: torch's run in float64
  _d=$1 _i=$2 _o=$3; shift 3
  $PY "$T/ref.py" train "$T/$_d.h5" "$T/$_i.h5" "$T/$_o.h5" "$@" || fail "torch $_o"
}

mA="resnet20:width=4" mB="resnet18:width=4" mD="resnet50:width=4"
for m in $mA $mB $mD; do
  $PY "$T/ref.py" export "$m" "$T/init_${m%%:*}.h5" || fail "torch export of $m"
done
# A. CIFAR style, np=1, SGD with momentum
sgdA="--optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 1e-3"
run 1 a d16 "$mA" --init "$T/init_resnet20.h5" --batch 8 --steps 10 $sgdA
grep -q "layer3.0 *res(conv:16:3:2:1:nobias,bn,relu,conv:16:3:1:1:nobias,bn) + downsample(conv:16:1:2:0:nobias,bn)" "$T/a.log" \
  || { cat "$T/a.log"; fail "the start-up table does not show resnet20's blocks"; }
torch_ d16 init_resnet20 ra model=$mA world=1 batch=8 steps=10 opt=sgd lr=0.05 momentum=0.9 wd=1e-3
same "$T/a.h5" "$T/ra.h5" $TOL "A resnet20 SGD np=1, 10 steps vs torch"
# B. ImageNet style, np=2 (SyncBatchNorm), SGD with Nesterov momentum
sgdB="--optimizer sgd --lr 0.02 --momentum 0.9 --nesterov --weight-decay 1e-4"
run 2 b d64 "$mB" --init "$T/init_resnet18.h5" --batch 8 --steps 4 $sgdB
grep -q "SyncBatchNorm (statistics over all ranks)" "$T/b.log" || { cat "$T/b.log"; fail "B: not SyncBatchNorm"; }
torch_ d64 init_resnet18 rb model=$mB world=2 batch=8 steps=4 opt=sgd lr=0.02 momentum=0.9 nesterov=1 wd=1e-4
same "$T/b.h5" "$T/rb.h5" $TOL "B resnet18 SGD+Nesterov SyncBN np=2, 4 steps vs torch"
# C. the same with AdamW, one step.  Adam divides each gradient by its own
# size, so an element whose gradient is small carries its rounding into the
# update at full strength: after one step layer4.0.conv2.weight differs by
# 1.2e-4 of its largest value (measured with oneDNN's convolutions), and the
# next step's BatchNorm over 2x2 images turns that into 3e-2 (an element
# with |g| near eps moves by lr / (4 eps) per unit of gradient rounding).
# eps 1e-6: an element whose gradient is below float32 rounding (1e-8)
# would otherwise step by +-lr on the rounding's sign.  Held to 10 times
# PyTorch's own float32 distance from float64, or 5e-4.
run 2 c d64 "$mB" --init "$T/init_resnet18.h5" --batch 8 --steps 1 --optimizer adamw --lr 1e-3 \
  --weight-decay 1e-2 --eps 1e-6
torch_ d64 init_resnet18 rc model=$mB world=2 batch=8 steps=1 opt=adamw lr=1e-3 wd=1e-2 eps=1e-6
torch_ d64 init_resnet18 rc32 model=$mB world=2 batch=8 steps=1 opt=adamw lr=1e-3 wd=1e-2 eps=1e-6 \
  dtype=float32
$PY "$T/ref.py" cmp "$T/c.h5" "$T/rc.h5" "$T/rc32.h5" 5e-4 10 >"$T/cmp" \
  || { cat "$T/cmp"; fail "C resnet18 AdamW SyncBN np=2 differs from torch"; }
echo "C resnet18 AdamW SyncBN np=2, 1 step vs torch: $(cat "$T/cmp")"
# F. bottlenecks, np=2, SGD, 2 steps: a bottleneck's bn2.bias gradient is a
# cancellation (the 1x1 conv3 and bn3 after it), and its rounding grows by
# 1e3 in two steps in PyTorch's own float32 run as in ddptrain's: each tensor
# is held to 10 times PyTorch's float32 distance from float64, or TOL
run 2 e d64 "$mD" --init "$T/init_resnet50.h5" --batch 8 --steps 2 --optimizer sgd --lr 0.02 \
  --momentum 0.9
torch_ d64 init_resnet50 re model=$mD world=2 batch=8 steps=2 opt=sgd lr=0.02 momentum=0.9 wd=0
torch_ d64 init_resnet50 re32 model=$mD world=2 batch=8 steps=2 opt=sgd lr=0.02 momentum=0.9 wd=0 \
  dtype=float32
$PY "$T/ref.py" cmp "$T/e.h5" "$T/re.h5" "$T/re32.h5" $TOL 10 >"$T/cmp" \
  || { cat "$T/cmp"; fail "F resnet50 SGD SyncBN np=2 differs from torch"; }
echo "F resnet50 SGD SyncBN np=2, 2 steps vs torch: $(cat "$T/cmp")"

# D. world-size equivalence
run 1 d1 d16 "$mA" --init "$T/init_resnet20.h5" --batch 8 --steps 4 $sgdA
run 2 d2 d16 "$mA" --init "$T/init_resnet20.h5" --batch 4 --steps 4 $sgdA
run 4 d4 d16 "$mA" --init "$T/init_resnet20.h5" --batch 2 --steps 4 $sgdA
same "$T/d2.h5" "$T/d1.h5" 1e-5 "D resnet20 np=2 vs np=1, 4 steps"
same "$T/d4.h5" "$T/d1.h5" 1e-5 "D resnet20 np=4 vs np=1, 4 steps"

# E. a checkpoint at step 5, resumed: bit for bit
run 2 e0 d64 "$mB" --init "$T/init_resnet18.h5" --batch 8 --steps 10 $sgdB
run 2 e1 d64 "$mB" --init "$T/init_resnet18.h5" --batch 8 --steps 5 $sgdB --ckpt-dir "$T/ck"
run 2 e2 d64 "$mB" --init "$T/init_resnet18.h5" --batch 8 --steps 10 $sgdB --ckpt-dir "$T/ck" \
  --resume auto
grep -q "resum" "$T/e2.log" || { cat "$T/e2.log"; fail "E: did not resume"; }
same "$T/e2.h5" "$T/e0.h5" 0 "E resnet18 resumed at step 5 vs uninterrupted, 10 steps"
echo ok
