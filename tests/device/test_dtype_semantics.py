"""The device against the CPU where dtypes, overlaps, NaNs and signed zeros make the difference:
each case runs on CPU tensors and on device copies, and the device must give the CPU's result
(dtype, values, NaN positions, the sign of every zero) or raise the CPU's error (type and
message)."""
import math
import warnings

import pytest
import torch
import torchneuron

NAN = math.nan
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def outcome(fn, device):
    """What fn(device) gives: ("value", CPU tensor or tuple of them) or ("error", type, message)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn(device)
    except Exception as e:  # the error itself is what is compared
        return ("error", type(e).__name__, str(e).split("\n")[0])
    if isinstance(result, tuple):
        return ("value", tuple(r.cpu() for r in result))
    return ("value", result.cpu())


def same_tensor(cpu, dev):
    assert dev.dtype == cpu.dtype and dev.shape == cpu.shape, (cpu, dev)
    if cpu.dtype.is_floating_point:
        assert torch.equal(cpu.isnan(), dev.isnan()), (cpu, dev)
        keep = ~cpu.isnan()
        assert torch.equal(cpu[keep], dev[keep]), (cpu, dev)
        assert torch.equal(cpu[keep].float().signbit(), dev[keep].float().signbit()), \
            f"sign of zero: cpu {cpu}, device {dev}"
    else:
        assert torch.equal(cpu, dev), (cpu, dev)


def check_like_cpu(fn):
    """fn(device) runs the case with tensors made on `device`."""
    cpu = outcome(fn, "cpu")
    dev = outcome(fn, torchneuron.device())
    if cpu[0] == "error" or dev[0] == "error":
        assert dev == cpu
        return cpu
    cpu_values = cpu[1] if isinstance(cpu[1], tuple) else (cpu[1],)
    dev_values = dev[1] if isinstance(dev[1], tuple) else (dev[1],)
    for c, d in zip(cpu_values, dev_values):
        same_tensor(c, d)
    return cpu


OVERLAP_MESSAGE = ("unsupported operation: some elements of the input tensor and the written-to "
                   "tensor refer to a single memory location. Please clone() the tensor before "
                   "performing the operation.")


def shifted_assignment(d, dtype):
    x = torch.arange(8, device=d).to(dtype)
    x[1:] = x[:-1]
    return x


def transposed_copy(d, dtype):
    x = torch.arange(9, device=d).to(dtype).reshape(3, 3)
    x.t().copy_(x)
    return x


def row_broadcast_copy(d, dtype):
    x = torch.arange(9, device=d).to(dtype).reshape(3, 3)
    x.copy_(x[0])
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("case", [shifted_assignment, transposed_copy, row_broadcast_copy])
def test_overlapping_copy_raises_atens_error(case, dtype):
    result = check_like_cpu(lambda d: case(d, dtype))
    assert result == ("error", "RuntimeError", OVERLAP_MESSAGE)


def disjoint_rows(d, dtype):
    x = torch.arange(9, device=d).to(dtype).reshape(3, 3)
    x[1:].copy_(x[0])
    return x


def interleaved(d, dtype):
    x = torch.arange(8, device=d).to(dtype)
    x[::2].copy_(x[1::2])
    return x


def onto_itself(d, dtype):
    x = torch.arange(8, device=d).to(dtype)
    x.copy_(x)
    x[2:5].copy_(x[2:5])
    return x


def converting_view_of_same_storage(d, dtype):
    x = torch.arange(8, device=d).to(dtype)
    x[:4].copy_(x[4:].flip(0))
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("case", [disjoint_rows, interleaved, onto_itself,
                                  converting_view_of_same_storage])
def test_views_of_one_storage_copy_like_cpu(case, dtype):
    result = check_like_cpu(lambda d: case(d, dtype))
    assert result[0] == "value"


def test_internally_overlapping_destination_raises_atens_error():
    result = check_like_cpu(lambda d: torch.zeros(1, device=d).expand(4).copy_(
        torch.arange(4.0, device=d)))
    assert result[0] == "error" and "more than one element of the written-to tensor" in result[2]


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_integer_division_with_rounding_mode(dtype, mode):
    big = {torch.int16: 30001, torch.int8: 100, torch.uint8: 200}.get(dtype, 50331651)
    values = [big, 7, 0, 5] if dtype == torch.uint8 else [big, -7, 7, -5]
    result = check_like_cpu(lambda d: torch.div(torch.tensor(values, dtype=dtype, device=d), 3,
                                                rounding_mode=mode))
    assert result[1].dtype == dtype
    check_like_cpu(lambda d: torch.div(torch.tensor(values, dtype=dtype, device=d),
                                       torch.tensor([3, 2, -4 if dtype != torch.uint8 else 4, 1],
                                                    dtype=dtype, device=d), rounding_mode=mode))


def test_integer_division_by_zero_raises_zero_division_error():
    for mode in ("floor", "trunc"):
        result = check_like_cpu(lambda d: torch.div(torch.tensor([5, 6], device=d), 0,
                                                    rounding_mode=mode))
        assert result == ("error", "RuntimeError", "ZeroDivisionError")
        result = check_like_cpu(lambda d: torch.div(
            torch.tensor([5, 6], device=d), torch.tensor([1, 0], device=d), rounding_mode=mode))
        assert result == ("error", "RuntimeError", "ZeroDivisionError")


def test_integer_division_out_and_in_place():
    def in_place(d):
        x = torch.tensor([7, -7, 9], device=d)
        x.div_(2, rounding_mode="floor")
        return x

    def out(d):
        o = torch.empty(3, dtype=torch.int64, device=d)
        torch.div(torch.tensor([7, -7, 9], device=d), 2, rounding_mode="trunc", out=o)
        return o

    assert check_like_cpu(in_place)[1].tolist() == [3, -4, 4]
    assert check_like_cpu(out)[1].tolist() == [3, -3, 4]


@pytest.mark.parametrize("op", [torch.remainder, torch.fmod, torch.floor_divide])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int8])
def test_integer_remainder_fmod_floor_divide(op, dtype):
    result = check_like_cpu(lambda d: op(torch.tensor([7, -7, 9, -128], dtype=dtype, device=d),
                                         torch.tensor([2, 3, -4, 3], dtype=dtype, device=d)))
    assert result[1].dtype == dtype
    assert check_like_cpu(lambda d: op(torch.tensor([7, 9], dtype=dtype, device=d), 0))[0] == "error"


OVERFLOW_CASES = {
    "fill_": lambda d: torch.zeros(3, dtype=torch.int8, device=d).fill_(300),
    "full": lambda d: torch.full((3,), 300, dtype=torch.int8, device=d),
    "fill_ 127.9": lambda d: torch.zeros(3, dtype=torch.int8, device=d).fill_(127.9),
    "fill_ half": lambda d: torch.zeros(3, dtype=torch.half, device=d).fill_(1e5),
    "fill_ float": lambda d: torch.zeros(3, device=d).fill_(1e300),
    "add alpha": lambda d: torch.ones(3, dtype=torch.int8, device=d).add(
        torch.ones(3, dtype=torch.int8, device=d), alpha=300),
    "sub alpha": lambda d: torch.ones(3, dtype=torch.int16, device=d).sub(
        torch.ones(3, dtype=torch.int16, device=d), alpha=40000),
    "clamp": lambda d: torch.ones(3, dtype=torch.int8, device=d).clamp(min=300),
    "clamp_max": lambda d: torch.clamp_max(torch.ones(3, dtype=torch.int8, device=d), -300),
    "masked_fill": lambda d: torch.ones(2, dtype=torch.int8, device=d).masked_fill(
        torch.tensor([True, False], device=d), 300),
    "where": lambda d: torch.where(torch.tensor([True, False], device=d),
                                   torch.ones(2, dtype=torch.int8, device=d), 300),
    "addcmul": lambda d: torch.addcmul(*[torch.ones(2, dtype=torch.int8, device=d)] * 3, value=300),
    "threshold": lambda d: torch.threshold(torch.ones(2, dtype=torch.int8, device=d), 0, 300),
    "pow half": lambda d: torch.ones(2, dtype=torch.half, device=d).pow(1e5),
    "pow bfloat16": lambda d: torch.ones(2, dtype=torch.bfloat16, device=d).pow(1e39),
    "pow int8": lambda d: torch.ones(2, dtype=torch.int8, device=d).pow(300),
    # A 0-dim tensor value is taken with value.item() and Scalar::to<T>() too, wherever it lives.
    "fill_ cpu tensor": lambda d: torch.zeros(3, dtype=torch.int8, device=d).fill_(
        torch.tensor(300)),
    "fill_ device tensor": lambda d: torch.zeros(3, dtype=torch.int16, device=d).fill_(
        torch.tensor(70000, device=d)),
    "fill_ half": lambda d: torch.zeros(3, dtype=torch.half, device=d).fill_(torch.tensor(1e6)),
    "fill_ int32": lambda d: torch.zeros(3, dtype=torch.int32, device=d).fill_(
        torch.tensor(2**40, device=d)),
    "masked_fill tensor": lambda d: torch.ones(2, dtype=torch.int8, device=d).masked_fill(
        torch.tensor([True, False], device=d), torch.tensor(300)),
    "masked_fill nan": lambda d: torch.ones(2, dtype=torch.int64, device=d).masked_fill(
        torch.tensor([True, False], device=d), torch.tensor(math.nan)),
    "lerp weight": lambda d: torch.lerp(torch.ones(3, device=d), torch.zeros(3, device=d), 1e39),
    "lerp weight bfloat16": lambda d: torch.lerp(torch.ones(3, dtype=torch.bfloat16, device=d),
                                                 torch.zeros(3, dtype=torch.bfloat16, device=d),
                                                 1e39),
}


@pytest.mark.parametrize("name", sorted(OVERFLOW_CASES))
def test_out_of_range_scalar_raises_like_cpu(name):
    result = check_like_cpu(OVERFLOW_CASES[name])
    assert result[0] == "error" and "without overflow" in result[2], result


@pytest.mark.parametrize("fn", [
    lambda d: torch.zeros(3, dtype=torch.int8, device=d) + 300,  # wrapped numbers are cast
    lambda d: torch.ones(3, dtype=torch.uint8, device=d) * -1,
    lambda d: torch.zeros(3, dtype=torch.uint8, device=d).fill_(-1),
    lambda d: torch.zeros(3, dtype=torch.bool, device=d).fill_(5),
    lambda d: torch.ones(3, dtype=torch.int8, device=d) == 300,
    # ATen takes pow's exponent with Scalar::to<double>() for float32 and float64 results.
    lambda d: torch.tensor([0.5, 1.0, 2.0, -1.0, -2.0, -0.0], device=d).pow(1e39),
    lambda d: torch.tensor([0.5, 1.0, 2.0, -1.0, -2.0, -0.0], device=d).pow(-1e300),
    lambda d: torch.tensor([0, 1, 2, -1, -2], dtype=torch.int32, device=d).pow(1e39),
    lambda d: torch.zeros(3, dtype=torch.int8, device=d).fill_(torch.tensor(-100)),
    lambda d: torch.zeros(3, dtype=torch.int8, device=d).fill_(torch.tensor(-100, device=d)),
    lambda d: torch.zeros(3, dtype=torch.half, device=d).fill_(torch.tensor(0.1, device=d)),
    lambda d: torch.zeros(3, device=d).fill_(torch.tensor(1e30, dtype=torch.float64)),
    lambda d: torch.ones(2, dtype=torch.uint8, device=d).masked_fill(
        torch.tensor([True, False], device=d), torch.tensor(255)),
    lambda d: torch.lerp(torch.ones(3, dtype=torch.float64, device=d),
                         torch.zeros(3, dtype=torch.float64, device=d), 1e39),
    lambda d: torch.lerp(torch.ones(3, dtype=torch.bfloat16, device=d),
                         torch.zeros(3, dtype=torch.bfloat16, device=d), 3.4e38),  # float, not bf16
])
def test_in_range_or_cast_scalars_match_cpu(fn):
    assert check_like_cpu(fn)[0] == "value"


# 3.395e38 fits float but not bfloat16 (its largest is 3.3895e38). ATen's bfloat16 kernels of
# these ops take their numbers as float (Scalar::to<opmath_t>), so they compute; hardtanh,
# threshold and add's alpha take them as bfloat16 and raise. The kernels computed in float
# already, but the numbers were checked against bfloat16.
BF16 = torch.bfloat16
BEYOND_BF16 = 3.395e38
aten = torch.ops.aten


def bf16_input(d):
    return torch.linspace(-2, 2, 7, dtype=BF16, device=d)


NUMBERS_TAKEN_AS_FLOAT = {
    "leaky_relu": lambda d: aten.leaky_relu(bf16_input(d), -BEYOND_BF16),
    "leaky_relu_backward": lambda d: aten.leaky_relu_backward(bf16_input(d), bf16_input(d),
                                                              BEYOND_BF16, False),
    "elu alpha": lambda d: aten.elu(bf16_input(d), BEYOND_BF16, 1, 1),
    "elu input_scale": lambda d: aten.elu(bf16_input(d), 1, 1, -BEYOND_BF16),
    "elu_backward scale": lambda d: aten.elu_backward(bf16_input(d), 1, BEYOND_BF16, 1, False,
                                                      bf16_input(d)),
    "softplus beta": lambda d: aten.softplus(bf16_input(d), BEYOND_BF16, 20),
    "softplus threshold": lambda d: aten.softplus(bf16_input(d), 1, -BEYOND_BF16),
    "softplus_backward": lambda d: aten.softplus_backward(bf16_input(d), bf16_input(d), 1,
                                                          BEYOND_BF16),
    "addcmul": lambda d: torch.addcmul(bf16_input(d), bf16_input(d), bf16_input(d),
                                       value=BEYOND_BF16),
    "addcdiv": lambda d: torch.addcdiv(bf16_input(d), bf16_input(d), bf16_input(d) + 3,
                                       value=-BEYOND_BF16),
}
NUMBERS_TAKEN_AS_BFLOAT16 = {
    "hardtanh": lambda d: aten.hardtanh(bf16_input(d), -BEYOND_BF16, 2),
    "threshold": lambda d: aten.threshold(bf16_input(d), 0.5, BEYOND_BF16),
    "add alpha": lambda d: torch.add(bf16_input(d), bf16_input(d), alpha=BEYOND_BF16),
}


@pytest.mark.parametrize("name", sorted(NUMBERS_TAKEN_AS_FLOAT))
def test_bfloat16_numbers_ops_take_as_float_compute_like_cpu(name):
    for _ in range(3):  # planned, then replayed from the call cache
        assert check_like_cpu(NUMBERS_TAKEN_AS_FLOAT[name])[0] == "value"


@pytest.mark.parametrize("name", sorted(NUMBERS_TAKEN_AS_BFLOAT16))
def test_bfloat16_numbers_ops_take_as_bfloat16_still_raise(name):
    for _ in range(3):
        result = check_like_cpu(NUMBERS_TAKEN_AS_BFLOAT16[name])
        assert result[0] == "error" and "without overflow" in result[2], result


def test_fill_value_tensor_is_checked_on_every_call_not_only_the_planned_one():
    """The value's data decides, and a capture's fingerprint holds no data: a call replayed from
    the eager call cache would have skipped the check."""
    x = torch.zeros(3, dtype=torch.int8, device=torchneuron.device())
    for value in (1, 2, 3, 4):
        x.fill_(torch.tensor(value))
    assert x.cpu().tolist() == [4, 4, 4]
    with pytest.raises(RuntimeError, match="cannot be converted to type int8_t without overflow"):
        x.fill_(torch.tensor(300))
    assert x.cpu().tolist() == [4, 4, 4]  # nothing written


ATEN_CHECK_CASES = {
    # hardtanh_out takes integral bounds with toLong() and refuses negative ones for uint8.
    "hardtanh uint8 -1": lambda d: torch.nn.functional.hardtanh(
        torch.tensor([0, 1, 5, 200], dtype=torch.uint8, device=d), -1, 1),
    "hardtanh uint8 max -1": lambda d: torch.nn.functional.hardtanh(
        torch.tensor([0, 1, 5, 200], dtype=torch.uint8, device=d), 0, -1),
    "hardtanh_ uint8": lambda d: torch.nn.functional.hardtanh(
        torch.tensor([0, 1, 5, 200], dtype=torch.uint8, device=d), -2.0, 100.0, inplace=True),
    "hardtanh int8 -1": lambda d: torch.nn.functional.hardtanh(
        torch.tensor([0, 1, 5, -100], dtype=torch.int8, device=d), -1.5, 2.7),
    # linalg.vector_norm refuses a dtype= the input narrows to.
    "vector_norm narrowing": lambda d: torch.linalg.vector_norm(
        torch.tensor([3.0, 4.0], dtype=torch.float64, device=d), dtype=torch.float32),
    "vector_norm widening": lambda d: torch.linalg.vector_norm(
        torch.tensor([3.0, 4.0], device=d), dtype=torch.float64),
    # An order beyond float's range is infinite (ATen takes it as a float), whatever the dtype.
    "vector_norm ord 1e39": lambda d: torch.linalg.vector_norm(
        torch.tensor([[0.5, -2.0], [0.1, 0.2]], device=d), ord=1e39, dim=1),
    "norm p -1e39 float64": lambda d: torch.norm(
        torch.tensor([0.5, -2.0, 0.25], dtype=torch.float64, device=d), p=-1e39),
    "addcdiv integer tensors": lambda d: torch.addcdiv(
        torch.ones(3, device=d), torch.ones(3, dtype=torch.int32, device=d),
        torch.ones(3, dtype=torch.int64, device=d)),
    "addcdiv_ bool and integer": lambda d: torch.ones(3, dtype=torch.float64, device=d).addcdiv_(
        torch.ones(3, dtype=torch.bool, device=d), torch.ones(3, dtype=torch.int8, device=d)),
    "layer_norm weight of another shape": lambda d: torch.nn.functional.layer_norm(
        torch.ones(4, 2, 3, device=d), (2, 3), weight=torch.ones(6, device=d)),
    "layer_norm bias of another shape": lambda d: torch.nn.functional.layer_norm(
        torch.ones(4, 3, device=d), (3,), bias=torch.ones(1, 3, device=d)),
    "layer_norm backward float64 rstd": lambda d: torch.ops.aten.native_layer_norm_backward(
        torch.ones(4, 3, device=d), torch.ones(4, 3, device=d), [3],
        torch.zeros(4, 1, device=d), torch.ones(4, 1, dtype=torch.float64, device=d),
        None, None, [True, False, False])[0],
    # A one-element gradient with more dims than self: the result takes its shape, as ATen's.
    "mse_loss_backward wider gradient": lambda d: torch.ops.aten.mse_loss_backward(
        torch.ones(1, 1, 1, device=d), torch.tensor([1.0, 2.0, 3.0], device=d),
        torch.tensor([0.0, 2.0, 5.0], device=d), 1),
    "fill_ expanded": lambda d: torch.zeros(1, device=d).expand(4).fill_(2.0),
    "zero_ expanded": lambda d: torch.ones(1, device=d).expand(4).zero_(),
}


@pytest.mark.parametrize("name", sorted(ATEN_CHECK_CASES))
def test_atens_argument_checks_hold_for_compiled_kernels(name):
    """Three calls each (the kernel compiled, then the eager call cache's capture and replay):
    ATen's error, or its values, every time."""
    for _ in range(3):
        check_like_cpu(ATEN_CHECK_CASES[name])


def test_vector_norm_takes_its_order_as_a_float_like_aten():
    """ATen's kernel takes the order as a float for float64 too (2.1 is 2.0999999): the device
    had computed the exact order's norm, 1.4e-7 away."""
    x = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    for order in (2.1, 0.3, 3.7):
        cpu = torch.linalg.vector_norm(x, ord=order)
        dev = torch.linalg.vector_norm(x.to(torchneuron.device()), ord=order).cpu()
        torch.testing.assert_close(dev, cpu, rtol=1e-12, atol=0)


@pytest.mark.parametrize("op", [torch.nn.functional.elu, torch.nn.functional.celu,
                                torch.nn.functional.leaky_relu])
def test_in_place_activation_with_a_negative_slope_refuses_its_backward(op):
    """Its backward computes from the result, which cannot tell the branches apart for a
    negative slope: ATen refuses it (the device had given a gradient of ones)."""
    def backward(d):
        x = torch.tensor([1.0, -2.0, 0.5, -0.3, 3.0], device=d, requires_grad=True)
        y = op(x * 1, -0.1, inplace=True) if op is torch.nn.functional.leaky_relu \
            else op(x * 1, alpha=-1.0, inplace=True)
        return torch.autograd.grad(y.sum(), [x])[0]
    for _ in range(3):
        result = check_like_cpu(backward)
        assert result[0] == "error" and "negative slope" in result[2], result


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", [torch.deg2rad, torch.rad2deg])
def test_angle_conversion_rounds_its_factor_to_the_dtype_like_aten(op, dtype):
    x = (torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 100).to(dtype)
    for _ in range(2):
        check_like_cpu(lambda d: op(x.to(d)))


def signed(d):
    return torch.tensor([1.0, -1.0, NAN, -0.0, 0.0, -2.0, 2.0], device=d)


NAN_AND_ZERO_CASES = {
    "clamp(min=nan)": lambda d: signed(d).clamp(min=NAN),
    "clamp(max=nan)": lambda d: signed(d).clamp(max=NAN),
    "clamp(nan, 1)": lambda d: signed(d).clamp(NAN, 1.0),
    "clamp_min(nan)": lambda d: torch.clamp_min(signed(d), NAN),
    "clamp(min=tensor nan)": lambda d: signed(d).clamp(min=torch.full((7,), NAN, device=d)),
    "clamp(min=0)": lambda d: signed(d).clamp(min=0.0),
    "clamp(max=-0)": lambda d: signed(d).clamp(max=-0.0),
    "clamp(tensor -0, tensor 0)": lambda d: signed(d).clamp(torch.full((7,), -0.0, device=d),
                                                            torch.zeros(7, device=d)),
    "clamp_min(tensor 0)": lambda d: torch.clamp_min(signed(d), torch.zeros(7, device=d)),
    "relu": lambda d: torch.relu(signed(d)),
    "relu6": lambda d: torch.nn.functional.relu6(signed(d)),
    "hardtanh(-0, 0)": lambda d: torch.nn.functional.hardtanh(signed(d), -0.0, 0.0),
    "hardtanh(nan, 1)": lambda d: torch.nn.functional.hardtanh(signed(d), NAN, 1.0),
    "elu": lambda d: torch.nn.functional.elu(signed(d)),
    "selu": lambda d: torch.nn.functional.selu(signed(d)),
    "celu": lambda d: torch.nn.functional.celu(signed(d)),
    "hardswish": lambda d: torch.nn.functional.hardswish(signed(d) * 3),
    "hardsigmoid": lambda d: torch.nn.functional.hardsigmoid(signed(d) * 3),
    "maximum": lambda d: torch.maximum(signed(d), torch.zeros(7, device=d)),
    "maximum reversed": lambda d: torch.maximum(torch.zeros(7, device=d), signed(d)),
    "minimum": lambda d: torch.minimum(signed(d), torch.full((7,), -0.0, device=d)),
    "minimum reversed": lambda d: torch.minimum(torch.full((7,), -0.0, device=d), signed(d)),
    "fmax": lambda d: torch.fmax(signed(d), torch.full((7,), -0.0, device=d)),
    "fmax reversed": lambda d: torch.fmax(torch.full((7,), -0.0, device=d), signed(d)),
    "fmin": lambda d: torch.fmin(signed(d), torch.zeros(7, device=d)),
    "fmin nan": lambda d: torch.fmin(torch.full((7,), NAN, device=d), signed(d)),
    "max": lambda d: signed(d).max(),
    "min": lambda d: signed(d).min(),
    "amax": lambda d: signed(d).amax(),
    "max dim": lambda d: signed(d).reshape(1, 7).max(1),
    "argmin": lambda d: signed(d).argmin(),
}


@pytest.mark.parametrize("name", sorted(NAN_AND_ZERO_CASES))
def test_nan_and_signed_zero_like_cpu(name):
    check_like_cpu(NAN_AND_ZERO_CASES[name])


@pytest.mark.parametrize("value", [1e300, 1e307, 1e154, 3.3e100, 0.1])
@pytest.mark.parametrize("op", [torch.var, torch.std])
def test_float64_variance_of_equal_values_is_zero(op, value):
    for shape, dim in (((2, 1000), 1), ((1000, 2), 0), ((2, 3), 1)):
        result = check_like_cpu(lambda d: op(torch.full(shape, value, dtype=torch.float64,
                                                        device=d), dim))
        assert bool((result[1] == 0).all())
    whole = op(torch.full((1000,), value, dtype=torch.float64, device=torchneuron.device()))
    assert whole.item() == 0  # ATen's Welford; its all-dims CPU kernel sums first (inf, noise)


def test_bfloat16_scalar_operand_rounds_to_bfloat16_first():
    check_like_cpu(lambda d: torch.tensor([1.1, -2.3, 7.7], dtype=torch.bfloat16, device=d) * 3.3)
    check_like_cpu(lambda d: torch.tensor([1.1, 1000.3], dtype=torch.half, device=d) + 0.1)
    check_like_cpu(lambda d: torch.tensor([2049, 4097], dtype=torch.int32, device=d) *
                   torch.tensor(3.0, dtype=torch.half, device=d))


@pytest.mark.parametrize("source", [torch.int32, torch.int64, torch.float64, torch.bool])
def test_bfloat16_conversions_run_compiled(source):
    dev = torchneuron.device()
    x = torch.tensor([1, 0, 3, 300007], device=dev).to(source)
    torchneuron.reset_metrics()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kernel that fails to compile warns
        y = x.to(torch.bfloat16)
        z = y.float().to(torch.bfloat16).amax(0)  # a bfloat16 reduction that stays compiled
    assert torchneuron.metrics()["launches"]["fallback"] == 0, torchneuron.metrics()["ops"]
    assert torch.equal(y.cpu(), x.cpu().to(torch.bfloat16))
    same_tensor(x.cpu().to(torch.bfloat16).float().to(torch.bfloat16).amax(0), z.cpu())


def sum_into_expanded(d):
    out = torch.zeros(1, device=d).expand(4)
    torch.sum(torch.arange(12.0, device=d).reshape(3, 4), 0, out=out)
    return out


def sum_into_own_column(d):
    x = torch.arange(12.0, device=d).reshape(3, 4)
    torch.sum(x, 1, out=x[:, 0])
    return x


def cat_into_expanded(d):
    a = torch.ones(3, device=d)
    return torch.cat([a, a], out=torch.zeros(1, device=d).expand(6))


def add_into_overlapping_self(d):
    x = torch.arange(8.0, device=d)
    torch.add(x[:-1], 1, out=x[1:])
    return x


@pytest.mark.parametrize("case", [sum_into_expanded, sum_into_own_column, cat_into_expanded,
                                  add_into_overlapping_self])
def test_out_overlapping_inputs_like_cpu(case):
    check_like_cpu(case)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", [
    torch.fmod, torch.remainder, torch.floor_divide,
    lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    lambda a, b: torch.div(a, b, rounding_mode="floor")])
