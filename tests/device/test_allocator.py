import resource

import torch
import torchneuron
from torchneuron import _C


def test_memory_allocated_is_exact(dev):
    torchneuron.empty_cache()
    base = torchneuron.memory_allocated()
    t = torch.empty(1000, dtype=torch.float32, device=dev)
    assert torchneuron.memory_allocated() - base == _C.rounded_block_size(4000) == 4096
    u = torch.empty(3 << 20, dtype=torch.uint8, device=dev)
    assert torchneuron.memory_allocated() - base == 4096 + _C.rounded_block_size(3 << 20)
    del t, u
    assert torchneuron.memory_allocated() == base


def test_reserved_keeps_freed_blocks_until_empty_cache(dev):
    torchneuron.empty_cache()
    base = torchneuron.memory_reserved()
    t = torch.empty(1 << 20, device=dev)
    del t
    assert torchneuron.memory_reserved() - base == 4 << 20
    torchneuron.empty_cache()
    assert torchneuron.memory_reserved() == base


def test_peak_tracks_and_resets(dev):
    torchneuron.empty_cache()
    torchneuron.reset_peak_memory_stats()
    base = torchneuron.memory_allocated()
    t = torch.empty(1 << 20, device=dev)
    del t
    assert torchneuron.max_memory_allocated() - base == 4 << 20
    torchneuron.reset_peak_memory_stats()
    assert torchneuron.max_memory_allocated() == base


def test_64mb_alloc_free_loop_reuses_one_block_without_page_faults(dev):
    torchneuron.empty_cache()
    torch.empty(16 << 20, device=dev).fill_(1)  # first touch: the block is faulted in once
    stats = torchneuron.memory_stats()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        torch.empty(16 << 20, device=dev).fill_(1)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    after = torchneuron.memory_stats()
    assert after["system_allocations"] == stats["system_allocations"]
    assert after["cache_hits"] - stats["cache_hits"] == 20
    # Without reuse every iteration faults 16384 4-KiB pages (327,680 in all).
    assert faults < 16384, f"{faults} minor page faults in 20 iterations"


HUGE_PAGE_PROGRAM = r"""
import json, resource, torch, torchneuron

def vmstat(name):
    with open("/proc/vmstat") as counters:
        for line in counters:
            key, value = line.split()
            if key == name:
                return int(value)
    return 0

torchneuron.empty_cache()
blocks = torchneuron.memory_stats()["huge_page_blocks"]
fallbacks = vmstat("thp_fault_fallback")
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t = torch.empty(16 << 20, device=torchneuron.device()).fill_(1)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"blocks": torchneuron.memory_stats()["huge_page_blocks"] - blocks,
                  "faults": faults, "fallbacks": vmstat("thp_fault_fallback") - fallbacks,
                  "sum": t.sum().item()}))
"""


def transparent_huge_page_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as setting:
            line = setting.read()
    except OSError:
        return "unsupported"
    return next((m for m in ("always", "madvise", "never") if f"[{m}]" in line), "unsupported")


def test_large_blocks_are_faulted_in_huge_pages_unless_turned_off():
    """A fresh 64 MiB device tensor is one mapping that asks for huge pages: filling it faults
    32 of them in, not 16,384 pages of 4 KiB (unless the kernel had no free huge page, which it
    counts as a fallback). NEURON_HUGE_PAGES=0 allocates from the C library as before."""
    import json
    from conftest import last_lines_under_settings
    lines = last_lines_under_settings(HUGE_PAGE_PROGRAM, "NEURON_HUGE_PAGES", ("1", "0"))
    on, off = json.loads(lines["1"]), json.loads(lines["0"])
    assert on["sum"] == off["sum"] == 16 << 20
    assert on["blocks"] == 1 and off["blocks"] == 0
    mode = transparent_huge_page_mode()
    if mode in ("always", "madvise"):
        assert on["faults"] < 16384 // 8 or on["fallbacks"] > 0, on
    if mode == "madvise":  # memory that does not ask stays in 4 KiB pages
        assert off["faults"] >= 16384, off


def test_forked_child_allocates_and_computes_on_the_device(dev):
    """DataLoader workers fork: the allocator's lock must be usable in the child."""
    import os
    import time
    parent_tensor = torch.ones(1000, device=dev)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child_tensor = torch.ones(1000, device=dev) + parent_tensor
            os.write(write_end, str(child_tensor.sum().item()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.time() + 60
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        assert time.time() < deadline, "forked child hung"
        time.sleep(0.05)
    assert os.read(read_end, 100) == b"2000.0"
