#!/usr/bin/env python3
"""Vector math on inputs outside a function's ordinary range, device against stock PyTorch in one
process: `exp` of -inf, of values that underflow or overflow, `log` of zeros and negatives,
`sigmoid` of -inf, `sin` of large arguments, `pow` of negative bases, with each function on
ordinary inputs for comparison. 64K float32 elements; blocks of calls alternate between stock and
the device (bench/alternating.py), and each line gives the medians of microseconds per call and
stock's time over the device's (`speedup`).

The device's loops call glibc's vector math (libmvec, `_ZGVeN16v_expf` ...; src/fusion/compiler.cpp,
VectorMathTable), which hands every vector holding such a lane to its scalar function, lane by
lane; ATen's Sleef routines handle them in the vector. Results are the same (the script checks
each case against the CPU within assert_close's float32 tolerance, NaN equal to NaN).

    OMP_NUM_THREADS=1 NEURON_CACHE=0 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
        /usr/bin/python3 bench/special_inputs.py [--rounds 5] [--elements 65536]
"""
import argparse
import json
import os
import sys

import torch
import torchneuron

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import stock_and_device  # noqa: E402


def cases(n):
    g = torch.Generator().manual_seed(0)
    r = torch.randn(n, generator=g)
    half = torch.rand(n, generator=g) > 0.5
    minus_inf = torch.where(half, r, torch.tensor(float("-inf")))
    return [
        ("exp ordinary", torch.exp, r),
        ("exp half -inf", torch.exp, minus_inf),
        ("exp x - 100 (underflow)", torch.exp, r - 100),
        ("exp x + 100 (overflow)", torch.exp, r + 100),
        ("log ordinary", torch.log, r.abs() + 0.5),
        ("log half zeros", torch.log, torch.where(half, r.abs(), torch.tensor(0.0))),
        ("log negatives", torch.log, -r.abs()),
        ("sigmoid half -inf", torch.sigmoid, minus_inf),
        ("sin ordinary", torch.sin, r),
        ("sin x * 1e5", torch.sin, r * 1e5),
        ("pow ordinary", lambda t: torch.pow(t, 2.5), r.abs()),
        ("pow negative bases", lambda t: torch.pow(t, 2.5), r),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--elements", type=int, default=1 << 16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dev = torchneuron.device()
    calls = max(5, (1 << 22) // args.elements)
    for name, fn, x in cases(args.elements):
        inputs = {"stock": x, "device": x.to(dev)}
        torch.testing.assert_close(fn(inputs["device"]).cpu(), fn(x), equal_nan=True,
                                   msg=lambda m: f"{name}: {m}")
        torchneuron.wait_for_compiles()  # timed: the compiled kernel, not interim launches
        timing = stock_and_device(fn, (inputs["stock"],), (inputs["device"],), calls,
                                  args.rounds, torchneuron.synchronize)
        print(json.dumps({"case": name, "elements": args.elements, **timing}), flush=True)


if __name__ == "__main__":
    main()
