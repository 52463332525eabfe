#!/usr/bin/env python3
"""Random draws in eager mode against stock CPU in one process, per call: dropout's mask,
`bernoulli_(p)` on a float32 tensor, at cnn-mnist-train's two dropout shapes and at 4M elements,
`F.dropout` in training (the mask, its scaling and the product) at the first, and `uniform_`
(torch.rand's) on 4M elements and as `nn.init.kaiming_uniform_` of a 3072 x 768 weight (every
Linear's initialization). The device's kernels (src/device/library_random.cpp) draw PyTorch's
CPU generator in bulk; stock's ATen kernels call it per element. Each case is checked first: the
device's result equals stock's from the same seed. Blocks alternate (bench/alternating.py).
Prints one JSON object: per case the medians over the rounds of microseconds per call, stock's
time over the device's, and for the plain fills the floor a kernel writing them cannot beat (4
bytes an element written at the bandwidth of the STREAM triad measured in the same run) over the
device's time.

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
      MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \\
      PYTHONPATH=build/python /usr/bin/python3 bench/random_draws.py [--threads 1] [--rounds 9]
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import start_eager_report, stock_and_device, triad_gb_per_s  # noqa: E402

# name: (shape, op, whether the case is a plain fill the floor applies to)
CASES = {
    "bernoulli_(0.75) 64x64x12x12": ((64, 64, 12, 12), lambda x: x.bernoulli_(0.75), True),
    "bernoulli_(0.5) 64x128": ((64, 128), lambda x: x.bernoulli_(0.5), True),
    "bernoulli_(0.9) 4M": ((1 << 22,), lambda x: x.bernoulli_(0.9), True),
    "dropout(0.25) 64x64x12x12": ((64, 64, 12, 12),
                                  lambda x: F.dropout(x, 0.25, training=True), False),
    "uniform_(-1, 1) 4M": ((1 << 22,), lambda x: x.uniform_(-1, 1), True),
    "kaiming_uniform_ 3072x768": ((3072, 768),
                                  lambda x: torch.nn.init.kaiming_uniform_(x, a=5 ** 0.5), True),
}


def main(argv):
    args, device, result = start_eager_report(__doc__, argv)
    triad = triad_gb_per_s(args.threads)
    result["triad_gb_per_s"] = round(triad, 1)
    for name, (shape, op, mask) in CASES.items():
        x = torch.randn(shape)
        d = x.to(device)
        torch.manual_seed(1)
        want = op(x.clone())
        torch.manual_seed(1)
        got = op(d.clone()).cpu()
        if not torch.equal(got, want):
            sys.exit(f"{name}: the device's result differs from stock's from the same seed")
        calls = max(5, (1 << 23) // x.numel())
        case = stock_and_device(op, (x,), (d,), calls, args.rounds, torchneuron.synchronize)
        if mask:
            floor_us = 4 * x.numel() / (triad * 1e9) * 1e6
            case["floor_us"] = round(floor_us, 1)
            case["floor_over_device"] = round(floor_us / case["device_us"], 3)
        result["cases"][name] = case
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
