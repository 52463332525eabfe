"""Unbacked results (docs/adaptive-eager.md, "Intermediates that are never allocated"): a call
recorded into a hot window that runs fused gets results with an address but no memory; when the
window runs, those that anything reads get memory and the rest never do. Each test checks values
against the CPU and, from the allocator's and the tracer's counters, that memory was (or was not)
allocated: a result that is read but left without memory would fault or read another tensor's
bytes, one given memory it did not need would show in the counters."""

import pytest
import torch
import torchneuron

from conftest import assert_child_check_passes, assert_same


def gelu(x):
    """GELU (tanh form) as nine primitive ops, as bench's gelu-tanh workloads write it."""
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def adaptive_counters():
    return torchneuron.metrics()["adaptive"]


@pytest.fixture(autouse=True)
def fused_adaptive_mode():
    if not torchneuron.metrics()["adaptive"]["unbacked_results_available"]:
        pytest.skip("no unbacked address range under an address-space limit (ulimit -v)")
    """Adaptive mode with fusion, compiles awaited (NEURON_ADAPTIVE_SYNC), fresh counters."""
    previous = torchneuron.adaptive_enabled()
    torchneuron.set_adaptive(True)
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
    torchneuron.reset_metrics()
    yield
    torchneuron.set_adaptive(previous)


def run_hot(step, warmup=6):
    """Runs `step` until its window is hot and fused (synchronizing after each call), keeping
    its result until the next call as a program would."""
    result = None
    for _ in range(warmup):
        result = step()  # noqa: F841 (kept alive: a window whose every result is dead is skipped)
        torchneuron.synchronize()


def assert_hot_runs_match_the_cpu(step, x, dev):
    """Runs `step` on a device copy of `x` until hot and fused, then once more: equal to the
    CPU's result."""
    d = x.to(dev)
    with torch.no_grad():
        run_hot(lambda: step(d))
        got = step(d)
        torchneuron.synchronize()
    assert_same(got, step(x))


def test_a_hot_no_grad_gelu_chain_allocates_only_its_output(dev):
    x = torch.randn(1 << 14)
    d = x.to(dev)
    with torch.no_grad():
        run_hot(lambda: gelu(d))
        before = torchneuron.memory_stats()["allocations"]
        made_before = adaptive_counters()["unbacked_results"]
        for _ in range(5):
            y = gelu(d)
            torchneuron.synchronize()
        allocations = torchneuron.memory_stats()["allocations"] - before
        made = adaptive_counters()["unbacked_results"] - made_before
    assert_same(y, gelu(x))
    assert allocations == 5, f"{allocations} allocations for 5 runs of a fused chain"
    assert made == 5 * 9  # every result of the nine ops was made unbacked
    counters = adaptive_counters()
    assert counters["unbacked_results_live"] == 0
    assert counters["fused_kernel_runs"] >= 5


def allocations_of_hot_runs(step, runs=5):
    """The allocations `runs` hot runs of `step` make (synchronizing after each), and the
    last run's result."""
    run_hot(step)
    before = torchneuron.memory_stats()["allocations"]
    for _ in range(runs):
        result = step()
        torchneuron.synchronize()
    return torchneuron.memory_stats()["allocations"] - before, result


def test_a_hot_no_grad_softmax_with_its_scale_and_shift_allocates_only_its_output(dev):
    # The softmax's output is dead (only its epilogue reads it): no memory, no store; its exps
    # wait for the write pass in the result's memory.
    x, s, b = torch.randn(64, 256), torch.randn(256), torch.randn(256)
    d = [t.to(dev) for t in (x, s, b)]
    with torch.no_grad():
        allocations, got = allocations_of_hot_runs(lambda: torch.softmax(d[0], -1) * d[1] + d[2])
    assert_same(got, torch.softmax(x, -1) * s + b)
    assert allocations == 5, f"{allocations} allocations for 5 runs of a fused softmax"
    assert adaptive_counters()["fused_reduction_runs"] >= 5


