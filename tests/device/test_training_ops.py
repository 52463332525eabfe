"""The training ops routed to the library route (op_routing.cpp, kTrainingOps and the _foreach_*
ops): each runs ATen's CPU kernel on device memory, forward and backward, with the CPU's results,
no warning the CPU does not give, and no fallback launch; a small CNN's training step and the
multi-tensor optimizers run with no fallback at all."""

import warnings

import pytest
import torch
import torch.nn.functional as F
import torchneuron

from conftest import assert_same, launched_since, launches_now


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def call_recording_warnings(fn, args):
    torch.manual_seed(7)  # random ops (rrelu) draw the same numbers on both sides
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = as_tuple(fn(*args))
    return out, {str(w.message) for w in caught}


def run_on_cpu_and_device(fn, cpu_args, dev):
    """Runs fn forward and backward on the CPU and on the device and compares outputs, inputs
    (ops may write them: batch norm's running statistics) and gradients. Returns the device's
    launches by kind."""
    dev_args = [a.detach().to(dev).requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor)
                else a for a in cpu_args]
    before = launches_now()
    cpu_out, cpu_warnings = call_recording_warnings(fn, cpu_args)
    dev_out, dev_warnings = call_recording_warnings(fn, dev_args)
    assert dev_warnings <= cpu_warnings, f"the device warned where the CPU did not: {dev_warnings}"
    assert len(dev_out) == len(cpu_out)
    for d, c in zip(dev_out, cpu_out):
        assert_same(d.detach(), c.detach(), rtol=1e-5, atol=1e-5, equal_nan=True)
    g = torch.Generator().manual_seed(3)
    differentiable = [(d, c) for d, c in zip(dev_out, cpu_out) if c.requires_grad]
    if differentiable:
        weights = [torch.randn(c.shape, generator=g) for _, c in differentiable]
        sum((c * w).sum() for (_, c), w in zip(differentiable, weights)).backward()
        sum((d * w.to(dev)).sum() for (d, _), w in zip(differentiable, weights)).backward()
    for d, c in zip(dev_args, cpu_args):
        if not isinstance(c, torch.Tensor):
            continue
        assert_same(d.detach(), c.detach())
        if c.requires_grad:
            assert d.grad is not None
            assert_same(d.grad, c.grad, rtol=1e-4, atol=1e-5, equal_nan=True)
    return launched_since(before)


def r(*shape, grad=True, g=None):
    return torch.randn(*shape, generator=g).requires_grad_(grad)


