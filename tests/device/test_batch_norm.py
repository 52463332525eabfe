"""native_batch_norm and its backward as compiled kernels (src/device/compiled_batch_norm.cpp): a
channel's statistics, the normalized output, the running statistics and the gradients as the
CPU's (its float32 sums are float64 here, as ATen's are), in training and evaluation, with and
without weight, bias and running statistics, in any layout; the calls it declines (half and
bfloat16, parameters of another dtype, training rows of one element) keep the library route with
the CPU's results and errors; evaluation without running statistics is an error naming them,
where ATen's CPU kernel crashes."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchneuron

from conftest import assert_same, launched_since, launches_now


g = torch.Generator().manual_seed(0)


def batch(shape, dtype=torch.float32, scale=3.0, shift=1.0):
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).to(dtype)


def normalize_on_both(dev, x, training, affine=True, stats=True, momentum=0.1, eps=1e-5,
                      tolerance=None):
    """Batch-normalizes x forward and backward on the CPU and on the device; asserts equal
    outputs, running statistics and gradients (and the output's strides); returns the device's
    launches by kind."""
    channels = x.shape[1]
    params = [batch((channels,), x.dtype) if affine else None for _ in range(2)]
    running = [batch((channels,), x.dtype, 1.0, 0.0), batch((channels,), x.dtype, 0.5, 1.5).abs()]
    if not stats:
        running = [None, None]

    def run(device):
        leaf = lambda t: None if t is None else t.detach().to(device).requires_grad_()  # noqa: E731
        xs, weight, bias = leaf(x), leaf(params[0]), leaf(params[1])
        mean, var = [None if t is None else t.to(device) for t in running]
        y = F.batch_norm(xs, mean, var, weight, bias, training, momentum, eps)
        y.backward(torch.linspace(-2, 2, y.numel(), dtype=x.dtype).view(y.shape).to(device))
        return y, [t for t in (mean, var) if t is not None], [
            t.grad for t in (xs, weight, bias) if t is not None]

    before = launches_now()
    y, running_dev, grads_dev = run(dev)
    torchneuron.synchronize()
    launched = launched_since(before)
    y_cpu, running_cpu, grads_cpu = run("cpu")
    tol = tolerance or ({"rtol": 1e-5, "atol": 2e-5} if x.dtype == torch.float32 else {})
    assert y.stride() == y_cpu.stride()
    assert_same(y.detach(), y_cpu.detach(), **tol)
    for d, c in zip(running_dev + grads_dev, running_cpu + grads_cpu):
        assert_same(d, c, **tol)
    assert launched["fallback"] == {}
    return launched


def compiled(launched):
    return {op for op in launched["compiled"] if "batch_norm" in op}


# Channel rows that run contiguously for 32 elements or more: the compiled kernels.
SHAPES = {
    "nchw": (8, 4, 6, 6),
    "sequence": (4, 3, 40),
    "volumes": (2, 3, 4, 3, 5),
    "one_channel": (16, 1, 3, 3),  # the batch continues the plane: one run of 144
    # Channels between batch and plane take blocked rows (ReductionSignature::blocked_rows) in
    # blocks of 64: three blocks, the last of 2 channels.
    "blocks": (3, 130, 6, 6),
}
# Shorter runs, or none (channels innermost), take ATen's kernel: the row kernel's vectorized
# loop would leave them to its scalar remainder (BatchNorm1d over [256, 1024] was 30x slower).
SHORT_RUNS = {
    "linear": (32, 5),
    "short_sequence": (4, 3, 10),
    "planes_4x4": (8, 4, 4, 4),
}


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_batch_norm_forward_and_backward_match_the_cpu(dev, shape, training, dtype):
    launched = normalize_on_both(dev, batch(shape, dtype), training)
    if training:
        assert compiled(launched) == {"aten::native_batch_norm",
                                      "aten::native_batch_norm_backward"}, launched
    else:  # evaluation: a scale and a shift, then elementwise kernels; backward one reduction
        assert "aten::native_batch_norm_backward" in compiled(launched), launched
    assert not any("batch_norm" in op for op in launched["library"]), launched


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("x", [*(batch(s) for s in SHORT_RUNS.values()),
                               batch((4, 6, 8, 8)).to(memory_format=torch.channels_last)],
                         ids=[*SHORT_RUNS.keys(), "channels_last"])
def test_short_channel_runs_take_atens_kernel(dev, x, training):
    launched = normalize_on_both(dev, x, training)
    assert compiled(launched) == set(), launched
    assert "aten::native_batch_norm_backward" in launched["library"], launched


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("affine,stats", [(False, True), (True, False), (False, False)],
                         ids=["no_affine", "no_running_stats", "neither"])
def test_absent_parameters_and_statistics(dev, training, affine, stats):
    if not training and not stats:
        pytest.skip("evaluation needs running statistics (test_eval_without_running_statistics)")
    normalize_on_both(dev, batch((6, 3, 6, 6)), training, affine=affine, stats=stats)


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_strided_inputs_keep_the_cpu_layout(dev, training):
    for x in (batch((6, 10, 8, 5))[:, ::2],  # channels strided
              batch((6, 5, 8, 7)).transpose(2, 3)):  # the plane transposed: one run of 56
        assert compiled(normalize_on_both(dev, x, training))


def test_momentum_and_eps_are_used(dev):
    normalize_on_both(dev, batch((8, 3, 40)), True, momentum=0.7, eps=0.5)
    normalize_on_both(dev, batch((8, 3, 40)), False, eps=2.0)


@pytest.mark.parametrize("momentum", [1e39, -1e39, 3.5e38])
def test_a_momentum_beyond_float_updates_the_statistics_as_aten(dev, momentum):
    # ATen updates the running statistics in double; the compiled update's mul_ and add_ raised
    # converting momentum or 1 - momentum to float32. Three calls: planned, then replayed.
    for _ in range(3):
        normalize_on_both(dev, batch((8, 3, 40)), True, momentum=momentum,
                          tolerance={"rtol": 1e-5, "atol": 2e-5, "equal_nan": True})


def test_channels_far_from_zero_keep_their_precision(dev):
    # Mean 1000, deviation 1: a float32 sum of squares around zero would lose the variance. What
    # is left is the float32 mean's rounding, half an ulp of 1000 (3.05e-5) times invstd (~1),
    # which ATen's result has too.
    x = batch((64, 3, 8, 8), torch.float32, scale=1.0, shift=1000.0)
    y = F.batch_norm(x.to(dev), None, None, training=True)
    exact = F.batch_norm(x.double(), None, None, training=True)
    assert (y.cpu().double() - exact).abs().max() < 4e-5


def test_one_element_rows_keep_the_library_route(dev):
    # A training row of one element: ATen's running variance is NaN (0/0); the device declines.
    x, mean, var = batch((1, 4)), torch.zeros(4), torch.ones(4)
    mean_d, var_d = mean.to(dev), var.to(dev)
    before = launches_now()
    y = torch.native_batch_norm(x.to(dev), None, None, mean_d, var_d, True, 0.1, 1e-5)[0]
    launched = launched_since(before)
    y_cpu = torch.native_batch_norm(x, None, None, mean, var, True, 0.1, 1e-5)[0]
    assert_same(y, y_cpu, atol=1e-5, rtol=0)
    assert_same(var_d, var, equal_nan=True)
    assert_same(mean_d, mean)
    assert launched["library"] == {"aten::native_batch_norm": 1} and launched["fallback"] == {}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_precision_keeps_the_library_route(dev, dtype):
    x = batch((4, 3, 5), torch.bfloat16 if dtype == torch.bfloat16 else torch.float32)
    if dtype == torch.float16:
        with pytest.raises(RuntimeError) as cpu_error:
            F.batch_norm(x.half(), None, None, training=True)
        with pytest.raises(RuntimeError) as dev_error:
            F.batch_norm(x.half().to(dev), None, None, training=True)
        assert str(dev_error.value) == str(cpu_error.value)
        return
    before = launches_now()
    y = F.batch_norm(x.to(dev), None, None, training=True)
    launched = launched_since(before)
    assert_same(y, F.batch_norm(x, None, None, training=True), rtol=0, atol=0)
    assert launched["library"] == {"aten::native_batch_norm": 1} and launched["fallback"] == {}


def test_parameters_of_another_dtype_raise_the_cpus_error(dev):
    x = batch((4, 3, 5), torch.float64)
    weight = torch.ones(3)  # float32
    with pytest.raises(RuntimeError) as cpu_error:
        torch.native_batch_norm(x, weight, None, None, None, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError) as dev_error:
        torch.native_batch_norm(x.to(dev), weight.to(dev), None, None, None, True, 0.1, 1e-5)
    assert str(dev_error.value) == str(cpu_error.value)


def test_eval_without_running_statistics_is_an_error_naming_them(dev):
    # ATen's CPU kernels dereference the missing tensors (a segmentation fault in 1.13).
    x = batch((4, 3, 5)).to(dev)
    with pytest.raises(RuntimeError, match="running_mean and running_var must be given"):
        torch.native_batch_norm(x, None, None, None, None, False, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="native_batch_norm_backward: running_mean and"):
        torch.ops.aten.native_batch_norm_backward(torch.ones_like(x), x, None, None, None, None,
                                                  None, False, 1e-5, [True, True, True])


def test_expanded_running_statistics_take_atens_kernel(dev):
    # The in-place update cannot write a tensor whose elements overlap; ATen's kernel can.
    x = batch((4, 3, 40))
    running = [torch.zeros(1).expand(3), torch.ones(1).expand(3)]
    y_cpu = torch.native_batch_norm(x, None, None, *running, True, 0.1, 1e-5)[0]
    before = launches_now()
    running_dev = [torch.zeros(1, device=dev).expand(3), torch.ones(1, device=dev).expand(3)]
    y = torch.native_batch_norm(x.to(dev), None, None, *running_dev, True, 0.1, 1e-5)[0]
    assert_same(y, y_cpu, rtol=1e-5, atol=2e-5)
    for d, c in zip(running_dev, running):
        assert_same(d, c)
    assert launched_since(before)["library"] == {"aten::native_batch_norm": 1}


def test_blocked_rows_split_over_two_threads_match_the_cpu(dev):
    # Large enough for the launch to cut the 150 channels into parts for both threads
    # (launcher/parallel_launch.cpp: parts of 18 here), so a kernel's blocks of channels start
    # where a part starts, not at multiples of 64.
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        # A channel's row is 6400 elements here, and ATen sums the bias and weight gradients in
        # float32 (about 5e-4 from the float64 sum): the tolerance covers that, not the device.
        launched = normalize_on_both(dev, batch((4, 150, 40, 40)), training=True,
                                     tolerance={"rtol": 1e-4, "atol": 2e-3})
    finally:
        torch.set_num_threads(saved)
    assert compiled(launched) == {"aten::native_batch_norm", "aten::native_batch_norm_backward"}


def test_parameter_gradients_alone(dev):
    # Only the weight and bias need gradients (a frozen input): no input gradient is computed.
    x = batch((8, 3, 40))
    weight, bias = batch((3,)).requires_grad_(), batch((3,)).requires_grad_()
    w_d, b_d = [t.detach().to(dev).requires_grad_() for t in (weight, bias)]
    F.batch_norm(x, None, None, weight, bias, training=True).square().sum().backward()
    F.batch_norm(x.to(dev), None, None, w_d, b_d, training=True).square().sum().backward()
    assert_same(w_d.grad, weight.grad, rtol=1e-5, atol=2e-5)
    assert_same(b_d.grad, bias.grad, rtol=1e-5, atol=2e-5)


def test_double_backward_matches_the_cpu(dev):
    x = batch((6, 3, 40), torch.float64).requires_grad_()
    weight = batch((3,), torch.float64).requires_grad_()
    x_d, w_d = [t.detach().to(dev).requires_grad_() for t in (x, weight)]

    def second_order(x, weight):
        y = F.batch_norm(x, None, None, weight, None, training=True)
        (gx,) = torch.autograd.grad(y.pow(3).sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), (x, weight))

    for d, c in zip(second_order(x_d, w_d), second_order(x, weight)):
        assert_same(d, c, rtol=1e-7, atol=1e-9)


def test_a_batch_norm_network_trains_as_on_the_cpu(dev):
    def net():
        torch.manual_seed(0)
        # BatchNorm1d over [8, 3] has no channel run: ATen's kernel (test_short_channel_runs_...).
        return nn.Sequential(nn.Conv2d(2, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.Flatten(), nn.Linear(4 * 10 * 10, 3), nn.BatchNorm1d(3))

    cpu, device = net(), net().to(dev)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (cpu, device)]
    before = launches_now()
    for step in range(4):
        x = batch((8, 2, 12, 12))
        for model, opt, place in ((cpu, opts[0], "cpu"), (device, opts[1], dev)):
            opt.zero_grad()
            model(x.to(place)).square().mean().backward()
            opt.step()
    launched = launched_since(before)
    for d, c in zip(device.state_dict().values(), cpu.state_dict().values()):
        assert_same(d, c, rtol=1e-4, atol=1e-5)
    assert compiled(launched) == {"aten::native_batch_norm", "aten::native_batch_norm_backward"}
    assert launched["fallback"] == {}
    device.eval()
    cpu.eval()
    x = batch((5, 2, 12, 12))
    assert_same(device(x.to(dev)), cpu(x), rtol=1e-5, atol=1e-5)


# Cases an adversarial review found (each failed before its fix).

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_eps_zero_on_a_constant_channel_gives_invstd_zero_as_aten(dev, dtype):
    # ATen's InvStd: 0 where the variance and eps are both 0, so y is the bias (not NaN).
    x = batch((4, 2, 40), dtype)
    x[:, 1] = 0.5
    bias = batch((2,), dtype)
    y, mean, invstd = torch.native_batch_norm(x.to(dev), None, bias.to(dev), None, None, True,
                                              0.1, 0.0)
    y_cpu, mean_cpu, invstd_cpu = torch.native_batch_norm(x, None, bias, None, None, True, 0.1,
                                                          0.0)
    assert invstd.cpu()[1] == 0 and invstd_cpu[1] == 0
    assert_same(y, y_cpu)
    assert_same(mean, mean_cpu)


def test_an_infinite_float64_element_gives_an_infinite_mean_as_aten(dev):
    x = batch((6, 3, 40), torch.float64)
    x[2, 1, 1] = float("inf")
    _, mean, _ = torch.native_batch_norm(x.to(dev), None, None, None, None, True, 0.1, 1e-5)
    _, mean_cpu, _ = torch.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    assert_same(mean, mean_cpu, equal_nan=True)
    assert mean.cpu()[1] == float("inf")


def layouts():
    cl = torch.channels_last
    g = torch.Generator().manual_seed(1)  # its own: called when the tests are collected
    return {
        "contiguous": torch.randn(4, 3, 8, 6, generator=g),
        "channels_last": torch.randn(4, 3, 8, 6, generator=g).to(memory_format=cl),
        # Size-1 dimensions: channels-last-contiguous, but suggested as the default format.
        "size_1_ambiguous": torch.randn(1, 2, 8, 1, generator=g).permute(0, 2, 3, 1),
        "size_1_ambiguous_batch": torch.randn(4, 16, 1, 5, generator=g).as_strided(
            (4, 16, 1, 5), (80, 1, 16, 16)),
        "transposed": torch.randn(4, 3, 6, 8, generator=g).transpose(2, 3),
        "channels_sliced": torch.randn(4, 6, 8, 6, generator=g)[:, ::2],
        "channels_last_sliced": torch.randn(4, 6, 8, 6, generator=g).to(memory_format=cl)[:, ::2],
        "channels_last_3d": torch.randn(2, 3, 4, 5, 6, generator=g).to(
            memory_format=torch.channels_last_3d),
    }


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("name", layouts().keys())
def test_results_are_laid_out_as_atens(dev, name, training):
    x = layouts()[name]
    c = x.shape[1]
    stats = [torch.zeros(c), torch.ones(c)]
    y_cpu, mean, invstd = torch.native_batch_norm(x, None, None, *stats, training, 0.1, 1e-5)
    y = torch.native_batch_norm(x.to(dev), None, None, *[s.to(dev) for s in stats], training, 0.1,
                                1e-5)[0]
    assert y.stride() == y_cpu.stride()
    assert_same(y, y_cpu, rtol=1e-5, atol=2e-5)
    saved = (mean, invstd) if training else (None, None)
    # The input gradient's layout depends on the output gradient's too.
    for grad in (torch.randn(y_cpu.shape, generator=g), torch.randn_like(y_cpu)):
        grad.copy_(torch.randn(grad.shape, generator=g))
        backward = lambda grad, x: torch.ops.aten.native_batch_norm_backward(  # noqa: E731
            grad, x, None, *stats, *saved, training, 1e-5, [True, False, False])[0]
        gi_cpu = backward(grad, x)
        on_dev = [None if t is None else t.to(dev) for t in (grad, x, None, *stats, *saved)]
        before = launches_now()
        gi = torch.ops.aten.native_batch_norm_backward(*on_dev, training, 1e-5,
                                                       [True, False, False])[0]
        library = bool(launched_since(before)["library"])  # short or no channel runs
        assert gi.stride() == gi_cpu.stride()
        # The compiled kernel's values against contiguous copies: ATen 1.13's kernel misreads a
        # gradient whose layout differs from the input's (the review found its bias gradient
        # wrong there). The library route runs that kernel: the CPU's values, right or wrong.
        expected = gi_cpu if library else backward(grad.contiguous(), x.contiguous())
        assert_same(gi, expected, rtol=1e-5, atol=2e-5)


def test_per_channel_tensors_of_another_shape_take_the_library_route(dev):
    x = batch((4, 3, 40))
    weight = batch((3, 1))
    mean, var = torch.zeros(3), torch.ones(3)
    y_cpu = F.batch_norm(x, mean, var, weight, None, False)
    before = launches_now()
    y = F.batch_norm(x.to(dev), mean.to(dev), var.to(dev), weight.to(dev), None, False)
    assert_same(y, y_cpu)
    assert launched_since(before)["library"] == {"aten::native_batch_norm": 1}
    # Running statistics of shape [3, 1]: ATen's error, and the statistics are left as they were.
    running = [torch.ones(3, 1), torch.ones(3, 1)]
    running_dev = [t.to(dev) for t in running]
    with pytest.raises(RuntimeError) as cpu_error:
        torch.native_batch_norm(x, None, None, *running, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError) as dev_error:
        torch.native_batch_norm(x.to(dev), None, None, *running_dev, True, 0.1, 1e-5)
    assert str(dev_error.value) == str(cpu_error.value)
    for d, c in zip(running_dev, running):
        assert_same(d, c)


@pytest.mark.parametrize("aliased", ["input", "weight"])
def test_running_statistics_sharing_memory_with_what_is_read_give_atens_result(dev, aliased):
    # ATen updates the running mean before it normalizes: y reads the updated values.
    x, weight = batch((6, 3, 40)), batch((3,))
    results = []
    for place in ("cpu", dev):
        xs, ws = x.clone().to(place), weight.clone().to(place)
        running_mean = xs[0, :, 0] if aliased == "input" else ws
        y = torch.native_batch_norm(xs, ws, None, running_mean, torch.ones(3).to(place), True,
                                    0.5, 1e-5)[0]
        results.append((y, running_mean))
    (y, mean), (y_cpu, mean_cpu) = results[1], results[0]
    assert_same(y, y_cpu, rtol=1e-5, atol=2e-5)
    assert_same(mean, mean_cpu)


def test_empty_inputs_give_empty_results_or_an_error_naming_the_shape(dev):
    # ATen's CPU kernels divide by the element count here (a SIGFPE, the process dies).
    x = torch.randn(0, 3, 4).to(dev)
    stats = [torch.zeros(3).to(dev), torch.ones(3).to(dev)]
    with pytest.raises(RuntimeError, match=r"training needs at least one element.*\[0, 3, 4\]"):
        torch.native_batch_norm(x, None, None, *stats, True, 0.1, 1e-5)
    assert_same(stats[0], torch.zeros(3))
    y = torch.native_batch_norm(x, None, None, *stats, False, 0.1, 1e-5)[0]
    assert y.shape == (0, 3, 4)
    grads = torch.ops.aten.native_batch_norm_backward(torch.randn(0, 3, 4).to(dev), x,
                                                      torch.ones(3).to(dev), None, None,
                                                      stats[0], stats[1], True, 1e-5,
                                                      [True, True, True])
    assert grads[0].shape == (0, 3, 4)
    assert_same(grads[1], torch.zeros(3))
    assert_same(grads[2], torch.zeros(3))
