#!/usr/bin/env python3
"""max_pool2d_with_indices in one process: the device's compiled kernel
(src/device/compiled_pooling.cpp; `device`) against stock PyTorch's CPU kernel (`stock`, ATen's
max_pool2d_with_indices, which is also what the device's library route ran before the compiled
kernel) and, for 2x2 windows with step 2, against the limit, one hand-written C++ loop
(bench/limit/limit_kernels.h, neuron_limit_max_pool2x2, -O3 -march=native -ffast-math). Blocks
alternate the paths (bench/alternating.py). Allocation differs as it does for a user: stock
allocates its two results every call (glibc malloc), the device from its caching allocator, the
limit writes into buffers it reuses. Pools: cnn-mnist-train's (bench/workloads.py; 12 windows a
row, so the vectorized loop leaves a remainder), one whose rows fill whole vectors, a wide one,
and resnet18's stem (3x3, step 2, padding 1: the padded path, a copy of the input into a plane
padded with -inf). Prints one JSON object: per pool the medians over the rounds of the time per
call in microseconds, nanoseconds per window, and stock's and the limit's time over the
device's.

    /usr/bin/python3 bench/max_pool.py [--threads 1] [--rounds 9]
"""
import ctypes
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
# The device's side times its kernel: the first call waits for its compile.
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
import torchneuron  # noqa: E402
from alternating import limit_library, per_call_us, threads_and_rounds  # noqa: E402

# name: (input shape, max_pool2d's kernel, stride, padding)
POOLS = {"cnn-mnist 64x64x24x24": ((64, 64, 24, 24), 2, 2, 0),
         "64x64x32x32": ((64, 64, 32, 32), 2, 2, 0),
         "16x64x56x56": ((16, 64, 56, 56), 2, 2, 0),
         "resnet18-stem 16x64x56x56 3x3/2 pad 1": ((16, 64, 56, 56), 3, 2, 1)}
LIMIT_LOOPS = {"neuron_limit_max_pool2x2": [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 +
                                           [ctypes.c_int]}


def main(argv):
    args = threads_and_rounds(__doc__, argv)
    torchneuron.set_adaptive(False)
    lib = limit_library(LIMIT_LOOPS)
    device = torchneuron.device()
    torch.manual_seed(0)
    results = {}
    for name, (shape, kernel, stride, padding) in POOLS.items():
        x = torch.randn(*shape)
        pool = lambda x, k=kernel, s=stride, p=padding: F.max_pool2d(  # noqa: E731
            x, k, s, p, return_indices=True)
        expected = pool(x)
        paths = {"stock": (pool, (x,), lambda: None),
                 "device": (pool, (x.to(device),), torchneuron.synchronize)}
        results_of = {"device": pool(x.to(device))}
        if (kernel, stride, padding) == (2, 2, 0):
            n, c, h, w = shape
            out, indices = torch.empty(expected[0].shape), torch.empty(expected[1].shape,
                                                                       dtype=torch.long)

            def limit(x=x, out=out, indices=indices, planes=n * c, h=h, w=w):
                lib.neuron_limit_max_pool2x2(x.data_ptr(), out.data_ptr(), indices.data_ptr(),
                                             planes, h, w, args.threads)
                return out, indices

            paths["limit"] = (limit, (), lambda: None)
            results_of["limit"] = limit()
        for path, (values, indices) in results_of.items():
            if not (torch.equal(values.cpu(), expected[0]) and
                    torch.equal(indices.cpu(), expected[1])):
                sys.exit(f"{name}: the {path} path's result differs from stock's")
        calls = max(5, (1 << 25) // x.numel())
        times = {path: [] for path in paths}
        for _ in range(args.rounds):
            for path, (op, op_args, sync) in paths.items():
                times[path].append(per_call_us(op, op_args, calls, sync))
        medians = {path: statistics.median(t) for path, t in times.items()}
        windows = expected[0].numel()
        row = {**{f"{path}_us": round(us, 1) for path, us in medians.items()},
               **{f"{path}_ns_per_window": round(us * 1e3 / windows, 2)
                  for path, us in medians.items()},
               "stock_over_device": round(medians["stock"] / medians["device"], 2)}
        if "limit" in medians:
            row["limit_over_device"] = round(medians["limit"] / medians["device"], 2)
        results[name] = row
    print(json.dumps({"threads": args.threads, "rounds": args.rounds, "results": results},
                     indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
