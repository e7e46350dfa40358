#!/bin/sh
# same_weights.sh -- does a change leave what ddptrain computes as it was?
# Runs one fixed set of trainings with two builds and compares every dataset
# of the weights and checkpoint files they save, bit for bit: np=1/2/3, SGD
# and AdamW, SyncBN and local BN, accumulation, bf16 compression, clipping,
# dropout, convolutions, and a checkpoint resumed at the same and at another
# world size.  Not part of `make check` (it needs a build from before the
# change); docs/testing.md.
#
#   tests/tools/same_weights.sh OLD_BUILD NEW_BUILD [WORKDIR]
#
# OLD_BUILD and NEW_BUILD are build directories (ddptrain and ddptrain-prep
# in them).  Exit 0 when every file is bit-identical, 1 when one differs.
set -eu
[ $# -ge 2 ] || { sed -n '2,/^set/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
A=$(cd "$1" && pwd) B=$(cd "$2" && pwd)
W=${3:-$(mktemp -d)}
mkdir -p "$W"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
MPI="mpirun --oversubscribe --bind-to none -np"
[ "$(id -u)" = 0 ] && MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none -np"
FM=/usr/share/datasets/fashion-mnist

runs() { # runs BUILD OUT
  T=$1/ddptrain P=$1/ddptrain-prep O=$2
  rm -rf "$O" && mkdir -p "$O/ck"
  "$P" synthetic --classes 10 --features 64 --samples 4000 --val 500 --seed 3 -o "$O/mlp.h5" >/dev/null
  conv=""
  if [ -r "$FM/train-images-idx3-ubyte.gz" ]; then
    "$P" idx "$FM/train-images-idx3-ubyte.gz" "$FM/train-labels-idx1-ubyte.gz" --limit 1200 \
      --val "$FM/t10k-images-idx3-ubyte.gz" "$FM/t10k-labels-idx1-ubyte.gz" --val-limit 200 \
      -o "$O/img.h5" >/dev/null
    conv=1
  fi
  C="--device cpu --quiet --log-every 0"
  run() { name=$1 np=$2; shift 2
    $MPI "$np" "$T" $C "$@" --save "$O/$name.h5" >"$O/$name.log" 2>&1 ||
      { echo "same_weights: $name failed with $T:"; tail -3 "$O/$name.log"; exit 1; }
  }
  run np1 1 "$O/mlp.h5" --steps 30
  run np2_syncbn_adamw 2 "$O/mlp.h5" --steps 30 --optimizer adamw --lr 0.003
  run np3_accum 3 "$O/mlp.h5" --steps 20 --accum 2 --batch 16
  run np2_local_bn 2 "$O/mlp.h5" --steps 20 --no-sync-bn
  run np2_compress 2 "$O/mlp.h5" --steps 20 --grad-compress bf16
  run np2_clip 2 "$O/mlp.h5" --steps 20 --clip-grad-norm 0.5 --optimizer adamw --lr 0.003
  run np2_dropout 2 "$O/mlp.h5" --steps 20 --model linear:128,relu,dropout:0.2,linear:auto
  if [ -n "$conv" ]; then
    run np2_conv 2 "$O/img.h5" --steps 8 --batch 16 \
      --model conv:8:3:1:1,bn,relu,maxpool:2,conv:16:3:1:1,bn,relu,gap,linear:auto
    run np1_conv 1 "$O/img.h5" --steps 6 --batch 32 --optimizer adamw --lr 0.002 \
      --model conv:8:3:1:1,bn,relu,maxpool:2,flatten,linear:auto
  fi
  $MPI 2 "$T" $C "$O/mlp.h5" --steps 10 --ckpt-dir "$O/ck" --ckpt-every 5 >"$O/ck.log" 2>&1 ||
    { echo "same_weights: the checkpointed run failed with $T"; exit 1; }
  rm -f "$O/ck/ckpt_00000010.h5"
  run np2_resume 2 "$O/mlp.h5" --steps 10 --ckpt-dir "$O/ck" --resume auto
  run np3_resume_at_2 3 "$O/mlp.h5" --steps 10 --resume "$O/ck/ckpt_00000005.h5"
}
runs "$A" "$W/old"
runs "$B" "$W/new"
"$PY" - "$W/old" "$W/new" <<'PYEOF'
import os, sys
import h5py
old, new = sys.argv[1], sys.argv[2]
names = sorted(f for f in os.listdir(old) if f.endswith(".h5") and f not in ("mlp.h5", "img.h5"))
names += ["ck/" + f for f in sorted(os.listdir(os.path.join(old, "ck")))]
bad = 0
for f in names:
    a, b = h5py.File(os.path.join(old, f), "r"), h5py.File(os.path.join(new, f), "r")
    sets = []
    a.visit(lambda k: sets.append(k) if isinstance(a[k], h5py.Dataset) else None)
    for k in sets:
        if k not in b or a[k][()].tobytes() != b[k][()].tobytes():
            print(f"same_weights: {f}: {k} differs")
            bad += 1
            break
print(f"same_weights: {len(names)} files compared, {bad} differ")
sys.exit(1 if bad else 0)
PYEOF
