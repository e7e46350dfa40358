#!/usr/bin/env python3
"""torch_gpu_mlp.py -- the PyTorch reference of bench_gpu: the same MLP
(--in N, then L-1 layers of --width W with ReLU, a last Linear to --out
classes), the same batch, cross-entropy, AdamW (lr 1e-4, weight decay
0.01), on one GPU, in bf16 autocast and in fp32 (matmul TF32 off: PyTorch's
default, as bench_gpu's cublasSgemm), one fixed batch; CUDA events time
each block of steps.

    python3 bench/torch_gpu_mlp.py [--width 8192] [--in 8192] [--out 8192] [--layers 4]
        [--batch 4096] [--steps 5] [--rounds 5] [--warmup 3] [--precision bf16|fp32|both]

Prints per precision one line
    torch precision=bf16 step_ms=... samples_per_s=... tflops=... loss_first=... loss_last=...
with step_ms the median over the rounds and tflops from bench_gpu's count
(2*B*in*out for the forward and weight gradient of every layer, the input
gradient of layers 2..L).  Exit 77 when PyTorch or a GPU is missing.
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--in", dest="inp", type=int, default=None)
    ap.add_argument("--out", type=int, default=None)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precision", choices=("bf16", "fp32", "both"), default="both")
    a = ap.parse_args()
    inp = a.inp or a.width
    out = a.out or a.width
    try:
        import torch
        from torch import nn
    except ImportError:
        print("torch_gpu_mlp.py: no PyTorch: skipped", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("torch_gpu_mlp.py: PyTorch %s sees no GPU: skipped" % torch.__version__, file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.manual_seed(0)
    dims = [inp] + [a.width] * (a.layers - 1) + [out]
    mods = []
    for l in range(a.layers):
        mods.append(nn.Linear(dims[l], dims[l + 1]))
        if l + 1 < a.layers:
            mods.append(nn.ReLU())
    model = nn.Sequential(*mods).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(a.batch, inp, device=dev) * 2 - 1
    y = torch.randint(0, out, (a.batch,), device=dev)
    flops = sum(2.0 * a.batch * dims[l] * dims[l + 1] * (2 if l == 0 else 3) for l in range(a.layers))
    print("# torch %s, %s; %d parameters; GEMM FLOPs per step %.4g GFLOP"
          % (torch.__version__, torch.cuda.get_device_name(0),
             sum(p.numel() for p in model.parameters()), flops / 1e9))

    def step(bf16):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for prec in (("bf16", "fp32") if a.precision == "both" else (a.precision,)):
        bf16 = prec == "bf16"
        first = None
        for _ in range(a.warmup):
            loss = step(bf16)
            if first is None:
                first = loss.item()
        torch.cuda.synchronize()
        times = []
        for _ in range(a.rounds):
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(a.steps):
                loss = step(bf16)
            t1.record()
            t1.synchronize()
            times.append(t0.elapsed_time(t1) / a.steps)
        last = loss.item()
        if first is None:
            first = last
        ms = sorted(times)[len(times) // 2]
        print("torch precision=%s step_ms=%.4f samples_per_s=%.1f tflops=%.3f loss_first=%.5f loss_last=%.5f"
              % (prec, ms, a.batch / (ms * 1e-3), flops / (ms * 1e-3) / 1e12, first, last))
    return 0


if __name__ == "__main__":
    sys.exit(main())