def cases():
    """(id, fn, inputs, ATen ops that must take the library route)."""
    g = torch.Generator().manual_seed(0)
    x4 = lambda *s: r(*s, g=g)  # noqa: E731
    probs = torch.rand(4, 5, generator=g).clamp(0.05, 0.95).requires_grad_()
    log_probs = torch.randn(6, 2, 4, generator=g).log_softmax(2).detach().requires_grad_()
    targets = torch.tensor([[1, 2, 3], [3, 1, 0]])
    indices = F.max_pool2d(torch.randn(1, 2, 4, 4, generator=g), 2, return_indices=True)[1]
    return [
        ("nll_loss", lambda x, t, w: F.nll_loss(x, t, weight=w, ignore_index=1),
         [x4(4, 5), torch.tensor([0, 1, 4, 2]), torch.rand(5, generator=g)],
         {"aten::nll_loss_forward", "aten::nll_loss_backward"}),
        ("nll_loss2d", lambda x, t: F.nll_loss(x, t),
         [x4(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4), generator=g)],
         {"aten::nll_loss2d_forward", "aten::nll_loss2d_backward"}),
        ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), [x4(2, 6, 5), x4(6), x4(6)],
         {"aten::native_group_norm", "aten::native_group_norm_backward"}),
        ("topk", lambda x: torch.topk(x, 3, dim=1), [x4(4, 7)], {"aten::topk"}),
        ("max_pool2d", lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
         [x4(2, 3, 7, 6)], {"aten::max_pool2d_with_indices_backward"}),  # forward compiled
        ("max_pool1d", lambda x: F.max_pool1d(x, 2), [x4(2, 3, 8)],  # forward compiled
         {"aten::max_pool2d_with_indices_backward"}),
        ("max_pool3d", lambda x: F.max_pool3d(x, 2), [x4(1, 2, 4, 4, 4)],
         {"aten::max_pool3d_with_indices", "aten::max_pool3d_with_indices_backward"}),
        ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), [x4(2, 3, 7, 6)],
         {"aten::avg_pool2d", "aten::avg_pool2d_backward"}),
        ("avg_pool3d", lambda x: F.avg_pool3d(x, 2), [x4(1, 2, 4, 4, 4)],
         {"aten::avg_pool3d", "aten::avg_pool3d_backward"}),
        ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [x4(2, 3, 7, 5)],
         {"aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward"}),
        ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 2)), [x4(2, 3, 7, 5)],
         {"aten::adaptive_max_pool2d", "aten::adaptive_max_pool2d_backward"}),
        ("fractional_max_pool2d",
         lambda x, s: F.fractional_max_pool2d(x, 2, output_size=(3, 3), _random_samples=s),
         [x4(1, 2, 7, 7), torch.rand(1, 2, 2, generator=g)],
         {"aten::fractional_max_pool2d", "aten::fractional_max_pool2d_backward"}),
        ("max_unpool2d", lambda x, i: F.max_unpool2d(x, i, 2), [x4(1, 2, 2, 2), indices],
         {"aten::max_unpool2d"}),
        ("binary_cross_entropy", lambda p, t, w: F.binary_cross_entropy(p, t, weight=w),
         [probs, torch.rand(4, 5, generator=g), torch.rand(5, generator=g)],
         {"aten::binary_cross_entropy", "aten::binary_cross_entropy_backward"}),
        ("ctc_loss", lambda lp, t: F.ctc_loss(lp, t, [6, 5], [3, 2]), [log_probs, targets],
         {"aten::_ctc_loss", "aten::_ctc_loss_backward"}),
        ("multi_margin_loss", lambda x, t: F.multi_margin_loss(x, t),
         [x4(4, 5), torch.tensor([0, 4, 2, 1])],
         {"aten::multi_margin_loss", "aten::multi_margin_loss_backward"}),
        ("multilabel_margin_loss", lambda x, t: F.multilabel_margin_loss(x, t),
         [x4(2, 4), torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1]])],
         {"aten::multilabel_margin_loss_forward", "aten::multilabel_margin_loss_backward"}),
        ("dot", torch.dot, [x4(7), x4(7)], {"aten::dot"}),
        ("prelu", F.prelu, [x4(2, 3, 4), x4(3)], {"aten::prelu", "aten::prelu_backward"}),
        ("reflection_pad2d", lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), [x4(1, 2, 4, 5)],
         {"aten::reflection_pad2d", "aten::reflection_pad2d_backward"}),
        ("reflection_pad1d", lambda x: F.pad(x, (2, 1), mode="reflect"), [x4(2, 3, 5)],
         {"aten::reflection_pad1d", "aten::reflection_pad1d_backward"}),
        ("replication_pad2d", lambda x: F.pad(x, (1, 2, 2, 1), mode="replicate"),
         [x4(1, 2, 4, 5)], {"aten::replication_pad2d", "aten::replication_pad2d_backward"}),
        ("upsample_nearest2d", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
         [x4(1, 2, 3, 4)], {"aten::upsample_nearest2d", "aten::upsample_nearest2d_backward"}),
        ("upsample_nearest1d", lambda x: F.interpolate(x, size=7, mode="nearest"), [x4(1, 2, 3)],
         {"aten::upsample_nearest1d", "aten::upsample_nearest1d_backward"}),
        ("upsample_bilinear2d",
         lambda x: F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False),
         [x4(1, 2, 3, 4)], {"aten::upsample_bilinear2d", "aten::upsample_bilinear2d_backward"}),
        ("grid_sample", lambda x, grid: F.grid_sample(x, grid, align_corners=False),
         [x4(1, 2, 4, 4), (torch.rand(1, 3, 3, 2, generator=g) * 2 - 1).requires_grad_()],
         {"aten::grid_sampler_2d", "aten::grid_sampler_2d_backward"}),
        ("unfold_fold", lambda x: F.fold(F.unfold(x, 2), (4, 5), 2), [x4(1, 2, 4, 5)],
         {"aten::im2col", "aten::col2im"}),
        ("silu", F.silu, [x4(3, 4)], {"aten::silu_backward"}),
        ("mish", F.mish, [x4(3, 4)], {"aten::mish_backward"}),
        ("glu", F.glu, [x4(3, 4)], {"aten::glu", "aten::glu_backward"}),
        ("hardshrink", lambda x: F.hardshrink(x, 0.3), [x4(3, 4)],
         {"aten::hardshrink", "aten::hardshrink_backward"}),
        ("softshrink", lambda x: F.softshrink(x, 0.3), [x4(3, 4)],
         {"aten::softshrink", "aten::softshrink_backward"}),
        ("logsigmoid", F.logsigmoid, [x4(3, 4)],
         {"aten::log_sigmoid_forward", "aten::log_sigmoid_backward"}),
        ("rrelu_training", lambda x: F.rrelu(x, training=True), [x4(3, 4)],
         {"aten::rrelu_with_noise"}),
        ("pdist", F.pdist, [x4(5, 3)], {"aten::_pdist_forward", "aten::_pdist_backward"}),
        ("cdist", lambda a, b: torch.cdist(a, b, p=1), [x4(4, 3), x4(5, 3)],
         {"aten::_cdist_forward", "aten::_cdist_backward"}),
        ("masked_select", torch.masked_select,
         [x4(3, 4), torch.rand(3, 4, generator=g) > 0.4],
         {"aten::masked_select", "aten::masked_scatter_"}),
        ("triu_tril", lambda x: x.triu(1) * 2 + torch.tril(x, -1), [x4(2, 5, 6)],
         {"aten::triu", "aten::tril"}),
    ]


