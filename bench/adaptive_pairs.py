#!/usr/bin/env python3
"""Adaptive mode against eager mode, paired in one process: a workload's repetitions (its
`inner` steps and the read that ends them, as run_workload.py times a cell) alternate between
eager and adaptive mode on the same device state, in ABBA order, so that the machine's drift and
a process's luck (where its memory fell, which core it ran on) fall on both modes alike. The
matrix's separate processes move a cell by 10-30% on this VM; the ratio here is the one issue 14
and 13 ask for ("every adaptive cell >= 0.95x its eager cell") with that noise paired away.
Prints one JSON line per workload: the median eager and adaptive times, the median of the
pairs' eager/adaptive ratios, its range, how many pairs adaptive lost, and the tracer's counts
over the adaptive repetitions (ops deferred, fused kernel runs, ...).

With --stock, stock PyTorch is a third arm: the same workload built on the CPU from the same
seed, its repetitions in the same rotation (eager, adaptive, stock, then stock, adaptive, eager),
so each round's stock time over each mode's time is a paired ratio too (`eager_vs_stock`,
`adaptive_vs_stock`: medians, with their ranges). Issue 15 compares with stock-tuned, so run it
with jemalloc preloaded and `OMP_WAIT_POLICY=PASSIVE` as run_bench.py runs that
mode; the device's arms then allocate their host-side objects (Python's, tensors' metadata) from
jemalloc too, their memory from the device's caching allocator as always, and share the wait
policy (the device's import then parks no OpenMP team: src/device/openmp_wait.h).

    OMP_NUM_THREADS=1 NEURON_CACHE=0 /usr/bin/python3 bench/adaptive_pairs.py --threads 1 \\
        [--workloads softmax,mlp-train] [--pairs 8]
    OMP_NUM_THREADS=1 NEURON_CACHE=0 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \\
        MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 /usr/bin/python3 bench/adaptive_pairs.py \\
        --threads 1 --workloads cnn-mnist-train --stock
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_workload import (SETTLING_REPETITIONS, Mode, check_against_cpu,  # noqa: E402
                          error_text, repetition, warmup_repetitions)
from workloads import all_workloads, by_name  # noqa: E402


def timed_repetition(workload, mode, state):
    start = time.perf_counter()
    repetition(workload, mode, state)
    return (time.perf_counter() - start) * 1000 / workload.inner


def paired_ratios(numerators, denominators):
    """The rounds' ratios: their median, least and greatest."""
    ratios = [n / d for n, d in zip(numerators, denominators)]
    return statistics.median(ratios), min(ratios), max(ratios)


def pair_workload(name, pairs, warmup, stock=False):
    """One workload's pairs (see the module's docstring); a dict with its figures or its error."""
    workload = by_name(name)
    row = {"workload": name, "threads": torch.get_num_threads(), "pairs": pairs, "ok": False}
    try:
        mode = Mode("neuron-adaptive")
        if stock:
            stock_mode = Mode("stock-tuned")
            stock_state = workload.build(stock_mode.device)
            for _ in range(warmup + SETTLING_REPETITIONS):
                repetition(workload, stock_mode, stock_state)
        neuron = mode.neuron
        state = workload.build(mode.device)
        check_against_cpu(workload, mode, state)
        # Adaptive mode's warm-up as a cell's: every window hot and replayed, its fused kernels
        # compiled and run twice; then eager mode's calls cached.
        for _ in range(warmup):
            repetition(workload, mode, state)
        neuron.wait_for_compiles()
        for _ in range(SETTLING_REPETITIONS):
            repetition(workload, mode, state)
        neuron.set_adaptive(False)
        for _ in range(SETTLING_REPETITIONS):
            repetition(workload, mode, state)
        compiles_before = neuron.metrics()["compiles"]
        adaptive_before = mode.adaptive()  # the tracer counts nothing while it is off
        times = {"eager": [], "adaptive": [], "stock": []}
        arms = ["eager", "adaptive"] + (["stock"] if stock else [])
        for i in range(pairs):
            for arm in arms if i % 2 == 0 else arms[::-1]:  # ABBA: drift falls on every arm
                if arm == "stock":
                    neuron.synchronize()  # the device's work is done (each repetition reads it)
                    times[arm].append(timed_repetition(workload, stock_mode, stock_state))
                    continue
                neuron.set_adaptive(arm == "adaptive")  # a sync point: the other mode's work is done
                times[arm].append(timed_repetition(workload, mode, state))
        neuron.set_adaptive(False)
        eager, adaptive = times["eager"], times["adaptive"]
        speedup, least, most = paired_ratios(eager, adaptive)
        row.update(ok=True, eager_ms=statistics.median(eager),
                   adaptive_ms=statistics.median(adaptive),
                   adaptive_speedup=speedup, speedup_min=least, speedup_max=most,
                   pairs_adaptive_slower=sum(e < a for e, a in zip(eager, adaptive)),
                   compiles=neuron.metrics()["compiles"] - compiles_before,
                   adaptive={key: value - adaptive_before[key]
                             for key, value in mode.adaptive().items()},
                   eager_times_ms=eager, adaptive_times_ms=adaptive)
        if stock:
            for arm in ("eager", "adaptive"):
                median, least, most = paired_ratios(times["stock"], times[arm])
                row.update({f"{arm}_vs_stock": median, f"{arm}_vs_stock_min": least,
                            f"{arm}_vs_stock_max": most})
            row.update(stock_ms=statistics.median(times["stock"]), stock_times_ms=times["stock"])
    except Exception as e:  # the workload records the failure; the others go on
        row.update(error=error_text("neuron-adaptive", e), trace=traceback.format_exc()[-1500:])
    return row


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workloads", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--stock", action="store_true",
                        help="stock PyTorch on the CPU as a third arm (run with jemalloc preloaded "
                             "for stock-tuned's figures)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="adaptive warm-up repetitions (default and least: "
                             "NEURON_ADAPTIVE_THRESHOLD + 2)")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.pairs < 1:
        parser.error(f"--threads and --pairs must be positive, got {args.threads} and {args.pairs}")
    try:
        args.warmup = warmup_repetitions(args.warmup)
    except ValueError as error:
        parser.error(str(error))
    names = ([n for n in args.workloads.split(",") if n] if args.workloads
             else [w.name for w in all_workloads()])
    for name in names:
        try:
            by_name(name)
        except KeyError as error:
            parser.error(str(error.args[0]))
    torch.set_num_threads(args.threads)
    for name in names:
        print(json.dumps(pair_workload(name, args.pairs, args.warmup, args.stock)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