def test_a_hot_no_grad_modulated_layer_norm_allocates_only_its_output(dev):
    # adaLN's layer_norm(x) * scale + shift: the layer norm's output, means and inverse standard
    # deviations are all dead.
    inputs = [torch.randn(4, 16, 128), torch.randn(128), torch.randn(128), torch.randn(4, 1, 128),
              torch.randn(4, 1, 128)]
    d = [t.to(dev) for t in inputs]

    def modulated(x, w, b, scale, shift):
        return torch.nn.functional.layer_norm(x, (128,), w, b) * scale + shift

    with torch.no_grad():
        allocations, got = allocations_of_hot_runs(lambda: modulated(*d))
    assert_same(got, modulated(*inputs))
    assert allocations == 5, f"{allocations} allocations for 5 runs of a fused layer norm"


def test_a_softmax_saved_for_backward_is_written_and_its_gradient_matches(dev):
    b, weights = torch.randn(32), torch.arange(32.0)
    d_b, d_weights = b.to(dev), weights.to(dev)

    def step(x, b, weights):
        x = x.requires_grad_()
        y = torch.softmax(x, -1) * 3 + b  # autograd keeps the softmax's output: it escapes
        (y * weights).sum().backward()
        return y.detach(), x.grad

    # New values every step: a saved output left unwritten would give wrong gradients even
    # where reused memory still held an earlier step's.
    for _ in range(8):
        x = torch.randn(8, 32)
        got = step(x.to(dev), d_b, d_weights)
        for g, want in zip(got, step(x, b, weights)):
            assert_same(g, want)
    assert adaptive_counters()["fused_reduction_runs"] >= 3


def test_intermediates_the_program_keeps_get_memory_and_their_values(dev):
    x = torch.randn(4096)
    d = x.to(dev)
    kept = []

    def step():
        cube = d * d * d
        kept.append(cube)
        return torch.tanh(cube + d) * 0.5

    with torch.no_grad():
        run_hot(step)
        kept.clear()
        out = step()
        torchneuron.synchronize()
    assert_same(kept[0], x * x * x)
    assert_same(out, torch.tanh(x * x * x + x) * 0.5)
    assert kept[0].data_ptr() != 0 and out.data_ptr() != 0
    assert adaptive_counters()["unbacked_results_backed"] >= 2


def test_tensors_saved_for_backward_get_memory_and_gradients_match(dev):
    x = torch.randn(2048)
    d = x.to(dev).requires_grad_()
    c = x.clone().requires_grad_()
    for _ in range(6):
        d.grad = None
        gelu(d).sum().backward()
        torchneuron.synchronize()
    gelu(c).sum().backward()
    assert_same(d.grad, c.grad, rtol=1e-5, atol=1e-6)
    counters = adaptive_counters()
    assert counters["unbacked_results"] > 0 and counters["unbacked_results_backed"] > 0


def test_a_strided_view_of_an_intermediate_read_later_gets_memory(dev):
    def step(t):
        doubled = t * 2 + 1
        return doubled.t() * 3  # another geometry: a group of its own, reading stored memory

    assert_hot_runs_match_the_cpu(step, torch.randn(64, 64), dev)


def test_in_place_updates_of_an_intermediate_inside_the_window(dev):
    def step(t):
        scratch = t * 2
        scratch.add_(1).mul_(t)
        return scratch.tanh()

    assert_hot_runs_match_the_cpu(step, torch.randn(1000), dev)


def test_a_kept_result_can_be_resized_and_read_after_its_window(dev):
    x = torch.randn(256)
    d = x.to(dev)
    with torch.no_grad():
        run_hot(lambda: gelu(d))
        y = gelu(d)
        y.resize_(512)  # a sync point: the window runs first, then the storage grows
        assert_same(y[:256], gelu(x))


def test_the_pointers_handed_out_after_a_sync_are_real_memory(dev):
    import numpy
    x = torch.randn(128)
    d = x.to(dev)
    with torch.no_grad():
        run_hot(lambda: gelu(d))
        y = gelu(d)
        torchneuron.synchronize()
    # The host's view of the result shares its memory: it reads the window's values.
    host = numpy.asarray(y.cpu())
    assert numpy.allclose(host, gelu(x).numpy(), rtol=1e-5, atol=1e-6)
    assert y.storage().data_ptr() == y.data_ptr()


def test_an_error_in_a_window_leaves_the_results_the_program_holds_usable(dev):
    a = torch.randn(8, 4)
    da = a.to(dev)
    good = torch.randn(4, 3).to(dev)
    with torch.no_grad():
        run_hot(lambda: (da * 2 + 1) @ good)
        kept = da * 2 + 1
        with pytest.raises(RuntimeError):
            kept @ torch.randn(5, 3).to(dev)  # the shape error raises at the call
        torchneuron.synchronize()
        assert_same(kept, a * 2 + 1)


