#!/usr/bin/env python3
"""Reductions on the device in eager mode against stock CPU in one process, per call. Over the
outer dimension of a row-major tensor, which the device runs in column order
(src/fusion/reduction_kernel_builder.cpp, emitColumnOrder: tiles of 64 columns): a Linear's bias
gradient (`sum(0)` of a 2048 x 768 gradient: 16 sequences of 128 tokens, a 768-wide model), its
mean, and layer norm's backward over the same shape, whose weight and bias gradients are such
reductions. Over rows, in float32 blocks (reduction_kernel_builder.cpp, sumsInBlocks): `sum()`
of 1M elements (split across threads), `sum(-1)` of the same shape and `mean(-1)` of attention
scores' 12288 rows of 128. Over rows: `amax(-1)`, `max(-1)` (values and indices) and `argmax(-1)` of the same
shape and of attention scores' 12288 rows of 128 (src/fusion/reduction_ops.cpp, extremum and
argExtremum). Blocks alternate (bench/alternating.py) after a check
against the CPU and a warm-up. Both sides allocate their results every call (run stock with
jemalloc preloaded, as run_bench.py's stock-tuned mode does). Prints one JSON object: per case
the medians over the rounds of microseconds per call and stock's time over the device's.

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
      MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \\
      PYTHONPATH=build/python /usr/bin/python3 bench/reductions.py [--threads 1] [--rounds 9]
"""
import json
import os
import sys

import torch

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import start_eager_report, stock_and_device  # noqa: E402

ROWS, WIDTH, CALLS = 2048, 768, 20


def layer_norm_backward(g, x, w, b, mean, rstd):
    return torch.ops.aten.native_layer_norm_backward(g, x, (WIDTH,), mean, rstd, w, b,
                                                     [True, True, True])


# name: op(grad, x, weight, bias, mean, rstd)
OPS = {
    "sum() 1M": lambda g, x, w, b, m, r: g.view(-1)[:1 << 20].sum(),
    "sum(-1) 2048x768": lambda g, x, w, b, m, r: g.sum(-1),
    "mean(-1) 12288x128": lambda g, x, w, b, m, r: g.reshape(-1, 128).mean(-1),
    "sum(0) 2048x768": lambda g, x, w, b, m, r: g.sum(0),
    "mean(0) 2048x768": lambda g, x, w, b, m, r: g.mean(0),
    "layer_norm backward 2048x768": layer_norm_backward,
    "amax(-1) 2048x768": lambda g, x, w, b, m, r: g.amax(-1),
    "amax(-1) 12288x128": lambda g, x, w, b, m, r: g.reshape(-1, 128).amax(-1),
    "max(-1) 2048x768": lambda g, x, w, b, m, r: g.max(-1),
    "max(-1) 12288x128": lambda g, x, w, b, m, r: g.reshape(-1, 128).max(-1),
    "argmax(-1) 2048x768": lambda g, x, w, b, m, r: g.argmax(-1),
    "argmax(-1) 12288x128": lambda g, x, w, b, m, r: g.reshape(-1, 128).argmax(-1),
}


def main(argv):
    args, device, result = start_eager_report(__doc__, argv)
    g, x = torch.randn(ROWS, WIDTH), torch.randn(ROWS, WIDTH)
    w, b = torch.randn(WIDTH), torch.randn(WIDTH)
    _, mean, rstd = torch.native_layer_norm(x, (WIDTH,), w, b, 1e-5)
    cpu = (g, x, w, b, mean, rstd)
    dev = tuple(t.to(device) for t in cpu)
    for name, op in OPS.items():
        expected, actual = op(*cpu), op(*dev)
        for e, a in zip(expected if isinstance(expected, tuple) else (expected,),
                        actual if isinstance(actual, tuple) else (actual,)):
            # Sums in another order than ATen's (float64 columns, float32 blocks).
            torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)
        result["cases"][name] = stock_and_device(op, cpu, dev, CALLS, args.rounds,
                                                 torchneuron.synchronize)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
