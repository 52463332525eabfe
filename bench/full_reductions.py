#!/usr/bin/env python3
"""Reductions over all elements with an elementwise prologue (`((a - b) ** 2).mean()`,
`(a * b).sum()`, `vector_norm(a * 2)`), which adaptive mode runs as one kernel that never writes
the per-element results (docs/adaptive-eager.md, "Prologue fusion"), against eager mode (one
kernel per op) and stock CPU, per call at 64K, 1M and 16M float32 elements, in blocks alternating
in one process so that the machine's noise falls on all alike; medians over the rounds. Each
call ends in a read of its scalar (a sync point), as a training loop's loss does. The physical
limit of a pass that only reads its inputs is the triad's bandwidth, measured in the same run:
`of_triad` is the bytes read per second over it. Each path is checked against float64 first.
Prints one JSON object.

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
      MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \\
      PYTHONPATH=build/python /usr/bin/python3 bench/full_reductions.py [--threads 1] [--rounds 7]
"""
import json
import os
import statistics
import sys

import torch

os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")  # time kernels, not interim CPU runs
import torchneuron  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import per_call_us, threads_and_rounds, triad_gb_per_s  # noqa: E402

CASES = {  # name: (the computation, how many of the two inputs it reads)
    "squared error mean": (lambda a, b: ((a - b) ** 2).mean(), 2),
    "product sum": (lambda a, b: (a * b).sum(), 2),
    "scaled norm": (lambda a, b: torch.linalg.vector_norm(a * 2), 1),
}
SIZES = {"64K": (64 << 10, 300), "1M": (1 << 20, 40), "16M": (1 << 24, 4)}  # elements, calls


def main(argv):
    args = threads_and_rounds(__doc__, argv, rounds=7)
    device = torchneuron.device()
    torchneuron.set_adaptive(False)
    # Hot windows' fused kernels compile before the timing, not in the background during it.
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
    torch.manual_seed(0)
    triad = triad_gb_per_s(args.threads)
    results = {}
    for size, (n, calls) in SIZES.items():
        a, b = torch.randn(n), torch.randn(n)
        a_d, b_d = a.to(device), b.to(device)
        for name, (case, inputs_read) in CASES.items():
            # float() reads the scalar: a sync point, which runs an adaptive window's launches.
            call = lambda x, y, case=case: float(case(x, y))  # noqa: E731
            # Against float64: at 16M elements 1.13's CPU norm is itself 6.5e-4 off (its float32
            # sums), the device's (f64 sums) is not.
            expected = call(a.double(), b.double())
            paths = {"stock": (a, b, False), "eager": (a_d, b_d, False),
                     "adaptive": (a_d, b_d, True)}
            for path, (x, y, adaptive) in paths.items():
                torchneuron.set_adaptive(adaptive)
                for _ in range(6):  # the window's recurrence threshold, then its compile
                    got = call(x, y)
                torchneuron.set_adaptive(False)
                if abs(got - expected) > 1e-3 * max(1.0, abs(expected)):
                    sys.exit(f"{name} on {size}: the {path} result {got} differs from the "
                             f"float64 result {expected}")
            times = {path: [] for path in paths}
            for _ in range(args.rounds):
                for path, (x, y, adaptive) in paths.items():
                    torchneuron.set_adaptive(adaptive)
                    times[path].append(per_call_us(call, (x, y), calls, lambda: None))
                    torchneuron.set_adaptive(False)
            us = {path: statistics.median(t) for path, t in times.items()}
            read = inputs_read * 4 * n
            results[f"{name} {size}"] = {
                **{f"{path}_us": round(t, 1) for path, t in us.items()},
                "adaptive_over_eager": round(us["eager"] / us["adaptive"], 2),
                "adaptive_over_stock": round(us["stock"] / us["adaptive"], 2),
                "adaptive_of_triad": round(read / (us["adaptive"] * 1e-6) / 1e9 / triad, 2),
            }
    adaptive = torchneuron.metrics()["adaptive"]
    print(json.dumps({"threads": args.threads, "rounds": args.rounds,
                      "triad_gb_per_s": round(triad, 1),
                      "fused_reduction_runs": adaptive["fused_reduction_runs"],
                      "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
