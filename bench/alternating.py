"""The in-process micro benchmarks' shared parts (activation_backward.py, batch_norm.py, copies.py,
list_launches.py, reduction_fusion.py, losses.py, max_pool.py, softmax_ops.py,
reductions.py, scalar_operands.py, special_inputs.py): their command line, checking a case
against the CPU, timing one call in blocks that alternate with other paths in the same process,
so that the machine's noise falls on all of them alike, the triad, and the limit loops' library
(bench/limit)."""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch


def threads_and_rounds(description, argv, rounds=9):
    """Parses --threads (default 1) and --rounds (default `rounds`), both positive, and runs torch
    on that many threads. `description`: the script's docstring."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=rounds)
    args = parser.parse_args(argv)
    if min(args.threads, args.rounds) < 1:
        parser.error("--threads and --rounds must be positive")
    torch.set_num_threads(args.threads)
    return args


def start_eager_report(description, argv):
    """The start the eager-mode scripts share (softmax_ops.py, reductions.py, copies.py): parses
    --threads and --rounds (threads_and_rounds), turns the adaptive tracer off and seeds torch
    with 0. Returns (args, the device, the report to print: threads, rounds and empty `cases`)."""
    import torchneuron
    args = threads_and_rounds(description, argv)
    torchneuron.set_adaptive(False)
    torch.manual_seed(0)
    report = {"threads": torch.get_num_threads(), "rounds": args.rounds, "cases": {}}
    return args, torchneuron.device(), report


def per_call_us(op, args, calls, sync):
    """Microseconds per call of op(*args) over `calls` calls, after one untimed call; `sync`
    waits for the device's work (a no-op for CPU tensors)."""
    # PyTorch's OpenMP workers spin for a while after a parallel region (and OpenBLAS's after a
    # product): a block that starts while they spin shares the cores with them. Each block starts
    # on quiet cores, the one before it having settled.
    time.sleep(0.05)
    op(*args)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        op(*args)
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def stock_and_device(op, cpu_args, device_args, calls, rounds, sync):
    """{"stock_us", "device_us", "speedup"}: the medians over `rounds` alternating blocks of
    `calls` calls of op on the CPU arguments and on the device's (`sync` waits for the device),
    after two warm-up blocks each (kernels, caches), and stock's time over the device's."""
    for _ in range(2):
        per_call_us(op, cpu_args, calls, lambda: None)
        per_call_us(op, device_args, calls, sync)
    stock, device = [], []
    for _ in range(rounds):
        stock.append(per_call_us(op, cpu_args, calls, lambda: None))
        device.append(per_call_us(op, device_args, calls, sync))
    s, d = statistics.median(stock), statistics.median(device)
    return {"stock_us": round(s, 1), "device_us": round(d, 1), "speedup": round(s / d, 3)}


def check_and_time_unary(cases, check, calls, rounds, device, report):
    """For each case {name: (op, CPU input)}: check(name, device result brought back, CPU result)
    raises if they differ; then the case's stock_and_device figures (`calls` calls a block,
    `rounds` rounds, the device synchronized) go to report["cases"][name]."""
    import torchneuron
    for name, (op, x) in cases.items():
        d = x.to(device)
        check(name, op(d).cpu(), op(x))
        report["cases"][name] = stock_and_device(op, (x,), (d,), calls, rounds,
                                                 torchneuron.synchronize)


def triad_gb_per_s(threads):
    """A STREAM triad a = b + s * c over 16M floats with PyTorch's out= kernels (reused buffers),
    the median of five: the machine's streaming bandwidth, against which a path's GB/s are read."""
    n = 1 << 24
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    times = [per_call_us(lambda: torch.add(b, c, alpha=3.0, out=a), (), 3, lambda: None)
             for _ in range(5)]
    return 3 * 4 * n / (statistics.median(times) * 1e-6) / 1e9


BUILD = os.environ.get("NEURON_BUILD_DIR",
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))


def limit_library(argtypes):
    """The hand-written limit loops (bench/limit/limit_kernels.h) with `argtypes` ({function name:
    ctypes argument types}) declared; exits naming the file when the build lacks it."""
    path = os.path.join(BUILD, "bench", "libneuron_limit_kernels.so")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: build the project first (make build)")
    lib = ctypes.CDLL(path)
    for name, types in argtypes.items():
        getattr(lib, name).argtypes = types
    return lib
