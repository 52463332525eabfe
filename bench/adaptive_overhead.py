#!/usr/bin/env python3
"""tiny-chain-10 per op (issue 13's figure): a fixed chain of 10 elementwise ops on 8 elements
(add, mul by a scalar, tanh, sub, sigmoid, mul, exp, add, neg, relu), on stock CPU, on the device
in eager mode and on the device in adaptive mode (NEURON_ADAPTIVE_EAGER; with the tracer's
default, which leaves calls this small eager, and with every call recorded,
set_adaptive_min_bytes(0)), beside the floor: an
8-element `torch.empty_like` from Python (CPU and device). Every step's result stays referenced
until the block ends and the last is read (`.sum().item()`, a sync point), so the time covers
every recorded launch and nothing can be skipped as dead. Modes alternate block by block in one process, so the
machine's noise falls on all alike. Prints one JSON object; medians over the rounds.

    /usr/bin/python3 bench/adaptive_overhead.py [--threads 1] [--rounds 15] [--steps 300]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
# The device's side checks and times its kernels: an op's first call waits for its compile
# instead of running on the CPU meanwhile (interim launches; the cache bench measures those).
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
import torchneuron  # noqa: E402

OPS_PER_STEP = 10


def chain(t):
    t = t + 1
    t = t * 2.0
    t = torch.tanh(t)
    t = t - 0.5
    t = torch.sigmoid(t)
    t = t * t
    t = torch.exp(t)
    t = t + 3
    t = -t
    return torch.relu(t)


def chain_ns_per_op(x, steps, adaptive, min_bytes=None):
    """ns per op of the chain in eager mode or, with `adaptive`, under the tracer, which defers
    calls above `min_bytes` (None: its default; 0: every call, recording the tiny chain)."""
    default_min_bytes = torchneuron.adaptive_min_bytes()
    if min_bytes is not None:
        torchneuron.set_adaptive_min_bytes(min_bytes)
    torchneuron.set_adaptive(adaptive)
    start = time.perf_counter()
    results = [chain(x) for _ in range(steps)]
    results[-1].sum().item()  # a sync point: every recorded launch has run after it
    elapsed = time.perf_counter() - start
    torchneuron.set_adaptive(False)
    torchneuron.set_adaptive_min_bytes(default_min_bytes)
    return elapsed / (steps * OPS_PER_STEP) * 1e9


def floor_ns(x, count):
    start = time.perf_counter()
    for _ in range(count):
        torch.empty_like(x)
    return (time.perf_counter() - start) / count * 1e9


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    if min(args.threads, args.rounds, args.steps) < 1:
        parser.error("--threads, --rounds and --steps must be positive")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(8)
    d = x.to(torchneuron.device())
    expected = chain(x)
    default_min_bytes = torchneuron.adaptive_min_bytes()
    for adaptive, min_bytes in ((False, None), (True, None), (True, 0)):
        torchneuron.set_adaptive_min_bytes(default_min_bytes if min_bytes is None else min_bytes)
        torchneuron.set_adaptive(adaptive)
        for _ in range(5):  # warm-up: compiles, and the window's recurrence threshold
            got = chain(d)
            if not torch.allclose(got.cpu(), expected):
                raise SystemExit(f"adaptive_overhead: the chain differs from the CPU "
                                 f"(adaptive={adaptive}, min_bytes={min_bytes})")
        torchneuron.set_adaptive(False)
    torchneuron.set_adaptive_min_bytes(default_min_bytes)
    samples = {"stock": [], "eager": [], "adaptive": [], "adaptive_recorded": [],
               "floor_cpu": [], "floor_device": []}
    torchneuron.reset_metrics()
    for _ in range(args.rounds):
        start = time.perf_counter()
        results = [chain(x) for _ in range(args.steps)]
        float(results[-1].sum())
        samples["stock"].append((time.perf_counter() - start) / (args.steps * OPS_PER_STEP) * 1e9)
        samples["eager"].append(chain_ns_per_op(d, args.steps, False))
        samples["adaptive"].append(chain_ns_per_op(d, args.steps, True))
        samples["adaptive_recorded"].append(chain_ns_per_op(d, args.steps, True, min_bytes=0))
        samples["floor_cpu"].append(floor_ns(x, args.steps * OPS_PER_STEP))
        samples["floor_device"].append(floor_ns(d, args.steps * OPS_PER_STEP))
    median = {k: statistics.median(v) for k, v in samples.items()}
    adaptive = torchneuron.metrics()["adaptive"]
    print(json.dumps({
        "workload": "tiny-chain-10", "threads": args.threads, "rounds": args.rounds,
        "ns_per_op": median,
        "adaptive_speedup_over_stock": median["stock"] / median["adaptive"],
        "eager_speedup_over_stock": median["stock"] / median["eager"],
        "adaptive_above_floor_ns": median["adaptive"] - median["floor_cpu"],
        # The same with every call deferred (recorded into windows and replayed fused), what the
        # tracer's default leaves eager on tensors this small.
        "adaptive_min_bytes": default_min_bytes,
        "recorded_speedup_over_stock": median["stock"] / median["adaptive_recorded"],
        "recorded_above_floor_ns": median["adaptive_recorded"] - median["floor_cpu"],
        "replays": adaptive["replays"], "ops_deferred": adaptive["ops_deferred"],
        "recording_ns_per_op": adaptive["recording_ns_per_op"],
        "tracing_ns_per_op": adaptive["tracing_ns_per_op"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
