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
# ref.py COMMAND ARGS [-- COMMAND ARGS ...]: the commands in turn, in one
# process (torch loads once); exit 1 naming the first that failed
# deck OUT.h5 HW                64 images 3xHWxHW, 5 classes
# export ARCH OUT.h5            torch's initial weights
# loads ARCH WEIGHTS.h5         load_state_dict (strict) of ddptrain's file
# train DECK INIT.h5 OUT.h5 key=value ...   torch's steps in float64
#   (dtype=float32: in float32, the rounding a float32 run may show)
# cmp DDP.h5 REF64.h5 REF32.h5 TOL K      per tensor: |ddp - ref64| <=
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
    print("%s vs torch: worst %.4f of the allowance (%s) over %d tensors"
          % (ddp.rsplit("/", 1)[-1], worst[0], worst[1], len(b)))
    if bad: raise ValueError("differs from torch in " + ", ".join(bad))

def command(a):
    if a[0] == "deck":
        deck(a[1], int(a[2]))
    elif a[0] == "export":
        torch.manual_seed(0)
        torchref.save_weights(net_of(a[1]), a[2], prefix="")
    elif a[0] == "loads":
        torchref.load_weights(net_of(a[1]), a[2], prefix="")  # strict
    elif a[0] == "cmp":
        cmp(a[1], a[2], a[3], float(a[4]), float(a[5]))
    else:
        train(a[1], a[2], a[3], dict(kv.split("=", 1) for kv in a[4:]))

cmds, cur = [], []
for w in sys.argv[1:] + ["--"]:
    if w == "--":
        cmds.append(cur); cur = []
    else:
        cur.append(w)
for a in cmds:
    try:
        command(a)
    except Exception as e:
        sys.exit("ref.py %s: %s: %s" % (" ".join(a), type(e).__name__, e))
PY
run() { # NP OUT DECK MODEL ARGS...: ddptrain on NP ranks, --no-shuffle; torch
  # loads the weights at the end (loads_all)
  _np=$1 _out=$2 _deck=$3 _model=$4; shift 4
  mpirun_np "$_np" "$DDPTRAIN" "$T/$_deck.h5" --model "$_model" --no-shuffle --log-every 0 \
    --eval-every 0 "$@" --save "$T/$_out.h5" >"$T/$_out.log" 2>&1 || { cat "$T/$_out.log"; fail "$_out: ddptrain"; }
  loads="$loads -- loads $_model $T/$_out.h5"
}
loads=""
same() { # A B TOL WHAT
  "$WEIGHTS_CMP" "$1" "$2" "$3" >"$T/cmp" 2>&1 || { cat "$T/cmp"; fail "$4: not within $3"; }
  echo "$4: $(tail -n 1 "$T/cmp")"
}

mA="resnet20:width=4" mB="resnet18:width=4" mD="resnet50:width=4"
# The decks, torch's initial weights and every torch run the cases below
# compare with, in one process: float64, and float32 where a case holds
# ddptrain to PyTorch's own float32 rounding.
sgdA_t="opt=sgd lr=0.05 momentum=0.9 wd=1e-3"
sgdB_t="opt=sgd lr=0.02 momentum=0.9 nesterov=1 wd=1e-4"
adamC_t="opt=adamw lr=1e-3 wd=1e-2 eps=1e-6"
sgdF_t="opt=sgd lr=0.02 momentum=0.9 wd=0"
$PY "$T/ref.py" deck "$T/d16.h5" 16 -- deck "$T/d64.h5" 64 \
  -- export $mA "$T/init_resnet20.h5" -- export $mB "$T/init_resnet18.h5" \
  -- export $mD "$T/init_resnet50.h5" \
  -- train "$T/d16.h5" "$T/init_resnet20.h5" "$T/ra.h5" model=$mA world=1 batch=8 steps=10 $sgdA_t \
  -- train "$T/d64.h5" "$T/init_resnet18.h5" "$T/rb.h5" model=$mB world=2 batch=8 steps=4 $sgdB_t \
  -- train "$T/d64.h5" "$T/init_resnet18.h5" "$T/rc.h5" model=$mB world=2 batch=8 steps=1 $adamC_t \
  -- train "$T/d64.h5" "$T/init_resnet18.h5" "$T/rc32.h5" model=$mB world=2 batch=8 steps=1 $adamC_t \
     dtype=float32 \
  -- train "$T/d64.h5" "$T/init_resnet50.h5" "$T/re.h5" model=$mD world=2 batch=8 steps=2 $sgdF_t \
  -- train "$T/d64.h5" "$T/init_resnet50.h5" "$T/re32.h5" model=$mD world=2 batch=8 steps=2 $sgdF_t \
     dtype=float32 \
  || fail "torch: the decks, the initial weights and the reference runs"

