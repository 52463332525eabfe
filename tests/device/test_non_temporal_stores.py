"""Elementwise kernels whose output holds at least 32 MiB store it with non-temporal vector stores
at 64-byte boundaries, between a head and a tail that the kernel's ordinary loop writes
(src/fusion/non_temporal_stores.h). Each case is large enough to take that path and checks the
device against the CPU exactly: outputs at every offset from a cache line (so heads of every
length), counts that leave tails, in-place updates, every element size the stores take (1, 4 and
8 bytes), selects, fills, conversions, fused chains in adaptive mode, and launches cut into parts
for two threads. The elements around an out= view must stay untouched."""

import pytest
import torch
import torchneuron

from conftest import assert_same, launched_since, launches_now

# Past the 32 MiB threshold as float32, with a tail of 37 elements after the last full line.
N = (32 << 20) // 4 + 16 * 1000 + 37

g = torch.Generator().manual_seed(0)


def data(count, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(count, generator=g, dtype=dtype)
    return torch.randint(-100, 100, (count,), generator=g, dtype=dtype)


def on_both(dev, fn, *inputs):
    """fn over the CPU tensors and over copies on the device; asserts the results equal and that
    the device ran no fallback."""
    before = launches_now()
    got = fn(*[t.to(dev) for t in inputs])
    torchneuron.synchronize()
    assert launched_since(before)["fallback"] == {}
    assert_same(got, fn(*inputs), rtol=0, atol=0)


def test_add_of_large_tensors_matches_the_cpu(dev):
    on_both(dev, torch.add, data(N), data(N))


@pytest.mark.parametrize("offset", [0, 1, 3, 5, 15, 16, 17])
def test_out_views_at_every_offset_write_only_their_elements(dev, offset):
    a, b = data(N), data(N)
    sentinel = -12345.0
    buffer = torch.full((N + 64,), sentinel).to(dev)
    out = buffer[offset:offset + N]
    torch.add(a.to(dev), b.to(dev), alpha=2.0, out=out)
    assert_same(out, torch.add(a, b, alpha=2.0), rtol=0, atol=0)
    got = buffer.cpu()
    assert bool((got[:offset] == sentinel).all()) and bool((got[offset + N:] == sentinel).all())


def test_in_place_update_reads_each_element_before_writing_it(dev):
    a, b = data(N), data(N)
    x = a.to(dev)
    x.mul_(0.5).add_(b.to(dev))
    assert_same(x, a.mul(0.5).add(b), rtol=0, atol=0)


@pytest.mark.parametrize("dtype,count", [(torch.float64, N // 2 + 11), (torch.int64, N // 2 + 3),
                                         (torch.int32, N), (torch.int8, 4 * N + 5)])
def test_every_element_size_matches_the_cpu(dev, dtype, count):
    on_both(dev, lambda x, y: x * 3 + y, data(count, dtype), data(count, dtype))


def test_selects_and_comparisons_match_the_cpu(dev):
    a, b = data(N), data(N)
    on_both(dev, torch.relu, a)
    on_both(dev, lambda x, y: torch.where(x > y, x, y * 2), a, b)
    on_both(dev, lambda x, y: torch.ops.aten.threshold_backward(x, y, 0.25), a, b)
    on_both(dev, lambda x: x.clamp(-0.5, 0.5), a)


def test_fills_and_conversions_match_the_cpu(dev):
    x = torch.empty(N).to(dev)
    x.fill_(3.25)
    assert bool((x.cpu() == 3.25).all())
    x.zero_()
    assert bool((x.cpu() == 0).all())
    on_both(dev, lambda t: t.to(torch.float64), data(N // 2 + 7))
    on_both(dev, lambda t: t.to(torch.int64), data(N // 2 + 7) * 100)


def test_launches_cut_for_two_threads_match_the_cpu(dev):
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        on_both(dev, torch.add, data(N), data(N))
        on_both(dev, lambda x, y: (x - y) * 0.5, data(N + 1), data(N + 1))
    finally:
        torch.set_num_threads(saved)


def test_fused_chains_in_adaptive_mode_match_the_cpu(dev):
    a, b, c = data(N), data(N), data(N)
    expected = (a * 2 + b) * c - a
    da, db, dc = a.to(dev), b.to(dev), c.to(dev)
    with torchneuron.adaptive(True):
        for _ in range(4):  # cold, hot, then replayed as fused kernels
            got = (da * 2 + db) * dc - da
            assert_same(got, expected, rtol=0, atol=0)


def test_zero_dim_operands_are_read_once_for_every_element(dev):
    on_both(dev, lambda x, s: x * s - s, data(N), torch.tensor(2.5))
    on_both(dev, lambda x, s: torch.maximum(x, s), data(N), torch.tensor(0.125))


@pytest.mark.parametrize("dtype", [torch.int16, torch.int8, torch.uint8])
def test_out_of_range_float_conversions_wrap_as_on_the_cpu(dev, dtype):
    """A conversion to 8 or 16 bits goes through 32 (ATen's static_cast): 40000.0 to int16 is
    -25536, NaN and inf are 0. Found by review: the head loop, vectorized 4 wide, saturated."""
    count = (32 << 20) // torch.empty(0, dtype=dtype).element_size() + 5
    x = torch.tensor([40000.0, 32768.0, -40000.0, float("nan"), float("inf"), -1.0, 300.0])
    x = x.repeat(count // 7 + 1)[:count]
    buffer = torch.zeros(count + 64, dtype=dtype).to(dev)
    out = buffer[1:1 + count]  # a head of up to 63 elements before the first line
    out.copy_(x.to(dev))
    assert_same(out, x.to(dtype), rtol=0, atol=0)
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_same(x.to(dev).to(dtype), x.to(dtype), rtol=0, atol=0)
    finally:
        torch.set_num_threads(saved)
