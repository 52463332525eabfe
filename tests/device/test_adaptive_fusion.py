"""Fusion of hot windows (docs/adaptive-eager.md, "Fusion"): the elementwise launches of a hot
window run as one fused kernel whose intermediates stay in registers. Every test compares the
fused result with the CPU or with the same program unfused on the device (bitwise: a fused kernel
rounds each intermediate to its dtype exactly as the eager kernels store it; transcendentals are
compared at sizes that are multiples of 64, where no element falls in a scalar tail whose libm
result may differ from the vector variant's by one ulp), and checks from the
counters that the fused kernel really ran. The hazard tests (views with another geometry, in-place
updates of window inputs, intermediates the program keeps) give wrong values when the partitioner
ignores them."""

import pytest
import torch
import torchneuron

from conftest import assert_same

from torch.testing import assert_close


def gelu(x):
    """GELU (tanh form) as nine primitive ops, as bench's gelu-tanh workloads write it."""
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


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


def run_twice_unfused_and_fused(program, inputs, dev, steps=5):
    """run_unfused_and_fused for a program with one result: both lists of CPU results."""
    unfused, fused, _ = run_unfused_and_fused(program, inputs, dev, steps)
    return [step[0] for step in unfused], [step[0] for step in fused]


def test_a_hot_gelu_chain_runs_as_one_fused_kernel_bitwise_equal_to_unfused(dev):
    x = torch.randn(4096)
    unfused, fused = run_twice_unfused_and_fused(gelu, [x], dev)
    for a, b in zip(unfused, fused):
        assert torch.equal(a, b)
    assert_close(fused[-1], gelu(x))
    m = fusion_metrics()
    assert m["fused_kernel_runs"] >= 2
    assert m["launches_saved"] >= 8 * m["fused_kernel_runs"]


def test_calls_on_large_tensors_are_recorded_and_fused(dev):
    x = torch.randn(1 << 18)  # 1 MiB: run eagerly op by op without fusion
    d = x.to(dev)
    for i in range(5):
        assert_same(gelu(d + i), gelu(x + i))
    m = fusion_metrics()
    assert m["ops_deferred"] > 0 and m["fused_kernel_runs"] >= 2


def test_in_place_updates_of_a_window_input_read_the_old_value_first(dev):
    def program(x):
        y = x * 3 + 1      # reads x before the in-place ops
        x.mul_(2).add_(1)  # written through the same memory
        return y + x       # reads the new x
    x = torch.randn(1000)
    unfused, fused = run_twice_unfused_and_fused(program, [x], dev)
    expected = program(x.clone())
    for a, b in zip(unfused, fused):
        assert torch.equal(a, b)
    assert_close(fused[-1], expected)
    assert fusion_metrics()["fused_kernel_runs"] >= 2


def test_an_in_place_update_is_visible_to_the_program_after_the_window(dev):
    x = torch.randn(512)
    d = x.to(dev)
    for _ in range(5):
        d.mul_(0.5).add_(1.0).tanh_()
        x.mul_(0.5).add_(1.0).tanh_()
        assert_same(d, x)
    assert fusion_metrics()["fused_kernel_runs"] >= 2


def test_a_transposed_read_of_an_earlier_result_is_not_fused_with_it(dev):
    # Both ops iterate over [64, 64] (the column operand keeps two dimensions). a.t() reads a's
    # elements in another order: fused, element (i, j) would read a[j, i] before it is computed.
    def program(x, column):
        a = x * column
        # out=: the output's layout sets the iteration order, so a.t() is read across it.
        return torch.mul(a.t(), column, out=torch.empty_like(x))
    x, column = torch.randn(64, 64), torch.randn(64, 1)
    unfused, fused = run_twice_unfused_and_fused(program, [x, column], dev)
    for a, b in zip(unfused, fused):
        assert torch.equal(a, b)
    assert_close(fused[-1], program(x, column))


def test_a_shifted_read_of_memory_written_earlier_in_the_window_is_not_fused_across(dev):
    # Both ops iterate over 300 elements; r[i] reads a[i + 1], which the first op writes at its
    # iteration i + 1: fused, iteration i would read it before it is written.
    def program(x):
        a = torch.zeros_like(x)
        a[:-1].add_(x[1:])
        return a[1:] * 2
    x = torch.randn(301)
    unfused, fused = run_twice_unfused_and_fused(program, [x], dev)
    for a, b in zip(unfused, fused):
        assert torch.equal(a, b)
    assert_close(fused[-1], program(x))


def test_intermediates_the_program_keeps_are_stored(dev):
    kept = []

    def program(x):
        a = x * 2
        b = torch.exp(a)
        kept.append(b)  # escapes: must be written
        return torch.sigmoid(b - 1)
    x = torch.randn(2048)
    unfused, fused = run_twice_unfused_and_fused(program, [x], dev)
    for a, b in zip(unfused, fused):
        assert torch.equal(a, b)
    for b in kept:
        assert_same(b, torch.exp(x * 2))
    assert fusion_metrics()["fused_kernel_runs"] >= 2


def test_autograd_saved_tensors_are_stored_and_gradients_match(dev):
    x = torch.randn(1024)
    grads = []
    for _ in range(5):
        d = x.to(dev).requires_grad_()
        y = gelu(d).sum()
        y.backward()
        grads.append(d.grad.cpu())
    c = x.clone().requires_grad_()
    gelu(c).sum().backward()
    for g in grads:
        assert_close(g, c.grad, atol=1e-5, rtol=1e-5)
    assert fusion_metrics()["fused_kernel_runs"] >= 1


