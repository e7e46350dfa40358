#!/bin/sh
# test_torch_resume.sh -- a checkpoint against PyTorch (an outside
# reference): torch loads ddptrain's checkpoint of step 5 -- the model and
# the optimizer state, the way docs/outputs.md shows -- and replays in float64 the
# steps ddptrain takes after it (--no-shuffle: the union batch of step t is
# positions [t*G, (t+1)*G) of the file).  Torch's weights after step 10
# agree with ddptrain's checkpoint of step 10 (what is written), and with a
# ddptrain run resumed from the checkpoint of step 5 (what is read):
#   A. np=2, SGD with momentum and weight decay, a BN model: 1e-5 relative
#      (measured: 1.5e-7).
#      Continuing without the momentum buffers must miss by far more, so the
#      comparison sees the optimizer state.
#   B. np=2, AdamW (exp_avg, exp_avg_sq, the step count in the bias
#      correction), warm-up then cosine decay over the 10 steps: 1e-5
#      relative (measured: 6e-7).
# Needs Debian's /usr/bin/python3 with torch and h5py; skipped (77) without
# them unless DDP_REQUIRE_TORCH=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 10 --samples 200 --seed 21 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"

cat >"$T/ref.py" <<'PY'
# ref.py export SPEC OUT.h5 | ref.py resume DECK CKPT.h5 OUT.h5 key=value ...
import math, sys, h5py, torch, torchref
torch.set_default_dtype(torch.float64)

def lr_at(o, step):
    lr, warm, total = float(o["lr"]), int(o.get("warmup", 0)), int(o["total"])
    if warm and step < warm: return lr * (step + 1) / warm
    if o.get("schedule") == "cosine":
        return lr * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / (total - warm))))
    return lr

def resume(deck, ckpt, out, o):
    x, y = torchref.load_split(deck, dtype=torch.float64)
    G, total = int(o["world"]) * int(o["batch"]), int(o["total"])
    net = torchref.load_weights(torchref.build(o["model"], x.shape[1], 4), ckpt)
    if o["opt"] == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=float(o["lr"]), momentum=float(o["momentum"]),
                              weight_decay=float(o["wd"]))
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=float(o["lr"]), weight_decay=float(o["wd"]))
    with h5py.File(ckpt, "r") as f:
        g, start = f["optimizer"], int(f.attrs["step"])
        kind = g.attrs["type"]
        kind = kind.decode() if isinstance(kind, bytes) else kind
        assert kind == o["opt"], kind
        if o.get("state", "1") == "1":   # docs/outputs.md's lines
            names = [n for n, p in net.named_parameters()]
            opt.load_state_dict({"param_groups": opt.state_dict()["param_groups"],
                                 "state": {i: {"step": torch.tensor(float(g.attrs["step"])),
                                               **{s: torch.as_tensor(v[()]) for s, v in g["layers." + n].items()}}
                                           for i, n in enumerate(names)}})
    xent = torch.nn.CrossEntropyLoss(reduction="sum")
    net.train()
    for s in range(start, total):
        for pg in opt.param_groups: pg["lr"] = lr_at(o, s)
        pos = torch.arange(s * G, (s + 1) * G)
        opt.zero_grad()
        (xent(net(x[pos]), y[pos]) / len(pos)).backward()
        opt.step()
    torchref.save_weights(net, out)

if sys.argv[1] == "export":
    torch.manual_seed(0)
    torchref.save_weights(torchref.build(sys.argv[2], 10, 4), sys.argv[3])
else:
    resume(sys.argv[2], sys.argv[3], sys.argv[4], dict(kv.split("=", 1) for kv in sys.argv[5:]))
PY

run() { # NAME MODEL ARGS...: ddptrain on 2 ranks, checkpoints at steps 5 and 10
  _n=$1 _m=$2; shift 2
  $PY "$T/ref.py" export "$_m" "$T/$_n-init.h5" || fail "$_n: torch export of the initial weights"
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model "$_m" --init "$T/$_n-init.h5" --no-shuffle --batch 8 \
    --steps 10 --log-every 0 --eval-every 0 --ckpt-dir "$T/$_n" --ckpt-every 5 --keep 0 "$@" \
    >"$T/$_n.log" 2>&1 || { cat "$T/$_n.log"; fail "$_n: ddptrain"; }
  for s in 5 10; do
    [ -f "$T/$_n/ckpt_$(printf %08d $s).h5" ] || { ls "$T/$_n"; fail "$_n: no checkpoint of step $s"; }
  done
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model "$_m" --no-shuffle --batch 8 --steps 10 --log-every 0 \
    --eval-every 0 --resume "$T/$_n/ckpt_00000005.h5" --save "$T/$_n-resumed.h5" "$@" \
    >"$T/$_n-resumed.log" 2>&1 || { cat "$T/$_n-resumed.log"; fail "$_n: ddptrain --resume"; }
  grep -q "resume .*ckpt_00000005.h5: step 5" "$T/$_n-resumed.log" \
    || { cat "$T/$_n-resumed.log"; fail "$_n: no resume line"; }
}
cmp_ref() { # NAME REF TOL WHAT: ddptrain's step 10, uninterrupted and resumed, against REF
  "$WEIGHTS_CMP" "$T/$1/ckpt_00000010.h5" "$2" "$3" >"$T/cmp" || { cat "$T/cmp"; fail "$4"; }
  "$WEIGHTS_CMP" "$T/$1-resumed.h5" "$2" "$3" >"$T/cmp" || { cat "$T/cmp"; fail "$4 (resumed)"; }
}

mA="linear:32,bn,relu,linear:auto"
run a "$mA" --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 1e-3
$PY "$T/ref.py" resume "$T/d.h5" "$T/a/ckpt_00000005.h5" "$T/ra.h5" model=$mA world=2 batch=8 \
  total=10 opt=sgd lr=0.1 momentum=0.9 wd=1e-3 || fail "A: torch resume"
cmp_ref a "$T/ra.h5" 1e-5 "A: SGD: torch resumed from ddptrain's checkpoint differs from ddptrain"
$PY "$T/ref.py" resume "$T/d.h5" "$T/a/ckpt_00000005.h5" "$T/ra0.h5" model=$mA world=2 batch=8 \
  total=10 opt=sgd lr=0.1 momentum=0.9 wd=1e-3 state=0 || fail "A: torch resume without state"
"$WEIGHTS_CMP" "$T/a/ckpt_00000010.h5" "$T/ra0.h5" 1e-3 >"$T/cmp" \
  && { cat "$T/cmp"; fail "A: without the momentum buffers torch still agrees: the test cannot see them"; }

mB="linear:32,relu,linear:auto"
run b "$mB" --optimizer adamw --lr 0.01 --weight-decay 0.01 --warmup-steps 3 --lr-schedule cosine
$PY "$T/ref.py" resume "$T/d.h5" "$T/b/ckpt_00000005.h5" "$T/rb.h5" model=$mB world=2 batch=8 \
  total=10 opt=adamw lr=0.01 wd=0.01 warmup=3 schedule=cosine || fail "B: torch resume"
cmp_ref b "$T/rb.h5" 1e-5 "B: AdamW: torch resumed from ddptrain's checkpoint differs from ddptrain"
echo "test_torch_resume: torch resumed from ddptrain's checkpoints (SGD momentum, AdamW + cosine) agrees"