def test_narrow_float_division_family_like_cpu(op, dtype):
    """ATen rounds every step in half and bfloat16 and its vectorized bfloat16 fmod gives NaN
    for a tiny divisor: these dtypes run on the CPU (32 elements reach its vector path)."""
    tiny = 1.1754944e-38 if dtype == torch.bfloat16 else 6.1e-5
    check_like_cpu(lambda d: op(torch.full((32,), -4.9375, device=d).to(dtype),
                                torch.full((32,), tiny, device=d).to(dtype)))
    check_like_cpu(lambda d: op(torch.linspace(-7, 7, 48, device=d).to(dtype),
                                torch.linspace(0.3, 2.9, 48, device=d).to(dtype)))


# out= tensors of another dtype. ATen casts the result into them, except in the overloads it
# builds with TensorIterator's check_all_same_dtype ("Found dtype Double but expected Float"):
# the registry's OutputDtypeRule. Each case is (name, fn(input, other, out)).
OUT_DTYPE_CASES = {
    # ATen's unary-op build: exact.
    "neg": lambda x, y, out: torch.neg(x, out=out),
    "abs": lambda x, y, out: torch.abs(x, out=out),
    "floor": lambda x, y, out: torch.floor(x, out=out),
    "ceil": lambda x, y, out: torch.ceil(x, out=out),
    "trunc": lambda x, y, out: torch.trunc(x, out=out),
    "round": lambda x, y, out: torch.round(x, out=out),
    "frac": lambda x, y, out: torch.frac(x, out=out),
    "sign": lambda x, y, out: torch.sign(x, out=out),
    "sgn": lambda x, y, out: torch.sgn(x, out=out),
    "signbit": lambda x, y, out: torch.signbit(x, out=out),
    "bitwise_not": lambda x, y, out: torch.bitwise_not(x, out=out),
    "gelu": lambda x, y, out: torch._C._nn.gelu(x, out=out),
    "silu": lambda x, y, out: torch._C._nn.silu(x, out=out),
    "softplus": lambda x, y, out: torch._C._nn.softplus(x, out=out),
    "elu": lambda x, y, out: torch._C._nn.elu(x, out=out),
    "leaky_relu": lambda x, y, out: torch._C._nn.leaky_relu(x, 0.1, out=out),
    "hardtanh": lambda x, y, out: torch._C._nn.hardtanh(x, out=out),
    "hardswish": lambda x, y, out: torch._C._nn.hardswish(x, out=out),
    "hardsigmoid": lambda x, y, out: torch._C._nn.hardsigmoid(x, out=out),
    "mish": lambda x, y, out: torch._C._nn.mish(x, out=out),
    # Exact with a number, casting with a tensor (and lerp the other way round).
    "clamp(number)": lambda x, y, out: torch.clamp(x, min=-1, max=1, out=out),
    "clamp(tensor)": lambda x, y, out: torch.clamp(x, min=y, out=out),
    "clamp_min(number)": lambda x, y, out: torch.clamp_min(x, 0.5, out=out),
    "clamp_max(tensor)": lambda x, y, out: torch.clamp_max(x, y, out=out),
    "pow(number)": lambda x, y, out: torch.pow(x, 2, out=out),
    "pow(tensor)": lambda x, y, out: torch.pow(x, y.abs(), out=out),
    "lerp(number)": lambda x, y, out: torch.lerp(x, y, 0.25, out=out),
    "lerp(tensor)": lambda x, y, out: torch.lerp(x, y, torch.full_like(x, 0.25), out=out),
    # Casting.
    "exp": lambda x, y, out: torch.exp(x, out=out),
    "sqrt": lambda x, y, out: torch.sqrt(x, out=out),
    "logical_not": lambda x, y, out: torch.logical_not(x, out=out),
    "add": lambda x, y, out: torch.add(x, y, alpha=2, out=out),
    "mul(number)": lambda x, y, out: torch.mul(x, 3, out=out),
    "maximum": lambda x, y, out: torch.maximum(x, y, out=out),
    "lt": lambda x, y, out: torch.lt(x, y, out=out),
    "hypot": lambda x, y, out: torch.hypot(x, y, out=out),
    "logaddexp": lambda x, y, out: torch.logaddexp(x, y, out=out),
    "atan2": lambda x, y, out: torch.atan2(x, y, out=out),
    "threshold": lambda x, y, out: torch.threshold(x, 0.1, 2.0, out=out),
    "sigmoid_backward": lambda x, y, out: torch.ops.aten.sigmoid_backward.grad_input(
        x, y, grad_input=out),
}
# Input dtypes (float16 left out: PyTorch 1.13's CPU lacks most float math in it, which the
# device computes, docs/compiled-eager.md) and out= dtypes, the pairs of different ones.
OUT_DTYPE_PAIRS = [(i, o) for i in (torch.float32, torch.float64, torch.int32, torch.bool,
                                    torch.bfloat16)
                   for o in (torch.float32, torch.float64, torch.int32, torch.int64, torch.bool,
                             torch.float16, torch.bfloat16) if i != o]


