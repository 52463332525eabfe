#!/usr/bin/env python3
"""Per-op cost of tiny ops from Python, the device against stock CPU in one process, measured
in alternating blocks so that the machine's noise falls on both sides alike (issue 3: an
8-element op at most 1.2x stock's time; issue 15: add, mul, mm, nll_loss and a copy to the
device on 32 elements at most stock's). Also one backward pass of a 32-element graph
(`backward-32`: a product and a sum): PyTorch 1.13's autograd ran a device tensor's backward ops
on its own device thread, so each backward() call handed work to that thread and back; the
device's passes now run on the calling thread (python/torchneuron/_backward_engine.py).
Prints one JSON object; run_bench.py includes it.

    /usr/bin/python3 bench/op_overhead.py [--threads 1] [--rounds 21] [--ops-per-block 2000]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
# The device's side checks and times its kernels: an op's first call waits for its compile
# instead of running on the CPU meanwhile (interim launches; the cache bench measures those).
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
import torchneuron  # noqa: E402

# name -> the op on (x, y): 8-element float32 tensors (issue 3).
OPS = {
    "add": lambda x, y: x + y,
    "mul_scalar": lambda x, y: x * 2.5,
    # Number operands the kernel turns into CPU numbers (each call's capture keeps them).
    "pow_scalar": lambda x, y: x.pow(2),
    "clamp_min": lambda x, y: x.clamp(min=0.0),
    "relu": lambda x, y: torch.relu(x),
    "sum": lambda x, y: x.sum(),
}


def issue15_cases(device):
    """Issue 15's per-op costs on 32-element operands: name -> (stock op, device op, stock
    arguments, device arguments). A copy of a CPU tensor to the device is set against stock's
    clone() of it, the same bytes moved."""
    x, y = torch.randn(32), torch.randn(32)
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    log_probs, targets = torch.randn(4, 8).log_softmax(1), torch.randint(0, 8, (4,))
    to_device = lambda *args: [t.to(device) for t in args]
    return {
        "add-32": (torch.add, torch.add, (x, y), to_device(x, y)),
        "mul-32": (torch.mul, torch.mul, (x, y), to_device(x, y)),
        "mm-32": (torch.mm, torch.mm, (a, b), to_device(a, b)),
        "nll_loss-32": (F.nll_loss, F.nll_loss, (log_probs, targets),
                        to_device(log_probs, targets)),
        "copy_to_device-32": (torch.clone, lambda t: t.to(device), (x,), (x,)),
    }


def per_op_ns(op, args, count):
    start = time.perf_counter()
    for _ in range(count):
        op(*args)
    return (time.perf_counter() - start) / count * 1e9


def measure(op, cpu_args, device_args, rounds, count, device_op=None):
    device_op = device_op or op
    for _ in range(3):  # warm-up: compiles, caches, branch predictors
        per_op_ns(op, cpu_args, count)
        per_op_ns(device_op, device_args, count)
    stock, neuron, ratios = [], [], []
    for _ in range(rounds):
        s = per_op_ns(op, cpu_args, count)
        n = per_op_ns(device_op, device_args, count)
        stock.append(s)
        neuron.append(n)
        ratios.append(n / s)
    return {"stock_ns": statistics.median(stock), "neuron_ns": statistics.median(neuron),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "rounds": rounds}


def measure_backward(device, rounds, count):
    """One backward() of (x * 2).sum() on 32 elements, the CPU against the device: the cost of
    a backward pass's start and end (its two ops are tiny), checked to give the same gradient."""
    x = torch.randn(32)
    leaves = {"cpu": x.clone().requires_grad_(), "device": x.to(device).requires_grad_()}
    backward = lambda t: (t * 2).sum().backward()  # noqa: E731
    for leaf in leaves.values():
        backward(leaf)
    if not torch.equal(leaves["device"].grad.cpu(), leaves["cpu"].grad):
        raise SystemExit("op_overhead: backward-32 on the device differs from the CPU")
    return measure(backward, (leaves["cpu"],), (leaves["device"],), rounds, max(1, count // 10))


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
    for name, (op, device_op, cpu_args, device_args) in issue15_cases(device).items():
        if not torch.allclose(device_op(*device_args).cpu(), op(*cpu_args)):
            raise SystemExit(f"op_overhead: {name} on the device differs from the CPU")
        result["ops"][name] = measure(op, cpu_args, device_args, args.rounds, args.ops_per_block,
                                      device_op)
    result["ops"]["backward-32"] = measure_backward(device, args.rounds, args.ops_per_block)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
