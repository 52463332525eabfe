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

# The basics' fixture (adaptive mode, fusion, compiles awaited, fresh counters) applies here too.
from test_adaptive_fusion import (fused_adaptive_mode, fusion_metrics,  # noqa: F401
                                  run_unfused_and_fused)

MIB = 1 << 20


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


def test_a_result_kept_only_through_a_view_or_data_is_stored(dev):
    """Whether a member's result escapes is decided by its storage's references, not its tensor's:
    the program keeps a row of one intermediate (a view) and the .data of another (a new tensor
    over the same storage) and drops the tensors themselves. Judged by the tensors, both would
    look dead, their stores would be skipped, and the kept views would read stale memory."""
    rows, datas = [], []

    def program(x):
        a = x * 2 + 1
        rows.append(a.view(16, 64)[3])
        b = a * a - 3
        datas.append(b.data)
        return b * 0.5

    x = torch.randn(1024)
    unfused, fused, fused_runs = run_unfused_and_fused(program, [x], dev)
    assert_bitwise(unfused, fused)
    a = x * 2 + 1
    for row, data in zip(rows, datas):
        assert torch.equal(row.cpu(), a.view(16, 64)[3])
        assert torch.equal(data.cpu(), a * a - 3)
    assert fused_runs >= 2


def test_out_into_slices_of_a_tensor_the_program_keeps_are_stored(dev):
    """Results written with out= into two halves of one tensor, the second computed from the first:
    the halves are other geometries of the kept tensor's storage, so they escape through it and
    must be stored even though no tensor of the program is the written view itself."""
    def program(x):
        big = torch.zeros(2048, device=x.device)
        torch.mul(x, 2, out=big[1024:])
        torch.add(big[1024:], 1, out=big[:1024])
        torch.mul(big[:1024], big[1024:], out=big[1024:])
        return big

    x = torch.randn(1024)
    unfused, fused, fused_runs = run_unfused_and_fused(program, [x], dev)
    assert_bitwise(unfused, fused)
    assert_close(fused[-1][0], program(x))
    assert fused_runs >= 2


def test_an_in_place_update_through_a_strided_view_is_not_fused_with_a_shifted_read(dev):
    """x[:, ::2].mul_(2) and a read of x[:, 32:] iterate over the same [64, 33] space (x is
    [64, 65], so neither view coalesces to one dimension), but the read of element (i, 32 + j)
    comes before the write that reaches it at iteration (i, 16 + j / 2): fused into one loop it
    reads the old value. The partitioner must see that the two geometries of x's memory overlap
    and keep the launches apart (the chains around them still fuse)."""
    def program(x, y):
        s = (y + 1) * 2
        x[:, ::2].mul_(2)
        r = x[:, 32:] + s
        return r * 3 - 1, x

    x, y = torch.randn(64, 65), torch.randn(64, 33)
    unfused, fused, fused_runs = run_unfused_and_fused(program, [x, y], dev)
    assert_bitwise(unfused, fused)
    expected = program(x.clone(), y)
    assert_close(fused[-1][0], expected[0])
    assert_close(fused[-1][1], expected[1])
    assert fused_runs >= 2


def test_a_hot_window_whose_operand_sizes_change_is_partitioned_at_each_occurrence(dev):
    """Sizes are run-time arguments, so one hot window covers calls of every size. Two chains on
    independent tensors fuse into one kernel when their sizes agree and must not when they differ
    (one loop cannot run both): a partition kept from an earlier occurrence would read and write
    past the smaller tensors or leave the larger ones partly computed."""
    def program(a, b):
        return (a + 1) * 2 - a, (b + 1) * 2 - b

    sizes = [(1000, 1000), (1000, 300), (300, 1000), (1000, 1000), (7, 7), (7, 1000)]
    for n, m in sizes * 2:
        a, b = torch.randn(n), torch.randn(m)
        got = program(a.to(dev), b.to(dev))
        expected = program(a, b)
        assert torch.equal(got[0].cpu(), expected[0]) and torch.equal(got[1].cpu(), expected[1])
    assert fusion_metrics()["fused_kernel_runs"] >= len(sizes)


def test_threads_recording_into_one_window_get_their_own_results(dev):
    """The window is one per process: four threads' hot chains record into it interleaved and
    partition together (the threads' launches of one size may share a fused kernel). Each thread
    must get its own results, bitwise as the CPU computes them."""
    import threading

    errors = []

    def work(index):
        x = torch.randn(512 + 256 * (index % 2))
        for _ in range(20):
            got = ((x.to(dev) * (index + 1) + 1) * 2 - 0.5).cpu()
            if not torch.equal(got, (x * (index + 1) + 1) * 2 - 0.5):
                errors.append(index)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert fusion_metrics()["fused_kernel_runs"] > 0


def test_large_tensors_stay_correct_while_fusion_and_compiles_switch_modes(dev):
    """Calls on tensors over 64 KiB run eagerly while a hot window's fused kernels compile in the
    background and are recorded once they are ready (or to probe a window's first batch); fusion
    is switched off and on between steps. Every step must give the CPU's result whatever mode
    each call ran in."""
    def program(x):
        y = x * 0.5 + 1
        return torch.where(y > 1, y * y, y - 2).relu() + x

    torchneuron.set_adaptive_fusion(True, wait_for_compiles=False)
    for step in range(24):
        x = torch.randn([1 << 10, 1 << 17][step % 2] + 8 * (step % 3))
        if step % 8 == 5:
            torchneuron.set_adaptive_fusion(step % 16 < 8, wait_for_compiles=False)
        assert torch.equal(program(x.to(dev)).cpu(), program(x))
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=False)
    x = torch.randn(1 << 17)
    # One call first queues any compile this batch still needs, so that what follows does not
    # depend on how fast the background thread compiles on a loaded machine.
    assert torch.equal(program(x.to(dev)).cpu(), program(x))
    torchneuron.wait_for_fused_compiles()
    torchneuron.reset_metrics()
    for _ in range(3):
        assert torch.equal(program(x.to(dev)).cpu(), program(x))
    assert fusion_metrics()["fused_kernel_runs"] >= 2


