"""Compiled kernels against the same ops on the CPU: every dtype the issue names, strided,
broadcast, zero-size and scalar-tensor inputs, out= and in-place variants; and the kernel
cache's promises (one kernel per signature, scalars never recompile), read from metrics()."""
import pytest
import torch
import torchneuron

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 2).to(dtype)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


def launches(kind):
    return torchneuron.metrics()["launches"][kind]


def check(fn, *cpu_args, compiled=True, **kw):
    """Runs fn on CPU copies and on device copies; results must agree in dtype, shape and
    values, and (when `compiled`) the device must have run compiled kernels only."""
    dev = torchneuron.device()
    dev_args = [a.to(dev) if isinstance(a, torch.Tensor) else a for a in cpu_args]
    try:
        expected = fn(*cpu_args)
    except RuntimeError as e:
        # PyTorch 1.13's CPU lacks some float16 and bfloat16 kernels; the device has them.
        # Reference: the op in float32, rounded to the narrow dtype.
        narrow = next((a.dtype for a in cpu_args if isinstance(a, torch.Tensor)
                       and a.dtype in (torch.float16, torch.bfloat16)), None)
        if narrow is None or "not implemented for" not in str(e):
            raise
        widened = [a.float() if isinstance(a, torch.Tensor) and a.dtype == narrow else a
                   for a in cpu_args]
        result = fn(*widened)
        expected = tuple(r.to(narrow) if r.dtype == torch.float32 else r for r in result) \
            if isinstance(result, tuple) else (result.to(narrow) if result.dtype == torch.float32 else result)
    torchneuron.reset_metrics()
    actual = fn(*dev_args)
    if compiled:
        assert launches("compiled") > 0 and launches("fallback") == 0, torchneuron.metrics()["ops"]
    expected_list = expected if isinstance(expected, tuple) else (expected,)
    actual_list = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected_list, actual_list):
        assert a.device.type == torchneuron.DEVICE_TYPE
        assert a.dtype == e.dtype and a.shape == e.shape
        tol = {"rtol": 2e-2, "atol": 2e-2} if e.dtype in (torch.bfloat16, torch.float16) else {}
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tol, **kw)


UNARY_FLOAT = [torch.exp, torch.expm1, torch.log1p, torch.sin, torch.cos, torch.tanh, torch.sigmoid,
               torch.sqrt, torch.rsqrt, torch.erf, torch.atan, torch.reciprocal,
               torch.nn.functional.silu, torch.nn.functional.mish, torch.nn.functional.softplus,
               torch.nn.functional.elu, torch.nn.functional.hardswish, torch.nn.functional.leaky_relu,
               lambda x: torch.nn.functional.gelu(x, approximate="tanh"), torch.nn.functional.gelu]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", UNARY_FLOAT)
def test_unary_float_math(fn, dtype):
    # bfloat16's gelu (either form) and silu run ATen's kernel, which rounds each step to
    # bfloat16 (test_aten_parity_edges.py, test_dtype_semantics.py).
    steps_rounded = fn in UNARY_FLOAT[-2:] or fn is torch.nn.functional.silu
    check(fn, sample((5, 7), dtype).abs() + 0.1,
          compiled=not (steps_rounded and dtype == torch.bfloat16))


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("fn", [torch.neg, torch.abs, torch.floor, torch.round, torch.relu,
                                torch.sign, lambda x: torch.clamp(x, -1, 2)])
def test_unary_keeping_dtype(fn, dtype):
    check(fn, sample((6, 4), dtype))


@pytest.mark.parametrize("dtype", INTS + [torch.bool])
def test_integer_inputs_promote_to_float_for_float_math(dtype):
    check(torch.exp, sample((8,), dtype))
    check(lambda x: x / 2, sample((8,), dtype))


