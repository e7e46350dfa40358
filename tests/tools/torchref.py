# torchref.py -- shared plumbing of the test scripts that check ddptrain
# against PyTorch (test_torch.sh, test_torch_train.sh, test_clip.sh,
# test_schedule.sh, test_loss_line.sh): reading a deck the way ddptrain reads
# it, building the torch.nn.Sequential of a --model spec, and moving weights
# between torch and ddptrain's weights files (datasets model/layers.<name>,
# <name> a key of the Sequential's state_dict: written by --save, read by
# --init).  What each test checks, and its tolerances, stay in the test.
#
# The scripts' Python (Debian's /usr/bin/python3 with torch and h5py) finds
# this module through PYTHONPATH, which ddp_need_torch (testenv.sh) points at
# the source tree's tests directory:  import torchref
import h5py
import numpy as np
import torch


def _stat(v, sample_shape):
    """A mean/std/scale attribute (float64) shaped to broadcast over samples:
    one value, one per element of a sample, or one per channel of
    [C, H, W] images (src/data/deck.h)."""
    v = np.atleast_1d(np.asarray(v, dtype=np.float64))
    if v.size == 1:
        return v.reshape(())
    if v.size == int(np.prod(sample_shape)):
        return v.reshape(sample_shape)
    if len(sample_shape) == 3 and v.size == sample_shape[0]:
        return v.reshape(-1, 1, 1)
    raise ValueError("torchref: %d statistics for samples of shape %s" % (v.size, sample_shape))


def load_split(deck, split="train", dtype=torch.float32):
    """(x, y) of /<split> in DECK as ddptrain sees them.

    x = (raw * scale - mean) / std with the attributes of /<split>/x (for a
    split other than train that has none of mean, std, scale: those of
    /train/x, as src/data/deck_open.c does); mean and std are read as float32, scale
    (uint8 decks only; default 1/255) as float64.  With dtype float32 the
    values are ddptrain's to the bit: raw * a + b in float32 with
    a = float32(scale / std) and b = float32(-mean / std).  With float64 the
    same formula is evaluated in float64 (a reference without ddptrain's
    rounding).  y: integer labels as int64; float regression targets as
    DTYPE, shaped as stored."""
    with h5py.File(deck, "r") as d:
        xd = d[split + "/x"]
        attrs = xd.attrs
        if split != "train" and not any(k in attrs for k in ("mean", "std", "scale")):
            attrs = d["train/x"].attrs
        raw, yr = xd[()], d[split + "/y"][()]
        u8 = raw.dtype == np.uint8
        shape = raw.shape[1:]
        f32 = lambda k, dflt: np.asarray(attrs[k], dtype=np.float32) if k in attrs else dflt
        mean = _stat(f32("mean", 0.0), shape)
        std = _stat(f32("std", 1.0), shape)
        scale = float(attrs["scale"]) if u8 and "scale" in attrs else (1 / 255 if u8 else 1.0)
    if dtype == torch.float64:
        x = raw.astype(np.float64)
        if u8:
            x = x * scale
        x = (x - mean) / std
    elif dtype == torch.float32:
        a, b = (scale / std).astype(np.float32), (-mean / std).astype(np.float32)
        x = (raw.astype(np.float32) * a + b).astype(np.float32)
    else:
        raise ValueError("torchref: dtype %s (float32 or float64)" % dtype)
    if np.issubdtype(yr.dtype, np.integer):
        y = torch.from_numpy(yr.astype(np.int64))
    else:
        y = torch.from_numpy(yr).to(dtype)
    return torch.from_numpy(x), y


def build(spec, n, out):
    """torch.nn.Sequential of a --model spec of a tabular deck: linear:N
    (linear:auto has OUT outputs), bn, relu, gelu; N input features.  The
    layers are made in the spec's order, so the initial weights follow from
    torch.manual_seed alone."""
    layers = []
    for item in spec.split(","):
        p = item.split(":")
        if p[0] == "linear":
            m = out if p[1] == "auto" else int(p[1])
            layers.append(torch.nn.Linear(n, m))
            n = m
        elif p[0] == "bn":
            layers.append(torch.nn.BatchNorm1d(n))
        elif p[0] == "relu":
            layers.append(torch.nn.ReLU())
        elif p[0] == "gelu":
            layers.append(torch.nn.GELU())
        else:
            raise SystemExit("torchref: layer %s not supported" % item)
    return torch.nn.Sequential(*layers)


def save_weights(net, path, prefix="layers."):
    """Write a module's (or a state_dict's) tensors as a weights file for
    ddptrain --init: floating tensors as float32, the int64 BN counters
    (num_batches_tracked) as they are.  PREFIX: "layers." for the
    Sequential of a spec, "" for a module with ddptrain's names itself (the
    named architectures: resnets.py)."""
    sd = net.state_dict() if isinstance(net, torch.nn.Module) else net
    with h5py.File(path, "w") as f:
        for k, v in sd.items():
            v = v.detach().cpu().numpy()
            f.create_dataset("model/" + prefix + k,
                             data=v if v.dtype == np.int64 else v.astype(np.float32))


def load_weights(net, path, prefix="layers."):
    """Load a weights file that ddptrain saved (--save) into NET, the
    Sequential of the same --model spec, or (PREFIX "") a module with
    ddptrain's names (strict: every tensor must match); returns NET."""
    with h5py.File(path, "r") as f:
        sd = {k.removeprefix(prefix): torch.as_tensor(v[()]) for k, v in f["model"].items()}
    net.load_state_dict(sd)
    return net