CASES = cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_training_op_runs_on_the_library_route_with_the_cpus_results_and_gradients(dev, case):
    _, fn, inputs, library_ops = case
    launched = run_on_cpu_and_device(fn, inputs, dev)
    assert launched["fallback"] == {}
    assert library_ops <= set(launched["library"]), launched["library"]


NLL_SHAPES = {"rows": (5, 4), "one_row": (4,), "no_rows": (0, 3), "one_class": (3, 1)}


@pytest.mark.parametrize("shape", NLL_SHAPES.values(), ids=NLL_SHAPES.keys())
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("ignore_index", [-100, 1])
def test_nll_loss_writes_device_memory_directly_with_the_cpus_results(dev, shape, reduction,
                                                                      weighted, ignore_index):
    """nll_loss_forward and nll_loss_backward run ATen's out= kernels into device results
    (library_nll_loss.cpp): the CPU's losses and gradients in every reduction, with and without
    class weights and ignored targets, for 1-D and 2-D inputs and an empty batch."""
    g = torch.Generator().manual_seed(sum(shape) + ignore_index)
    x = torch.randn(*shape, generator=g).log_softmax(-1).requires_grad_()
    target = torch.randint(0, shape[-1], shape[:-1], generator=g)
    weight = torch.rand(shape[-1], generator=g) if weighted else None
    fn = lambda x, t, w: F.nll_loss(x, t, weight=w, reduction=reduction,  # noqa: E731
                                    ignore_index=ignore_index)
    launched = run_on_cpu_and_device(fn, [x, target, weight], dev)
    assert launched["fallback"] == {}
    assert {"aten::nll_loss_forward", "aten::nll_loss_backward"} <= set(launched["library"])