@pytest.mark.parametrize("dtype", ALL)
def test_comparisons_logical_and_where(dtype):
    a, b = sample((4, 5), dtype, 1), sample((4, 5), dtype, 2)
    for fn in (torch.eq, torch.ne, torch.lt, torch.ge, torch.logical_and, torch.logical_xor,
               torch.maximum):
        check(fn, a, b)
    check(lambda c, x, y: torch.where(c, x, y), a > b if dtype != torch.bool else a, a, b)


@pytest.mark.parametrize("dtype", INTS + [torch.bool])
def test_bitwise(dtype):
    a, b = sample((9,), dtype, 1), sample((9,), dtype, 2)
    check(torch.bitwise_and, a, b)
    check(torch.bitwise_xor, a, b)
    check(torch.bitwise_not, a)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_arithmetic_with_alpha_and_scalars(dtype):
    a, b = sample((3, 8), dtype, 1), sample((3, 8), dtype, 2)
    check(lambda x, y: torch.add(x, y, alpha=3), a, b)
    check(lambda x, y: torch.sub(x, y, alpha=2), a, b)
    check(lambda x: x * 3 + 1, a)
    check(lambda x: 2 - x, a)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_binary_ops(dtype):
    a, b = sample((4, 6), dtype, 1), sample((4, 6), dtype, 2) + 3
    for fn in (torch.div, torch.atan2, torch.pow, torch.hypot, torch.copysign, torch.fmax,
               lambda x, y: torch.lerp(x, y, 0.3), lambda x, y: torch.lerp(x, y, 0.8),
               lambda x, y: torch.addcmul(x, x, y, value=0.5),
               lambda x, y: torch.addcdiv(x, x, y, value=-2)):
        check(fn, a.abs() + 0.5, b)
    # ATen rounds each step of these in half and bfloat16: those dtypes run on the CPU.
    for fn in (torch.remainder, torch.fmod, torch.floor_divide,
               lambda x, y: torch.div(x, y, rounding_mode="trunc"),
               lambda x, y: torch.div(x, y, rounding_mode="floor")):
        check(fn, a.abs() + 0.5, b, compiled=dtype not in (torch.float16, torch.bfloat16))


def test_strided_broadcast_zero_size_and_scalar_tensors():
    a = sample((6, 5), torch.float32, 1)
    check(lambda x: x.t() * 2 + x.t(), a)                       # transposed
    check(lambda x: x[::2, 1:] - x[1::2, :-1], a)               # sliced with steps
    check(lambda x, r, c: x + r + c, a, sample((5,), torch.float32), sample((6, 1), torch.float32))
    check(lambda x: x[:, :0] * 2, a, compiled=False)            # zero-size: no launch at all
    check(lambda x, s: x * s, a, torch.tensor(2.5))             # 0-dim device tensor
    dev = torchneuron.device()
    cpu_scalar = torch.tensor(3.0)                              # 0-dim CPU tensor with device ones
    torch.testing.assert_close((a.to(dev) + cpu_scalar).cpu(), a + cpu_scalar)
    check(lambda x, low: torch.clamp(x, min=low), a, torch.zeros(5))
    check(lambda x: torch.clamp(x, max=0.5), a)


def test_out_and_inplace_variants():
    dev = torchneuron.device()
    a, b = sample((4, 4), torch.float32, 1), sample((4,), torch.float32, 2)
    da, db = a.to(dev), b.to(dev)
    out = torch.empty(0, device=dev)
    torch.mul(da, db, out=out)
    torch.testing.assert_close(out.cpu(), a * b)
    view = da[:, 1]                       # in place through a strided view
    view.add_(1)
    expected = a.clone()
    expected[:, 1] += 1
    torch.testing.assert_close(da.cpu(), expected)
    da.masked_fill_(da > 0, 0.0)
    expected.masked_fill_(expected > 0, 0.0)
    torch.testing.assert_close(da.cpu(), expected)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        db.add_(da)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.zeros(3, dtype=torch.int64, device=dev).mul_(1.5 * torch.ones(3, device=dev))


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_casts_and_device_copies(src, dst):
    # A copy that keeps the dtype of a contiguous source still runs a kernel.
    check(lambda x: x.to(dst, copy=True), sample((3, 5), src).t())


