"""Timing one call in blocks that alternate with other paths in the same process (the in-process
micro benchmarks: list_launches.py, max_pool.py), so that the machine's noise falls on all of
them alike."""
import time


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