@pytest.mark.parametrize("x, target, weight, message", [
    (torch.randn(4, 5), torch.randint(0, 5, (3,)), None, "to match target batch_size"),
    (torch.randn(4, 5), torch.randint(0, 5, (4,)).int(), None, "expected scalar type Long"),
    (torch.randn(4, 5), torch.tensor([0, 1, 7, 2]), None, "Target 7 is out of bounds"),
    (torch.randn(4, 5), torch.tensor([0, 1, -3, 2]), None, "Target -3 is out of bounds"),
    (torch.randn(4, 5), torch.tensor([0, 1, 3, 2]), torch.rand(3), "weight tensor should be"),
], ids=["batch_mismatch", "int_target", "target_too_large", "negative_target", "weight_size"])
def test_nll_loss_errors_on_the_device_are_the_cpus(dev, x, target, weight, message):
    """Bad input gets the CPU's error at the call and leaves no result allocated."""
    with pytest.raises(Exception, match=message) as on_cpu:
        F.nll_loss(x, target, weight=weight)
    dx, dtarget = x.to(dev), target.to(dev)
    dweight = None if weight is None else weight.to(dev)
    allocated = torchneuron.metrics()["allocator"]["allocated_bytes"]
    with pytest.raises(type(on_cpu.value), match=message) as on_device:
        F.nll_loss(dx, dtarget, weight=dweight)
    assert str(on_device.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert torchneuron.metrics()["allocator"]["allocated_bytes"] == allocated


def test_nll_loss_with_a_target_on_the_cpu_raises_the_generic_paths_device_error(dev):
    """A target left on the CPU is not the direct kernel's case: the generic path names the
    mismatch, as it does for every library op."""
    x = torch.randn(4, 5).log_softmax(1).to(dev)
    with pytest.raises(RuntimeError, match="device"):
        F.nll_loss(x, torch.tensor([0, 1, 2, 3]))


def test_out_variants_take_the_library_route_and_resize_their_outputs(dev):
    x = torch.randn(4, 6)
    d = x.to(dev)
    before = launches_now()
    values, indices = torch.empty(0, device=dev), torch.empty(0, dtype=torch.long, device=dev)
    mask = torch.empty(0, device=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # resizing an empty out= tensor warns on neither side
        torch.topk(d, 2, out=(values, indices))
        torch.masked_select(d, d > 0, out=mask)
    lower = torch.empty(0, device=dev)
    torch.tril(d, out=lower)
    upper = d.clone()
    upper.triu_(2)
    assert_same(lower, torch.tril(x))
    assert_same(upper, torch.triu(x, 2))
    expected = torch.topk(x, 2)
    assert_same(values, expected.values)
    assert_same(indices, expected.indices)
    assert_same(mask, torch.masked_select(x, x > 0))
    launched = launched_since(before)
    assert launched["fallback"] == {}
    assert launched["library"] == {"aten::topk.values": 1, "aten::masked_select.out": 1,
                                   "aten::tril.out": 1, "aten::triu_": 1}


def test_foreach_ops_run_on_the_device(dev):
    """Eagerly each list call is one compiled list launch (test_list_launches.py); outside a hot
    window of adaptive mode, one library launch on host views. Never a fallback."""
    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(3, 4, generator=g), torch.randn(5, generator=g)]
    other = [torch.rand(3, 4, generator=g) + 0.5, torch.rand(5, generator=g) + 0.5]
    on_dev, other_dev = [t.to(dev) for t in cpu], [t.to(dev) for t in other]
    before = launches_now()
    sums = torch._foreach_add(on_dev, other_dev, alpha=0.5)
    torch._foreach_addcdiv_(on_dev, other_dev, sums, [0.1, 0.2])
    norms = torch._foreach_norm(on_dev)
    launched = launched_since(before)
    expected_sums = torch._foreach_add(cpu, other, alpha=0.5)
    torch._foreach_addcdiv_(cpu, other, expected_sums, [0.1, 0.2])
    for d, c in zip([*sums, *on_dev, *norms], [*expected_sums, *cpu, *torch._foreach_norm(cpu)]):
        assert_same(d, c)
    assert launched["fallback"] == {}
    kind = "library" if torchneuron.adaptive_enabled() else "compiled"
    assert launched[kind] == {"aten::_foreach_add.List": 1,
                              "aten::_foreach_addcdiv_.ScalarList": 1,
                              "aten::_foreach_norm.Scalar": 1}


def tiny_cnn():
    # No convolution bias before batch norm: its gradient is rounding noise, which Adam's
    # normalized step would turn into lr-sized updates of either sign.
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Dropout(0.25), torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 10), torch.nn.LogSoftmax(dim=1))


