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
import resource
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
            limit_lazy_address_space()
            self.lazy = importlib.import_module("torch._lazy")
            importlib.import_module("torch._lazy.ts_backend").init()
            self.device = torch.device("lazy")
        else:
            # The first step is checked against the CPU (check_against_cpu), so it must run the
            # device's kernels, not the CPU kernels that run while they compile (interim
            # launches, which the cache bench measures).
            os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
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

    def adaptive(self):
        """The adaptive tracer's counts (docs/adaptive-eager.md) in neuron-adaptive mode."""
        if self.name != "neuron-adaptive":
            return {}
        stats = self.neuron.metrics()["adaptive"]
        return {key: stats[key] for key in ("windows", "replays", "ops_traced", "ops_deferred",
                                            "fused_kernel_runs", "launches_saved")}

    def wait_for_background_compiles(self):
        """Ops' kernels (their first calls run on the CPU meanwhile) and hot windows' fused kernels
        compile on a background thread (docs/compiled-eager.md, docs/adaptive-eager.md); the
        warm-up waits for them, as a long run reaches them in its first seconds."""
        if self.neuron is not None:
            self.neuron.wait_for_compiles()

    def compiles(self):
        if self.neuron is not None:
            return self.neuron.metrics()["compiles"]
        if self.name == "lazy-ts":
            return importlib.import_module("torch._lazy.metrics").counter_value("UncachedCompile") or 0
        return 0


def lazy_address_space_bytes():
    with open("/proc/meminfo") as f:
        total_kib = next(int(l.split()[1]) for l in f if l.startswith("MemTotal:"))
    return total_kib * 1024 // 2


def limit_lazy_address_space():
    """PyTorch 1.13's lazy tensor core keeps the old buffer of every tensor updated in place at
    each mark_step (adamw-gpt12: about 2 GB a step), so a lazy-ts cell runs under an address-space
    limit of half the machine's memory: one that outgrows it fails alone, with an error, instead
    of waking the kernel's OOM killer on a shared machine."""
    limit = lazy_address_space_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def error_text(mode_name, error):
    text = str(error)
    if mode_name == "lazy-ts" and "can't allocate memory" in text:
        return (f"out of memory under the lazy-ts cell's address-space limit "
                f"({resource.getrlimit(resource.RLIMIT_AS)[0] / 2**30:.1f} GiB; PyTorch 1.13's lazy "
                "tensors keep each in-place-updated tensor's old buffer at every mark_step)")
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


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


def repetition(workload, mode, state):
    """`inner` steps, each consuming the last one's result (workloads.py), then a read of one
    element of a tensor that depends on every step: the repetition's sync point, in every mode.
    One element, so that the read costs nothing against the steps; the steps' results all end
    in live state, so none of them is dead work whatever a mode computes lazily."""
    for _ in range(workload.inner):
        workload.step(state)
        mode.after_step()
    observed = workload.observe(state).detach().reshape(-1)[:1].cpu()
    mode.sync()
    return observed


def adaptive_threshold():
    """NEURON_ADAPTIVE_THRESHOLD as the tracer reads it (default 2), in every mode, so that every
    mode warms up alike."""
    text = os.environ.get("NEURON_ADAPTIVE_THRESHOLD", "2")
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"[bench] NEURON_ADAPTIVE_THRESHOLD must be an integer >= 1, got {text!r}")
    return value


def warmup_repetitions(requested):
    """Warm-up repetitions: at least the adaptive threshold + 2, so that each of a repetition's
    windows is hot (seen `threshold` times) and has been replayed twice before anything is timed;
    the eager compiles fall there too (timed() then waits for the fused kernels' background
    compiles and runs SETTLING_REPETITIONS more)."""
    least = adaptive_threshold() + 2
    if requested is None:
        return least
    if requested < least:
        raise ValueError(f"[bench] --warmup {requested} is below the adaptive threshold + 2 "
                         f"({least}): the timed repetitions would record windows that are not hot yet")
    return requested


# Repetitions after the background compiles finished: the first records each hot window that ran
# op by op while its fused kernel compiled, the second runs it as it will run from then on.
SETTLING_REPETITIONS = 2


def timed(workload, mode, state, warmup, reps):
    for _ in range(warmup):
        repetition(workload, mode, state)
    mode.wait_for_background_compiles()
    for _ in range(SETTLING_REPETITIONS):  # in every mode, so that every mode warms up alike
        repetition(workload, mode, state)
    compiles_before = mode.compiles()
    adaptive_before = mode.adaptive()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        repetition(workload, mode, state)
        times.append((time.perf_counter() - start) * 1000 / workload.inner)
    adaptive = {key: value - adaptive_before[key] for key, value in mode.adaptive().items()}
    return times, mode.compiles() - compiles_before, adaptive


def run(args):
    torch.set_num_threads(args.threads)
    workload = by_name(args.workload)
    row = {"workload": workload.name, "mode": args.mode, "threads": args.threads, "ok": False}
    try:
        mode = Mode(args.mode)
        state = workload.build(mode.device)
        check_against_cpu(workload, mode, state)
        times, compiles, adaptive = timed(workload, mode, state, args.warmup, args.reps)
        row.update(ok=True, median_ms=statistics.median(times), min_ms=min(times),
                   max_ms=max(times), reps=len(times), compiles=compiles, times_ms=times,
                   warmup_reps=args.warmup)
        if adaptive:
            row["adaptive"] = adaptive  # inside the timed region
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
        row.update(error=error_text(args.mode, e), trace=traceback.format_exc()[-1500:])
    return row


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up repetitions (default and least: NEURON_ADAPTIVE_THRESHOLD + 2)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        args.warmup = warmup_repetitions(args.warmup)
    except ValueError as error:
        parser.error(str(error))
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    return args


if __name__ == "__main__":
    print(json.dumps(run(parse(sys.argv[1:]))))
