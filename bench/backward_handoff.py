#!/usr/bin/env python3
"""Where tiny-regression-train's step goes (bench/workloads.py: Linear-ReLU-Linear on a batch of
32, mse_loss, SGD): microseconds per step of its parts (zero_grad, forward and loss, backward,
optimizer step) on stock CPU and on the device, in one process, the variants taking turns block
by block so the machine's noise falls on all alike (after 20 steps of each, whose parameters must agree).
Medians over the rounds; prints one JSON object.

PyTorch 1.13 runs the backward pass of device tensors on autograd's device thread, so every
`backward()` on the device hands its work to that thread and waits for it (two wake-ups). Two
more variants separate that handoff from the ops themselves:

- `device-no-backward`: the same step without `backward()` (the gradients stay as set once):
  what the device's ops cost on the caller's thread when no handoff happens between steps;
- `device-pinned`: the full step with the caller and autograd's device thread restricted to one
  CPU for the block (the caller's current one; both masks restored after), so a wake-up switches
  threads on a running CPU instead of waking the other one. Its blocks run after the others,
  taking turns with stock's (`stock-beside-pinned`). The library does not pin: threads the
  device thread starts (an OpenMP team, TBB workers) would inherit the one-CPU mask.

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


def current_cpu():
    with open(f"/proc/self/task/{threading.get_native_id()}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


class PinnedTogether:
    """The caller and `others` on the caller's current CPU while inside; masks restored after."""
    def __init__(self, others):
        self.ids = [threading.get_native_id()] + sorted(others)

    def __enter__(self):
        self.saved = {t: os.sched_getaffinity(t) for t in self.ids}
        cpu = {current_cpu()}
        for t in self.ids:
            os.sched_setaffinity(t, cpu)

    def __exit__(self, *exc):
        for t, mask in self.saved.items():
            os.sched_setaffinity(t, mask)
        assert all(os.sched_getaffinity(t) == mask for t, mask in self.saved.items())


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
    # The gradients the no-backward variant keeps are those the last full step left.
    variants = {"stock": lambda: run_block(stock, args.steps),
                "device": lambda: run_block(device, args.steps),
                "device-no-backward": lambda: run_block(device, args.steps, backward=False)}
    if backward_thread != threading.get_native_id():
        def pinned():
            with PinnedTogether([backward_thread]):
                return run_block(device, args.steps)
        variants["device-pinned"] = pinned
    samples = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name in ("stock", "device", "device-no-backward"):
            samples[name].append(variants[name]())
    # Pinned blocks last, taking turns with stock's (its own samples): once pinned, the two
    # threads tend to stay on one CPU after their masks are restored, which would carry over
    # into an unpinned block that followed.
    if "device-pinned" in variants:
        samples["stock-beside-pinned"] = []
        for _ in range(args.rounds):
            samples["stock-beside-pinned"].append(variants["stock"]())
            samples["device-pinned"].append(variants["device-pinned"]())
    result = {"backward_on_another_thread": backward_thread != threading.get_native_id(),
              "us_per_step": {}}
    for name, blocks in samples.items():
        parts = {p: statistics.median(b[i] for b in blocks) for i, p in enumerate(PARTS)}
        parts["total"] = statistics.median(sum(b) for b in blocks)
        result["us_per_step"][name] = {k: round(v, 2) for k, v in parts.items()}
    steps = result["us_per_step"]
    result["device_vs_stock"] = round(steps["device"]["total"] / steps["stock"]["total"], 2)
    if "device-pinned" in steps:
        result["pinned_vs_stock"] = round(
            steps["device-pinned"]["total"] / steps["stock-beside-pinned"]["total"], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
