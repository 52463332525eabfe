#!/usr/bin/env python3
"""The matrix products' and convolutions' share of stock PyTorch's step, and the ceiling it puts
on any speedup that leaves them as they are: a fresh process per workload on the CPU (jemalloc
preloaded, as stock-tuned), the step timed without a profiler, then the same steps under
`torch.autograd.profiler` for the self time of the product ops (`mm`, `addmm`, `bmm`,
`baddbmm`, and every op whose name contains `conv`: the convolutions and their backward ops).

    ceiling = stock's step time / its products' time

is the most any device can gain over stock-tuned while its products run at stock's speed (all
other work free). The device's products are ATen's BLAS calls on the same OpenBLAS
(docs/benchmarks.md, "The BLAS kernels every mode runs"), so the ceiling bounds issue 15's
targets. The profiler's own cost falls on every op, so the products' self times are taken from
profiled rounds and the step's time from unprofiled ones, the two kinds alternating; each is the
median over its rounds. On a loaded machine the two can still disagree by more than the
products' remainder (a step that is 90% products can show a share above 1): read the share of a
quiet run.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/product_share.py [--threads 1] [--steps 10]
        [--workloads transformer-block-train,gpt-mini-train,...]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
TRAINING = ("mlp-train,transformer-block-train,gpt-mini-train,resnet18-train,mobilenet-v2-train,"
            "cnn-mnist-train,lstm-lm-train,tiny-regression-train,inference-gelu-mlp,varlen-loop")

ONE_PROCESS = r"""
import json, os, statistics, sys, time
import torch
sys.path.insert(0, os.environ["BENCH_DIR"])
from workloads import by_name
PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm"}
workload = by_name(os.environ["WORKLOAD"])
steps = int(os.environ["STEPS"])
state = workload.build(torch.device("cpu"))
for _ in range(3):
    workload.step(state)
float(workload.observe(state).sum())
# Unprofiled and profiled rounds alternate, so a stretch of load on a shared machine falls on
# both kinds of round rather than on one of them; each figure is the median over its rounds.
# An untimed step after each profiled round lets the step after the profiler's own work (its
# events' collection, which evicts the caches) fall outside the timed round; the profiles are
# read at the end.
times, profiles = [], []
for _ in range(steps):
    workload.step(state)
    float(workload.observe(state).sum())
    start = time.perf_counter()
    for _ in range(workload.inner):
        workload.step(state)
    float(workload.observe(state).sum())
    times.append((time.perf_counter() - start) * 1000 / workload.inner)
    with torch.autograd.profiler.profile() as prof:
        for _ in range(workload.inner):
            workload.step(state)
        float(workload.observe(state).sum())
    profiles.append(prof)
product_times, by_op_rounds = [], []
for prof in profiles:
    round_us, round_by_op = 0.0, {}
    for row in prof.key_averages():
        if row.key in PRODUCTS or "conv" in row.key:
            # A wrapper's self time can come out slightly negative (the profiler's rounding).
            self_us = max(0.0, row.self_cpu_time_total)
            round_us += self_us
            round_by_op[row.key] = self_us / 1000 / workload.inner
    product_times.append(round_us / 1000 / workload.inner)
    by_op_rounds.append(round_by_op)
ops = sorted({op for r in by_op_rounds for op in r})
by_op = {op: round(statistics.median(r.get(op, 0.0) for r in by_op_rounds), 3) for op in ops}
step_ms = statistics.median(times)
product_ms = statistics.median(product_times)
print(json.dumps({"workload": workload.name, "threads": torch.get_num_threads(),
                  "step_ms": round(step_ms, 3), "product_ms": round(product_ms, 3),
                  "product_share": round(product_ms / step_ms, 3),
                  "ceiling": round(step_ms / product_ms, 2) if product_ms else None,
                  "product_ops_ms": by_op}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--workloads", default=TRAINING)
    args = parser.parse_args()
    rows = []
    for workload in args.workloads.split(","):
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), WORKLOAD=workload,
                   STEPS=str(args.steps), BENCH_DIR=HERE, OMP_WAIT_POLICY="PASSIVE")
        if os.path.exists(JEMALLOC):
            env.update(LD_PRELOAD=JEMALLOC, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
        done = subprocess.run([sys.executable, "-c", ONE_PROCESS], env=env, capture_output=True,
                              text=True, timeout=1800)
        if done.returncode != 0:
            rows.append({"workload": workload, "error": done.stderr.strip()[-500:]})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"threads": args.threads, "rows": rows}))


if __name__ == "__main__":
    main()
