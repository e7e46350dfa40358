#!/bin/sh
# test_schedule.sh -- every --lr-schedule, with and without warm-up, against
# PyTorch's schedulers (an outside reference): from the same initial weights
# (torch's, loaded with --init), 12 steps of plain SGD (momentum 0, no weight
# decay) on the file order (--no-shuffle) give torch's weights to 1e-5
# relative per tensor, and the lr of every progress line (printed with 4
# significant digits) is torch's lr of that step to 5e-4 relative.  A
# weights comparison catches an lr that is off at any single step: one
# step's update at a wrong lr moves the weights by far more than 1e-5.
#
# ddptrain's warm-up (src/train/optim.c optim_lr) is lr * (t+1)/W for the steps
# t = 0 .. W-1, then the schedule.  In torch terms:
#   constant + warm-up  LinearLR(start_factor=1/W, total_iters=W-1)
#   cosine              CosineAnnealingLR(T_max=T), or, with warm-up,
#                       SequentialLR([LinearLR(..), CosineAnnealingLR(T_max=T-W)],
#                       milestones=[W]): the cosine starts after the warm-up
#   step                StepLR(step_size=S, gamma), or, with warm-up,
#                       ChainedScheduler([LinearLR(..), StepLR(S, gamma)]):
#                       the step decay counts from step 0, not from the end of
#                       the warm-up (the two agree only for W <= S; this test
#                       uses W <= S)
# Needs /usr/bin/python3 with torch and h5py; skipped (77) when they are
# absent, unless DDP_REQUIRE_TORCH=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
ddp_need_torch
ddp_tmpdir
"$DDPPREP" synthetic --classes 5 --features 12 --samples 300 --seed 21 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
STEPS=12 BATCH=16 LR=0.3 MODEL=linear:16,relu,linear:auto
# name schedule warmup step-size gamma
CASES="constant:constant:0:1000:0.1 warm:constant:4:1000:0.1 cos:cosine:0:1000:0.1
  coswarm:cosine:3:1000:0.1 step:step:0:3:0.5 stepwarm:step:3:4:0.5"

cat >"$T/ref.py" <<'PY'
# ref.py DECK OUTDIR STEPS BATCH LR MODEL CASE...: OUTDIR/init.h5, NAME.h5, NAME.lr
import sys, warnings, torch, torchref
from torch.optim import lr_scheduler as S
warnings.filterwarnings("ignore")
deck, out, steps, batch, lr = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
cases = sys.argv[7:]
torch.manual_seed(3)
x, y = torchref.load_split(deck)
net = torchref.build(sys.argv[6], 12, 5)
init = {k: v.clone() for k, v in net.state_dict().items()}
torchref.save_weights(init, out + "/init.h5")

def schedule(opt, kind, W, step_size, gamma):
    warm = S.LinearLR(opt, start_factor=1.0 / W, end_factor=1.0, total_iters=W - 1) if W > 0 else None
    if kind == "constant":
        return warm or S.LambdaLR(opt, lambda t: 1.0)
    if kind == "cosine":
        cos = S.CosineAnnealingLR(opt, T_max=steps - W, eta_min=0)
        return S.SequentialLR(opt, [warm, cos], milestones=[W]) if warm else cos
    st = S.StepLR(opt, step_size=step_size, gamma=gamma)
    assert W <= step_size
    return S.ChainedScheduler([warm, st]) if warm else st

for case in cases:
    name, kind, W, step_size, gamma = case.split(":")
    W, step_size, gamma = int(W), int(step_size), float(gamma)
    net.load_state_dict(init)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0)
    sched = schedule(opt, kind, W, step_size, gamma)
    lrs = []
    for t in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        xb, yb = x[t * batch:(t + 1) * batch], y[t * batch:(t + 1) * batch]
        torch.nn.functional.cross_entropy(net(xb), yb).backward()
        opt.step()
        sched.step()
    # the composition is the one intended: warm-up from lr/W to lr, then
    # the schedule (a check of this script, not of ddptrain)
    if W > 0:
        assert abs(lrs[0] - lr / W) < 1e-12 and abs(lrs[W - 1] - lr) < 1e-12, lrs
    assert len(set(round(v, 12) for v in lrs)) > (1 if kind != "constant" or W else 0), lrs
    torchref.save_weights(net, "%s/%s.h5" % (out, name))
    with open("%s/%s.lr" % (out, name), "w") as f:
        f.write("".join("%.17g\n" % v for v in lrs))
PY
$PY "$T/ref.py" "$T/d.h5" "$T" $STEPS $BATCH $LR $MODEL $CASES || fail "torch reference"

for c in $CASES; do
  IFS=: read -r name kind warm size gamma <<EOF
$c
EOF
  mpirun_np 1 "$DDPTRAIN" "$T/d.h5" --model $MODEL --init "$T/init.h5" \
    --steps $STEPS --batch $BATCH --no-shuffle --optimizer sgd --lr $LR --momentum 0 \
    --lr-schedule $kind --warmup-steps $warm --lr-step-size $size --lr-gamma $gamma \
    --log-every 1 --eval-every 0 --save "$T/w-$name.h5" >"$T/o-$name" 2>&1 \
    || { cat "$T/o-$name"; fail "$name: training"; }
  # the lr column of the progress lines, one per step
  sed -n 's/^step [0-9]*\/[0-9]* .* lr \([^ ]*\) .*/\1/p' "$T/o-$name" >"$T/lr-$name"
  [ "$(wc -l <"$T/lr-$name")" -eq $STEPS ] || { cat "$T/o-$name"; fail "$name: expected $STEPS progress lines"; }
  paste "$T/lr-$name" "$T/$name.lr" | awk -v name="$name" '
    { d = $1 - $2; if (d < 0) d = -d
      if (d > 5e-4 * $2 + 1e-12) { printf "%s: step %d: ddptrain lr %s, torch %s\n", name, NR, $1, $2; bad = 1 } }
    END { exit bad }' || fail "$name: printed lr differs from torch's schedule"
  "$WEIGHTS_CMP" "$T/w-$name.h5" "$T/$name.h5" 1e-5 >"$T/cmp" \
    || { cat "$T/cmp"; fail "$name: weights differ from torch's (lr schedule $kind, warm-up $warm)"; }
  echo "$name ($kind, warm-up $warm): lr $(tr '\n' ' ' <"$T/lr-$name")"
  echo "  weights vs torch: $(tail -n 1 "$T/cmp")"
done
echo ok
