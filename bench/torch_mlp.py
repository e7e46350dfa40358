#!/usr/bin/python3
"""torch_mlp.py -- the PyTorch reference for bench_kernels and bench_ddp.sh:
the same model (--model mlp: 784-1024-1024-10 with BatchNorm1d; --model cnn:
Conv2d 32 3x3 pad 1, BatchNorm2d, ReLU, MaxPool2d 2, Conv2d 64 3x3 pad 1,
BatchNorm2d, ReLU, MaxPool2d 2, Linear 3136-128, ReLU, Linear 10 on 1x28x28
inputs), batch 64, cross-entropy, SGD (lr 0.01, momentum 0.9, weight decay
5e-4), one thread, same step structure (zero grads, forward, loss, backward,
step) on one fixed batch.

    /usr/bin/python3 bench/torch_mlp.py [--model mlp|cnn|resnet18|resnet50] [--image HW]
        [-b BATCH] [-n STEPS] [-w WARMUP]
(resnet18/50: tests/tools/resnets.py, the modules of ddptrain's --model resnetN, on
3 x HW x HW inputs, 10 classes.)

Prints the median step time and samples/s in the format of bench_kernels.

With --ddp it runs under torch.distributed (gloo) as DistributedDataParallel,
one rank of several started by hand (torchrun fails on Debian's Python):

    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \
        /usr/bin/python3 bench/torch_mlp.py --ddp & done; wait

and rank 0 prints `torch ranks=W batch=B samples_per_s=X step_ms_p50=Y`
(samples/s over all ranks).  PyTorch refuses SyncBatchNorm on CPU, so the
DDP model keeps per-rank BatchNorm statistics.
"""
import argparse
import os
import sys
import time

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-b", "--batch", type=int, default=64)
    ap.add_argument("-n", "--steps", type=int, default=200)
    ap.add_argument("-w", "--warmup", type=int, default=10)
    ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel over gloo")
    ap.add_argument("--model", choices=("mlp", "cnn", "resnet18", "resnet50"), default="mlp")
    ap.add_argument("--image", type=int, default=64, help="resnets: 3 x IMAGE x IMAGE inputs")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if a.model == "mlp":
        model = nn.Sequential(nn.Linear(784, 1024), nn.BatchNorm1d(1024), nn.ReLU(),
                              nn.Linear(1024, 1024), nn.BatchNorm1d(1024), nn.ReLU(),
                              nn.Linear(1024, 10))
        shape = (a.batch, 784)
    elif a.model.startswith("resnet"):  # ddptrain's --model resnetN (torchvision's)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                        "tools"))
        import resnets
        model = resnets.ResNet(a.model, 3, 10)
        shape = (a.batch, 3, a.image, a.image)
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(),
                              nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
        shape = (a.batch, 1, 28, 28)
    world, rank = 1, 0
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(*shape) * 2 - 1
    y = torch.randint(0, 10, (a.batch,))
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    if a.ddp:
        # every rank's median matters: report the slowest
        t = torch.tensor([med])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        med = float(t[0])
        if rank == 0:
            print(f"torch ranks={world} batch={a.batch} samples_per_s={world * a.batch / med:.0f} "
                  f"step_ms_p50={med * 1e3:.3f}", flush=True)
        dist.destroy_process_group()
        return
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, batch {a.batch}")
    print(f"  {'pytorch training step':<34} {med * 1e3:10.3f} {a.batch / med:12.0f}")


if __name__ == "__main__":
    main()
