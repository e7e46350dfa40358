#!/usr/bin/python3
"""torch_mlp.py -- the PyTorch reference for bench_kernels: the same MLP
784-1024-1024-10 with BatchNorm1d, batch 64, cross-entropy, SGD (lr 0.01,
momentum 0.9, weight decay 5e-4), one thread, same step structure (zero
grads, forward, loss, backward, step) on one fixed batch.

    /usr/bin/python3 bench/torch_mlp.py [-b BATCH] [-n STEPS] [-w WARMUP]

Prints the median step time and samples/s in the format of bench_kernels.
"""
import argparse
import time

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-b", "--batch", type=int, default=64)
    ap.add_argument("-n", "--steps", type=int, default=200)
    ap.add_argument("-w", "--warmup", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.BatchNorm1d(1024), nn.ReLU(),
                          nn.Linear(1024, 1024), nn.BatchNorm1d(1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(a.batch, 784) * 2 - 1
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
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, batch {a.batch}")
    print(f"  {'pytorch training step':<34} {med * 1e3:10.3f} {a.batch / med:12.0f}")


if __name__ == "__main__":
    main()
