#!/usr/bin/python3
"""make_fixtures.py -- PyTorch reference fixtures for the golden tests.

Writes tests/fixtures/mlp.h5 and tests/fixtures/cnn.h5: a small model, one
batch, its initial weights, the train-mode forward, the gradients at init and
the weights after 5 optimizer steps (SGD and AdamW) on that batch, all
computed by PyTorch on the CPU with one thread.

Run with Debian's Python (torch 1.13, h5py), from anywhere:

    /usr/bin/python3 tests/tools/make_fixtures.py      # writes tests/fixtures/
    /usr/bin/python3 tests/tools/make_fixtures.py -o DIR

The output is deterministic for a given torch build (fixed seeds, one thread).

Models (the spec is ddptrain's --model string; the torch module is built so
that its state_dict names are ddptrain's checkpoint names, `layers.<i>.*`,
with i the position in the spec, parameter-free layers counted):

  mlp.h5  spec "linear:32,bn,relu,linear:16,bn,relu,linear:5", input [20]
          layers = Sequential(Linear(20,32), BatchNorm1d(32), ReLU(),
                              Linear(32,16), BatchNorm1d(16), ReLU(), Linear(16,5))
  cnn.h5  spec "conv:8:3:1:1,bn,relu,maxpool:2,conv:16:3:1:1,bn,relu,gap,linear:5",
          input [3, 8, 8]
          layers = Sequential(Conv2d(3,8,3,1,1), BatchNorm2d(8), ReLU(), MaxPool2d(2),
                              Conv2d(8,16,3,1,1), BatchNorm2d(16), ReLU(),
                              Gap() [AdaptiveAvgPool2d(1) then flatten: [n,c,h,w] -> [n,c]],
                              Linear(16,5))

Layout of each file (all floating-point data float32, little endian):

  /                   attributes: spec (str), input_shape (int64 [1] or [3]),
                      batch (16), classes (5), seed (int64), torch_version (str),
                      loss (str "cross_entropy", mean over the batch)
  /x                  float32 [16, 20] or [16, 3, 8, 8]: the batch, NCHW
  /y                  int64 [16]: labels in [0, 5)
  /init/<name>        the initial state_dict: layers.<i>.weight, layers.<i>.bias
                      (Linear weight [out, in], Conv weight [out, in, kh, kw]);
                      for BN also layers.<i>.running_mean, .running_var (float32)
                      and .num_batches_tracked (int64 scalar).  PyTorch default
                      init after torch.manual_seed(seed).
  /forward/out        float32 [16, 5]: logits of a train-mode forward (BN uses
                      batch statistics) on the initial weights
  /forward/loss       float32 scalar: CrossEntropyLoss (mean) of that forward
  /grad/<param name>  d(mean loss)/d(param) at the initial weights (parameters
                      only, same names and shapes as /init)
  /sgd/step5/<name>   the state_dict (weights AND BN buffers) after 5 SGD steps,
                      each step a train-mode forward/backward on the same batch;
                      group attributes: lr 0.1, momentum 0.9, weight_decay 1e-4,
                      nesterov 0, dampening 0, steps 5
  /adamw/step5/<name> the same with AdamW; attributes: lr 1e-2, beta1 0.9,
                      beta2 0.999, eps 1e-8, weight_decay 1e-2, amsgrad 0, steps 5

BN: momentum 0.1, eps 1e-5; running_var is updated with the unbiased batch
variance; num_batches_tracked counts the train-mode forwards (5 after step5).
No dropout layers.  Tolerances are the tests' business: the gradients are
float32 results of PyTorch's own kernels, not exact values.

CAVEAT for comparisons: a bias directly followed by BN (mlp layers.0.bias and
layers.3.bias, cnn layers.0.bias and layers.4.bias) has a true gradient of
exactly zero; its /grad values are float rounding noise (|g| ~ 1e-8), so
compare them with an absolute tolerance.  AdamW normalises that noise into
steps of up to lr, so under /adamw/step5 those biases (up to ~0.03 from init)
and the running_mean of the BN that follows them are NOT reproducible by
another implementation: skip them or bound them by steps * lr.  SGD turns the
noise into changes ~1e-9: everything under /sgd/step5 is comparable.
"""
import argparse
import copy
import os

import h5py
import numpy as np
import torch
from torch import nn

BATCH = 16
CLASSES = 5
STEPS = 5
SGD = dict(lr=0.1, momentum=0.9, weight_decay=1e-4, nesterov=False, dampening=0.0)
ADAMW = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False)


