#!/usr/bin/env python3
"""make bench: every workload in every mode at 1 and 2 threads, one process per cell, plus the
Google Benchmark micro benchmarks (dispatch, launch, 64 MB alloc, STREAM triad, the limit loops),
the cache and all-reduce benchmarks (cache_bench.py, allreduce_bench.py), and adaptive mode
against eager mode paired in one process per workload (adaptive_pairs.py). Writes
build/bench/report.json, report.md and report.png.

    /usr/bin/python3 bench/run_bench.py [--quick] [--out build/bench] [--modes a,b] [--workloads a,b]
        [--skip op-overhead,adaptive-overhead,cache,allreduce,adaptive-pairs]
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from workloads import all_workloads  # noqa: E402
from report import write_reports  # noqa: E402
from rounds import cells_in_round, merge_rounds  # noqa: E402

MODES = ["stock", "stock-tuned", "lazy-ts", "neuron-eager", "neuron-adaptive"]
# Parts of a run that --skip may leave out (the micro benchmarks always run: the triad and the
# limit loops are what cells are measured against).
OPTIONAL_PARTS = ["op-overhead", "adaptive-overhead", "cache", "allreduce", "adaptive-pairs"]
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def mode_environment(mode, threads, build_dir):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = os.path.join(build_dir, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("NEURON_FALLBACK", "silent")
    # Cold compiles in every cell (the first-compile figure); bench/cache_bench.py measures the
    # persistent cache.
    env["NEURON_CACHE"] = "0"
    if mode == "stock-tuned":
        # Freed memory stays mapped (no decay back to the OS): no page-fault storm on reuse.
        env["LD_PRELOAD"] = JEMALLOC
        env["MALLOC_CONF"] = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
        # Idle OpenMP workers sleep at once instead of spinning ~4 ms after each parallel region
        # beside OpenBLAS's threads (stock's 2-thread training steps ran 2.5x-4x slower with
        # libgomp's default; the device's import does the like: src/device/openmp_wait.h).
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if mode == "neuron-adaptive":
        env["NEURON_ADAPTIVE_EAGER"] = "1"
    return env


def run_cell(mode, threads, workload, args):
    command = [sys.executable, os.path.join(HERE, "run_workload.py"), "--mode", mode,
               "--threads", str(threads), "--workload", workload, "--reps", str(args.reps)]
    try:
        done = subprocess.run(command, env=mode_environment(mode, threads, args.build),
                              capture_output=True, text=True, timeout=args.cell_timeout)
        lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
        if lines:
            return json.loads(lines[-1])
        error = f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:250]}"
    except subprocess.TimeoutExpired:
        error = f"timed out after {args.cell_timeout} s"
    return {"workload": workload, "mode": mode, "threads": threads, "ok": False, "error": error}


def run_micro(args):
    binary = os.path.join(args.build, "bench", "neuron_micro_bench")
    out = os.path.join(args.out, "micro.json")
    # Interleaved repetitions: the device and stock (and the triad) take turns, so that a ratio
    # of two medians is not a ratio of two moments of the machine.
    command = [binary, "--benchmark_format=json", f"--benchmark_out={out}",
               "--benchmark_repetitions=7", "--benchmark_enable_random_interleaving=true",
               "--benchmark_report_aggregates_only=true", "--benchmark_min_time=0.2"]
    env = mode_environment("neuron-eager", 1, args.build)
    subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=900)
    with open(out) as f:
        raw = json.load(f)["benchmarks"]
    medians = {}
    for b in raw:
        if b.get("aggregate_name") == "median":
            # A benchmark with a fixed iteration count (a whole number of cycles of its steps)
            # has it in its name: dropped, so every limit is BM_Limit/<workload>/threads:<t>.
            name = re.sub(r"/iterations:\d+", "", b["run_name"])
            medians[name] = {"real_time": b["real_time"], "time_unit": b["time_unit"],
                             "bytes_per_second": b.get("bytes_per_second")}
    return medians


def run_per_thread_script(script, quick_arguments, args):
    """Runs a bench script that measures the device against stock in one process, at 1 and 2
    threads; its JSON output by thread count (an error line where it failed)."""
    results = {}
    for t in (1, 2):
        command = [sys.executable, os.path.join(HERE, script), "--threads", str(t)]
        if args.quick:
            command += quick_arguments
        done = subprocess.run(command, env=mode_environment("neuron-eager", t, args.build),
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            results[t] = {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
        else:
            results[t] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def run_op_overhead(args):
    """Tiny ops from Python, device and stock alternating in one process (bench/op_overhead.py)."""
    return run_per_thread_script("op_overhead.py", ["--rounds", "5", "--ops-per-block", "500"], args)


def run_adaptive_overhead(args):
    """tiny-chain-10 per op: stock, device eager and adaptive alternating in one process
    (bench/adaptive_overhead.py)."""
    return run_per_thread_script("adaptive_overhead.py", ["--rounds", "5", "--steps", "100"], args)


def run_adaptive_pairs(args, workloads, threads, stock):
    """Adaptive against eager mode on the same state, repetitions alternating in one process per
    workload (bench/adaptive_pairs.py): the matrix's adaptive/eager ratio without the noise
    between processes; with `stock`, stock-tuned as a third arm in the same process (jemalloc
    preloaded and OpenMP's passive wait, as for that mode's cells). {threads: [row per
    workload]}."""
    results = {}
    for t in threads:
        rows = []
        for w in workloads:
            command = [sys.executable, os.path.join(HERE, "adaptive_pairs.py"), "--threads", str(t),
                       "--workloads", w] + (["--pairs", "3"] if args.quick else []) + \
                (["--stock"] if stock else [])
            environment = mode_environment("stock-tuned" if stock else "neuron-eager", t, args.build)
            try:
                done = subprocess.run(command, env=environment,
                                      capture_output=True, text=True, timeout=args.cell_timeout * 2)
            except subprocess.TimeoutExpired:
                rows.append({"workload": w, "ok": False, "error": "timed out"})
                continue
            if done.returncode != 0:
                rows.append({"workload": w, "ok": False,
                             "error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]})
            else:
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        results[t] = rows
    return results


def run_cache_bench(args):
    command = [sys.executable, os.path.join(HERE, "cache_bench.py"), "--build", args.build]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_allreduce_bench(args):
    command = [sys.executable, os.path.join(HERE, "allreduce_bench.py"), "--build", args.build]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "date": datetime.date.today().isoformat()}


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few workloads, a few seconds each")
    parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    parser.add_argument("--out", default=None)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workloads", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per cell and round")
    parser.add_argument("--rounds", type=int, default=None,
                        help="passes over the whole matrix (default 2, quick 1)")
    parser.add_argument("--cell-timeout", type=int, default=600)
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: "
                        + ", ".join(OPTIONAL_PARTS))
    args = parser.parse_args(argv)
    args.skip = [p for p in args.skip.split(",") if p]
    unknown = [p for p in args.skip if p not in OPTIONAL_PARTS]
    if unknown:
        parser.error(f"--skip: unknown part(s) {', '.join(unknown)}; known: {', '.join(OPTIONAL_PARTS)}")
    args.out = args.out or os.path.join(args.build, "bench")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.rounds < 1 or args.reps < 1:
        parser.error(f"--rounds and --reps must be at least 1, got {args.rounds} and {args.reps}")
    return args


def main(argv):
    args = parse(argv)
    os.makedirs(args.out, exist_ok=True)
    workloads = [w.name for w in all_workloads(args.quick)]
    if args.workloads:
        workloads = [w for w in args.workloads.split(",") if w]
    modes = [m for m in args.modes.split(",") if m]
    threads = [int(t) for t in args.threads.split(",")]
    start = time.time()
    print(f"[bench] micro benchmarks ...", flush=True)
    micro = run_micro(args)
    op_overhead, adaptive_overhead, cache, allreduce, pairs = {}, None, None, None, None
    if "op-overhead" not in args.skip:
        print(f"[bench] tiny-op overhead, device and stock alternating ...", flush=True)
        op_overhead = run_op_overhead(args)
    if "adaptive-overhead" not in args.skip:
        print(f"[bench] tiny-chain-10, stock, eager and adaptive alternating ...", flush=True)
        adaptive_overhead = run_adaptive_overhead(args)
    cells = cells_in_round(threads, workloads, modes, 1)  # the report's order
    by_cell = {cell: [] for cell in cells}
    done_count = 0
    for round_number in range(1, args.rounds + 1):
        for t, w, m in cells_in_round(threads, workloads, modes, round_number):
            if by_cell[(t, w, m)] and by_cell[(t, w, m)][0].get("available") is False:
                continue  # a mode that does not exist yet: once is enough
            row = run_cell(m, t, w, args)
            by_cell[(t, w, m)].append(row)
            done_count += 1
            status = (f"{row['median_ms']:.3f} ms" if row.get("ok") else
                      "n/a" if row.get("available") is False else "FAILED " + row.get("error", ""))
            print(f"[bench] {done_count} round {round_number}/{args.rounds} "
                  f"threads={t} {w} {m}: {status}", flush=True)
    rows = [merge_rounds(by_cell[cell]) for cell in cells]
    if "adaptive-pairs" not in args.skip and "neuron-adaptive" in modes:
        print("[bench] adaptive against eager, paired in one process per workload ...", flush=True)
        pairs = run_adaptive_pairs(args, workloads, threads, "stock-tuned" in modes)
    if "cache" not in args.skip:
        print("[bench] persistent compile cache ...", flush=True)
        cache = run_cache_bench(args)
    if "allreduce" not in args.skip:
        print("[bench] all-reduce, neuron backend against gloo ...", flush=True)
        allreduce = run_allreduce_bench(args)
    result = {"machine": machine(), "quick": args.quick, "seconds": round(time.time() - start, 1),
              "rounds": args.rounds, "micro": micro, "op_overhead": op_overhead, "rows": rows,
              "cache": cache, "allreduce": allreduce, "adaptive_overhead": adaptive_overhead,
              "adaptive_pairs": pairs, "skipped": args.skip}
    write_reports(result, args.out)
    print(f"[bench] {result['seconds']} s -> {args.out}/report.md, report.json, report.png")
    failed = [r for r in rows if not r.get("ok") and r.get("available") is not False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
