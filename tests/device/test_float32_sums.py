"""float32 sums and means in blocks (src/fusion/reduction_kernel_builder.cpp, sumsInBlocks): a
row is summed in float32 over blocks of 2048 elements, each block's sum added to a float64 total.
Each case checks the device against the exact (float64) sum of the same float32 values, within
an error that ATen's float32 cascade sum meets: a block counted twice or dropped, an element lost
at a block's or a vector's edge, or a sum of the whole row in float32 lanes fails it. Special
values keep ATen's results wherever they fall in the row, and integer and float64 sums are exact
as before. Column order (x.sum(0)) sums blocks of 64 rows per column; layer norm's backward
sums the same ways; its forward, which sums in float32 as ATen's does, gives NaN statistics
where the squares overflow. Rows strided in memory, which would not vectorize, sum in float64."""

import pytest
import torch

from conftest import launched_since, launches_now

BLOCK = 2048
LENGTHS = [1, 15, 16, 63, 64, 65, 1000, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 17, 3 * BLOCK]


def values(shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def sum_error_bound(x, dims):
    """What a float32 sum may be off by: a few float32 roundings of the sum of magnitudes (ATen's
    cascade sum stays well inside it; summing 262144 elements per float32 lane does not)."""
    return 1e-6 * x.double().abs().sum(dims) + 1e-30


def on_device(dev, program, x):
    before = launches_now()
    got = program(x.to(dev)).cpu()
    launched = launched_since(before)
    assert launched["fallback"] == {}
    return got


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_rows_of_every_length_around_blocks_and_vectors(dev, length, op):
    x = values((3, length), seed=length)
    got = on_device(dev, lambda t: getattr(t, op)(-1), x)
    exact = getattr(x.double(), op)(-1)
    bound = sum_error_bound(x, (-1,)) / (length if op == "mean" else 1)
    assert got.dtype == torch.float32
    assert ((got.double() - exact).abs() <= bound).all(), (got, exact)


@pytest.mark.parametrize("length", [BLOCK + 1, (1 << 18) + 5, 1 << 20])
def test_whole_tensor_sums_split_or_not(dev, length):
    x = values(length, seed=7)
    got = on_device(dev, lambda t: t.sum(), x)
    assert abs(got.double().item() - x.double().sum().item()) <= sum_error_bound(x, (0,)).item()


def test_reduced_dimensions_that_are_not_innermost(dev):
    x = values((64, 128, 130), seed=3)
    t = x.permute(2, 0, 1)
    for dims in [(1, 2), (0, 2), (0, 1)]:
        got = on_device(dev, lambda d: d.permute(2, 0, 1).sum(dims), x)
        exact = t.double().sum(dims)
        assert ((got.double() - exact).abs() <= sum_error_bound(t, dims)).all(), dims


def test_sixteen_million_equal_values_keep_float32_accuracy(dev):
    # 0.1 sixteen million times: one float32 accumulator stalls at 2^21 (off by 25%), 64 lanes of
    # 262144 additions each are off by about 1e-4; blocks of 2048 are off by 3e-7 (ATen 8.9e-7).
    x = torch.full((1 << 24,), 0.1)
    exact = x.double().sum().item()
    got = on_device(dev, lambda t: t.sum(), x).item()
    assert abs(got - exact) <= 1e-6 * exact
    got = on_device(dev, lambda t: t.view(16, -1).mean(1), x)
    assert ((got.double() - 0.1).abs() <= 1e-6).all()


@pytest.mark.parametrize("place", [0, 17, BLOCK - 1, BLOCK, 2 * BLOCK + 16])
def test_special_values_anywhere_in_the_row(dev, place):
    length = 2 * BLOCK + 17
    for special, others, want in [(float("nan"), None, "nan"), (float("inf"), None, "inf"),
                                  (float("-inf"), None, "-inf"),
                                  (float("inf"), float("-inf"), "nan")]:
        x = values((2, length), seed=place)
        x[1, place] = special
        if others is not None:
            x[1, (place + BLOCK + 1) % length] = others
        got = on_device(dev, lambda t: t.sum(1), x)
        assert got[1].item() != got[1].item() if want == "nan" else got[1].item() == float(want)
        assert torch.isfinite(got[0])
        assert got[0].item() == pytest.approx(x[0].double().sum().item(), abs=1e-3)


def test_float64_and_integer_sums_are_not_blocked(dev):
    x = values(3 * BLOCK + 5, seed=11).double() * 1e3
    got = on_device(dev, lambda t: t.sum(), x)
    assert abs(got.item() - x.sum().item()) <= 1e-9 * x.abs().sum().item()
    ints = torch.randint(-2**30, 2**30, (3 * BLOCK + 5,), dtype=torch.int32,
                         generator=torch.Generator().manual_seed(0))
    got = on_device(dev, lambda t: t.sum(), ints)
    assert got.dtype == torch.int64 and got.item() == ints.long().sum().item()


def test_a_sum_of_an_elementwise_chain_in_adaptive_mode(dev):
    # In adaptive mode the product fuses into the sum (a prologue); eagerly it is its own kernel.
    x, y = values((4, 3 * BLOCK + 9), seed=1), values((4, 3 * BLOCK + 9), seed=2)
    for _ in range(3):
        got = (x.to(dev) * y.to(dev)).sum(-1).cpu()
    exact = (x.double() * y.double()).sum(-1)
    bound = 1e-6 * (x.double() * y.double()).abs().sum(-1) + 1e-6
    assert ((got.double() - exact).abs() <= bound).all()


@pytest.mark.parametrize("rows", [1, 63, 64, 65, 129, 2049])
@pytest.mark.parametrize("columns", [1, 255, 256, 257, 768])
def test_column_sums_of_every_size_around_blocks_and_tiles(dev, rows, columns):
    # Over the rows of a row-major tensor (column order): tiles of 256 columns, blocks of 64 rows.
    x = values((rows, columns), seed=rows * 1000 + columns)
    for op in ("sum", "mean"):
        got = on_device(dev, lambda t: getattr(t, op)(0), x)
        exact = getattr(x.double(), op)(0)
        bound = sum_error_bound(x, (0,)) / (rows if op == "mean" else 1)
        assert ((got.double() - exact).abs() <= bound).all(), (op, got, exact)


def test_a_long_column_of_equal_values_keeps_float32_accuracy(dev):
    # 65536 rows of 0.1: one float32 accumulator per column is off by 6.2e-4 of the sum; blocks of
    # 64 rows added in float64 by 6e-7 (ATen 1.5e-7).
    x = torch.full((65536, 300), 0.1)
    got = on_device(dev, lambda t: t.sum(0), x).double()
    exact = x.double().sum(0)
    assert ((got - exact).abs() <= 1e-6 * exact).all()


def test_column_sums_with_special_values(dev):
    x = values((300, 260), seed=5)
    x[70, 3], x[10, 257], x[200, 257] = float("nan"), float("inf"), float("-inf")
    x[5, 100], x[299, 259] = float("inf"), float("-inf")
    got = on_device(dev, lambda t: t.sum(0), x)
    want = x.sum(0)
    assert torch.equal(got.isnan(), want.isnan()) and got[3].isnan() and got[257].isnan()
    assert got[100].item() == float("inf") and got[259].item() == float("-inf")
    finite = want.isfinite()
    assert ((got[finite].double() - x.double().sum(0)[finite]).abs() <= 1e-4).all()


def test_column_sums_over_two_reduced_dimensions_and_of_a_fused_product(dev):
    x, y = values((7, 100, 300), seed=8), values((7, 100, 300), seed=9)
    got = on_device(dev, lambda t: t.sum((0, 1)), x)
    assert ((got.double() - x.double().sum((0, 1))).abs() <= sum_error_bound(x, (0, 1))).all()
    # In adaptive mode the product fuses into the column sum (a prologue); eagerly it is its own.
    for _ in range(3):
        got = (x.to(dev) * y.to(dev)).sum((0, 1)).cpu()
    product = x.double() * y.double()
    assert ((got.double() - product.sum((0, 1))).abs() <= 1e-6 * product.abs().sum((0, 1)) +
            1e-6).all()


@pytest.mark.parametrize("rows, width", [(63, 127), (65, 256), (129, 300), (64, 2047),
                                         (3, 2049), (2, 4100), (2048, 768)])
def test_layer_norm_backward_sums_in_float32_blocks(dev, rows, width):
    # dx: each row's sums of g and g * xhat in float32 blocks, its elements in float32; dw, db: the
    # column sums of dy * xhat and dy, in blocks of 64 rows. ATen's float kernel is off by up to
    # 3e-6 of the largest gradient here.
    g, x = values((rows, width), seed=rows), values((rows, width), seed=width) + 3
    w, b = values(width, seed=1), values(width, seed=2)
    _, mean, rstd = torch.native_layer_norm(x, (width,), w, b, 1e-5)
    args = [g, x, (width,), mean, rstd, w, b, [True, True, True]]
    exact = torch.ops.aten.native_layer_norm_backward(
        *[a.double() if torch.is_tensor(a) else a for a in args])
    before = launches_now()
    got = torch.ops.aten.native_layer_norm_backward(
        *[a.to(dev) if torch.is_tensor(a) else a for a in args])
    launched = launched_since(before)
    assert launched["compiled"].get("aten::native_layer_norm_backward") == 2, launched
    for name, e, d in zip(["dx", "dw", "db"], exact, got):
        error = (d.cpu().double() - e).abs().max().item()
        assert error <= 2e-5 * e.abs().max().item(), (name, error)


@pytest.mark.parametrize("program, shape", [
    (lambda t: t.sum(0), (16384, 3)),  # fewer than 8 columns: row order over a strided dimension
    (lambda t: t.mean(0), (65536, 3)),
    (lambda t: t[:, ::2].sum(-1), (64, 16384)),
    (lambda t: t[::3].sum(), (1 << 20,)),
    (lambda t: t.sum(1), (16, 20000, 4)),
])
def test_strided_rows_sum_as_accurately_as_aten(dev, program, shape):
    # A strided row does not vectorize, so it is not summed in float32 blocks (one element after
    # another over 2048 of 0.1 was off by 1.6e-5 of the sum; ATen 1.5e-7).
    x = torch.full(shape, 0.1)
    got = on_device(dev, program, x).double()
    exact = program(x.double())
    assert ((got - exact).abs() <= 1e-6 * exact.abs()).all()


def test_a_block_whose_float32_sum_overflows_is_summed_again_in_float64(dev):
    # Finite elements whose float32 block sum overflows: the f64 sum is exact (0), as before the
    # blocks; ATen's cascade happens to give 0 for these too.
    x = torch.tensor([[2e35] * BLOCK + [-2e35] * BLOCK, [3e38] * 32 + [-3e38] * 32 + [1.0] * 4032])
    assert on_device(dev, lambda t: t.sum(-1), x).tolist() == [0.0, 4032.0]
    assert on_device(dev, lambda t: t.mean(-1), x).tolist() == [0.0, 4032.0 / 4096]
    assert on_device(dev, lambda t: t.sum(-1, dtype=torch.float32), x.double()).tolist() == \
        [0.0, 4032.0]
    # An infinite or NaN element gives what it gives in f64.
    x[0, 5], x[1, 3000] = float("inf"), float("nan")
    got = on_device(dev, lambda t: t.sum(-1), x)
    assert got[0].item() == float("inf") and got[1].isnan()


def test_a_column_whose_float32_block_sum_overflows_is_summed_again_in_float64(dev):
    # Twenty 2e37 then twenty -2e37 down a column: a 64-row float32 block sum overflows; the
    # column is summed again in f64 (0, as ATen's cascade gives). Two blocks overflowing to +inf
    # and -inf gave NaN. Layer norm's parameter gradients share the column blocks.
    x = torch.ones(40, 512)
    x[:20, 7], x[20:, 7] = 2e37, -2e37
    x[:, 300] = torch.tensor([3e38] * 20 + [0.0] * 20)  # overflows in f64's float32 result too
    y = torch.cat([torch.full((64, 260), 3e38), torch.full((64, 260), -3e38)])
    got = on_device(dev, lambda t: t.sum(0), x)
    want = x.double().sum(0).float()
    assert got[7].item() == 0.0 and got[300].item() == float("inf")
    assert torch.equal(got, want)
    assert on_device(dev, lambda t: t.mean(0), x)[7].item() == 0.0
    assert (on_device(dev, lambda t: t.sum(0), y) == 0).all()
    y[5, 3] = float("nan")
    got = on_device(dev, lambda t: t.sum(0), y)
    assert got[3].isnan() and (got[4:] == 0).all()


@pytest.mark.parametrize("scale, rows, width", [(1e20, 64, 128), (1e19, 8, 128), (1e18, 3, 5000)])
def test_a_layer_norm_row_whose_float32_squares_overflow_is_nan_not_a_row_of_zeros(
        dev, scale, rows, width):
    # Layer norm's forward sums in float32 (as ATen's float moments do): squares over FLT_MAX
    # made rstd 0 and the row zeros, then the bias, a finite result the float64 answer is far
    # from. They give NaN statistics, as ATen's do for most rows at 1e20 (its rstd is 0 in the
    # others, and at 1e18-1e19).
    x, w, b = values((rows, width)) * scale, values(width, seed=1), values(width, seed=2)
    y, mean, rstd = (t.cpu() for t in torch.native_layer_norm(x.to(dev), (width,), w.to(dev),
                                                              b.to(dev), 1e-5))
    assert rstd.isnan().all() and y.isnan().all()
    assert torch.allclose(mean.double(), x.double().mean(-1, keepdim=True), atol=1e-5 * scale)
    # Rows of ordinary values beside them keep their results.
    x[0] = values(width, seed=3)
    y = torch.nn.functional.layer_norm(x.to(dev), (width,), w.to(dev), b.to(dev)).cpu()
    assert torch.allclose(y[0], torch.nn.functional.layer_norm(x[0], (width,), w, b), atol=1e-5)
    assert y[1:].isnan().all()
