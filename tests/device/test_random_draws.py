"""Random ops drawn in bulk (src/device/library_random.cpp): bernoulli_(p) with a scalar p
(dropout's mask) and uniform_ (torch.rand, nn.init) on float32 and float64 device tensors draw
PyTorch's CPU generator in bulk (mt19937_stream.h), and must give the CPU kernel's numbers bit
for bit and leave the generator where the CPU's kernel leaves it, from any position of the
engine's 624-word state, across its regenerations, for any p in [0, 1] or bounds ATen accepts,
and for a torch.Generator of the caller's. Everything else (other dtypes, non-contiguous
tensors, arguments ATen rejects, another device's generator) takes ATen's own kernel, errors
included."""

import re
import struct

import pytest
import torch

import torchneuron

# Sizes around one state's words (624 words, 312 elements), the kernel's chunk (2048 elements),
# and dropout's (64 x 64 x 12 x 12 in cnn-mnist-train).
SIZES = [1, 2, 311, 312, 313, 624, 625, 2047, 2048, 2049, 4097, 589824]
# Ends, halves, p whose p * 2^53 is an integer and ones it is not, subnormal, just below 1.
PS = [0.0, 1.0, 0.5, 0.75, 0.3, 1e-300, 5e-324, 0.1 + 1e-17, 1 - 2 ** -53, 2 ** -53, 3 * 2 ** -53]


def draw_both(fill, dtype, size, p, skip, dev, generator=None):
    """Seeds, draws `skip` words' worth with torch.rand, runs bernoulli_ on the CPU and on the
    device from the same state; returns both masks and what each generator draws next."""
    results = []
    for device in ("cpu", dev):
        gen = None
        if generator is not None:
            gen = torch.Generator().manual_seed(generator)
        torch.manual_seed(1234 + size)
        torch.rand(skip, generator=gen)  # one word each: the engine sits mid-state
        mask = torch.full((size,), fill, dtype=dtype, device=device).bernoulli_(p, generator=gen)
        after = torch.rand(7, generator=gen)
        results.append((mask.cpu(), after))
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", SIZES)
def test_the_mask_and_the_generator_after_it_equal_the_cpus(dev, dtype, size):
    for p in PS:
        for skip in (0, 1, 311, 623):
            (cpu, cpu_after), (device, device_after) = draw_both(7.0, dtype, size, p, skip, dev)
            assert torch.equal(device, cpu), (dtype, size, p, skip)
            assert torch.equal(device_after, cpu_after), (dtype, size, p, skip)


def test_the_fast_path_runs_and_draws_a_fair_mask(dev):
    torchneuron.reset_metrics()
    mask = torch.empty(1 << 20, device=dev).bernoulli_(0.25)
    launches = torchneuron.metrics()["ops"]["library"]
    assert launches.get("aten::bernoulli_.float") == 1
    # 2^20 draws of p = 1/4: the mean is within 6 standard deviations (1/2^11 * 0.43) of 1/4.
    assert abs(mask.mean().item() - 0.25) < 6 * 0.433 / 1024
    assert set(mask.unique().tolist()) == {0.0, 1.0}


def test_a_generator_of_the_callers_is_drawn_and_the_default_one_is_not(dev):
    for size in (5, 313, 3000):
        (cpu, cpu_after), (device, device_after) = draw_both(0.0, torch.float32, size, 0.4, 17,
                                                             dev, generator=99)
        assert torch.equal(device, cpu) and torch.equal(device_after, cpu_after)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    torch.empty(1000, device=dev).bernoulli_(0.5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.get_rng_state(), before)


def test_a_restored_rng_state_replays_the_same_mask(dev):
    torch.manual_seed(3)
    torch.rand(100)
    state = torch.get_rng_state()
    first = torch.empty(5000, device=dev).bernoulli_(0.6).cpu()
    torch.set_rng_state(state)
    second = torch.empty(5000, device=dev).bernoulli_(0.6).cpu()
    torch.set_rng_state(state)
    on_cpu = torch.empty(5000).bernoulli_(0.6)
    assert torch.equal(first, second) and torch.equal(first, on_cpu)


