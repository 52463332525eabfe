"""Adversarial checks of the fusion of hot windows (test_adaptive_fusion.py has the basics): the
memory a window recorded to run fused holds, and programs built to trip the partitioner (views
and in-place updates of window inputs, out= into slices, dtype views of one memory, intermediates
kept only through .data, autograd hooks) or the background compile (fork while a compile is
queued). Each test compares the fused result with the same program unfused on the device
(bitwise) or with the CPU, and checks from the counters that fusion really ran. The programs
avoid transcendental ops: their results differ by an ulp between a loop's vectorized body (glibc's
libmvec) and its scalar remainder, and a fused loop is vectorized differently from the eager ones."""

import os
import subprocess
import sys

import pytest
import torch
import torchneuron

from torch.testing import assert_close

MIB = 1 << 20


def fusion_metrics():
    return torchneuron.metrics()["adaptive"]


@pytest.fixture(autouse=True)
def fused_adaptive_mode():
    """Adaptive mode with fusion, compiles awaited (NEURON_ADAPTIVE_SYNC), fresh counters."""
    previous = torchneuron.adaptive_enabled()
    torchneuron.set_adaptive(True)
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
    torchneuron.reset_metrics()
    yield
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
    torchneuron.set_adaptive(previous)


def run_unfused_and_fused(program, inputs, dev, steps=4):
    """`program` on device copies of `inputs`, `steps` times, unfused then fused: both lists of
    CPU results (each a list of tensors), and the fused run's fused kernel count."""
    results = {}
    for fuse in (False, True):
        torchneuron.set_adaptive_fusion(fuse, wait_for_compiles=True)
        torchneuron.reset_metrics()
        outs = []
        for _ in range(steps):
            got = program(*[t.to(dev) for t in inputs])
            outs.append([t.cpu() for t in (got if isinstance(got, (list, tuple)) else [got])])
        results[fuse] = outs
    return results[False], results[True], fusion_metrics()["fused_kernel_runs"]


def assert_bitwise(unfused, fused):
    for step, (a, b) in enumerate(zip(unfused, fused)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert x.dtype == y.dtype and torch.equal(x, y), f"step {step}, result {i}"


def test_a_long_fused_chain_on_large_tensors_holds_a_bounded_number_of_results(dev):
    """A window recorded to run fused records calls on large tensors too, and every result it
    records is allocated when recorded (a fused kernel only skips the stores of the results that
    do not escape) and held until the window's launches run. A 120-op chain on 4 MiB tensors held
    all 120 results at its sync (about 480 MiB, where eager mode holds two), so a long chain on
    large tensors ran out of memory only because fusion was on. The window's launches now run
    once its pending results reach 16 times the largest of them (64 MiB at least): at most about
    17 such results are held, and the chain still runs fused, in a few kernels."""
    def allocated():
        return torchneuron.metrics()["allocator"]["allocated_bytes"]

    def step(a):
        for _ in range(60):
            a = a * 1.0001 + 0.001
        return a, allocated()

    x = torch.randn(MIB)  # 4 MiB of float32
    d = x.to(dev)
    expected, _ = step(x)
    before = allocated()  # with the input (and whatever earlier tests keep)
    most_held = 0
    for _ in range(5):
        got, held = step(d)
        most_held = max(most_held, held - before)
        assert_close(got.cpu(), expected)
        del got
    # The pending results and the step's own result: far below the chain's 120.
    assert most_held < 32 * 4 * MIB, f"{most_held / MIB:.0f} MiB held before the sync"
    m = fusion_metrics()
    assert m["fused_kernel_runs"] >= 2
    assert m["launches_saved"] >= 100
