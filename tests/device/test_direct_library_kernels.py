"""Matrix products and nll_loss run on device memory without ATen's kernel around them
(device/direct_gemm.h: the BLAS call ATen makes; device/nll_loss_loops.h: ATen's loops). Each
must give the CPU's result bit for bit, in every layout and case, including the ones it hands
back to ATen's kernel (layouts ATen copies first, 1-D inputs, byte targets)."""

import pytest
import torch
import torch.nn.functional as F

from conftest import launched_since, launches_now


def assert_same_bits(got, want):
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)

DTYPES = [torch.float32, torch.float64]


def layouts(rows, cols, dtype, g):
    """A [rows, cols] matrix as row-major, column-major (a transpose), with padded leading
    dimensions both ways, and with both strides above 1 (which ATen copies first)."""
    yield torch.randn(rows, cols, dtype=dtype, generator=g)
    yield torch.randn(cols, rows, dtype=dtype, generator=g).t()
    yield torch.randn(rows, cols + 3, dtype=dtype, generator=g)[:, :cols]
    yield torch.randn(cols + 2, rows, dtype=dtype, generator=g)[:cols].t()
    yield torch.randn(rows, cols * 2, dtype=dtype, generator=g)[:, ::2]


SIZES = [(1, 1, 1), (1, 3, 4), (5, 1, 4), (5, 3, 1), (4, 8, 4), (33, 17, 31)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("m, k, n", SIZES, ids=["x".join(map(str, s)) for s in SIZES])
def test_mm_equals_the_cpus_bit_for_bit_in_every_layout(dev, dtype, m, k, n):
    g = torch.Generator().manual_seed(m * 100 + k * 10 + n)
    for a in layouts(m, k, dtype, g):
        for b in layouts(k, n, dtype, g):
            want = torch.mm(a, b)
            got = torch.mm(a.to(dev), b.to(dev))
            assert got.stride() == want.stride()
            assert torch.equal(got.cpu(), want), (a.stride(), b.stride())


BIASES = {"row": lambda m, n, g: torch.randn(n, generator=g),
          "row_2d": lambda m, n, g: torch.randn(1, n, generator=g),
          "full": lambda m, n, g: torch.randn(m, n, generator=g),
          "column": lambda m, n, g: torch.randn(m, 1, generator=g),
          "expanded_row": lambda m, n, g: torch.randn(n, generator=g).expand(m, n),
          "transposed": lambda m, n, g: torch.randn(n, m, generator=g).t()}


@pytest.mark.parametrize("bias", BIASES.keys())
@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, -2), (0, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_addmm_equals_the_cpus_bit_for_bit_for_every_bias(dev, bias, beta, alpha, dtype):
    """nn.Linear's addmm: the bias broadcast into the result before the product (beta 0:
    ignored, NaN included), as ATen copies it."""
    g = torch.Generator().manual_seed(3)
    m, k, n = 6, 5, 7
    self = BIASES[bias](m, n, g).to(dtype)
    if beta == 0:
        self = self.clone()
        self[(0,) * self.dim()] = float("nan")
    for a in layouts(m, k, dtype, g):
        b = torch.randn(n, k, dtype=dtype, generator=g).t()  # a Linear weight's layout
        want = torch.addmm(self, a, b, beta=beta, alpha=alpha)
        got = torch.addmm(self.to(dev), a.to(dev), b.to(dev), beta=beta, alpha=alpha)
        assert torch.equal(got.cpu(), want), a.stride()


def test_linear_layers_gradients_equal_the_cpus_bit_for_bit(dev):
    """Forward (addmm), the input's and the weights' gradients (mm of transposed operands), the
    weights' gradients accumulated over two steps (in adaptive mode: the product added into the
    kept gradient by BLAS with beta 1). No other op: the gradients are products only."""
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(12, 9), torch.nn.Linear(9, 3))
    device = torch.nn.Sequential(torch.nn.Linear(12, 9), torch.nn.Linear(9, 3))
    device.load_state_dict(cpu.state_dict())
    device.to(dev)
    for _ in range(2):
        x, grad = torch.randn(10, 12, requires_grad=True), torch.randn(10, 3)
        x_dev = x.detach().to(dev).requires_grad_()
        out = cpu(x)
        out_dev = device(x_dev)
        assert torch.equal(out_dev.cpu(), out.detach())
        out.backward(grad)
        out_dev.backward(grad.to(dev))
        assert torch.equal(x_dev.grad.cpu(), x.grad)
    for layer_cpu, layer_dev in zip(cpu, device):
        assert torch.equal(layer_dev.weight.grad.cpu(), layer_cpu.weight.grad)


