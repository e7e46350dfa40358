#!/usr/bin/python3
"""torch_fashion.py -- PyTorch DDP reference for the Fashion-MNIST
time-to-accuracy in bench/results.md: the recipes of the Fashion-MNIST
examples of docs/usage.md: MLP (--model mlp: 784-1024-1024-10 with
BatchNorm) and CNN (--model cnn: Conv2d 32 3x3 pad 1, BatchNorm2d, ReLU,
MaxPool2d 2, Conv2d 64 3x3 pad 1, BatchNorm2d, ReLU, MaxPool2d 2, Linear
3136-128, ReLU, Linear 10) with AdamW, and the CIFAR-style ResNet-20
(--model resnet20: tests/tools/resnets.py, ddptrain's --model resnet20) with
SGD (--optimizer sgd --momentum M [--nesterov]) and --augment hflip,crop:P
(a random crop after P pixels of raw-zero padding, then a random horizontal
flip, as ddptrain's --augment; drawn by torch, not by ddptrain's Philox);
linear warm-up then cosine decay to 0 at the last step, batch B per rank,
shuffled by a DistributedSampler that drops the last incomplete batch, on a
deck written by `ddptrain-prep idx`, read and normalised the way ddptrain
reads it.

One rank of several, started by hand (torchrun fails on Debian's Python), one
thread per rank:

    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29512 \\
        /usr/bin/python3 bench/torch_fashion.py fashion.h5 --epochs 5 & done; wait

After every epoch it evaluates /val (sharded over the ranks, counts summed)
and rank 0 prints `epoch=E time_s=T val_acc=A`, T the seconds since the ranks
started training (after reading the deck), or since the Unix time --start.
PyTorch refuses SyncBatchNorm on CPU, so the batch statistics are per rank
(ddptrain's are global).
"""
import argparse
import math
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
from torch import nn


def load(deck, split):
    """x = raw * float32(scale / std) + float32(-mean / std), as src/data/deck.c."""
    with h5py.File(deck, "r") as d:
        raw, y = d[split + "/x"][()], d[split + "/y"][()]
        at = d["train/x"].attrs
        mean = np.float32(at["mean"])
        std = np.float32(at["std"])
        scale = float(at["scale"]) if "scale" in at else 1 / 255
    a, b = np.float32(scale / std), np.float32(-mean / std)
    x = (raw.reshape(len(raw), -1).astype(np.float32) * a + b).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)), float(b)


def augment(x, hflip, crop, pad_value):
    """Random crop after `crop` pixels of padding (raw 0: pad_value once
    normalised), then a random horizontal flip, per sample; x is [N,C,H,W]."""
    n, _, h, w = x.shape
    if crop > 0:
        p = nn.functional.pad(x, (crop, crop, crop, crop), value=pad_value)
        dy = torch.randint(0, 2 * crop + 1, (n,)).tolist()
        dx = torch.randint(0, 2 * crop + 1, (n,)).tolist()
        x = torch.stack([p[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])
    if hflip:
        f = torch.rand(n) < 0.5
        x = torch.where(f[:, None, None, None], x.flip(3), x)
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("deck")
    ap.add_argument("--model", choices=("mlp", "cnn", "resnet20"), default="mlp")
    ap.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--augment", default="", help="hflip,crop:P as ddptrain's --augment")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--start", type=float, help="Unix time the times count from")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    xt, yt, pad_value = load(a.deck, "train")
    xv, yv, _ = load(a.deck, "val")
    hflip = "hflip" in a.augment.split(",")
    crop = next((int(t[5:]) for t in a.augment.split(",") if t.startswith("crop:")), 0)
    torch.manual_seed(a.seed)
    if a.model == "mlp":
        model = nn.Sequential(nn.Linear(784, 1024), nn.BatchNorm1d(1024), nn.ReLU(),
                              nn.Linear(1024, 1024), nn.BatchNorm1d(1024), nn.ReLU(),
                              nn.Linear(1024, 10))
    elif a.model == "resnet20":  # ddptrain's --model resnet20
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                        "tools"))
        import resnets
        xt, xv = xt.reshape(-1, 1, 28, 28), xv.reshape(-1, 1, 28, 28)
        model = resnets.ResNet("resnet20", 1, 10)
    else:
        xt, xv = xt.reshape(-1, 1, 28, 28), xv.reshape(-1, 1, 28, 28)
        model = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(),
                              nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    model = nn.parallel.DistributedDataParallel(model)
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                              nesterov=a.nesterov, weight_decay=a.weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    ds = torch.utils.data.TensorDataset(xt, yt)
    sampler = torch.utils.data.distributed.DistributedSampler(ds, shuffle=True, seed=a.seed,
                                                              drop_last=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, sampler=sampler, drop_last=True)
    total = len(loader) * a.epochs
    w = a.warmup_steps

    def lr_factor(t):  # src/train/optim.c optim_lr
        if w > 0 and t < w:
            return (t + 1) / w
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (t - w) / max(1, total - w))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    loss_fn = nn.CrossEntropyLoss()
    vlo, vhi = rank * len(xv) // world, (rank + 1) * len(xv) // world
    dist.barrier()
    t0 = time.time() if a.start is None else a.start
    for epoch in range(a.epochs):
        model.train()
        sampler.set_epoch(epoch)
        for x, y in loader:
            if hflip or crop:
                x = augment(x, hflip, crop, pad_value)
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            correct = sum((model(xv[i:min(i + 1000, vhi)]).argmax(1) == yv[i:min(i + 1000, vhi)])
                          .sum().to(torch.float64) for i in range(vlo, vhi, 1000))
        dist.all_reduce(correct)
        if rank == 0:
            print("epoch=%d time_s=%.2f val_acc=%.4f"
                  % (epoch + 1, time.time() - t0, correct.item() / len(xv)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