def test_fill_zero_and_cat():
    check(lambda x: x.fill_(2.5), sample((3, 3), torch.float32))
    check(lambda x: x.zero_(), sample((3, 3), torch.int64))
    check(lambda x, y: torch.cat([x, y.double()], 1), sample((2, 3), torch.float32),
          sample((2, 4), torch.float32))


# Half and bfloat16 reductions that round (sums, norms, softmax) run on the CPU, whose kernels
# round partial results to the narrow dtype; the exact ones (extremes) stay compiled.
NARROW = (torch.float16, torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reductions(dtype):
    a = sample((4, 5, 6), dtype)
    for fn in (lambda x: x.amax((0, 1)), lambda x: x.amin(2), lambda x: x.max(1),
               lambda x: x.min(0), lambda x: x.argmax(), lambda x: x.argmin(1, keepdim=True)):
        check(fn, a)
    for fn in (torch.sum, lambda x: x.sum(1), lambda x: x.sum((0, 2), keepdim=True),
               lambda x: x.mean(-1), lambda x: x.var(1), lambda x: x.std(),
               lambda x: x.norm(dim=2), lambda x: torch.logsumexp(x, 1),
               lambda x: torch.softmax(x, 1), lambda x: torch.log_softmax(x, -1),
               lambda x: x.t().sum(0) if x.dim() == 2 else x.transpose(0, 2).sum(1)):
        check(fn, a, compiled=dtype not in NARROW)
    if dtype in NARROW:  # the CPU has no bfloat16 prod, and neither has the device now
        with pytest.raises(RuntimeError, match="prod_cpu\" not implemented for 'BFloat16'"):
            a.to(torchneuron.device()).prod(1)
    else:
        check(lambda x: x.prod(1), a)


@pytest.mark.parametrize("dtype", INTS + [torch.bool])
def test_integer_reductions(dtype):
    a = sample((3, 7), dtype)
    check(lambda x: x.sum(1), a)
    check(lambda x: x.any(1), a)
    check(lambda x: x.all(), a)
    if dtype != torch.bool:
        check(lambda x: x.amax(0), a)
        check(lambda x: x.argmax(1), a)


# amax and amin over rows take the extreme ignoring NaN and zero signs (a plain vector max or
# min) and rebuild the NaN-propagating result, -0 below +0, from flags (extremum in
# fusion/reduction_ops.cpp). Rows with a NaN, infinities, and zeros of one or both signs as
# their extreme must give the CPU's values and NaNs, in row order and in column order. Zero
# signs follow maximum()'s order (docs/compiled-eager.md): ATen's own amax of [-0, x, +0] gives
# -0 or +0 depending on its code path, so the signs are checked against that order instead.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", [3, 37, 128])
def test_amax_amin_rows_with_nan_infinities_and_signed_zeros(dtype, length):
    inf, nan = float("inf"), float("nan")
    negative = -1 - sample((8, length), dtype).abs()  # maxima below zero
    positive = 1 + sample((8, length), dtype, seed=1).abs()  # minima above zero
    rows = torch.cat([negative, positive])
    rows[0, length // 2] = nan
    rows[1, 0], rows[1, length - 1] = -0.0, 0.0  # max +0 (both signs)
    rows[2, length - 1] = -0.0  # max -0 (only -0)
    rows[3, 0] = 0.0  # max +0 (only +0)
    rows[4, 0] = inf
    rows[5].fill_(-inf)
    rows[8, 0], rows[8, length - 1] = 0.0, -0.0  # min -0 (both signs)
    rows[9, length - 1] = 0.0  # min +0 (only +0)
    rows[10, 0] = -0.0  # min -0 (only -0)
    rows[11, 1 % length] = -inf
    rows[12, 0] = nan
    rows[13].fill_(inf)
    for data in (rows, rows.t().contiguous().t()):  # row order, then column order
        for fn in (lambda x: x.amax(1), lambda x: x.amin(1), lambda x: x.max(),
                   lambda x: x.min()):
            check(fn, data)
            assert torch.equal(fn(data).isnan(), fn(data.to(torchneuron.device())).cpu().isnan())
        device_rows = data.to(torchneuron.device())
        amax, amin = device_rows.amax(1).cpu(), device_rows.amin(1).cpu()
        assert amax[1:4].tolist() == [0.0, 0.0, 0.0] and amin[8:11].tolist() == [0.0, 0.0, 0.0]
        assert amax[1:4].signbit().tolist() == [False, True, False]
        assert amin[8:11].signbit().tolist() == [True, False, True]


# argmax/argmin and max/min with a dim take two vectorized passes: the extreme (a plain vector
# max or min with a NaN flag), then the least index whose element equals it or is NaN
# (argExtremum in fusion/reduction_ops.cpp). The first extreme element must win among ties and
# among NaNs, a row of only -inf or +inf gives its first element, and max/min's value is that
# first element itself: a zero extreme keeps the sign of the first zero.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32])
@pytest.mark.parametrize("length", [1, 3, 37, 128, 1000])
def test_arg_extremum_rows_with_ties_nan_infinities_and_signed_zeros(dtype, length):
    rows = torch.randint(-2, 3, (16, length)).to(dtype)  # many ties
    if dtype.is_floating_point:
        inf, nan = float("inf"), float("nan")
        rows[0, length // 2] = nan
        rows[1, length - 1], rows[1, 0] = nan, nan
        rows[2].fill_(-inf)
        rows[3].fill_(inf)
        rows[4].fill_(0.0)
        rows[4, length - 1] = -0.0  # first zero +0, unless the row has one element
        rows[5].fill_(-0.0)
        rows[5, length - 1] = 0.0  # first zero -0
        rows[6].fill_(nan)
        rows[7, 0] = -inf
    cases = [rows, rows.t().contiguous().t()]  # row order, then a strided row
    dev = torchneuron.device()
    for data in cases:
        device_rows = data.to(dev)
        torchneuron.reset_metrics()
        for fn in (lambda x: x.argmax(1), lambda x: x.argmin(1)):
            assert torch.equal(fn(device_rows).cpu(), fn(data))
        for fn in (lambda x: x.max(1), lambda x: x.min(1)):
            (values, indices), (device_values, device_indices) = fn(data), fn(device_rows)
            assert torch.equal(device_indices.cpu(), indices)
            device_values = device_values.cpu()
            nan = values.isnan()
            assert torch.equal(device_values.isnan(), nan)
            assert torch.equal(device_values[~nan], values[~nan])
            if dtype.is_floating_point:
                assert torch.equal(device_values[~nan].signbit(), values[~nan].signbit())
        assert launches("compiled") >= 4 and launches("fallback") == 0


# A reduction over the outer dimension of a row-major tensor runs in column order: tiles of 64
# columns, a full tile through its own copy of the loops with constant bounds, the last tile's
# remainder through the general copy. Widths below, at, between and above whole tiles; the
# bias and weight gradients of layer norm's backward are such reductions too.
@pytest.mark.parametrize("width", [1, 63, 64, 130, 256])
def test_column_order_reductions_over_whole_and_partial_tiles(width):
    a = sample((37, width), torch.float32)
    for fn in (lambda x: x.sum(0), lambda x: x.mean(0), lambda x: x.amax(0), lambda x: x.amin(0),
               lambda x: x.prod(0), lambda x: x.sum(0, keepdim=True),
               lambda x: torch.linalg.vector_norm(x, dim=0)):
        check(fn, a)
    check(lambda x: x.sum(0), sample((37, width), torch.float64))
    check(lambda x: x.sum(0), sample((37, width), torch.int64))
    check(lambda x: x.any(0), sample((37, width), torch.bool))
    if width == 1:  # a layer norm over one element: its gradients are rounding noise
        return
    x = sample((37, width), torch.float32).requires_grad_()
    w = sample((width,), torch.float32, seed=1).requires_grad_()
    b = sample((width,), torch.float32, seed=2).requires_grad_()
    dev = torchneuron.device()
    dx, dw, db = (t.detach().to(dev).requires_grad_() for t in (x, w, b))
    torch.nn.functional.layer_norm(x, (width,), w, b).pow(2).sum().backward()
    torch.nn.functional.layer_norm(dx, (width,), dw, db).pow(2).sum().backward()
    for cpu, device in ((x, dx), (w, dw), (b, db)):
        torch.testing.assert_close(device.grad.cpu(), cpu.grad, rtol=1e-4, atol=1e-4)


# Softmax and log_softmax find a row's maximum ignoring NaNs and zero signs (a plain vector
# max), then make it NaN where the row had one (expSum in fusion/reduction_ops.cpp). Rows with a
# NaN, infinities, only -inf, and zeros of both signs as their maximum must still give the
# CPU's values, NaNs and zero signs, at row lengths below, at and above the vector width, and
# a row of large values must be shifted by its true maximum.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", [3, 37, 128])
def test_softmax_rows_with_nan_infinities_and_signed_zeros(dtype, length):
    inf, nan = float("inf"), float("nan")
    rows = sample((10, length), dtype) - 8  # every element negative: a zero is the maximum
    rows[0, length // 2] = nan
    rows[1, 0] = inf
    rows[2, length - 1] = -inf
    rows[3].fill_(-inf)
    rows[4, 0], rows[4, length - 1] = -0.0, 0.0
    rows[5, 0], rows[5, length - 1] = 0.0, -0.0
    rows[6, length - 1] = -0.0
    rows[7, 1 % length] = inf
    rows[7, 0] = nan
    rows[8, 0], rows[8, length - 1] = inf, -inf
    rows[9] += 200  # exp(x) overflows unless the maximum is subtracted first
    for fn in (lambda x: torch.softmax(x, 1), lambda x: torch.log_softmax(x, 1),
               lambda x: torch.logsumexp(x, 1)):
        check(fn, rows)
        expected, actual = fn(rows), fn(rows.to(torchneuron.device())).cpu()
        assert torch.equal(expected.isnan(), actual.isnan())
        zeros = expected == 0
        assert torch.equal(expected[zeros].signbit(), actual[zeros].signbit())


def test_softmax_backward_and_autograd_through_compiled_kernels():
    dev = torchneuron.device()
    x = sample((3, 8), torch.float32).requires_grad_()
    dx = x.detach().to(dev).requires_grad_()
    (torch.softmax(x, 1) * torch.tanh(x)).sum().backward()
    torchneuron.reset_metrics()
    (torch.softmax(dx, 1) * torch.tanh(dx)).sum().backward()
    assert launches("fallback") == 0, torchneuron.metrics()["ops"]["fallback"]
    torch.testing.assert_close(dx.grad.cpu(), x.grad)


def test_one_op_over_100_sizes_compiles_one_kernel():
    dev = torchneuron.device()
    torch.ones(3, device=dev).sub(torch.ones(3, device=dev), alpha=0.5)  # warm fill and sub
    torchneuron.reset_metrics()
    for n in range(1, 101):
        a = torch.ones(n, device=dev)
        a.sub(a, alpha=0.5)
    m = torchneuron.metrics()
    assert m["launches"]["compiled"] == 200
    assert m["compiles"] == 0, "fill_ and sub of 100 sizes must reuse the warm kernels"
    for shape in [(7, 3), (2, 2, 2), (1, 9)]:  # any contiguous shape is the same rank-1 kernel
        torch.ones(shape, device=dev).sub(torch.ones(shape, device=dev), alpha=0.5)
    assert torchneuron.metrics()["compiles"] == 0


def test_changing_a_scalar_compiles_nothing():
    dev = torchneuron.device()
    p = torch.randn(64, device=dev)
    g = torch.randn(64, device=dev)
    p.add_(g, alpha=-0.1)
    torchneuron.reset_metrics()
    for lr in (0.01, 0.02, 0.5, 3.0):
        p.add_(g, alpha=-lr)
        torch.clamp(p, -lr, lr)
    first = torchneuron.metrics()["compiles"]
    for lr in (0.7, 0.9):
        p.add_(g, alpha=-lr)
        torch.clamp(p, -lr, lr)
    m = torchneuron.metrics()
    assert m["compiles"] == first <= 1   # clamp's kernel, once; alpha never recompiles
    assert m["kernel_cache_hits"] >= 11


def test_compile_metrics_are_reported():
    dev = torchneuron.device()
    torchneuron.reset_metrics()
    torch.atan2(torch.ones(3, 2, device=dev, dtype=torch.float64).t(), torch.ones(2, 3, device=dev))
    m = torchneuron.metrics()
    assert m["compiles"] >= 1 and m["kernel_cache_misses"] >= 1
    assert m["compile_ms_total"] > 0 and 0 < m["compile_ms_median"] <= m["compile_ms_max"]
    assert m["kernels_loaded"] >= m["compiles"]


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward_and_backward_compiled(affine):
    dev = torchneuron.device()
    x = sample((4, 6, 32), torch.float32).requires_grad_()
    w = sample((32,), torch.float32, 1).requires_grad_() if affine else None
    b = sample((32,), torch.float32, 2).requires_grad_() if affine else None
    leaves = [t for t in (x, w, b) if t is not None]
    dev_leaves = [t.detach().to(dev).requires_grad_() for t in leaves]
    dx, dw, db = (dev_leaves + [None, None])[:3]
    y = torch.nn.functional.layer_norm(x, (32,), w, b, eps=1e-5)
    (y * y.detach().cos()).sum().backward()
    torchneuron.reset_metrics()
    dy = torch.nn.functional.layer_norm(dx, (32,), dw, db, eps=1e-5)
    (dy * dy.detach().cos()).sum().backward()
    ops = torchneuron.metrics()["ops"]
    assert not ops["fallback"], ops["fallback"]
    assert ops["compiled"]["aten::native_layer_norm"] == 1  # one row-wise kernel
    torch.testing.assert_close(dy.cpu(), y, rtol=1e-5, atol=1e-5)
    for cpu_leaf, dev_leaf in zip(leaves, dev_leaves):
        torch.testing.assert_close(dev_leaf.grad.cpu(), cpu_leaf.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [7, 100, 768, 20000])
def test_layer_norm_of_rows_far_from_zero_is_as_accurate_as_atens(width):
    """float32 layer norm sums in float32 (as ATen's does) and corrects mean and variance by the
    second pass's deviation sum: on rows with mean 1000 and deviation 1, where a plain float32
    mean loses digits, its error against float64 stays within twice ATen's own."""
    torch.manual_seed(width)
    x = torch.randn(16, width) + 1000
    w, b = torch.randn(width), torch.randn(width)
    exact = torch.nn.functional.layer_norm(x.double(), (width,), w.double(), b.double(), 1e-5)
    aten = torch.nn.functional.layer_norm(x, (width,), w, b, 1e-5)
    dev = torchneuron.device()
    got = torch.nn.functional.layer_norm(x.to(dev), (width,), w.to(dev), b.to(dev), 1e-5).cpu()
    aten_error = (aten.double() - exact).abs().max().item()
    device_error = (got.double() - exact).abs().max().item()
    assert device_error <= 2 * aten_error + 1e-6, (device_error, aten_error)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16] + INTS + [torch.bool])
def test_reductions_across_contiguous_columns(dtype):
    """Column order (sum over the rows of [N, C]): tiles of 64 columns, partial last tiles,
    several kept and reduced dimensions, strided and broadcast columns."""
    a = sample((70, 3, 130), dtype)
    fns = [lambda x: x.sum(0), lambda x: x.sum((0, 1)), lambda x: x.sum(1, keepdim=True),
           lambda x: x.any(0), lambda x: x.all(1)]
    if dtype != torch.bool:
        fns += [lambda x: x.amax(0), lambda x: x.amin((0, 1)), lambda x: x[:, :, 5:120].sum(0)]
    if dtype.is_floating_point:
        fns += [lambda x: x.mean(0), lambda x: x[:, :1].expand(70, 9, 130).sum(0)]
    if dtype in (torch.float32, torch.float64):  # the CPU has no bfloat16 prod
        fns.append(lambda x: (x[:40] / 4).prod(0))
    if dtype in (torch.float32, torch.float64):  # the CPU's bfloat16 norm is 3% off here
        fns.append(lambda x: torch.linalg.vector_norm(x, dim=(0, 1)))
    for fn in fns:
        check(fn, a, compiled=dtype not in NARROW or fn in fns[3:7])  # any, all, amax, amin


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, -2, 1, 0, 2.5, -3])
def test_pow_scalar_exponents_match_aten(exponent):
    """Exponents ATen computes as products, roots or reciprocals get exactly ATen's results."""
    a = sample((257,), torch.float32)
    a[:4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    exact = exponent not in (2.5, -3)
    check(lambda x: torch.pow(x, exponent), a.abs() if exponent in (0.5, -0.5, 2.5) else a,
          **({"rtol": 0, "atol": 0} if exact else {}))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_pow_with_a_small_exponent_is_compiled_and_wraps_as_atens(dtype):
    """`x ** 2`, `x ** 3`, `x.square()`, `x ** 1` and `x ** 0` on integers are compiled products
    that wrap on overflow as ATen's powi does (the dtype's extremes are among the values); other
    integer exponents stay ATen's: a negative one raises ATen's error."""
    from conftest import launched_since, launches_now
    dev = torchneuron.device()
    info = torch.iinfo(dtype)
    x = sample((40,), dtype)
    x[:2] = torch.tensor([info.max, info.min], dtype=dtype)
    for op in (lambda t: t ** 2, lambda t: t ** 3, lambda t: t.square(), lambda t: t ** 1,
               lambda t: t ** 0, lambda t: t[::2].pow_(2)):
        before = launches_now()
        got = op(x.to(dev))
        launched = launched_since(before)
        assert launched["fallback"] == {} and launched["compiled"], launched
        expected = op(x.clone())
        assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected)
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        x.to(dev) ** -2


def test_pow_with_a_number_exponent_wants_the_result_dtype_in_its_output():
    """ATen builds pow(tensor, number) as a unary op: its output must have the result's dtype
    ("Found dtype ... but expected ..."), where pow(tensor, tensor) casts."""
    dev = torchneuron.device()
    for d in ("cpu", dev):
        ints, floats = torch.arange(-4, 4, device=d), torch.randn(4).to(d)
        for call, message in (
                (lambda: torch.pow(ints, 2, out=torch.empty(8, dtype=torch.int32, device=d)),
                 "Found dtype Int but expected Long"),
                (lambda: torch.square(ints, out=torch.empty(8, device=d)),
                 "Found dtype Float but expected Long"),
                (lambda: torch.pow(floats, 2, out=torch.empty(4, dtype=torch.float64, device=d)),
                 "Found dtype Double but expected Float"),
                (lambda: (ints > 0).pow_(2), "Found dtype Bool but expected Long"),
                (lambda: ints.clone().pow_(2.0), "Found dtype Long but expected Float")):
            with pytest.raises(RuntimeError, match=message):
                call()
        casted = torch.pow(floats, floats.abs(), out=torch.empty(4, dtype=torch.float64, device=d))
        assert casted.dtype == torch.float64
