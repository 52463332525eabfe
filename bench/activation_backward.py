#!/usr/bin/env python3
"""Activation backward kernels on large tensors, the device against stock CPU in one process:
ReLU's backward (threshold_backward) and ReLU6's (hardtanh_backward), with add as the reference
stream of the same three tensors. These are selects of a loaded gradient, the kernels that the
x86 code generator would turn into masked loads (src/fusion/unmasked_selects.h); on this project's
AMD machines those stream memory at two thirds of the plain loads' rate. Blocks alternate device
and stock so that the machine's noise falls on both alike. Prints one JSON object; medians over
the rounds, time per call in microseconds and the device's time over stock's.

    /usr/bin/python3 bench/activation_backward.py [--threads 1] [--rounds 9]
"""
import json
import os
import statistics
import sys
import time

import torch
# The device's side times its kernels: an op's first call waits for its compile.
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
import torchneuron  # noqa: E402
from alternating import threads_and_rounds  # noqa: E402

# Each writes a preallocated output (out=), so that the kernels are compared, not the allocators
# (stock's C library maps and faults in a fresh 64 MB result at every call).
OPS = {
    "add": lambda grad, x, out: torch.add(grad, x, out=out),
    "threshold_backward": lambda grad, x, out: torch.ops.aten.threshold_backward.grad_input(
        grad, x, 0.0, grad_input=out),
    "hardtanh_backward": lambda grad, x, out: torch.ops.aten.hardtanh_backward.grad_input(
        grad, x, 0.0, 6.0, grad_input=out),
}
SIZES = {"4M": 1 << 22, "16M": 1 << 24}


def per_call_us(op, args, calls):
    start = time.perf_counter()
    for _ in range(calls):
        op(*args)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv):
    args = threads_and_rounds(__doc__, argv)
    torch.manual_seed(0)
    device = torchneuron.device()
    results = {}
    for size_name, numel in SIZES.items():
        grad = torch.randn(numel)
        x = torch.randn(numel) * 4  # about half inside ReLU6's (0, 6), half outside
        cpu_args = (grad, x, torch.empty(numel))
        device_args = (grad.to(device), x.to(device), torch.empty(numel, device=device))
        calls = max(3, (1 << 25) // numel)
        for name, op in OPS.items():
            op(*cpu_args)
            op(*device_args)
            if not torch.equal(cpu_args[2], device_args[2].cpu()):
                raise SystemExit(f"activation_backward: {name} differs from the CPU")
            per_call_us(op, cpu_args, calls)  # warm-up: compiles, caches, the allocators
            per_call_us(op, device_args, calls)
            stock, neuron = [], []
            for _ in range(args.rounds):
                stock.append(per_call_us(op, cpu_args, calls))
                neuron.append(per_call_us(op, device_args, calls))
            results[f"{name}-{size_name}"] = {
                "stock_us": statistics.median(stock), "neuron_us": statistics.median(neuron),
                "ratio_median": statistics.median(n / s for n, s in zip(neuron, stock)),
                "device_gb_per_s": 3 * 4 * numel / statistics.median(neuron) / 1e3}
    print(json.dumps({"threads": args.threads, "rounds": args.rounds, "ops": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