def test_the_debug_check_finds_no_difference_in_fused_windows(dev):
    """NEURON_ADAPTIVE_DEBUG reruns each batch on the CPU and compares every recorded result: with
    fusion, results whose stores the fused kernel skipped must not be compared as if written,
    and those it stored must match."""
    def program(d):
        y = d * 2 + 1
        d.mul_(0.5).add_(y)
        return (y * d - 1).relu()

    torchneuron.set_adaptive_debug(True)
    try:
        x = torch.randn(2048)
        for _ in range(4):
            assert torch.equal(program(x.to(dev)).cpu(), program(x.clone()))
        m = fusion_metrics()
    finally:
        torchneuron.set_adaptive_debug(False)
    assert m["debug_batches"] > 0 and m["debug_mismatches"] == 0
    assert m["fused_kernel_runs"] >= 2


FORK_WHILE_A_FUSED_COMPILE_IS_QUEUED = r"""
import json, os, sys, time
import torch, torchneuron

dev = torchneuron.device()
torchneuron.set_adaptive_fusion(True, wait_for_compiles=False)

def program(a):
    kept = []
    # A long chain whose every result is kept (a compile of about a second), on tensors small
    # enough that its pending results stay under the window's byte limit: one window, one batch.
    for i in range(100):
        a = a * 1.25 - 0.5 if i % 2 else torch.where(a > 0, a, a * 0.5)
        kept.append(a)
    return a, kept

x = torch.randn(200)
expected = program(x)[0]
d = x.to(dev)
for _ in range(3):
    program(d)[0].cpu()
queued = torchneuron.metrics()["adaptive"]["fused_compiles_queued"]
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read_end)
    correct = all(torch.equal(program(d)[0].cpu(), expected) for _ in range(2))
    torchneuron.wait_for_fused_compiles()  # the parent's queued compile is not the child's
    torchneuron.reset_metrics()
    correct &= all(torch.equal(program(d)[0].cpu(), expected) for _ in range(2))
    fused = torchneuron.metrics()["adaptive"]["fused_kernel_runs"]
    os.write(write_end, json.dumps({"correct": correct, "fused": fused}).encode())
    sys.exit(0)  # through the interpreter's exit: the child's compile thread is joined
os.close(write_end)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
    time.sleep(0.05)
else:
    if time.monotonic() >= deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print(json.dumps({"hung": True}))
        sys.exit(0)
child = json.loads(os.read(read_end, 4096).decode() or "{}")
torchneuron.wait_for_fused_compiles()
torchneuron.reset_metrics()
parent_correct = torch.equal(program(d)[0].cpu(), expected)
print(json.dumps({"hung": False, "queued_at_fork": queued, "child": child,
                  "parent_correct": parent_correct,
                  "parent_fused": torchneuron.metrics()["adaptive"]["fused_kernel_runs"]}))
"""


def test_a_child_forked_while_a_fused_compile_is_queued_compiles_and_fuses_itself():
    """A DataLoader-style fork() while the background thread has a fused compile queued: the
    child has no compile thread and must not wait for the parent's (wait_for_fused_compiles
    would hang), must not take the compile for running (its window would never fuse), and must
    exit through the interpreter without hanging on a thread it does not have. Both processes
    give the CPU's results and end up running the window fused."""
    env = dict(os.environ, NEURON_ADAPTIVE_EAGER="1", NEURON_ADAPTIVE_THRESHOLD="1",
               NEURON_ADAPTIVE_SYNC="0", NEURON_CACHE="0", NEURON_FALLBACK="silent")
    run = subprocess.run([sys.executable, "-c", FORK_WHILE_A_FUSED_COMPILE_IS_QUEUED], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    result = __import__("json").loads(run.stdout.strip().splitlines()[-1])
    assert not result["hung"], "the child hung (killed after 60 s)"
    assert result["queued_at_fork"] > 0  # the fork really overlapped a queued compile
    assert result["child"]["correct"] and result["child"]["fused"] >= 2
    assert result["parent_correct"] and result["parent_fused"] >= 1


def test_a_batch_cut_by_memory_ends_where_a_step_ended_not_inside_the_next(dev):
    """A fused window's launches run once the memory only the window holds reaches its bound
    (64 MiB here). What reaches it is the program letting go of the previous step's input between
    two calls, so checked after the call that recorded a residual add the batch ended between
    that add and its layer norm, which then ran as two kernels. Checked before each call, every
    step's add and layer norm stay one kernel."""
    shape = (1024, 1024)  # 4 MiB of float32: the bound is reached every few steps
    torch.manual_seed(0)
    x, r = torch.randn(shape), torch.randn(shape)
    w, b = torch.randn(1024), torch.randn(1024)

    def steps(x, r, w, b, n):
        for _ in range(n):
            x = torch.nn.functional.layer_norm(x + r, (1024,), w, b)
        return x

    expected = steps(x, r, w, b, 40)
    d = [t.to(dev) for t in (x, r, w, b)]
    for _ in range(3):  # one window each: hot from the third, then compiled
        steps(*d, 40).cpu()
    torchneuron.reset_metrics()
    got = steps(*d, 40)
    assert_close(got.cpu(), expected, rtol=1e-3, atol=1e-3)  # 40 steps of rounding
    m = fusion_metrics()
    assert m["partitions_computed"] + m["partitions_reused"] >= 3  # the bound cut the window
    assert m["fused_reduction_runs"] == 40, m
