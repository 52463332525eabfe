"""Eager mode's call cache (src/device/eager_call_cache.h): a compiled call that recurs with the
same argument metadata and numbers replays its captured plans without planning. Each case below
gives a call whose replay of an earlier capture would be wrong (a number baked into the plan, a
broadcast, an overlap ATen refuses, the default dtype, an out= resize) and checks the result
against the CPU or ATen's error, after the cache has captured and replayed the earlier call."""
import textwrap

import pytest
import torch
import torch.nn.functional as F
import torchneuron
from conftest import last_lines_under_settings

dev = torchneuron.device()


def cache_stats():
    return torchneuron.metrics()["eager_call_cache"]


def repeat(fn, times=3):
    """Runs fn() `times` times (a capture on the second, replays after) and returns the last."""
    result = None
    for _ in range(times):
        result = fn()
    return result


def test_a_recurring_call_is_replayed_with_its_result_equal_to_the_cpu():
    torchneuron.reset_metrics()
    x_cpu, y_cpu = torch.randn(32), torch.randn(32)
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    for _ in range(5):
        torch.testing.assert_close((x + y).cpu(), x_cpu + y_cpu, rtol=0, atol=0)
        torch.testing.assert_close(torch.tanh(x).cpu(), torch.tanh(x_cpu))
        torch.testing.assert_close(x.sum().cpu(), x_cpu.sum())
    stats = cache_stats()
    assert stats["enabled"]
    # Each op's first call here is planned and its second captured, unless an earlier test of this
    # process (the cache is per thread, and backward passes run on this thread too) captured it.
    assert stats["replays"] >= 12 - stats["captures"] and stats["captures"] <= 3, stats
    assert torchneuron.metrics()["launches"]["compiled"] == 15  # replays count as launches


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_reduced_loss_is_captured_and_replayed_with_new_inputs(reduction):
    """The loss's 0-dim result is allocated by its plan, so the call is captured (a result made
    outside the plan would leave it uncapturable, planned at every step of a training loop)."""
    torchneuron.reset_metrics()
    for _ in range(5):
        x, y = torch.randn(32, 3), torch.randn(32, 3)
        got = F.mse_loss(x.to(dev), y.to(dev), reduction=reduction)
        assert got.shape == () and got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), F.mse_loss(x, y, reduction=reduction))
    stats = cache_stats()
    assert stats["captures"] == 1 and stats["uncapturable"] == 0 and stats["replays"] == 3, stats


NUMBER_OPERAND_CALLS = {
    "pow": lambda x, m, v: x.pow(v),
    "clamp_min": lambda x, m, v: x.clamp(min=v),
    "clamp_both": lambda x, m, v: x.clamp(min=-v, max=v),
    "masked_fill": lambda x, m, v: x.masked_fill(m, v),
    "fill_": lambda x, m, v: x.clone().fill_(v),
    "rsub": lambda x, m, v: torch.rsub(x, v),
}


@pytest.mark.parametrize("name", NUMBER_OPERAND_CALLS)
def test_calls_with_number_operands_are_captured_and_each_number_is_its_own_call(name):
    """A number operand (pow's exponent, clamp's bound, a fill value) becomes a CPU number the
    plan reads: the capture keeps it, and a call with another number (or an int for a float) is
    another call, never a replay of the first's."""
    call = NUMBER_OPERAND_CALLS[name]
    x_cpu = torch.randn(64, 8)
    m_cpu = x_cpu > 0.3
    x, m = x_cpu.to(dev), m_cpu.to(dev)
    torchneuron.reset_metrics()
    for value in (2, 2.0, 0.5, 3, 0.5, 2):
        for _ in range(3):
            torch.testing.assert_close(call(x, m, value).cpu(), call(x_cpu, m_cpu, value),
                                       rtol=0, atol=0, equal_nan=True)
    stats = cache_stats()
    assert stats["uncapturable"] == 0 and stats["captures"] >= 4 and stats["replays"] >= 10, stats


def test_replays_read_the_new_arguments_memory():
    x, y = torch.randn(16).to(dev), torch.randn(16).to(dev)
    repeat(lambda: x * y)
    x2, y2 = torch.randn(16), torch.randn(16)
    torch.testing.assert_close((x2.to(dev) * y2.to(dev)).cpu(), x2 * y2, rtol=0, atol=0)
    x.copy_(x2)
    torch.testing.assert_close((x * y).cpu(), x2 * y.cpu(), rtol=0, atol=0)


def test_a_changed_number_is_not_replayed_from_the_old_one():
    # alpha is a run-time word of the plan: the capture holds the old value.
    x_cpu, y_cpu = torch.randn(8), torch.randn(8)
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    repeat(lambda: torch.add(x, y, alpha=2))
    torch.testing.assert_close(torch.add(x, y, alpha=3).cpu(), torch.add(x_cpu, y_cpu, alpha=3))
    repeat(lambda: torch.clamp(x, -0.5, 0.5))
    torch.testing.assert_close(torch.clamp(x, -0.1, 0.2).cpu(), torch.clamp(x_cpu, -0.1, 0.2))


