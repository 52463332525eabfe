#!/usr/bin/env python3
"""Reductions fused with their neighbours in adaptive mode (docs/adaptive-eager.md, "Prologue
fusion" and "Epilogue fusion"), against eager mode (one kernel per op) and stock CPU, per call,
in blocks alternating in one process so that the machine's noise falls on all alike; medians
over the rounds. Cases:

- reductions over all elements with an elementwise prologue, as a loss or a regularizer:
  `((a - b) ** 2).mean()`, `(a * b).sum()`, `vector_norm(a * 2)`, at 64K, 1M and 16M elements;
  one kernel that never writes the per-element results; and `a.t().sum()` of a square matrix,
  whose reduced dimensions the kernel walks in memory order;
- row-wise ops with an elementwise epilogue: `softmax(x) * s + b` over rows of 256 and adaLN's
  modulation `layer_norm(x) * (1 + scale) + shift` (scale and shift broadcast over each sample's
  tokens; `1 + scale` runs before the kernel, a hole of its group), at 1M and 16M elements; one
  kernel computing the epilogue where it would store a row, the op's own output never written;
- RMSNorm written by hand, `x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`, at 1M and
  16M elements: the square fused into the mean, + eps and rsqrt on each row's mean, and the
  products in a pass over the row (six launches, one kernel);
- a softmax written by hand, `e = exp(x - x.amax(-1, keepdim=True)); e / e.sum(-1,
  keepdim=True)`, at 1M and 16M elements: the amax, then one kernel (sub and exp in the sum's
  loads, the exps stored, the division in a pass over the row).

Each call ends in a read (a scalar's value, or one element of a result: a sync point), as a
training loop's loss does. The physical limit of these passes is memory bandwidth: `of_triad`
is the bytes a fused kernel must move per second (inputs read, results written; the row-wise
ops' own outputs are dead, never written, while the hand-written softmax stores its exps for
the row pass) over the triad's, measured in the same run. The softmax cases compute an exp
per element, which costs more than moving it here: their limit is an exp pass, the device's
`torch.exp(x, out=y)` over as many elements (one read, one write, one exp each), measured in
the same run too (`exp_pass_us`, and `adaptive_of_exp_pass` for those cases). Each path is
checked against float64 first. Prints one JSON object.

    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
      MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \\
      PYTHONPATH=build/python /usr/bin/python3 bench/reduction_fusion.py [--threads 1] [--rounds 7]
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
from alternating import per_call_us, threads_and_rounds, triad_gb_per_s  # noqa: E402

ROW = 256  # elements per row of the row-wise cases
TOKENS = 16


def full_reduction_inputs(n):
    return [torch.randn(n), torch.randn(n)]


def softmax_inputs(n):
    return [torch.randn(n // ROW, ROW), torch.randn(ROW), torch.randn(ROW)]


def softmax_by_hand(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def rms_norm_inputs(n):
    return [torch.randn(n // ROW, ROW), torch.randn(ROW)]


def modulation_inputs(n):
    batch = n // (TOKENS * ROW)
    return [torch.randn(batch, TOKENS, ROW), torch.randn(ROW), torch.randn(ROW),
            torch.randn(batch, 1, ROW), torch.randn(batch, 1, ROW)]


# name: (the computation, its inputs for n elements, elements moved per input element, sizes)
CASES = {
    "squared error mean": (lambda a, b: ((a - b) ** 2).mean(), full_reduction_inputs, 2,
                           ("64K", "1M", "16M")),
    "product sum": (lambda a, b: (a * b).sum(), full_reduction_inputs, 2, ("64K", "1M", "16M")),
    "scaled norm": (lambda a, b: torch.linalg.vector_norm(a * 2), full_reduction_inputs, 1,
                    ("64K", "1M", "16M")),
    # a square matrix's transpose: its reduced dimensions walked in memory order
    "transposed sum": (lambda a, b: a.view(int(a.numel() ** 0.5), -1).t().sum(),
                       full_reduction_inputs, 1, ("1M", "16M")),
    # reads x, writes the result (the softmax's output is dead: never written)
    "softmax * s + b": (lambda x, s, b: torch.softmax(x, -1) * s + b, softmax_inputs, 2,
                        ("1M", "16M")),
    "layer norm * (1 + scale) + shift": (
        lambda x, w, b, scale, shift: F.layer_norm(x, (ROW,), w, b) * (1 + scale) + shift,
        modulation_inputs, 2, ("1M", "16M")),
    # reads x, writes the result (and one mean per row)
    "rms norm": (lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                 rms_norm_inputs, 2, ("1M", "16M")),
    # reads x twice (the amax, then the sum), writes the exps and the result
    "softmax by hand": (softmax_by_hand, lambda n: [torch.randn(n // ROW, ROW)], 4,
                        ("1M", "16M")),
}
SIZES = {"64K": (64 << 10, 300), "1M": (1 << 20, 30), "16M": (1 << 24, 3)}  # elements, calls


def exp_pass_us(n, calls, rounds):
    """The device's exp over n elements into a reused buffer, us per call (median of rounds):
    what a softmax of n elements costs at least."""
    x = torch.randn(n).to(torchneuron.device())
    y = torch.empty_like(x)
    return statistics.median(
        per_call_us(lambda: torch.exp(x, out=y), (), calls, torchneuron.synchronize)
        for _ in range(rounds))


def read_back(result):
    """A sync point: the value of a scalar, or of one element of a result."""
    return float(result) if result.dim() == 0 else float(result.reshape(-1)[-1])


def main(argv):
    args = threads_and_rounds(__doc__, argv, rounds=7)
    device = torchneuron.device()
    torchneuron.set_adaptive(False)
    # Hot windows' fused kernels compile before the timing, not in the background during it.
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
    torch.manual_seed(0)
    triad = triad_gb_per_s(args.threads)
    exp_pass = {size: exp_pass_us(*SIZES[size], args.rounds) for size in ("1M", "16M")}
    results = {}
    for name, (case, make_inputs, moved_per_element, sizes) in CASES.items():
        for size in sizes:
            n, calls = SIZES[size]
            inputs = make_inputs(n)
            on_device = [t.to(device) for t in inputs]
            call = lambda *t, case=case: read_back(case(*t))  # noqa: E731
            # Against float64: at 16M elements 1.13's CPU norm is itself 6.5e-4 off (its
            # float32 sums), the device's (f64 sums) is not.
            expected = case(*[t.double() for t in inputs])
            paths = {"stock": (inputs, False), "eager": (on_device, False),
                     "adaptive": (on_device, True)}
            for path, (tensors, adaptive) in paths.items():
                torchneuron.set_adaptive(adaptive)
                for _ in range(6):  # the window's recurrence threshold, then its compile
                    got = case(*tensors)
                torchneuron.set_adaptive(False)
                if not torch.allclose(got.cpu().double(), expected, rtol=1e-3, atol=1e-4):
                    sys.exit(f"{name} on {size}: the {path} result differs from the float64 one")
            times = {path: [] for path in paths}
            for _ in range(args.rounds):
                for path, (tensors, adaptive) in paths.items():
                    torchneuron.set_adaptive(adaptive)
                    times[path].append(per_call_us(call, tensors, calls, lambda: None))
                    torchneuron.set_adaptive(False)
            us = {path: statistics.median(t) for path, t in times.items()}
            moved = moved_per_element * 4 * n
            results[f"{name} {size}"] = {
                **{f"{path}_us": round(t, 1) for path, t in us.items()},
                "adaptive_over_eager": round(us["eager"] / us["adaptive"], 2),
                "adaptive_over_stock": round(us["stock"] / us["adaptive"], 2),
                "adaptive_of_triad": round(moved / (us["adaptive"] * 1e-6) / 1e9 / triad, 2),
            }
            if "softmax" in name:
                results[f"{name} {size}"]["adaptive_of_exp_pass"] = round(
                    exp_pass[size] / us["adaptive"], 2)
    adaptive = torchneuron.metrics()["adaptive"]
    print(json.dumps({"threads": args.threads, "rounds": args.rounds,
                      "triad_gb_per_s": round(triad, 1),
                      "exp_pass_us": {size: round(us, 1) for size, us in exp_pass.items()},
                      "fused_reduction_runs": adaptive["fused_reduction_runs"],
                      "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