@pytest.mark.parametrize("make", [
    lambda d: torch.zeros(300, dtype=torch.float16, device=d),
    lambda d: torch.zeros(300, dtype=torch.bfloat16, device=d),
    lambda d: torch.zeros(300, dtype=torch.int32, device=d),
    lambda d: torch.zeros(300, dtype=torch.bool, device=d),
    lambda d: torch.zeros(30, 20, device=d).t(),
    lambda d: torch.zeros(600, device=d)[::2],
], ids=["float16", "bfloat16", "int32", "bool", "transposed", "strided"])
def test_other_tensors_take_atens_kernel_with_the_same_numbers(dev, make):
    torch.manual_seed(11)
    try:
        on_cpu = make("cpu").bernoulli_(0.35)
    except RuntimeError as error:  # float16: ATen has no CPU kernel; the device says the same
        with pytest.raises(RuntimeError, match=re.escape(str(error))):
            make(dev).bernoulli_(0.35)
        return
    torch.manual_seed(11)
    on_device = make(dev).bernoulli_(0.35)
    assert on_device.stride() == on_cpu.stride()
    assert torch.equal(on_device.cpu(), on_cpu)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_a_p_outside_zero_one_raises_atens_error_and_changes_nothing(dev, p):
    x = torch.full((100,), 3.0, device=dev)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    with pytest.raises(RuntimeError, match="bernoulli_ expects p to be in"):
        x.bernoulli_(p)
    assert torch.equal(x.cpu(), torch.full((100,), 3.0))
    assert torch.equal(torch.get_rng_state(), before)


def test_an_empty_tensor_draws_nothing(dev):
    torch.manual_seed(0)
    before = torch.get_rng_state()
    assert torch.empty(0, device=dev).bernoulli_(0.5).numel() == 0
    assert torch.equal(torch.get_rng_state(), before)


def test_dropout_in_training_draws_the_cpus_mask_and_gradient(dev):
    x = torch.randn(64, 64, 12, 12)
    torch.manual_seed(8)
    a = x.clone().requires_grad_()
    torch.nn.functional.dropout(a, 0.25, training=True).sum().backward()
    torch.manual_seed(8)
    b = x.to(dev).requires_grad_()
    out = torch.nn.functional.dropout(b, 0.25, training=True)
    out.sum().backward()
    torch.manual_seed(8)
    assert torch.equal(out.detach().cpu(), torch.nn.functional.dropout(x, 0.25, training=True))
    assert torch.equal(b.grad.cpu(), a.grad)


# uniform_: torch.rand's and nn.init's. Bounds: the unit interval, symmetric and shifted ones,
# one where from == to, tiny and huge ones (the float range just inside what ATen accepts).
BOUNDS = [(0.0, 1.0), (-1.0, 1.0), (-0.1, 0.1), (3.5, 7.25), (-1e-3, 2e5), (0.3, 0.3),
          (1e-30, 1e-29), (-1e38, 1e38)]


def uniform_both(dtype, size, bounds, skip, dev):
    results = []
    for device in ("cpu", dev):
        torch.manual_seed(4321 + size)
        torch.rand(skip)
        x = torch.full((size,), 9.0, dtype=dtype, device=device).uniform_(*bounds)
        results.append((x.cpu(), torch.rand(7)))
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", SIZES)
def test_uniform_draws_equal_the_cpus_and_so_does_the_generator_after(dev, dtype, size):
    """Each element as ATen rounds it (its kernel's build for this CPU fuses the multiply-add or
    not; the device asks ATen which, library_random.cpp)."""
    for bounds in BOUNDS:
        for skip in (0, 1, 623):
            (cpu, cpu_after), (device, device_after) = uniform_both(dtype, size, bounds, skip, dev)
            assert torch.equal(device, cpu), (dtype, size, bounds, skip)
            assert torch.equal(device_after, cpu_after), (dtype, size, bounds, skip)


