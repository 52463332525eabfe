#!/usr/bin/env python3
"""Vector math on inputs outside a function's ordinary range, device against stock PyTorch in one
process: `exp` of -inf, of values that underflow or overflow, `log` of zeros and negatives,
`sigmoid` of -inf, `sin` of large arguments, `pow` of negative bases, with each function on
ordinary inputs for comparison, 64K float32 elements. Blocks of calls alternate between stock and
the device (bench/alternating.py); the report's `cases` give the medians of microseconds per call
and stock's time over the device's (`speedup`).

The device's loops call glibc's vector math (libmvec, `_ZGVeN16v_expf` ...; src/fusion/compiler.cpp,
VectorMathTable), which hands every vector holding such a lane to its scalar function, lane by
lane; ATen's Sleef routines handle them in the vector. The logarithms keep those lanes out of the
call, `exp` selects 0 for arguments whose result is 0, `pow` takes a negative base's magnitude
(src/fusion/guarded_math.cpp). Results are the same: the script checks each case
against the CPU within assert_close's float32 tolerance, NaN equal to NaN, and raises otherwise.

    OMP_NUM_THREADS=1 NEURON_CACHE=0 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
        /usr/bin/python3 bench/special_inputs.py [--rounds 9] [--threads 1]
"""
import json
import os
import sys

import torch

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402,F401  (the device, after the environment above)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import check_and_time_unary, start_eager_report  # noqa: E402

ELEMENTS = 1 << 16
CALLS = 64


def cases():
    r = torch.randn(ELEMENTS)
    half = torch.rand(ELEMENTS) > 0.5
    minus_inf = torch.where(half, r, torch.tensor(float("-inf")))
    return {
        "exp ordinary": (torch.exp, r),
        "exp half -inf": (torch.exp, minus_inf),
        "exp x - 100 (underflow)": (torch.exp, r - 100),
        "exp x + 100 (overflow)": (torch.exp, r + 100),
        "log ordinary": (torch.log, r.abs() + 0.5),
        "log half zeros": (torch.log, torch.where(half, r.abs(), torch.tensor(0.0))),
        "log negatives": (torch.log, -r.abs()),
        "sigmoid half -inf": (torch.sigmoid, minus_inf),
        "sin ordinary": (torch.sin, r),
        "sin x * 1e5": (torch.sin, r * 1e5),
        "pow ordinary": (lambda t: torch.pow(t, 2.5), r.abs()),
        "pow negative bases": (lambda t: torch.pow(t, 2.5), r),
        "pow 4 of negative bases": (lambda t: torch.pow(t, 4.0), r),
    }


def main(argv):
    args, device, result = start_eager_report(__doc__, argv)
    def check(name, got, expected):
        torch.testing.assert_close(got, expected, equal_nan=True, msg=lambda m: f"{name}: {m}")

    check_and_time_unary(cases(), check, CALLS, args.rounds, device, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
