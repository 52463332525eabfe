"""Vector math on inputs outside a function's ordinary range (src/fusion/guarded_math.cpp):
`log`, `log2` and `log10` pass only positive finite lanes to glibc's vector function and select
the results of zeros, negatives, infinities and NaN after it; `exp` selects 0 for arguments
whose result is 0 (`sigmoid` and `silu` call exp plainly, checked here too); `pow` takes a
negative base's magnitude. Each case checks the
device against the CPU: the special values exactly where they fall (vector body and tail),
ordinary values within float rounding, in every float dtype the CPU computes, in place, and in
adaptive mode inside a fused chain."""

import pytest
import torch
import torchneuron

from conftest import assert_same, launched_since, launches_now

SPECIALS = [0.0, -0.0, -1.0, -1e-30, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40,
            3.4e38, 1.0, 2.0, 0.5, 1e-30]
FUNCTIONS = [torch.log, torch.log2, torch.log10]


def sprinkled(count, dtype, specials, ordinary):
    """`count` values, half of them cycling through `specials` at random places, the others
    `ordinary(generator)` (float64 values)."""
    g = torch.Generator().manual_seed(count)
    values = ordinary(g)
    positions = torch.randperm(count, generator=g)[:count // 2]
    specials = torch.tensor(specials, dtype=torch.float64)
    values[positions] = specials[torch.arange(len(positions)) % len(specials)]
    return values.to(dtype)


def mixed(count, dtype):
    """Logarithm arguments: SPECIALS between ordinary positive values."""
    return sprinkled(count, dtype, SPECIALS,
                     lambda g: torch.rand(count, generator=g, dtype=torch.float64) * 10 + 0.01)


def on_both(dev, fn, x):
    before = launches_now()
    got = fn(x.to(dev))
    assert launched_since(before)["fallback"] == {}
    want = fn(x)
    assert_same(got, want, equal_nan=True)
    # The special results exactly: the same infinities and NaNs at the same places.
    got = got.cpu()
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.isinf() & (got > 0), want.isinf() & (want > 0))
    assert torch.equal(got.isinf() & (got < 0), want.isinf() & (want < 0))


@pytest.mark.parametrize("count", [1, 14, 15, 16, 17, 31, 33, 1000, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_logarithms_of_special_values_match_the_cpu(dev, fn, dtype, count):
    on_both(dev, fn, mixed(count, dtype))


def test_every_special_value_alone_matches_the_cpu(dev):
    for value in SPECIALS:
        for fn in FUNCTIONS:
            on_both(dev, fn, torch.full((37,), value))


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_in_place_logarithms_match_the_cpu(dev, fn):
    in_place = {torch.log: torch.Tensor.log_, torch.log2: torch.Tensor.log2_,
                torch.log10: torch.Tensor.log10_}[fn]
    on_both(dev, lambda t: in_place(t.clone()), mixed(1000, torch.float32))


def test_a_nan_or_negative_input_gives_a_quiet_nan(dev):
    """A signalling NaN (exponent all ones, quiet bit clear) must come back quiet, as IEEE 754 and
    ATen's kernel have it; negatives give a NaN too."""
    bits = [0x7F800001, 0x7F812345, 0xFF812345, 0x7FC12345, 0xBF800000, 0x80812345]
    # signalling NaNs (a negative one too), a quiet one, -1.0, a tiny negative
    bits = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in bits], dtype=torch.int32)
    x = bits.view(torch.float32)
    for fn in FUNCTIONS:
        got = fn(x.to(dev)).cpu()
        assert bool(got.isnan().all()), (fn.__name__, got)
        quiet = got.view(torch.int32) & 0x00400000
        assert bool((quiet != 0).all()), (fn.__name__, [hex(b) for b in got.view(torch.int32).tolist()])


def test_integer_inputs_compute_in_float_as_on_the_cpu(dev):
    x = torch.tensor([-3, -1, 0, 1, 2, 1000] * 7)
    for fn in FUNCTIONS:
        on_both(dev, fn, x)


def test_a_fused_chain_with_a_logarithm_matches_the_cpu(dev):
    x = mixed(70000, torch.float32)
    expected = (torch.log(x * 2.0) + 1.0) * 0.5
    d = x.to(dev)
    with torchneuron.adaptive(True):
        for _ in range(4):  # cold, hot, then replayed as fused kernels
            got = (torch.log(d * 2.0) + 1.0) * 0.5
        torchneuron.synchronize()
    assert_same(got, expected, equal_nan=True)


EXP_SPECIALS = [float("-inf"), float("inf"), float("nan"), -1e30, 1e30, -104.5, -104.0, -103.97,
                -100.0, -90.0, -87.5, -87.33, -0.0, 0.0, 1.0, 87.3, 87.5, 88.0, 88.7228, 88.72284,
                89.0, -745.5, -745.1, -720.0, -708.5, 708.5, 709.78, 709.79]
EXP_FUNCTIONS = [torch.exp, torch.sigmoid, torch.nn.functional.silu]


def exp_mixed(count, dtype):
    """Exponent arguments: EXP_SPECIALS between ordinary values."""
    return sprinkled(count, dtype, EXP_SPECIALS,
                     lambda g: torch.randn(count, generator=g, dtype=torch.float64) * 5)


