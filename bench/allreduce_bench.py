#!/usr/bin/env python3
"""All-reduce through the neuron backend against gloo (issue 17): 2 local ranks sum a 64 MB
float32 bucket (DDP's gradient bucket size class) on device tensors through
init_process_group(backend="neuron"), and the same bucket on CPU tensors through a gloo group of
the same ranks, alternating op by op in one job, median of the timed repetitions. The neuron
backend runs gloo on host views of device memory, so the two should be equal within noise (no
copy); what it adds is the fingerprint exchange (11 integers, all-gathered) before each
collective, which a small all-reduce (4 KB, also reported) shows. Prints one JSON object.

    /usr/bin/python3 bench/allreduce_bench.py [--build build] [--mb 64] [--repeats 15]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def rank_main(args):
    import torch
    import torch.distributed as dist
    import torchneuron

    dist.init_process_group("neuron", init_method="file://" + args.store, rank=args.rank,
                            world_size=2, timeout=datetime.timedelta(seconds=300))
    gloo = dist.new_group(backend="gloo")
    results = {}
    for label, numel in (("bucket", args.mb * (1 << 20) // 4), ("small", 1024)):
        on_device = torch.zeros(numel, device=torchneuron.device())
        on_cpu = torch.zeros(numel)
        runs = {"neuron": lambda: dist.all_reduce(on_device),
                "gloo": lambda: dist.all_reduce(on_cpu, group=gloo)}
        repeats = args.repeats if label == "bucket" else args.repeats * 20
        times = {name: [] for name in runs}
        for i in range(repeats + 2):
            # Alternate which goes first, so neither always follows the other.
            for name in (("neuron", "gloo") if i % 2 == 0 else ("gloo", "neuron")):
                dist.barrier(group=gloo)
                start = time.perf_counter()
                runs[name]()
                if i >= 2:  # two warm-up rounds
                    times[name].append((time.perf_counter() - start) * 1000)
        results[label] = {
            "bytes": numel * 4,
            "neuron_median_ms": statistics.median(times["neuron"]),
            "gloo_median_ms": statistics.median(times["gloo"]),
            "neuron_min_ms": min(times["neuron"]),
            "gloo_min_ms": min(times["gloo"]),
            "repeats": repeats,
        }
        results[label]["neuron_over_gloo"] = (results[label]["neuron_median_ms"] /
                                              results[label]["gloo_median_ms"])
    if args.rank == 0:
        print(json.dumps(results))
    dist.barrier(group=gloo)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank is not None:
        return rank_main(args)
    # As the workload cells: no persistent cache (the bench compiles one fill kernel).
    env = dict(os.environ, NEURON_FALLBACK="silent", NEURON_CACHE="0")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.abspath(os.path.join(args.build, "python"))] +
        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with tempfile.TemporaryDirectory(prefix="neuron-allreduce-bench-") as scratch:
        store = os.path.join(scratch, "store")
        ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--store", store,
                                   "--mb", str(args.mb), "--repeats", str(args.repeats)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for r in (0, 1)]
        outputs = [rank.communicate(timeout=900) for rank in ranks]
    for rank, (out, err) in zip(ranks, outputs):
        if rank.returncode != 0:
            sys.exit(f"allreduce_bench: a rank failed (exit {rank.returncode}):\n{err[-3000:]}")
    print(outputs[0][0].strip().splitlines()[-1])


if __name__ == "__main__":
    main(sys.argv[1:])
