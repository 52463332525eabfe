#!/usr/bin/env python3
"""Runs one workload in one mode at one thread count, in this process, and prints one JSON
result line. run_bench.py starts one of these per cell so that modes never share allocator,
compile-cache or lazy-trace state.

    /usr/bin/python3 bench/run_workload.py --mode neuron-eager --threads 1 --workload softmax
"""
import argparse
import importlib
import json
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import by_name  # noqa: E402

MODES = ["stock", "stock-tuned", "lazy-ts", "neuron-eager", "neuron-adaptive"]


class Mode:
    """Where a mode runs its tensors and how it waits for their results."""
    def __init__(self, name):
        self.name = name
        self.neuron = None
        if name in ("stock", "stock-tuned"):
            self.device = torch.device("cpu")
        elif name == "lazy-ts":
            self.lazy = importlib.import_module("torch._lazy")
            importlib.import_module("torch._lazy.ts_backend").init()
            self.device = torch.device("lazy")
        else:
            import torchneuron
            self.neuron = torchneuron
            # neuron-adaptive: the op-window tracer (docs/adaptive-eager.md), on for the process.
            torchneuron.set_adaptive(name == "neuron-adaptive")
            self.device = torchneuron.device()

    def after_step(self):
        if self.name == "lazy-ts":
            self.lazy.mark_step()

    def sync(self):
        if self.name == "lazy-ts":
            self.lazy.wait_device_ops()
        elif self.neuron is not None:
            self.neuron.synchronize()

    def compiles(self):
        if self.neuron is not None:
            return self.neuron.metrics()["compiles"]
        if self.name == "lazy-ts":
            return importlib.import_module("torch._lazy.metrics").counter_value("UncachedCompile") or 0
        return 0


class NotAvailable(Exception):
    pass


def flat_tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flat_tensors(v)]
    return []


def check_against_cpu(workload, mode, state):
    """One step on the mode's device and one on the CPU, from the same seed, must agree."""
    reference = flat_tensors(workload.step(workload.build(torch.device("cpu"))))
    result = workload.step(state)
    mode.after_step()
    mode.sync()
    for r, d in zip(reference, flat_tensors(result)):
        torch.testing.assert_close(d.detach().cpu(), r.detach(), rtol=workload.tolerance,
                                   atol=workload.tolerance)


def timed(workload, mode, state, warmup, reps):
    # Each step's result stays referenced until the next step, so a lazy mode cannot skip
    # computing it at mark_step.
    for _ in range(warmup):
        state["_result"] = workload.step(state)
        mode.after_step()
    mode.sync()
    compiles_before = mode.compiles()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(workload.inner):
            state["_result"] = workload.step(state)
            mode.after_step()
        mode.sync()
        times.append((time.perf_counter() - start) * 1000 / workload.inner)
    return times, mode.compiles() - compiles_before


def run(args):
    torch.set_num_threads(args.threads)
    workload = by_name(args.workload)
    row = {"workload": workload.name, "mode": args.mode, "threads": args.threads, "ok": False}
    try:
        mode = Mode(args.mode)
        state = workload.build(mode.device)
        check_against_cpu(workload, mode, state)
        times, compiles = timed(workload, mode, state, args.warmup, args.reps)
        row.update(ok=True, median_ms=statistics.median(times), min_ms=min(times),
                   max_ms=max(times), reps=len(times), compiles=compiles, times_ms=times)
        if workload.bytes_per_step:
            row["bytes_per_step"] = workload.bytes_per_step
            row["gbps"] = workload.bytes_per_step / (row["median_ms"] / 1000) / 1e9
        if mode.neuron is not None:
            metrics = mode.neuron.metrics()
            row["compiles_total"] = metrics["compiles"]
            row["compile_ms_median"] = metrics["compile_ms_median"]
            row["launches"] = metrics["launches"]
    except NotAvailable as e:
        row.update(available=False, error=str(e))
    except Exception as e:  # the cell records the failure; the run goes on
        row.update(error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
                   trace=traceback.format_exc()[-1500:])
    return row


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(run(parse(sys.argv[1:]))))
