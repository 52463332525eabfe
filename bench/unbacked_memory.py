#!/usr/bin/env python3
"""What unbacked results save (src/tracer/unbacked_results.h): bench workloads in adaptive mode
with fusion, once with NEURON_ADAPTIVE_UNBACKED on (intermediates that nothing reads are never
allocated) and once off (every result allocated when recorded, as before), in one process. Per
workload and setting: device allocations per step, the peak of allocated device memory over the
measured steps, and the step time (median of blocks that alternate the two settings, so the
machine's noise falls on both alike). The cells synchronize every third step, as a program that
reads a loss now and then would. Prints one JSON object.

    /usr/bin/python3 bench/unbacked_memory.py [--threads 1] [--rounds 7]
        [--workloads gelu-tanh-1M,gelu-tanh-16M,layernorm-residual,...]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
os.environ.setdefault("NEURON_ADAPTIVE_SYNC", "1")  # fused from the first hot window on
import torchneuron  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

DEFAULT_WORKLOADS = ("gelu-tanh-64K,gelu-tanh-1M,gelu-tanh-16M,layernorm-residual,"
                     "inference-gelu-mlp,varlen-loop,mlp-train,adamw-gpt12")
SYNC_EVERY = 3


def run_steps(workload, state, steps):
    for i in range(steps):
        workload.step(state)
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            workload.observe(state).reshape(-1)[:1].cpu()
    workload.observe(state).reshape(-1)[:1].cpu()


def memory_of_steps(workload, state, steps):
    """(allocations per step, peak allocated MiB) over `steps` steps."""
    torchneuron.reset_peak_memory_stats()
    before = torchneuron.memory_stats()["allocations"]
    run_steps(workload, state, steps)
    stats = torchneuron.memory_stats()
    return (stats["allocations"] - before) / steps, stats["peak_allocated_bytes"] / (1 << 20)


def measure(name, rounds, steps):
    workload = workloads.by_name(name)
    state = workload.build(torchneuron.device())
    cell = {}
    for unbacked in (True, False):
        torchneuron.set_adaptive_unbacked(unbacked)
        run_steps(workload, state, 4 * SYNC_EVERY)  # hot and fused in this setting
        allocations, peak = memory_of_steps(workload, state, steps)
        cell["on" if unbacked else "off"] = {"allocations_per_step": round(allocations, 2),
                                             "peak_allocated_mib": round(peak, 1)}
    times = {True: [], False: []}
    for _ in range(rounds):
        for unbacked in (True, False):
            torchneuron.set_adaptive_unbacked(unbacked)
            run_steps(workload, state, SYNC_EVERY)
            start = time.perf_counter()
            run_steps(workload, state, steps)
            times[unbacked].append((time.perf_counter() - start) / steps)
    for unbacked, label in ((True, "on"), (False, "off")):
        cell[label]["step_ms"] = round(statistics.median(times[unbacked]) * 1e3, 3)
    cell["peak_ratio_off_over_on"] = round(
        cell["off"]["peak_allocated_mib"] / max(cell["on"]["peak_allocated_mib"], 1e-9), 2)
    cell["speed_on_over_off"] = round(cell["off"]["step_ms"] / cell["on"]["step_ms"], 3)
    torchneuron.set_adaptive_unbacked(True)
    return cell


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torchneuron.set_adaptive(True)
    torchneuron.set_adaptive_fusion(True)
    report = {"threads": args.threads, "rounds": args.rounds, "steps": args.steps,
              "sync_every": SYNC_EVERY, "workloads": {}}
    for name in args.workloads.split(","):
        print(f"[unbacked] {name} ...", file=sys.stderr, flush=True)
        report["workloads"][name] = measure(name, args.rounds, args.steps)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
