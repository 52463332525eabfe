#!/usr/bin/env python3
"""Accumulating products (src/tracer/accumulating_products.h) on training workloads: adaptive mode
with NEURON_ADAPTIVE_ACCUMULATE on against off, and stock PyTorch (jemalloc when it is installed,
as `stock-tuned` in make bench), in fresh processes that alternate round by round so that the
machine's noise falls on all alike. Each process builds the workload (bench/workloads.py), warms
it up, then times steps (each ending with a read of its observed value, a sync point). Prints one
JSON object: per workload and mode the median step time in ms over the rounds, the products
joined per step (on), and the ratios `off_over_on` (above 1: joining is faster) and
`stock_over_on`.

    /usr/bin/python3 bench/accumulating_products.py [--workloads mlp-train,gpt-mini-train]
        [--threads 1] [--rounds 6] [--steps 100]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

# Run in a fresh process: argv = workload, device ("neuron" or "cpu"), steps.
CHILD = r"""
import sys, time, statistics, torch
sys.path.insert(0, sys.argv[4])
import workloads
name, where, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if where == "neuron":
    import torchneuron
    device = torchneuron.device()
else:
    device = torch.device("cpu")
workload = workloads.by_name(name)
state = workload.build(device)
for _ in range(15):
    workload.step(state)
workload.observe(state).cpu()
joined_before = torchneuron.metrics()["adaptive"]["accumulating_products"] if where == "neuron" else 0
times = []
for _ in range(steps):
    start = time.perf_counter()
    workload.step(state)
    workload.observe(state).cpu()
    times.append(time.perf_counter() - start)
joined = (torchneuron.metrics()["adaptive"]["accumulating_products"] - joined_before
          if where == "neuron" else 0)
print(statistics.median(times) * 1e3, joined / steps)
"""


def run_once(workload, mode, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), NEURON_INTERIM_LAUNCHES="0")
    if mode == "stock":
        where = "cpu"
        if os.path.exists(JEMALLOC):
            env.update(LD_PRELOAD=JEMALLOC, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
    else:
        where = "neuron"
        env.update(NEURON_ADAPTIVE_EAGER="1", NEURON_ADAPTIVE_ACCUMULATE="1" if mode == "on" else "0")
    run = subprocess.run([sys.executable, "-c", CHILD, workload, where, str(steps), HERE], env=env,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise SystemExit(f"{workload} ({mode}) failed:\n{run.stderr[-3000:]}")
    ms, joined = run.stdout.split()[-2:]
    return float(ms), float(joined)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mlp-train,gpt-mini-train,transformer-block-train")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.threads < 1:
        parser.error("--rounds, --steps and --threads must be at least 1")
    report = {"threads": args.threads, "rounds": args.rounds, "steps": args.steps, "workloads": {}}
    for workload in args.workloads.split(","):
        times = {"on": [], "off": [], "stock": []}
        joined = []
        for round_index in range(args.rounds):
            for mode in ("on", "off", "stock"):
                ms, per_step = run_once(workload, mode, args.threads, args.steps)
                times[mode].append(ms)
                if mode == "on":
                    joined.append(per_step)
            print(f"{workload} round {round_index + 1}/{args.rounds}: on {times['on'][-1]:.2f} ms, "
                  f"off {times['off'][-1]:.2f} ms, stock {times['stock'][-1]:.2f} ms",
                  file=sys.stderr, flush=True)
        medians = {mode: statistics.median(values) for mode, values in times.items()}
        report["workloads"][workload] = {
            "ms_per_step": {mode: round(value, 3) for mode, value in medians.items()},
            "joined_per_step": round(statistics.median(joined), 2),
            "off_over_on": round(medians["off"] / medians["on"], 3),
            "stock_over_on": round(medians["stock"] / medians["on"], 3),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