def out_dtype_case(fn, in_dtype, out_dtype):
    def case(d):
        x = torch.tensor([1.75, -0.5, 0.25, -2.5, 3.0, 0.0])
        y = torch.tensor([-1.0, 2.0, 0.5, 0.0, -0.75, 1.5])
        if in_dtype == torch.bool:
            x, y = x > 0, y > 0
        x, y = x.to(in_dtype).to(d), y.to(in_dtype).to(d)
        out = torch.empty(6, dtype=out_dtype, device=d)
        fn(x, y, out)
        return out
    return case


@pytest.mark.parametrize("name", sorted(OUT_DTYPE_CASES))
def test_out_of_another_dtype_raises_or_casts_like_cpu(name):
    found_dtype_errors = 0
    for in_dtype, out_dtype in OUT_DTYPE_PAIRS:
        case = out_dtype_case(OUT_DTYPE_CASES[name], in_dtype, out_dtype)
        cpu, dev = outcome(case, "cpu"), outcome(case, torchneuron.device())
        if cpu[0] == "error" or dev[0] == "error":
            assert dev == cpu, (in_dtype, out_dtype)
            found_dtype_errors += "Found dtype" in cpu[2]
        else:  # exp and logaddexp may differ from ATen's vector math by an ulp
            torch.testing.assert_close(dev[1], cpu[1], equal_nan=True,
                                       msg=lambda m: f"{in_dtype} -> {out_dtype}: {m}")
    # The cases cover both rules: ATen refuses every castable pair of the exact ones.
    exact = {"neg", "abs", "floor", "ceil", "trunc", "round", "frac", "sign", "sgn", "bitwise_not",
             "gelu", "silu", "softplus", "elu", "leaky_relu", "hardtanh", "hardswish",
             "hardsigmoid", "mish", "clamp(number)", "clamp_min(number)", "pow(number)",
             "lerp(tensor)"}
    assert (found_dtype_errors > 0) == (name in exact)