def train(model, optimizer, batches, dev=None):
    losses = []
    for x, y in batches:
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


@pytest.mark.parametrize("make_optimizer", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
], ids=["sgd", "adam"])
def test_cnn_training_steps_with_foreach_optimizers_never_fall_back(dev, make_optimizer):
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g))
               for _ in range(3)]
    cpu_model = tiny_cnn()
    dev_model = tiny_cnn().to(dev)
    torch.manual_seed(5)  # dropout's masks: both runs draw from the CPU generator in order
    cpu_losses = train(cpu_model, make_optimizer(cpu_model.parameters()), batches)
    before = launches_now()
    torch.manual_seed(5)
    dev_losses = train(dev_model, make_optimizer(dev_model.parameters()), batches, dev)
    launched = launched_since(before)
    assert launched["fallback"] == {}
    for op in ("aten::max_pool2d_with_indices_backward", "aten::nll_loss_forward",
               "aten::convolution_backward", "aten::bernoulli_.float"):
        assert op in launched["library"], launched["library"]
    for op in ("aten::max_pool2d_with_indices", "aten::native_batch_norm",
               "aten::native_batch_norm_backward"):
        assert op in launched["compiled"], launched["compiled"]
    list_kind = "library" if torchneuron.adaptive_enabled() else "compiled"  # list launches
    assert any(op.startswith("aten::_foreach_") for op in launched[list_kind])
    for d, c in zip(dev_losses, cpu_losses):
        assert_same(d, c, rtol=1e-4, atol=1e-5)
    for d, c in zip(dev_model.state_dict().values(), cpu_model.state_dict().values()):
        assert_same(d, c, rtol=1e-4, atol=1e-5)


def test_cnn_training_steps_in_adaptive_mode_keep_their_windows_and_replay(dev):
    """With nothing on the fallback, no op of the step is a sync point: windows end at the
    backward pass, item() and copies, recur, and replay, with the CPU's results."""
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g))
               for _ in range(6)]
    make_optimizer = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True)  # noqa: E731
    cpu_model, dev_model = tiny_cnn(), tiny_cnn().to(dev)
    torch.manual_seed(5)
    cpu_losses = train(cpu_model, make_optimizer(cpu_model.parameters()), batches)
    previous = torchneuron.adaptive_enabled()
    torchneuron.set_adaptive(True)
    try:
        torchneuron.reset_metrics()
        torch.manual_seed(5)
        dev_losses = train(dev_model, make_optimizer(dev_model.parameters()), batches, dev)
        torchneuron.synchronize()
        metrics = torchneuron.metrics()
    finally:
        torchneuron.set_adaptive(previous)
    assert metrics["launches"]["fallback"] == 0
    assert metrics["adaptive"]["syncs"]["fallback"] == 0
    assert metrics["adaptive"]["replays"] >= 1
    for d, c in zip(dev_losses, cpu_losses):
        assert_same(d, c, rtol=1e-4, atol=1e-5)
    for d, c in zip(dev_model.state_dict().values(), cpu_model.state_dict().values()):
        assert_same(d, c, rtol=1e-4, atol=1e-5)