def test_mixed_dtypes_comparisons_and_where_fuse_exactly(dev):
    def program(x):
        mask = x > 0
        y = torch.where(mask, x, x * 0.1)
        return (y + mask.to(torch.float32)).to(torch.bfloat16) * 3
    x = torch.randn(777)
    unfused, fused = run_twice_unfused_and_fused(program, [x], dev)
    for a, b in zip(unfused, fused):
        assert torch.equal(a, b)
    assert_close(fused[-1], program(x))
    assert fusion_metrics()["fused_kernel_runs"] >= 2


def test_broadcast_operands_fuse_with_the_chain(dev):
    def program(x, b):
        return torch.relu(x * b + b) - 0.5
    x, b = torch.randn(64, 32), torch.randn(32)
    unfused, fused = run_twice_unfused_and_fused(program, [x, b], dev)
    for a, c in zip(unfused, fused):
        assert torch.equal(a, c)
    assert_close(fused[-1], program(x, b))
    assert fusion_metrics()["fused_kernel_runs"] >= 2


def test_a_window_runs_op_by_op_until_its_background_compile_is_ready(dev):
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=False)
    x = torch.randn(3000)
    d = x.to(dev)

    def program(t):  # a chain no other test compiles
        return torch.sigmoid(torch.sin(t * 1.25) - 0.125) * 4

    for _ in range(4):
        assert_same(program(d), program(x))
    torchneuron.wait_for_fused_compiles()
    torchneuron.reset_metrics()
    for _ in range(3):
        assert_same(program(d), program(x))
    assert fusion_metrics()["fused_kernel_runs"] >= 2


def test_set_adaptive_fusion_rejects_non_booleans():
    with pytest.raises(TypeError, match="set_adaptive_fusion expects a bool enabled, got int"):
        torchneuron.set_adaptive_fusion(1)


# A training-style loop in adaptive mode with fused kernels awaited, reporting the kernel cache's
# counters: run twice on one cache directory, the rerun compiles nothing.
RERUN_PROGRAM = r"""
import json, torch, torchneuron
import torch.nn.functional as F
dev = torchneuron.device()
torch.manual_seed(0)
x, r, w, b = torch.randn(4096), torch.randn(64, 64), torch.randn(64), torch.randn(64)
d, total = x.to(dev), torch.zeros(4096).to(dev)
rd, wd, bd = r.to(dev), w.to(dev), b.to(dev)
for _ in range(6):
    y = F.layer_norm(d.view(64, 64) * 2 + rd, (64,), wd, bd)  # with its prologue
    total.add_(0.5 * d * (1 + torch.tanh(0.7978845608 * (d + 0.044715 * d * d * d))))
    total[0].item()
m = torchneuron.metrics()
a = m["adaptive"]
print(json.dumps({"compiles": m["compiles"], "persistent_hits": m["persistent_hits"],
                  "fused_kernel_runs": a["fused_kernel_runs"], "fused_compiles": a["fused_compiles"],
                  "fused_reduction_runs": a["fused_reduction_runs"], "replays": a["replays"]}))
"""


def test_a_rerun_with_the_same_cache_compiles_nothing_and_runs_fused_from_its_first_replay():
    import json
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    directory = tempfile.mkdtemp(prefix="neuron-fusion-cache-")
    try:
        env = dict(os.environ, NEURON_CACHE_DIR=directory, NEURON_CACHE="1",
                   NEURON_ADAPTIVE_EAGER="1")
        runs = []
        # The first run awaits its fused compile; the rerun does not wait for anything: the fused
        # kernel loads from the store when its window first runs hot.
        for sync in ("1", "0"):
            env["NEURON_ADAPTIVE_SYNC"] = sync
            done = subprocess.run([sys.executable, "-c", RERUN_PROGRAM], env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        first, rerun = runs
        # Two fused kernels: the layer norm with its prologue, the GELU chain.
        assert first["fused_compiles"] == 2 and first["compiles"] > 2
        assert rerun["compiles"] == 0, rerun
        assert rerun["persistent_hits"] >= first["compiles"]
        # Every replay ran fused: the fused kernels came from the store when the window turned hot.
        assert rerun["fused_kernel_runs"] == 2 * rerun["replays"]
        assert rerun["fused_reduction_runs"] == rerun["replays"] >= 3
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_batch_shaped_like_an_earlier_one_but_overlapping_otherwise_is_partitioned_anew(dev):
    """Partitions are remembered by the batch's structure (src/tracer/partition_memo.h). Two
    in-place updates of views of one buffer: disjoint views fuse; views shifted by one element
    must not (the second update reads what the first wrote at another index). Both windows have
    one signature (the same ops on the same window input), so only the memo's fingerprint of
    offsets tells them apart: reusing the disjoint batch's partition gives wrong values."""
    def program(buf, shift):
        buf[0:64].mul_(2)
        buf[shift:shift + 64].add_(buf[shift:shift + 64])
        return buf

    base = torch.randn(128)
    for shift in (64, 1, 64, 1):
        for _ in range(4):
            assert_same(program(base.to(dev), shift), program(base.clone(), shift))
    m = fusion_metrics()
    assert m["fused_kernel_runs"] >= 2  # the disjoint views ran fused
    assert m["partitions_computed"] >= 2 and m["partitions_reused"] >= 4