def test_exact_out_dtype_error_comes_in_place_of_the_cast():
    x = torch.tensor([1.5, -2.5], device=torchneuron.device())
    with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
        torch.neg(x, out=torch.empty(2, dtype=torch.float64, device=x.device))
    with pytest.raises(RuntimeError, match="signbit does not support non-boolean outputs."):
        torch.signbit(x, out=torch.empty(2, device=x.device))
    cast = torch.exp(x, out=torch.empty(2, dtype=torch.float64, device=x.device))
    assert cast.dtype == torch.float64


@pytest.mark.parametrize("op", [torch.hypot, torch.logaddexp])
def test_float_only_binary_ops_refuse_integers_like_cpu(op):
    def case(d):
        return op(torch.tensor([3, 4], device=d), torch.tensor([4, 3], device=d))
    assert check_like_cpu(case)[0] == "error"
    mixed = check_like_cpu(lambda d: op(torch.tensor([3, 4], device=d),
                                        torch.tensor([4.0, 3.0], device=d)))
    assert mixed[0] == "value"


@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64])
def test_half_precision_result_rounds_to_its_dtype_before_a_wider_out(in_dtype, out_dtype):
    # ATen computes into a temporary of the common dtype and casts it into the out= tensor: the
    # values are bfloat16 (half) ones. The kernels compute in f32 and stored that unrounded.
    def case(d):
        a = torch.linspace(-3, 3, 37).to(in_dtype).to(d)
        b = torch.linspace(0.3, 2.9, 37).to(in_dtype).to(d)
        outs = []
        for op in (torch.mul, torch.div, torch.add, torch.atan2):
            if in_dtype == torch.float16 and op == torch.atan2:
                continue  # not implemented for Half on the CPU
            outs.append(op(a, b, out=torch.empty(37, dtype=out_dtype, device=d)))
        return tuple(outs)
    check_like_cpu(case)


