#!/usr/bin/env python3
"""Elementwise ops with a number operand (`x / 1.5`, `x * 0.5`, `x + 1`, the optimizers'
`buf.mul_(momentum)`), device against stock PyTorch in one process: blocks of calls alternate
between the two (bench/alternating.py), on sizes from L2-resident (64K elements) to DRAM (16M).
Each case's device result is first checked against the CPU's, exactly (the script raises
otherwise); the report's `cases` give the medians of microseconds per call and stock's time over
the device's (`speedup`).

The device's kernel loads the number once, before its loop (src/fusion/kernel_builder.cpp,
tests/fusion/filecheck/scalar_operand_hoisted.mlir); it had been a load inside the loop, which
LLVM's vectorizer would not hoist past the output's stores.

    OMP_NUM_THREADS=1 NEURON_CACHE=0 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
        /usr/bin/python3 bench/scalar_operands.py [--rounds 9] [--threads 1]
"""
import json
import os
import sys

import torch

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import start_eager_report, stock_and_device  # noqa: E402

OPS = {
    "mul_(0.999)": lambda x: x.mul_(0.999),
    "x / 1.5": lambda x: x / 1.5,
    "x * 0.5": lambda x: x * 0.5,
    "x + 1": lambda x: x + 1,
    "div_(1.0001)": lambda x: x.div_(1.0001),
}
SIZES = {"64K": 1 << 16, "256K": 1 << 18, "1M": 1 << 20, "16M": 1 << 24}


def main(argv):
    args, device, result = start_eager_report(__doc__, argv)
    for label, size in SIZES.items():
        calls = max(5, (1 << 26) // (size * 4))
        base = torch.rand(size) + 1
        for name, op in OPS.items():
            # Fresh inputs per case: the in-place ops change their values call by call.
            x, d = base.clone(), base.to(device)
            assert torch.equal(op(d.clone()).cpu(), op(x.clone())), f"{name} {label}"
            result["cases"][f"{name} {label}"] = stock_and_device(op, (x,), (d,), calls,
                                                                  args.rounds,
                                                                  torchneuron.synchronize)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