def test_a_changed_broadcast_is_not_replayed():
    a_cpu = torch.randn(4, 4)
    a = a_cpu.to(dev)
    col, row = torch.randn(4, 1), torch.randn(1, 4)
    repeat(lambda: a + col.to(dev))
    torch.testing.assert_close((a + row.to(dev)).cpu(), a_cpu + row, rtol=0, atol=0)
    torch.testing.assert_close((a + col.to(dev)).cpu(), a_cpu + col, rtol=0, atol=0)


def test_a_strided_view_is_not_replayed_as_a_contiguous_one():
    base_cpu = torch.randn(6, 6)
    base = base_cpu.to(dev)
    contiguous = torch.randn(6, 6).to(dev)
    repeat(lambda: torch.exp(contiguous))
    torch.testing.assert_close(torch.exp(base.t()).cpu(), torch.exp(base_cpu.t()))
    torch.testing.assert_close(torch.exp(base[1:, 2:]).cpu(), torch.exp(base_cpu[1:, 2:]))


def test_an_overlap_aten_refuses_is_refused_after_a_replay_of_the_same_geometry():
    a = torch.arange(8.0).to(dev)
    c = torch.arange(8.0).to(dev)
    repeat(lambda: a[1:].add_(c[:-1]))  # the same sizes, strides and offsets as below
    with pytest.raises(RuntimeError, match="single memory location"):
        a[1:].add_(a[:-1])


def test_an_in_place_op_on_its_own_input_follows_the_cpu():
    a_cpu = torch.randn(10)
    b_cpu = torch.randn(10)
    a, b = a_cpu.to(dev), b_cpu.to(dev)
    for _ in range(3):
        a.mul_(b)
        a_cpu.mul_(b_cpu)
    for _ in range(3):
        a.mul_(a)  # the same geometry, now aliased with the output
        a_cpu.mul_(a_cpu)
    torch.testing.assert_close(a.cpu(), a_cpu, rtol=0, atol=0)


def test_the_default_dtype_is_part_of_the_call():
    i, j = torch.arange(1, 9).to(dev), torch.arange(2, 10).to(dev)
    assert repeat(lambda: torch.div(i, j)).dtype == torch.float32
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        result = torch.div(i, j)
    finally:
        torch.set_default_dtype(saved)
    assert result.dtype == torch.float64
    torch.testing.assert_close(result.cpu(), torch.arange(1, 9) / torch.arange(2, 10).double())


def test_an_out_argument_of_another_size_is_resized_again():
    x_cpu, y_cpu = torch.randn(5), torch.randn(5)
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    for _ in range(3):
        out = torch.empty(0, device=dev)
        torch.add(x, y, out=out)  # resized from 0 elements each time
        assert out.shape == (5,)
    out = torch.empty(5, device=dev)
    torch.add(x, y, out=out)
    torch.testing.assert_close(out.cpu(), x_cpu + y_cpu, rtol=0, atol=0)


def test_an_error_in_a_call_leaves_the_cache_working():
    x, y = torch.randn(4).to(dev), torch.randn(5).to(dev)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="size of tensor a"):
            x + y
    x_cpu = torch.randn(4)
    torch.testing.assert_close(repeat(lambda: x_cpu.to(dev) * 2).cpu(), x_cpu * 2)


def test_a_call_that_makes_calls_of_its_own_is_not_captured():
    # layer_norm without a weight fills its ones with a call of its own inside the call: a
    # replay of its plans alone could not redo that call.
    torchneuron.reset_metrics()
    x_cpu = torch.randn(3, 8)
    x = x_cpu.to(dev)
    result = repeat(lambda: F.layer_norm(x, (8,)), times=4)
    torch.testing.assert_close(result.cpu(), F.layer_norm(x_cpu, (8,)))
    assert cache_stats()["uncapturable"] >= 1, cache_stats()


def test_threads_keep_their_own_captures():
    import threading
    errors = []

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            x_cpu = torch.randn(64, generator=g)
            x = x_cpu.to(dev)
            for _ in range(200):
                torch.testing.assert_close((x * x + 1).cpu(), x_cpu * x_cpu + 1, rtol=0, atol=0)
        except Exception as error:  # reported below, on the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_training_matches_with_the_cache_off():
    """A few SGD steps of a small model give the same parameters bit for bit with
    NEURON_EAGER_CALL_CACHE=0, which turns the cache off (no captures, no replays)."""
    program = textwrap.dedent("""
        import json, torch, torchneuron
        torch.manual_seed(0)
        dev = torchneuron.device()
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 4)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(32, 8).to(dev), torch.randint(0, 4, (32,)).to(dev)
        for _ in range(6):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        print(json.dumps({"params": [p.cpu().flatten().tolist() for p in model.parameters()],
                          "cache": torchneuron.metrics()["eager_call_cache"]}))
    """)
    import json
    runs = {setting: json.loads(line) for setting, line in
            last_lines_under_settings(program, "NEURON_EAGER_CALL_CACHE", ("1", "0")).items()}
    assert runs["1"]["params"] == runs["0"]["params"]
    assert runs["1"]["cache"]["replays"] > 0
    assert runs["0"]["cache"] == {"enabled": False, "replays": 0, "captures": 0,
                                  "uncapturable": 0}