def test_fused_window_rounds_half_precision_before_a_wider_out():
    # The same in a fused window (adaptive mode runs this file too): the last op of a recurring
    # bfloat16 chain writes into a float32 out=.
    def case(d):
        a = torch.linspace(-3, 3, 37).bfloat16().to(d)
        b = torch.linspace(0.3, 2.9, 37).bfloat16().to(d)
        out = torch.empty(37, device=d)
        for _ in range(4):  # a sync each time: the window recurs, is hot, then runs fused
            torch.add(a * b, a / b, out=out)
            result = out.cpu()
        return result
    check_like_cpu(case)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_add_and_sub_with_alpha_match_cpu_bit_for_bit(dtype):
    # An SGD step is p.add_(grad, alpha=-lr): ATen computes fmadd(grad, alpha, p) with alpha in
    # the tensor's dtype (half: a + alpha * b, each rounding). Before, the kernel rounded the
    # product and then the sum (a 1-ulp difference in 2-17% of the elements) and kept alpha in
    # f32 for half and bfloat16. bfloat16's scalar tail rounds the product too: 1,024 elements
    # leave no tail in ATen's 32-element vector loop, and strided bfloat16 is not checked.
    def case(d):
        torch.manual_seed(0)
        a, b = torch.randn(1024).to(dtype), torch.randn(1024).to(dtype)
        strided_a, strided_b = torch.randn(700, 2).to(dtype), torch.randn(700, 2).to(dtype)
        a, b, strided_a, strided_b = (t.to(d) for t in (a, b, strided_a, strided_b))
        results = (a.clone().add_(b, alpha=-0.01), torch.sub(a, b, alpha=0.3),
                   torch.rsub(a, b, alpha=0.7), torch.add(a, b, alpha=3))
        if dtype != torch.bfloat16:
            results += (torch.add(strided_a[:, 0], strided_b[:, 1], alpha=0.3),)
        return results
    check_like_cpu(case)


