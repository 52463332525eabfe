#!/usr/bin/env python3
"""The persistent compile cache, measured (issue 4): a training script run twice in fresh
processes on one cache directory (compiles, first iteration against steady state, load time per
cached kernel), eight processes started at once on a cold directory (total compiles against
distinct kernels), and the cold first pass (issue 11): a pass that compiles 23 kernels on an
empty cache directory against the same pass with NEURON_CACHE=0, whose compiles are the floor
(the store's cost is what the cold pass adds to them); and the remote tier (issue 16): a kernel
loaded from a Redis server and from a shared directory (fetch, verification, link) against one
loaded from the node's own disk tier, and 4 nodes x 2 processes on cold caches sharing one Redis;
and the cold start (issue 15): the first training step on an empty cache, ops running on the CPU
while their kernels compile, against stock PyTorch's first step.
Prints one JSON object; run_bench.py includes it in the report.

    /usr/bin/python3 bench/cache_bench.py [--build build] [--cold-pass-only | --remote-only]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# One GPT-style block training step per iteration (bench/workloads.py), timed per iteration,
# and the time from the script's first line to the end of the first iteration (imports, model
# set-up, first step: what the warm start overlaps with its background work).
SCRIPT = r"""
import time
script_start = time.perf_counter()
import json, sys, torch, torchneuron
sys.path.insert(0, sys.argv[1])
from workloads import TransformerTrainStep
torch.set_num_threads(1)
on_cpu = len(sys.argv) > 3 and sys.argv[3] == "cpu"
w = TransformerTrainStep()
state = w.build(torch.device("cpu") if on_cpu else torchneuron.device())
times, fused_runs, replays = [], [], []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    w.step(state)
    if not on_cpu:
        torchneuron.synchronize()
    times.append((time.perf_counter() - start) * 1000)
    if len(times) == 1:
        start_to_first_end = (time.perf_counter() - script_start) * 1000
    if not on_cpu:  # adaptive mode: replays and fused kernel runs so far, after each iteration
        adaptive = torchneuron.metrics()["adaptive"]
        fused_runs.append(adaptive["fused_kernel_runs"])
        replays.append(adaptive["replays"])
if not on_cpu:
    torchneuron.wait_for_compiles()  # kernels still compiling in the background count too
torchneuron.synchronize()  # remote publishes too
m = torchneuron.metrics()
print(json.dumps({"times_ms": times, "compiles": m["compiles"], "interim": m["launches"]["interim"], "persistent_hits": m["persistent_hits"],
                  "load_ms_median": m["persistent_load_ms_median"], "compile_ms_median": m["compile_ms_median"],
                  "start_to_first_end_ms": start_to_first_end, "warm_start": m["warm_start"],
                  "remote": m["remote"], "fused_runs": fused_runs, "replays": replays,
                  "fused_compiles": m["adaptive"]["fused_compiles"] if not on_cpu else 0}))
"""


# 23 distinct kernels (elementwise, reductions, row-wise), each used once: the first pass of a
# program, timed from the first op to its last result; then synchronize(), which also waits for
# the persistent cache's background writer (timed separately: the pass does not wait for it).
COLD_PASS = r"""
import json, time, torch, torchneuron
dev = torchneuron.device()
torch.manual_seed(0)
x = torch.randn(64, 33).to(dev)
y = torch.randn(64, 33).to(dev)
start = time.perf_counter()
outs = [torch.tanh(x) * 2 + 1, torch.softmax(x, 1), x.sum(0), torch.nn.functional.gelu(x),
        x.t().exp(), torch.sign(x), torch.sgn(x), x * y - y, torch.relu(x + y), torch.sigmoid(x),
        x.mean(1), x.amax(0), torch.log1p(x.abs()), torch.sqrt(x.abs() + 1),
        torch.where(x > 0, x, y), x.pow(2), torch.erf(x)]