# A. CIFAR style, np=1, SGD with momentum
sgdA="--optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 1e-3"
run 1 a d16 "$mA" --init "$T/init_resnet20.h5" --batch 8 --steps 10 $sgdA
grep -q "layer3.0 *res(conv:16:3:2:1:nobias,bn,relu,conv:16:3:1:1:nobias,bn) + downsample(conv:16:1:2:0:nobias,bn)" "$T/a.log" \
  || { cat "$T/a.log"; fail "the start-up table does not show resnet20's blocks"; }
same "$T/a.h5" "$T/ra.h5" $TOL "A resnet20 SGD np=1, 10 steps vs torch"
# B. ImageNet style, np=2 (SyncBatchNorm), SGD with Nesterov momentum
sgdB="--optimizer sgd --lr 0.02 --momentum 0.9 --nesterov --weight-decay 1e-4"
run 2 b d64 "$mB" --init "$T/init_resnet18.h5" --batch 8 --steps 4 $sgdB
grep -q "SyncBatchNorm (statistics over all ranks)" "$T/b.log" || { cat "$T/b.log"; fail "B: not SyncBatchNorm"; }
same "$T/b.h5" "$T/rb.h5" $TOL "B resnet18 SGD+Nesterov SyncBN np=2, 4 steps vs torch"
# C. the same with AdamW, one step.  Adam divides each gradient by its own
# size, so an element whose gradient is small carries its rounding into the
# update at full strength: after one step layer4.0.conv2.weight differs by
# 1.2e-4 of its largest value (measured with oneDNN's convolutions), and the
# next step's BatchNorm over 2x2 images turns that into 3e-2 (an element
# with |g| near eps moves by lr / (4 eps) per unit of gradient rounding).
# eps 1e-6: an element whose gradient is below float32 rounding (1e-8)
# would otherwise step by +-lr on the rounding's sign.  Held to 10 times
# PyTorch's own float32 distance from float64, or 5e-4 (ref.py cmp, with
# F's below, at the end).
run 2 c d64 "$mB" --init "$T/init_resnet18.h5" --batch 8 --steps 1 --optimizer adamw --lr 1e-3 \
  --weight-decay 1e-2 --eps 1e-6
# F. bottlenecks, np=2, SGD, 2 steps: a bottleneck's bn2.bias gradient is a
# cancellation (the 1x1 conv3 and bn3 after it), and its rounding grows by
# 1e3 in two steps in PyTorch's own float32 run as in ddptrain's: each tensor
# is held to 10 times PyTorch's float32 distance from float64, or TOL
run 2 e d64 "$mD" --init "$T/init_resnet50.h5" --batch 8 --steps 2 --optimizer sgd --lr 0.02 \
  --momentum 0.9

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

# C and F against torch; torch loads (strict load_state_dict) every file
# ddptrain saved above
$PY "$T/ref.py" cmp "$T/c.h5" "$T/rc.h5" "$T/rc32.h5" 5e-4 10 \
  -- cmp "$T/e.h5" "$T/re.h5" "$T/re32.h5" $TOL 10 $loads \
  || fail "C (resnet18 AdamW SyncBN np=2, 1 step) or F (resnet50 SGD SyncBN np=2, 2 steps) differs from torch, or torch cannot load ddptrain's weights"
echo ok
