#!/usr/bin/env python3
"""Device-to-device copies in eager mode against stock CPU in one process, per call: transposes
made contiguous (`x.t().contiguous()` of 2048 x 768, 768 x 2048 and 512 x 512 matrices, which
ATen's CPU copy runs as a blocked transpose and so does the device, on host views:
src/device/copy_plan.h, isAtenBlockedTranspose), an attention tensor's `transpose(1, 2)` made
contiguous (the compiled copy kernel), and a clone. Blocks alternate (bench/alternating.py) after
a check against the CPU and a warm-up. Both sides allocate their results every call (run stock
with jemalloc preloaded, as run_bench.py's stock-tuned mode does). Prints one JSON object: per
case the medians over the rounds of microseconds per call and stock's time over the device's.

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
      MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \\
      PYTHONPATH=build/python /usr/bin/python3 bench/copies.py [--threads 1] [--rounds 9]
"""
import json
import os
import sys

import torch

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402,F401  (the device, after the environment above)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import check_and_time_unary, start_eager_report  # noqa: E402

CALLS = 20

# name: (shape of the input, op)
CASES = {
    "t().contiguous() 2048x768": ((2048, 768), lambda x: x.t().contiguous()),
    "t().contiguous() 768x2048": ((768, 2048), lambda x: x.t().contiguous()),
    "t().contiguous() 512x512": ((512, 512), lambda x: x.t().contiguous()),
    "transpose(1, 2).contiguous() 8x128x12x64": ((8, 128, 12, 64),
                                                 lambda x: x.transpose(1, 2).contiguous()),
    "clone 2048x768": ((2048, 768), lambda x: x.clone()),
}


def main(argv):
    args, device, result = start_eager_report(__doc__, argv)
    def check(name, got, expected):
        assert torch.equal(got, expected), name

    cases = {name: (op, torch.randn(shape)) for name, (shape, op) in CASES.items()}
    check_and_time_unary(cases, check, CALLS, args.rounds, device, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