@pytest.mark.parametrize("source", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("target", [torch.bool, torch.int32, torch.float64])
def test_half_precision_conversions_match_cpu(source, target):
    # A conversion out of a 16-bit float is a compiled copy whose compute dtype is the source's:
    # rounding its result before the conversion must not put a half constant in the kernel.
    check_like_cpu(lambda d: torch.tensor([0.0, -0.0, 1e-8, 2.5, -3.75, 70000.0, 1e-3])
                   .to(source).to(d).to(target))


BIT_EXACT_CASES = {
    # ATen's loops as GCC compiles them (it contracts a product and a sum into one fma):
    # self + value * t1 * t2 is fma(value * t1, t2, self); lerp's two forms are fmas; tanh's
    # backward in float is g * fma(-y, y, 1); hardsigmoid's backward multiplies by 1/6 rounded to
    # float (in float64 too). The kernels rounded each step, or divided by 6, before 2026-12-06.
    "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=0.3),
    "lerp(number)": lambda a, b, c: torch.lerp(a, b, 0.37),
    "lerp(tensor)": lambda a, b, c: torch.lerp(a, b, c - 1),
    "tanh_backward": lambda a, b, c: torch.ops.aten.tanh_backward(a, c - 0.5),
    "sigmoid_backward": lambda a, b, c: torch.ops.aten.sigmoid_backward(a, c - 1),
    "hardsigmoid_backward": lambda a, b, c: torch.ops.aten.hardsigmoid_backward(a, b * 4),
    "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c, value=-0.3),
}


def on_three_random_operands(fn, dtype):
    """A case running fn(a, b, c) on 1,024 seeded elements each, in `dtype`: a of about 3 times
    the unit normal, b unit normal, c uniform in [0.5, 1.5)."""
    def case(d):
        torch.manual_seed(0)
        a, b, c = torch.randn(1024) * 3, torch.randn(1024), torch.rand(1024) + 0.5
        return fn(*(t.to(dtype).to(d) for t in (a, b, c)))
    return case


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(BIT_EXACT_CASES))
def test_arithmetic_ops_match_cpu_bit_for_bit(name, dtype):
    check_like_cpu(on_three_random_operands(BIT_EXACT_CASES[name], dtype))


