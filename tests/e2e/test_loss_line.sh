#!/bin/sh
# test_loss_line.sh -- the training loss of the progress lines is the loss of
# the global batch.  With --log-every 1, np=1 with batch 2B and np=2 with
# batch B print the same loss at every step (to 2e-5 absolute: the line has
# 5 decimals, so each side rounds by up to 5e-6), and both print PyTorch's
# loss of the same batch from the same initial weights (torch's, loaded with
# --init; file order, --no-shuffle): at step 1 to 2e-5 absolute, at every
# later step (after identical SGD updates in torch) to 1e-4 relative.
# 95 samples with --no-drop-last make every epoch's last batch 15 samples,
# split 8 + 7 at np=2: its loss is the mean over the 15, not the mean of the
# ranks' means, and the update after it (seen in the next step's loss) uses
# the true global count.
# Classification runs with label smoothing 0.1 and SyncBatchNorm (torch:
# cross_entropy(label_smoothing=0.1), BatchNorm1d over the batch of 2B);
# regression with 3 targets uses the MSE (torch: mse_loss, mean over all
# elements).  Needs /usr/bin/python3 with torch and h5py; skipped (77) when
# they are absent, unless DDP_REQUIRE_TORCH=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
"$DDPPREP" synthetic --classes 5 --features 10 --samples 95 --seed 41 -o "$T/xent.h5" \
  >/dev/null || fail "ddptrain-prep synthetic --classes"
"$DDPPREP" synthetic --regression 3 --features 10 --samples 95 --seed 42 -o "$T/mse.h5" \
  >/dev/null || fail "ddptrain-prep synthetic --regression"
STEPS=8 BATCH=20 XENT_MODEL=linear:16,bn,relu,linear:auto MSE_MODEL=linear:16,relu,linear:auto

cat >"$T/ref.py" <<'PY'
# ref.py TMP STEPS BATCH XENT_MODEL MSE_MODEL
import sys, torch, torchref
tmp, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(7)
for kind, spec in (("xent", sys.argv[4]), ("mse", sys.argv[5])):
    # tmp/KIND.h5 -> tmp/init-KIND.h5 and tmp/torch-KIND
    x, y = torchref.load_split("%s/%s.h5" % (tmp, kind))   # labels int64, targets float32
    if kind == "xent":
        net = torchref.build(spec, 10, 5)
        lossf = lambda o, t: torch.nn.functional.cross_entropy(o, t, label_smoothing=0.1)
    else:
        net = torchref.build(spec, 10, 3)
        lossf = torch.nn.functional.mse_loss
    torchref.save_weights(net, "%s/init-%s.h5" % (tmp, kind))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    n = len(x)   # file order every epoch, the last batch of an epoch short
    starts = [s for e in range(steps) for s in range(0, n, batch)][:steps]
    with open("%s/torch-%s" % (tmp, kind), "w") as out:
        for s in starts:
            opt.zero_grad()
            loss = lossf(net(x[s:s + batch]), y[s:s + batch])
            loss.backward()
            opt.step()
            out.write("%.9g\n" % loss.item())
PY
$PY "$T/ref.py" "$T" $STEPS $((2 * BATCH)) $XENT_MODEL $MSE_MODEL || fail "torch reference"

for kind in xent mse; do
  if [ $kind = xent ]; then model=$XENT_MODEL; extra="--label-smoothing 0.1"
  else model=$MSE_MODEL; extra=""; fi
  for np in 1 2; do
    mpirun_np $np "$DDPTRAIN" "$T/$kind.h5" --model "$model" $extra --init "$T/init-$kind.h5" \
      --steps $STEPS --batch $((2 * BATCH / np)) --no-shuffle --no-drop-last \
      --optimizer sgd --lr 0.1 --momentum 0.9 --log-every 1 --eval-every 0 >"$T/o-$kind-$np" 2>&1 \
      || { cat "$T/o-$kind-$np"; fail "$kind np=$np: training"; }
    sed -n 's/^step [0-9]*\/[0-9]* .* loss \([^ ]*\) .*/\1/p' "$T/o-$kind-$np" >"$T/loss-$kind-$np"
    [ "$(wc -l <"$T/loss-$kind-$np")" -eq $STEPS ] \
      || { cat "$T/o-$kind-$np"; fail "$kind np=$np: expected $STEPS progress lines"; }
  done
  [ $kind = xent ] && { grep -q SyncBatchNorm "$T/o-$kind-2" || fail "np=2 did not use SyncBatchNorm"; }
  paste "$T/loss-$kind-1" "$T/loss-$kind-2" "$T/torch-$kind" | awk -v kind=$kind '
    function abs(v) { return v < 0 ? -v : v }
    { for (i = 1; i <= 3; i++)
        if ($i !~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/) {
          printf "%s step %d: not a number: %s\n", kind, NR, $0; bad = 1; next }
      if (abs($1 - $2) > 2e-5) { printf "%s step %d: np=1 loss %s, np=2 loss %s\n", kind, NR, $1, $2; bad = 1 }
      for (i = 1; i <= 2; i++) {
        tol = NR == 1 ? 2e-5 : 1e-4 * abs($3)
        if (tol < 2e-5) tol = 2e-5
        if (abs($i - $3) > tol) { printf "%s step %d: np=%d loss %s, torch %s\n", kind, NR, i, $i, $3; bad = 1 } } }
    END { exit bad }' || fail "$kind: the printed loss is not the global batch loss"
  echo "$kind loss per step (np=1 | np=2 | torch): $(paste -d'|' "$T/loss-$kind-1" "$T/loss-$kind-2" "$T/torch-$kind" | tr '\n' ' ')"
done
echo ok
