#!/bin/sh
# test_torch_epochs.sh -- a multi-epoch SHUFFLED run at np=2 against PyTorch
# with its own torch.utils.data.distributed.DistributedSampler (an outside
# reference for the sample order of every epoch; test_torch_train.sh covers
# the arithmetic in file order, --no-shuffle).
#
# ddptrain trains 3 epochs (203 samples, batch 8 per rank, drop_last: 12
# steps an epoch, 11 samples left out) with the default shuffle, --seed 7,
# SyncBN and SGD with momentum, from torch's initial weights (--init).
# tests/tools/sampler_order prints ddptrain's permutation of each epoch
# (src/data/sampler.c, a keyed bijection, not torch.randperm) and each rank's
# batches.  In torch, for each rank r, DistributedSampler(num_replicas=2,
# rank=r, shuffle=True, seed=7, drop_last=True) under a DataLoader(batch 8,
# drop_last), with sampler.set_epoch(e) every epoch as a PyTorch user calls
# it; torch.randperm is patched while the samplers iterate so that the
# permutation seeded seed + e is ddptrain's of epoch e (the patch asserts
# that every epoch asks for its own).  Asserts:
#   ORDER   each rank's batches from torch's sampler and loader (its own
#           striding and drop logic) equal sampler_order's, every epoch; the
#           epochs' orders differ from each other.
#   RESULT  torch replays the 36 steps in float64 (step t's global batch is
#           the two ranks' batch t, the gradient its mean, BatchNorm in train
#           mode over it: SyncBN) and ddptrain's saved weights, BN buffers and
#           counters agree with torch's to 1e-5 relative (weights_cmp).  A
#           trainer that trains every epoch in epoch 0's order (a missing
#           set_epoch) fails here.
# Needs Debian's /usr/bin/python3 with torch and h5py; skipped (77) when they
# are absent, unless DDP_REQUIRE_TORCH=1.
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
SAMPLER_ORDER="$top_builddir/tests/tools/sampler_order"
N=203 W=2 B=8 SEED=7 EPOCHS=3
"$DDPPREP" synthetic --classes 4 --features 10 --samples $N --seed 21 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
"$SAMPLER_ORDER" $N $W $B $SEED $EPOCHS >"$T/order.txt" || fail "sampler_order"

cat >"$T/ref.py" <<'PY'
# ref.py export SPEC FEATURES CLASSES OUT.h5
# ref.py train DECK INIT.h5 ORDER.txt OUT.h5 SPEC W B SEED EPOCHS LR MOMENTUM
import sys, torch, torchref
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
torch.set_default_dtype(torch.float64)

if sys.argv[1] == "export":
    torch.manual_seed(0)
    torchref.save_weights(torchref.build(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])), sys.argv[5])
    sys.exit(0)

deck, init, order, out, spec = sys.argv[2:7]
W, B, SEED, EPOCHS = (int(v) for v in sys.argv[7:11])
lr, momentum = float(sys.argv[11]), float(sys.argv[12])

# sampler_order's output: perm[e] and batches[(e, r)] = [batch 0, batch 1, ...]
perm, batches = {}, {}
for line in open(order):
    w = line.split()
    if w[0] == "perm":
        perm[int(w[1])] = [int(v) for v in w[2:]]
    else:
        e, r, t = int(w[1]), int(w[2]), int(w[3])
        lst = batches.setdefault((e, r), [])
        assert t == len(lst), "sampler_order: batches out of order"
        lst.append([int(v) for v in w[4:]])

x, y = torchref.load_split(deck, dtype=torch.float64)
N, classes = len(y), int(y.max()) + 1
assert sorted(perm) == list(range(EPOCHS)) and all(sorted(p) == list(range(N)) for p in perm.values())
assert len({tuple(p) for p in perm.values()}) == EPOCHS, "ddptrain's epochs share an order"

class Deck(Dataset):  # (index, x, y): the index for the order check
    def __len__(self): return N
    def __getitem__(self, i): return i, x[i], y[i]

asked = []  # the epochs DistributedSampler asked torch.randperm for
class DdpPerm:
    """torch.randperm, while the samplers iterate, draws ddptrain's
    permutation: DistributedSampler seeds its generator with seed + epoch."""
    def __enter__(self):
        self.real = torch.randperm
        def randperm(n, *a, generator=None, **k):
            assert generator is not None and n == N and not a, "unexpected torch.randperm call"
            e = generator.initial_seed() - SEED
            assert e in perm, "DistributedSampler asked for epoch %d" % e
            asked.append(e)
            return torch.tensor(perm[e], dtype=torch.int64)
        torch.randperm = randperm
    def __exit__(self, *exc):
        torch.randperm = self.real

ds = Deck()
samplers = [DistributedSampler(ds, num_replicas=W, rank=r, shuffle=True, seed=SEED, drop_last=True)
            for r in range(W)]
loaders = [DataLoader(ds, batch_size=B, sampler=s, drop_last=True) for s in samplers]

net = torchref.load_weights(torchref.build(spec, x.shape[1], classes), init)
opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
xent = torch.nn.CrossEntropyLoss(reduction="sum")
net.train()
steps = 0
for e in range(EPOCHS):
    for s in samplers:
        s.set_epoch(e)
    with DdpPerm():
        got = [list(l) for l in loaders]  # each rank's batches (idx, x, y) of the epoch
    for r in range(W):  # ORDER
        mine = [b[0].tolist() for b in got[r]]
        if mine != batches[(e, r)]:
            sys.exit("ORDER: epoch %d rank %d: DistributedSampler gives %s..., ddptrain %s..."
                     % (e, r, mine[:2], batches[(e, r)][:2]))
    for step in zip(*got):  # RESULT: the global batch is the union of the ranks' batch t
        xb = torch.cat([b[1] for b in step])
        yb = torch.cat([b[2] for b in step])
        opt.zero_grad()
        (xent(net(xb), yb) / len(yb)).backward()
        opt.step()
        steps += 1
assert asked == [e for e in range(EPOCHS) for r in range(W)], "randperm asked for epochs %s" % asked
torchref.save_weights(net, out)
print("order: %d epochs x %d ranks x %d batches equal DistributedSampler's; %d steps replayed"
      % (EPOCHS, W, len(batches[(0, 0)]), steps))
PY

model="linear:32,bn,relu,linear:24,relu,linear:auto"
$PY "$T/ref.py" export "$model" 10 4 "$T/init.h5" || fail "torch export of the initial weights"
mpirun_np $W "$DDPTRAIN" "$T/d.h5" --model "$model" --init "$T/init.h5" --seed $SEED \
  --batch $B --epochs $EPOCHS --optimizer sgd --lr 0.05 --momentum 0.9 --log-every 0 \
  --eval-every 0 --save "$T/a.h5" >"$T/a.log" 2>&1 || { cat "$T/a.log"; fail "ddptrain"; }
grep -q "12 per epoch, 36 total" "$T/a.log" || { cat "$T/a.log"; fail "expected 12 steps per epoch"; }
$PY "$T/ref.py" train "$T/d.h5" "$T/init.h5" "$T/order.txt" "$T/r.h5" "$model" $W $B $SEED \
  $EPOCHS 0.05 0.9 || fail "torch reference (ORDER check or the run)"
"$WEIGHTS_CMP" "$T/a.h5" "$T/r.h5" 1e-5 >"$T/cmp" \
  || { cat "$T/cmp"; fail "RESULT: 3 shuffled epochs at np=2 differ from torch's DistributedSampler run"; }
echo "3 shuffled epochs at np=2 vs torch: $(tail -n 1 "$T/cmp")"
echo ok
