"""Matrix products and nll_loss run on device memory without ATen's kernel around them
(device/direct_gemm.h: the BLAS call ATen makes; device/nll_loss_loops.h: ATen's loops). Each
must give the CPU's result bit for bit, in every layout and case, including the ones it hands
back to ATen's kernel (layouts ATen copies first, 1-D inputs, byte targets)."""

import warnings

import pytest
import torch
import torch.nn.functional as F
import torchneuron

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


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batches, m, k, n", [(3, 4, 5, 6), (3, 20, 30, 40)], ids=["loops", "gemm"])
def test_baddbmm_with_beta_zero_ignores_what_its_new_output_held_before(dev, dtype, batches, m,
                                                                         k, n):
    """beta 0 ignores self, NaN included. ATen 1.13's loops for small products multiply the old
    output by beta anyway (torch.baddbmm(..., beta=0, out=a_nan_tensor) is NaN on the CPU, and
    so, now and then, is the CPU's functional call), and a device output reuses freed memory:
    here memory that held NaN."""
    g = torch.Generator().manual_seed(8)
    a = torch.randn(batches, m, k, dtype=dtype, generator=g)
    b = torch.randn(batches, k, n, dtype=dtype, generator=g)
    self = torch.full((batches, m, n), float("nan"), dtype=dtype)
    # Not the CPU's own baddbmm: its new output can reuse freed memory that held NaN too.
    want = 2 * torch.bmm(a, b)
    for _ in range(3):
        junk = torch.full((batches, m, n), float("nan"), dtype=dtype, device=dev)
        del junk
        got = torch.baddbmm(self.to(dev), a.to(dev), b.to(dev), beta=0, alpha=2)
        assert not got.isnan().any()
        torch.testing.assert_close(got.cpu(), want)


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


@pytest.fixture
def every_call_recorded():
    """In adaptive mode, calls of any size are recorded (the tracer leaves small ones eager)."""
    saved = torchneuron.adaptive_min_bytes()
    torchneuron.set_adaptive_min_bytes(0)
    yield
    torchneuron.set_adaptive_min_bytes(saved)


@pytest.mark.parametrize("case", ["half", "bool", "alpha_overflow"])
def test_a_product_atens_kernel_refuses_raises_at_the_call_every_time(dev, every_call_recorded,
                                                                      case):
    """ATen's CPU products refuse Half and Bool and a beta or alpha its dtype cannot hold; in a
    hot window a recorded product would raise only at the next sync point, so the call itself
    must raise, on its fourth run as on its first, and the device must stay usable."""
    dtype = {"half": torch.float16, "bool": torch.bool}.get(case, torch.float32)
    alpha = 1e300 if case == "alpha_overflow" else 1
    s, a, b = torch.ones(3, 5, dtype=dtype), torch.ones(3, 4, dtype=dtype), torch.ones(4, 5, dtype=dtype)
    with pytest.raises(RuntimeError) as on_cpu:
        torch.addmm(s, a, b, alpha=alpha)
    for _ in range(4):  # the window recurs and is hot by the last calls
        with pytest.raises(RuntimeError) as on_device:
            torch.addmm(s.to(dev), a.to(dev), b.to(dev), alpha=alpha)
        assert str(on_device.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
        if case != "alpha_overflow":
            with pytest.raises(RuntimeError, match="not implemented for"):
                torch.mm(a.to(dev), b.to(dev))
    x = torch.randn(3, 4)
    assert torch.equal((x.to(dev) @ x.t().to(dev)).cpu(), x @ x.t())


PRODUCT_OVERLOADS = {
    "mm_out": lambda t, x: torch.mm(t(x["a"]), t(x["b"]), out=t(torch.empty(0))),
    "addmm_out": lambda t, x: torch.addmm(t(x["n"]), t(x["a"]), t(x["b"]), out=t(torch.empty(3, 5))),
    "mv": lambda t, x: torch.mv(t(x["a"]), t(x["k"])),
    "matmul_matrix_vector": lambda t, x: t(x["a"]) @ t(x["k"]),
    "addmv": lambda t, x: torch.addmv(t(x["m"]), t(x["a"]), t(x["k"]), beta=0.5),
    "addmv_": lambda t, x: t(x["m"].clone()).addmv_(t(x["a"]), t(x["k"])),
    "addmv_out": lambda t, x: torch.addmv(t(x["m"]), t(x["a"]), t(x["k"]), out=t(torch.empty(3))),
    "addr": lambda t, x: torch.addr(t(x["mk"]), t(x["m"]), t(x["k"])),
    "vdot": lambda t, x: torch.vdot(t(x["k"]), t(x["k"])),
    "bmm_out": lambda t, x: torch.bmm(t(x["A"]), t(x["B"]), out=t(torch.empty(2, 3, 5))),
    "addbmm": lambda t, x: torch.addbmm(t(x["mn"]), t(x["A"]), t(x["B"])),
}


@pytest.mark.parametrize("name", PRODUCT_OVERLOADS.keys())
def test_other_products_and_out_overloads_run_atens_kernel_without_a_fallback(dev, name):
    g = torch.Generator().manual_seed(1)
    x = {"a": torch.randn(3, 4, generator=g), "b": torch.randn(4, 5, generator=g),
         "k": torch.randn(4, generator=g), "m": torch.randn(3, generator=g),
         "n": torch.randn(5, generator=g), "mk": torch.randn(3, 4, generator=g),
         "mn": torch.randn(3, 5, generator=g), "A": torch.randn(2, 3, 4, generator=g),
         "B": torch.randn(2, 4, 5, generator=g)}
    op = PRODUCT_OVERLOADS[name]
    before = launches_now()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fallback would warn
        got = op(lambda t: t.to(dev), x)
    launched = launched_since(before)
    assert launched["fallback"] == {}
    assert torch.equal(got.cpu(), op(lambda t: t, x))


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


def test_nll_loss_backward_refuses_a_gradient_atens_meta_function_refuses(dev):
    x = torch.randn(6, 5).log_softmax(1)
    target = torch.randint(0, 5, (6,))
    grad = torch.ones(1, 1)
    args = lambda t: (t(grad), t(x), t(target), None, 1, -100, t(torch.tensor(6.0)))  # noqa: E731
    with pytest.raises(RuntimeError) as on_cpu:
        torch.ops.aten.nll_loss_backward(*args(lambda t: t))
    with pytest.raises(RuntimeError) as on_device:
        torch.ops.aten.nll_loss_backward(*args(lambda t: t.to(dev)))
    assert str(on_device.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]


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
