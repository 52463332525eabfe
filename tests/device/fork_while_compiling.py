"""Forks while other threads compile (run by test_fork_safety.py in a process of its own).

Usage: fork_while_compiling.py FORKS TIMEOUT_S. Two threads compile kernels of distinct
signatures (ops x dtypes x ranks x broadcast patterns, so every one is a real compile) while the main thread
forks FORKS times. Each child runs device ops (one kernel the parent has, one it compiles itself)
and exits, alternately through os._exit and a normal interpreter exit. The threads and the
children draw random numbers too, from PyTorch's one CPU generator (held across fork():
src/device/torch_fork_safety.h). Prints one JSON line: the iterations whose child hung (killed
after TIMEOUT_S) or failed, what a compiling thread raised, and how many compiles the threads
finished while the forks ran.
"""

import json
import os
import select
import signal
import sys
import threading

import torch
import torchneuron

DEV = torchneuron.device()
BINARY = [torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum, torch.hypot]
UNARY = [torch.sin, torch.cos, torch.exp, torch.tanh, torch.sigmoid, torch.neg, torch.abs]
# (integer inputs: sin, cos, exp, tanh and sigmoid compute in float; hypot has no integer kernel
# anywhere, so it is left out for them: its error once ended both threads after the first fork)


def signatures():
    # Every dimension strided (a step of 2), so none coalesce: each rank is its own kernel.
    for rank in range(1, 7):
        for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
            for op in UNARY:
                yield op, dtype, rank, False
            for op in BINARY:
                if op is torch.hypot and not dtype.is_floating_point:
                    continue
                yield op, dtype, rank, False
                yield op, dtype, rank, True  # the second operand broadcast along the last dim


def compile_all(work, stop, errors):
    try:
        for op, dtype, rank, broadcast in work:
            if stop.is_set():
                return
            x = (torch.rand([6] * rank) * 10).to(dtype).to(DEV)[(slice(None, None, 2),) * rank]
            if op in UNARY:
                op(x).cpu()
            else:
                op(x, x[..., :1] if broadcast else x).cpu()
    except BaseException as error:  # noqa: B036 - reported in the JSON line, whatever it is
        errors.append(repr(error)[:500])


def child(iteration, write_end):
    try:
        # A kernel the parent compiled long ago, and one no thread compiles (rank and dtype
        # differ per iteration): this child compiles it.
        base = (torch.ones(4, device=DEV) + 1).cpu()
        a = torch.rand([2] * (1 + iteration % 5), dtype=torch.float32)
        b = torch.rand_like(a) + 0.5
        got = torch.atan2(a.to(DEV) * (iteration + 1), b.to(DEV)).cpu()
        ok = torch.equal(base, torch.full((4,), 2.0)) and torch.allclose(
            got, torch.atan2(a * (iteration + 1), b))
        os.write(write_end, b"ok" if ok else b"wrong result")
    except BaseException as error:  # noqa: B036 - reported to the parent, whatever it is
        os.write(write_end, repr(error).encode()[:500])
    if iteration % 2:
        sys.exit(0)  # the interpreter's normal exit: atexit, finalization, static destructors
    os._exit(0)


def main():
    forks, timeout_s = int(sys.argv[1]), float(sys.argv[2])
    # The thread running this touches the compiler first, so it is loaded before the forks.
    (torch.ones(4, device=DEV) + 1).cpu()
    work = list(signatures())
    stop = threading.Event()
    errors = []
    threads = [
        threading.Thread(target=compile_all, args=(work[i::2], stop, errors)) for i in range(2)
    ]
    for t in threads:
        t.start()
    compiles_before = torchneuron.metrics()["compiles"]
    hung, failed = [], []
    for iteration in range(forks):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            child(iteration, write_end)
        os.close(write_end)
        # The child's end closes when it exits (or is killed): readable either way.
        ready, _, _ = select.select([read_end], [], [], timeout_s)
        if not ready:
            hung.append(iteration)
            os.kill(pid, signal.SIGKILL)
        report = os.read(read_end, 1000).decode() if ready else ""
        _, status = os.waitpid(pid, 0)
        os.close(read_end)
        if ready and (report != "ok" or os.waitstatus_to_exitcode(status) != 0):
            failed.append([iteration, report, os.waitstatus_to_exitcode(status)])
    compiles_during = torchneuron.metrics()["compiles"] - compiles_before
    stop.set()
    for t in threads:
        t.join()
    print(
        json.dumps({
            "hung": hung,
            "failed": failed,
            "thread_errors": errors,
            "compiles_during_forks": compiles_during
        }))


if __name__ == "__main__":
    main()