def test_a_result_that_only_launches_run_as_recorded_use_gets_memory(dev):
    def step(t):
        # A lone elementwise launch and a reduction over a transposed view of its result: no
        # group, no prologue fusion, and nothing outside the window holds the product.
        return (t * 2).t().sum(dim=1) + 1

    backed = adaptive_counters()["unbacked_results_backed"]
    assert_hot_runs_match_the_cpu(step, torch.randn(32, 48), dev)
    assert adaptive_counters()["unbacked_results_backed"] > backed


def test_turned_off_every_result_is_allocated_and_the_values_are_the_same(dev):
    x = torch.randn(1 << 12)
    d = x.to(dev)
    assert torchneuron.adaptive_unbacked()
    torchneuron.set_adaptive_unbacked(False)
    try:
        assert not torchneuron.adaptive_unbacked()
        with torch.no_grad():
            run_hot(lambda: gelu(d))
            made = adaptive_counters()["unbacked_results"]
            before = torchneuron.memory_stats()["allocations"]
            y = gelu(d)
            torchneuron.synchronize()
            assert torchneuron.memory_stats()["allocations"] - before == 9
            assert adaptive_counters()["unbacked_results"] == made
        assert_same(y, gelu(x))
    finally:
        torchneuron.set_adaptive_unbacked(True)
    with pytest.raises(TypeError, match="set_adaptive_unbacked expects a bool, got int"):
        torchneuron.set_adaptive_unbacked(1)


def test_a_window_whose_results_are_all_dropped_runs_nothing_and_allocates_nothing(dev):
    # A loop that computes and drops its result: the hot window's every launch is dead. It
    # stays one window per iteration (not cut by the byte limit into ever new signatures) and,
    # recorded unbacked, allocates nothing. Its own chain of nine ops: a window other tests made
    # hot would bring its fusion status along.
    def dropped(t):
        return torch.sigmoid((t * 3 - 1) * t + 2).mul(0.25).add(t).neg().exp()

    d = torch.randn(1 << 14).to(dev)  # 64 KiB a result: nine exceed the 256 KiB byte limit
    with torch.no_grad():
        for _ in range(5):
            dropped(d)
            torchneuron.synchronize()
        before = adaptive_counters()
        allocations = torchneuron.memory_stats()["allocations"]
        for _ in range(4):
            dropped(d)
            torchneuron.synchronize()
        after = adaptive_counters()
        allocations = torchneuron.memory_stats()["allocations"] - allocations
    assert after["windows"] - before["windows"] == 4
    assert after["syncs"]["byte_limit"] == before["syncs"]["byte_limit"]
    assert after["dead_launches"] - before["dead_launches"] == 4 * 9
    assert after["signatures_hot"] == before["signatures_hot"]  # no new windows became hot
    assert allocations == 0


def test_a_saved_pending_result_and_its_view_still_share_one_storage_after_loading(dev):
    import io
    x = torch.randn(1 << 12)
    d = x.to(dev)

    def step(t):
        return torch.tanh(t * 2 + 1) * 3

    with torch.no_grad():
        run_hot(lambda: step(d))
        y = step(d)  # pending: its memory and address come when the window runs
        buffer = io.BytesIO()
        torch.save([y, y[100:]], buffer)
    whole, view = torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu")
    assert view.storage().data_ptr() == whole.storage().data_ptr()
    assert view.storage_offset() == 100
    torch.testing.assert_close(whole, step(x))


def test_fork_with_unbacked_results_pending_leaves_parent_and_child_correct(dev):
    x = torch.randn(1 << 12)
    d = x.to(dev)
    with torch.no_grad():
        run_hot(lambda: gelu(d))
        made = adaptive_counters()["unbacked_results"]
        pending = gelu(d)
        assert adaptive_counters()["unbacked_results"] > made  # recorded unbacked, not run yet
        assert_child_check_passes(
            lambda: torch.allclose(pending.cpu(), gelu(x), atol=1e-6) and torch.allclose(
                gelu(d + 1).cpu(), gelu(x + 1), atol=1e-6))
        assert_same(pending, gelu(x))
