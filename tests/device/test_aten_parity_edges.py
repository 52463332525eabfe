"""Calls whose compiled kernels once disagreed with ATen's CPU kernels (an adversarial pass,
2026-12-07): ATen's argument checks the planner skipped (a bool alpha, lerp's dtypes),
reductions of nothing ATen refuses or answers its own way (norms of empty dimensions), values at
the edges of half precision (pow's 0.5 and -0.5 at -0.0 and -inf), bfloat16 steps
ATen rounds one by one (gelu's tanh form), and the layout ATen gives a resized out= and a cat of
channels_last tensors. Each call runs several times, so later calls run compiled kernels (or
replays of them) whatever the first did."""
import pytest
import torch
import torch.nn.functional as F
import torchneuron

dev = torchneuron.device()
REPEATS = 4


def outcome(fn, *args, **kwargs):
    """fn's result on the CPU, or the type and message of its error."""
    try:
        result = fn(*args, **kwargs)
    except Exception as error:  # the comparison is of errors too
        return ("error", type(error), str(error).split("\n")[0])
    return ("value", result.cpu() if isinstance(result, torch.Tensor) else result)


def assert_same(fn, cpu_args, kwargs=None, exact=True):
    kwargs = kwargs or {}
    expected = outcome(fn, *cpu_args, **kwargs)
    for _ in range(REPEATS):
        device_args = [a.to(dev) if isinstance(a, torch.Tensor) else a for a in cpu_args]
        got = outcome(fn, *device_args, **kwargs)
        assert got[0] == expected[0], (got, expected)
        if got[0] == "error":
            assert got[1:] == expected[1:], (got, expected)
        else:
            assert got[1].dtype == expected[1].dtype
            if exact:
                torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0, equal_nan=True)
            else:
                torch.testing.assert_close(got[1], expected[1], equal_nan=True)


@pytest.mark.parametrize("case", [
    (torch.add, torch.float32, 1.0, True),
    (torch.sub, torch.float32, 1.0, True),
    (torch.add, torch.int64, 2, False),
    (torch.add, torch.bool, 1, True),
    (torch.add, torch.int32, 1, 0.5),
])
def test_alpha_is_checked_as_aten_checks_it(case):
    fn, dtype, other, alpha = case
    a = torch.ones(5, dtype=dtype)
    assert_same(lambda x: fn(x, other, alpha=alpha), [a])
    assert_same(lambda x: fn(x, x, alpha=alpha), [a])


def test_an_in_place_add_with_a_bool_alpha_on_integers_raises():
    assert_same(lambda x: x.add_(x, alpha=False), [torch.ones(3, dtype=torch.int64)])


@pytest.mark.parametrize("self_dtype,end_dtype", [(torch.float64, torch.float32),
                                                   (torch.float32, torch.int64),
                                                   (torch.float32, torch.float16),
                                                   (torch.float32, torch.bool),
                                                   (torch.float32, torch.float64)])
def test_lerp_needs_end_and_weight_of_selfs_dtype(self_dtype, end_dtype):
    start = torch.linspace(0, 1, 4, dtype=self_dtype)
    end = torch.ones(4, dtype=end_dtype)
    assert_same(lambda s, e: torch.lerp(s, e, 0.5), [start, end])
    weight = torch.full((4,), 0.25, dtype=end_dtype)
    assert_same(lambda s, w: torch.lerp(s, s.flip(0), w), [start, weight])


@pytest.mark.parametrize("ord", [2.0, 1.0, 0.0, float("inf"), float("-inf"), -1.0, -0.5, -2.0,
                                 3.0])
@pytest.mark.parametrize("shape,dim", [((3, 0), -1), ((0,), 0), ((0, 4), 0)])
def test_norms_of_empty_dimensions_are_atens(ord, shape, dim):
    x = torch.randn(shape)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord, dim=dim), [x])
    assert_same(lambda t: torch.norm(t, ord, dim=dim), [x])


@pytest.mark.parametrize("exponent", [0.5, -0.5, 2.0, -1.0])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16, torch.float64])
def test_pow_at_signed_zeros_and_infinities(exponent, dtype):
    x = torch.tensor([-float("inf"), -0.0, 0.0, 4.0, float("inf"), float("nan"), -2.0],
                     dtype=dtype)
    assert_same(lambda t: t.pow(exponent), [x])


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_bfloat16_gelu_and_its_backward_equal_atens(approximate):
    x = torch.linspace(-6, 6, 4001).to(torch.bfloat16)
    grad = torch.linspace(-1, 1, 4001).to(torch.bfloat16)
    assert_same(lambda t: F.gelu(t, approximate=approximate), [x], exact=False)
    assert_same(lambda g, t: torch.ops.aten.gelu_backward(g, t, approximate=approximate),
                [grad, x], exact=False)


def test_an_in_place_result_that_cannot_be_cast_names_the_cast():
    assert_same(lambda t: t.add_(1.5), [torch.arange(4)])
    assert_same(lambda t: (t > 0).pow_(2), [torch.arange(4)])  # pow_ checks the exact dtype first
    assert_same(lambda t: t.pow_(2.0), [torch.arange(4)])


def strides_of(fn, cpu_inputs):
    expected = fn(*cpu_inputs)
    for _ in range(REPEATS):
        got = fn(*[t.to(dev) for t in cpu_inputs])
        assert got.stride() == expected.stride(), (got.stride(), expected.stride())
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_a_resized_out_takes_the_layout_a_new_result_would():
    def into_empty(t):
        out = torch.empty(0, device=t.device)
        return torch.add(t, 1, out=out)
    strides_of(into_empty, [torch.randn(4, 6).t()])
    strides_of(into_empty,
               [torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)])
    strides_of(into_empty, [torch.randn(3, 5)])


def test_cat_of_channels_last_tensors_is_channels_last_as_on_the_cpu():
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    y = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    for dim in range(4):
        strides_of(lambda a, b: torch.cat([a, b], dim), [x, y])
        strides_of(lambda a, b: torch.cat([a, b], dim, out=torch.empty(0, device=a.device)),
                   [x, y])
    strides_of(lambda a, b: torch.cat([a, b], 1), [x, y.contiguous()])  # mixed: contiguous
    z = torch.randn(2, 3, 2, 4, 5).contiguous(memory_format=torch.channels_last_3d)
    strides_of(lambda a: torch.cat([a, a], 2), [z])