@pytest.mark.parametrize("count", [1, 15, 16, 17, 33, 1000, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("fn", EXP_FUNCTIONS, ids=lambda f: f.__name__)
def test_exponentials_of_special_values_match_the_cpu(dev, fn, dtype, count):
    x = exp_mixed(count, dtype)
    on_both(dev, fn, x)
    # Results that underflow to zero do so on both (a subnormal is within any float tolerance).
    assert torch.equal(fn(x.to(dev)).cpu() == 0, fn(x) == 0)


def test_every_exponent_special_value_alone_matches_the_cpu(dev):
    for value in EXP_SPECIALS:
        for fn in EXP_FUNCTIONS + [torch.Tensor.exp_]:
            for dtype in (torch.float32, torch.float64):
                x = torch.full((37,), value, dtype=dtype)
                on_both(dev, lambda t: fn(t.clone()), x)
                assert torch.equal(fn(x.to(dev).clone()).cpu() == 0, fn(x.clone()) == 0), value


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exp_beyond_the_vector_range_is_within_an_ulp_or_two(dev, dtype):
    # Results that are subnormal or near the overflow (the scalar path) and those the guard
    # selects: against the exact value (float64 for float32; ATen's for float64).
    low, high = (-104.0, 88.72) if dtype == torch.float32 else (-745.0, 709.78)
    x = torch.cat([torch.linspace(low, low + 17, 50001, dtype=torch.float64),
                   torch.linspace(high - 1.5, high, 50001, dtype=torch.float64)]).to(dtype)
    got = x.to(dev).exp().cpu().double()
    exact = x.double().exp() if dtype == torch.float32 else x.exp()
    tiny = 2.0 ** -149 if dtype == torch.float32 else 2.0 ** -1074
    bits = 24 if dtype == torch.float32 else 53
    spacing = torch.ldexp(torch.ones_like(exact), torch.frexp(exact)[1] - bits).clamp_min(tiny)
    assert ((got - exact).abs() / spacing).max().item() <= 4.0


def test_a_fused_chain_with_an_exponential_of_a_mask_matches_the_cpu(dev):
    x = exp_mixed(70000, torch.float32)
    mask = torch.arange(70000) % 3 == 0
    expected = torch.exp(x.masked_fill(mask, float("-inf")) * 0.5) + 1.0
    d, m = x.to(dev), mask.to(dev)
    with torchneuron.adaptive(True):
        for _ in range(4):  # cold, hot, then replayed as fused kernels
            got = torch.exp(d.masked_fill(m, float("-inf")) * 0.5) + 1.0
        torchneuron.synchronize()
    assert_same(got, expected, equal_nan=True)


POW_BASES = [-3.5, -2.0, -1.0, -0.5, -1e-30, -1e-40, -0.0, 0.0, 1e-40, 0.5, 1.0, 2.0, 3.5, -1e30,
             float("-inf"), float("inf"), float("nan")]
POW_EXPONENTS = [4.0, 5.0, 2.5, -3.0, -4.0, -2.5, 1 / 3, 7.0, 100.0, 101.0, 2.0 ** 23 + 1,
                 2.0 ** 24, 2.0 ** 60 + 2.0 ** 40, float("inf"), float("-inf"), 1e-3]
# A NaN exponent as a number runs on the CPU (the registry checks scalar operands); as a tensor
# element it is compiled (test_powers_with_a_tensor_exponent_match_the_cpu).


def pow_bases(count, dtype):
    """Bases: POW_BASES between ordinary values of both signs."""
    return sprinkled(count, dtype, POW_BASES,
                     lambda g: torch.randn(count, generator=g, dtype=torch.float64) * 3)


@pytest.mark.parametrize("exponent", POW_EXPONENTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_powers_of_negative_and_special_bases_match_the_cpu(dev, exponent, dtype):
    # A finite negative base: the power of its magnitude, negated for an odd integer exponent,
    # NaN for an exponent that is not an integer (src/fusion/guarded_math.cpp, guardedPow).
    x = pow_bases(1000, dtype)
    on_both(dev, lambda t: torch.pow(t, exponent), x)
    got, want = torch.pow(x.to(dev), exponent).cpu(), torch.pow(x, exponent)
    number = ~want.isnan()  # a NaN's sign is not part of the result
    assert torch.equal(got == 0, want == 0), exponent
    assert torch.equal(got.signbit()[number], want.signbit()[number]), exponent


def test_powers_with_a_tensor_exponent_match_the_cpu(dev):
    x = pow_bases(4099, torch.float32)
    y = torch.tensor(POW_EXPONENTS + [float("nan")], dtype=torch.float32).repeat(300)[:4099]
    before = launches_now()
    got = torch.pow(x.to(dev), y.to(dev))
    launched = launched_since(before)
    assert launched["fallback"] == {}
    want = torch.pow(x, y)
    assert_same(got, want, equal_nan=True)
    got = got.cpu()
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.signbit()[~want.isnan()],
                                                                   want.signbit()[~want.isnan()])


def test_in_place_power_of_negative_bases_matches_the_cpu(dev):
    x = pow_bases(1000, torch.float32)
    on_both(dev, lambda t: t.clone().pow_(3.0), x)  # 3 is a product, not powf
    on_both(dev, lambda t: t.clone().pow_(5.0), x)
    on_both(dev, lambda t: t.clone().pow_(0.75), x)
