"""An elementwise kernel loads a 0-dim input (a Python number, a 0-dim CPU or device tensor) once,
before its loop (src/fusion/kernel_builder.cpp; tests/fusion/filecheck/scalar_operand_hoisted.mlir
shows the kernel). Each case checks the device against the CPU exactly: every dtype a number
takes (float64 numbers into float32 and bfloat16 ops, integers, booleans), the number as first or
second operand, in-place and out= calls, counts around the vector loop's width and its tail, and
a non-contiguous output; a 0-dim operand inside the written tensor is refused as on the CPU, so
no store of the loop can change the value it read."""

import pytest
import torch

from conftest import assert_same, launched_since, launches_now

g = torch.Generator().manual_seed(0)

COUNTS = [1, 7, 8, 31, 32, 33, 67, 1000, 65536 + 5]


def data(count, dtype):
    if dtype.is_floating_point:
        return torch.randn(count, generator=g).to(dtype) + 3
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    return torch.randint(1, 100, (count,), generator=g, dtype=dtype)


def on_both(dev, fn, *inputs, exact=True):
    """fn over the CPU tensors and over copies on the device (0-dim CPU tensors stay on the CPU, as
    a Python number's wrapped tensor does); asserts no fallback and equal results, or with
    `exact=False` results within assert_close's default tolerance for the dtype."""
    before = launches_now()
    got = fn(*[t.to(dev) if t.dim() > 0 else t for t in inputs])
    assert launched_since(before)["fallback"] == {}
    if exact:
        assert_same(got, fn(*inputs), rtol=0, atol=0, equal_nan=True)
    else:
        assert_same(got, fn(*inputs), equal_nan=True)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_float_ops_with_a_python_number_match_the_cpu(dev, count, dtype):
    x = data(count, dtype)
    on_both(dev, lambda t: t / 1.5, x)
    on_both(dev, lambda t: t * 0.999, x)
    on_both(dev, lambda t: 2.5 - t, x)
    on_both(dev, lambda t: torch.clamp(t, min=2.0), x)
    # Within rounding, as before the number was loaded outside the loop: the device's add with
    # alpha is one fused multiply-add at every element, ATen's only in its vector loop; its pow
    # is the device's vector pow.
    on_both(dev, lambda t: t.add(0.1, alpha=3), x, exact=False)
    on_both(dev, lambda t: torch.pow(t, 2.5), x, exact=False)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_integer_and_boolean_ops_with_a_number_match_the_cpu(dev, count, dtype):
    x = data(count, dtype)
    if dtype == torch.bool:
        on_both(dev, lambda t: t & True, x)
        on_both(dev, lambda t: t | False, x)
        return
    on_both(dev, lambda t: t * 3, x)
    on_both(dev, lambda t: t // 7, x)
    on_both(dev, lambda t: t % 5, x)
    on_both(dev, lambda t: t + 2.5, x)  # promotes to float32
    on_both(dev, lambda t: t > 40, x)


@pytest.mark.parametrize("count", COUNTS)
def test_in_place_and_out_calls_match_the_cpu(dev, count):
    x = data(count, torch.float32)
    on_both(dev, lambda t: t.clone().mul_(0.9).add_(1.25).div_(3.0), x)
    on_both(dev, lambda t: t.clone().sub_(torch.tensor(0.5)), x)  # a 0-dim CPU tensor

    def into_out(t):
        out = torch.empty_like(t)
        torch.mul(t, 1.75, out=out)
        return out
    on_both(dev, into_out, x)


@pytest.mark.parametrize("count", COUNTS)
def test_a_0_dim_device_tensor_operand_matches_the_cpu(dev, count):
    x, s = data(count, torch.float32), torch.tensor(1.3)
    before = launches_now()
    got = x.to(dev) * s.to(dev)
    got_in_place = x.to(dev).div_(s.to(dev))
    assert launched_since(before)["fallback"] == {}
    assert_same(got, x * s, rtol=0, atol=0)
    assert_same(got_in_place, x / s, rtol=0, atol=0)


def test_a_non_contiguous_output_matches_the_cpu(dev):
    x = data(64 * 48, torch.float32).reshape(64, 48)
    on_both(dev, lambda t: t.t().mul(0.5), x)
    on_both(dev, lambda t: t[:, ::3].clone().mul_(2.0), x)

    def strided_out(t):
        out = torch.zeros(48, 64)
        out = out.to(t.device).t()
        torch.div(t, 4.0, out=out)
        return out
    on_both(dev, strided_out, x)


def test_a_0_dim_operand_inside_the_written_tensor_is_refused_as_on_the_cpu(dev):
    for device in ("cpu", dev):
        x = torch.arange(1.0, 40.0).to(device)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            x.mul_(x[3])
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            torch.div(x, x[5], out=x)
