"""mse_loss, smooth_l1_loss and huber_loss as compiled kernels (device/compiled_losses.cpp,
fusion/loss_ops.cpp): the CPU's losses and gradients for every reduction, dtype and layout, one
compiled launch each way, and ATen's own kernel (with its errors) for the calls they decline."""

import pytest
import torch
import torch.nn.functional as F

from conftest import launched_since, launches_now

LOSSES = {
    "mse": (lambda a, b, r: F.mse_loss(a, b, reduction=r), "aten::mse_loss",
            "aten::mse_loss_backward"),
    "smooth_l1": (lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.7),
                  "aten::smooth_l1_loss", "aten::smooth_l1_loss_backward"),
    "huber": (lambda a, b, r: F.huber_loss(a, b, reduction=r, delta=1.3), "aten::huber_loss",
              "aten::huber_loss_backward"),
}
SHAPES = {"scalar": (), "vector": (7,), "matrix": (4, 33), "rank3": (3, 65, 9), "rank4": (2, 3, 4, 5)}
DTYPES = {"f32": (torch.float32, 1e-6), "f64": (torch.float64, 1e-13)}


def run_both(loss, a, b, reduction, dev, grad_seed=0):
    """The loss and self's gradient on the CPU and on the device."""
    a_cpu = a.clone().requires_grad_()
    a_dev = a.to(dev).requires_grad_()
    want = loss(a_cpu, b, reduction)
    got = loss(a_dev, b.to(dev), reduction)
    grad = torch.randn(want.shape, dtype=a.dtype,
                       generator=torch.Generator().manual_seed(grad_seed))
    want.backward(grad)
    got.backward(grad.to(dev))
    return (want.detach(), a_cpu.grad), (got.detach().cpu(), a_dev.grad.cpu())


@pytest.mark.parametrize("dtype", DTYPES.keys())
@pytest.mark.parametrize("shape", SHAPES.keys())
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", LOSSES.keys())
def test_loss_and_gradient_match_the_cpu_in_one_compiled_launch_each(dev, name, reduction,
                                                                      shape, dtype):
    loss, forward_op, backward_op = LOSSES[name]
    torch_dtype, tolerance = DTYPES[dtype]
    g = torch.Generator().manual_seed(len(shape))
    # Differences on both sides of beta and delta, and exact zeros.
    a = torch.randn(SHAPES[shape], dtype=torch_dtype, generator=g) * 2
    b = torch.randn(SHAPES[shape], dtype=torch_dtype, generator=g)
    b.view(-1)[:3] = a.view(-1)[:3]
    before = launches_now()
    (want, want_grad), (got, got_grad) = run_both(loss, a, b, reduction, dev)
    launched = launched_since(before)
    assert got.shape == want.shape
    # Per element the CPU's vector formulas; the mean and sum accumulate in f64.
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(got_grad, want_grad, rtol=tolerance, atol=tolerance)
    if reduction == "none":
        assert torch.equal(got, want)
    assert launched["fallback"] == {} and launched["library"] == {}
    assert launched["compiled"][forward_op] == 1
    assert launched["compiled"][backward_op] == 1


@pytest.mark.parametrize("name", LOSSES.keys())
def test_special_values_follow_the_cpu(dev, name):
    """NaN and infinities in either operand, differences exactly at beta and delta."""
    loss = LOSSES[name][0]
    a = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0, 0.7, 1.3, -0.7, 2.0, 0.0])
    b = torch.tensor([0.0, 0.0, 1.0, float("nan"), 0.0, 0.0, 0.0, float("inf"), 0.0])
    (want, want_grad), (got, got_grad) = run_both(loss, a, b, "none", dev)
    torch.testing.assert_close(got, want, equal_nan=True)
    torch.testing.assert_close(got_grad, want_grad, equal_nan=True)


@pytest.mark.filterwarnings("ignore:Using a target size")  # the broadcast is the case
@pytest.mark.parametrize("name", LOSSES.keys())
def test_strided_and_broadcast_operands(dev, name):
    """A transposed input and a target Python broadcast (stride 0) before the call."""
    loss = LOSSES[name][0]
    g = torch.Generator().manual_seed(5)
    a = torch.randn(6, 5, generator=g).t()
    b = torch.randn(1, 6, generator=g)
    for reduction in ("none", "mean"):
        (want, want_grad), (got, got_grad) = run_both(loss, a, b, reduction, dev)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_grad, want_grad)


