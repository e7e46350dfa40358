#!/bin/sh
# test_torch_train.sh -- multi-rank training against PyTorch (an outside
# reference): torch replays, in float64, the SGD steps ddptrain takes on the
# same deck in the same sample order (--no-shuffle: file order; rank r takes
# positions r, r+W, ...) from the same initial weights, and writes the
# weights it ends with.  Each ddptrain run's saved weights, BN buffers and
# counters agree with torch's to 1e-5 relative (max |a-b| / max |b| per
# tensor; measured below 1e-6):
#   A. np=3, --no-drop-last: 100 samples in global batches of 24, the last
#      step has 4 samples (2, 1 and 1 on the ranks) and its gradient is the
#      mean over those 4, not over the nominal 24; from torch's initial
#      weights via --init (rank 0 reads the file, the others get it by the
#      start-up broadcast).
#   B. np=2, --label-smoothing 0.1 against CrossEntropyLoss(label_smoothing),
#      SGD with Nesterov momentum and weight decay, from A's trained weights
#      (BN running statistics and counters not at their defaults), with
#      buckets of at most 1048 bytes: 4 buckets, two boundaries between a
#      layer's weight and bias, every replica compared after every step.
#   C. np=2, --no-sync-bn: each rank normalises with its own shard's
#      statistics (torch: one BN buffer set per rank, the loss summed over
#      the ranks' shards / global count); the saved running statistics are
#      the average of the ranks' local ones.
# Needs Debian's /usr/bin/python3 with torch and h5py (scripts/install-deps
# installs them); skipped (77) when they are absent, unless
# DDP_REQUIRE_TORCH=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
"$DDPPREP" synthetic --classes 4 --features 10 --samples 100 --seed 21 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"

cat >"$T/ref.py" <<'PY'
# ref.py export SPEC FEATURES CLASSES OUT.h5
# ref.py train DECK INIT.h5 OUT.h5 key=value ... [-- next run ...]
import sys, torch, torchref
torch.set_default_dtype(torch.float64)

def train(deck, init, out, o):
    x, y = torchref.load_split(deck, dtype=torch.float64)
    N, classes = len(y), int(y.max()) + 1
    W, B, steps = int(o["world"]), int(o["batch"]), int(o.get("steps", 0))
    G = W * B
    per_epoch = N // G if o.get("drop_last", "1") == "1" else -(-N // G)
    steps = steps or per_epoch
    net = torchref.load_weights(torchref.build(o["model"], x.shape[1], classes), init)
    opt = torch.optim.SGD(net.parameters(), lr=float(o["lr"]), momentum=float(o.get("momentum", 0)),
                          nesterov=o.get("nesterov", "0") == "1",
                          weight_decay=float(o.get("wd", 0)))
    xent = torch.nn.CrossEntropyLoss(reduction="sum", label_smoothing=float(o.get("smoothing", 0)))
    local = o.get("sync_bn", "1") == "0"
    bns = [m for m in net if isinstance(m, torch.nn.BatchNorm1d)]
    names = ("running_mean", "running_var", "num_batches_tracked")
    # with --no-sync-bn: every rank's own BN buffers (tensors swapped in, not
    # copied: autograd keeps the ones a forward used)
    rank_bufs = [[[getattr(m, k).clone() for k in names] for m in bns] for r in range(W)]
    net.train()
    for s in range(steps):
        t = s % per_epoch
        pos = torch.arange(t * G, min((t + 1) * G, N))   # the union batch of the step
        opt.zero_grad()
        if local:  # each rank: its own positions r, r+W, ... and its own BN buffers
            loss = 0
            for r in range(W):
                for m, b in zip(bns, rank_bufs[r]):
                    for k, v in zip(names, b): setattr(m, k, v)
                mine = pos[(pos - r) % W == 0]
                loss = loss + xent(net(x[mine]), y[mine])
        else:
            loss = xent(net(x[pos]), y[pos])
        (loss / len(pos)).backward()
        opt.step()
    if local:  # the running statistics are averaged across ranks before the save
        for i, m in enumerate(bns):
            for j in range(2): setattr(m, names[j], sum(b[i][j] for b in rank_bufs) / W)
    torchref.save_weights(net, out)

if sys.argv[1] == "export":
    torch.manual_seed(0)
    torchref.save_weights(torchref.build(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])), sys.argv[5])
else:
    runs, cur = [], []
    for w in sys.argv[2:] + ["--"]:
        if w == "--":
            runs.append(cur); cur = []
        else:
            cur.append(w)
    for r in runs:
        train(r[0], r[1], r[2], dict(kv.split("=", 1) for kv in r[3:]))
PY

model="linear:32,bn,relu,linear:24,relu,linear:auto"
$PY "$T/ref.py" export "$model" 10 4 "$T/init.h5" || fail "torch export of the initial weights"
run() { # NP OUT ARGS...: ddptrain on NP ranks, --no-shuffle, SGD
  _np=$1 _out=$2; shift 2
  mpirun_np "$_np" "$DDPTRAIN" "$T/d.h5" --model "$model" --no-shuffle --log-every 0 --eval-every 0 \
    --optimizer sgd "$@" --save "$T/$_out.h5" >"$T/$_out.log" 2>&1 || { cat "$T/$_out.log"; fail "$_out: ddptrain"; }
}
# A: one epoch of 5 steps, the last with 4 samples
run 3 a --init "$T/init.h5" --batch 8 --epochs 1 --no-drop-last --lr 0.1 --momentum 0.9
grep -q "5 per epoch, 5 total" "$T/a.log" || { cat "$T/a.log"; fail "A: expected 5 steps"; }
# B: from A's weights; buckets of at most 1048 bytes (layers.5 and layers.3.bias | layers.3.weight |
#    layers.1 and layers.0.bias | layers.0.weight)
run 2 b --init "$T/a.h5" --batch 8 --steps 4 --label-smoothing 0.1 --lr 0.1 --momentum 0.9 \
  --nesterov --weight-decay 1e-3 --bucket-cap-mb 0.001 --first-bucket-mb 0.001 --check-replicas 1
grep -q "buckets *4:" "$T/b.log" || { cat "$T/b.log"; fail "B: expected 4 buckets"; }
# C: local BN statistics
run 2 c --init "$T/init.h5" --batch 8 --steps 4 --no-sync-bn --lr 0.1 --momentum 0.9
grep -q "local statistics per rank" "$T/c.log" || { cat "$T/c.log"; fail "C: not --no-sync-bn"; }

$PY "$T/ref.py" train \
  "$T/d.h5" "$T/init.h5" "$T/ra.h5" model=$model world=3 batch=8 drop_last=0 lr=0.1 momentum=0.9 -- \
  "$T/d.h5" "$T/a.h5" "$T/rb.h5" model=$model world=2 batch=8 steps=4 smoothing=0.1 lr=0.1 \
    momentum=0.9 nesterov=1 wd=1e-3 -- \
  "$T/d.h5" "$T/init.h5" "$T/rc.h5" model=$model world=2 batch=8 steps=4 sync_bn=0 lr=0.1 momentum=0.9 \
  || fail "torch reference runs"
for c in "a --no-drop-last, partial last batch" "b --label-smoothing 0.1, 4 buckets" \
         "c --no-sync-bn"; do
  r=${c%% *}
  "$WEIGHTS_CMP" "$T/$r.h5" "$T/r$r.h5" 1e-5 >"$T/cmp" || { cat "$T/cmp"; fail "${c#* } differs from torch"; }
  echo "${c#* } vs torch: $(tail -n 1 "$T/cmp")"
done
echo ok
