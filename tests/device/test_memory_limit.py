"""Allocation failure in the cache and store path (docs/persistent-cache.md, "Out of memory"):
a process under an address-space limit (RLIMIT_AS, as `ulimit -v` sets it) fills its address
space until an allocation fails, then runs ops that need new kernels (store lookup, compile,
link), starved and then with half the memory returned to the OS (where they compile). No abort: exit code 0, and every op either
computes the CPU's result or raises a clean RuntimeError/MemoryError."""

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

import torch
import torchneuron

CHILD = os.path.join(os.path.dirname(__file__), "memory_limit_child.py")
HEADROOM = 512 << 20  # address space the child may map beyond what a started process maps
CHUNK = 16 << 20


def started_process_vm_bytes():
    """VmSize of a process that imported torchneuron and ran one compiled op: this one (pytest's
    own modules add a few MiB, well within HEADROOM and the run-to-run spread of the store's
    mappings)."""
    (torch.ones(4, device=torchneuron.device()) + 1).cpu()
    with open("/proc/self/status") as status:
        return int(next(l for l in status if l.startswith("VmSize")).split()[1]) * 1024


def run_limited(env):
    limit = started_process_vm_bytes() + HEADROOM

    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, CHILD, str(CHUNK)], env=env, capture_output=True,
                          text=True, timeout=600, preexec_fn=set_limit)


def check(run):
    assert run.returncode == 0, f"exit code {run.returncode}\n{run.stdout}\n{run.stderr[-4000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["chunks"] > 0
    outcomes = result["starved"] + result["relieved"]
    assert len(outcomes) == 18
    assert all(o == "correct" or o.startswith("error: ") for o in outcomes), outcomes
    # With memory back, new kernels compile again (nothing about the starved ones was kept).
    assert result["relieved"] == ["correct"] * 9 and result["relieved_compiles"] > 0, result


def test_out_of_memory_before_new_kernels_never_aborts_with_the_cache_on():
    cache = tempfile.mkdtemp(prefix="neuron-memory-limit-")
    try:
        check(run_limited(dict(os.environ, NEURON_CACHE_DIR=cache, NEURON_FALLBACK="silent")))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_out_of_memory_before_new_kernels_never_aborts_with_the_cache_off():
    check(run_limited(dict(os.environ, NEURON_CACHE="0", NEURON_FALLBACK="silent")))