class Gap(nn.Module):
    """ddptrain's `gap`: global average pool to [n, c] (AdaptiveAvgPool2d(1) + flatten)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return torch.flatten(self.pool(x), 1)


class Net(nn.Module):
    """Wraps the Sequential as `layers` so state_dict names are layers.<i>.*."""

    def __init__(self, layers):
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def mlp():
    return Net([nn.Linear(20, 32), nn.BatchNorm1d(32), nn.ReLU(),
                nn.Linear(32, 16), nn.BatchNorm1d(16), nn.ReLU(),
                nn.Linear(16, CLASSES)])


def cnn():
    return Net([nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(), Gap(),
                nn.Linear(16, CLASSES)])


MODELS = {
    "mlp": dict(build=mlp, spec="linear:32,bn,relu,linear:16,bn,relu,linear:5",
                input_shape=(20,), seed=1234),
    "cnn": dict(build=cnn,
                spec="conv:8:3:1:1,bn,relu,maxpool:2,conv:16:3:1:1,bn,relu,gap,linear:5",
                input_shape=(3, 8, 8), seed=4321),
}


def write_state(group, state):
    for name, t in state.items():
        a = t.detach().cpu().numpy()
        if t.dtype == torch.int64:
            group.create_dataset(name, data=np.asarray(a, dtype=np.int64))
        else:
            group.create_dataset(name, data=np.asarray(a, dtype=np.float32))


def train_steps(model0, x, y, make_opt):
    model = copy.deepcopy(model0)
    model.train()
    opt = make_opt(model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return model.state_dict()


def make(name, outdir):
    m = MODELS[name]
    torch.manual_seed(m["seed"])
    model = m["build"]().float()
    x = torch.randn(BATCH, *m["input_shape"], dtype=torch.float32)
    y = torch.randint(0, CLASSES, (BATCH,), dtype=torch.int64)
    init = copy.deepcopy(model.state_dict())

    # forward (train mode) and gradients at init, on a copy so the BN
    # buffers of `model` stay at their initial values
    ref = copy.deepcopy(model)
    ref.train()
    out = ref(x)
    loss = nn.CrossEntropyLoss()(out, y)
    loss.backward()
    grads = {n: p.grad for n, p in ref.named_parameters()}

    sgd = train_steps(model, x, y, lambda ps: torch.optim.SGD(ps, **SGD))
    adamw = train_steps(model, x, y, lambda ps: torch.optim.AdamW(ps, **ADAMW))

    path = os.path.join(outdir, name + ".h5")
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["spec"] = m["spec"]
        f.attrs["input_shape"] = np.asarray(m["input_shape"], dtype=np.int64)
        f.attrs["batch"] = np.int64(BATCH)
        f.attrs["classes"] = np.int64(CLASSES)
        f.attrs["seed"] = np.int64(m["seed"])
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["loss"] = "cross_entropy"
        f.create_dataset("x", data=x.numpy().astype(np.float32))
        f.create_dataset("y", data=y.numpy().astype(np.int64))
        write_state(f.create_group("init"), init)
        g = f.create_group("forward")
        g.create_dataset("out", data=out.detach().numpy().astype(np.float32))
        g.create_dataset("loss", data=np.float32(loss.item()))
        write_state(f.create_group("grad"), grads)
        g = f.create_group("sgd")
        g.attrs["lr"] = SGD["lr"]
        g.attrs["momentum"] = SGD["momentum"]
        g.attrs["weight_decay"] = SGD["weight_decay"]
        g.attrs["nesterov"] = np.int64(SGD["nesterov"])
        g.attrs["dampening"] = SGD["dampening"]
        g.attrs["steps"] = np.int64(STEPS)
        write_state(g.create_group("step5"), sgd)
        g = f.create_group("adamw")
        g.attrs["lr"] = ADAMW["lr"]
        g.attrs["beta1"] = ADAMW["betas"][0]
        g.attrs["beta2"] = ADAMW["betas"][1]
        g.attrs["eps"] = ADAMW["eps"]
        g.attrs["weight_decay"] = ADAMW["weight_decay"]
        g.attrs["amsgrad"] = np.int64(ADAMW["amsgrad"])
        g.attrs["steps"] = np.int64(STEPS)
        write_state(g.create_group("step5"), adamw)
    os.replace(tmp, path)
    print(f"wrote {path}: loss {loss.item():.6f}")


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--outdir", default=os.path.join(here, "fixtures"))
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in MODELS:
        make(name, args.outdir)


if __name__ == "__main__":
    main()
