#!/usr/bin/env python3
"""Batch norm in training, forward and backward, in one process: the device's compiled kernels
(src/device/compiled_batch_norm.cpp; `device`) against stock PyTorch's CPU kernels (`stock`:
ATen's native_batch_norm and native_batch_norm_backward, which the device's library route ran
before) and against the limit, hand-written C++ loops (bench/limit/limit_kernels.h,
neuron_limit_batch_norm and its backward, -O3 -march=native -ffast-math; sums in double as the
other two). Blocks alternate the paths (bench/alternating.py). Stock allocates its results every
call (glibc malloc), the device from its caching allocator, the limit writes into buffers it
reuses. Shapes: resnet18-train's batch norms at three depths (bench/workloads.py: batch 16,
112 x 112 images; layer 4's planes of 4 x 4 are too short for the compiled kernels, which leave
them to ATen's kernel), mobilenet-v2-train's widest, and BatchNorm1d's [N, C] (the same).
Stock's numbers depend on its allocator; the figures in docs/compiled-eager.md were taken with
jemalloc preloaded, as `make bench` runs stock-tuned:

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \
    MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1" /usr/bin/python3 bench/batch_norm.py

Prints one JSON object: per shape and
direction the medians over the rounds of the time per call in microseconds, stock's and the
limit's time over the device's (no limit for BatchNorm1d's rows: the limit loops walk planes), and each path's bandwidth as a share of the triad measured in the
same process (bytes a path must move at least: forward x read, y written; backward dy and x read,
dx written).

    /usr/bin/python3 bench/batch_norm.py [--threads 1] [--rounds 9]
"""
import ctypes
import json
import os
import statistics
import sys

import torch
# The device's side times its kernels: the first call waits for its compile.
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
import torchneuron  # noqa: E402
from alternating import (limit_library, per_call_us, threads_and_rounds,  # noqa: E402
                         triad_gb_per_s)

SHAPES = {"resnet18 layer1 16x64x28x28": (16, 64, 28, 28),
          "resnet18 layer2 16x128x14x14": (16, 128, 14, 14),
          "resnet18 layer4 16x512x4x4": (16, 512, 4, 4),
          "mobilenet-v2 16x96x56x56": (16, 96, 56, 56),
          # BatchNorm1d's [N, C] (as [N, C, 1, 1]): no channel run, ATen's kernel on the device.
          "batchnorm1d 256x1024": (256, 1024, 1, 1)}
EPS = 1e-5
P, I64, I32, F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
LIMIT_LOOPS = {
    "neuron_limit_batch_norm": [P, P, P, P, P, P, I64, I64, I64, F32, I32],
    "neuron_limit_batch_norm_backward": [P, P, P, P, P, P, P, P, I64, I64, I64, I32],
}


def forward(x, weight, bias):
    return torch.native_batch_norm(x, weight, bias, None, None, True, 0.1, EPS)


def backward(dy, x, weight, mean, invstd):
    return torch.ops.aten.native_batch_norm_backward(dy, x, weight, None, None, mean, invstd,
                                                     True, EPS, [True, True, True])


def main(argv):
    args = threads_and_rounds(__doc__, argv)
    torchneuron.set_adaptive(False)
    lib = limit_library(LIMIT_LOOPS)
    device = torchneuron.device()
    torch.manual_seed(0)
    triad = triad_gb_per_s(args.threads)
    results = {}
    for name, shape in SHAPES.items():
        n, c, h, w = shape
        x, dy = torch.randn(shape) * 2 + 1, torch.randn(shape)
        weight, bias = torch.randn(c), torch.randn(c)
        out, mean, invstd = forward(x, weight, bias)
        on_device = [t.to(device) for t in (x, dy, weight, bias, mean, invstd)]
        x_d, dy_d, weight_d, bias_d, mean_d, invstd_d = on_device
        buffers = {k: torch.empty(shape) for k in ("y", "dx")}
        buffers.update({k: torch.empty(c) for k in ("mean", "invstd", "gw", "gb")})
        ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731

        def limit_forward():
            lib.neuron_limit_batch_norm(ptr(x), ptr(weight), ptr(bias), ptr(buffers["y"]),
                                        ptr(buffers["mean"]), ptr(buffers["invstd"]), n, c, h * w,
                                        EPS, args.threads)
            return buffers["y"], buffers["mean"], buffers["invstd"]

        def limit_backward():
            lib.neuron_limit_batch_norm_backward(ptr(dy), ptr(x), ptr(mean), ptr(invstd),
                                                 ptr(weight), ptr(buffers["dx"]),
                                                 ptr(buffers["gw"]), ptr(buffers["gb"]), n, c,
                                                 h * w, args.threads)
            return buffers["dx"], buffers["gw"], buffers["gb"]

        directions = {
            "forward": {"stock": (forward, (x, weight, bias), lambda: None),
                        "device": (forward, (x_d, weight_d, bias_d), torchneuron.synchronize),
                        "limit": (limit_forward, (), lambda: None)},
            "backward": {"stock": (backward, (dy, x, weight, mean, invstd), lambda: None),
                         "device": (backward, (dy_d, x_d, weight_d, mean_d, invstd_d),
                                    torchneuron.synchronize),
                         "limit": (limit_backward, (), lambda: None)},
        }
        if h * w == 1:  # the limit loops walk a channel's planes: no loop for rows of one element
            for paths in directions.values():
                del paths["limit"]
        moved = {"forward": 2 * 4 * x.numel(), "backward": 3 * 4 * x.numel()}
        for direction, paths in directions.items():
            expected = paths["stock"][0](*paths["stock"][1])
            for path in [p for p in ("device", "limit") if p in paths]:
                op, op_args, _ = paths[path]
                for got, want in zip(op(*op_args), expected):
                    if not torch.allclose(got.cpu(), want, rtol=1e-4, atol=1e-4):
                        sys.exit(f"{name} {direction}: the {path} path's result differs from "
                                 "stock's")
            calls = max(3, (1 << 24) // x.numel())
            times = {path: [] for path in paths}
            for _ in range(args.rounds):
                for path, (op, op_args, sync) in paths.items():
                    times[path].append(per_call_us(op, op_args, calls, sync))
            medians = {path: statistics.median(t) for path, t in times.items()}
            results[f"{name} {direction}"] = {
                **{f"{path}_us": round(us, 1) for path, us in medians.items()},
                "stock_over_device": round(medians["stock"] / medians["device"], 2),
                **({"limit_over_device": round(medians["limit"] / medians["device"], 2)}
                   if "limit" in medians else {}),
                **{f"{path}_of_triad": round(moved[direction] / (us * 1e-6) / 1e9 / triad, 2)
                   for path, us in medians.items()},
            }
    print(json.dumps({"threads": args.threads, "rounds": args.rounds,
                      "triad_gb_per_s": round(triad, 1), "results": results}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
