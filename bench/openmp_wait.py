#!/usr/bin/env python3
"""Stock PyTorch's own training steps under each OpenMP wait rule (src/device/openmp_wait.h):
fresh processes of a workload on the CPU (bench/workloads.py), taking turns by rule, ms per step.

- `default`: libgomp as it loads (its idle workers spin ~300000 rounds after each parallel region);
- `passive`: `OMP_WAIT_POLICY=PASSIVE` (they sleep at once; the bench's stock-tuned mode);
- `parked`: `import torchneuron` first (its default `NEURON_OPENMP_WAIT=short` parks an idle OpenMP
  team, so libgomp counts more threads than CPUs and its workers spin ~100 rounds);
- `parked-unchanged`: the import with `NEURON_OPENMP_WAIT=unchanged` (the import alone, no park).

Each process builds the workload on the CPU, runs 3 warm-up steps, then times `--reps`
repetitions of the workload's `inner` steps; its figure is their median. Prints one JSON object:
per workload and rule, the processes' figures and their median. jemalloc is preloaded when the
machine has it, as for stock-tuned.

    /usr/bin/python3 bench/openmp_wait.py [--threads 2] [--processes 3] [--reps 11]
        [--workloads mlp-train,transformer-block-train]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
RULES = ("default", "passive", "parked", "parked-unchanged")

ONE_PROCESS = """
import os, statistics, sys, time
if os.environ["RULE"].startswith("parked"):
    import torchneuron
    rule = torchneuron.openmp_wait_rule()
else:
    rule = os.environ["RULE"]
import torch
sys.path.insert(0, os.environ["BENCH_DIR"])
from workloads import by_name
workload = by_name(os.environ["WORKLOAD"])
state = workload.build(torch.device("cpu"))
for _ in range(3):
    workload.step(state)
workload.observe(state)
times = []
for _ in range(int(os.environ["REPS"])):
    start = time.perf_counter()
    for _ in range(workload.inner):
        workload.step(state)
    workload.observe(state)
    times.append((time.perf_counter() - start) * 1000 / workload.inner)
print(rule, statistics.median(times))
"""


def one_process(rule, workload, threads, reps, build):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMP_", "GOMP_", "KMP_")) and k != "NEURON_OPENMP_WAIT"}
    env.update(OMP_NUM_THREADS=str(threads), RULE=rule, WORKLOAD=workload, REPS=str(reps),
               BENCH_DIR=HERE, NEURON_CACHE="0")
    env["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    if os.path.exists(JEMALLOC):
        env.update(LD_PRELOAD=JEMALLOC, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
    if rule == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    if rule == "parked-unchanged":
        env["NEURON_OPENMP_WAIT"] = "unchanged"
    done = subprocess.run([sys.executable, "-c", ONE_PROCESS], env=env, capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{rule} {workload}: exit {done.returncode}: {done.stderr[-1500:]}")
    in_force, ms = done.stdout.split()[-2:]
    return in_force, float(ms)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workloads", default="mlp-train,transformer-block-train")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    args = parser.parse_args()
    report = {"threads": args.threads, "workloads": {}}
    for workload in args.workloads.split(","):
        figures = {rule: [] for rule in RULES}
        in_force = {}
        for _ in range(args.processes):
            for rule in RULES:
                in_force[rule], ms = one_process(rule, workload, args.threads, args.reps,
                                                 args.build)
                figures[rule].append(round(ms, 3))
        report["workloads"][workload] = {
            rule: {"rule_in_force": in_force[rule], "ms_per_step": figures[rule],
                   "median_ms": round(statistics.median(figures[rule]), 3)} for rule in RULES}
        print(json.dumps({workload: report["workloads"][workload]}), file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