HALF_PRECISION_CASES = {
    # bfloat16's x ** 3 and x ** -2 round the square first (Vectorized<BFloat16> products); half
    # sigmoid_backward rounds each step (c10::Half arithmetic). The kernels rounded once.
    "cube": lambda a, b, c: a ** 3,
    "inverse square": lambda a, b, c: c ** -2,
    "square": lambda a, b, c: a.square(),
    "sigmoid_backward": lambda a, b, c: torch.ops.aten.sigmoid_backward(b, c - 0.5),
    "mul": lambda a, b, c: a * b,
    "div": lambda a, b, c: a / c,
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(HALF_PRECISION_CASES))
def test_half_precision_arithmetic_matches_cpu_bit_for_bit(name, dtype):
    check_like_cpu(on_three_random_operands(HALF_PRECISION_CASES[name], dtype))


BFLOAT16_STEP_CASES = {
    # ATen's bfloat16 kernels of these round every step (Vectorized<BFloat16>, c10's BFloat16
    # log); the kernels rounded once (silu(0.75) gave 0.5078125, ATen 0.51171875). They now run
    # ATen's kernel on device memory.
    "silu": lambda a, b, c: torch.nn.functional.silu(a),
    "gelu": lambda a, b, c: torch.nn.functional.gelu(a),
    "gelu_backward": lambda a, b, c: torch.ops.aten.gelu_backward(b, a),
    "xlogy": lambda a, b, c: torch.xlogy(a, c),
}


