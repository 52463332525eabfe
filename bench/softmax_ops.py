#!/usr/bin/env python3
"""Softmax and log_softmax, forward and backward (the kernels of src/fusion/reduction_ops.cpp's
row-wise ops; issue 15's `softmax` in eager mode), on the device in eager mode against stock CPU
in one process, per call, over the last dimension of two shapes: an attention score tensor
(8 x 12 x 128 x 128, rows of 128: the `softmax` workload's) and a language model's logits
(560 x 2000: `lstm-lm-train`'s 35 x 16 tokens over its 2,000-word vocabulary, whose
cross-entropy runs log_softmax). Blocks alternate stock and device (bench/alternating.py), after
a check against the CPU and a warm-up (the first call waits for its kernel's compile). Both
sides allocate their result every call, stock from the C library (run with jemalloc preloaded,
as run_bench.py's stock-tuned mode, for the fair baseline) and the device from its caching
allocator. Prints one JSON object: per case the medians over the rounds of microseconds per call
and stock's time over the device's.

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
      MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \\
      PYTHONPATH=build/python /usr/bin/python3 bench/softmax_ops.py [--threads 1] [--rounds 9]
"""
import json
import os
import sys

import torch

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import start_eager_report, stock_and_device  # noqa: E402

SHAPES = {"attention 8x12x128x128": ((8, 12, 128, 128), 20),  # shape, calls per block
          "logits 560x2000": ((560, 2000), 20)}

# name: op(x, grad, softmax(x), log_softmax(x))
OPS = {
    "softmax": lambda x, g, y, ly: torch.softmax(x, -1),
    "log_softmax": lambda x, g, y, ly: torch.log_softmax(x, -1),
    "softmax_backward": lambda x, g, y, ly: torch._softmax_backward_data(g, y, -1, x.dtype),
    "log_softmax_backward":
        lambda x, g, y, ly: torch._log_softmax_backward_data(g, ly, -1, x.dtype),
}


def main(argv):
    args, device, result = start_eager_report(__doc__, argv)
    for shape_name, (shape, calls) in SHAPES.items():
        x, g = torch.randn(shape) * 3, torch.randn(shape)
        cpu = (x, g, torch.softmax(x, -1), torch.log_softmax(x, -1))
        dev = tuple(t.to(device) for t in cpu)
        for name, op in OPS.items():
            # Both sum a row in float32, in different orders: log_softmax's backward over 2,000
            # gradients (a sum near 45) differs from ATen's by up to 2e-5, each within 1.6e-5 of
            # the float64 result.
            torch.testing.assert_close(op(*dev).cpu(), op(*cpu), rtol=1e-5, atol=1e-4)
            result["cases"][f"{name} {shape_name}"] = stock_and_device(
                op, cpu, dev, calls, args.rounds, torchneuron.synchronize)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
