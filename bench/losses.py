#!/usr/bin/env python3
"""The compiled pointwise losses (mse_loss, smooth_l1_loss, huber_loss; issue 15 item 1) against
stock CPU in one process: the forward alone and forward plus backward, per call, at 32, 64K and
1M elements, measured in blocks alternating with stock so that the machine's noise falls on both
alike; medians over the rounds. Each case is checked against the CPU first. The backward
includes starting a backward pass, which on the device hands work to autograd's device thread
(`backward-32` in op_overhead.py measures that alone). Prints one JSON object.

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
      MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \\
      PYTHONPATH=build/python /usr/bin/python3 bench/losses.py [--threads 1] [--rounds 7]
"""
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import per_call_us, threads_and_rounds  # noqa: E402

LOSSES = {
    "mse_loss": F.mse_loss,
    "smooth_l1_loss": lambda a, b: F.smooth_l1_loss(a, b, beta=0.7),
    "huber_loss": lambda a, b: F.huber_loss(a, b, delta=1.3),
}
SIZES = {"32": (32, 2000), "64K": (64 << 10, 200), "1M": (1 << 20, 20)}  # elements, calls


def forward(loss):
    return lambda a, b: loss(a, b)


def forward_backward(loss):
    def run(a, b):
        leaf = a.detach().requires_grad_()
        loss(leaf, b).backward()
        return leaf.grad
    return run


def main(argv):
    args = threads_and_rounds(__doc__, argv, rounds=7)
    torch.manual_seed(0)
    device = torchneuron.device()
    result = {"threads": torch.get_num_threads(), "rounds": args.rounds, "cases": {}}
    for size, (elements, calls) in SIZES.items():
        a, b = torch.randn(elements), torch.randn(elements)
        da, db = a.to(device), b.to(device)
        for name, loss in LOSSES.items():
            for part, make in (("forward", forward), ("forward+backward", forward_backward)):
                fn = make(loss)
                torch.testing.assert_close(fn(da, db).cpu(), fn(a, b))
                sync = torchneuron.synchronize
                for _ in range(2):  # warm-up: kernels, caches
                    per_call_us(fn, (a, b), calls, sync)
                    per_call_us(fn, (da, db), calls, sync)
                stock, device_us = [], []
                for _ in range(args.rounds):
                    stock.append(per_call_us(fn, (a, b), calls, sync))
                    device_us.append(per_call_us(fn, (da, db), calls, sync))
                s, d = statistics.median(stock), statistics.median(device_us)
                result["cases"][f"{name}-{size}-{part}"] = {
                    "stock_us": round(s, 2), "device_us": round(d, 2),
                    "speedup": round(s / d, 3)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