@pytest.mark.parametrize("name", sorted(BFLOAT16_STEP_CASES))
def test_bfloat16_ops_aten_rounds_step_by_step_match_cpu_bit_for_bit(name):
    for _ in range(3):
        check_like_cpu(on_three_random_operands(BFLOAT16_STEP_CASES[name], torch.bfloat16))


def test_half_square_root_power_is_correctly_rounded_like_cpu():
    # ATen's half x ** 0.5 is glibc's powf, correctly rounded; libmvec's vector powf is an ulp
    # off at times, which put 3.998046875 ** 0.5 on a half midpoint (2.0, ATen 1.9990234375).
    def case(d):
        torch.manual_seed(0)
        special = torch.tensor([-0.0, 0.0, -math.inf, math.inf, NAN, -1.0, 3.998046875,
                                0.062469482421875, 6e-8])
        x = torch.cat([special, torch.rand(4096) * 100]).half().to(d)
        return x ** 0.5
    for _ in range(3):
        check_like_cpu(case)


@pytest.mark.parametrize("exponent", [3.0, -2.0, 2.0, -1.0, 0.5])
def test_a_zero_dim_tensor_exponent_is_not_specialized_like_a_number(exponent):
    # pow.Tensor_Tensor: ATen calls pow itself where pow.Tensor_Scalar takes products, square
    # roots and reciprocals (bfloat16 x ** tensor(3.) was an ulp off on 12 of 64 elements).
    # bfloat16 only: in float32 and float64 ATen's vector pow (Sleef) and the kernels' (libmvec)
    # may differ by an ulp whatever the kernel does.
    dtype = torch.bfloat16

    def case(d):
        torch.manual_seed(0)
        x = (torch.randn(256) * 4).to(dtype).to(d)
        return torch.pow(x, torch.tensor(exponent)), x.clone().pow_(torch.tensor(exponent))
    for _ in range(3):
        check_like_cpu(case)


SUB_FORMS = {
    "sub": lambda x, y, alpha: torch.sub(x, y, alpha=alpha),
    "sub_": lambda x, y, alpha: x.sub_(y, alpha=alpha),
    "sub out=": lambda x, y, alpha: torch.sub(x, y, alpha=alpha, out=torch.empty_like(x)),
    "rsub": lambda x, y, alpha: torch.rsub(x, y, alpha=alpha),
}


@pytest.mark.parametrize("form", sorted(SUB_FORMS))
@pytest.mark.parametrize("dtype, alpha", [(torch.int32, 2**31), (torch.int32, -2**31),
                                          (torch.int8, 128), (torch.int8, -128),
                                          (torch.float32, -2**63), (torch.float64, -2**63)])
def test_sub_checks_and_takes_negated_alpha_like_aten(form, dtype, alpha):
    # ATen's sub is add with -alpha: -alpha is what must fit the dtype (int32 alpha 2**31
    # computes, -2**31 raises), negated as an int64 (-(-2**63) wraps to -2**63).
    def case(d):
        x = torch.tensor([1, 2, 0, 3], device=d).to(dtype)
        return SUB_FORMS[form](x, torch.tensor([1, 2, 0, 3], device=d).to(dtype), alpha)
    for _ in range(3):
        check_like_cpu(case)


def threshold_base(d):
    return torch.tensor([-1.0, 0.25, 2.0, 0.75], device=d)


def written(fn):
    """The case's base tensor after fn(base) writes through a view of it."""
    def case(d):
        base = threshold_base(d)
        fn(base)
        return base
    return case


THRESHOLD_OVERLAPS = {
    # ATen builds threshold and its backward without memory-overlap checks ("threshold is
    # idempotent") and writes these; the device raised the internal- or partial-overlap error.
    "in place into expanded": written(
        lambda b: torch.nn.functional.threshold_(b.expand(3, 4), 0.5, 9.0)),
    "out= expanded": written(lambda b: torch.threshold(b, 0.5, 9.0, out=b[:1].expand(4))),
    "out= shifted": written(lambda b: torch.threshold(b[:-1], 0.5, 9.0, out=b[1:])),
    "backward out= shifted": written(lambda b: torch.ops.aten.threshold_backward(
        b[:-1], b[:-1], 0.5, grad_input=b[1:])),
}


@pytest.mark.parametrize("name", sorted(THRESHOLD_OVERLAPS))
def test_threshold_writes_overlapping_outputs_like_cpu(name):
    for _ in range(3):
        assert check_like_cpu(THRESHOLD_OVERLAPS[name])[0] == "value"


def interleaved_blocks(d, first, second):
    """In place between two column blocks of one 4 x 6 matrix (what a GRU cell does with its
    gates): disjoint blocks run compiled; straddling ones share elements, and the CPU's element
    order decides (the device runs them on the CPU)."""
    m = torch.arange(24.0, device=d).reshape(4, 6)
    m[:, first:first + 2].mul_(m[:, second:second + 2])
    return m


@pytest.mark.parametrize("first,second", [(4, 0), (0, 2), (2, 4), (0, 1), (1, 0), (3, 2)])
def test_in_place_between_column_blocks_of_one_matrix_like_cpu(first, second):
    before = torchneuron.metrics()["launches"]["fallback"]
    check_like_cpu(lambda d: interleaved_blocks(d, first, second))
    disjoint = abs(first - second) >= 2
    assert (torchneuron.metrics()["launches"]["fallback"] == before) == disjoint
