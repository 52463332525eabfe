#!/usr/bin/env python3
"""Elementwise ops with a number operand (`x / 1.5`, `x * 0.5`, `x + 1`, the optimizers'
`buf.mul_(momentum)`), device against stock PyTorch in one process: blocks of calls alternate between
the two on the same sizes (bench/alternating.py), and each line gives the medians of
microseconds per call and stock's time over the device's (`speedup`). The sizes run from L2-resident (64K elements) to DRAM (16M).
Each op's device result is first checked against the CPU's, exactly (the script raises
otherwise).

The device's kernel loads the number once, before its loop (src/fusion/kernel_builder.cpp,
tests/fusion/filecheck/scalar_operand_hoisted.mlir); it had been a load inside the loop, which
LLVM's vectorizer would not hoist past the output's stores.

    OMP_NUM_THREADS=1 NEURON_CACHE=0 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
        /usr/bin/python3 bench/scalar_operands.py [--rounds 7] [--threads 1] [--sizes 65536,...]
"""
import argparse
import json
import os
import sys

import torch
import torchneuron

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import stock_and_device  # noqa: E402

OPS = {
    "mul_(0.999)": lambda x: x.mul_(0.999),
    "x / 1.5": lambda x: x / 1.5,
    "x * 0.5": lambda x: x * 0.5,
    "x + 1": lambda x: x + 1,
    "div_(1.0001)": lambda x: x.div_(1.0001),
}
SIZES = [1 << 16, 1 << 18, 1 << 20, 1 << 24]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES),
                        help="element counts, comma-separated")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dev = torchneuron.device()
    for size in [int(s) for s in args.sizes.split(",")]:
        calls = max(5, (1 << 26) // (size * 4))
        base = torch.rand(size, generator=torch.Generator().manual_seed(0)) + 1
        inputs = {"stock": base.clone(), "device": base.to(dev)}
        for name, fn in OPS.items():
            want, got = fn(base.clone()), fn(base.to(dev)).cpu()
            if not torch.equal(got, want):
                raise AssertionError(f"{name} on {size} elements: the device's result differs "
                                     f"from the CPU's at {int((got != want).sum())} elements")
            torchneuron.wait_for_compiles()  # timed: the compiled kernel, not interim launches
            timing = stock_and_device(fn, (inputs["stock"],), (inputs["device"],), calls,
                                      args.rounds, torchneuron.synchronize)
            print(json.dumps({"op": name, "elements": size, "threads": args.threads, **timing}),
                  flush=True)
            # In-place ops change the values round by round alike on both sides; restart them.
            inputs = {"stock": base.clone(), "device": base.to(dev)}


if __name__ == "__main__":
    main()