@pytest.mark.parametrize("name", LOSSES.keys())
def test_a_loss_per_element_is_laid_out_as_the_cpus(dev, name):
    """A permuted, non-dense input: the result keeps its order of dimensions, as ATen's."""
    loss = LOSSES[name][0]
    g = torch.Generator().manual_seed(6)
    # Sliced after the copy to the device (a copy of a non-dense tensor is dense).
    layouts = ((lambda t: t.t()[:, ::2], (5, 6)),
               (lambda t: t.permute(0, 3, 1, 2)[:, ::2], (2, 4, 4, 6)))
    for layout, shape in layouts:
        base_a, b = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        b = layout(b).contiguous()
        want = loss(layout(base_a), b, "none")
        got = loss(layout(base_a.to(dev)), b.to(dev), "none")
        assert got.stride() == want.stride()
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("limit", [1e39, 1e-39])
def test_a_beta_outside_floats_normal_range_runs_atens_kernel(dev, limit):
    """ATen's scalar code divides by the double beta, its vector code by the float (inf or a
    subnormal here): such calls keep ATen's kernel, and its results."""
    a, b = torch.tensor([1e-39, -2e-39, 3.0]), torch.zeros(3)
    for op in (lambda x: F.smooth_l1_loss(x, b_of(x), beta=limit),
               lambda x: F.huber_loss(x, b_of(x), delta=limit)):
        b_of = lambda x: b.to(x.device)  # noqa: E731
        a_cpu, a_dev = a.clone().requires_grad_(), a.to(dev).requires_grad_()
        op(a_cpu).backward()
        op(a_dev).backward()
        assert torch.equal(a_dev.grad.cpu(), a_cpu.grad)


def test_declined_calls_run_atens_kernel_with_its_results_and_errors(dev):
    """beta 0 (L1 loss in ATen), an empty input, and a negative beta or delta (ATen's error)."""
    x, y = torch.randn(5), torch.randn(5)
    before = launches_now()
    got = torch.ops.aten.smooth_l1_loss(x.to(dev), y.to(dev), 1, 0.0)
    assert torch.equal(got.cpu(), torch.ops.aten.smooth_l1_loss(x, y, 1, 0.0))
    got = F.mse_loss(x[:0].to(dev), y[:0].to(dev), reduction="sum")
    assert torch.equal(got.cpu(), F.mse_loss(x[:0], y[:0], reduction="sum"))
    launched = launched_since(before)
    assert launched["library"] == {"aten::smooth_l1_loss": 1, "aten::mse_loss": 1}
    assert launched["fallback"] == {}
    with pytest.raises(RuntimeError, match="negative values for beta"):
        F.smooth_l1_loss(x.to(dev), y.to(dev), beta=-1.0)
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        F.huber_loss(x.to(dev), y.to(dev), delta=0.0)


def test_a_given_gradient_tensor_is_written_in_place(dev):
    """The out= backward overloads write the tensor given them and return it."""
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    grad = torch.tensor(1.0)
    for op, limit in ((torch.ops.aten.smooth_l1_loss_backward.grad_input, 0.5),
                      (torch.ops.aten.huber_loss_backward.out, 0.5)):
        out = torch.empty(4, 3).to(dev)
        result = op(grad.to(dev), x.to(dev), y.to(dev), 1, limit, grad_input=out)
        assert result.data_ptr() == out.data_ptr()
        want = op(grad, x, y, 1, limit, grad_input=torch.empty(4, 3))
        torch.testing.assert_close(out.cpu(), want)


def test_a_regression_step_runs_no_fallback_and_matches_the_cpu(dev):
    torch.manual_seed(0)
    cpu = torch.nn.Linear(8, 1)
    device = torch.nn.Linear(8, 1)
    device.load_state_dict(cpu.state_dict())
    device.to(dev)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    before = launches_now()
    for model, inputs in ((cpu, (x, y)), (device, (x.to(dev), y.to(dev)))):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            F.smooth_l1_loss(model(inputs[0]), inputs[1]).backward()
            optimizer.step()
    assert launched_since(before)["fallback"] == {}
    torch.testing.assert_close(device.weight.detach().cpu(), cpu.weight.detach())