def test_a_product_of_an_empty_inner_size_is_zeros_as_on_the_cpu(dev):
    a, b = torch.randn(3, 0), torch.randn(0, 4)
    assert torch.equal(torch.mm(a.to(dev), b.to(dev)).cpu(), torch.mm(a, b))
    bias = torch.randn(4)
    assert torch.equal(torch.addmm(bias.to(dev), a.to(dev), b.to(dev)).cpu(),
                       torch.addmm(bias, a, b))


def test_products_still_count_one_library_launch_each(dev):
    a, b = torch.randn(4, 8).to(dev), torch.randn(8, 4).to(dev)
    before = launches_now()
    torch.mm(a, b)
    torch.addmm(torch.zeros(4).to(dev), a, b)
    launched = launched_since(before)
    assert launched["library"] == {"aten::mm": 1, "aten::addmm": 1}


NLL_BATCHES = [1, 2, 16, 17, 255, 256, 4097]  # the cascade sum's levels turn at 16, 256, 4096


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", NLL_BATCHES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nll_loss_and_its_gradient_equal_the_cpus_bit_for_bit(dev, dtype, batch, reduction,
                                                              weighted):
    """ATen sums a batch's losses in a cascade of partial sums (float32 rounding depends on the
    order): the loops keep its order, ignored targets and class weights included."""
    g = torch.Generator().manual_seed(batch)
    classes = 7
    x = torch.randn(batch, classes * 2, dtype=dtype, generator=g)[:, ::2].log_softmax(1)
    target = torch.randint(0, classes, (batch,), generator=g)
    target[::5] = -100
    weight = torch.rand(classes, dtype=dtype, generator=g) if weighted else None
    x_cpu, x_dev = x.clone().requires_grad_(), x.to(dev).requires_grad_()
    want = F.nll_loss(x_cpu, target, weight, reduction=reduction)
    got = F.nll_loss(x_dev, target.to(dev), None if weight is None else weight.to(dev),
                     reduction=reduction)
    assert_same_bits(got, want)  # all targets ignored: NaN (0 / 0) on both sides
    grad = torch.randn(want.shape, dtype=dtype, generator=g)
    want.backward(grad)
    got.backward(grad.to(dev))
    assert_same_bits(x_dev.grad, x_cpu.grad)


def test_nll_loss_of_a_target_out_of_range_raises_atens_index_error(dev):
    x = torch.randn(3, 4).log_softmax(1)
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        F.nll_loss(x.to(dev), torch.tensor([0, 4, 1]).to(dev), reduction="sum")
    with pytest.raises(IndexError, match="Target -2 is out of bounds"):
        F.nll_loss(x.to(dev), torch.tensor([0, -2, 1]).to(dev), reduction="none")


def test_nll_loss_backward_without_reduction_checks_targets_where_atens_loop_does_not(dev):
    """ATen's CPU loop for a per-row gradient writes at any target (out of bounds past the
    row); the device's raises instead."""
    x = torch.randn(3, 4).log_softmax(1).to(dev)
    target = torch.tensor([0, 9, 1]).to(dev)
    with pytest.raises(Exception, match="Target 9 is out of bounds"):  # IndexError in ATen
        torch.ops.aten.nll_loss_backward(torch.ones(3).to(dev), x, target, None, 0, -100,
                                         torch.tensor(3.0).to(dev))


def test_nll_loss_calls_the_loops_do_not_take_still_equal_the_cpus(dev):
    """A 1-D input and byte targets run ATen's own kernel on device memory."""
    x = torch.randn(5).log_softmax(0)
    assert torch.equal(F.nll_loss(x.to(dev), torch.tensor(2).to(dev)).cpu(),
                       F.nll_loss(x, torch.tensor(2)))
    x2 = torch.randn(4, 5).log_softmax(1)
    t = torch.tensor([1, 0, 4, 2], dtype=torch.uint8)
    out = torch.ops.aten.nll_loss_forward(x2.to(dev), t.to(dev), None, 1, -100)
    want = torch.ops.aten.nll_loss_forward(x2, t, None, 1, -100)
    assert torch.equal(out[0].cpu(), want[0]) and torch.equal(out[1].cpu(), want[1])
