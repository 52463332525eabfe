"""max_pool2d_with_indices as a compiled kernel (src/device/compiled_pooling.cpp): the maxima and
their indices exactly as the CPU's, ties, NaN and -inf included, over the window shapes it covers,
padded and ceil_mode windows included; the calls it declines (other layouts and dtypes, padded
float32 planes of 2^24 elements, ATen's errors) keep the library route, with the CPU's results and
errors and no fallback."""

import copy

import pytest
import torch
import torch.nn.functional as F
import torchneuron

from conftest import assert_same, launched_since, launches_now


def pool_on_both(x, dev, *args, **kwargs):
    """Max-pools `x` on the CPU and on the device; asserts equal maxima (NaN where the CPU has
    NaN) and equal indices; returns the device's launches by kind."""
    before = launches_now()
    values, indices = F.max_pool2d(x.to(dev), *args, return_indices=True, **kwargs)
    torchneuron.synchronize()
    launched = launched_since(before)
    cpu_values, cpu_indices = F.max_pool2d(x, *args, return_indices=True, **kwargs)
    assert values.shape == cpu_values.shape and values.stride() == cpu_values.stride()
    assert_same(values, cpu_values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(indices.cpu(), cpu_indices)
    assert launched["fallback"] == {}
    return launched


def compiled(launched):
    return launched["compiled"].get("aten::max_pool2d_with_indices", 0)


g = torch.Generator().manual_seed(0)

WINDOWS = {
    "2x2": ((3, 4, 8, 8), (2,), {}),
    "rows_past_a_vector": ((2, 3, 24, 24), (2,), {}),  # 12 windows a row: vector and remainder
    "wide_rows": ((1, 2, 6, 70), (2,), {}),
    "3x3_stride_2": ((2, 3, 9, 7), (3, 2), {}),
    "overlapping": ((2, 2, 7, 9), ((3, 2), (1, 2)), {}),
    "dilated": ((3, 9, 7), ((3, 2), (1, 2), 0, (2, 1)), {}),
    "1x1": ((2, 3, 5, 4), (1,), {}),
    "global_7x7": ((4, 96, 7, 7), (7,), {}),  # many planes: the remainder's rounding
    "ceil_mode_fits": ((2, 3, 10, 10), (2,), {"ceil_mode": True}),
    "three_dims": ((5, 6, 6), (2, 3), {}),
    # Padded: the input copied into a plane padded with -inf, a plane of places beside it.
    "padded_3x3_stride_2": ((2, 3, 7, 6), (3, 2, 1), {}),
    "resnet_stem": ((2, 64, 56, 56), (3, 2, 1), {}),
    "padded_uneven": ((2, 3, 10, 11), ((3, 5), (2, 3), (1, 2), (2, 1)), {}),
    "ceil_mode_past_the_input": ((2, 3, 9, 9), (2,), {"ceil_mode": True}),
    "padded_ceil_mode": ((3, 10, 11), ((3, 5), (2, 3), (1, 2), (2, 1)), {"ceil_mode": True}),
    "padded_dilated_step_1": ((2, 3, 9, 30), (3, 1, 1, 2), {}),  # windows interleave in a row
}


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_windows_run_compiled_with_the_cpus_maxima_and_indices(dev, name, dtype):
    shape, args, kwargs = WINDOWS[name]
    x = torch.randn(*shape, generator=g, dtype=dtype)
    assert compiled(pool_on_both(x, dev, *args, **kwargs)) == 1


def test_equal_maxima_give_the_first_one_and_zeros_of_either_sign_tie(dev):
    x = torch.zeros(2, 3, 6, 6)
    x[0, 0, 1, 1] = x[0, 0, 0, 1] = 5  # the first of two equal maxima in its window
    x[1] = torch.randint(0, 2, (3, 6, 6), generator=g).float()
    x[0, 1] = -0.0
    x[0, 1, 0, 1] = 0.0
    assert compiled(pool_on_both(x, dev, 2)) == 1


def test_nan_wins_and_the_last_nan_of_a_window_is_its_index(dev):
    x = torch.randn(2, 2, 6, 6, generator=g)
    x[0, 0, 0, 0] = x[0, 0, 1, 1] = float("nan")  # two NaN in one window: the CPU picks the last
    x[0, 1, 2, 3] = float("nan")
    x[1, 0, 5, 5] = float("nan")
    assert compiled(pool_on_both(x, dev, 2)) == 1
    assert compiled(pool_on_both(x, dev, 3, 1)) == 1
    assert compiled(pool_on_both(x, dev, 3, 2, 1)) == 1  # padded


def test_windows_of_minus_infinity_give_their_first_element(dev):
    x = torch.full((2, 3, 6, 6), float("-inf"))
    x[1, 2, 4, 5] = 1
    assert compiled(pool_on_both(x, dev, 2)) == 1
    assert compiled(pool_on_both(x, dev, (3, 2), (1, 2), 0, (1, 2))) == 1
    # Padded: the first element inside the input, not the padding's -inf before it.
    assert compiled(pool_on_both(x, dev, 3, 2, 1)) == 1
    assert compiled(pool_on_both(x, dev, 3, 2, 1, 2)) == 1
    assert compiled(pool_on_both(x, dev, 2, ceil_mode=True, stride=4)) == 1


DECLINED = {
    # Places from 2^24 on are not exact in float32: a padded plane that large is declined.
    "padded_plane_of_2^24": (lambda: torch.randn(1, 1, 4096, 4096, generator=g), (3, 2, 1), {}),
    # Windows with no element inside the input (padding 1, dilation 5): ATen gives them a place
    # outside the plane.
    "windows_all_padding": (lambda: torch.tensor([[[[1., 2, 3, 4, 5]] * 4]]), (2, 1, 1, 5), {}),
    "window_all_padding_3d": (lambda: torch.tensor([[[7.]]]), ((2, 1), 1, (1, 0), (2, 1)), {}),
    # Contiguous, but ATen sees channels-last strides (size-1 channels) and keeps that format.
    "ambiguous_channels_last": (lambda: torch.empty(2, 1, 4, 4, memory_format=torch.channels_last)
                                .copy_(torch.randn(2, 1, 4, 4, generator=g)), (2,), {}),
    # One padded window a plane: declined before the padded copy is made.
    "one_padded_window": (lambda: torch.randn(2, 3, 2, 2, generator=g), (3, 2, 1), {}),
    "channels_last": (lambda: torch.randn(2, 3, 8, 8, generator=g).to(
        memory_format=torch.channels_last), (2,), {}),
    "transposed": (lambda: torch.randn(2, 3, 8, 6, generator=g).transpose(2, 3), (2,), {}),
    "bfloat16": (lambda: torch.randn(2, 3, 8, 8, generator=g).bfloat16(), (2,), {}),
    "empty_batch": (lambda: torch.randn(0, 3, 8, 8), (2,), {}),
}


@pytest.mark.parametrize("name", DECLINED)
def test_declined_calls_keep_the_library_route(dev, name):
    make, args, kwargs = DECLINED[name]
    launched = pool_on_both(make(), dev, *args, **kwargs)
    assert compiled(launched) == 0
    assert launched["library"].get("aten::max_pool2d_with_indices", 0) == 1


BAD = {
    "zero_kernel": ((2, 3, 8, 8), (0,), {}),
    "zero_stride": ((2, 3, 8, 8), (2, 0), {}),
    "window_larger_than_input": ((2, 3, 3, 3), (4,), {}),
    "padding_over_half_the_kernel": ((2, 3, 8, 8), (2, 2, 2), {}),
    "five_dims": ((1, 2, 3, 8, 8), (2,), {}),
    # ATen narrows each argument to int and raises past it.
    "stride_past_int": ((1, 1, 4, 4), (2, 2**31), {}),
    "dilation_past_int": ((1, 1, 4, 4), (1, 1, 0, 2**31), {}),
    "huge_dilation": ((1, 1, 4, 4), ((5, 1), 1, 0, (2**62, 1)), {}),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_arguments_raise_the_cpus_error_and_leave_nothing_launched(dev, name):
    shape, args, kwargs = BAD[name]
    x = torch.randn(*shape, generator=g)
    with pytest.raises(RuntimeError) as cpu_error:
        F.max_pool2d(x, *args, return_indices=True, **kwargs)
    before = launches_now()
    with pytest.raises(RuntimeError) as device_error:
        F.max_pool2d(x.to(dev), *args, return_indices=True, **kwargs)
    assert str(device_error.value) == str(cpu_error.value)
    assert compiled(launched_since(before)) == 0


def test_half_raises_the_cpus_error(dev):
    x = torch.randn(2, 3, 8, 8, generator=g).half()
    with pytest.raises(RuntimeError) as cpu_error:
        F.max_pool2d(x, 2, return_indices=True)
    with pytest.raises(RuntimeError) as device_error:
        F.max_pool2d(x.to(dev), 2, return_indices=True)
    assert str(device_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("args", [(2,), (3, 2, 1)], ids=["2x2", "padded_3x3"])
def test_gradients_flow_through_the_compiled_indices(dev, args):
    x = torch.randn(4, 3, 12, 10, generator=g)
    x[0, 0, :2, :2] = 1.5  # ties: the gradient goes to the first
    x_cpu = x.clone().requires_grad_()
    x_dev = x.to(dev).requires_grad_()
    before = launches_now()
    out = F.max_pool2d(x_dev, *args)
    weights = torch.randn(out.shape, generator=g)
    (out * weights.to(dev)).sum().backward()
    launched = launched_since(before)
    (F.max_pool2d(x_cpu, *args) * weights).sum().backward()
    assert compiled(launched) == 1
    assert_same(x_dev.grad, x_cpu.grad, rtol=0, atol=0)


def test_a_recurring_step_with_max_pools_matches_the_cpu_each_time(dev):
    """Under NEURON_ADAPTIVE_EAGER=1 (make test's adaptive run) the step's window turns hot and
    replays; in eager mode each call runs its kernel."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 5 * 5, 3))
    device_model = copy.deepcopy(model).to(dev)
    for _ in range(6):
        x = torch.randn(3, 2, 12, 12, generator=g)
        expected = model(x)
        got = device_model(x.to(dev))
        assert_same(got.detach(), expected.detach(), rtol=1e-5, atol=1e-5)
