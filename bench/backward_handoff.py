#!/usr/bin/env python3
"""Where tiny-regression-train's step goes (bench/workloads.py: Linear-ReLU-Linear on a batch of
32, mse_loss, SGD): microseconds per step of its parts (zero_grad, forward and loss, backward,
optimizer step) on stock CPU and on the device, in one process, the variants taking turns block
by block so the machine's noise falls on all alike (after 20 steps of each, whose parameters must agree).
Medians over the rounds; prints one JSON object.

PyTorch 1.13 runs the backward pass of device tensors on autograd's device thread, so every
`backward()` on the device used to hand its work to that thread and wait for it (two wake-ups);
torchneuron now runs the pass on the calling thread (python/torchneuron/_backward_engine.py,
`NEURON_BACKWARD_ON_CALLER`). Two more variants show what that changed:

- `device-engine-thread`: the same step with PyTorch's engine (`_backward_engine.pytorch_engine()`
  for the block), the device's backward ops on its device thread as before;
- `device-no-backward`: the step without `backward()` (the gradients stay as set once): what the
  device's ops cost on the caller's thread when no backward pass runs between steps.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/backward_handoff.py [--rounds 9] [--steps 300]
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
import torchneuron  # noqa: E402
from torchneuron import _backward_engine  # noqa: E402

PARTS = ("zero_grad", "forward", "backward", "step")


def build(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
    x, y = torch.randn(32, 8).to(device), torch.randn(32, 1).to(device)
    return model, x, y, torch.optim.SGD(model.parameters(), lr=0.01)


def run_block(state, steps, backward=True):
    """Microseconds per step of each part, over `steps` steps."""
    model, x, y, opt = state
    totals = [0] * len(PARTS)
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        opt.zero_grad()
        t1 = time.perf_counter_ns()
        loss = F.mse_loss(model(x), y)
        t2 = time.perf_counter_ns()
        if backward:
            loss.backward()
        t3 = time.perf_counter_ns()
        opt.step()
        t4 = time.perf_counter_ns()
        for i, (a, b) in enumerate(((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
            totals[i] += b - a
    loss.item()
    return [t / steps / 1000 for t in totals]


def backward_thread_id(device):
    """The id of the thread that runs the device's backward passes: a gradient hook records it."""
    seen = []
    t = torch.ones(4, device=device, requires_grad=True)
    t.register_hook(lambda grad: seen.append(threading.get_native_id()))
    (t * 2).sum().backward()
    return seen[0]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    if min(args.rounds, args.steps) < 1:
        parser.error("--rounds and --steps must be positive")
    torch.set_num_threads(1)
    stock, device = build(torch.device("cpu")), build(torchneuron.device())
    run_block(stock, 20)
    run_block(device, 20)
    torchneuron.wait_for_compiles()
    for a, b in zip(stock[0].parameters(), device[0].parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-4, atol=1e-5)
    backward_thread = backward_thread_id(torchneuron.device())
    with _backward_engine.pytorch_engine():
        engine_thread = backward_thread_id(torchneuron.device())

    def engine_thread_block():
        with _backward_engine.pytorch_engine():
            return run_block(device, args.steps)
    # The gradients the no-backward variant keeps are those the last full step left.
    variants = {"stock": lambda: run_block(stock, args.steps),
                "device": lambda: run_block(device, args.steps),
                "device-engine-thread": engine_thread_block,
                "device-no-backward": lambda: run_block(device, args.steps, backward=False)}
    samples = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, variant in variants.items():
            samples[name].append(variant())
    caller = threading.get_native_id()
    result = {"backward_on_another_thread": backward_thread != caller,
              "engine_thread_backward_on_another_thread": engine_thread != caller,
              "us_per_step": {}}
    for name, blocks in samples.items():
        parts = {p: statistics.median(b[i] for b in blocks) for i, p in enumerate(PARTS)}
        parts["total"] = statistics.median(sum(b) for b in blocks)
        result["us_per_step"][name] = {k: round(v, 2) for k, v in parts.items()}
    steps = result["us_per_step"]
    result["device_vs_stock"] = round(steps["device"]["total"] / steps["stock"]["total"], 2)
    result["engine_thread_vs_stock"] = round(
        steps["device-engine-thread"]["total"] / steps["stock"]["total"], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