host = [o.cpu() for o in outs]
pass_ms = (time.perf_counter() - start) * 1000
torchneuron.synchronize()
durable_ms = (time.perf_counter() - start) * 1000
m = torchneuron.metrics()
print(json.dumps({"pass_ms": pass_ms, "durable_ms": durable_ms, "compiles": m["compiles"],
                  "compile_ms_median": m["compile_ms_median"],
                  "persistent_hits": m["persistent_hits"],
                  "write_batches": m["persistent_write_batches"],
                  "writes": m["persistent_writes"]}))
"""


def run_cold_pass(env):
    done = subprocess.run([sys.executable, "-c", COLD_PASS], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cold_pass(base, rounds):
    """`rounds` times, alternating so both see the same machine: the pass on a fresh empty cache
    directory, the same pass with the cache off, and a second process on the directory the cold
    one filled. Medians of each, and the median of the per-round ratios."""
    cold, off, second = [], [], []
    for _ in range(rounds):
        directory = tempfile.mkdtemp(prefix="neuron-cold-pass-")
        try:
            env = dict(base, NEURON_CACHE_DIR=directory, NEURON_WARM_START="0")
            cold.append(run_cold_pass(env))
            off.append(run_cold_pass(dict(base, NEURON_CACHE="0")))
            second.append(run_cold_pass(env))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    med = lambda runs, field: statistics.median(r[field] for r in runs)
    return {"rounds": rounds, "kernels": cold[0]["compiles"],
            "cold_pass_ms": med(cold, "pass_ms"), "cold_durable_ms": med(cold, "durable_ms"),
            "cache_off_pass_ms": med(off, "pass_ms"),
            "cold_over_off": statistics.median(c["pass_ms"] / o["pass_ms"]
                                               for c, o in zip(cold, off)),
            "cold_over_off_min": min(c["pass_ms"] / o["pass_ms"] for c, o in zip(cold, off)),
            "cold_over_off_max": max(c["pass_ms"] / o["pass_ms"] for c, o in zip(cold, off)),
            "cold_compile_ms_median": med(cold, "compile_ms_median"),
            "off_compile_ms_median": med(off, "compile_ms_median"),
            "cold_write_batches": med(cold, "write_batches"), "cold_writes": med(cold, "writes"),
            "second_compiles_max": max(r["compiles"] for r in second),
            "second_pass_ms": med(second, "pass_ms")}


def cold_start(base, rounds):
    """Issue 15, no cold-start penalty: the first training step of a process on an empty cache
    directory (warm start off), with interim launches (the default: an op runs ATen's CPU kernel
    while its kernel compiles in the background) and with every op waiting for its compile,
    against stock PyTorch's own first step; `rounds` times, alternating so that all three see the
    same machine. Medians, and the median of the per-round ratios."""
    interim, waiting, stock = [], [], []
    for _ in range(rounds):
        for runs, setting in ((interim, "1"), (waiting, "0")):
            directory = tempfile.mkdtemp(prefix="neuron-cold-start-")
            try:
                runs.append(run(dict(base, NEURON_CACHE_DIR=directory, NEURON_WARM_START="0",
                                     NEURON_INTERIM_LAUNCHES=setting), iterations=3))
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        stock.append(run(base, iterations=3, device="cpu"))
    first = lambda r: r["times_ms"][0]
    ratios = lambda runs: [first(r) / first(s) for r, s in zip(runs, stock)]
    return {"rounds": rounds,
            "interim_first_ms": statistics.median(first(r) for r in interim),
            "waiting_first_ms": statistics.median(first(r) for r in waiting),
            "stock_first_ms": statistics.median(first(r) for r in stock),
            "interim_over_stock": statistics.median(ratios(interim)),
            "interim_over_stock_min": min(ratios(interim)),
            "interim_over_stock_max": max(ratios(interim)),
            "waiting_over_stock": statistics.median(ratios(waiting)),
            "interim_launches": statistics.median(r["interim"] for r in interim),
            "kernels": statistics.median(r["compiles"] for r in interim)}


def first_iteration_with(totals):
    """The 1-based iteration in which a running total (after each iteration) first grew, or 0."""
    return next((i + 1 for i, total in enumerate(totals) if total > 0), 0)


def adaptive_rerun(base, rounds):
    """Issue 14, persistent fused kernels: the training script in adaptive mode (background
    compiles, as a user runs it) on an empty cache directory, then rerun on that directory;
    `rounds` times, a fresh directory each. The rerun must compile nothing, and its hot windows
    run fused from their first hot occurrence: the iteration in which fused kernels first ran
    against the one in which a window first replayed (hot), in the rerun and in the first run
    (which waits for its background compiles), and the fused kernel runs per iteration once
    steady."""
    first_runs, reruns = [], []
    for _ in range(rounds):
        directory = tempfile.mkdtemp(prefix="neuron-adaptive-rerun-")
        try:
            env = dict(base, NEURON_CACHE_DIR=directory, NEURON_ADAPTIVE_EAGER="1")
            first_runs.append(run(env, iterations=8))
            reruns.append(run(env, iterations=8))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    steady_fused = lambda r: r["fused_runs"][-1] - r["fused_runs"][-2]
    med = lambda runs, f: statistics.median(f(r) for r in runs)
    return {"rounds": rounds,
            "first_run_fused_kernels": med(first_runs, lambda r: r["fused_compiles"]),
            "first_run_compiles": med(first_runs, lambda r: r["compiles"]),
            "first_run_first_hot_iteration": max(first_iteration_with(r["replays"])
                                                 for r in first_runs),
            "first_run_first_fused_iteration": max(first_iteration_with(r["fused_runs"])
                                                   for r in first_runs),
            "rerun_compiles_max": max(r["compiles"] for r in reruns),
            "rerun_fused_kernels_loaded": med(reruns, lambda r: r["fused_compiles"]),
            "rerun_persistent_hits": med(reruns, lambda r: r["persistent_hits"]),
            "rerun_load_ms_median": med(reruns, lambda r: r["load_ms_median"]),
            "rerun_first_hot_iteration": max(first_iteration_with(r["replays"]) for r in reruns),
            "rerun_first_fused_iteration": max(first_iteration_with(r["fused_runs"])
                                               for r in reruns),
            "steady_fused_runs_per_iteration": med(reruns, steady_fused),
            "rerun_first_iteration_ms": med(reruns, lambda r: r["times_ms"][0]),
            "rerun_steady_iteration_ms": med(reruns, lambda r: statistics.median(r["times_ms"][2:]))}


def start_redis(directory):
    """redis-server on a free loopback port (nothing saved): (process, URL)."""
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        process = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no", "--dir", directory],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            if process.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"INFO server\r\n")
                    if f"process_id:{process.pid}\r\n".encode() in c.recv(4096):
                        return process, f"redis://127.0.0.1:{port}"
            except OSError:
                pass
            time.sleep(0.01)
        process.kill()
        process.wait()
    raise RuntimeError("cannot start redis-server")


def write_key(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path


def remote_tier(base, rounds):
    """Per remote tier (Redis, a shared directory): the training script's kernels published once,
    then `rounds` times a fresh node (an empty NEURON_CACHE_DIR: every kernel a remote hit,
    fetched, verified, linked and written to its disk tier) and a rerun of that node (every kernel
    a hit of its disk tier), alternating so both see the same machine; the warm start off, so each
    kernel loads when first used. Then 4 nodes x 2 processes started at once on cold caches and a
    fresh namespace of one Redis (a new cluster key), and a fifth node after them."""
    work = tempfile.mkdtemp(prefix="neuron-remote-bench-")
    redis, redis_url = start_redis(work)
    try:
        shared = os.path.join(work, "shared")
        os.mkdir(shared)
        result = {"rounds": rounds}
        for name, url in (("redis", redis_url), ("shared_directory", "file://" + shared)):
            env = dict(base, NEURON_CACHE_REMOTE=url, NEURON_WARM_START="0",
                       NEURON_CACHE_KEY_FILE=write_key(os.path.join(work, name + ".key")))
            fill = run(dict(env, NEURON_CACHE_DIR=os.path.join(work, name + "-fill")), 1)
            remote_ms, local_ms = [], []
            for r in range(rounds):
                node = dict(env, NEURON_CACHE_DIR=os.path.join(work, f"{name}-node{r}"))
                hit = run(node, 1)
                if hit["compiles"] != 0 or hit["remote"]["hits"] != fill["compiles"]:
                    raise RuntimeError(f"{name}: a fresh node compiled {hit['compiles']} kernels")
                remote_ms.append(hit["remote"]["load_ms_median"])
                local_ms.append(run(node, 1)["load_ms_median"])
            result[name] = {"kernels": fill["compiles"],
                            "remote_hit_ms_median": statistics.median(remote_ms),
                            "remote_hit_ms_min": min(remote_ms), "remote_hit_ms_max": max(remote_ms),
                            "local_hit_ms_median": statistics.median(local_ms),
                            "local_hit_ms_min": min(local_ms), "local_hit_ms_max": max(local_ms)}
        env = dict(base, NEURON_CACHE_REMOTE=redis_url, NEURON_WARM_START="0",
                   NEURON_CACHE_KEY_FILE=write_key(os.path.join(work, "cluster.key")))
        here = os.path.dirname(os.path.abspath(__file__))
        procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, here, "1"],
                                  env=dict(env, NEURON_CACHE_DIR=os.path.join(work, f"c{n}")),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(4) for _ in range(2)]
        nodes = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError(err.strip().splitlines()[-1])
            nodes.append(json.loads(out.strip().splitlines()[-1]))
        late = run(dict(env, NEURON_CACHE_DIR=os.path.join(work, "late")), 1)
        result["cluster"] = {"nodes": 4, "processes": 8,
                             "distinct_kernels": result["redis"]["kernels"],
                             "total_compiles": sum(n["compiles"] for n in nodes),
                             "lease_waits": sum(n["remote"]["lease_waits"] for n in nodes),
                             "late_node_compiles": late["compiles"],
                             "late_node_remote_hits": late["remote"]["hits"]}
        return result
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


def run(env, iterations=12, device="neuron"):
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", SCRIPT, here, str(iterations), device], env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(r):
    steady = statistics.median(r["times_ms"][2:])
    return {"compiles": r["compiles"], "persistent_hits": r["persistent_hits"],
            "first_iteration_ms": r["times_ms"][0], "steady_iteration_ms": steady,
            "first_over_steady": r["times_ms"][0] / steady, "load_ms_median": r["load_ms_median"],
            # What loading the cached kernels adds to the first iteration, against the steady one.
            "load_share_of_steady": r["persistent_hits"] * r["load_ms_median"] / steady,
            "compile_ms_median": r["compile_ms_median"],
            "start_to_first_end_ms": r["start_to_first_end_ms"],
            "warm_start_kernels": r["warm_start"]["kernels_prefetched"],
            "warm_start_bytes": r["warm_start"]["bytes_prefaulted"],
            "warm_start_background_ms": r["warm_start"]["background_ms"]}


def median_run(runs):
    """The run with the median first/steady ratio, with the range of that ratio over all runs
    and the median time from script start to the end of the first iteration."""
    ordered = sorted(runs, key=lambda r: r["first_over_steady"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen.update(runs=len(runs), first_over_steady_min=ordered[0]["first_over_steady"],
                  first_over_steady_max=ordered[-1]["first_over_steady"],
                  start_to_first_end_ms_median=statistics.median(
                      r["start_to_first_end_ms"] for r in runs))
    return chosen


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "build"))
    parser.add_argument("--warm-runs", type=int, default=5,
                        help="reruns on the warm directory (the median one is reported)")
    parser.add_argument("--cold-pass-rounds", type=int, default=5)
    parser.add_argument("--cold-pass-only", action="store_true",
                        help="only the cold first pass against the cache off (about a minute)")
    parser.add_argument("--cold-start-only", action="store_true",
                        help="only the first training step on a cold cache against stock's")
    parser.add_argument("--adaptive-rerun-only", action="store_true",
                        help="only adaptive mode's rerun: fused kernels loaded, not compiled")
    parser.add_argument("--remote-only", action="store_true",
                        help="only the remote tier: remote against local hits, a 4-node cluster")
    args = parser.parse_args(argv)
    if args.warm_runs < 1 or args.cold_pass_rounds < 1:
        parser.error(f"--warm-runs and --cold-pass-rounds must be at least 1, got "
                     f"{args.warm_runs} and {args.cold_pass_rounds}")
    # Compiles are waited for except in cold_start(): the other parts count and time them.
    base = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"), NEURON_FALLBACK="silent",
                OMP_NUM_THREADS="1", NEURON_INTERIM_LAUNCHES="0")
    if args.cold_pass_only:
        print(json.dumps({"cold_pass": cold_pass(base, args.cold_pass_rounds)}))
        return 0
    if args.remote_only:
        print(json.dumps({"remote": remote_tier(base, args.warm_runs)}))
        return 0
    if args.adaptive_rerun_only:
        print(json.dumps({"adaptive_rerun": adaptive_rerun(base, args.cold_pass_rounds)}))
        return 0
    if args.cold_start_only:
        print(json.dumps({"cold_start": cold_start(base, args.warm_runs)}))
        return 0
    directory = tempfile.mkdtemp(prefix="neuron-cache-bench-")
    try:
        env = dict(base, NEURON_CACHE_DIR=directory)
        cold = summarize(run(env))
        # The first iteration of one rerun swings with the machine: five reruns, the median one.
        # Reruns with the warm start on (the default) and off alternate, so both see the same
        # machine.
        warm_runs, warm_start_off_runs = [], []
        for _ in range(args.warm_runs):
            warm_runs.append(summarize(run(env)))
            warm_start_off_runs.append(summarize(run(dict(env, NEURON_WARM_START="0"))))
        warm = median_run(warm_runs)
        warm_start_off = median_run(warm_start_off_runs)
        # Stock PyTorch's own first iteration, for scale: it pays first-touch page faults and
        # lazy initialization too.
        stock = median_run([summarize(run(base, device="cpu")) for _ in range(args.warm_runs)])
        tuned_env = dict(base, LD_PRELOAD="/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                         MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
        stock_tuned = median_run([summarize(run(tuned_env, device="cpu"))
                                  for _ in range(args.warm_runs)])
        no_cache = summarize(run(dict(base, NEURON_CACHE="0")))
        shutil.rmtree(directory)
        os.makedirs(directory)
        procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, os.path.dirname(os.path.abspath(__file__)), "2"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(8)]
        eight = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError(err.strip().splitlines()[-1])
            eight.append(json.loads(out.strip().splitlines()[-1]))
        result = {"cold_run": cold, "second_run": warm, "warm_start_off_run": warm_start_off,
                  "cache_off_run": no_cache,
                  "cold_pass": cold_pass(base, args.cold_pass_rounds),
                  "cold_start": cold_start(base, args.warm_runs),
                  "adaptive_rerun": adaptive_rerun(base, args.cold_pass_rounds),
                  "remote": remote_tier(base, args.warm_runs),
                  "stock_run": stock, "stock_tuned_run": stock_tuned,
                  "eight_processes": {"distinct_kernels": no_cache["compiles"],
                                      "total_compiles": sum(r["compiles"] for r in eight),
                                      "total_loads": sum(r["persistent_hits"] for r in eight)}}
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