def test_uniform_runs_on_the_fast_path_for_rand_and_init(dev):
    torchneuron.reset_metrics()
    torch.manual_seed(2)
    layer = torch.nn.Linear(768, 3072, device=dev)  # kaiming_uniform_ and the bias's uniform_
    r = torch.rand(1000, device=dev)
    torch.manual_seed(2)
    cpu_layer = torch.nn.Linear(768, 3072)
    assert torch.equal(layer.weight.detach().cpu(), cpu_layer.weight.detach())
    assert torch.equal(layer.bias.detach().cpu(), cpu_layer.bias.detach())
    assert torch.equal(r.cpu(), torch.rand(1000))
    assert torchneuron.metrics()["ops"]["library"].get("aten::uniform_") == 3


@pytest.mark.parametrize("bounds, message", [
    ((1.0, 0.0), "uniform_ expects to return a"),
    ((float("-inf"), 0.0), "from"),
    ((0.0, float("inf")), "to"),
    ((-3e38, 3e38), "to-from"),
    ((float("nan"), 1.0), "from"),
])
def test_uniform_bounds_atens_rejects_raise_its_error_and_change_nothing(dev, bounds, message):
    x = torch.full((50,), 2.0, device=dev)
    with pytest.raises(RuntimeError) as on_cpu:
        torch.full((50,), 2.0).uniform_(*bounds)
    assert message in str(on_cpu.value)
    before = torch.get_rng_state()
    with pytest.raises(RuntimeError, match=re.escape(str(on_cpu.value).splitlines()[0])):
        x.uniform_(*bounds)
    assert torch.equal(x.cpu(), torch.full((50,), 2.0))
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("make", [
    lambda d: torch.zeros(300, dtype=torch.float16, device=d),
    lambda d: torch.zeros(300, dtype=torch.bfloat16, device=d),
    lambda d: torch.zeros(30, 20, device=d).t(),
    lambda d: torch.zeros(600, dtype=torch.float64, device=d)[::3],
], ids=["float16", "bfloat16", "transposed", "strided"])
def test_uniform_of_other_tensors_takes_atens_kernel_with_the_same_numbers(dev, make):
    torch.manual_seed(12)
    on_cpu = make("cpu").uniform_(-2, 3)
    torch.manual_seed(12)
    on_device = make(dev).uniform_(-2, 3)
    assert torch.equal(on_device.cpu(), on_cpu)


def test_uniform_from_a_generator_of_the_callers(dev):
    for device in ("cpu", dev):
        torch.manual_seed(0)
        before = torch.get_rng_state()
        gen = torch.Generator().manual_seed(77)
        drawn = torch.empty(5000, device=device).uniform_(-1, 2, generator=gen).cpu()
        assert torch.equal(torch.get_rng_state(), before)
        if device == "cpu":
            want = drawn
    assert torch.equal(drawn, want)


def crafted_rng_state(left, next_word):
    """The default generator's state with the engine's `left` and `next` fields rewritten (its
    legacy layout: seed at 0, left at 8, seeded at 12, next at 16), as torch.set_rng_state takes
    it."""
    torch.manual_seed(5)
    torch.rand(10)
    raw = bytearray(torch.get_rng_state().numpy().tobytes())
    struct.pack_into("<i", raw, 8, left)
    struct.pack_into("<Q", raw, 16, next_word)
    return torch.tensor(list(raw), dtype=torch.uint8)


@pytest.mark.parametrize("left, next_word", [(5, 100), (1, 624), (1, 0), (624, 0), (300, 3),
                                             (624, 2)])
def test_states_set_by_hand_draw_as_on_the_cpu(dev, left, next_word):
    """Every engine state torch.set_rng_state accepts gives the CPU's numbers, including one the
    bulk draw does not continue (left 624 with next 2: its words run past the state's end, where
    ATen's kernel, which runs instead, reads out of bounds too; so only 300 words are drawn)."""
    state = crafted_rng_state(left, next_word)
    results = []
    for device in ("cpu", dev):
        torch.set_rng_state(state)
        mask = torch.zeros(75, device=device).bernoulli_(0.5).cpu()
        drawn = torch.zeros(150, device=device).uniform_(-1, 1).cpu()
        results.append((mask, drawn, torch.get_rng_state()))
    for on_cpu, on_device in zip(*results):
        assert torch.equal(on_cpu, on_device)
