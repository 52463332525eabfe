#!/usr/bin/env python3
"""The device's BLAS (src/device/device_blas.h) against ATen's, on matrix products and on the
training workloads whose steps are mostly products. Prints one JSON object.

Products: float32 `mm` of the workloads' shapes, in one process, alternating shape by shape
between stock (CPU tensors, `out=`), the device with ATen's BLAS (`set_device_blas("aten")`) and
the device with its own (`"auto"`): median ms and GFLOP/s of each, and which BLAS each side runs.

Workloads: fresh processes per cell (bench/run_bench.py's cells), alternating round by round:
`stock-tuned` (jemalloc), `stock-tuned` with `OPENBLAS_CORETYPE=SkylakeX` (what stock reaches when
its user forces OpenBLAS's AVX-512 kernels), adaptive mode with `NEURON_DEVICE_BLAS=aten`, and
adaptive and eager mode with the device's own BLAS. Per workload the median step time in ms over
the rounds and the ratios against `stock-tuned` and against the forced stock.

    /usr/bin/python3 bench/device_blas.py [--threads 1] [--rounds 3] [--reps 15]
        [--workloads mlp-train,transformer-block-train] [--skip-products] [--skip-workloads]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_bench import run_cell  # noqa: E402

# (rows, inner, columns, transposed first operand): the forward and weight-gradient products of
# mlp-train (batch 64, width 1024) and the transformer block (8 x 128 tokens, width 256, MLP 1024).
SHAPES = [(64, 1024, 1024, False), (1024, 64, 1024, True), (1024, 256, 256, False),
          (256, 1024, 256, True), (1024, 256, 1024, False), (1024, 1024, 256, False)]
WORKLOADS = ["mlp-train", "transformer-block-train", "gpt-mini-train", "lstm-lm-train",
             "inference-gelu-mlp"]
# name: (run_bench mode, extra environment)
CELLS = {
    "stock-tuned": ("stock-tuned", {}),
    "stock-tuned-skylakex": ("stock-tuned", {"OPENBLAS_CORETYPE": "SkylakeX"}),
    "adaptive-aten-blas": ("neuron-adaptive", {"NEURON_DEVICE_BLAS": "aten"}),
    "adaptive": ("neuron-adaptive", {"NEURON_DEVICE_BLAS": "auto"}),
    "eager": ("neuron-eager", {"NEURON_DEVICE_BLAS": "auto"}),
}


def atens_blas_core():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
    except OSError:
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


def measure_products(threads, rounds):
    import torch
    import torchneuron
    torch.set_num_threads(threads)
    device = torchneuron.device()
    rows = []
    for m, k, n, transposed in SHAPES:
        g = torch.Generator().manual_seed(m + k + n)
        a = (torch.randn(k, m, generator=g).t() if transposed else torch.randn(m, k, generator=g))
        b = torch.randn(k, n, generator=g)
        out = torch.empty(m, n)
        a_dev, b_dev = a.to(device), b.to(device)
        sides = {
            "stock": lambda: torch.mm(a, b, out=out),
            "device_aten_blas": lambda: torch.mm(a_dev, b_dev),
            "device": lambda: torch.mm(a_dev, b_dev),
        }
        times = {name: [] for name in sides}
        for _ in range(rounds):
            for name, product in sides.items():
                torchneuron.set_device_blas("aten" if name == "device_aten_blas" else "auto")
                product()  # warm: caches, the allocator's block
                repeats = 5
                start = time.perf_counter()
                for _ in range(repeats):
                    product()
                times[name].append((time.perf_counter() - start) / repeats)
        torchneuron.set_device_blas("auto")
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        flop = 2.0 * m * k * n
        rows.append({"m": m, "k": k, "n": n, "first_transposed": transposed,
                     "ms": ms, "gflops": {name: flop / (t * 1e6) for name, t in ms.items()},
                     "device_over_stock": ms["stock"] / ms["device"],
                     "device_over_aten_blas": ms["device_aten_blas"] / ms["device"]})
    return {"threads": threads, "atens_blas_core": atens_blas_core(),
            "device_blas": torchneuron.device_blas(), "shapes": rows}


def measure_workloads(args):
    samples = {w: {c: [] for c in CELLS} for w in args.workloads}
    errors = []
    for round_index in range(args.rounds):
        for workload in args.workloads:
            for cell, (mode, extra) in CELLS.items():
                row = run_cell(mode, args.threads, workload, args, extra_env=extra)
                if row.get("ok"):
                    samples[workload][cell].append(row["median_ms"])
                else:
                    errors.append(f"{workload} {cell}: {row.get('error', 'failed')}")
                print(f"[device_blas] round {round_index + 1}/{args.rounds} {workload} {cell}: "
                      f"{row.get('median_ms', float('nan')):.3f} ms", file=sys.stderr, flush=True)
    result = {}
    for workload, cells in samples.items():
        ms = {cell: statistics.median(v) for cell, v in cells.items() if v}
        entry = {"ms": ms}
        for cell in ("adaptive", "eager", "adaptive-aten-blas"):
            if cell in ms and "stock-tuned" in ms:
                entry[f"{cell}_over_stock_tuned"] = ms["stock-tuned"] / ms[cell]
            if cell in ms and "stock-tuned-skylakex" in ms:
                entry[f"{cell}_over_stock_skylakex"] = ms["stock-tuned-skylakex"] / ms[cell]
        result[workload] = entry
    return result, errors


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    parser.add_argument("--cell-timeout", type=int, default=600)
    parser.add_argument("--skip-products", action="store_true")
    parser.add_argument("--skip-workloads", action="store_true")
    args = parser.parse_args(argv)
    if min(args.threads, args.rounds, args.reps) < 1:
        parser.error("--threads, --rounds and --reps must be positive")
    args.workloads = [w for w in args.workloads.split(",") if w]
    report = {"threads": args.threads, "rounds": args.rounds}
    if not args.skip_products:
        report["products"] = measure_products(args.threads, max(args.rounds, 5))
    if not args.skip_workloads:
        report["workloads"], report["errors"] = measure_workloads(args)
    print(json.dumps(report))
    return 1 if report.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
