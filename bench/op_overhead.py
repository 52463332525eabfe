#!/usr/bin/env python3
"""Per-op cost of tiny ops from Python, the device against stock CPU in one process, measured
in alternating blocks so that the machine's noise falls on both sides alike (issue 3: an
8-element op at most 1.2x stock's time). Prints one JSON object; run_bench.py includes it.

    /usr/bin/python3 bench/op_overhead.py [--threads 1] [--rounds 21] [--ops-per-block 2000]
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torchneuron

# name -> the op on (x, y): 8-element float32 tensors.
OPS = {
    "add": lambda x, y: x + y,
    "mul_scalar": lambda x, y: x * 2.5,
    "relu": lambda x, y: torch.relu(x),
    "sum": lambda x, y: x.sum(),
}


def per_op_ns(op, x, y, count):
    start = time.perf_counter()
    for _ in range(count):
        op(x, y)
    return (time.perf_counter() - start) / count * 1e9


def measure(op, cpu_args, device_args, rounds, count):
    for _ in range(3):  # warm-up: compiles, caches, branch predictors
        per_op_ns(op, *cpu_args, count)
        per_op_ns(op, *device_args, count)
    stock, neuron, ratios = [], [], []
    for _ in range(rounds):
        s = per_op_ns(op, *cpu_args, count)
        n = per_op_ns(op, *device_args, count)
        stock.append(s)
        neuron.append(n)
        ratios.append(n / s)
    return {"stock_ns": statistics.median(stock), "neuron_ns": statistics.median(neuron),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "rounds": rounds}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--ops-per-block", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.threads < 1 or args.rounds < 1 or args.ops_per_block < 1:
        parser.error(f"--threads, --rounds and --ops-per-block must be positive, got "
                     f"{args.threads}, {args.rounds}, {args.ops_per_block}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, y = torch.randn(8), torch.randn(8)
    device = torchneuron.device()
    dx, dy = x.to(device), y.to(device)
    result = {"threads": args.threads, "elements": 8, "ops": {}}
    for name, op in OPS.items():
        if not torch.allclose(op(dx, dy).cpu(), op(x, y)):
            raise SystemExit(f"op_overhead: {name} on the device differs from the CPU")
        result["ops"][name] = measure(op, (x, y), (dx, dy), args.rounds, args.ops_per_block)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
